//! The safety pipeline's shared parts: hooks, health, policy, recovery, the middleware stack.

use std::sync::Arc;

use crate::approvals::Approvals;
use crate::metrics::Metrics;
use crate::middleware::{self, MiddlewareConfig, Permissions, Redactor, ToolService};
use crate::safety::health::Health;
use crate::safety::hooks::Hooks;
use crate::safety::policy::Policy;
use crate::safety::recovery::{DefaultReflector, Reflector};
use crate::trace::Tracer;

/// The safety pipeline's parts, shared by every call of a server.
#[derive(Clone)]
pub struct Pipeline {
    pub hooks: Hooks,
    pub health: Arc<Health>,
    pub policy: Arc<Policy>,
    pub reflector: Arc<dyn Reflector>,
    /// The middleware stack around every tool invocation.
    pub service: ToolService,
    /// The permission rules the stack's layer applies; the driver asks a person about a rule's
    /// `ask` from the same table, before the call is admitted.
    pub permissions: Arc<Permissions>,
    /// Also applied to memory and event arguments.
    pub redactor: Arc<Redactor>,
    /// Characters shared by all results of a batch (0 = none).
    pub batch_budget_chars: usize,
    pub suggestion_threshold: f64,
    /// Longest argument or result preview carried by an event.
    pub preview_chars: usize,
    /// Longest error text in a result or the fail-fast reason.
    pub max_error_chars: usize,
    /// Where calls, attempts and batches are counted.
    pub metrics: Arc<Metrics>,
    /// Where batches and attempts are traced (ids only when tracing is off).
    pub tracer: Tracer,
    /// Where a call an ask paused waits for a person, in a batch with interactive approvals.
    pub approvals: Approvals,
}

impl Pipeline {
    /// A pipeline with no hooks, the built-in reflector and the middleware `config` describes.
    pub fn new(health: Arc<Health>, policy: Policy, config: &MiddlewareConfig) -> Self {
        let permissions = Arc::new(Permissions::new(config.permissions.clone()));
        Pipeline {
            hooks: Hooks::default(),
            health,
            policy: Arc::new(policy),
            reflector: Arc::new(DefaultReflector),
            service: middleware::stack(config, permissions.clone()),
            permissions,
            redactor: config.redactor.clone(),
            batch_budget_chars: 0,
            suggestion_threshold: config.suggestion_threshold,
            preview_chars: 1024,
            max_error_chars: 2000,
            metrics: Arc::default(),
            tracer: Tracer::off(),
            approvals: Approvals::default(),
        }
    }
}
