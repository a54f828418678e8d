//! HTTP tools: a tool defined by a URL. toolgate POSTs `{call_id, session_id, name, input,
//! metadata}` as JSON and reads the JSON reply as the tool's return value (result selection
//! applies); a non-2xx reply is a TOOL_ERROR with the status and a bounded body (a 4xx other
//! than 408 and 429 is INVALID_ARGUMENTS: the caller's input was wrong); a connection failure or
//! timeout is TRANSPORT. The call deadline bounds the request. Over `https://` the remote's TLS
//! settings apply; with `[remotes.auth]` each request carries a bearer token, and a `401` is
//! answered once with a fresh token before it is the tool's failure (TOOL_ERROR, as is a 403
//! to a remote toolgate shows credentials of its own: auth, a client certificate, an
//! `Authorization` header).
//! TLS, credential and authorization failures are counted by remote and reason.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::credentials::{CredentialError, Credentials, Secret};
use super::tool::{Invoke, RemoteDefinition, RemoteTool, remote_timeout};
use super::{HttpToolDefinition, RemoteError, RemoteSpec};
use toolgate_core::metrics::Metrics;
use toolgate_core::tools::{Annotations, BoxFuture, ToolContext, ToolError, ToolOutput};

/// Characters of a failed reply's body kept in the error.
const BODY_PREVIEW: usize = 500;

/// Where an HTTP tool is POSTed.
struct Endpoint {
    /// The remote's name, for errors.
    remote: String,
    url: String,
    headers: BTreeMap<String, String>,
    client: reqwest::Client,
    credentials: Option<Arc<Credentials>>,
    /// toolgate shows the remote credentials of its own (`[remotes.auth]`, a client
    /// certificate, an `Authorization` header): a 401 or 403 refuses them.
    presents_credentials: bool,
    failures: Failures,
}

/// Counts a remote's TLS, credential and authorization failures by reason
/// (`toolgate_remote_failures_total`).
#[derive(Clone)]
pub(super) struct Failures {
    remote: String,
    metrics: Arc<Metrics>,
}

impl Failures {
    pub(super) fn new(remote: &str, metrics: Arc<Metrics>) -> Self {
        Failures {
            remote: remote.to_owned(),
            metrics,
        }
    }

    pub(super) fn record(&self, reason: &'static str) {
        self.metrics.remote_failure(&self.remote, reason);
    }
}

/// The HTTP client of a remote reached over HTTP: its TLS settings, its pinned addresses, and
/// `redirects`.
pub(super) fn client(
    spec: &RemoteSpec,
    redirects: reqwest::redirect::Policy,
) -> Result<reqwest::Client, RemoteError> {
    let builder = super::tls::client_builder(spec.tls.as_ref(), spec.timeout)
        .map_err(|e| spec.invalid(e.to_string()))?;
    pinned(builder, spec)
        .redirect(redirects)
        .build()
        .map_err(|e| spec.invalid(format!("http client: {e}")))
}

/// The remote's `[remotes.auth]` credentials, if it has any. Their OAuth requests go out on a
/// client of their own: the system's roots and the remote's CA file, no client certificate,
/// the remote's pinned addresses, no redirect followed.
pub(super) fn credentials(spec: &RemoteSpec) -> Result<Option<Arc<Credentials>>, RemoteError> {
    let (Some(auth), Some(url)) = (&spec.auth, &spec.url) else {
        return Ok(None);
    };
    let builder = super::tls::authorization_client_builder(spec.tls.as_ref(), spec.timeout)
        .map_err(|e| spec.invalid(e.to_string()))?;
    let http = pinned(builder, spec)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| spec.invalid(format!("http client: {e}")))?;
    Credentials::new(auth, url, http, spec.timeout)
        .map(|c| Some(Arc::new(c)))
        .map_err(|e| spec.invalid(e.to_string()))
}

