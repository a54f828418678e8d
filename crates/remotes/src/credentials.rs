//! The bearer token of an HTTP tool or an MCP server over HTTP (`[remotes.auth]`): from an
//! environment variable, from a file read again when it changes, or from an OAuth 2.1
//! authorization server (the client credentials grant, `credentials/oauth.rs`). Token values
//! and secrets never reach a log, an error or the model.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::spec::AuthSpec;
use oauth::OAuth;

mod oauth;

/// A token or a client secret: compared, sent, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Arc<str>);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Why no token could be had. `Display` is the operator's text (it may name the variable, the
/// file or the authorization server, never a secret); `short` is the model's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    /// The environment variable or the file is missing, unreadable or empty.
    #[error("auth: {0}")]
    Source(String),
    /// Discovery found no authorization server (or a broken metadata document).
    #[error("oauth discovery: {0}")]
    Discovery(String),
    /// The authorization server refused the client (unknown, revoked, wrong secret).
    #[error("oauth: the authorization server refused the client credentials: {0}")]
    Refused(String),
    /// The token endpoint could not be reached or answered something unusable.
    #[error("oauth: the token endpoint failed: {0}")]
    TokenEndpoint(String),
}

impl CredentialError {
    /// The metric's reason.
    pub fn reason(&self) -> &'static str {
        match self {
            CredentialError::Source(_) => "credentials",
            CredentialError::Discovery(_) => "oauth_discovery",
            CredentialError::Refused(_) => "oauth_refused",
            CredentialError::TokenEndpoint(_) => "token_endpoint",
        }
    }

    /// The authorization server answered that it refuses the client: a configuration to fix,
    /// not a connection to retry (TOOL_ERROR rather than TRANSPORT).
    pub fn is_answer(&self) -> bool {
        matches!(self, CredentialError::Refused(_))
    }

    /// For the model: what went wrong, no address, no name of a variable or a file.
    pub fn short(&self) -> &'static str {
        match self {
            CredentialError::Source(_) => "its credentials are not configured on the server",
            CredentialError::Discovery(_) => "its authorization server could not be found",
            CredentialError::Refused(_) => "the authorization server refused toolgate's client",
            CredentialError::TokenEndpoint(_) => "no access token could be had (token endpoint)",
        }
    }
}

/// Where a remote's bearer token comes from.
pub struct Credentials {
    source: Source,
}

enum Source {
    Env(Secret),
    File(SecretFile),
    OAuth(Box<OAuth>),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.source {
            Source::Env(_) => "env",
            Source::File(_) => "file",
            Source::OAuth(_) => "oauth",
        };
        f.debug_struct("Credentials")
            .field("source", &kind)
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// The credentials `auth` describes for the remote at `url`, fetching over `http` (for
    /// OAuth), each request bounded by `timeout`. An environment variable is read now: a
    /// missing one is a configuration error.
    pub fn new(
        auth: &AuthSpec,
        url: &str,
        http: reqwest::Client,
        timeout: Duration,
    ) -> Result<Self, CredentialError> {
        let source = if let Some(name) = &auth.bearer_env {
            Source::Env(from_env(name, "bearer_env")?)
        } else if let Some(path) = &auth.bearer_file {
            let file = SecretFile::new(path, "bearer_file");
            file.read(false)?;
            Source::File(file)
        } else if let Some(oauth) = &auth.oauth {
            Source::OAuth(Box::new(OAuth::new(oauth, url, http, timeout)?))
        } else {
            return Err(CredentialError::Source("no source is set".to_owned()));
        };
        Ok(Credentials { source })
    }

    /// The token to send now.
    pub async fn token(&self) -> Result<Option<Secret>, CredentialError> {
        match &self.source {
            Source::Env(secret) => Ok(Some(secret.clone())),
            Source::File(file) => file.read(false).map(Some),
            Source::OAuth(oauth) => oauth.token().await,
        }
    }

    /// The remote answered `401` to `sent`: the token to retry with once, or `None` when there
    /// is no other (the failure stands). Its `WWW-Authenticate` is not read: where toolgate's
    /// credentials go is configured, never named by the remote.
    pub async fn rejected(&self, sent: Option<&Secret>) -> Result<Option<Secret>, CredentialError> {
        let fresh = match &self.source {
            Source::Env(_) => return Ok(None),
            Source::File(file) => file.read(true)?,
            Source::OAuth(oauth) => oauth.rejected(sent).await?,
        };
        Ok((Some(&fresh) != sent).then_some(fresh))
    }
}

