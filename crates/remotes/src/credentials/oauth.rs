//! OAuth 2.1 client credentials for one remote: where the authorization server is (the
//! configured token endpoint, or the RFC 8414 metadata the configured issuer publishes; never
//! one the remote names, since it receives the client's secret), how toolgate's client proves itself (a secret, with
//! rmcp's exchange; or a `private_key_jwt` assertion, with the oauth2 crate's request), and
//! when a token is fetched: cached, fetched again before it expires, once on a `401`, one fetch
//! for concurrent callers while a still-valid token keeps serving. Every request goes through
//! `HttpForOAuth`: bounded in time and size, no redirects. One piece: the fetch decision and
//! both exchanges share the authorization server's state and the one lock around it.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rmcp::transport::auth::{AuthorizationMetadata, ClientCredentialsConfig};
use rmcp::transport::{AuthorizationManager, OAuthHttpClient};

use super::{CredentialError, Secret, SecretFile, from_env};
use crate::assertion::SigningKey;
use crate::spec::OAuthSpec;

/// The client credentials grant for one remote.
pub(super) struct OAuth {
    client_id: String,
    scopes: Vec<String>,
    resource: String,
    token_url: Option<String>,
    secret: SecretSource,
    /// With a private key: the assertion's `kid` and `aud` (unset: the issuer, or the token
    /// endpoint).
    key_id: Option<String>,
    audience: Option<String>,
    /// The authorization server whose own metadata names the token endpoint (its RFC 8414
    /// `issuer`), when `token_url` is unset.
    issuer: Option<String>,
    http: Arc<HttpForOAuth>,
    base_url: String,
    /// The token in use.
    current: parking_lot::Mutex<Option<Token>>,
    /// Held by the one caller fetching a token; holds the authorization server once known.
    fetching: tokio::sync::Mutex<Option<Server>>,
}

/// How toolgate's client proves who it is to the authorization server.
enum SecretSource {
    Env(Secret),
    File(SecretFile),
    /// `private_key_jwt`: the PEM key signing each token request's assertion.
    PrivateKey(SecretFile),
}

/// The authorization server, once found.
struct Server {
    manager: AuthorizationManager,
    token_endpoint: String,
    issuer: Option<String>,
}

/// Why a secret or a key without a pinned authorization server is refused.
const UNPINNED: &str = "oauth: a client secret or private key goes only to a pinned authorization server; set auth.oauth.issuer or auth.oauth.token_url";

/// The part of an authorization server's RFC 8414 metadata this grant uses.
#[derive(serde::Deserialize)]
struct Published {
    issuer: Option<String>,
    token_endpoint: String,
}

/// RFC 7523's client assertion type.
const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

#[derive(Clone)]
struct Token {
    value: Secret,
    /// Fetch a new one from here on: `min(30 s, half the lifetime)` before it expires.
    refresh_at: Option<Instant>,
    expires_at: Option<Instant>,
}

impl Token {
    /// A token received at `received` that lives `lifetime` (unknown: until a 401). A lifetime
    /// past a day is taken as a day: the server's number never overflows the clock.
    fn new(value: Secret, received: Instant, lifetime: Option<Duration>) -> Self {
        let lifetime = lifetime.map(|l| l.min(MAX_LIFETIME));
        Token {
            value,
            refresh_at: lifetime.map(|l| received + l - REFRESH_MARGIN.min(l / 2)),
            expires_at: lifetime.map(|l| received + l),
        }
    }

    fn fresh(&self, now: Instant) -> bool {
        self.refresh_at.is_none_or(|at| now < at)
    }

    fn valid(&self, now: Instant) -> bool {
        self.expires_at.is_none_or(|at| now < at)
    }
}

/// A token is fetched again when less than this (or half its lifetime) is left.
const REFRESH_MARGIN: Duration = Duration::from_secs(30);

