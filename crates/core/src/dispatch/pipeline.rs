//! The safety pipeline's shared parts (hooks, health, policy, recovery, the middleware stack),
//! built from the engine's own typed settings: `PipelineSettings` holds every value the pipeline
//! reads, with the defaults defined once here (the server maps its config onto it, and a test
//! holds `config/default.toml` to these defaults); `Pipeline::builder` adds what is not a
//! setting (hooks, the reflector, where metrics and spans go, the approvals registry).

use std::sync::Arc;
use std::time::Duration;

use crate::approvals::{Approvals, AskPolicies};
use crate::metrics::Metrics;
use crate::middleware::{self, MiddlewareConfig, Permissions, Redactor, SharedCache, ToolService};
use crate::safety::breaker::BreakerConfig;
use crate::safety::health::Health;
use crate::safety::hooks::{Hook, Hooks};
use crate::safety::policy::Policy;
use crate::safety::recovery::{DefaultReflector, Reflector};
use crate::trace::Tracer;

/// Every setting the pipeline reads. `Default` gives the product's defaults, the only place the
/// engine defines them.
#[derive(Debug, Clone)]
pub struct PipelineSettings {
    /// Per-tool circuit breakers.
    pub breaker: BreakerConfig,
    /// Loop detection, memory and retries, with per-tool overrides.
    pub policy: Policy,
    /// The middleware stack: deadlines, permissions, validation, output caps, cache, redaction.
    pub middleware: MiddlewareConfig,
    /// Characters shared by all results of a batch (0 = none).
    pub batch_budget_chars: usize,
    /// Longest argument or result preview carried by an event.
    pub preview_chars: usize,
    /// Longest error text in a result or the fail-fast reason.
    pub max_error_chars: usize,
    /// How long an ask waits for a person at most.
    pub approval_timeout: Duration,
    /// Who may answer each hook's and rule's asks, and whether answers are remembered.
    pub ask_policies: AskPolicies,
}

/// The product's defaults for the pipeline's own values (the middleware's are
/// `middleware::DEFAULTS`), defined once: `PipelineSettings` and the server's config sections
/// read them.
#[derive(Debug, Clone, Copy)]
pub struct PipelineDefaults {
    pub batch_budget_chars: usize,
    pub preview_chars: usize,
    pub max_error_chars: usize,
    pub approval_timeout: Duration,
}

pub const DEFAULTS: PipelineDefaults = PipelineDefaults {
    batch_budget_chars: 0,
    preview_chars: 1024,
    max_error_chars: 2000,
    approval_timeout: Duration::from_secs(300),
};

impl Default for PipelineSettings {
    fn default() -> Self {
        PipelineSettings {
            breaker: BreakerConfig::default(),
            policy: Policy::default(),
            middleware: MiddlewareConfig::default(),
            batch_budget_chars: DEFAULTS.batch_budget_chars,
            preview_chars: DEFAULTS.preview_chars,
            max_error_chars: DEFAULTS.max_error_chars,
            approval_timeout: DEFAULTS.approval_timeout,
            ask_policies: AskPolicies::default(),
        }
    }
}

/// The safety pipeline's parts, shared by every call of a server. Built by `Pipeline::builder`.
#[derive(Clone)]
pub struct Pipeline {
    pub(crate) hooks: Hooks,
    pub(crate) health: Arc<Health>,
    pub(crate) policy: Arc<Policy>,
    pub(crate) reflector: Arc<dyn Reflector>,
    /// The middleware stack around every tool invocation.
    pub(crate) service: ToolService,
    /// The permission rules the stack's layer applies; the driver asks a person about a rule's
    /// `ask` from the same table, before the call is admitted.
    pub(crate) permissions: Arc<Permissions>,
    /// Also applied to memory and event arguments.
    pub(crate) redactor: Arc<Redactor>,
    pub(crate) batch_budget_chars: usize,
    pub(crate) suggestion_threshold: f64,
    pub(crate) preview_chars: usize,
    pub(crate) max_error_chars: usize,
    /// Where calls, attempts and batches are counted.
    pub(crate) metrics: Arc<Metrics>,
    /// Where batches and attempts are traced (ids only when tracing is off).
    pub(crate) tracer: Tracer,
    /// Where a call an ask paused waits for a person, in a batch with interactive approvals.
    pub(crate) approvals: Approvals,
}

impl Pipeline {
    /// A pipeline from `settings`, with no hooks, the built-in reflector, metrics nobody reads,
    /// tracing off and approvals of its own, until the builder says otherwise.
    pub fn builder(settings: PipelineSettings) -> PipelineBuilder {
        PipelineBuilder {
            settings,
            hooks: Vec::new(),
            reflector: Arc::new(DefaultReflector),
            metrics: Arc::default(),
            tracer: Tracer::off(),
            shared_cache: None,
        }
    }

    /// The breakers and tool health (for health reports and gauges).
    pub fn health(&self) -> &Arc<Health> {
        &self.health
    }

    /// The approvals registry asks wait in (the approval RPCs and a shared store attach here).
    pub fn approvals(&self) -> &Approvals {
        &self.approvals
    }
}

/// Builds a `Pipeline`: its settings, plus what is not a setting.
pub struct PipelineBuilder {
    settings: PipelineSettings,
    hooks: Vec<Arc<dyn Hook>>,
    reflector: Arc<dyn Reflector>,
    metrics: Arc<Metrics>,
    tracer: Tracer,
    shared_cache: Option<Arc<dyn SharedCache>>,
}

impl PipelineBuilder {
    /// The pre- and post-tool hooks, in the order they are asked.
    pub fn hooks(mut self, hooks: Vec<Arc<dyn Hook>>) -> Self {
        self.hooks = hooks;
        self
    }

    /// Judges failures for recovery (default: `DefaultReflector`).
    pub fn reflector(mut self, reflector: Arc<dyn Reflector>) -> Self {
        self.reflector = reflector;
        self
    }

    /// Where calls, attempts, batches and cache evictions are counted.
    pub fn metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Where batches and attempts are traced.
    pub fn tracer(mut self, tracer: Tracer) -> Self {
        self.tracer = tracer;
        self
    }

    /// A result cache every server shares (a session store's) instead of this server's own.
    pub fn shared_cache(mut self, cache: Arc<dyn SharedCache>) -> Self {
        self.shared_cache = Some(cache);
        self
    }

    pub fn build(self) -> Pipeline {
        let PipelineSettings {
            breaker,
            policy,
            mut middleware,
            batch_budget_chars,
            preview_chars,
            max_error_chars,
            approval_timeout,
            ask_policies,
        } = self.settings;
        middleware.metrics = self.metrics.clone();
        middleware.shared_cache = self.shared_cache;
        let permissions = Arc::new(Permissions::new(middleware.permissions.clone()));
        Pipeline {
            hooks: Hooks::new(self.hooks),
            health: Arc::new(Health::new(breaker)),
            policy: Arc::new(policy),
            reflector: self.reflector,
            service: middleware::stack(&middleware, permissions.clone()),
            permissions,
            redactor: middleware.redactor.clone(),
            batch_budget_chars,
            suggestion_threshold: middleware.suggestion_threshold,
            preview_chars,
            max_error_chars,
            metrics: self.metrics,
            tracer: self.tracer,
            approvals: Approvals::with_policies(approval_timeout, ask_policies),
        }
    }
}
