//! Who may call what: every RPC's caller from its credentials (a bearer token, a JWT, a TLS
//! client certificate, or anonymous when the config allows), and whether the caller's roles
//! allow the RPC (the rules are `access.rs`'s table). Refusals and admin actions are audit lines
//! (target `toolgate::audit`). Credentials are never logged.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{DecodingKey, Validation};
use parking_lot::{Mutex, RwLock};
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;

use crate::config::{Anonymous, AuthConfig, CertificateIdentity, JwtConfig, TokenConfig};
use toolgate_core::identity::{Caller, InvalidTenant, Method, Role, validate_tenant};

/// What a request presents to be judged by: its headers and its connection.
pub struct Credentials<'a> {
    headers: &'a http::HeaderMap,
    peer: Option<SocketAddr>,
    certificates: Option<Arc<Vec<CertificateDer<'static>>>>,
}

impl<'a> Credentials<'a> {
    /// What a request presents: its headers, the client's address and, over TLS, the client's
    /// certificate chain (each front reads these from its own connection info).
    pub fn new(
        headers: &'a http::HeaderMap,
        peer: Option<SocketAddr>,
        certificates: Option<Arc<Vec<CertificateDer<'static>>>>,
    ) -> Self {
        Credentials {
            headers,
            peer,
            certificates,
        }
    }

    /// The client's address, when the transport recorded one.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.peer
    }
}

/// Why a request was not let in, as its caller is told (each front maps it to its protocol:
/// gRPC `UNAUTHENTICATED`/`PERMISSION_DENIED`, HTTP 401/403).
#[derive(Debug, thiserror::Error)]
pub enum Denied {
    /// No acceptable credentials (the text says what was wrong, never the credential).
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    PermissionDenied(String),
}

/// `[auth]` settings that cannot be used at start.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("auth.tokens[{index}]: {source}")]
    Token {
        index: usize,
        #[source]
        source: TokenError,
    },
    /// The HTTP client that fetches the JWKS could not be built.
    #[error("auth.jwt: {0}")]
    Client(#[source] reqwest::Error),
    #[error("auth.jwt: {0}")]
    Tls(String),
    /// The JWKS file does not read or does not parse.
    #[error("auth.jwt.jwks_file '{path}': {source}")]
    JwksFile {
        path: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Why a request's credentials were refused: written to the audit log; the caller is told only
/// whether it sent none (`Refused::told`).
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("credentials required: send 'authorization: Bearer <token>'")]
    NoCredentials,
    #[error("the authorization header is not text")]
    HeaderNotText,
    #[error("the authorization header is not 'Bearer <token>'")]
    NotBearer,
    #[error("the client certificate names no configured identity")]
    UnknownCertificate,
    #[error("unknown bearer token")]
    UnknownToken,
    #[error("JWT: {0}")]
    Jwt(#[from] JwtRefused),
}

impl Refused {
    /// What the caller is told: that it must send credentials, or that those it sent were not
    /// accepted (what a JWT check found is for the operator's log).
    fn told(&self) -> String {
        match self {
            Refused::NoCredentials => self.to_string(),
            _ => "the credentials were not accepted".to_owned(),
        }
    }
}

/// Why a JWT was refused.
#[derive(Debug, thiserror::Error)]
enum JwtRefused {
    #[error("{0}")]
    Malformed(jsonwebtoken::errors::Error),
    #[error("the header names critical extensions (crit), which this server does not understand")]
    Critical,
    #[error("signed with {signed:?}, but the key is for {key}")]
    WrongAlgorithm {
        signed: jsonwebtoken::Algorithm,
        key: String,
    },
    #[error("no key {0} in the JWKS")]
    UnknownKey(String),
    #[error("the JWKS key is unusable: {0}")]
    UnusableKey(jsonwebtoken::errors::Error),
    #[error("the sub claim is empty (it names the identity)")]
    NoSubject,
    #[error("no '{0}' claim (the tenant)")]
    NoTenant(String),
    #[error("{0}")]
    BadTenant(InvalidTenant),
}

/// The JWKS could not be fetched.
#[derive(Debug, thiserror::Error)]
#[error("JWKS {url}: {source}")]
struct JwksFetch {
    url: String,
    #[source]
    source: reqwest::Error,
}

/// A configured token whose secret cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("sha256: not 64 hex digits")]
    Sha256,
    #[error("file '{path}': {source}")]
    File {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("env: {0} is not set")]
    Env(String),
    #[error("the token is empty")]
    Empty,
}

