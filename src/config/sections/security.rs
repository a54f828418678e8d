//! `[tls]` and `[auth]`: the server's certificate, and who may call with which credentials.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use url::Url;

use super::parse;
use toolgate_core::duration;

/// `[tls]`: the server's certificate, and client certificates (mTLS).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// PEM certificate chain; with `key_file`, the server speaks TLS only. `None` (`""` in the
    /// file): TLS is off.
    #[serde(deserialize_with = "parse::empty_as_none")]
    pub cert_file: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    #[serde(deserialize_with = "parse::empty_as_none")]
    pub key_file: Option<PathBuf>,
    /// PEM CA bundle: clients presenting a certificate must chain to it. `None`: no client
    /// certificates.
    #[serde(deserialize_with = "parse::empty_as_none")]
    pub client_ca_file: Option<PathBuf>,
    /// With `client_ca_file`: refuse connections without a client certificate.
    pub require_client_cert: bool,
    /// How often the files are checked for changes (SIGHUP reloads at once); zero: only SIGHUP.
    #[serde(with = "duration")]
    pub reload_interval: Duration,
    /// How long a client may take for the TLS handshake.
    #[serde(with = "duration")]
    pub handshake_timeout: Duration,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            cert_file: None,
            key_file: None,
            client_ca_file: None,
            require_client_cert: true,
            reload_interval: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
        }
    }
}

impl TlsConfig {
    /// Whether the server speaks TLS (validation has checked the key comes with it).
    pub fn enabled(&self) -> bool {
        self.cert_file.is_some()
    }
}

/// `[auth]`: how callers prove who they are, and what unauthenticated callers may do.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Which callers without credentials are let in as `anonymous` with `anonymous_roles`.
    pub anonymous: Anonymous,
    pub anonymous_tenant: String,
    pub anonymous_roles: Vec<String>,
    pub tokens: Vec<TokenConfig>,
    pub jwt: JwtConfig,
    pub certificates: Vec<CertificateIdentity>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            anonymous: Anonymous::Loopback,
            anonymous_tenant: default_tenant(),
            anonymous_roles: agent_role(),
            tokens: Vec::new(),
            jwt: JwtConfig::default(),
            certificates: Vec::new(),
        }
    }
}

/// Who may call without credentials (`anonymous = "loopback" | "any" | "none"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Anonymous {
    /// Callers connecting from a loopback address (this machine).
    #[default]
    Loopback,
    /// Anyone who can reach the port.
    Any,
    /// Nobody: every RPC needs credentials.
    None,
}

/// `[[auth.tokens]]`: a bearer token and the identity it stands for. Exactly one of `sha256`,
/// `file`, `env` is set (non-empty); validation names the entry that breaks this.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// The identity (shown in logs and audit lines; the token never is).
    pub id: String,
    #[serde(default = "default_tenant")]
    pub tenant: String,
    #[serde(default = "agent_role")]
    pub roles: Vec<String>,
    /// Hex SHA-256 of the token (`printf %s "$TOKEN" | sha256sum`).
    #[serde(default)]
    pub sha256: String,
    /// A file holding the token (trailing whitespace ignored).
    #[serde(default)]
    pub file: String,
    /// An environment variable holding the token.
    #[serde(default)]
    pub env: String,
}

/// `[auth.jwt]`: JWT bearer tokens, checked against a JWKS (file or URL) with issuer, audience
/// and expiry; off unless a JWKS is given.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JwtConfig {
    /// A JWKS file, read at start. `None` (`""` in the file): none.
    #[serde(deserialize_with = "parse::empty_as_none")]
    pub jwks_file: Option<PathBuf>,
    /// Fetched at start and every `jwks_refresh` (and when a token names an unknown key id).
    /// `None` (`""` in the file): none.
    #[serde(deserialize_with = "parse::jwks_url")]
    pub jwks_url: Option<Url>,
    #[serde(with = "duration")]
    pub jwks_refresh: Duration,
    /// Required `iss`; required when JWTs are on.
    pub issuer: String,
    /// Required `aud` (one of); required when JWTs are on.
    pub audience: String,
    /// The claim naming the tenant; a token without it is refused.
    pub tenant_claim: String,
    /// The claim listing roles (an array, or a space-separated string).
    pub roles_claim: String,
    /// Roles of a token without the roles claim.
    pub default_roles: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`.
    #[serde(with = "duration")]
    pub leeway: Duration,
}

impl Default for JwtConfig {
    fn default() -> Self {
        JwtConfig {
            jwks_file: None,
            jwks_url: None,
            jwks_refresh: Duration::from_secs(600),
            issuer: String::new(),
            audience: String::new(),
            tenant_claim: "tenant".to_owned(),
            roles_claim: "roles".to_owned(),
            default_roles: agent_role(),
            leeway: Duration::from_secs(30),
        }
    }
}

impl JwtConfig {
    /// Whether JWTs are accepted: a JWKS file or URL is given.
    pub fn enabled(&self) -> bool {
        self.jwks_file.is_some() || self.jwks_url.is_some()
    }
}

/// `[[auth.certificates]]`: a client certificate name (a DNS subject alternative name the
/// certificate is valid for) and the identity it stands for.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertificateIdentity {
    pub name: String,
    #[serde(default = "default_tenant")]
    pub tenant: String,
    #[serde(default = "agent_role")]
    pub roles: Vec<String>,
}

/// The tenant of callers the config names no tenant for.
fn default_tenant() -> String {
    toolgate_core::identity::DEFAULT_TENANT.to_owned()
}

/// The roles of callers the config names no roles for.
fn agent_role() -> Vec<String> {
    vec!["agent".to_owned()]
}
