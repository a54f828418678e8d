//! Scratch tools: write, read and list files confined to the session's scratch directory.
//! Invariant: no input can name a path outside the directory, by `..`, an absolute path or a
//! symlink; such a path is a soft error the model can fix.

use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

use super::builtin::Builtin;
use super::{Annotations, BoxFuture, ToolContext, ToolError, ToolOutput, input_str};

/// Largest file the scratch tools write or read, in bytes.
const MAX_FILE_BYTES: usize = 1024 * 1024;
/// Most entries `scratch_list` returns.
const MAX_LIST_ENTRIES: usize = 1000;

/// A session's private scratch directory, made the first time a scratch tool needs it: a batch
/// whose tools never touch it costs no disk work (a `mkdir`/`rmdir` pair per batch was about
/// half of the server's CPU under load).
#[derive(Debug, Clone)]
pub struct ScratchDir {
    inner: Arc<ScratchState>,
}

#[derive(Debug)]
struct ScratchState {
    path: PathBuf,
    /// The directory has been made (saves a syscall on every later use, and tells removal
    /// whether there is anything to remove).
    created: AtomicBool,
}

impl ScratchDir {
    /// The directory at `path`, not made yet.
    pub fn new(path: PathBuf) -> Self {
        ScratchDir {
            inner: Arc::new(ScratchState {
                path,
                created: AtomicBool::new(false),
            }),
        }
    }

    /// Where the directory is (it may not exist yet).
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Makes the directory if it is not there yet and returns its path.
    pub async fn create(&self) -> std::io::Result<&Path> {
        if !self.inner.created.load(Ordering::Acquire) {
            tokio::fs::create_dir_all(&self.inner.path).await?;
            self.inner.created.store(true, Ordering::Release);
        }
        Ok(&self.inner.path)
    }

    /// Removes the directory and everything in it, if it was ever made.
    pub fn remove(&self) {
        if !self.inner.created.swap(false, Ordering::AcqRel) {
            return;
        }
        match std::fs::remove_dir_all(&self.inner.path) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(error) => {
                tracing::warn!(path = %self.inner.path.display(), %error, "scratch directory not removed");
            }
        }
    }
}

/// The call's scratch directory, made on first use. Tools never fall back to a directory shared
/// with other sessions: if it cannot be made, the call fails and says why.
async fn root(ctx: &ToolContext) -> Result<&Path, ToolError> {
    ctx.scratch
        .create()
        .await
        .map_err(|e| ToolError::failed(format!("scratch directory unavailable: {e}")))
}

pub(super) const SCRATCH_WRITE: Builtin = Builtin {
    name: "scratch_write",
    description: "Writes text to a file in the session's scratch directory, creating parent directories.",
    input_schema: || {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "relative path inside the scratch directory"},
                "content": {"type": "string"}
            },
            "required": ["path", "content"],
            "additionalProperties": false
        })
    },
    annotations: Annotations {
        idempotent: true,
        read_only: false,
        destructive: false,
        open_world: false,
    },
    concurrency_safe: false,
    path_is_resource: true,
    run: scratch_write,
};

pub(super) const SCRATCH_READ: Builtin = Builtin {
    name: "scratch_read",
    description: "Reads a text file from the session's scratch directory.",
    input_schema: || {
        json!({
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
            "additionalProperties": false
        })
    },
    annotations: READ_ONLY_FILES,
    concurrency_safe: true,
    path_is_resource: true,
    run: scratch_read,
};

pub(super) const SCRATCH_LIST: Builtin = Builtin {
    name: "scratch_list",
    description: "Lists the entries of a directory in the session's scratch directory (default: its root).",
    input_schema: || {
        json!({
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "additionalProperties": false
        })
    },
    annotations: READ_ONLY_FILES,
    concurrency_safe: true,
    path_is_resource: false,
    run: scratch_list,
};

/// Read-only and idempotent; not open-world.
const READ_ONLY_FILES: Annotations = Annotations {
    read_only: true,
    idempotent: true,
    destructive: false,
    open_world: false,
};

