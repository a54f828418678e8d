//! The tower stack around every tool invocation, built in one function from config.
//! Request: an owned `Invocation`; response: `Invoked`; errors are data (`Reply::Error`), so the
//! stack's error type is `Infallible` and a layer can never fail a batch.

mod cache;
mod core;
mod output_cap;
mod permission;
mod redact;
mod select;
mod timeout;
mod unknown_tool;
mod validate;

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;
use tower::ServiceBuilder;
use tower::util::BoxCloneSyncService;

use crate::safety::hooks::GateRecord;
use crate::tools::ErrorClass;
use crate::tools::{Registered, ToolContext, ToolOutput};

pub use cache::{Cache, CacheKey, CacheRule, CacheScope, Cached, Lookup, SharedCache};
pub(crate) use cache::{CacheLayer, ResultCache};
pub(crate) use core::Core;
pub use output_cap::CharBudget;
pub(crate) use output_cap::{OutputCapLayer, truncate_output};
pub(crate) use permission::PermissionLayer;
pub use permission::{Permission, PermissionRule, PermissionVerdict, Permissions};
pub(crate) use redact::RedactLayer;
pub use redact::{PatternError, Redactor};
pub(crate) use select::SelectLayer;
pub use select::select;
pub use timeout::Timeout;
pub(crate) use timeout::TimeoutLayer;
pub(crate) use unknown_tool::unknown_tool_message;
pub(crate) use validate::ValidateLayer;
pub use validate::{Validate, violations_of};

/// One execution of a tool, as the middleware sees it.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The tool to run, as its call resolved it (`Registered`): every layer and the core use
    /// this one, never the registry again.
    pub tool: Arc<Registered>,
    /// Shared with the driver, which keeps it for post hooks and retries; the tool gets a copy.
    pub input: Arc<Value>,
    /// The canonical JSON of `input`, when the driver has already built it (for loop detection),
    /// so the cache keys on it without building it again.
    pub canonical: Option<Arc<str>>,
    pub ctx: ToolContext,
    /// The model turn, for cache lifetimes counted in turns.
    pub turn: u32,
    /// The request's own call timeout, when it set one.
    pub requested_timeout: Option<Duration>,
    /// The request's deadline; no call runs past it.
    pub deadline: Option<Instant>,
    /// What is left of the batch-wide output budget, if one is set.
    pub budget: Option<Arc<CharBudget>>,
    /// The permission rule (its gate source, `permissions[<id>]`) whose ask a person approved
    /// for this attempt (the driver asked before the call was admitted): it lets the call
    /// through.
    pub approved: Option<Arc<str>>,
}

impl Invocation {
    /// The tool's registered name, which per-tool settings are keyed by.
    pub fn name(&self) -> &str {
        self.tool.name()
    }
}

/// What a tool invocation produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Output(ToolOutput),
    Error {
        class: ErrorClass,
        message: String,
        retryable: bool,
        /// Output produced before the failure, if any.
        output: Option<ToolOutput>,
    },
}

/// The stack's response.
#[derive(Debug, Clone, PartialEq)]
pub struct Invoked {
    pub reply: Reply,
    /// Answered from the cache: the tool did not run.
    pub cached: bool,
    /// The output cap cut the content.
    pub truncated: bool,
    /// Permission decisions, for `gate_decision` events.
    pub gates: Vec<GateRecord>,
    /// A layer answered before the tool ran (permission, validation, quarantine, unknown tool):
    /// the attempt is not an execution.
    pub refused: bool,
    /// The call timed out under a deadline the client set shorter than the tool's own (its
    /// `options.call_timeout` or gRPC deadline): the client's impatience, not the tool's fault.
    pub client_deadline: bool,
    /// The output's content text, when the output cap (the outermost layer, so nothing changes
    /// the output after it) already wrote it to measure it.
    pub content: Option<String>,
}

impl Invoked {
    pub fn reply(reply: Reply) -> Self {
        Invoked {
            reply,
            cached: false,
            truncated: false,
            gates: Vec::new(),
            refused: false,
            client_deadline: false,
            content: None,
        }
    }

    pub fn error(class: ErrorClass, message: impl Into<String>) -> Self {
        Invoked::reply(Reply::Error {
            class,
            message: message.into(),
            retryable: false,
            output: None,
        })
    }

    /// A refusal before the tool ran.
    pub fn refused(class: ErrorClass, message: impl Into<String>) -> Self {
        let mut invoked = Invoked::error(class, message);
        invoked.refused = true;
        invoked
    }
}

/// A layer's future: the inner service's own when the layer has nothing to do once it answers
/// (no allocation, no extra indirection), or a boxed one that does.
pub(crate) type LayerFuture<F> =
    futures::future::Either<F, crate::tools::BoxFuture<'static, Result<Invoked, Infallible>>>;

/// A layer's answer given without calling the inner service (a refusal, a cache hit).
pub fn answered<F>(invoked: Invoked) -> LayerFuture<F> {
    futures::future::Either::Right(Box::pin(async move { Ok(invoked) }))
}

