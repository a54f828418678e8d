//! A remote's definition, the same shape in `[[remotes]]` and in `RegisterRemote`: how toolgate
//! reaches it (worker, MCP over stdio or HTTP, HTTP tool) and the checks that need no connection.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

/// Host names a registration's URLs resolved to, with the addresses checked: where its
/// connections must go.
pub(crate) type Resolved = BTreeMap<String, Vec<std::net::SocketAddr>>;

/// How toolgate reaches a remote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RemoteKind {
    /// A `toolgate.v1.ToolWorker` gRPC service.
    Worker,
    /// One tool behind an HTTP endpoint.
    Http,
    /// A Model Context Protocol server, over stdio (`command`) or HTTP (`url`).
    Mcp,
}

/// How an MCP server is spoken to over HTTP.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpTransport {
    /// Streamable HTTP (protocol 2025-03-26 and later): one endpoint, POST and GET.
    #[default]
    StreamableHttp,
    /// HTTP+SSE (protocol 2024-11-05): a GET event stream that names the endpoint to POST to.
    Sse,
}

/// A remote's definition: the same shape in `[[remotes]]` and in `RegisterRemote`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteSpec {
    /// Unique among remotes; names the remote in errors and logs.
    pub name: String,
    pub kind: RemoteKind,
    /// Worker: `http://host:port`.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Prepended to every tool name the remote offers (for example "py.").
    #[serde(default)]
    pub prefix: String,
    /// Globs over the remote's own tool names; only matching tools are registered.
    #[serde(default = "everything")]
    pub tools: Vec<String>,
    /// Connect and discovery timeout; calls are bounded by the call deadline.
    #[serde(default = "ten_seconds", with = "toolgate_core::duration")]
    pub timeout: Duration,
    /// Http: the URL the tool is POSTed to.
    #[serde(default)]
    pub url: Option<String>,
    /// Http and Mcp over HTTP: headers sent with every request.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Http: the tool's definition.
    #[serde(default)]
    pub definition: Option<HttpToolDefinition>,
    /// Mcp over stdio: the program and its arguments (no shell).
    #[serde(default)]
    pub command: Vec<String>,
    /// Mcp over stdio: environment variables set for the server's process, over `env_allow`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Mcp over stdio: the server's own environment variables the process gets; unset: the
    /// default allowlist (`child::DEFAULT_ENV_ALLOW`). Config only: `RegisterRemote` refuses it.
    #[serde(default)]
    pub env_allow: Option<Vec<String>>,
    /// Mcp over stdio: the working directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Accept changed tool definitions on refresh instead of quarantining the tools.
    #[serde(default)]
    pub accept_changes: bool,
    /// Http: follow redirects (same origin only). Off: a redirect is the tool's failure.
    #[serde(default)]
    pub follow_redirects: bool,
    /// From the config: `true` stops the start when the remote cannot be reached; `false` starts
    /// without its tools and keeps trying in the background, with backoff.
    #[serde(default)]
    pub required: bool,
    /// Mcp over HTTP: streamable HTTP (the default) or the older HTTP+SSE.
    #[serde(default)]
    pub transport: Option<McpTransport>,
    /// Over `https://` (a worker, an HTTP tool, MCP over HTTP): how the remote's certificate is
    /// verified, and the client certificate toolgate shows it.
    #[serde(default)]
    pub tls: Option<TlsSpec>,
    /// Http and Mcp over HTTP: where the bearer token sent with every request comes from.
    /// Config only: `RegisterRemote` refuses it.
    #[serde(default)]
    pub auth: Option<AuthSpec>,
    /// Host names of its URLs and the addresses they resolved to when a run-time registration
    /// was checked: its connections go there and nowhere else. Never read from a definition.
    #[serde(skip)]
    pub resolved: Resolved,
}

