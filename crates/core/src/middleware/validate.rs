//! Argument validation against the tool's input JSON Schema: a violation is answered
//! INVALID_ARGUMENTS with every violation's path and message; the tool does not run.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::Either;
use tower::{Layer, Service};

use super::{Invocation, Invoked, LayerFuture, answered};
use crate::tools::{ErrorClass, Registered};

/// Violations listed before "and N more".
const LISTED: usize = 10;

/// Applies `Validate`.
#[derive(Clone)]
pub(crate) struct ValidateLayer {
    enabled: bool,
}

/// Checks input against the schema of the tool the call resolved.
#[derive(Clone)]
pub struct Validate<S> {
    inner: S,
    enabled: bool,
}

impl ValidateLayer {
    pub(crate) fn new(enabled: bool) -> Self {
        ValidateLayer { enabled }
    }
}

impl<S> Layer<S> for ValidateLayer {
    type Service = Validate<S>;
    fn layer(&self, inner: S) -> Validate<S> {
        Validate {
            inner,
            enabled: self.enabled,
        }
    }
}

/// The validator of `registered`'s schema, compiled on the first call that needs it and kept
/// on the resolved tool (`None`: quarantined, or the schema does not compile).
fn validator(registered: &Registered) -> Option<Arc<jsonschema::Validator>> {
    // A quarantined tool's schema is the remote's unaccepted word, and its violations would
    // quote it (a `const`, an `enum`) to the model: the call is refused QUARANTINED further
    // in, unvalidated.
    if registered.quarantined().is_some() {
        return None;
    }
    let compile = || match jsonschema::validator_for(&registered.tool.input_schema()) {
        Ok(v) => Some(Arc::new(v)),
        Err(error) => {
            let tool = registered.name();
            tracing::warn!(target: "toolgate::middleware::validate", tool, %error, "input schema does not compile; arguments are not validated");
            None
        }
    };
    registered.input_validator.get_or_init(compile).clone()
}

/// What is wrong with `input` for `registered`'s input schema, as `<path>: <message>` lines
/// joined with `; ` (`None`: valid, or not checked: quarantined, or a schema that does not
/// compile), as the pipeline's validation judges it. For people who edit a call's arguments
/// (an approval with edits), before they are sent.
pub fn violations_of(registered: &Registered, input: &serde_json::Value) -> Option<String> {
    violations(&*validator(registered)?, input)
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
            && let Some(validator) = validator(&inv.tool)
            && let Some(problems) = violations(&validator, &inv.input)
        {
            let message = format!(
                "arguments do not match the input schema of '{}': {problems}",
                inv.name()
            );
            return answered(Invoked::refused(ErrorClass::InvalidArguments, message));
        }
        Either::Left(self.inner.call(inv))
    }
}