/// Builds the remote's one tool (nothing to discover: the definition is in the config).
pub fn discover(
    spec: &RemoteSpec,
    metrics: Arc<Metrics>,
) -> Result<Vec<Arc<RemoteTool>>, RemoteError> {
    let invalid = |reason: String| spec.invalid(reason);
    let url = spec
        .url
        .clone()
        .ok_or_else(|| invalid("an http remote needs a url".to_owned()))?;
    let configured = spec
        .definition
        .clone()
        .ok_or_else(|| invalid("an http remote needs a [definition] of its tool".to_owned()))?;
    // A redirect is the tool's failure unless the remote says to follow (same origin only).
    let redirects = if spec.follow_redirects {
        same_origin_redirects()
    } else {
        reqwest::redirect::Policy::none()
    };
    let client = client(spec, redirects)?;
    let endpoint = Arc::new(Endpoint {
        remote: spec.name.clone(),
        url,
        headers: spec.headers.clone(),
        client,
        credentials: credentials(spec)?,
        presents_credentials: spec.auth.is_some()
            || spec.tls.as_ref().is_some_and(|t| t.cert_file.is_some())
            || spec
                .headers
                .keys()
                .any(|h| h.eq_ignore_ascii_case("authorization")),
        failures: Failures::new(&spec.name, metrics),
    });
    Ok(vec![Arc::new(RemoteTool::new(
        definition(&spec.prefix, configured),
        endpoint,
    ))])
}

/// The configured definition, as the model sees it.
fn definition(prefix: &str, d: HttpToolDefinition) -> RemoteDefinition {
    RemoteDefinition {
        name: format!("{prefix}{}", d.name),
        remote_name: d.name,
        description: d.description,
        input_schema: d.input_schema,
        output_schema: None,
        annotations: Annotations {
            read_only: d.read_only,
            destructive: d.destructive,
            idempotent: d.idempotent,
            open_world: d.open_world,
        },
        concurrency_safe: d.concurrency_safe,
        resource_key: d.resource_key,
    }
}

/// `builder` connecting each host name the registration check resolved to the addresses it
/// checked, not to whatever the name resolves to later (DNS rebinding).
pub(super) fn pinned(
    mut builder: reqwest::ClientBuilder,
    spec: &RemoteSpec,
) -> reqwest::ClientBuilder {
    for (host, addresses) in &spec.resolved {
        builder = builder.resolve_to_addrs(host, addresses);
    }
    builder
}

/// Same-origin 307 and 308 redirects only (rmcp's default for MCP over HTTP, which a client of
/// our own must restate): only they keep the POST and its body, and a redirect to another origin
/// would hand the session id and the configured headers to another host.
pub(super) fn same_origin_redirects() -> reqwest::redirect::Policy {
    const MAX_REDIRECTS: usize = 10;
    reqwest::redirect::Policy::custom(|attempt| {
        let keeps_body = matches!(
            attempt.status(),
            reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
        );
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if !keeps_body || !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    })
}