/// The assembled stack.
pub(crate) type ToolService = BoxCloneSyncService<Invocation, Invoked, Infallible>;

/// Middleware settings, resolved from the config. `Default` is the product's, but for the
/// redactor (disabled: the server builds it from `[redaction]`, whose patterns it compiles).
#[derive(Debug, Clone)]
pub struct MiddlewareConfig {
    pub default_timeout: Duration,
    pub tool_timeouts: BTreeMap<String, Duration>,
    pub permissions: Vec<PermissionRule>,
    pub validate: bool,
    pub max_output_chars: usize,
    pub tool_output_chars: BTreeMap<String, usize>,
    pub redactor: Arc<Redactor>,
    pub cache_rules: BTreeMap<String, CacheRule>,
    /// Tool → JSON pointer of the path it writes; its success evicts cached entries of that path.
    pub cache_invalidators: BTreeMap<String, String>,
    pub cache_max_entries: usize,
    pub cache_max_bytes: usize,
    /// Where the cache counts its evictions.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// A cache every server shares (a session store's); `None`: this server's own.
    pub shared_cache: Option<Arc<dyn SharedCache>>,
    pub suggestion_threshold: f64,
    /// Tools whose JSON objects pass through whole (no result selection).
    pub select_pass_through: BTreeSet<String>,
}

/// The product's defaults for the middleware's values, defined once: `MiddlewareConfig`
/// defaults to them, and so do the server's config sections (plain values: reading one builds
/// no redactor and no instruments).
#[derive(Debug, Clone, Copy)]
pub struct MiddlewareDefaults {
    pub call_timeout: Duration,
    pub validate: bool,
    pub max_output_chars: usize,
    pub cache_max_entries: usize,
    pub cache_max_bytes: usize,
    pub suggestion_threshold: f64,
}

pub const DEFAULTS: MiddlewareDefaults = MiddlewareDefaults {
    call_timeout: Duration::from_secs(60),
    validate: true,
    max_output_chars: 100_000,
    cache_max_entries: 1000,
    cache_max_bytes: 64 << 20,
    suggestion_threshold: 0.4,
};

impl Default for MiddlewareConfig {
    fn default() -> Self {
        MiddlewareConfig {
            default_timeout: DEFAULTS.call_timeout,
            tool_timeouts: BTreeMap::new(),
            permissions: Vec::new(),
            validate: DEFAULTS.validate,
            max_output_chars: DEFAULTS.max_output_chars,
            tool_output_chars: BTreeMap::new(),
            redactor: Arc::default(),
            cache_rules: BTreeMap::new(),
            cache_invalidators: BTreeMap::new(),
            cache_max_entries: DEFAULTS.cache_max_entries,
            cache_max_bytes: DEFAULTS.cache_max_bytes,
            metrics: Arc::default(),
            shared_cache: None,
            suggestion_threshold: DEFAULTS.suggestion_threshold,
            select_pass_through: BTreeSet::new(),
        }
    }
}

/// Builds the stack, outermost layer first. Each layer's comment says why it sits there.
pub fn stack(config: &MiddlewareConfig, permissions: Arc<Permissions>) -> ToolService {
    let cache = Arc::new(ResultCache::new(
        config.cache_max_entries,
        config.cache_max_bytes,
        config.metrics.clone(),
    ));
    let service = ServiceBuilder::new()
        // Output cap outermost: it measures exactly what leaves the pipeline, and it cuts text
        // only after redaction, so a cut can never expose half a secret.
        .layer(OutputCapLayer::new(
            config.max_output_chars,
            config.tool_output_chars.clone(),
        ))
        // Redaction next: every text produced inside (tool output, cached replays, validation
        // messages that echo arguments, permission reasons) passes through it.
        .layer(RedactLayer::new(config.redactor.clone()))
        // Result selection inside redaction and the cap, so both act on exactly what the model
        // will read; outside the cache, which keeps what the tool returned.
        .layer(SelectLayer::new(config.select_pass_through.clone()))
        // Permissions before anything that does work: a denied call never validates, never hits
        // the cache and never runs.
        .layer(PermissionLayer::new(permissions))
        // Validation before the cache and the tool: an invalid call is answered without either.
        .layer(ValidateLayer::new(config.validate))
        // The cache inside the policy layers (a hit cannot bypass them) and outside the timeout
        // (a hit needs no deadline).
        .layer(CacheLayer::new(
            cache,
            config.shared_cache.clone(),
            config.cache_rules.clone(),
            config.cache_invalidators.clone(),
        ))
        // The deadline wraps only the real work.
        .layer(TimeoutLayer::new(
            config.default_timeout,
            config.tool_timeouts.clone(),
        ))
        // The core runs the tool the call resolved, with panic isolation.
        .service(Core);
    BoxCloneSyncService::new(service)
}

#[cfg(test)]
mod tests;