fn scratch_write<'a>(
    input: Value,
    ctx: &'a ToolContext,
) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
    Box::pin(async move {
        let path = required_str(&input, "path")?;
        let Some(content) = input_str(&input, "content")? else {
            return Err(ToolError::invalid_input("'content' is required"));
        };
        if content.len() > MAX_FILE_BYTES {
            return Err(ToolError::invalid_input(format!(
                "content is {} bytes; the limit is {MAX_FILE_BYTES}",
                content.len()
            )));
        }
        let root = root(ctx).await?;
        let target = confine(root, path)?;
        // Checked before creating parents: a symlinked directory must not lead outside,
        // and create_dir_all would otherwise follow it.
        confine_resolved(root, &target, path).await?;
        if let Some(parent) = target.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| io_error(path, &e))?;
        }
        tokio::fs::write(&target, content)
            .await
            .map_err(|e| io_error(path, &e))?;
        Ok(ToolOutput::Json(
            json!({"path": path, "bytes": content.len()}),
        ))
    })
}

fn scratch_read<'a>(
    input: Value,
    ctx: &'a ToolContext,
) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
    Box::pin(async move {
        let path = required_str(&input, "path")?;
        let root = root(ctx).await?;
        let target = confine(root, path)?;
        confine_resolved(root, &target, path).await?;
        let meta = tokio::fs::metadata(&target)
            .await
            .map_err(|e| io_error(path, &e))?;
        if meta.len() > MAX_FILE_BYTES as u64 {
            return Err(ToolError::failed(format!(
                "'{path}' is {} bytes; the limit is {MAX_FILE_BYTES}",
                meta.len()
            )));
        }
        let bytes = tokio::fs::read(&target)
            .await
            .map_err(|e| io_error(path, &e))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| ToolError::failed(format!("'{path}' is not UTF-8 text")))?;
        Ok(ToolOutput::Text(text))
    })
}

fn scratch_list<'a>(
    input: Value,
    ctx: &'a ToolContext,
) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
    Box::pin(async move {
        let path = input_str(&input, "path")?.unwrap_or("");
        let root = root(ctx).await?;
        let target = if path.is_empty() || path == "." {
            root.to_path_buf()
        } else {
            confine(root, path)?
        };
        confine_resolved(root, &target, path).await?;
        let mut dir = tokio::fs::read_dir(&target)
            .await
            .map_err(|e| io_error(path, &e))?;
        let mut entries = Vec::new();
        while let Some(entry) = dir.next_entry().await.map_err(|e| io_error(path, &e))? {
            let kind = match entry.file_type().await {
                Ok(t) if t.is_dir() => "dir",
                Ok(_) => "file",
                Err(_) => "unknown",
            };
            entries.push(json!({"name": entry.file_name().to_string_lossy(), "kind": kind}));
            if entries.len() >= MAX_LIST_ENTRIES {
                break;
            }
        }
        entries.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        Ok(ToolOutput::Json(json!({"path": path, "entries": entries})))
    })
}

fn required_str<'a>(input: &'a Value, key: &str) -> Result<&'a str, ToolError> {
    match input_str(input, key)? {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Err(ToolError::invalid_input(format!("'{key}' is required"))),
    }
}

/// Joins a relative path onto the scratch directory, refusing anything that could leave it.
fn confine(root: &Path, relative: &str) -> Result<PathBuf, ToolError> {
    let escape = || {
        ToolError::invalid_input(format!(
            "path '{relative}' escapes the scratch directory: use a relative path without '..'"
        ))
    };
    if relative.contains('\0') {
        return Err(ToolError::invalid_input(
            "the path contains a NUL byte, which no file name can".to_owned(),
        ));
    }
    let mut out = root.to_path_buf();
    for component in Path::new(relative).components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(escape());
            }
        }
    }
    if out == root {
        return Err(ToolError::invalid_input(format!(
            "path '{relative}' names no file"
        )));
    }
    Ok(out)
}

/// Resolves symlinks of the deepest existing ancestor and checks it is still under the root.
async fn confine_resolved(root: &Path, target: &Path, relative: &str) -> Result<(), ToolError> {
    let root = tokio::fs::canonicalize(root)
        .await
        .map_err(|e| ToolError::failed(format!("scratch directory unavailable: {e}")))?;
    let mut probe = target.to_path_buf();
    loop {
        match tokio::fs::canonicalize(&probe).await {
            Ok(resolved) if resolved.starts_with(&root) => return Ok(()),
            Ok(_) => {
                return Err(ToolError::invalid_input(format!(
                    "path '{relative}' escapes the scratch directory through a symlink"
                )));
            }
            Err(e) if e.kind() == ErrorKind::NotFound && probe.pop() => {}
            Err(e) => return Err(io_error(relative, &e)),
        }
    }
}

