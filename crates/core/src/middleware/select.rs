//! Result selection: a JSON object result becomes its `tool_result_value` member if present (even
//! null), else its `tool_result_text` member, else the object without its top-level `_`-prefixed
//! keys (nested ones stay). Switched off per tool for objects that should pass through whole.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::Either;
use serde_json::Value;
use tower::{Layer, Service};

use super::{Invocation, Invoked, LayerFuture, Reply};
use crate::tools::ToolOutput;

/// The selection rule, as a plain function.
pub fn select(value: Value) -> Value {
    let Value::Object(mut map) = value else {
        return value;
    };
    if let Some(selected) = map.remove("tool_result_value") {
        return selected;
    }
    if let Some(selected) = map.remove("tool_result_text") {
        return selected;
    }
    map.retain(|key, _| !key.starts_with('_'));
    Value::Object(map)
}

/// Applies `Select`.
#[derive(Debug, Clone)]
pub(crate) struct SelectLayer {
    pass_through: Arc<BTreeSet<String>>,
}

/// Selects the result of JSON object outputs.
#[derive(Debug, Clone)]
pub(crate) struct Select<S> {
    inner: S,
    pass_through: Arc<BTreeSet<String>>,
}

impl SelectLayer {
    /// `pass_through` names the tools whose objects are returned whole.
    pub(crate) fn new(pass_through: BTreeSet<String>) -> Self {
        SelectLayer {
            pass_through: Arc::new(pass_through),
        }
    }
}

impl<S> Layer<S> for SelectLayer {
    type Service = Select<S>;
    fn layer(&self, inner: S) -> Select<S> {
        Select {
            inner,
            pass_through: self.pass_through.clone(),
        }
    }
}

fn select_output(output: &mut ToolOutput) {
    if let ToolOutput::Json(value) = output {
        *value = select(std::mem::take(value));
    }
}

impl<S> Service<Invocation> for Select<S>
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
        if self.pass_through.contains(inv.name()) {
            return Either::Left(self.inner.call(inv));
        }
        let running = self.inner.call(inv);
        Either::Right(Box::pin(async move {
            let Ok(mut invoked) = running.await;
            match &mut invoked.reply {
                Reply::Output(output) => select_output(output),
                Reply::Error {
                    output: Some(output),
                    ..
                } => select_output(output),
                Reply::Error { output: None, .. } => {}
            }
            Ok(invoked)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[track_caller]
    fn check(input: Value, expected: Value) {
        assert_eq!(select(input), expected);
    }

    #[test]
    fn selection_follows_the_reference_order() {
        check(
            json!({"tool_result_value": {"t": 21}, "tool_result_text": "21", "x": 1}),
            json!({"t": 21}),
        );
        check(
            json!({"tool_result_value": null, "tool_result_text": "ignored"}),
            json!(null),
        );
        check(json!({"tool_result_text": 7, "x": 1}), json!(7));
        check(
            json!({"a": 1, "_private": 2, "nested": {"_kept": 3}}),
            json!({"a": 1, "nested": {"_kept": 3}}),
        );
        check(json!([1, {"_x": 1}]), json!([1, {"_x": 1}]));
        check(json!("text"), json!("text"));
    }
}