/// The longest lifetime a token is trusted for without being fetched again.
const MAX_LIFETIME: Duration = Duration::from_secs(24 * 3600);

impl OAuth {
    pub(super) fn new(
        spec: &OAuthSpec,
        url: &str,
        http: reqwest::Client,
        timeout: Duration,
    ) -> Result<Self, CredentialError> {
        let secret = match (
            &spec.client_secret_env,
            &spec.client_secret_file,
            &spec.private_key_file,
        ) {
            (Some(name), _, _) => SecretSource::Env(from_env(name, "oauth.client_secret_env")?),
            (None, Some(path), _) => {
                let file = SecretFile::new(path, "oauth.client_secret_file");
                file.read(false)?;
                SecretSource::File(file)
            }
            (None, None, Some(path)) => {
                let file = SecretFile::new(path, "oauth.private_key_file");
                // A key that cannot sign is a configuration error, found at start.
                SigningKey::from_pem(file.read(false)?.expose()).map_err(|e| file.fail(e))?;
                SecretSource::PrivateKey(file)
            }
            (None, None, None) => {
                return Err(CredentialError::Source(
                    "oauth: no client secret or private key is set".to_owned(),
                ));
            }
        };
        // The configuration check refuses this too; a remote built without it must not send
        // the secret wherever the remote points.
        if spec.token_url.is_none() && spec.issuer.is_none() {
            return Err(CredentialError::Source(UNPINNED.to_owned()));
        }
        Ok(OAuth {
            client_id: spec.client_id.clone(),
            scopes: spec.scopes.clone(),
            resource: spec.resource.clone().unwrap_or_else(|| url.to_owned()),
            token_url: spec.token_url.clone(),
            secret,
            key_id: spec.key_id.clone(),
            audience: spec.audience.clone(),
            issuer: spec.issuer.clone(),
            http: Arc::new(HttpForOAuth {
                client: http,
                timeout,
            }),
            base_url: url.to_owned(),
            current: parking_lot::Mutex::new(None),
            fetching: tokio::sync::Mutex::new(None),
        })
    }

    fn current(&self) -> Option<Token> {
        self.current.lock().clone()
    }

    pub(super) async fn token(&self) -> Result<Option<Secret>, CredentialError> {
        if let Some(token) = self.current()
            && token.fresh(Instant::now())
        {
            return Ok(Some(token.value));
        }
        // A token past its refresh point but still valid serves while another caller fetches
        // the next one: only callers without a valid token wait for the fetch.
        let valid = self.current().filter(|t| t.valid(Instant::now()));
        let mut server = match (&valid, self.fetching.try_lock()) {
            (_, Ok(server)) => server,
            (Some(token), Err(_)) => return Ok(Some(token.value.clone())),
            (None, Err(_)) => self.fetching.lock().await,
        };
        // Another caller may have fetched one while this one waited.
        let now = Instant::now();
        let current = self.current();
        if let Some(token) = &current
            && token.fresh(now)
        {
            return Ok(Some(token.value.clone()));
        }
        match self.fetch(&mut server).await {
            Ok(token) => Ok(Some(token)),
            // A token still valid serves until it expires; the next call tries again.
            Err(error) => match current.filter(|t| t.valid(now)) {
                Some(token) => {
                    tracing::warn!(target: "toolgate::tools::remote::auth", %error, "token refresh failed; the current token is used until it expires");
                    Ok(Some(token.value))
                }
                None => Err(error),
            },
        }
    }

    /// The remote refused `sent`: a new token. The remote's challenge is not read: the server
    /// that gets the client's credentials is the configured one, whatever the remote names.
    pub(super) async fn rejected(&self, sent: Option<&Secret>) -> Result<Secret, CredentialError> {
        let mut server = self.fetching.lock().await;
        // Another caller already replaced the rejected token: use its.
        if let Some(token) = self.current()
            && Some(&token.value) != sent
            && token.valid(Instant::now())
        {
            return Ok(token.value);
        }
        self.fetch(&mut server).await
    }

