//! Scratch tools: write, read and list files confined to the session's scratch directory.
//! Invariant: no input can reach a file outside the directory: `..` and absolute paths are
//! refused as written, and every name is then opened beneath the directory's descriptor without
//! following symlinks (`scratch/beneath.rs`); such a path is a soft error the model can fix.

mod beneath;
mod dir;
mod shared;

use std::ffi::OsString;
use std::path::{Component, Path};

use serde_json::{Value, json};

use super::builtin::Builtin;
use super::{Annotations, BoxFuture, ToolContext, ToolError, ToolOutput, input_str};
use beneath::{BeneathError, Budget};

pub use dir::ScratchDir;
pub use dir::{DEFAULT_QUOTA_BYTES, unguessable_name};
pub use shared::{Entry, FileError, ScratchStore, SharedScratch, entry_bytes};

/// Largest file the scratch tools write or read, in bytes.
const MAX_FILE_BYTES: usize = 1024 * 1024;
/// Most entries `scratch_list` returns.
const MAX_LIST_ENTRIES: usize = 1000;
/// Most names in a scratch path: deeper trees cost a descriptor per level to walk.
const MAX_DEPTH: usize = 32;

/// The call's scratch directory, made on first use. Tools never fall back to a directory shared
/// with other sessions: if it cannot be made, the call fails and says why.
async fn root(ctx: &ToolContext) -> Result<std::path::PathBuf, ToolError> {
    ctx.scratch
        .create()
        .await
        .map_err(|e| ToolError::failed(format!("scratch directory unavailable: {e}")))
}

/// Runs blocking filesystem work off the async workers.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, BeneathError> + Send + 'static,
) -> Result<T, BeneathError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| BeneathError::Io(std::io::Error::other(e)))?
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
        let parts = confine(path)?;
        if let Some(shared) = &ctx.shared_scratch {
            let key = joined(&parts)?;
            (shared.store.write(shared, &key, content).await).map_err(|e| unwritten(path, e))?;
            return Ok(ToolOutput::Json(
                json!({"path": path, "bytes": content.len()}),
            ));
        }
        let root = root(ctx).await?;
        let scratch = ctx.scratch.clone();
        let bytes = content.as_bytes().to_vec();
        blocking(move || {
            let (quota, mut used) = scratch.budget();
            let mut budget = Budget {
                quota,
                used: &mut used,
            };
            beneath::write(&root, &parts, &bytes, &mut budget)
        })
        .await
        .map_err(|e| refused(path, e))?;
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
        let parts = confine(path)?;
        if let Some(shared) = &ctx.shared_scratch {
            let key = joined(&parts)?;
            let text = shared.store.read(shared, &key).await;
            return text.map(ToolOutput::Text).map_err(|e| unwritten(path, e));
        }
        let root = root(ctx).await?;
        let bytes = blocking(move || beneath::read(&root, &parts, MAX_FILE_BYTES as u64))
            .await
            .map_err(|e| refused(path, e))?;
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
        let parts = components(path)?;
        let entries: Vec<(String, &str)> = if let Some(shared) = &ctx.shared_scratch {
            let dir = joined(&parts)?;
            let listed = shared.store.list(shared, &dir, MAX_LIST_ENTRIES).await;
            let listed = listed.map_err(|e| unwritten(path, e))?;
            listed.into_iter().map(|e| (e.name, e.kind)).collect()
        } else {
            let root = root(ctx).await?;
            let listed = blocking(move || beneath::list(&root, &parts, MAX_LIST_ENTRIES))
                .await
                .map_err(|e| refused(path, e))?;
            listed.into_iter().map(|e| (e.name, e.kind)).collect()
        };
        let mut entries = entries;
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let entries: Vec<Value> = entries
            .into_iter()
            .map(|(name, kind)| json!({"name": name, "kind": kind}))
            .collect();
        Ok(ToolOutput::Json(json!({"path": path, "entries": entries})))
    })
}

/// Removes `path` and everything beneath it with the descriptors bounded at any depth, never
/// following a symlink inside (a session's scratch directory, or a server's base of them).
pub fn remove_tree(path: &Path) -> std::io::Result<()> {
    beneath::remove_all(path).map_err(|error| match error {
        BeneathError::Io(error) => error,
        other => std::io::Error::other(other.to_string()),
    })
}

fn required_str<'a>(input: &'a Value, key: &str) -> Result<&'a str, ToolError> {
    match input_str(input, key)? {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Err(ToolError::invalid_input(format!("'{key}' is required"))),
    }
}

/// The names of a path to a file inside the scratch directory, refusing anything that could
/// leave it as written.
fn confine(relative: &str) -> Result<Vec<OsString>, ToolError> {
    let parts = components(relative)?;
    if parts.is_empty() {
        return Err(ToolError::invalid_input(format!(
            "path '{relative}' names no file"
        )));
    }
    Ok(parts)
}