/// `[remotes.tls]`: TLS settings of a remote reached over `https://`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSpec {
    /// PEM file of the CA certificates that verify the remote; unset: the system's roots.
    #[serde(default)]
    pub ca_file: Option<String>,
    /// PEM client certificate chain shown to the remote (mTLS), with `key_file`.
    #[serde(default)]
    pub cert_file: Option<String>,
    /// PEM private key of `cert_file`.
    #[serde(default)]
    pub key_file: Option<String>,
    /// Worker only: the name the worker's certificate must carry; unset: the endpoint's host.
    #[serde(default)]
    pub domain: Option<String>,
}

/// `[remotes.auth]`: the bearer token of an HTTP tool or an MCP server over HTTP, from one
/// source. Never logged, never in an error, never given to the model.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSpec {
    /// An environment variable of the server holding the token (read at connect).
    #[serde(default)]
    pub bearer_env: Option<String>,
    /// A file holding the token (a mounted secret), read again whenever it changes.
    #[serde(default)]
    pub bearer_file: Option<String>,
    /// OAuth 2.1 client credentials: tokens fetched, cached and refreshed by toolgate.
    #[serde(default)]
    pub oauth: Option<OAuthSpec>,
}

/// `[remotes.auth.oauth]`: the client credentials grant (machine to machine).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthSpec {
    /// The authorization server's token endpoint; unset: the one `issuer` publishes (RFC 8414).
    /// One of the two is required: the client's secret or assertion goes only there, never to a
    /// server the remote names.
    #[serde(default)]
    pub token_url: Option<String>,
    pub client_id: String,
    /// An environment variable holding the client secret.
    #[serde(default)]
    pub client_secret_env: Option<String>,
    /// A file holding the client secret, read again whenever it changes.
    #[serde(default)]
    pub client_secret_file: Option<String>,
    /// `private_key_jwt` (RFC 7523) instead of a secret: a PEM private key (PKCS#8 RSA, EC
    /// P-256/P-384 or Ed25519, or PKCS#1 RSA) that signs a short-lived client assertion; read
    /// again whenever it changes.
    #[serde(default)]
    pub private_key_file: Option<String>,
    /// With `private_key_file`: the `kid` of the assertion's header, for a server that holds
    /// several of the client's keys.
    #[serde(default)]
    pub key_id: Option<String>,
    /// With `private_key_file`: the assertion's `aud`; unset: the authorization server's issuer
    /// (configured or discovered), else the token endpoint.
    #[serde(default)]
    pub audience: Option<String>,
    /// The authorization server's issuer (RFC 8414): its metadata, read at its own well-known
    /// address, names the token endpoint (unless `token_url` does).
    #[serde(default)]
    pub issuer: Option<String>,
    /// Scopes asked for; empty: the authorization server's default.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The RFC 8707 resource indicator; unset: the remote's URL (the MCP server's canonical URI).
    #[serde(default)]
    pub resource: Option<String>,
}

impl AuthSpec {
    fn check(&self, headers: &BTreeMap<String, String>) -> Result<(), SpecError> {
        let sources = [
            self.bearer_env.is_some(),
            self.bearer_file.is_some(),
            self.oauth.is_some(),
        ];
        if sources.iter().filter(|s| **s).count() != 1 {
            return Err(SpecError::AuthSource);
        }
        if headers
            .keys()
            .any(|h| h.eq_ignore_ascii_case("authorization"))
        {
            return Err(SpecError::AuthAndHeader);
        }
        for (field, value) in [
            ("bearer_env", &self.bearer_env),
            ("bearer_file", &self.bearer_file),
        ] {
            if value.as_deref() == Some("") {
                return Err(SpecError::Empty(field));
            }
        }
        if let Some(oauth) = &self.oauth {
            if oauth.client_id.is_empty() {
                return Err(SpecError::Empty("oauth.client_id"));
            }
            let secrets = [
                ("oauth.client_secret_env", &oauth.client_secret_env),
                ("oauth.client_secret_file", &oauth.client_secret_file),
                ("oauth.private_key_file", &oauth.private_key_file),
                ("oauth.key_id", &oauth.key_id),
                ("oauth.audience", &oauth.audience),
            ];
            if let Some((field, _)) = secrets.iter().find(|(_, v)| v.as_deref() == Some("")) {
                return Err(SpecError::Empty(field));
            }
            if secrets[..3].iter().filter(|(_, v)| v.is_some()).count() != 1 {
                return Err(SpecError::ClientSecret);
            }
            if oauth.private_key_file.is_none()
                && let Some((field, _)) = secrets[3..].iter().find(|(_, v)| v.is_some())
            {
                return Err(SpecError::KeyOnly(field));
            }
            if oauth.token_url.is_none() && oauth.issuer.is_none() {
                return Err(SpecError::Unpinned);
            }
            for url in [&oauth.token_url, &oauth.issuer].into_iter().flatten() {
                http_url(url)?;
            }
        }
        Ok(())
    }
}

