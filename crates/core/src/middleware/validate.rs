//! Argument validation against the tool's input JSON Schema: a violation is answered
//! INVALID_ARGUMENTS with every violation's path and message; the tool does not run.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::Either;
use parking_lot::Mutex;
use tower::{Layer, Service};

use super::{Invocation, Invoked, LayerFuture, answered};
use crate::tools::Catalog;
use crate::tools::ErrorClass;

/// Violations listed before "and N more".
const LISTED: usize = 10;

/// Compiled validators by tool name (`None` when a schema does not compile), for one catalog
/// generation: a registration may change a tool's schema, so a new generation starts afresh.
type Compiled = Arc<Mutex<(u64, HashMap<String, Option<Arc<jsonschema::Validator>>>)>>;

/// Applies `Validate`.
#[derive(Clone)]
pub(crate) struct ValidateLayer {
    catalog: Arc<Catalog>,
    enabled: bool,
    compiled: Compiled,
}

/// Checks input against the tool's schema.
#[derive(Clone)]
pub struct Validate<S> {
    inner: S,
    catalog: Arc<Catalog>,
    enabled: bool,
    compiled: Compiled,
}

impl ValidateLayer {
    pub(crate) fn new(catalog: Arc<Catalog>, enabled: bool) -> Self {
        ValidateLayer {
            catalog,
            enabled,
            compiled: Arc::default(),
        }
    }
}

impl<S> Layer<S> for ValidateLayer {
    type Service = Validate<S>;
    fn layer(&self, inner: S) -> Validate<S> {
        Validate {
            inner,
            catalog: self.catalog.clone(),
            enabled: self.enabled,
            compiled: self.compiled.clone(),
        }
    }
}

impl<S> Validate<S> {
    /// The tool's validator, compiled once (schemas of registered tools do not change).
    fn validator(&self, tool: &str) -> Option<Arc<jsonschema::Validator>> {
        let mut guard = self.compiled.lock();
        let generation = self.catalog.generation();
        if guard.0 != generation {
            *guard = (generation, HashMap::new());
        }
        let compiled = &mut guard.1;
        if let Some(found) = compiled.get(tool) {
            return found.clone();
        }
        let snapshot = self.catalog.snapshot();
        let registered = snapshot.get(tool)?;
        // A quarantined tool's schema is the remote's unaccepted word, and its violations would
        // quote it (a `const`, an `enum`) to the model: the call is refused QUARANTINED further
        // in, unvalidated.
        if registered
            .pin
            .as_ref()
            .is_some_and(|p| p.changed_to.is_some())
        {
            compiled.insert(tool.to_owned(), None);
            return None;
        }
        let schema = registered.tool.input_schema();
        let validator = match jsonschema::validator_for(&schema) {
            Ok(v) => Some(Arc::new(v)),
            Err(error) => {
                tracing::warn!(target: "toolgate::middleware::validate", tool, %error, "input schema does not compile; arguments are not validated");
                None
            }
        };
        compiled.insert(tool.to_owned(), validator.clone());
        validator
    }
}

/// Every violation as `<path>: <message>`, or `None` when the input is valid.
pub(super) fn violations(
    validator: &jsonschema::Validator,
    input: &serde_json::Value,
) -> Option<String> {
    // The common case, valid input, takes the fast path without collecting errors.
    if validator.is_valid(input) {
        return None;
    }
    let all: Vec<String> = validator
        .iter_errors(input)
        .map(|e| {
            let path = e.instance_path().to_string();
            let path = if path.is_empty() {
                "(root)".to_owned()
            } else {
                path
            };
            format!("{path}: {e}")
        })
        .collect();
    if all.is_empty() {
        return None;
    }
    let mut text = all
        .iter()
        .take(LISTED)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if all.len() > LISTED {
        text.push_str(&format!("; and {} more", all.len() - LISTED));
    }
    Some(text)
}

impl<S> Service<Invocation> for Validate<S>
where
    S: Service<Invocation, Response = Invoked, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Invoked;
    type Error = Infallible;
    type Future = LayerFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, inv: Invocation) -> Self::Future {
        if self.enabled
            && let Some(validator) = self.validator(&inv.tool)
            && let Some(problems) = violations(&validator, &inv.input)
        {
            let message = format!(
                "arguments do not match the input schema of '{}': {problems}",
                inv.tool
            );
            return answered(Invoked::refused(ErrorClass::InvalidArguments, message));
        }
        Either::Left(self.inner.call(inv))
    }
}