/// Turns credentials into callers. Built once per server from `[auth]`.
pub struct Authenticator {
    anonymous: Option<Arc<Caller>>,
    /// Anonymous callers only from loopback peers.
    anonymous_loopback_only: bool,
    /// SHA-256 of each token and the caller it stands for.
    tokens: Vec<([u8; 32], Arc<Caller>)>,
    jwt: Option<Arc<Jwt>>,
    certificates: Vec<(ServerName<'static>, Arc<Caller>)>,
    /// The JWKS refresher, stopped with the authenticator.
    refresher: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Authenticator {
    fn drop(&mut self) {
        if let Some(task) = &self.refresher {
            task.abort();
        }
    }
}

impl Authenticator {
    /// Anyone is the local caller (the service's unit tests).
    #[cfg(test)]
    pub(crate) fn open() -> Self {
        Authenticator {
            anonymous: Some(Arc::new(Caller::local())),
            anonymous_loopback_only: false,
            tokens: Vec::new(),
            jwt: None,
            certificates: Vec::new(),
            refresher: None,
        }
    }

    /// Reads token files and variables and the JWKS (a URL is fetched now and refreshed in the
    /// background; an unreachable one is retried, and JWTs are refused until it answers).
    pub async fn from_config(config: &AuthConfig) -> Result<Self, AuthError> {
        let anonymous = (config.anonymous != Anonymous::None).then(|| {
            Arc::new(Caller {
                id: "anonymous".to_owned(),
                tenant: config.anonymous_tenant.clone(),
                roles: roles(&config.anonymous_roles),
                method: Method::Anonymous,
            })
        });
        let mut tokens = Vec::new();
        for (i, token) in config.tokens.iter().enumerate() {
            tokens.push((
                token_digest(token).map_err(|source| AuthError::Token { index: i, source })?,
                Arc::new(Caller {
                    id: token.id.clone(),
                    tenant: token.tenant.clone(),
                    roles: roles(&token.roles),
                    method: Method::Token,
                }),
            ));
        }
        let certificates = config
            .certificates
            .iter()
            .filter_map(certificate_identity)
            .collect();
        let (jwt, refresher) = if config.jwt.enabled() {
            let jwt = Arc::new(Jwt::new(&config.jwt).await?);
            let refresher = config
                .jwt
                .jwks_url
                .is_some()
                .then(|| tokio::spawn(jwt.clone().refresh_every(config.jwt.jwks_refresh)));
            (Some(jwt), refresher)
        } else {
            (None, None)
        };
        Ok(Authenticator {
            anonymous,
            anonymous_loopback_only: config.anonymous == Anonymous::Loopback,
            tokens,
            jwt,
            certificates,
            refresher,
        })
    }

    /// The caller presenting `credentials`, if `rule` lets it in. Every refusal is an audit
    /// line. A configured caller (anonymous, a token's, a certificate's) is shared, not copied.
    pub fn authorize(
        &self,
        credentials: &Credentials<'_>,
        rpc: &str,
        needs: &[Role],
        audited: bool,
    ) -> Result<Arc<Caller>, Denied> {
        self.authorize_for(credentials, None, rpc, needs, audited)
    }

    /// `authorize`, with a JWT required to name `audience` in `aud` instead of
    /// `auth.jwt.audience` when one is given (an endpoint's own resource indicator, RFC 8707).
    pub fn authorize_for(
        &self,
        credentials: &Credentials<'_>,
        audience: Option<&str>,
        rpc: &str,
        needs: &[Role],
        audited: bool,
    ) -> Result<Arc<Caller>, Denied> {
        let caller = match self.authenticate(credentials, audience) {
            Ok(caller) => caller,
            Err(why) => {
                // Every field from a request is recorded as a string, which the text format
                // writes quoted and escaped (the JSON format as a JSON string), so a token's
                // `kid` or a JWT's claims cannot forge fields of the line.
                tracing::warn!(
                    target: "toolgate::audit",
                    rpc = rpc,
                    outcome = "unauthenticated",
                    reason = audit_text(&why.to_string()).as_str(),
                    peer = ?credentials.peer,
                    "refused"
                );
                // The caller learns that its credential was refused, not why.
                return Err(Denied::Unauthenticated(why.told()));
            }
        };
        if !(needs.iter().any(|role| caller.has(*role)) || caller.has(Role::Admin)) {
            tracing::warn!(
                target: "toolgate::audit",
                rpc = rpc,
                outcome = "permission_denied",
                identity = audit_text(&caller.id).as_str(),
                tenant = audit_text(&caller.tenant).as_str(),
                method = caller.method.name(),
                roles = caller.role_names().as_str(),
                "refused"
            );
            return Err(Denied::PermissionDenied(format!(
                "{} needs the {} role; {} has {}",
                rpc,
                needs
                    .iter()
                    .map(|r| r.name())
                    .collect::<Vec<_>>()
                    .join(" or "),
                caller.id,
                if caller.roles.is_empty() {
                    "none".to_owned()
                } else {
                    caller.role_names()
                }
            )));
        }
        if audited {
            tracing::info!(
                target: "toolgate::audit",
                rpc = rpc,
                outcome = "allowed",
                identity = audit_text(&caller.id).as_str(),
                tenant = audit_text(&caller.tenant).as_str(),
                method = caller.method.name(),
                "admin action"
            );
        }
        Ok(caller)
    }

    /// Credentials win over the connection: a request that presents a token is judged by it
    /// alone (a wrong token is never let in as anonymous).
    fn authenticate(
        &self,
        credentials: &Credentials<'_>,
        audience: Option<&str>,
    ) -> Result<Arc<Caller>, Refused> {
        if let Some(header) = credentials.headers.get("authorization") {
            let text = header.to_str().map_err(|_| Refused::HeaderNotText)?;
            let Some(token) = strip_bearer(text) else {
                return Err(Refused::NotBearer);
            };
            return self.bearer(token, audience);
        }
        // A certificate is a credential: one that maps to no identity is refused, never let in
        // as anonymous (which from loopback could be an admin).
        if let Some(certs) = &credentials.certificates
            && let Some(leaf) = certs.first()
        {
            return self.certificate(leaf).ok_or(Refused::UnknownCertificate);
        }
        // A local IPv4 client of a `[::]` listener is `::ffff:127.0.0.1`. A request a proxy
        // forwarded (it says so in a header) is not from this machine, whatever the connection.
        let local = credentials
            .peer
            .is_some_and(|a| a.ip().to_canonical().is_loopback())
            && !forwarded(credentials.headers);
        match &self.anonymous {
            Some(caller) if local || !self.anonymous_loopback_only => Ok(caller.clone()),
            _ => Err(Refused::NoCredentials),
        }
    }

    fn bearer(&self, token: &str, audience: Option<&str>) -> Result<Arc<Caller>, Refused> {
        let looks_like_jwt = token.split('.').count() == 3;
        if looks_like_jwt && let Some(jwt) = &self.jwt {
            return Ok(Arc::new(jwt.verify(token, audience)?));
        }
        let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        // Digests, not tokens, are compared (a timing difference says nothing about a token),
        // each in full, and every one of them whatever matched first.
        let mut found = None;
        for (known, caller) in &self.tokens {
            let difference = known
                .iter()
                .zip(digest.as_ref())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b));
            if difference == 0 && found.is_none() {
                found = Some(caller.clone());
            }
        }
        found.ok_or(Refused::UnknownToken)
    }