/// `[remotes.definition]` of an HTTP remote: the one tool it is.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpToolDefinition {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "any_object")]
    pub input_schema: Value,
    #[serde(default)]
    pub read_only: bool,
    #[serde(default)]
    pub destructive: bool,
    #[serde(default)]
    pub idempotent: bool,
    #[serde(default)]
    pub open_world: bool,
    #[serde(default)]
    pub concurrency_safe: bool,
    /// A reference into the input naming the resource a call touches (`arguments.path`).
    #[serde(default)]
    pub resource_key: Option<String>,
}

fn any_object() -> Value {
    json!({"type": "object"})
}

impl RemoteSpec {
    /// This remote is invalid: a definition or configuration problem (INVALID_ARGUMENT).
    pub fn invalid(&self, reason: impl Into<String>) -> super::RemoteError {
        super::RemoteError::Invalid {
            name: self.name.clone(),
            reason: reason.into(),
        }
    }

    /// This remote cannot be reached now (UNAVAILABLE; a config remote is retried).
    pub fn unreachable(&self, reason: impl Into<String>) -> super::RemoteError {
        super::RemoteError::Unreachable {
            name: self.name.clone(),
            reason: reason.into(),
        }
    }

    /// Checks what can be checked without connecting.
    pub fn check(&self) -> Result<(), SpecError> {
        check_name(&self.name)?;
        self.check_fields()?;
        toolgate_core::child::check_env(self.env_allow().iter().copied(), &self.env)?;
        if self.tls.is_some() && !self.is_https() {
            return Err(SpecError::TlsWithoutHttps);
        }
        if let Some(tls) = &self.tls {
            if tls.domain.is_some() && self.kind != RemoteKind::Worker {
                return Err(SpecError::DomainNotWorker);
            }
            if tls.cert_file.is_some() != tls.key_file.is_some() {
                return Err(SpecError::HalfAnIdentity);
            }
        }
        if let Some(auth) = &self.auth {
            auth.check(&self.headers)?;
        }
        let url = match self.kind {
            RemoteKind::Worker => match self.endpoint.as_deref() {
                // Workers speak gRPC through tonic, which has a TLS client in this build.
                Some(e) if e.starts_with("https://") => return Ok(()),
                Some(e) => e,
                None => return Err(SpecError::NoEndpoint),
            },
            RemoteKind::Http => match (self.url.as_deref(), &self.definition) {
                (Some(u), Some(_)) => u,
                (None, _) => return Err(SpecError::NoUrl),
                (_, None) => return Err(SpecError::NoDefinition),
            },
            RemoteKind::Mcp => match (self.command.is_empty(), self.url.as_deref()) {
                (false, None) => return Ok(()),
                (true, Some(u)) => u,
                (false, Some(_)) => return Err(SpecError::CommandAndUrl),
                (true, None) => return Err(SpecError::NoCommandOrUrl),
            },
        };
        for (name, value) in &self.headers {
            reqwest::header::HeaderName::try_from(name.as_str())
                .map_err(|_| SpecError::HeaderName(name.clone()))?;
            reqwest::header::HeaderValue::try_from(value.as_str())
                .map_err(|_| SpecError::HeaderValue(name.clone()))?;
        }
        http_url(url)
    }

