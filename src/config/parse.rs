//! Values typed as they are read: addresses, URLs, the trace sampler, and `""` read as unset.
//! Each error names its key, so the loader reports it as it is (`server.listen: ...`).
//!
//! The file's text is what it always was: every function here reads a string, takes an empty one
//! as unset where the file documents that, and refuses exactly what validation refused before.

use std::net::SocketAddr;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use url::Url;

use super::TraceSampler;

/// `server.listen`: an address such as `127.0.0.1:50051`.
pub(super) fn server_listen<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(d)?;
    address(&text).ok_or_else(|| {
        D::Error::custom(format!(
            "server.listen: '{text}' is not an address such as 127.0.0.1:50051"
        ))
    })
}

/// `admin.listen`: an address such as `127.0.0.1:9464`; empty turns the listener off.
pub(super) fn admin_listen<'de, D>(d: D) -> Result<Option<SocketAddr>, D::Error>
where
    D: Deserializer<'de>,
{
    optional(d, |text| {
        address(text).ok_or_else(|| {
            format!(
                "admin.listen: '{text}' is not an address such as 127.0.0.1:9464 (empty turns the admin listener off)"
            )
        })
    })
}

/// `mcp.listen`: an address such as `127.0.0.1:8765`; empty turns the MCP front off.
pub(super) fn mcp_listen<'de, D>(d: D) -> Result<Option<SocketAddr>, D::Error>
where
    D: Deserializer<'de>,
{
    optional(d, |text| {
        address(text).ok_or_else(|| {
            format!(
                "mcp.listen: '{text}' is not an address such as 127.0.0.1:8765 (empty turns the MCP front off)"
            )
        })
    })
}

/// `mcp.resource`: the endpoint's canonical `http(s)://` URL, without a fragment.
pub(super) fn mcp_resource<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Url>, D::Error> {
    optional(d, |text| {
        http_url(text)
            .filter(|url| url.fragment().is_none())
            .ok_or_else(|| {
                format!("mcp.resource: '{text}' is not an http(s) URL without a fragment")
            })
    })
}

/// `telemetry.otlp_endpoint`: an `http://` or `https://` URL; empty leaves it to the
/// `OTEL_EXPORTER_OTLP_*` variables.
pub(super) fn otlp_endpoint<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Url>, D::Error> {
    optional(d, |text| {
        http_url(text).ok_or_else(|| {
            format!("telemetry.otlp_endpoint: '{text}' is not a URL such as http://127.0.0.1:4317")
        })
    })
}

/// `auth.jwt.jwks_url`: an `http://` or `https://` URL; empty means no URL.
pub(super) fn jwks_url<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Url>, D::Error> {
    optional(d, |text| {
        http_url(text).ok_or_else(|| format!("auth.jwt.jwks_url: '{text}' is not an http(s) URL"))
    })
}

/// `telemetry.sampler`: one of the `OTEL_TRACES_SAMPLER` names.
pub(super) fn sampler<'de, D: Deserializer<'de>>(d: D) -> Result<TraceSampler, D::Error> {
    let text = String::deserialize(d)?;
    TraceSampler::named(&text).ok_or_else(|| {
        let names: Vec<&str> = TraceSampler::ALL.iter().map(|s| s.name()).collect();
        D::Error::custom(format!(
            "telemetry.sampler: '{text}' is not one of {}",
            names.join(", ")
        ))
    })
}

/// `sessions.store`: `memory`, or a `redis://` / `rediss://` URL. The error never repeats the
/// text, which may hold a password.
pub(super) fn session_store<'de, D>(d: D) -> Result<super::SessionStoreUrl, D::Error>
where
    D: Deserializer<'de>,
{
    let text = String::deserialize(d)?;
    if text == "memory" {
        return Ok(super::SessionStoreUrl::Memory);
    }
    let url = Url::parse(&text)
        .ok()
        .filter(|u| matches!(u.scheme(), "redis" | "rediss") && u.host().is_some());
    url.map(super::SessionStoreUrl::Redis).ok_or_else(|| {
        D::Error::custom(
            "sessions.store: not `memory` or a URL such as redis://127.0.0.1:6379/0 (rediss:// for TLS)",
        )
    })
}

/// A path or text where the file's `""` means unset.
pub(super) fn empty_as_none<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: From<String>,
{
    optional(d, |text| Ok(T::from(text.to_owned())))
}

/// A string typed by `parse`, with `""` as `None`; `parse`'s error names the key.
fn optional<'de, D, T>(
    d: D,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
{
    let text = String::deserialize(d)?;
    if text.is_empty() {
        return Ok(None);
    }
    parse(&text).map(Some).map_err(D::Error::custom)
}

fn address(text: &str) -> Option<SocketAddr> {
    text.parse().ok()
}

/// An `http://` or `https://` URL, the scheme written in lower case as it always had to be.
fn http_url(text: &str) -> Option<Url> {
    if !text.starts_with("http://") && !text.starts_with("https://") {
        return None;
    }
    Url::parse(text).ok()
}
