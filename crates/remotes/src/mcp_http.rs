//! The HTTP client of an MCP server over HTTP (streamable HTTP through rmcp, or HTTP+SSE in
//! `sse`): reqwest with the remote's TLS settings, plus its `[remotes.auth]` bearer token on
//! every request. A `401` is answered once with a fresh token (rmcp reports it as
//! `AuthRequired`, or, when the server sends no `WWW-Authenticate`, as a plain status error on a
//! GET and as an "HTTP 401 ..." unexpected response on a POST: `status_of` reads all three);
//! after that, a 401 or 403 is a `Refusal`, carried to the call as the error's cause so it
//! reads as the remote's refusal rather than a broken connection.

use std::collections::HashMap;
use std::sync::Arc;

use futures::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::{Error as SseError, Sse};

use super::credentials::{CredentialError, Credentials, Secret};
use super::http::Failures;

type HttpError = StreamableHttpError<reqwest::Error>;

/// The remote refuses toolgate (after the one retry), or no credentials could be had.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refusal {
    #[error("the server refused toolgate's credentials (HTTP 401)")]
    Unauthorized,
    #[error("the server refused access (HTTP 403)")]
    Forbidden,
    #[error(transparent)]
    Credentials(CredentialError),
}

impl Refusal {
    /// The metric's reason.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Refusal::Unauthorized => "unauthorized",
            Refusal::Forbidden => "forbidden",
            Refusal::Credentials(e) => e.reason(),
        }
    }

    /// For the model.
    pub(crate) fn short(&self) -> &'static str {
        match self {
            Refusal::Unauthorized => "it refused toolgate's credentials (HTTP 401)",
            Refusal::Forbidden => "it refused access (HTTP 403)",
            Refusal::Credentials(e) => e.short(),
        }
    }

    /// A 401 or 403 is the remote's answer (TOOL_ERROR), and so is the authorization server's
    /// refusal of the client; credentials that could not be had are not (TRANSPORT).
    pub(crate) fn is_answer(&self) -> bool {
        match self {
            Refusal::Credentials(e) => e.is_answer(),
            _ => true,
        }
    }

    fn into_error(self) -> HttpError {
        StreamableHttpError::Io(std::io::Error::other(self))
    }
}

/// reqwest plus the remote's credentials, cloned into each request rmcp makes.
#[derive(Clone)]
pub(crate) struct AuthedHttp {
    pub(super) client: reqwest::Client,
    pub(super) credentials: Option<Arc<Credentials>>,
    pub(super) failures: Failures,
}

impl AuthedHttp {
    /// Runs `call` with the current token; on a 401, once more with a fresh one.
    pub(super) async fn with_token<T, F, Fut>(&self, call: F) -> Result<T, HttpError>
    where
        F: Fn(Option<String>) -> Fut,
        Fut: Future<Output = Result<T, HttpError>>,
    {
        let Some(credentials) = &self.credentials else {
            return self.observe(call(None).await);
        };
        let token = credentials
            .token()
            .await
            .map_err(|e| self.refuse(Refusal::Credentials(e)))?;
        let first = call(token.as_ref().map(|t| t.expose().to_owned())).await;
        match &first {
            Err(StreamableHttpError::AuthRequired(_)) => {}
            Err(e) if status_of(e) == Some(reqwest::StatusCode::UNAUTHORIZED) => {}
            _ => return self.observe(first),
        }
        match credentials.rejected(token.as_ref()).await {
            Ok(Some(fresh)) => self.observe(call(Some(expose(&fresh))).await),
            Ok(None) => self.observe(first),
            Err(e) => Err(self.refuse(Refusal::Credentials(e))),
        }
    }

    fn refuse(&self, refusal: Refusal) -> HttpError {
        self.failures.record(refusal.reason());
        refusal.into_error()
    }

    /// A final answer: a 401 or 403 becomes a `Refusal`; a TLS failure is counted.
    fn observe<T>(&self, result: Result<T, HttpError>) -> Result<T, HttpError> {
        let error = match result {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        if let StreamableHttpError::Client(e) = &error
            && let Some(tls) = super::tls::failure_in(e)
        {
            self.failures.record(tls.reason);
        }
        Err(match status_of(&error) {
            Some(reqwest::StatusCode::UNAUTHORIZED) => self.refuse(Refusal::Unauthorized),
            Some(reqwest::StatusCode::FORBIDDEN) => self.refuse(Refusal::Forbidden),
            _ => error,
        })
    }
}

/// The HTTP status of a 401 or 403 in each shape rmcp reports it: with a challenge, as a
/// client error (GET, DELETE), or as the text of an unexpected response (POST).
fn status_of(error: &HttpError) -> Option<reqwest::StatusCode> {
    match error {
        StreamableHttpError::AuthRequired(_) => Some(reqwest::StatusCode::UNAUTHORIZED),
        StreamableHttpError::InsufficientScope(_) => Some(reqwest::StatusCode::FORBIDDEN),
        StreamableHttpError::Client(e) => e.status(),
        // rmcp writes `HTTP {status}: {body}`, the status as "401 Unauthorized".
        StreamableHttpError::UnexpectedServerResponse(text) => {
            let code = text.strip_prefix("HTTP ")?.get(..3)?;
            match code {
                "401" => Some(reqwest::StatusCode::UNAUTHORIZED),
                "403" => Some(reqwest::StatusCode::FORBIDDEN),
                _ => None,
            }
        }
        _ => None,
    }
}

fn expose(secret: &Secret) -> String {
    secret.expose().to_owned()
}

impl StreamableHttpClient for AuthedHttp {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.with_token(|token| {
            self.client.post_message_with_response_limits(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token.or_else(|| auth_header.clone()),
                custom_headers.clone(),
                limits,
            )
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), HttpError> {
        self.with_token(|token| {
            self.client.delete_session(
                uri.clone(),
                session_id.clone(),
                token.or_else(|| auth_header.clone()),
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, HttpError> {
        self.with_token(|token| {
            self.client.get_stream(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                token.or_else(|| auth_header.clone()),
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, HttpError> {
        self.with_token(|token| {
            self.client.get_stream_with_max_sse_event_size(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                token.or_else(|| auth_header.clone()),
                custom_headers.clone(),
                max_sse_event_size,
            )
        })
        .await
    }
}

/// The refusal or TLS failure among an error's causes, as the model and the log read it:
/// (is it the remote's answer, the short text, the detail).
pub(crate) fn cause_of(
    error: &(dyn std::error::Error + 'static),
) -> Option<(bool, &'static str, String)> {
    if let Some(refusal) = super::tls::cause::<Refusal>(error) {
        return Some((refusal.is_answer(), refusal.short(), refusal.to_string()));
    }
    super::tls::failure_in(error).map(|tls| (false, tls.short, tls.detail))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_read_in_every_shape_rmcp_reports_it() {
        let unexpected =
            |text: &'static str| StreamableHttpError::UnexpectedServerResponse(text.into());
        let cases = [
            (unexpected("HTTP 401 Unauthorized: <html>"), Some(401)),
            (unexpected("HTTP 403 Forbidden: "), Some(403)),
            (unexpected("HTTP 500 Internal Server Error: x"), None),
            (unexpected("invalid www-authenticate header value"), None),
        ];
        for (error, expected) in cases {
            assert_eq!(status_of(&error).map(|s| s.as_u16()), expected, "{error}");
        }
    }
}
