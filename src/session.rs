//! Sessions: per-session state keyed by a validated id; today that is the scratch directory.
//! Invariant: a session's scratch directory is `<base>/toolgate-<id>/` and no id can name a path
//! outside the base, because ids are restricted to `[A-Za-z0-9._-]` and may not be `.` or `..`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Longest session id accepted.
pub const MAX_SESSION_ID_LEN: usize = 128;

/// Checks a client-supplied session id; the error says what is allowed.
pub fn validate_session_id(id: &str) -> Result<(), String> {
    let valid_chars = id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if id.len() > MAX_SESSION_ID_LEN || !valid_chars || id == "." || id == ".." {
        return Err(format!(
            "session_id '{}' is invalid: use 1 to {MAX_SESSION_ID_LEN} ASCII letters, digits, '-', '_' or '.'",
            crate::json::truncate_chars(id, 64)
        ));
    }
    Ok(())
}

/// One session's state.
#[derive(Debug)]
pub struct Session {
    pub id: String,
    scratch_dir: PathBuf,
    /// A session made for one batch; its directory goes when the batch ends.
    ephemeral: bool,
}

impl Session {
    /// The scratch directory, created on first use. An error means tools get a path that does not
    /// exist (and say so); tools never fall back to a directory shared with other sessions.
    pub fn scratch_dir(&self) -> PathBuf {
        if let Err(error) = std::fs::create_dir_all(&self.scratch_dir) {
            tracing::warn!(session = %self.id, %error, "scratch directory could not be created");
        }
        self.scratch_dir.clone()
    }
}

/// All live sessions of one server.
#[derive(Debug)]
pub struct Sessions {
    base: PathBuf,
    /// Whether the base directory is this server's own (removed on stop) or an operator's.
    owns_base: bool,
    live: Mutex<HashMap<String, Arc<Session>>>,
    next_ephemeral: AtomicU64,
}

impl Sessions {
    /// Sessions whose scratch directories live under `base`; `owns_base` means the base itself
    /// is removed on stop (a per-server temp directory), otherwise only session directories are.
    pub fn new(base: PathBuf, owns_base: bool) -> Self {
        Sessions {
            base,
            owns_base,
            live: Mutex::new(HashMap::new()),
            next_ephemeral: AtomicU64::new(1),
        }
    }

    pub fn base(&self) -> &Path {
        &self.base
    }

    /// The named session (created on first use), or a fresh ephemeral one for an empty id.
    /// The id must have passed `validate_session_id`.
    pub fn open(&self, id: &str) -> Arc<Session> {
        if id.is_empty() {
            let n = self.next_ephemeral.fetch_add(1, Ordering::Relaxed);
            let id = format!("batch-{n}");
            return Arc::new(self.make(id, true));
        }
        let mut live = self
            .live
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        live.entry(id.to_owned())
            .or_insert_with(|| Arc::new(self.make(id.to_owned(), false)))
            .clone()
    }

    /// Ends a batch in `session`: an ephemeral session's directory is removed.
    pub fn release(&self, session: &Session) {
        if session.ephemeral {
            remove_dir(&session.scratch_dir);
        }
    }

    /// Removes every scratch directory (server stop).
    pub fn remove_all(&self) {
        let mut live = self
            .live
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        for session in live.values() {
            remove_dir(&session.scratch_dir);
        }
        live.clear();
        if self.owns_base {
            remove_dir(&self.base);
        }
    }

    fn make(&self, id: String, ephemeral: bool) -> Session {
        let scratch_dir = self.base.join(format!("toolgate-{id}"));
        Session {
            id,
            scratch_dir,
            ephemeral,
        }
    }
}

fn remove_dir(path: &Path) {
    match std::fs::remove_dir_all(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "scratch directory not removed")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_cannot_name_paths() {
        for ok in ["abc", "user-1_x.y", &"a".repeat(128)] {
            assert!(validate_session_id(ok).is_ok(), "{ok}");
        }
        for bad in [".", "..", "a/b", "../x", "a b", "é", &"a".repeat(129)] {
            assert!(validate_session_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn scratch_directories_are_per_session_and_removed() {
        let base =
            std::env::temp_dir().join(format!("toolgate-sessions-test-{}", std::process::id()));
        let sessions = Sessions::new(base.clone(), true);
        let named = sessions.open("alpha");
        assert!(Arc::ptr_eq(&named, &sessions.open("alpha")));
        let dir = named.scratch_dir();
        assert_eq!(dir, base.join("toolgate-alpha"));
        assert!(dir.is_dir());
        let once = sessions.open("");
        let once_dir = once.scratch_dir();
        assert_ne!(once.id, sessions.open("").id);
        sessions.release(&once);
        assert!(!once_dir.exists());
        sessions.release(&named);
        assert!(dir.exists(), "named sessions outlive a batch");
        sessions.remove_all();
        assert!(!base.exists());
    }

    #[test]
    fn an_operator_base_directory_is_kept() {
        let base =
            std::env::temp_dir().join(format!("toolgate-sessions-kept-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        std::fs::write(base.join("keep.txt"), "x").unwrap();
        let sessions = Sessions::new(base.clone(), false);
        let dir = sessions.open("beta").scratch_dir();
        sessions.remove_all();
        assert!(!dir.exists());
        assert!(base.join("keep.txt").exists());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
