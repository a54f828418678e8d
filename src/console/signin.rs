//! Who looks at the console: a request's own credentials (a bearer token or JWT, as on gRPC;
//! anonymous callers as `[auth]` says), or a sign-in, made on the login page from a token and
//! kept server-side behind an HttpOnly, SameSite=Strict cookie (`Secure`, and `__Host-`, under
//! TLS) with its own CSRF token. A sign-in holds the token it was made from and judges it again
//! on every request, so it never outlives its credential (a JWT expired or signed by a key the
//! JWKS dropped). The console needs the `approver` or `admin` role.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http::HeaderMap;
use parking_lot::Mutex;

use crate::front::auth::{Authenticator, Credentials, Denied};
use toolgate_core::identity::{Caller, Role};

/// What the audit lines call the console's requests.
pub(super) const RPC: &str = "console";
/// Sign-ins one identity holds at once.
const PER_IDENTITY: usize = 16;

/// Who is looking, and how they proved it.
#[derive(Clone)]
pub(super) struct Viewer {
    pub caller: Arc<Caller>,
    /// The sign-in's CSRF token: changes need it. `None` for a request that carried its own
    /// credentials (a script's bearer token), which a browser does not add by itself.
    pub csrf: Option<String>,
}

/// A new sign-in.
pub(super) struct SignedIn {
    pub caller: Arc<Caller>,
    /// The `Set-Cookie` value.
    pub cookie: String,
    /// The CSRF token of the sign-in, given to the browser this once: the page keeps it in
    /// storage of this origin alone, never in a page served again (a cookie reaches every port
    /// of the host; this does not).
    pub proof: String,
}

/// What a request's credentials came to.
pub(super) enum Who {
    Viewer(Viewer),
    /// No credentials: sign in.
    SignIn,
    /// Credentials without the role, or refused: the text says which, never the credential.
    Refused(Denied),
}

/// A sign-in.
struct Signed {
    caller: Arc<Caller>,
    /// The token it was made from, judged again on each request: the server holds it as it
    /// holds the sign-in (in memory, never written out), and a browser never sees it again.
    token: String,
    csrf: String,
    until: Instant,
    made: Instant,
}

/// The console's sign-ins, by their cookie's value.
pub(super) struct SignIns {
    auth: Arc<Authenticator>,
    held: Mutex<HashMap<String, Signed>>,
    ttl: Duration,
    max: usize,
    /// Under TLS the cookie is `Secure` and `__Host-` prefixed.
    tls: bool,
}

impl SignIns {
    pub(super) fn new(auth: Arc<Authenticator>, ttl: Duration, max: usize, tls: bool) -> Self {
        SignIns {
            auth,
            held: Mutex::new(HashMap::new()),
            ttl,
            max,
            tls,
        }
    }

