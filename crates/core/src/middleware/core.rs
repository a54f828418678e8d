//! The innermost service: runs the tool the invocation resolved (unless it is quarantined),
//! panics caught.

use std::convert::Infallible;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::FutureExt;
use tower::Service;

use super::{Invocation, Invoked, Reply};
use crate::tools::ErrorClass;
use crate::tools::{BoxFuture, ToolErrorKind};

/// Runs the tool each invocation resolved.
#[derive(Clone, Default)]
pub(crate) struct Core;

impl Service<Invocation> for Core {
    type Response = Invoked;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Invoked, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, inv: Invocation) -> Self::Future {
        Box::pin(async move {
            let registered = &inv.tool;
            if let Some((digest, changed_to)) = registered.quarantined() {
                let message = format!(
                    "tool '{}' is quarantined: its definition changed since it was pinned (digest {digest} -> {changed_to}); \
                     an operator must accept the change before it runs again",
                    inv.name()
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
                        inv.tool.name(),
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