impl Endpoint {
    async fn post(
        &self,
        tool: &RemoteDefinition,
        input: Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let m = &ctx.metadata;
        let body = json!({
            "call_id": ctx.call_id,
            "session_id": ctx.session_id,
            "name": tool.remote_name,
            "input": input,
            "metadata": {
                "tool_call": m.tool_call(),
                "tool_name": m.tool_name,
                "tool_arguments": &*m.tool_arguments,
                "tool_call_id": m.tool_call_id,
                "tool_call_index": m.tool_call_index,
            },
        });
        // Serialized once: a retry after a 401 sends the same bytes (a cheap clone).
        let body = bytes::Bytes::from(
            serde_json::to_vec(&body).map_err(|e| ToolError::failed(e.to_string()))?,
        );
        let token = match &self.credentials {
            Some(credentials) => credentials
                .token()
                .await
                .map_err(|e| self.credential_failure(&e))?,
            None => None,
        };
        let mut sent = token;
        let mut response = self.send(&body, sent.as_ref(), ctx).await?;
        if response.status() == reqwest::StatusCode::UNAUTHORIZED
            && let Some(credentials) = &self.credentials
        {
            let fresh = credentials
                .rejected(sent.as_ref())
                .await
                .map_err(|e| self.credential_failure(&e))?;
            if let Some(fresh) = fresh {
                response = self.send(&body, Some(&fresh), ctx).await?;
                sent = Some(fresh);
            }
        }
        let status = response.status();
        // With credentials of toolgate's own, a 401 or 403 refuses them; without, it is the
        // tool's answer like any other 4xx, and its body says why.
        if self.presents_credentials
            && let Some(error) = self.refused(status)
        {
            return Err(error);
        }
        let text = response
            .text()
            .await
            .map_err(|e| self.unreachable(&e, "reading the reply"))?;
        if !status.is_success() {
            // A server that echoes the request's headers does not hand the token to the model,
            // nor a part of it the preview's cut would leave.
            let text = match sent.as_ref().filter(|t| !t.expose().is_empty()) {
                Some(token) => text.replace(token.expose(), "[redacted]"),
                None => text,
            };
            let preview = toolgate_core::json::truncate_chars(&text, BODY_PREVIEW);
            return Err(status_error(
                status,
                format!("HTTP {}: {preview}", status.as_u16()),
            ));
        }
        Ok(match serde_json::from_str::<Value>(&text) {
            Ok(value) => ToolOutput::Json(value),
            Err(_) => ToolOutput::Text(text),
        })
    }
}

impl Endpoint {
    async fn send(
        &self,
        body: &bytes::Bytes,
        token: Option<&Secret>,
        ctx: &ToolContext,
    ) -> Result<reqwest::Response, ToolError> {
        let mut request = self
            .client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.clone());
        for (k, v) in &self.headers {
            request = request.header(k, v);
        }
        if let Some(token) = token {
            request = request.bearer_auth(token.expose());
        }
        if let Some(timeout) = remote_timeout(ctx) {
            request = request.timeout(timeout);
        }
        if let Some(traceparent) = ctx.traceparent() {
            request = request.header("traceparent", traceparent);
        }
        if let Some(tracestate) = ctx.tracestate() {
            request = request.header("tracestate", tracestate);
        }
        request
            .send()
            .await
            .map_err(|e| self.unreachable(&e, "sending the request"))
    }

    /// A 401 (after the one retry with a fresh token) or a 403: the remote refuses toolgate,
    /// not the caller's input. TOOL_ERROR, never retried.
    fn refused(&self, status: reqwest::StatusCode) -> Option<ToolError> {
        let (reason, what) = match status {
            reqwest::StatusCode::UNAUTHORIZED => (
                "unauthorized",
                "it refused toolgate's credentials (HTTP 401)",
            ),
            reqwest::StatusCode::FORBIDDEN => ("forbidden", "it refused access (HTTP 403)"),
            _ => return None,
        };
        self.failures.record(reason);
        tracing::warn!(target: "toolgate::tools::remote::http", remote = %self.remote, url = %self.url, status = status.as_u16(), "http tool refused toolgate's credentials");
        Some(ToolError::failed(format!(
            "http tool '{}': {what}",
            self.remote
        )))
    }

    fn credential_failure(&self, error: &CredentialError) -> ToolError {
        self.failures.record(error.reason());
        tracing::warn!(target: "toolgate::tools::remote::http", remote = %self.remote, %error, "http tool: no credentials");
        let text = format!("http tool '{}': {}", self.remote, error.short());
        if error.is_answer() {
            ToolError::failed(text)
        } else {
            ToolError::transport(text)
        }
    }
}

