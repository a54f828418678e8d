//! TLS for the HTTP clients of remotes (HTTP tools, MCP over HTTP) and of the server's own
//! fetches (a JWKS, OAuth endpoints): rustls on the ring provider, the system's trust store or a
//! CA file, an optional client certificate. SNI and hostname verification are always on: there
//! is no knob that turns them off. Every reqwest client in toolgate is built here
//! (`use_preconfigured_tls`), so none depends on a process-wide crypto provider.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::TlsSpec;

/// Why the TLS settings of a remote cannot be used; names the setting and the file, never a
/// key's content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    #[error("tls.{field} '{path}': {reason}")]
    File {
        field: &'static str,
        path: String,
        reason: String,
    },
    #[error("tls: cert_file and key_file go together")]
    HalfAnIdentity,
    #[error("tls: {0}")]
    Rustls(String),
}

/// The rustls client settings for `tls` (none: the system's roots, no client certificate).
pub fn client_config(tls: Option<&TlsSpec>) -> Result<rustls::ClientConfig, TlsError> {
    let roots = match tls.and_then(|t| t.ca_file.as_deref()) {
        Some(path) => Arc::new(ca_file(path)?),
        None => system_roots(),
    };
    let cert = tls.and_then(|t| t.cert_file.as_deref());
    let key = tls.and_then(|t| t.key_file.as_deref());
    config(roots, cert, key)
}

/// A client builder for a remote's authorization server (OAuth discovery and token
/// requests): the system's roots plus the remote's `ca_file` (an authorization server is often
/// a public identity provider while the remote's CA is private), and no client certificate
/// (it is the remote's, not the authorization server's).
pub fn authorization_client_builder(
    tls: Option<&TlsSpec>,
    connect_timeout: Duration,
) -> Result<reqwest::ClientBuilder, TlsError> {
    let roots = match tls.and_then(|t| t.ca_file.as_deref()) {
        Some(path) => {
            let mut roots = (*system_roots()).clone();
            roots.roots.extend(ca_file(path)?.roots);
            Arc::new(roots)
        }
        None => system_roots(),
    };
    Ok(builder(config(roots, None, None)?, connect_timeout))
}

fn config(
    roots: Arc<RootCertStore>,
    cert: Option<&str>,
    key: Option<&str>,
) -> Result<rustls::ClientConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?
        .with_root_certificates(roots);
    let mut config = match (cert, key) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(key)) => {
            let (chain, key) = identity(cert, key)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| TlsError::Rustls(format!("client certificate: {e}")))?
        }
        _ => return Err(TlsError::HalfAnIdentity),
    };
    // reqwest is built for HTTP/1.1 only; a preconfigured config must say so itself.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A reqwest client builder with the TLS settings of `tls`, pooled keep-alive connections and
/// `TCP_NODELAY` (a small request or reply never waits for the peer's delayed ACK). An idle
/// connection is dropped after 4 s, before the 5 s keep-alive timeout of Node's and uvicorn's
/// servers closes it under a request already sent.
pub fn client_builder(
    tls: Option<&TlsSpec>,
    connect_timeout: Duration,
) -> Result<reqwest::ClientBuilder, TlsError> {
    Ok(builder(client_config(tls)?, connect_timeout))
}

fn builder(config: rustls::ClientConfig, connect_timeout: Duration) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .use_preconfigured_tls(config)
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .pool_idle_timeout(Duration::from_secs(4))
}

fn read_err(field: &'static str, path: &str, reason: impl ToString) -> TlsError {
    TlsError::File {
        field,
        path: path.to_owned(),
        reason: reason.to_string(),
    }
}

/// The CA certificates of a PEM file (at least one).
fn ca_file(path: &str) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path).map_err(|e| read_err("ca_file", path, e))?;
    for cert in certs {
        let cert = cert.map_err(|e| read_err("ca_file", path, e))?;
        roots.add(cert).map_err(|e| read_err("ca_file", path, e))?;
    }
    if roots.is_empty() {
        return Err(read_err("ca_file", path, "no certificate in the file"));
    }
    Ok(roots)
}

/// A client certificate chain and its key, from PEM files.
fn identity(
    cert: &str,
    key: &str,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| read_err("cert_file", cert, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| read_err("cert_file", cert, e))?;
    if chain.is_empty() {
        return Err(read_err("cert_file", cert, "no certificate in the file"));
    }
    // The error of a key file never quotes the file.
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|_| read_err("key_file", key, "not a readable PEM private key"))?;
    Ok((chain, key))
}