    fn certificate(&self, leaf: &CertificateDer<'_>) -> Option<Arc<Caller>> {
        let cert = webpki::EndEntityCert::try_from(leaf).ok()?;
        self.certificates
            .iter()
            .find(|(name, _)| cert.verify_is_valid_for_subject_name(name).is_ok())
            .map(|(_, caller)| caller.clone())
    }
}

/// Whether a proxy says it forwarded the request: the headers the common ones add (RFC 7239,
/// the de facto `X-Forwarded-*` and `X-Real-IP`, Envoy's and Istio's). A request through one is
/// from wherever the proxy's client is, so a loopback connection does not make it local.
fn forwarded(headers: &http::HeaderMap) -> bool {
    headers.keys().any(|name| {
        let name = name.as_str();
        matches!(name, "forwarded" | "via" | "x-real-ip")
            || name.starts_with("x-forwarded-")
            || name.starts_with("x-envoy-")
    })
}

/// Whether a JWT's header (its first segment, base64url JSON) has a `crit` member.
fn header_names_crit(token: &str) -> bool {
    use base64::Engine as _;
    let Some(segment) = token.split('.').next() else {
        return false;
    };
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(segment)
        .ok()
        .and_then(|json| serde_json::from_slice::<serde_json::Map<String, Value>>(&json).ok())
        .is_some_and(|header| header.contains_key("crit"))
}

