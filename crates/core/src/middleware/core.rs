//! The innermost service: looks the tool up in the registry and runs it, panics caught.

use std::convert::Infallible;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::FutureExt;
use tower::Service;

use super::{Invocation, Invoked, Reply};
use crate::tools::ErrorClass;
use crate::tools::{BoxFuture, Catalog, ToolErrorKind};

/// Runs registered tools.
#[derive(Clone)]
pub(crate) struct Core {
    catalog: Arc<Catalog>,
}

impl Core {
    pub(crate) fn new(catalog: Arc<Catalog>) -> Self {
        Core { catalog }
    }
}

impl Service<Invocation> for Core {
    type Response = Invoked;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Invoked, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, inv: Invocation) -> Self::Future {
        // The current registry: a remote removed since the batch began is not found.
        let registry = self.catalog.snapshot();
        Box::pin(async move {
            let Some(registered) = registry.get(&inv.tool) else {
                // The suggestion layer adds the names; the class is what it keys on.
                return Ok(Invoked::refused(
                    ErrorClass::UnknownTool,
                    super::not_available(&inv.tool),
                ));
            };
            if let Some(pin) = &registered.pin
                && let Some(changed_to) = &pin.changed_to
            {
                let message = format!(
                    "tool '{}' is quarantined: its definition changed since it was pinned (digest {} -> {changed_to}); \
                     an operator must accept the change before it runs again",
                    inv.tool, pin.digest
                );
                return Ok(Invoked::refused(ErrorClass::Quarantined, message));
            }
            let tool = registered.tool.clone();
            let running = AssertUnwindSafe(tool.call(Arc::unwrap_or_clone(inv.input), &inv.ctx))
                .catch_unwind()
                .await;
            let reply = match running {
                Ok(Ok(output)) => Reply::Output(output),
                Ok(Err(error)) => Reply::Error {
                    class: match error.kind {
                        ToolErrorKind::InvalidInput => ErrorClass::InvalidArguments,
                        ToolErrorKind::Failed => ErrorClass::ToolError,
                        ToolErrorKind::Transport => ErrorClass::Transport,
                        ToolErrorKind::StoreUnavailable => ErrorClass::StoreUnavailable,
                        ToolErrorKind::OutcomeUnknown => ErrorClass::OutcomeUnknown,
                    },
                    message: error.message,
                    retryable: error.retryable,
                    output: error.output,
                },
                Err(payload) => {
                    let text = format!(
                        "tool '{}' panicked: {}",
                        inv.tool,
                        panic_message(payload.as_ref())
                    );
                    tracing::error!(target: "toolgate::middleware::core", error = %text, "tool panicked");
                    Reply::Error {
                        class: ErrorClass::Panic,
                        message: text,
                        retryable: false,
                        output: None,
                    }
                }
            };
            Ok(Invoked::reply(reply))
        })
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "(no message)".to_owned()
    }
}