    /// Fetches a token (finding the authorization server first if it is not known yet),
    /// keeps it as the current one and answers it. The caller holds `fetching`.
    async fn fetch(&self, server: &mut Option<Server>) -> Result<Secret, CredentialError> {
        let server = match server {
            Some(server) => server,
            None => server.insert(self.authorization_server().await?),
        };
        let started = Instant::now();
        let (value, lifetime) = match &self.secret {
            SecretSource::Env(secret) => self.with_secret(server, secret.clone()).await?,
            SecretSource::File(file) => self.with_secret(server, file.read(true)?).await?,
            SecretSource::PrivateKey(file) => self.with_key(server, file).await?,
        };
        let token = Token::new(value.clone(), started, lifetime);
        tracing::debug!(target: "toolgate::tools::remote::auth", lifetime_s = lifetime.map(|l| l.as_secs()), "fetched an access token");
        *self.current.lock() = Some(token);
        Ok(value)
    }

    /// The token request with a client secret: rmcp's exchange.
    async fn with_secret(
        &self,
        server: &mut Server,
        client_secret: Secret,
    ) -> Result<(Secret, Option<Duration>), CredentialError> {
        let config = ClientCredentialsConfig::ClientSecret {
            client_id: self.client_id.clone(),
            client_secret: client_secret.expose().to_owned(),
            scopes: self.scopes.clone(),
            resource: Some(self.resource.clone()),
        };
        let manager = &mut server.manager;
        manager
            .configure_client_credentials(&config)
            .map_err(|e| CredentialError::Discovery(e.to_string()))?;
        let response = manager
            .exchange_client_credentials(&config)
            .await
            .map_err(token_error)?;
        Ok(issued(&response))
    }

    /// The token request with a signed client assertion (`private_key_jwt`): the oauth2
    /// crate's client credentials request, with the assertion in place of a secret.
    async fn with_key(
        &self,
        server: &Server,
        key_file: &SecretFile,
    ) -> Result<(Secret, Option<Duration>), CredentialError> {
        let pem = key_file.read(true)?;
        let key = SigningKey::from_pem(pem.expose()).map_err(|e| key_file.fail(e))?;
        let audience = self
            .audience
            .as_ref()
            .or(server.issuer.as_ref())
            .unwrap_or(&server.token_endpoint);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let assertion = key
            .assertion(&self.client_id, audience, self.key_id.as_deref(), now)
            .map_err(|e| key_file.fail(e))?;
        let token_url = oauth2::TokenUrl::new(server.token_endpoint.clone()).map_err(|e| {
            CredentialError::Discovery(format!("token endpoint '{}': {e}", server.token_endpoint))
        })?;
        let client = oauth2::basic::BasicClient::new(oauth2::ClientId::new(self.client_id.clone()))
            .set_auth_type(oauth2::AuthType::RequestBody)
            .set_token_uri(token_url);
        let mut request = client
            .exchange_client_credentials()
            .add_extra_param("client_assertion_type", JWT_BEARER)
            .add_extra_param("client_assertion", assertion)
            .add_extra_param("resource", self.resource.as_str());
        for scope in &self.scopes {
            request = request.add_scope(oauth2::Scope::new(scope.clone()));
        }
        // Each request's future owns its client: a borrowing closure's future is not `Send`
        // for every lifetime, which the MCP transport's task needs.
        let http = self.http.clone();
        let send = move |r: oauth2::HttpRequest| {
            let http = http.clone();
            async move { http.send(r, None).await }
        };
        let response = request.request_async(&send).await.map_err(exchange_error)?;
        Ok(issued(&response))
    }