/// A value from a request as an audit field: no quote or backslash (the log's redactor works on
/// the formatted line, and one that consumed an escaping backslash would end the quoted field
/// early), no control character, at most 256 characters.
pub(crate) fn audit_text(text: &str) -> String {
    text.chars()
        .take(256)
        .map(|c| match c {
            '"' => '\'',
            '\\' => '/',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect()
}

fn strip_bearer(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn roles(names: &[String]) -> Vec<Role> {
    let mut roles: Vec<Role> = names.iter().filter_map(|n| Role::parse(n)).collect();
    roles.sort();
    roles.dedup();
    roles
}

/// The SHA-256 of a configured token: given as hex, or hashed from a file or variable.
fn token_digest(token: &TokenConfig) -> Result<[u8; 32], TokenError> {
    let secret = if !token.sha256.is_empty() {
        let mut digest = [0u8; 32];
        for (i, byte) in digest.iter_mut().enumerate() {
            let hex = token.sha256.get(2 * i..2 * i + 2).unwrap_or("");
            *byte = u8::from_str_radix(hex, 16).map_err(|_| TokenError::Sha256)?;
        }
        return Ok(digest);
    } else if !token.file.is_empty() {
        std::fs::read_to_string(&token.file)
            .map_err(|source| TokenError::File {
                path: token.file.clone(),
                source,
            })?
            .trim_end()
            .to_owned()
    } else {
        std::env::var(&token.env).map_err(|_| TokenError::Env(token.env.clone()))?
    };
    if secret.is_empty() {
        return Err(TokenError::Empty);
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    Ok(out)
}

fn certificate_identity(c: &CertificateIdentity) -> Option<(ServerName<'static>, Arc<Caller>)> {
    let name = ServerName::try_from(c.name.clone()).ok()?;
    Some((
        name,
        Arc::new(Caller {
            id: c.name.clone(),
            tenant: c.tenant.clone(),
            roles: roles(&c.roles),
            method: Method::Certificate,
        }),
    ))
}

/// JWTs checked against a JWKS, with issuer, audience, expiry and not-before.
struct Jwt {
    keys: RwLock<JwkSet>,
    url: Option<String>,
    client: reqwest::Client,
    issuer: String,
    audience: String,
    tenant_claim: String,
    roles_claim: String,
    default_roles: Vec<Role>,
    leeway: u64,
    /// When the keys were last fetched because a token named an unknown key.
    last_fetch: Mutex<Option<Instant>>,
}

/// At most one fetch per this long for tokens naming unknown keys.
const UNKNOWN_KEY_REFETCH: Duration = Duration::from_secs(30);

impl Jwt {
    async fn new(config: &JwtConfig) -> Result<Self, AuthError> {
        // The system's roots verify a JWKS served over https://.
        let client = toolgate_remotes::tls::client_builder(None, Duration::from_secs(10))
            .map_err(|e| AuthError::Tls(e.to_string()))?
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(AuthError::Client)?;
        let jwt = Jwt {
            keys: RwLock::new(JwkSet { keys: Vec::new() }),
            url: config.jwks_url.as_ref().map(|url| url.as_str().to_owned()),
            client,
            issuer: config.issuer.clone(),
            audience: config.audience.clone(),
            tenant_claim: config.tenant_claim.clone(),
            roles_claim: config.roles_claim.clone(),
            default_roles: roles(&config.default_roles),
            leeway: config.leeway.as_secs(),
            last_fetch: Mutex::new(None),
        };
        if let Some(file) = &config.jwks_file {
            let path = || file.display().to_string();
            let text = std::fs::read_to_string(file).map_err(|source| AuthError::JwksFile {
                path: path(),
                source: source.into(),
            })?;
            *jwt.keys.write() =
                serde_json::from_str(&text).map_err(|source| AuthError::JwksFile {
                    path: path(),
                    source: source.into(),
                })?;
        } else if let Err(error) = jwt.fetch().await {
            tracing::warn!(%error, "the JWKS was not fetched at start; JWTs are refused until it is");
        }
        Ok(jwt)
    }

    async fn fetch(&self) -> Result<(), JwksFetch> {
        let Some(url) = &self.url else {
            return Ok(());
        };
        let failed = |source| JwksFetch {
            url: url.to_string(),
            source,
        };
        let response = self
            .client
            .get(url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(failed)?;
        let set: JwkSet = response.json().await.map_err(failed)?;
        *self.keys.write() = set;
        Ok(())
    }

    async fn refresh_every(self: Arc<Self>, every: Duration) {
        loop {
            tokio::time::sleep(every).await;
            if let Err(error) = self.fetch().await {
                tracing::warn!(%error, "the JWKS refresh failed; the previous keys stay in use");
            }
        }
    }

    fn verify(self: &Arc<Self>, token: &str, audience: Option<&str>) -> Result<Caller, JwtRefused> {
        let header = jsonwebtoken::decode_header(token).map_err(JwtRefused::Malformed)?;
        // RFC 7515 §4.1.11: a header naming critical extensions this verifier does not know
        // must be refused (jsonwebtoken does not read `crit`).
        if header_names_crit(token) {
            return Err(JwtRefused::Critical);
        }
        let key = {
            let keys = self.keys.read();
            let jwk = match &header.kid {
                Some(kid) => keys.find(kid),
                None if keys.keys.len() == 1 => keys.keys.first(),
                None => None,
            };
            // A key that names its algorithm verifies that algorithm only: an RS256 key must not
            // accept PS256 or RS512 tokens.
            if let Some(jwk) = jwk
                && let Some(alg) = jwk.common.key_algorithm
                && alg.to_string().parse::<jsonwebtoken::Algorithm>().ok() != Some(header.alg)
            {
                return Err(JwtRefused::WrongAlgorithm {
                    signed: header.alg,
                    key: alg.to_string(),
                });
            }
            jwk.map(DecodingKey::from_jwk)
        };
        let Some(key) = key else {
            self.refetch_for_unknown_key();
            let kid = header.kid.as_deref().unwrap_or("(no kid)");
            return Err(JwtRefused::UnknownKey(kid.to_owned()));
        };
        let key = key.map_err(JwtRefused::UnusableKey)?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[audience.unwrap_or(&self.audience)]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = self.leeway;
        let data = jsonwebtoken::decode::<serde_json::Map<String, Value>>(token, &key, &validation)
            .map_err(JwtRefused::Malformed)?;
        let claims = data.claims;
        let id = claims
            .get("sub")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if id.is_empty() {
            return Err(JwtRefused::NoSubject);
        }
        let tenant = claims
            .get(&self.tenant_claim)
            .and_then(Value::as_str)
            .ok_or_else(|| JwtRefused::NoTenant(self.tenant_claim.clone()))?
            .to_owned();
        validate_tenant(&tenant).map_err(JwtRefused::BadTenant)?;
        let roles = match claims.get(&self.roles_claim) {
            Some(Value::Array(items)) => roles(
                &items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect::<Vec<_>>(),
            ),
            Some(Value::String(text)) => roles(
                &text
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect::<Vec<_>>(),
            ),
            _ => self.default_roles.clone(),
        };
        Ok(Caller {
            id,
            tenant,
            roles,
            method: Method::Jwt,
        })
    }

    /// A token names a key the JWKS lacks: the keys may have rotated. Fetch again, at most once
    /// per `UNKNOWN_KEY_REFETCH`, in the background.
    fn refetch_for_unknown_key(self: &Arc<Self>) {
        if self.url.is_none() {
            return;
        }
        {
            let mut last = self.last_fetch.lock();
            if last.is_some_and(|at| at.elapsed() < UNKNOWN_KEY_REFETCH) {
                return;
            }
            *last = Some(Instant::now());
        }
        let jwt = self.clone();
        tokio::spawn(async move {
            if let Err(error) = jwt.fetch().await {
                tracing::warn!(%error, "the JWKS fetch for an unknown key failed");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_headers_parse() {
        assert_eq!(strip_bearer("Bearer abc"), Some("abc"));
        assert_eq!(strip_bearer("bearer  abc "), Some("abc"));
        assert_eq!(strip_bearer("Basic abc"), None);
        assert_eq!(strip_bearer("Bearer "), None);
    }
}