    /// Refuses a field that does not belong to the remote's kind: a worker `command` or an MCP
    /// `definition` would be ignored, and a field that is ignored here but read elsewhere (an
    /// egress check that looked at the command and skipped the URL) is a way around a check.
    fn check_fields(&self) -> Result<(), SpecError> {
        let stdio = !self.command.is_empty();
        let set = [
            ("endpoint", self.endpoint.is_some()),
            ("tls", self.tls.is_some()),
            ("auth", self.auth.is_some()),
            ("transport", self.transport.is_some()),
            ("url", self.url.is_some()),
            ("headers", !self.headers.is_empty()),
            ("definition", self.definition.is_some()),
            ("follow_redirects", self.follow_redirects),
            ("command", stdio),
            ("env", !self.env.is_empty()),
            ("env_allow", self.env_allow.is_some()),
            ("cwd", self.cwd.is_some()),
        ];
        let (kind, belongs): (&str, &[&str]) = match self.kind {
            RemoteKind::Worker => ("a worker", &["endpoint", "tls"]),
            RemoteKind::Http => (
                "an http remote",
                &[
                    "url",
                    "headers",
                    "definition",
                    "follow_redirects",
                    "tls",
                    "auth",
                ],
            ),
            RemoteKind::Mcp if stdio => (
                "an mcp remote over stdio (command)",
                &["command", "env", "env_allow", "cwd", "url"],
            ),
            RemoteKind::Mcp => (
                "an mcp remote over HTTP (url)",
                &["url", "headers", "transport", "tls", "auth"],
            ),
        };
        match set
            .iter()
            .find(|(field, on)| *on && !belongs.contains(field))
        {
            Some((field, _)) => Err(SpecError::DoesNotApply { field, kind }),
            None => Ok(()),
        }
    }

    /// The names of the server's environment variables a stdio process gets.
    pub fn env_allow(&self) -> Vec<&str> {
        match &self.env_allow {
            Some(names) => names.iter().map(String::as_str).collect(),
            None => toolgate_core::child::DEFAULT_ENV_ALLOW.to_vec(),
        }
    }

    /// The remote is reached over TLS: a worker's `https://` endpoint, or an `https://` URL.
    pub fn is_https(&self) -> bool {
        let target = match self.kind {
            RemoteKind::Worker => self.endpoint.as_deref(),
            _ => self.url.as_deref(),
        };
        target.is_some_and(|e| starts_with_ignore_case(e, "https://"))
    }

    /// The transport of an MCP server over HTTP.
    pub fn mcp_transport(&self) -> McpTransport {
        self.transport.unwrap_or_default()
    }

    /// What is allowed but probably not meant, for `check-config` and the start's log: a
    /// plaintext URL off loopback (requests, results and credentials readable on the way), a
    /// credential written into the config file as a header.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        let oauth = self.auth.as_ref().and_then(|a| a.oauth.as_ref());
        let urls = [
            ("endpoint", self.endpoint.as_deref()),
            ("url", self.url.as_deref()),
            (
                "auth.oauth.token_url",
                oauth.and_then(|o| o.token_url.as_deref()),
            ),
            ("auth.oauth.issuer", oauth.and_then(|o| o.issuer.as_deref())),
        ];
        for (field, url) in urls {
            if let Some(url) = url.and_then(plaintext_off_loopback) {
                warnings.push(format!(
                    "{field} '{url}' is plaintext off loopback: requests, results and credentials cross the network unencrypted; use https://"
                ));
            }
        }
        for name in self.headers.keys().filter(|n| holds_credential(n)) {
            warnings.push(format!(
                "headers.{name} writes a credential into the config file; keep it in a file or an environment variable with [remotes.auth] bearer_file or bearer_env"
            ));
        }
        warnings
    }
}

