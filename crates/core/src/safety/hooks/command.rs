//! Command hooks: run a program with the call as JSON on stdin, the contract coding agents use
//! for PreToolUse hooks. Exit 0 allows (stdout JSON may carry a decision and an updated input),
//! exit 2 blocks with stderr as the reason; anything else (another exit code, a crash, the
//! timeout) is a hook failure, handled by the hook's failure mode. The program gets a scrubbed
//! environment and its own process group, and the whole group is killed when the run ends.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tokio::sync::Semaphore;

use super::{Decision, Hook, PostToolUse, PreToolUse};
use crate::child::{ChildEnv, ProcessGroup};
use crate::glob::glob_match;
use crate::tools::BoxFuture;

/// What a failing hook (crash, timeout, bad exit code) means for the call.
/// In config: `failure_mode = "fail_open" | "fail_closed"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureMode {
    /// The call runs.
    FailOpen,
    /// The call is refused.
    #[default]
    FailClosed,
}

impl FailureMode {
    /// The decision for a hook that failed: the call is refused (closed) or runs (open), and the
    /// reason names the hook and what went wrong either way.
    pub fn decide(self, hook: &str, why: &str) -> (Decision, String) {
        let reason = format!("hook '{hook}' failed: {why}");
        tracing::warn!(target: "toolgate::safety::hooks::command", hook, reason = %why, "hook failed");
        match self {
            FailureMode::FailOpen => (Decision::Allow, reason),
            FailureMode::FailClosed => (Decision::Block(reason.clone()), reason),
        }
    }
}

/// A hook that runs a program per call.
#[derive(Debug, Clone)]
pub struct CommandHook {
    name: String,
    program: String,
    args: Vec<String>,
    tools: String,
    timeout: Duration,
    failure_mode: FailureMode,
    /// Turns to run a program, shared by every command hook of the server; `None`: unbounded.
    slots: Option<Arc<Semaphore>>,
    /// The program's whole environment.
    env: ChildEnv,
}

