//! Server TLS: the certificate chain, key and client CA bundle are read from files into a rustls
//! server config that reloads (when a file changes, checked every `reload_interval`, or at once
//! on SIGHUP) without dropping a connection: each new connection takes the config current when
//! it arrives, and a reload that fails keeps the previous one. The transport (`transport.rs`)
//! runs the handshakes, bounded by `handshake_timeout`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::{Mutex, RwLock};
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio_util::sync::CancellationToken;

use crate::config::TlsConfig;

/// Where the TLS material is and how it is handled.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    cert: PathBuf,
    key: PathBuf,
    client_ca: Option<PathBuf>,
    require_client_cert: bool,
    reload_interval: Duration,
    handshake_timeout: Duration,
}

impl TlsSettings {
    /// The settings `[tls]` gives; `None` when TLS is off.
    pub(crate) fn from_config(config: &TlsConfig) -> Option<Self> {
        let (cert, key) = (config.cert_file.clone()?, config.key_file.clone()?);
        Some(TlsSettings {
            cert,
            key,
            client_ca: config.client_ca_file.clone(),
            require_client_cert: config.require_client_cert,
            reload_interval: config.reload_interval,
            handshake_timeout: config.handshake_timeout,
        })
    }

    fn files(&self) -> Vec<&PathBuf> {
        let mut files = vec![&self.cert, &self.key];
        files.extend(self.client_ca.as_ref());
        files
    }
}

/// The server's TLS: the current config, swapped on reload.
#[derive(Clone)]
pub struct Tls {
    settings: Arc<TlsSettings>,
    current: Arc<RwLock<Arc<ServerConfig>>>,
    /// What the files looked like when last loaded (modified time and length of each).
    seen: Arc<Mutex<Vec<Stamp>>>,
}

/// A file's modified time and length, `None` while it cannot be read.
type Stamp = Option<(SystemTime, u64)>;

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// Reads the files; any problem is named with the file it is in.
    pub fn load(settings: TlsSettings) -> Result<Self, TlsError> {
        let seen = stamps(&settings);
        let config = build(&settings)?;
        Ok(Tls {
            settings: Arc::new(settings),
            current: Arc::new(RwLock::new(Arc::new(config))),
            seen: Arc::new(Mutex::new(seen)),
        })
    }

    /// Reloads when a file changed (or always, when `force`); true if the config was replaced.
    /// A file that does not load leaves the current config in place.
    pub fn reload(&self, force: bool) -> Result<bool, TlsError> {
        let now = stamps(&self.settings);
        if !force && *self.seen.lock() == now {
            return Ok(false);
        }
        let config = build(&self.settings)?;
        *self.current.write() = Arc::new(config);
        *self.seen.lock() = now;
        Ok(true)
    }

    /// Reloads on SIGHUP and whenever a file changes, until `stop`.
    pub(crate) async fn watch(self, stop: CancellationToken) {
        let mut hangup =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        let interval = self.settings.reload_interval;
        loop {
            let forced = tokio::select! {
                () = stop.cancelled() => return,
                () = sleep_or_forever(interval) => false,
                Some(()) = recv(&mut hangup) => true,
            };
            match self.reload(forced) {
                Ok(true) => tracing::info!("the TLS certificate was reloaded"),
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(%error, "the TLS reload failed; the previous certificate stays in use");
                }
            }
        }
    }

    /// The current config: a connection takes the config current when its handshake starts.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.current.read().clone()
    }

    /// How long a client has to finish its handshake.
    pub fn handshake_timeout(&self) -> Duration {
        self.settings.handshake_timeout
    }
}

async fn sleep_or_forever(interval: Duration) {
    if interval.is_zero() {
        std::future::pending::<()>().await;
    }
    tokio::time::sleep(interval).await;
}

async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match signal {
        Some(signal) => signal.recv().await,
        None => std::future::pending().await,
    }
}

fn stamps(settings: &TlsSettings) -> Vec<Stamp> {
    settings
        .files()
        .iter()
        .map(|path| {
            let meta = std::fs::metadata(path).ok()?;
            Some((meta.modified().ok()?, meta.len()))
        })
        .collect()
}

/// TLS files that cannot be used; the text names the setting and the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{key} '{}': {source}", path.display())]
    Pem {
        key: &'static str,
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("{key} '{}': no {what} in it", path.display())]
    Empty {
        key: &'static str,
        path: PathBuf,
        what: &'static str,
    },
    #[error("tls.client_ca_file '{}': {source}", path.display())]
    Verifier {
        path: PathBuf,
        #[source]
        source: rustls::server::VerifierBuilderError,
    },
    #[error(
        "tls: the key in '{}' does not fit the certificate in '{}': {source}",
        key.display(),
        cert.display()
    )]
    KeyMismatch {
        key: PathBuf,
        cert: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("tls: {0}")]
    Rustls(#[source] rustls::Error),
}

/// A PEM file that does not read, named by its setting.
fn pem(key: &'static str, path: &Path) -> impl FnOnce(rustls::pki_types::pem::Error) -> TlsError {
    let path = path.to_owned();
    move |source| TlsError::Pem { key, path, source }
}

/// The rustls config from the files: TLS 1.2 and 1.3, ALPN `h2`, client certificates verified
/// against the CA bundle when one is set.
fn build(settings: &TlsSettings) -> Result<ServerConfig, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&settings.cert)
        .and_then(Iterator::collect)
        .map_err(pem("tls.cert_file", &settings.cert))?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            key: "tls.cert_file",
            path: settings.cert.clone(),
            what: "certificate",
        });
    }
    let key =
        PrivateKeyDer::from_pem_file(&settings.key).map_err(pem("tls.key_file", &settings.key))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Rustls)?;
    let builder = match &settings.client_ca {
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            let cas = CertificateDer::pem_file_iter(path)
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(pem("tls.client_ca_file", path))?;
            let (added, _) = roots.add_parsable_certificates(cas);
            if added == 0 {
                return Err(TlsError::Empty {
                    key: "tls.client_ca_file",
                    path: path.clone(),
                    what: "CA certificate",
                });
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if settings.require_client_cert {
                verifier.build()
            } else {
                verifier.allow_unauthenticated().build()
            }
            .map_err(|source| TlsError::Verifier {
                path: path.clone(),
                source,
            })?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config =
        builder
            .with_single_cert(certs, key)
            .map_err(|source| TlsError::KeyMismatch {
                key: settings.key.clone(),
                cert: settings.cert.clone(),
                source,
            })?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed(dir: &std::path::Path, name: &str) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
    }

    #[test]
    fn a_changed_file_is_reloaded_and_a_broken_one_keeps_the_old_config() {
        let dir = std::env::temp_dir().join(format!("toolgate-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        self_signed(&dir, "one.test");
        let settings = TlsSettings {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
            client_ca: None,
            require_client_cert: true,
            reload_interval: Duration::from_secs(1),
            handshake_timeout: Duration::from_secs(1),
        };
        let tls = Tls::load(settings).unwrap();
        assert!(!tls.reload(false).unwrap(), "nothing changed");
        let before = tls.current.read().clone();
        self_signed(&dir, "two.test.example");
        assert!(tls.reload(false).unwrap(), "a changed file is picked up");
        assert!(!Arc::ptr_eq(&before, &tls.current.read()));
        std::fs::write(dir.join("key.pem"), "not a key").unwrap();
        let kept = tls.current.read().clone();
        assert!(tls.reload(true).is_err());
        assert!(
            Arc::ptr_eq(&kept, &tls.current.read()),
            "the old config stays"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