    /// The authorization server: the configured token endpoint, or the one the configured
    /// issuer's metadata names. Nothing the remote names is fetched: its `401` may point at
    /// any address (an internal service, the cloud's metadata endpoint) and at a token
    /// endpoint of its own, which would receive the client's secret.
    async fn authorization_server(&self) -> Result<Server, CredentialError> {
        let http: Arc<dyn OAuthHttpClient> = self.http.clone();
        let mut manager =
            AuthorizationManager::new_with_oauth_http_client(self.base_url.as_str(), http)
                .await
                .map_err(|e| CredentialError::Discovery(e.to_string()))?;
        let token_endpoint = match (&self.token_url, &self.issuer) {
            (Some(token_url), _) => token_url.clone(),
            (None, Some(issuer)) => self.published_token_endpoint(issuer).await?,
            (None, None) => return Err(CredentialError::Source(UNPINNED.to_owned())),
        };
        let mut metadata = AuthorizationMetadata::default();
        metadata.token_endpoint = token_endpoint.clone();
        metadata.issuer = self.issuer.clone();
        // Required by oauth2's client type, never used by this grant.
        metadata.authorization_endpoint = token_endpoint;
        if !secure_endpoint(&metadata.token_endpoint) {
            return Err(CredentialError::Discovery(format!(
                "the token endpoint '{}' is not https:// (nor on loopback): the client's credentials would cross the network in the clear",
                metadata.token_endpoint
            )));
        }
        tracing::info!(target: "toolgate::tools::remote::auth", token_endpoint = %metadata.token_endpoint, "authorization server found");
        let (token_endpoint, issuer) = (metadata.token_endpoint.clone(), metadata.issuer.clone());
        manager.set_metadata(metadata);
        Ok(Server {
            manager,
            token_endpoint,
            issuer,
        })
    }

    /// The token endpoint `issuer` publishes in its RFC 8414 (or OpenID Connect) metadata, read
    /// at the addresses the issuer itself gives: the document must name that same issuer.
    async fn published_token_endpoint(&self, issuer: &str) -> Result<String, CredentialError> {
        // Read in the clear, the metadata could be made to name another token endpoint.
        if !secure_endpoint(issuer) {
            return Err(CredentialError::Discovery(format!(
                "the issuer '{issuer}' is not https:// (nor on loopback): its metadata, which names where the client's credentials go, would cross the network in the clear"
            )));
        }
        for url in metadata_urls(issuer)? {
            let request = http::Request::get(url.as_str())
                .header(http::header::ACCEPT, "application/json")
                .body(Vec::new())
                .map_err(|e| CredentialError::Discovery(format!("'{url}': {e}")))?;
            let response = self
                .http
                .send(request, None)
                .await
                .map_err(|e| CredentialError::Discovery(format!("'{url}': {e}")))?;
            if response.status() != http::StatusCode::OK {
                continue;
            }
            let Ok(published) = serde_json::from_slice::<Published>(response.body()) else {
                continue;
            };
            if !same_issuer(published.issuer.as_deref(), issuer) {
                return Err(CredentialError::Discovery(format!(
                    "'{url}' names the issuer '{}', not auth.oauth.issuer '{issuer}'",
                    published.issuer.as_deref().unwrap_or("(no issuer)")
                )));
            }
            return Ok(published.token_endpoint);
        }
        Err(CredentialError::Discovery(format!(
            "the issuer '{issuer}' publishes no OAuth metadata (RFC 8414); set auth.oauth.token_url"
        )))
    }
}

/// Where an issuer's metadata is: RFC 8414's well-known path inserted before the issuer's
/// path, then OpenID Connect's inserted and appended forms.
fn metadata_urls(issuer: &str) -> Result<Vec<String>, CredentialError> {
    let url = url::Url::parse(issuer)
        .map_err(|e| CredentialError::Discovery(format!("issuer '{issuer}': {e}")))?;
    let origin = url.origin().ascii_serialization();
    let path = url.path().trim_end_matches('/');
    let mut urls = vec![
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{origin}/.well-known/openid-configuration{path}"),
    ];
    if !path.is_empty() {
        urls.push(format!("{origin}{path}/.well-known/openid-configuration"));
    }
    Ok(urls)
}