/// The names of a relative path (none for the directory itself): `.` is skipped, `..` and an
/// absolute path are refused.
fn components(relative: &str) -> Result<Vec<OsString>, ToolError> {
    if relative.contains('\0') {
        return Err(ToolError::invalid_input(
            "the path contains a NUL byte, which no file name can".to_owned(),
        ));
    }
    let mut parts = Vec::new();
    for component in Path::new(relative).components() {
        if parts.len() == MAX_DEPTH {
            return Err(ToolError::invalid_input(format!(
                "path '{}' is more than {MAX_DEPTH} names deep",
                crate::json::truncate_chars(relative, 200)
            )));
        }
        match component {
            Component::Normal(part) => parts.push(part.to_owned()),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(ToolError::invalid_input(format!(
                    "path '{relative}' escapes the scratch directory: use a relative path without '..'"
                )));
            }
        }
    }
    Ok(parts)
}

/// Why an operation on `path` did not happen, as the call's answer. What the input named wrongly
/// (a missing file, a symlink, a name no path can have, a file where a directory was meant) and a
/// full quota are the call's fault: INVALID_ARGUMENTS, never counted against the tool's health,
/// so one session's bad paths cannot open the breaker for everyone.
fn refused(path: &str, error: BeneathError) -> ToolError {
    match error {
        BeneathError::Symlink => ToolError::invalid_input(format!(
            "path '{path}' goes through a symlink, which the scratch tools never follow"
        )),
        BeneathError::NotAFile => {
            ToolError::invalid_input(format!("'{path}' is not a regular file"))
        }
        BeneathError::Linked => ToolError::invalid_input(format!(
            "'{path}' has other hard links, which the scratch tools do not touch"
        )),
        BeneathError::TooLarge { size } => ToolError::failed(format!(
            "'{path}' is {size} bytes; the limit is {MAX_FILE_BYTES}"
        )),
        BeneathError::OverQuota { needed, quota } => ToolError::invalid_input(format!(
            "'{path}' was not written: the session's scratch files would take {needed} bytes, over its quota of {quota} (overwrite files with less to make room)"
        )),
        BeneathError::Io(error) => io_error(path, &error),
    }
}

/// A path's names as a shared store keys them: joined by `/`. A name that is not UTF-8 (or
/// holds `/`, which no component can) has no key.
fn joined(parts: &[OsString]) -> Result<String, ToolError> {
    let mut key = String::new();
    for part in parts {
        let Some(name) = part.to_str() else {
            return Err(ToolError::invalid_input(
                "scratch paths must be UTF-8 text".to_owned(),
            ));
        };
        if !key.is_empty() {
            key.push('/');
        }
        key.push_str(name);
    }
    Ok(key)
}

/// Why a shared store did not do it, as the call's answer: the classes of a directory on disk
/// (`refused`), and its texts where the store has the same case (a missing file, a directory,
/// the quota); a session that ended is the tool failing; a store that failed is its own class,
/// which no breaker counts, and a write whose answer never came is another (it may have
/// happened).
fn unwritten(path: &str, error: FileError) -> ToolError {
    match error {
        FileError::NotFound => ToolError::invalid_input(format!("'{path}' does not exist")),
        FileError::NotAFile => ToolError::invalid_input(format!("'{path}' is not a regular file")),
        FileError::NotADirectory => ToolError::invalid_input(format!(
            "'{path}': a name on its way is a file, not a directory"
        )),
        FileError::OverQuota { needed, quota } => {
            refused(path, BeneathError::OverQuota { needed, quota })
        }
        FileError::TenantOverQuota { quota } => ToolError::invalid_input(format!(
            "'{path}' was not written: the scratch files of this tenant's sessions would take more than {quota} bytes (overwrite files with less, or end sessions no longer needed)"
        )),
        FileError::Ended => ToolError::failed(format!(
            "'{path}' was not written: the session ended while the call ran"
        )),
        FileError::Unavailable(why) => {
            tracing::warn!(target: "toolgate::session", error = %why, "scratch store unavailable");
            ToolError::store_unavailable(
                "the session store is unavailable: the scratch files cannot be reached; retry later",
            )
        }
        // Told "retry", a model would write again what may be there already (an append twice,
        // a file it meanwhile replaced): it is told to look first.
        FileError::OutcomeUnknown(why) => {
            tracing::warn!(target: "toolgate::session", error = %why, "scratch write outcome unknown");
            ToolError::outcome_unknown(format!(
                "'{path}' may or may not have been written: the session store did not answer in time; check before retrying (read it back with scratch_read)"
            ))
        }
    }
}

/// A filesystem error as the call's answer (see `refused`).
fn io_error(path: &str, error: &std::io::Error) -> ToolError {
    use std::io::ErrorKind;
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
mod tests;