/// The system's trust store, read once: loading it parses every file in the system's
/// certificate directory. A host without one gets an empty store and a warning, not an error:
/// `http://` remotes and those with a `ca_file` still work, and an `https://` remote without
/// one fails its handshake with "certificate not trusted".
fn system_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            let mut roots = RootCertStore::empty();
            let (added, _ignored) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = found
                    .errors
                    .first()
                    .map_or_else(|| "none found".to_owned(), ToString::to_string);
                tracing::warn!(target: "toolgate::tls", reason = %why, "no system root certificates: https:// remotes without tls.ca_file will not be trusted");
            }
            Arc::new(roots)
        })
        .clone()
}

/// A TLS failure found in an error's causes: what the metric, the log and the model get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFailure {
    /// The metric's reason: `tls_certificate` (the remote's certificate was refused) or
    /// `tls_handshake` (anything else, a refused client certificate among them).
    pub reason: &'static str,
    /// For the model: what went wrong, no address, no name.
    pub short: &'static str,
    /// For the log: rustls's own text.
    pub detail: String,
}

/// The TLS failure among `error`'s causes, if one is.
pub fn failure_in(error: &(dyn std::error::Error + 'static)) -> Option<TlsFailure> {
    cause::<rustls::Error>(error).map(classify)
}

/// The first `T` among `error`'s causes. An `io::Error`'s `source()` skips the error it
/// wraps (reqwest's connect errors nest one `io::Error` in another, rustls's error innermost),
/// so the chain goes on from the wrapped error itself.
pub fn cause<'a, T: std::error::Error + 'static>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(found) = e.downcast_ref::<T>() {
            return Some(found);
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
        {
            return cause::<T>(inner);
        }
        next = e.source();
    }
    None
}

fn classify(error: &rustls::Error) -> TlsFailure {
    use rustls::{AlertDescription as Alert, CertificateError as Cert};
    let detail = error.to_string();
    let (reason, short) = match error {
        rustls::Error::InvalidCertificate(cert) => (
            "tls_certificate",
            match cert {
                Cert::Expired | Cert::ExpiredContext { .. } => "its TLS certificate has expired",
                Cert::NotValidForName | Cert::NotValidForNameContext { .. } => {
                    "its TLS certificate is not valid for its host name"
                }
                Cert::UnknownIssuer => "its TLS certificate is not signed by a trusted CA",
                _ => "its TLS certificate was refused",
            },
        ),
        rustls::Error::AlertReceived(
            Alert::CertificateRequired
            | Alert::BadCertificate
            | Alert::UnknownCA
            | Alert::CertificateUnknown
            | Alert::AccessDenied,
        ) => (
            "tls_handshake",
            "the TLS handshake failed: it refused toolgate's client certificate (or none was set)",
        ),
        _ => ("tls_handshake", "the TLS handshake failed"),
    };
    TlsFailure {
        reason,
        short,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(ca: Option<&str>, cert: Option<&str>, key: Option<&str>) -> TlsSpec {
        TlsSpec {
            ca_file: ca.map(str::to_owned),
            cert_file: cert.map(str::to_owned),
            key_file: key.map(str::to_owned),
            domain: None,
        }
    }

    #[test]
    fn a_missing_or_empty_file_names_the_setting_and_the_file() {
        let dir = std::env::temp_dir().join(format!("toolgate-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let empty = empty.to_str().unwrap();
        let error = client_config(Some(&spec(Some("/nonexistent/ca.pem"), None, None)))
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("tls.ca_file '/nonexistent/ca.pem': "),
            "{error}"
        );
        let error = client_config(Some(&spec(Some(empty), None, None)))
            .unwrap_err()
            .to_string();
        assert!(error.ends_with("no certificate in the file"), "{error}");
        let error = client_config(Some(&spec(None, Some(empty), None))).unwrap_err();
        assert_eq!(error, TlsError::HalfAnIdentity);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_certificate_error_is_found_through_nested_io_errors() {
        // The shape reqwest reports a refused certificate in: io::Error(Other) around
        // io::Error(InvalidData) around rustls's error, behind the client's own error types.
        let rustls_error =
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let inner = std::io::Error::new(std::io::ErrorKind::InvalidData, rustls_error);
        let outer = std::io::Error::other(inner);
        let failure = failure_in(&outer).unwrap();
        assert_eq!(failure.reason, "tls_certificate");
        assert_eq!(
            failure.short,
            "its TLS certificate is not signed by a trusted CA"
        );
        assert_eq!(failure_in(&std::io::Error::other("refused")), None);
    }

    #[test]
    fn a_client_needs_no_process_wide_crypto_provider() {
        // reqwest panics in build() when it must pick a provider itself; ours is preconfigured.
        let client = client_builder(None, Duration::from_secs(1))
            .and_then(|b| b.build().map_err(|e| TlsError::Rustls(e.to_string())));
        assert!(client.is_ok(), "{client:?}");
    }
}