/// Whether a metadata document's `issuer` is the configured one (a root path's trailing
/// slash aside, which URL libraries add and drop).
fn same_issuer(published: Option<&str>, configured: &str) -> bool {
    let Some(published) = published else {
        return false;
    };
    let bare = |s: &str| -> String {
        match url::Url::parse(s) {
            Ok(u) if u.path() == "/" && u.query().is_none() => s.trim_end_matches('/').to_owned(),
            _ => s.to_owned(),
        }
    };
    bare(published) == bare(configured)
}

/// The token a token response carries, and its lifetime if the server gave one.
fn issued(response: &impl oauth2::TokenResponse) -> (Secret, Option<Duration>) {
    let value = Secret(response.access_token().secret().as_str().into());
    (value, response.expires_in())
}

/// An `https://` URL, or an `http://` one on loopback.
fn secure_endpoint(url: &str) -> bool {
    let Ok(url) = url::Url::parse(url) else {
        return false;
    };
    url.scheme() == "https" || (url.scheme() == "http" && crate::spec::on_loopback(&url))
}

/// rmcp reports a failed exchange as text: oauth2's "Server returned error response: <code>"
/// is the authorization server's refusal, anything else the endpoint's failure.
fn token_error(error: rmcp::transport::AuthError) -> CredentialError {
    let text = error.to_string();
    let refused = [
        "invalid_client",
        "unauthorized_client",
        "invalid_grant",
        "access_denied",
    ]
    .iter()
    .any(|code| text.contains(code));
    if refused {
        CredentialError::Refused(text)
    } else {
        CredentialError::TokenEndpoint(text)
    }
}

/// The oauth2 crate's failed token request: the server's `invalid_client` (or another refusal
/// of the client) is a refusal, anything else the endpoint's failure.
fn exchange_error(
    error: oauth2::RequestTokenError<std::io::Error, oauth2::basic::BasicErrorResponse>,
) -> CredentialError {
    use oauth2::basic::BasicErrorResponseType as Code;
    match error {
        oauth2::RequestTokenError::ServerResponse(response) => {
            let refused = matches!(
                response.error(),
                Code::InvalidClient | Code::UnauthorizedClient | Code::InvalidGrant
            );
            if refused {
                CredentialError::Refused(response.to_string())
            } else {
                CredentialError::TokenEndpoint(response.to_string())
            }
        }
        oauth2::RequestTokenError::Request(e) => CredentialError::TokenEndpoint(e.to_string()),
        other => CredentialError::TokenEndpoint(other.to_string()),
    }
}

/// Every OAuth request (metadata documents, the token endpoint) goes through the remote's
/// own TLS settings and pinned addresses, on a client that follows no redirect (discovery
/// documents and token replies are read where they were asked for); bodies are capped.
struct HttpForOAuth {
    client: reqwest::Client,
    /// Bounds each request that names no timeout of its own: a token endpoint that accepts the
    /// connection and never answers must not hold the one fetch (and its callers) for ever.
    timeout: Duration,
}

/// The largest metadata document or token response read.
const MAX_OAUTH_BODY: usize = 1024 * 1024;