/// An `http://` URL whose host is not `localhost` or a loopback address, as a warning shows it:
/// without user, password, query or fragment (they may hold a credential).
fn plaintext_off_loopback(url: &str) -> Option<String> {
    let mut parsed = url::Url::parse(url).ok()?;
    if parsed.scheme() != "http" || on_loopback(&parsed) {
        return None;
    }
    let private = parsed.password().is_some()
        || !parsed.username().is_empty()
        || parsed.query().is_some()
        || parsed.fragment().is_some();
    if !private {
        return Some(url.to_owned());
    }
    let _ = parsed.set_username("");
    let _ = parsed.set_password(None);
    parsed.set_query(None);
    parsed.set_fragment(None);
    Some(parsed.to_string())
}

/// The URL's host is `localhost` or a loopback address (an `http://` URL always has a host).
pub(crate) fn on_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// A header name that carries a credential: `Authorization`, a cookie, an API key, a token.
fn holds_credential(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    [
        "authorization",
        "cookie",
        "token",
        "secret",
        "api-key",
        "apikey",
        "api_key",
        "password",
    ]
    .iter()
    .any(|word| name.contains(word))
}

fn starts_with_ignore_case(text: &str, prefix: &str) -> bool {
    text.get(..prefix.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
}

/// HTTP tool and MCP URLs are `http://` or `https://` URLs.
fn http_url(url: &str) -> Result<(), SpecError> {
    let parsed = url::Url::parse(url).map_err(|_| SpecError::NotAUrl(url.to_owned()))?;
    if matches!(parsed.scheme(), "http" | "https") && parsed.host().is_some() {
        Ok(())
    } else {
        Err(SpecError::NotAUrl(url.to_owned()))
    }
}

/// A remote definition that cannot be used, found without connecting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error(
        "remote name {:?} is invalid: use 1 to {MAX_NAME} ASCII letters, digits, '_', '-' or '.'",
        toolgate_core::json::truncate_chars(.0, MAX_NAME)
    )]
    Name(String),
    /// A field of another kind of remote (ignored, it could hide what a check skipped).
    #[error("{field} does not apply to {kind}")]
    DoesNotApply {
        field: &'static str,
        kind: &'static str,
    },
    #[error(transparent)]
    Env(#[from] toolgate_core::child::EnvError),
    #[error("tls applies only to a remote reached over https://")]
    TlsWithoutHttps,
    #[error(
        "tls.domain applies only to a worker: an https:// URL's certificate is checked against the URL's host"
    )]
    DomainNotWorker,
    #[error("tls.cert_file and tls.key_file go together")]
    HalfAnIdentity,
    #[error("auth takes exactly one of bearer_env, bearer_file and oauth")]
    AuthSource,
    #[error("auth and an authorization header would both set the credentials: keep one")]
    AuthAndHeader,
    #[error("auth.{0} is empty")]
    Empty(&'static str),
    #[error(
        "auth.oauth takes exactly one of client_secret_env, client_secret_file and private_key_file"
    )]
    ClientSecret,
    #[error("auth.{0} applies only with auth.oauth.private_key_file")]
    KeyOnly(&'static str),
    /// A secret or key for whichever authorization server the remote's `401` names would be
    /// handed to the remote.
    #[error(
        "auth.oauth: a client secret or private key goes only to a pinned authorization server; set issuer or token_url"
    )]
    Unpinned,
    #[error("a worker needs an endpoint")]
    NoEndpoint,
    #[error("an http remote needs a url")]
    NoUrl,
    #[error("an http remote needs a definition of its tool")]
    NoDefinition,
    #[error("set either command (stdio) or url (HTTP), not both")]
    CommandAndUrl,
    #[error("an mcp remote needs a command (stdio) or a url (HTTP)")]
    NoCommandOrUrl,
    #[error("'{0}' is not a valid HTTP header name")]
    HeaderName(String),
    #[error("header '{0}' has a value that is not valid in HTTP")]
    HeaderValue(String),
    #[error("'{0}' is not an http:// or https:// URL such as https://tools.example.com/mcp")]
    NotAUrl(String),
}