/// What a non-2xx reply says. 5xx, 408 and 429 are the tool's (or its server's) trouble and may
/// pass: the reflector retries them for idempotent tools. Any other 4xx says the request was
/// wrong, the caller's input rather than the tool: `INVALID_ARGUMENTS`, which is never retried
/// and does not count against the tool's health, so one caller's bad input cannot open the
/// breaker every other caller shares.
fn status_error(status: reqwest::StatusCode, message: String) -> ToolError {
    let code = status.as_u16();
    if status.is_server_error() || code == 408 || code == 429 {
        ToolError::failed(message).retryable()
    } else if status.is_client_error() {
        ToolError::invalid_input(message)
    } else {
        ToolError::failed(message)
    }
}

impl Endpoint {
    /// A transport failure: the operator's log gets the URL and the error, the model a fixed
    /// text naming the remote and what went wrong, never an internal address.
    fn unreachable(&self, error: &reqwest::Error, doing: &str) -> ToolError {
        if let Some(tls) = super::tls::failure_in(error) {
            self.failures.record(tls.reason);
            tracing::warn!(target: "toolgate::tools::remote::http", remote = %self.remote, url = %self.url, error = %tls.detail, doing, "http tool: TLS failed");
            return ToolError::transport(format!("http tool '{}': {}", self.remote, tls.short));
        }
        tracing::warn!(target: "toolgate::tools::remote::http", remote = %self.remote, url = %self.url, %error, doing, "http tool unreachable");
        let what = if error.is_timeout() {
            "it did not answer in time"
        } else if error.is_connect() {
            "the connection failed"
        } else if error.is_redirect() {
            "it redirected the request"
        } else {
            "the request failed"
        };
        ToolError::transport(format!("http tool '{}': {doing}: {what}", self.remote))
    }
}

impl Invoke for Endpoint {
    fn invoke<'a>(
        &'a self,
        tool: &'a RemoteDefinition,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(self.post(tool, input, ctx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_core::tools::{Tool, ToolErrorKind};

    #[tokio::test]
    async fn a_registered_name_is_connected_at_the_address_it_was_checked_at() {
        let app = axum::Router::new().route(
            "/tool",
            axum::routing::post(|| async { "{\"reached\": true}" }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        // `.invalid` never resolves (RFC 6761): only the pinned address can be reached.
        let mut spec: RemoteSpec = serde_json::from_value(json!({
            "name": "pinned", "kind": "http",
            "url": format!("http://rebind.invalid:{}/tool", address.port()),
            "definition": {"name": "t"},
        }))
        .unwrap();
        let metrics = Arc::new(Metrics::default());
        let tool = discover(&spec, metrics.clone()).unwrap().remove(0);
        let ctx = ToolContext::new("s", "c", 0, std::env::temp_dir());
        let unpinned = tool.call(json!({}), &ctx).await.unwrap_err();
        assert_eq!(unpinned.kind, ToolErrorKind::Transport);
        spec.resolved.insert("rebind.invalid".into(), vec![address]);
        let tool = discover(&spec, metrics).unwrap().remove(0);
        let reached = tool.call(json!({}), &ctx).await.unwrap();
        assert_eq!(reached, ToolOutput::Json(json!({"reached": true})));
    }

    #[track_caller]
    fn check(code: u16, kind: ToolErrorKind, retryable: bool) {
        let status = reqwest::StatusCode::from_u16(code).unwrap();
        let error = status_error(status, format!("HTTP {code}"));
        assert_eq!((error.kind, error.retryable), (kind, retryable), "{code}");
    }

    #[test]
    fn only_the_callers_own_mistakes_are_invalid_arguments() {
        check(400, ToolErrorKind::InvalidInput, false);
        check(404, ToolErrorKind::InvalidInput, false);
        check(422, ToolErrorKind::InvalidInput, false);
        check(408, ToolErrorKind::Failed, true);
        check(429, ToolErrorKind::Failed, true);
        check(500, ToolErrorKind::Failed, true);
        check(503, ToolErrorKind::Failed, true);
        check(302, ToolErrorKind::Failed, false);
    }
}