/// Why a hook program gave no answer (its failure mode decides what that means for the call).
#[derive(Debug, thiserror::Error)]
enum RunFailed {
    #[error("no turn to run within {0}: limits.max_hook_processes hook programs were running")]
    NoTurn(String),
    #[error("hook turns are no longer given out")]
    TurnsClosed,
    #[error("timed out after {0}")]
    TimedOut(String),
    #[error("cannot start '{program}': {source}")]
    Start {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed while running: {0}")]
    Running(#[source] std::io::Error),
}

/// What a hook program did: its exit code, stdout, and stderr (trimmed).
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

impl CommandHook {
    /// `command` is the program and its arguments (no shell).
    pub fn new(
        name: String,
        command: &[String],
        tools: String,
        timeout: Duration,
        failure_mode: FailureMode,
    ) -> Option<Self> {
        let (program, args) = command.split_first()?;
        Some(CommandHook {
            name,
            program: program.clone(),
            args: args.to_vec(),
            tools,
            timeout,
            failure_mode,
            slots: None,
            env: ChildEnv::default(),
        })
    }

    /// Runs the program with `env` as its whole environment (default: the default allowlist).
    pub fn with_env(mut self, env: ChildEnv) -> Self {
        self.env = env;
        self
    }

    /// Runs the program only with a turn from `slots` (waiting for one counts against the
    /// hook's timeout), so many calls at once cannot start unbounded numbers of processes.
    pub fn limited_by(mut self, slots: Arc<Semaphore>) -> Self {
        self.slots = Some(slots);
        self
    }

    /// Runs the program with `payload` on stdin: (exit code, stdout, stderr), or why it failed,
    /// all within the timeout, the wait for a turn included (and said apart: a hook that never
    /// got a turn did not time out).
    async fn run(&self, payload: &Value) -> Result<Ran, RunFailed> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let readable = || crate::duration::readable(self.timeout);
        let _turn = match &self.slots {
            Some(slots) => Some(
                tokio::time::timeout_at(deadline, slots.clone().acquire_owned())
                    .await
                    .map_err(|_| RunFailed::NoTurn(readable()))?
                    .map_err(|_| RunFailed::TurnsClosed)?,
            ),
            None => None,
        };
        tokio::time::timeout_at(deadline, self.spawn_and_wait(payload))
            .await
            .map_err(|_| RunFailed::TimedOut(readable()))?
    }

    async fn spawn_and_wait(&self, payload: &Value) -> Result<Ran, RunFailed> {
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        self.env.apply(&mut command);
        let mut child = command.spawn().map_err(|source| RunFailed::Start {
            program: self.program.clone(),
            source,
        })?;
        // However the run ends (the program exits, or the timeout drops this future), its group
        // is killed: nothing a hook starts in the background outlives the call.
        let _group = ProcessGroup::led_by(child.id());
        let input = payload.to_string();
        let stdin = child.stdin.take();
        let writer = async move {
            if let Some(mut stdin) = stdin {
                // A hook that exits without reading its input is not an error.
                let _ = stdin.write_all(input.as_bytes()).await;
            }
        };
        let waited = async {
            let ((), output) = tokio::join!(writer, child.wait_with_output());
            output
        };
        let output = waited.await.map_err(RunFailed::Running)?;
        Ok(Ran {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }

    fn failed(&self, why: &str) -> (Decision, String) {
        self.failure_mode.decide(&self.name, why)
    }
}

/// Reads a decision from a hook's stdout: `hookSpecificOutput.permissionDecision` (allow, deny,
/// ask) with `permissionDecisionReason` and `updatedInput`, or a top-level `decision` (allow,
/// approve, deny, block, ask) with `reason` and `updatedInput` / `updated_input`.
pub(super) fn parse_output(stdout: &str) -> (Decision, String) {
    let Ok(Value::Object(out)) = serde_json::from_str::<Value>(stdout.trim()) else {
        return (Decision::Allow, String::new());
    };
    let specific = out.get("hookSpecificOutput").and_then(Value::as_object);
    let field = |specific_key: &str, top_key: &str| {
        specific
            .and_then(|s| s.get(specific_key))
            .or_else(|| out.get(top_key))
            .cloned()
    };
    let decision = field("permissionDecision", "decision");
    let reason = field("permissionDecisionReason", "reason")
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let updated = field("updatedInput", "updatedInput")
        .or_else(|| out.get("updated_input").cloned())
        .filter(Value::is_object);
    match decision.as_ref().and_then(Value::as_str) {
        Some("deny" | "block") => {
            let text = if reason.is_empty() {
                "blocked by hook".to_owned()
            } else {
                reason.clone()
            };
            (Decision::Block(text), reason)
        }
        Some("ask") => (Decision::Ask(reason.clone()), reason),
        _ => match updated {
            Some(input) => (Decision::Modify(input), reason),
            None => (Decision::Allow, reason),
        },
    }
}

impl Hook for CommandHook {
    fn name(&self) -> &str {
        &self.name
    }
    fn applies_to(&self, tool: &str) -> bool {
        glob_match(&self.tools, tool)
    }
    fn pre_tool_use<'a>(&'a self, call: &'a PreToolUse<'a>) -> BoxFuture<'a, (Decision, String)> {
        Box::pin(async move {
            let payload = json!({
                "hook_event_name": "PreToolUse",
                "session_id": call.session_id,
                "tool_name": call.tool,
                "tool_input": call.input,
                "tool_use_id": call.call_id,
                "attempt": call.attempt,
            });
            match self.run(&payload).await {
                Ok(Ran {
                    code: 0, stdout, ..
                }) => parse_output(&stdout),
                Ok(Ran {
                    code: 2, stderr, ..
                }) => {
                    let reason = if stderr.is_empty() {
                        format!("blocked by hook '{}'", self.name)
                    } else {
                        stderr
                    };
                    (Decision::Block(reason.clone()), reason)
                }
                Ok(Ran { code, stderr, .. }) => self.failed(&format!("exit code {code}: {stderr}")),
                Err(why) => self.failed(&why.to_string()),
            }
        })
    }
    fn post_tool_use<'a>(&'a self, notice: &'a PostToolUse<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let payload = json!({
                "hook_event_name": "PostToolUse",
                "session_id": notice.session_id,
                "tool_name": notice.tool,
                "tool_input": notice.input,
                "tool_use_id": notice.call_id,
                "attempt": notice.attempt,
                "tool_response": {
                    "content": notice.content,
                    "is_error": notice.is_error,
                    "error_class": notice.error_class,
                    "duration_ms": notice.duration_ms,
                },
            });
            if let Err(why) = self.run(&payload).await {
                tracing::warn!(target: "toolgate::safety::hooks::command", hook = %self.name, reason = %why, "post-tool command hook failed");
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdout_decisions_in_both_dialects() {
        assert_eq!(parse_output(""), (Decision::Allow, String::new()));
        assert_eq!(parse_output("not json"), (Decision::Allow, String::new()));
        assert_eq!(
            parse_output(r#"{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "no writes"}}"#).0,
            Decision::Block("no writes".into())
        );
        assert_eq!(
            parse_output(r#"{"decision": "ask", "reason": "really?"}"#).0,
            Decision::Ask("really?".into())
        );
        assert_eq!(
            parse_output(r#"{"decision": "block"}"#).0,
            Decision::Block("blocked by hook".into())
        );
        assert_eq!(
            parse_output(r#"{"hookSpecificOutput": {"permissionDecision": "allow", "updatedInput": {"ms": 1}}}"#).0,
            Decision::Modify(serde_json::json!({"ms": 1}))
        );
        assert_eq!(
            parse_output(r#"{"decision": "approve", "updated_input": {"x": 1}}"#).0,
            Decision::Modify(serde_json::json!({"x": 1}))
        );
    }

    fn hook(script: &str, mode: FailureMode) -> CommandHook {
        CommandHook::new(
            "h".into(),
            &["sh".into(), "-c".into(), script.into()],
            "*".into(),
            Duration::from_secs(5),
            mode,
        )
        .unwrap()
    }

    fn call(input: &Value) -> PreToolUse<'_> {
        PreToolUse {
            session_id: "s",
            call_id: "c1",
            index: 0,
            tool: "scratch_write",
            input,
            attempt: 1,
        }
    }

    #[tokio::test]
    async fn exit_codes_follow_the_contract() {
        let input = json!({"path": "x"});
        let (d, _) = hook("cat >/dev/null; exit 0", FailureMode::FailClosed)
            .pre_tool_use(&call(&input))
            .await;
        assert_eq!(d, Decision::Allow);
        let (d, _) = hook(
            "cat >/dev/null; echo 'not allowed here' >&2; exit 2",
            FailureMode::FailOpen,
        )
        .pre_tool_use(&call(&input))
        .await;
        assert_eq!(d, Decision::Block("not allowed here".into()));
        let (d, _) = hook("exit 1", FailureMode::FailClosed)
            .pre_tool_use(&call(&input))
            .await;
        assert!(
            matches!(d, Decision::Block(ref r) if r.starts_with("hook 'h' failed: exit code 1")),
            "{d:?}"
        );
        let (d, _) = hook("exit 1", FailureMode::FailOpen)
            .pre_tool_use(&call(&input))
            .await;
        assert_eq!(d, Decision::Allow);
    }

    #[tokio::test]
    async fn the_hook_reads_the_call_from_stdin() {
        let input = json!({"path": "x"});
        let script = r#"grep -q '"tool_name":"scratch_write"' && echo '{"decision":"deny","reason":"saw it"}'"#;
        let (d, _) = hook(script, FailureMode::FailOpen)
            .pre_tool_use(&call(&input))
            .await;
        assert_eq!(d, Decision::Block("saw it".into()));
    }

    #[tokio::test]
    async fn a_slow_hook_times_out_and_is_killed() {
        let input = json!({});
        let slow = CommandHook::new(
            "slow".into(),
            &["sleep".into(), "30".into()],
            "*".into(),
            Duration::from_millis(100),
            FailureMode::FailClosed,
        )
        .unwrap();
        let (d, _) = slow.pre_tool_use(&call(&input)).await;
        assert_eq!(
            d,
            Decision::Block("hook 'slow' failed: timed out after 100ms".into())
        );
    }

    #[tokio::test]
    async fn a_timed_out_hook_takes_its_background_processes_with_it() {
        let dir = std::env::temp_dir().join(format!("toolgate-hook-group-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pid_file = dir.join("pid");
        // The hook starts a background sleep, notes its pid, and waits for it.
        let script = format!(
            "cat >/dev/null; sleep 1000 & echo $! > {}; wait",
            pid_file.display()
        );
        let slow = CommandHook::new(
            "bg".into(),
            &["sh".into(), "-c".into(), script],
            "*".into(),
            Duration::from_millis(300),
            FailureMode::FailOpen,
        )
        .unwrap();
        let input = json!({});
        let (d, _) = slow.pre_tool_use(&call(&input)).await;
        assert_eq!(d, Decision::Allow, "fails open");
        let pid: u32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            crate::child::tests::ends(pid).await,
            "the hook's background sleep {pid} was killed with its group"
        );
    }

    #[tokio::test]
    async fn hook_programs_run_at_most_as_many_at_once_as_there_are_slots() {
        let dir = std::env::temp_dir().join(format!("toolgate-hook-slots-{}", std::process::id()));
        let running = dir.join("running");
        std::fs::create_dir_all(&running).unwrap();
        let seen = dir.join("seen");
        // Each run marks itself running, notes how many are, and stays a while.
        let script = format!(
            "cat >/dev/null; touch {r}/$$; ls {r} | wc -l >> {s}; sleep 0.2; rm {r}/$$",
            r = running.display(),
            s = seen.display()
        );
        let slots = Arc::new(Semaphore::new(2));
        let limited = hook(&script, FailureMode::FailClosed).limited_by(slots);
        let input = json!({});
        let pre = call(&input);
        let runs = (0..6).map(|_| limited.pre_tool_use(&pre));
        let decisions = futures::future::join_all(runs).await;
        assert!(
            decisions.iter().all(|(d, _)| *d == Decision::Allow),
            "{decisions:?}"
        );
        let counts: Vec<usize> = std::fs::read_to_string(&seen)
            .unwrap()
            .lines()
            .map(|l| l.trim().parse().unwrap())
            .collect();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(counts.len(), 6);
        assert!(
            counts.iter().all(|&n| n <= 2),
            "at most two at once: {counts:?}"
        );
    }
}
