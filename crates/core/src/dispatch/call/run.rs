//! Steps 5 and 6 of an attempt: the run through the middleware stack, raced against the batch's
//! cancel, with progress reports relayed while the tool runs; and the stamped result.

use std::sync::Arc;

use serde_json::Value;
use tokio::time::Instant;
use tower::ServiceExt;

use super::steps::Step;
use crate::dispatch::events::Event;
use crate::dispatch::result::CallResult;
use crate::middleware::{Invocation, Invoked, Reply};
use crate::tools::{
    CallMetadata, ErrorClass, Progress, ProgressReceiver, ProgressSink, ToolContext,
};

impl Step<'_> {
    /// Steps 5 and 6: runs the middleware stack raced against the batch's cancel, and stamps the
    /// result with the model's id; `approved` is the permission rule a person approved in step
    /// 2. Also says whether the failure is one the tool called retryable.
    pub(super) async fn run(
        &self,
        input: &Arc<Value>,
        canonical: &Arc<str>,
        metadata: &Arc<CallMetadata>,
        approved: Option<Arc<str>>,
    ) -> (CallResult, bool) {
        self.trace.input(canonical);
        let started = Instant::now();
        let invoked = self
            .run_once(input, Some(canonical), metadata, approved)
            .await;
        let duration = started.elapsed();
        if let Some(invoked) = &invoked {
            self.count_gates(&invoked.gates);
            self.gate_events(&invoked.gates, input).await;
        }
        let retryable = matches!(
            &invoked,
            Some(Invoked {
                reply: Reply::Error {
                    retryable: true,
                    ..
                },
                ..
            })
        );
        let refused = invoked.as_ref().is_some_and(|i| i.refused);
        let mut result = self.answer(invoked);
        result.id.clone_from(&self.call.id);
        // A layer's refusal is not an execution of the tool.
        result.set_executions(self.attempt - u32::from(refused));
        result.duration = duration;
        (result, retryable)
    }

    /// The middleware stack, raced against the batch's cancel (checked first). `None` means
    /// cancelled; the tool's token fires either way once its future is gone.
    async fn run_once(
        &self,
        input: &Arc<Value>,
        canonical: Option<&Arc<str>>,
        metadata: &Arc<CallMetadata>,
        approved: Option<Arc<str>>,
    ) -> Option<Invoked> {
        let scope = self.scope;
        // Progress reports travel to the observer while the tool runs; no channel when nobody
        // listens.
        let (progress_tx, mut progress_rx) = match self.client_wants_events() {
            true => {
                let (tx, rx) = ProgressSink::channel(self.scope.pipeline.preview_chars);
                (Some(tx), Some(rx))
            }
            false => (None, None),
        };
        let ctx = ToolContext {
            session_id: scope.session.id().to_owned(),
            call_id: self.call.id.clone(),
            index: self.call.index,
            cancel: scope.cancel.token().child_token(),
            scratch: scope.session.scratch().clone(),
            shared_scratch: scope.session.shared_scratch(),
            metadata: metadata.clone(),
            deadline: None,
            progress: progress_tx,
            trace: self.trace.span_context(),
            caller: scope.caller.clone(),
        };
        let token = ctx.cancel.clone();
        let invocation = Invocation {
            tool: self.registered.clone(),
            input: input.clone(),
            canonical: canonical.cloned(),
            ctx,
            turn: scope.turn,
            requested_timeout: scope.options.call_timeout,
            deadline: scope.options.deadline,
            budget: scope.budget.clone(),
            approved,
        };
        let running = scope.pipeline.service.clone().oneshot(invocation);
        tokio::pin!(running);
        let invoked = loop {
            tokio::select! {
                biased;
                () = scope.cancel.cancelled() => break None,
                done = &mut running => {
                    let Ok(invoked) = done;
                    break Some(invoked);
                }
                Some(report) = next_progress(&mut progress_rx) => self.progress(report).await,
            }
        };
        token.cancel();
        // Reports sent just before the tool returned still reach the observer, in order.
        if let Some(rx) = progress_rx.as_mut() {
            while let Some(report) = rx.try_recv() {
                self.progress(report).await;
            }
            let dropped = rx.dropped();
            if dropped > 0 {
                let metrics = &self.scope.pipeline.metrics;
                metrics.evicted("progress", "queue_full", dropped);
            }
        }
        invoked
    }

    fn answer(&self, invoked: Option<Invoked>) -> CallResult {
        let (call, tool) = (self.call, self.tool);
        let Some(invoked) = invoked else {
            let message = format!("tool '{tool}' was cancelled");
            return CallResult::failed(call, tool, ErrorClass::Cancelled, message, None);
        };
        let mut result = match invoked.reply {
            Reply::Output(output) => CallResult::succeeded(call, tool, output, invoked.content),
            Reply::Error {
                class,
                message,
                output,
                ..
            } => CallResult::failed(call, tool, class, message, output),
        };
        result.cached = invoked.cached;
        result.truncated = invoked.truncated;
        result.client_deadline = invoked.client_deadline;
        result
    }

    async fn progress(&self, report: Progress) {
        self.emit(Event::Progress {
            index: self.call.index,
            id: self.call.id.clone(),
            attempt: self.attempt,
            tool: self.tool.to_owned(),
            progress: report.progress,
            total: report.total,
            // A tool's progress text is bounded like every preview an event carries (the sink
            // cut it as it was queued).
            message: report.message,
        })
        .await;
    }
}

/// The next progress report, or never when nobody listens.
async fn next_progress(rx: &mut Option<ProgressReceiver>) -> Option<Progress> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}