/// Longest remote name: it is a metric label and a log field.
const MAX_NAME: usize = 64;

/// A remote's name is 1 to 64 ASCII letters, digits, `_`, `-` or `.`: it becomes a metric
/// label, a log field and part of error texts, so no newline, quote or unbounded length.
fn check_name(name: &str) -> Result<(), SpecError> {
    let valid = (1..=MAX_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if valid {
        Ok(())
    } else {
        Err(SpecError::Name(name.to_owned()))
    }
}

fn everything() -> Vec<String> {
    vec!["*".to_owned()]
}

fn ten_seconds() -> Duration {
    Duration::from_secs(10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(definition: Value, expected: Result<(), &str>) {
        let spec: RemoteSpec = serde_json::from_value(definition).unwrap();
        assert_eq!(
            spec.check().map_err(|e| e.to_string()),
            expected.map_err(str::to_owned)
        );
    }

    #[test]
    fn a_field_of_another_kind_is_refused() {
        let url = "http://10.0.0.5:7001";
        check(
            json!({"name": "h", "kind": "http", "url": url, "definition": {"name": "t"},
                   "command": ["/bin/true"]}),
            Err("command does not apply to an http remote"),
        );
        check(
            json!({"name": "w", "kind": "worker", "endpoint": url, "command": ["/bin/true"]}),
            Err("command does not apply to a worker"),
        );
        check(
            json!({"name": "w", "kind": "worker", "endpoint": url, "url": url}),
            Err("url does not apply to a worker"),
        );
        check(
            json!({"name": "m", "kind": "mcp", "url": url, "cwd": "/tmp"}),
            Err("cwd does not apply to an mcp remote over HTTP (url)"),
        );
        check(
            json!({"name": "m", "kind": "mcp", "command": ["srv"], "headers": {"a": "b"}}),
            Err("headers does not apply to an mcp remote over stdio (command)"),
        );
        check(
            json!({"name": "m", "kind": "mcp", "command": ["srv"], "definition": {"name": "t"}}),
            Err("definition does not apply to an mcp remote over stdio (command)"),
        );
        check(
            json!({"name": "w", "kind": "worker", "endpoint": url}),
            Ok(()),
        );
        check(
            json!({"name": "m", "kind": "mcp", "command": ["srv"], "cwd": "/srv"}),
            Ok(()),
        );
    }

    #[test]
    fn oauth_takes_one_way_to_prove_the_client() {
        let url = "https://mcp.example.com/mcp";
        let oauth = |fields: Value| {
            let mut oauth = json!({"client_id": "toolgate", "issuer": "https://as.example.com"});
            oauth
                .as_object_mut()
                .unwrap()
                .extend(fields.as_object().unwrap().clone());
            json!({"name": "m", "kind": "mcp", "url": url, "auth": {"oauth": oauth}})
        };
        let one_of = "auth.oauth takes exactly one of client_secret_env, client_secret_file and private_key_file";
        check(
            oauth(json!({"private_key_file": "/k.pem", "key_id": "k1", "audience": "https://as"})),
            Ok(()),
        );
        check(oauth(json!({"client_secret_file": "/s"})), Ok(()));
        check(oauth(json!({})), Err(one_of));
        check(
            oauth(json!({"client_secret_env": "S", "private_key_file": "/k.pem"})),
            Err(one_of),
        );
        check(
            oauth(json!({"client_secret_env": "S", "key_id": "k1"})),
            Err("auth.oauth.key_id applies only with auth.oauth.private_key_file"),
        );
        check(
            oauth(json!({"private_key_file": ""})),
            Err("auth.oauth.private_key_file is empty"),
        );
    }

    #[test]
    fn a_client_secret_or_key_needs_a_pinned_authorization_server() {
        let unpinned = "auth.oauth: a client secret or private key goes only to a pinned authorization server; set issuer or token_url";
        let remote = |oauth: Value| json!({"name": "m", "kind": "mcp", "url": "https://mcp.example.com/mcp", "auth": {"oauth": oauth}});
        for proof in [
            json!({"client_id": "c", "client_secret_env": "S"}),
            json!({"client_id": "c", "client_secret_file": "/s"}),
            json!({"client_id": "c", "private_key_file": "/k.pem", "audience": "https://as"}),
        ] {
            check(remote(proof.clone()), Err(unpinned));
            for pin in [
                json!({"issuer": "https://as.example.com"}),
                json!({"token_url": "https://as.example.com/token"}),
            ] {
                let mut pinned = proof.clone();
                pinned
                    .as_object_mut()
                    .unwrap()
                    .extend(pin.as_object().unwrap().clone());
                check(remote(pinned), Ok(()));
            }
        }
    }

    #[test]
    fn plaintext_off_loopback_and_inline_credentials_are_warned_about() {
        let warnings = |definition: Value| {
            serde_json::from_value::<RemoteSpec>(definition)
                .unwrap()
                .warnings()
        };
        let def = json!({"name": "t"});
        for quiet in [
            "http://127.0.0.1:9/t",
            "http://localhost:9/t",
            "http://[::1]:9/t",
            "https://tools.example.com/t",
        ] {
            let w = warnings(json!({"name": "h", "kind": "http", "url": quiet, "definition": def}));
            assert_eq!(w, Vec::<String>::new(), "{quiet}");
        }
        let w = warnings(
            json!({"name": "h", "kind": "http", "url": "http://10.0.0.5/t", "definition": def,
            "headers": {"X-Api-Key": "k", "Authorization": "Bearer t", "Accept": "application/json"}}),
        );
        assert_eq!(
            w,
            [
                "url 'http://10.0.0.5/t' is plaintext off loopback: requests, results and credentials cross the network unencrypted; use https://",
                "headers.Authorization writes a credential into the config file; keep it in a file or an environment variable with [remotes.auth] bearer_file or bearer_env",
                "headers.X-Api-Key writes a credential into the config file; keep it in a file or an environment variable with [remotes.auth] bearer_file or bearer_env",
            ]
        );
        let w = warnings(
            json!({"name": "h", "kind": "http", "url": "http://u:pw@10.0.0.5/t?api_key=k#f", "definition": def}),
        );
        assert!(
            w[0].starts_with("url 'http://10.0.0.5/t' is plaintext"),
            "{w:?}"
        );
        let w = warnings(
            json!({"name": "w", "kind": "worker", "endpoint": "http://tools.internal:7001"}),
        );
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].starts_with("endpoint 'http://tools.internal:7001' is plaintext"));
        let w = warnings(
            json!({"name": "m", "kind": "mcp", "url": "https://mcp.example.com/mcp",
            "auth": {"oauth": {"client_id": "c", "client_secret_env": "S", "token_url": "http://auth.example.com/token"}}}),
        );
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("auth.oauth.token_url 'http://auth.example.com/token' is plaintext")
        );
        let w = warnings(
            json!({"name": "m", "kind": "mcp", "url": "https://mcp.example.com/mcp",
            "auth": {"oauth": {"client_id": "c", "client_secret_env": "S", "issuer": "http://auth.example.com"}}}),
        );
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("auth.oauth.issuer 'http://auth.example.com' is plaintext"),
            "{w:?}"
        );
    }

    #[test]
    fn a_remote_name_is_short_and_plain() {
        let endpoint = "http://10.0.0.5:7001";
        for bad in ["", "a\nb", "a\"b", "a b", &"x".repeat(65)] {
            let spec: RemoteSpec = serde_json::from_value(
                json!({"name": bad, "kind": "worker", "endpoint": endpoint}),
            )
            .unwrap();
            let error = spec.check().unwrap_err().to_string();
            assert!(error.starts_with("remote name "), "{error}");
            assert!(error.len() < 200, "the name is not echoed whole: {error}");
        }
        check(
            json!({"name": "py.tools-2_x", "kind": "worker", "endpoint": endpoint}),
            Ok(()),
        );
    }
}
