//! MCP's older HTTP+SSE transport (protocol 2024-11-05), which rmcp no longer ships: a `GET`
//! opens an event stream whose first `endpoint` event names the URL to `POST` each message to;
//! the server's messages arrive as `message` events on the stream. The endpoint must be on the
//! stream's origin (the bearer token goes there). Every request goes through `AuthedHttp`, so
//! TLS, the bearer token and its one retry on `401` are the same as for streamable HTTP.

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_client::StreamableHttpError;
use tokio::sync::mpsc;

use super::mcp_http::AuthedHttp;

/// The largest event (its lines up to the blank line that ends it): the event parser keeps an
/// event's data until it ends, so a server cannot make toolgate buffer without bound.
const MAX_EVENT: usize = 16 * 1024 * 1024;
/// Server messages read ahead of the client.
const QUEUE: usize = 64;

/// Why the SSE transport failed. The request's error keeps its causes (a `Refusal`, a TLS
/// failure), which `mcp` reads.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SseTransportError {
    #[error("{0}")]
    Http(#[from] StreamableHttpError<reqwest::Error>),
    #[error("the event stream ended before it named the message endpoint")]
    NoEndpoint,
    #[error("the message endpoint '{0}' is not on the event stream's origin")]
    OtherOrigin(String),
    #[error("the message endpoint '{0}' is not a URL")]
    BadEndpoint(String),
    #[error("the server answered HTTP {0} to a message")]
    Status(u16),
    #[error("the server sent an event larger than {MAX_EVENT} bytes")]
    EventTooLarge,
}

/// A connected HTTP+SSE session.
pub(crate) struct SseTransport {
    http: AuthedHttp,
    endpoint: Arc<str>,
    headers: reqwest::header::HeaderMap,
    messages: mpsc::Receiver<ServerJsonRpcMessage>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for SseTransport {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl SseTransport {
    /// Opens the event stream at `url` and waits for its `endpoint` event.
    pub(crate) async fn connect(
        http: AuthedHttp,
        url: &str,
        headers: reqwest::header::HeaderMap,
    ) -> Result<Self, SseTransportError> {
        let base = url::Url::parse(url).map_err(|_| SseTransportError::BadEndpoint(url.into()))?;
        let response = http
            .with_token(|token| {
                let mut request = http
                    .client
                    .get(url)
                    .headers(headers.clone())
                    .header(reqwest::header::ACCEPT, "text/event-stream");
                if let Some(token) = token {
                    request = request.bearer_auth(token);
                }
                async move {
                    request
                        .send()
                        .await
                        .and_then(reqwest::Response::error_for_status)
                        .map_err(StreamableHttpError::Client)
                }
            })
            .await?;
        let bytes = bounded_events(response.bytes_stream());
        let mut events = sse_stream::SseStream::from_bytes_stream(bytes);
        let endpoint = loop {
            match events.next().await {
                Some(Ok(event)) if event.event.as_deref() == Some("endpoint") => {
                    break event.data.unwrap_or_default();
                }
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => return Err(SseTransportError::NoEndpoint),
            }
        };
        let endpoint = base
            .join(endpoint.trim())
            .map_err(|_| SseTransportError::BadEndpoint(endpoint.clone()))?;
        if endpoint.origin() != base.origin() {
            return Err(SseTransportError::OtherOrigin(endpoint.to_string()));
        }
        let (tx, messages) = mpsc::channel(QUEUE);
        let reader = tokio::spawn(async move {
            while let Some(Ok(event)) = events.next().await {
                if !matches!(event.event.as_deref(), None | Some("message")) {
                    continue;
                }
                let Some(data) = event.data else { continue };
                match serde_json::from_str::<ServerJsonRpcMessage>(&data) {
                    Ok(message) => {
                        if tx.send(message).await.is_err() {
                            return;
                        }
                    }
                    Err(error) => {
                        tracing::warn!(target: "toolgate::tools::remote::mcp", %error, "mcp server (sse) sent a message that is not JSON-RPC; skipped");
                    }
                }
            }
            // The stream ended: dropping `tx` tells rmcp the transport closed.
        });
        Ok(SseTransport {
            http,
            endpoint: endpoint.as_str().into(),
            headers,
            messages,
            reader,
        })
    }
}

/// The byte stream, failing once an event grows past `MAX_EVENT`.
fn bounded_events(
    stream: impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send + 'static,
) -> impl futures::Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send + 'static {
    let mut size = EventSize::default();
    stream
        .map_err(std::io::Error::other)
        .and_then(move |chunk| {
            let result = if size.grow(&chunk) > MAX_EVENT {
                Err(std::io::Error::other(SseTransportError::EventTooLarge))
            } else {
                Ok(chunk)
            };
            std::future::ready(result)
        })
}

/// The bytes of the event being read: counted from the blank line that ended the last one
/// (`\n\n`, `\r\n\r\n`, or the two split across chunks).
#[derive(Default)]
struct EventSize {
    bytes: usize,
    /// The last byte other than `\r` was a line's end.
    after_newline: bool,
}

impl EventSize {
    /// Counts `chunk`; the size of the event still open after it.
    fn grow(&mut self, chunk: &[u8]) -> usize {
        for &byte in chunk {
            match byte {
                b'\n' if self.after_newline => self.bytes = 0,
                b'\n' => {
                    self.after_newline = true;
                    self.bytes += 1;
                }
                b'\r' => {}
                _ => {
                    self.after_newline = false;
                    self.bytes += 1;
                }
            }
        }
        self.bytes
    }
}

impl Transport<RoleClient> for SseTransport {
    type Error = SseTransportError;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let http = self.http.clone();
        let endpoint = self.endpoint.clone();
        let headers = self.headers.clone();
        async move {
            let body = serde_json::to_vec(&item)
                .map_err(|e| SseTransportError::Http(StreamableHttpError::Deserialize(e)))?;
            let status = http
                .with_token(|token| {
                    let mut request = http
                        .client
                        .post(endpoint.as_ref())
                        .headers(headers.clone())
                        .header(reqwest::header::CONTENT_TYPE, "application/json")
                        .body(body.clone());
                    if let Some(token) = token {
                        request = request.bearer_auth(token);
                    }
                    async move {
                        let response = request
                            .send()
                            .await
                            .and_then(reqwest::Response::error_for_status)
                            .map_err(StreamableHttpError::Client)?;
                        Ok(response.status())
                    }
                })
                .await?;
            if status.is_success() {
                Ok(())
            } else {
                Err(SseTransportError::Status(status.as_u16()))
            }
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<ServerJsonRpcMessage>> + Send {
        self.messages.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.reader.abort();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_counted_from_the_blank_line_that_ended_the_last() {
        let mut size = EventSize::default();
        assert_eq!(size.grow(b"event: message\ndata: abc\n\n"), 0);
        // Lines without a blank line between them are one event, however short each is.
        assert_eq!(size.grow(b"data: x\ndata: y\n"), 16);
        assert_eq!(size.grow(b"data: z\r\n"), 24);
        // A blank line split across chunks, CRLF or not, ends it.
        assert_eq!(size.grow(b"\r"), 24);
        assert_eq!(size.grow(b"\ndata: next"), 10);
    }
}