/// A filesystem error as the call's answer. What the input named wrongly (a missing file, a
/// name no path can have, a file where a directory was meant) is the call's fault: it is
/// INVALID_ARGUMENTS and never counts against the tool's health, so one session's bad paths
/// cannot open the breaker for everyone.
fn io_error(path: &str, error: &std::io::Error) -> ToolError {
    match error.kind() {
        ErrorKind::NotFound => ToolError::invalid_input(format!("'{path}' does not exist")),
        ErrorKind::InvalidInput
        | ErrorKind::InvalidFilename
        | ErrorKind::NotADirectory
        | ErrorKind::IsADirectory => ToolError::invalid_input(format!("'{path}': {error}")),
        _ => ToolError::failed(format!("'{path}': {error}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::Tool;

    fn scratch(name: &str) -> ToolContext {
        let dir = std::env::temp_dir().join(format!(
            "toolgate-scratch-test-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        ToolContext::new("s", "c", 0, dir)
    }

    #[tokio::test]
    async fn write_read_list_round_trip() {
        let ctx = scratch("roundtrip");
        SCRATCH_WRITE
            .call(json!({"path": "a/b.txt", "content": "héllo"}), &ctx)
            .await
            .unwrap();
        let read = SCRATCH_READ
            .call(json!({"path": "a/b.txt"}), &ctx)
            .await
            .unwrap();
        assert_eq!(read, ToolOutput::Text("héllo".into()));
        let list = SCRATCH_LIST.call(json!({}), &ctx).await.unwrap();
        assert_eq!(
            list,
            ToolOutput::Json(json!({"path": "", "entries": [{"name": "a", "kind": "dir"}]}))
        );
        let _ = std::fs::remove_dir_all(ctx.scratch.path());
    }

    #[tokio::test]
    async fn paths_that_escape_are_soft_errors() {
        let ctx = scratch("escape");
        for path in ["../x", "/etc/passwd", "a/../../x", ".", ""] {
            let err = SCRATCH_WRITE
                .call(json!({"path": path, "content": "x"}), &ctx)
                .await
                .unwrap_err();
            assert_eq!(
                err.kind,
                crate::tools::ToolErrorKind::InvalidInput,
                "{path}: {err}"
            );
        }
        let err = SCRATCH_READ
            .call(json!({"path": "../../etc/passwd"}), &ctx)
            .await
            .unwrap_err();
        assert!(
            err.message.contains("escapes the scratch directory"),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(ctx.scratch.path());
    }

    #[tokio::test]
    async fn symlinks_out_of_the_directory_are_refused() {
        let ctx = scratch("symlink");
        std::os::unix::fs::symlink("/etc", ctx.scratch.path().join("link")).unwrap();
        let err = SCRATCH_READ
            .call(json!({"path": "link/hostname"}), &ctx)
            .await
            .unwrap_err();
        assert!(err.message.contains("through a symlink"), "{err}");
        let err = SCRATCH_WRITE
            .call(json!({"path": "link/new", "content": "x"}), &ctx)
            .await
            .unwrap_err();
        assert!(err.message.contains("through a symlink"), "{err}");
        let err = SCRATCH_WRITE
            .call(
                json!({"path": "link/toolgate-new-dir/f", "content": "x"}),
                &ctx,
            )
            .await
            .unwrap_err();
        assert!(err.message.contains("through a symlink"), "{err}");
        assert!(!std::path::Path::new("/etc/toolgate-new-dir").exists());
        let _ = std::fs::remove_dir_all(ctx.scratch.path());
    }

    #[tokio::test]
    async fn missing_files_say_so() {
        let ctx = scratch("missing");
        let err = SCRATCH_READ
            .call(json!({"path": "nope.txt"}), &ctx)
            .await
            .unwrap_err();
        assert_eq!(err.message, "'nope.txt' does not exist");
        // The input's fault, not the tool's: never a health failure.
        assert_eq!(err.kind, crate::tools::ToolErrorKind::InvalidInput);
        let _ = std::fs::remove_dir_all(ctx.scratch.path());
    }
}