impl HttpForOAuth {
    /// Sends `request` and reads its reply, at most `MAX_OAUTH_BODY` bytes of it. A TLS failure
    /// stays in the error's causes.
    async fn send(
        &self,
        request: http::Request<Vec<u8>>,
        timeout: Option<Duration>,
    ) -> Result<http::Response<Vec<u8>>, std::io::Error> {
        let mut request = reqwest::Request::try_from(request).map_err(std::io::Error::other)?;
        *request.timeout_mut() = Some(timeout.unwrap_or(self.timeout));
        let url = request.url().clone();
        let mut response = self.client.execute(request).await.map_err(|e| {
            let tls = crate::tls::failure_in(&e).map(|f| f.detail);
            tracing::warn!(target: "toolgate::tools::remote::auth", %url, error = %e, tls, "oauth request failed");
            std::io::Error::other(e)
        })?;
        let mut builder = http::Response::builder().status(response.status());
        for (name, value) in response.headers() {
            builder = builder.header(name, value);
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(std::io::Error::other)? {
            if body.len() + chunk.len() > MAX_OAUTH_BODY {
                return Err(std::io::Error::other(format!(
                    "{url}: the reply is larger than {MAX_OAUTH_BODY} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        builder.body(body).map_err(std::io::Error::other)
    }
}

impl OAuthHttpClient for HttpForOAuth {
    fn execute(
        &self,
        request: rmcp::transport::OAuthHttpRequest,
    ) -> rmcp::transport::OAuthHttpClientFuture<'_> {
        Box::pin(async move { Ok(self.send(request.request, request.timeout).await?) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_endpoint_is_https_or_on_loopback() {
        for (url, secure) in [
            ("https://auth.example.com/token", true),
            ("http://127.0.0.1:8080/token", true),
            ("http://localhost/token", true),
            ("http://auth.example.com/token", false),
            ("http://10.0.0.1/token", false),
            ("ftp://auth.example.com/token", false),
            ("not a url", false),
        ] {
            assert_eq!(secure_endpoint(url), secure, "{url}");
        }
    }

    #[test]
    fn an_issuers_metadata_is_read_at_the_issuers_own_well_known_addresses() {
        assert_eq!(
            metadata_urls("https://auth.example.com/").unwrap(),
            [
                "https://auth.example.com/.well-known/oauth-authorization-server",
                "https://auth.example.com/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            metadata_urls("https://auth.example.com:8443/tenant/a").unwrap(),
            [
                "https://auth.example.com:8443/.well-known/oauth-authorization-server/tenant/a",
                "https://auth.example.com:8443/.well-known/openid-configuration/tenant/a",
                "https://auth.example.com:8443/tenant/a/.well-known/openid-configuration",
            ]
        );
        assert!(metadata_urls("not a url").is_err());
        for (published, configured, same) in [
            (
                Some("https://as.example.com"),
                "https://as.example.com/",
                true,
            ),
            (
                Some("https://as.example.com/"),
                "https://as.example.com",
                true,
            ),
            (
                Some("https://as.example.com/t/"),
                "https://as.example.com/t",
                false,
            ),
            (
                Some("https://evil.example.com"),
                "https://as.example.com",
                false,
            ),
            (None, "https://as.example.com", false),
        ] {
            assert_eq!(same_issuer(published, configured), same, "{published:?}");
        }
    }

    #[test]
    fn a_token_is_refreshed_before_it_expires() {
        let now = Instant::now();
        let secs = Duration::from_secs;
        // Short-lived: fetched again at half its lifetime.
        let token = Token::new(Secret("t".into()), now, Some(secs(4)));
        assert!(token.fresh(now + secs(1)));
        assert!(!token.fresh(now + secs(3)));
        assert!(token.valid(now + secs(3)));
        assert!(!token.valid(now + secs(5)));
        // Long-lived: 30 s before it expires.
        let token = Token::new(Secret("t".into()), now, Some(secs(3600)));
        assert!(token.fresh(now + secs(3569)));
        assert!(!token.fresh(now + secs(3571)));
        // No lifetime given: used until the remote answers 401.
        let token = Token::new(Secret("t".into()), now, None);
        assert!(token.fresh(now + secs(86_400)) && token.valid(now + secs(86_400)));
        // A lifetime no clock can hold is a day.
        let token = Token::new(Secret("t".into()), now, Some(Duration::MAX));
        assert!(token.valid(now + secs(86_399)) && !token.valid(now + secs(86_401)));
    }
}
