//! A session's scratch directory: made on first use, mode 0700, under an unguessable name, with
//! the byte count its quota is checked against.

use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

/// What a session may keep in its scratch directory unless configured otherwise (64 MiB).
pub const DEFAULT_QUOTA_BYTES: u64 = 64 * 1024 * 1024;

/// A session's private scratch directory, made the first time a scratch tool needs it: a batch
/// whose tools never touch it costs no disk work (a `mkdir`/`rmdir` pair per batch was about
/// half of the server's CPU under load).
#[derive(Debug, Clone)]
pub struct ScratchDir {
    inner: Arc<ScratchState>,
}

#[derive(Debug)]
struct ScratchState {
    place: Place,
    /// The directory once made; `None` before, and again after removal.
    made: Mutex<Option<PathBuf>>,
    /// Bytes the quota allows; 0: no quota.
    quota: u64,
    /// Bytes charged so far (see `beneath::Budget`). Held for the whole of a write, so the writes
    /// of one session are checked against the quota one at a time.
    used: Mutex<u64>,
}

#[derive(Debug, Clone)]
enum Place {
    /// Exactly this directory (an embedder's or a test's choice).
    Exact(PathBuf),
    /// A directory of a fresh unguessable name under this base (a session's).
    Under(PathBuf),
}

impl ScratchDir {
    /// Exactly the directory at `path`, not made yet, with the default quota.
    pub fn new(path: PathBuf) -> Self {
        ScratchDir::build(Place::Exact(path), DEFAULT_QUOTA_BYTES)
    }

    /// A directory `toolgate-<32 random hex digits>` under `base`, named and made on first use;
    /// `quota` bytes (0: none).
    pub fn under(base: PathBuf, quota: u64) -> Self {
        ScratchDir::build(Place::Under(base), quota)
    }

    /// The same place with another quota (0: none); for use before the directory is made.
    #[cfg(test)]
    pub(crate) fn with_quota(self, quota: u64) -> Self {
        ScratchDir::build(self.inner.place.clone(), quota)
    }

    fn build(place: Place, quota: u64) -> Self {
        ScratchDir {
            inner: Arc::new(ScratchState {
                place,
                made: Mutex::new(None),
                quota,
                used: Mutex::new(0),
            }),
        }
    }

    /// Where the directory is, once it has been made (or always, for an exact directory).
    pub fn path(&self) -> Option<PathBuf> {
        if let Some(path) = self.inner.made.lock().clone() {
            return Some(path);
        }
        match &self.inner.place {
            Place::Exact(path) => Some(path.clone()),
            Place::Under(_) => None,
        }
    }

    /// Makes the directory if it is not there yet and returns its path.
    pub async fn create(&self) -> std::io::Result<PathBuf> {
        if let Some(path) = self.inner.made.lock().clone() {
            return Ok(path);
        }
        let state = self.inner.clone();
        tokio::task::spawn_blocking(move || state.make())
            .await
            .map_err(std::io::Error::other)?
    }

    /// The quota in bytes (0: none) and the bytes charged so far, locked until the guard drops.
    pub(super) fn budget(&self) -> (u64, MutexGuard<'_, u64>) {
        (self.inner.quota, self.inner.used.lock())
    }

    /// Removes the directory and everything in it, if it was ever made; true once it is gone.
    /// A removal that fails keeps the directory made and its bytes charged, so the quota still
    /// holds and a later removal (the next end of the session, the server's stop) tries again.
    pub fn remove(&self) -> bool {
        let mut made = self.inner.made.lock();
        let Some(path) = made.clone() else {
            return true;
        };
        // Symlinks inside are removed, never followed; descriptors stay bounded at any depth.
        match super::beneath::remove_all(&path) {
            Ok(()) => {
                *made = None;
                *self.inner.used.lock() = 0;
                true
            }
            Err(error) => {
                tracing::warn!(target: "toolgate::tools::scratch::dir", path = %path.display(), %error, "scratch directory not removed");
                false
            }
        }
    }
}

impl ScratchState {
    /// Makes the directory (blocking). Everything made is mode 0700: other users can neither
    /// list nor enter it.
    fn make(&self) -> std::io::Result<PathBuf> {
        let mut made = self.made.lock();
        if let Some(path) = &*made {
            return Ok(path.clone());
        }
        let mut builder = std::fs::DirBuilder::new();
        builder.mode(0o700).recursive(true);
        let path = match &self.place {
            Place::Exact(path) => {
                builder.create(path)?;
                path.clone()
            }
            Place::Under(base) => {
                builder.create(base)?;
                let path = base.join(unguessable_name("toolgate-")?);
                // Not recursive: the name is new, so an entry already there (which nobody could
                // have guessed) is an error, never a directory to reuse.
                builder.recursive(false).create(&path)?;
                path
            }
        };
        *made = Some(path.clone());
        Ok(path)
    }
}

/// `prefix` followed by 128 random bits as 32 hex digits, from the operating system's source.
pub fn unguessable_name(prefix: &str) -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| std::io::Error::other(format!("no randomness: {e}")))?;
    let mut name = String::with_capacity(prefix.len() + 32);
    name.push_str(prefix);
    crate::hash::push_hex(&mut name, &bytes);
    Ok(name)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn names_are_128_random_bits() {
        let a = unguessable_name("toolgate-").unwrap();
        let b = unguessable_name("toolgate-").unwrap();
        assert_ne!(a, b);
        let digits = a.strip_prefix("toolgate-").unwrap();
        assert_eq!(digits.len(), 32);
        assert!(digits.bytes().all(|b| b.is_ascii_hexdigit()), "{a}");
    }

    #[tokio::test]
    async fn a_session_directory_is_private_and_unguessable() {
        let base = std::env::temp_dir().join(format!("toolgate-dir-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let first = ScratchDir::under(base.clone(), 0);
        assert_eq!(first.path(), None, "named on first use");
        let path = first.create().await.unwrap();
        assert_eq!(first.create().await.unwrap(), path, "made once");
        let second = ScratchDir::under(base.clone(), 0).create().await.unwrap();
        assert_ne!(path, second);
        for dir in [&base, &path, &second] {
            let mode = std::fs::metadata(dir).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", dir.display());
        }
        let name = path.file_name().unwrap().to_str().unwrap();
        assert_eq!(name.len(), "toolgate-".len() + 32, "{name}");
        first.remove();
        assert!(!path.exists() && second.exists());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
