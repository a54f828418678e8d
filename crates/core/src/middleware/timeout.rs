//! The per-call deadline: the request's call timeout, else the tool's, else the default, never
//! past the request deadline. On expiry the tool's token fires and its future is dropped; an
//! expiry under a deadline the client cut below the tool's own is marked as the client's.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;
use tower::{Layer, Service};

use super::{Invocation, Invoked};
use crate::duration::readable;
use crate::tools::BoxFuture;
use crate::tools::ErrorClass;

/// Applies `Timeout`.
#[derive(Debug, Clone)]
pub(crate) struct TimeoutLayer {
    default: Duration,
    per_tool: Arc<BTreeMap<String, Duration>>,
}

/// Bounds an invocation's running time.
#[derive(Debug, Clone)]
pub struct Timeout<S> {
    inner: S,
    default: Duration,
    per_tool: Arc<BTreeMap<String, Duration>>,
}

impl TimeoutLayer {
    pub(crate) fn new(default: Duration, per_tool: BTreeMap<String, Duration>) -> Self {
        TimeoutLayer {
            default,
            per_tool: Arc::new(per_tool),
        }
    }
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = Timeout<S>;
    fn layer(&self, inner: S) -> Timeout<S> {
        Timeout {
            inner,
            default: self.default,
            per_tool: self.per_tool.clone(),
        }
    }
}

impl<S> Service<Invocation> for Timeout<S>
where
    S: Service<Invocation, Response = Invoked, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Invoked;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Invoked, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, inv: Invocation) -> Self::Future {
        let own = self
            .per_tool
            .get(inv.name())
            .copied()
            .unwrap_or(self.default);
        let configured = inv.requested_timeout.unwrap_or(own);
        // Never past the gRPC deadline: the client would not wait for the answer anyway.
        let limit = match inv.deadline {
            Some(deadline) => configured.min(deadline.saturating_duration_since(Instant::now())),
            None => configured,
        };
        // A deadline the client cut below the tool's own: its expiry says nothing about the
        // tool, so it must not count against the tool's health (and trip its breaker for every
        // other caller).
        let client_deadline = limit < own;
        let mut inv = inv;
        // The tool learns its deadline, so a remote tool can pass it on to the remote side.
        inv.ctx.deadline = Some(Instant::now() + limit);
        let token = inv.ctx.cancel.clone();
        let tool = inv.name().to_owned();
        let running = self.inner.call(inv);
        Box::pin(async move {
            match tokio::time::timeout(limit, running).await {
                Ok(done) => done,
                Err(_) => {
                    token.cancel();
                    let message = format!("Tool '{tool}' timed out after {}", readable(limit));
                    let mut invoked = Invoked::error(ErrorClass::Timeout, message);
                    invoked.client_deadline = client_deadline;
                    Ok(invoked)
                }
            }
        })
    }
}