    /// The cookie's name.
    fn cookie(&self) -> &'static str {
        if self.tls {
            "__Host-toolgate_console"
        } else {
            "toolgate_console"
        }
    }

    /// Who sent a request with `headers` from `peer`: its sign-in's cookie when it has a live
    /// one, else its own credentials.
    pub(super) fn who(&self, headers: &HeaderMap, peer: Option<SocketAddr>) -> Who {
        // The first of the request's cookies that names a live sign-in: a cookie another page
        // of this host set under the same name (cookies are not bound to a port) cannot shadow
        // it.
        let live = self.cookie_values(headers).find_map(|id| {
            let mut held = self.held.lock();
            match held.get(&id) {
                Some(signed) if signed.until > Instant::now() => {
                    Some((id, signed.token.clone(), signed.csrf.clone()))
                }
                Some(_) => {
                    held.remove(&id);
                    None
                }
                None => None,
            }
        });
        // Judged outside the lock: a JWT's signature takes a while.
        if let Some((id, token, csrf)) = live {
            let judged =
                bearer(&token).map(|headers| self.judge(&Credentials::new(&headers, peer, None)));
            match judged {
                Some(Ok(caller)) => {
                    return Who::Viewer(Viewer {
                        caller,
                        csrf: Some(csrf),
                    });
                }
                // The credential no longer lets it in: the sign-in ends with it.
                _ => {
                    self.held.lock().remove(&id);
                }
            }
        }
        let carried = headers.contains_key(http::header::AUTHORIZATION);
        match self.judge(&Credentials::new(headers, peer, None)) {
            Ok(caller) => Who::Viewer(Viewer { caller, csrf: None }),
            // No credentials of its own (anonymous, refused or without the role): the person
            // signs in.
            Err(_) if !carried => Who::SignIn,
            Err(denied) => Who::Refused(denied),
        }
    }

    /// Signs in with `token` from `peer`: the caller, the `Set-Cookie` value of the new
    /// sign-in, and its proof (the CSRF token every change carries), which the browser is given
    /// this once.
    pub(super) fn sign_in(
        &self,
        token: &str,
        peer: Option<SocketAddr>,
    ) -> Result<SignedIn, Denied> {
        let token = token.trim();
        let headers = bearer(token)
            .ok_or_else(|| Denied::Unauthenticated("the token is not one".to_owned()))?;
        let caller = self.judge(&Credentials::new(&headers, peer, None))?;
        // A sign-in lasts no longer than the JWT it was made from.
        let lasts = match jwt_expiry(token) {
            Some(exp) => self
                .ttl
                .min(exp.duration_since(SystemTime::now()).unwrap_or_default()),
            None => self.ttl,
        };
        let unavailable = || Denied::Unauthenticated("sign-ins are unavailable".to_owned());
        let id = super::random_hex().ok_or_else(unavailable)?;
        let proof = super::random_hex().ok_or_else(unavailable)?;
        let now = Instant::now();
        let mut held = self.held.lock();
        held.retain(|_, signed| signed.until > now);
        // One identity's sign-ins end its own oldest first: it cannot sign everyone else out.
        let same = |signed: &Signed| {
            signed.caller.id == caller.id
                && signed.caller.tenant == caller.tenant
                && signed.caller.method == caller.method
        };
        let own = held.values().filter(|signed| same(signed)).count();
        let oldest = |held: &HashMap<String, Signed>, only_own: bool| {
            held.iter()
                .filter(|(_, signed)| !only_own || same(signed))
                .min_by_key(|(_, signed)| signed.made)
                .map(|(id, _)| id.clone())
        };
        if own >= PER_IDENTITY
            && let Some(oldest) = oldest(&held, true)
        {
            held.remove(&oldest);
        } else if held.len() >= self.max
            && let Some(oldest) = oldest(&held, false)
        {
            held.remove(&oldest);
        }
        held.insert(
            id.clone(),
            Signed {
                caller: caller.clone(),
                token: token.to_owned(),
                csrf: proof.clone(),
                until: now + lasts,
                made: now,
            },
        );
        let cookie = format!(
            "{}={id}; Path={}; Max-Age={}; HttpOnly; SameSite=Strict{}",
            self.cookie(),
            if self.tls { "/" } else { "/console" },
            lasts.as_secs(),
            if self.tls { "; Secure" } else { "" }
        );
        Ok(SignedIn {
            caller,
            cookie,
            proof,
        })
    }

    /// Ends the sign-in the request's cookie names; the `Set-Cookie` value that clears it.
    pub(super) fn sign_out(&self, headers: &HeaderMap) -> String {
        for id in self.cookie_values(headers) {
            self.held.lock().remove(&id);
        }
        format!(
            "{}=; Path={}; Max-Age=0; HttpOnly; SameSite=Strict{}",
            self.cookie(),
            if self.tls { "/" } else { "/console" },
            if self.tls { "; Secure" } else { "" }
        )
    }

    /// The caller `credentials` prove, with a role that may use the console.
    fn judge(&self, credentials: &Credentials<'_>) -> Result<Arc<Caller>, Denied> {
        self.auth.authorize_for(
            credentials,
            None,
            RPC,
            &[Role::Approver, Role::Admin],
            false,
        )
    }

    /// The sign-in ids the request's cookies of this console's name carry, in order.
    fn cookie_values<'h>(&self, headers: &'h HeaderMap) -> impl Iterator<Item = String> + 'h {
        let name = self.cookie();
        headers
            .get_all(http::header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .filter(move |(key, _)| *key == name)
            .map(|(_, value)| value)
            .filter(|value| value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(str::to_owned)
    }
}

/// Headers presenting `token` as a bearer token; `None` when it cannot be a header's value.
fn bearer(token: &str) -> Option<HeaderMap> {
    let value = http::HeaderValue::from_str(&format!("Bearer {token}")).ok()?;
    let mut headers = HeaderMap::new();
    headers.insert(http::header::AUTHORIZATION, value);
    Some(headers)
}

/// Whether a change from `viewer` may be made: its sign-in's CSRF token in the form (a request
/// with its own credentials needs none), from a page of this very host (`same_origin`).
pub(super) fn change_allowed(
    viewer: &Viewer,
    form_csrf: Option<&str>,
    headers: &HeaderMap,
) -> bool {
    let token = match &viewer.csrf {
        None => true,
        // Compared in full whatever differs first (both are 64 hex digits when right).
        Some(expected) => form_csrf.is_some_and(|sent| {
            sent.len() == expected.len()
                && sent
                    .bytes()
                    .zip(expected.bytes())
                    .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                    == 0
        }),
    };
    same_origin(headers) && token
}

/// Whether the request's `Origin`, when the browser sent one, is this very host.
pub(super) fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(http::header::ORIGIN) else {
        return true;
    };
    let host = headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    origin
        .to_str()
        .ok()
        .and_then(|origin| origin.split_once("://"))
        .is_some_and(|(_, rest)| !host.is_empty() && rest == host)
}

/// When the JWT `token` expires (its `exp`), if it is one: read after the token was verified,
/// so its claims are the issuer's.
fn jwt_expiry(token: &str) -> Option<SystemTime> {
    use base64::Engine as _;
    let mut parts = token.split('.');
    let (_, claims, _) = (parts.next()?, parts.next()?, parts.next()?);
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(claims.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let exp = claims.get("exp")?.as_u64()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(exp))
}
