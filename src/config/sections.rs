//! The config's section types, one per `[section]`, grouped by what reads them (`sections/`).
//! Each type is followed by its `Default`, so a field's type, its one-line contract and its
//! default are read in one place; `config/default.toml` says the same defaults in the file's own
//! words (a test pins the two equal) and holds each key's full description, from which
//! `docs/configuration.md` is made.
//!
//! Values are typed as they are read (`parse.rs`): addresses are `SocketAddr`, URLs `Url`, the
//! trace sampler an enum, and a setting whose `""` means "off" or "unset" in the file is an
//! `Option`. Where the code has a type for a setting, the section holds that type itself (no
//! mirror types): breaker, bindings, rule actions, hook failure modes, permission verdicts, cache
//! scopes, per-tool loop and retry.

mod hooks;
mod mcp;
mod observability;
mod pipeline;
mod remotes;
mod security;
mod server;
mod sessions;

use super::parse;

pub use hooks::*;
pub use mcp::*;
pub use observability::*;
pub use pipeline::*;
pub use remotes::*;
pub use security::*;
pub use server::*;
pub use sessions::*;

/// The default tool-name glob of rules, hooks and permission rules: every tool.
fn any_tool() -> String {
    "*".to_owned()
}