fn from_env(name: &str, field: &str) -> Result<Secret, CredentialError> {
    match std::env::var(name) {
        Ok(value) if !value.trim().is_empty() => Ok(Secret(value.trim().into())),
        Ok(_) => Err(CredentialError::Source(format!(
            "{field}: the environment variable {name} is empty"
        ))),
        Err(_) => Err(CredentialError::Source(format!(
            "{field}: the environment variable {name} is not set"
        ))),
    }
}

/// A secret in a file (a mounted Kubernetes or compose secret), read again when it changes:
/// its modification time and length are looked at most once a second; after a `401` it is read
/// at once. Surrounding whitespace (the newline `echo` leaves) is not part of it.
struct SecretFile {
    path: String,
    field: &'static str,
    cached: parking_lot::Mutex<Option<Cached>>,
}

struct Cached {
    checked: Instant,
    stamp: (SystemTime, u64),
    secret: Secret,
}

/// How long a read file is trusted before its modification time is looked at again.
const FILE_RECHECK: Duration = Duration::from_secs(1);

impl SecretFile {
    fn new(path: &str, field: &'static str) -> Self {
        SecretFile {
            path: path.to_owned(),
            field,
            cached: parking_lot::Mutex::new(None),
        }
    }

    fn fail(&self, what: impl std::fmt::Display) -> CredentialError {
        CredentialError::Source(format!("{} '{}': {what}", self.field, self.path))
    }

    /// The file's secret. A stat and, when it changed, a read of a small file: done inline,
    /// at most once a second per remote.
    fn read(&self, force: bool) -> Result<Secret, CredentialError> {
        let mut cached = self.cached.lock();
        if let Some(c) = cached.as_ref()
            && !force
            && c.checked.elapsed() < FILE_RECHECK
        {
            return Ok(c.secret.clone());
        }
        let meta = std::fs::metadata(&self.path).map_err(|e| self.fail(e))?;
        let stamp = (meta.modified().map_err(|e| self.fail(e))?, meta.len());
        // After a 401 the file is read whatever its stamp says: a secret rotated to one of the
        // same length within the file system's time resolution looks unchanged.
        if let Some(c) = cached.as_mut()
            && c.stamp == stamp
            && !force
        {
            c.checked = Instant::now();
            return Ok(c.secret.clone());
        }
        const MAX_SECRET: u64 = 64 * 1024;
        if meta.len() > MAX_SECRET {
            return Err(self.fail(format_args!("larger than {MAX_SECRET} bytes")));
        }
        let text = std::fs::read_to_string(&self.path).map_err(|e| self.fail(e))?;
        let text = text.trim();
        if text.is_empty() {
            return Err(self.fail("empty"));
        }
        let secret = Secret(text.into());
        *cached = Some(Cached {
            checked: Instant::now(),
            stamp,
            secret: secret.clone(),
        });
        Ok(secret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_prints() {
        let secret = Secret("s3cr3t".into());
        assert_eq!(format!("{secret:?}"), "Secret(<redacted>)");
    }

    #[test]
    fn a_bearer_file_is_read_again_when_it_changes() {
        let dir = std::env::temp_dir().join(format!("toolgate-cred-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, "first\n").unwrap();
        let file = SecretFile::new(path.to_str().unwrap(), "bearer_file");
        assert_eq!(file.read(false).unwrap().expose(), "first");
        std::fs::write(&path, "second-token\n").unwrap();
        // Within the recheck interval the cached value stands unless forced (after a 401).
        assert_eq!(file.read(false).unwrap().expose(), "first");
        assert_eq!(file.read(true).unwrap().expose(), "second-token");
        // Rotated to a value of the same length with the same modification time: a forced
        // read still reads it.
        let stamp = std::fs::metadata(&path).unwrap().modified().unwrap();
        std::fs::write(&path, "second-TOKEN\n").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(stamp)
            .unwrap();
        assert_eq!(file.read(true).unwrap().expose(), "second-TOKEN");
        std::fs::write(&path, "  \n").unwrap();
        let error = file.read(true).unwrap_err().to_string();
        assert!(error.ends_with("': empty"), "{error}");
        std::fs::remove_file(&path).unwrap();
        let error = file.read(true).unwrap_err();
        assert_eq!(error.reason(), "credentials");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
