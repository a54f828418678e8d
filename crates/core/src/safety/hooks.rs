//! Pre- and post-tool hooks: an ordered set, each hook limited to tools matching its glob.
//! Pre-tool: hooks are asked in order; Allow continues, Modify replaces the input and continues,
//! the first Block ends the evaluation (the call does not run), and the first Ask pauses it: the
//! driver asks a person (or refuses, when the batch is not interactive) and resumes after the
//! asking hook. Every decision is
//! kept so the driver can emit one `gate_decision` per hook. Post-tool hooks are notified after
//! every executed attempt.

mod command;
mod rules;

use std::sync::Arc;

use serde_json::Value;

use crate::tools::BoxFuture;

pub use command::{CommandHook, FailureMode};
pub use rules::{Action, Condition, RuleHook};

/// What a pre-tool hook sees.
#[derive(Debug, Clone)]
pub struct PreToolUse<'a> {
    pub session_id: &'a str,
    pub call_id: &'a str,
    pub index: usize,
    /// The tool that will run.
    pub tool: &'a str,
    pub input: &'a Value,
    pub attempt: u32,
}

/// What a post-tool hook is told after an executed attempt.
#[derive(Debug, Clone)]
pub struct PostToolUse<'a> {
    pub session_id: &'a str,
    pub call_id: &'a str,
    pub index: usize,
    pub tool: &'a str,
    pub input: &'a Value,
    pub attempt: u32,
    pub content: &'a str,
    pub is_error: bool,
    pub error_class: &'a str,
    pub duration_ms: u64,
}

/// A pre-tool hook's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Allow,
    /// Refuse the call; the reason is what the model reads.
    Block(String),
    /// The hook wants a person to confirm; without one, the call is refused.
    Ask(String),
    /// Run the call with this input instead (a JSON object).
    Modify(Value),
}

impl Decision {
    /// The verdict's name, for metrics and spans (`allow`, `block`, `ask`, `modify`).
    pub fn verdict(&self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Block(_) => "block",
            Decision::Ask(_) => "ask",
            Decision::Modify(_) => "modify",
        }
    }
}

/// One hook's decision, for the `gate_decision` event.
#[derive(Debug, Clone, PartialEq)]
pub struct GateRecord {
    /// Which hook or rule decided.
    pub source: String,
    pub decision: Decision,
    pub reason: String,
}

/// The combined pre-tool verdict.
#[derive(Debug, Clone, PartialEq)]
pub enum Gate {
    /// Run: with the last modification, or with the input as given when no hook modified it
    /// (`None`, so the common case copies nothing).
    Proceed(Option<Value>),
    /// Do not run; the text is the soft error the model reads.
    Refuse(String),
    /// A hook wants a person to confirm: `source` asked with `message`, about the input as
    /// modified so far (`None`: as given). Evaluation resumes at hook `resume`.
    Ask {
        source: String,
        message: String,
        modified: Option<Value>,
        resume: usize,
    },
}

/// What the model reads when a hook or rule asks and the batch cannot ask anyone.
pub fn not_interactive(message: &str) -> String {
    format!("Hook requested confirmation ({message}) but the session is not interactive")
}

/// A hook. Implementations bound their own time (they have a timeout) and never panic.
pub trait Hook: Send + Sync {
    /// For `gate_decision.source`.
    fn name(&self) -> &str;
    /// Whether the hook applies to this tool.
    fn applies_to(&self, tool: &str) -> bool;
    fn pre_tool_use<'a>(&'a self, call: &'a PreToolUse<'a>) -> BoxFuture<'a, (Decision, String)>;
    fn post_tool_use<'a>(&'a self, _notice: &'a PostToolUse<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
}

/// Every configured hook, in registration order.
#[derive(Clone, Default)]
pub struct Hooks {
    hooks: Vec<Arc<dyn Hook>>,
}

impl Hooks {
    pub fn new(hooks: Vec<Arc<dyn Hook>>) -> Self {
        Hooks { hooks }
    }

    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }

    /// Asks the applicable hooks in order; the first Block or Ask wins.
    pub async fn pre_tool_use(&self, call: &PreToolUse<'_>) -> (Gate, Vec<GateRecord>) {
        self.pre_tool_use_from(call, 0).await
    }

    /// `pre_tool_use` from hook `start` on (after an approved Ask, `Gate::Ask::resume`).
    pub async fn pre_tool_use_from(
        &self,
        call: &PreToolUse<'_>,
        start: usize,
    ) -> (Gate, Vec<GateRecord>) {
        let mut modified: Option<Value> = None;
        let mut records = Vec::new();
        let remaining = self.hooks.iter().enumerate().skip(start);
        for (at, hook) in remaining.filter(|(_, h)| h.applies_to(call.tool)) {
            let asked = PreToolUse {
                input: modified.as_ref().unwrap_or(call.input),
                ..call.clone()
            };
            let (decision, reason) = hook.pre_tool_use(&asked).await;
            records.push(GateRecord {
                source: hook.name().to_owned(),
                decision: decision.clone(),
                reason: reason.clone(),
            });
            match decision {
                Decision::Allow => {}
                Decision::Modify(next) => modified = Some(next),
                Decision::Block(reason) => return (Gate::Refuse(reason), records),
                Decision::Ask(message) => {
                    let ask = Gate::Ask {
                        source: hook.name().to_owned(),
                        message,
                        modified,
                        resume: at + 1,
                    };
                    return (ask, records);
                }
            }
        }
        (Gate::Proceed(modified), records)
    }

    /// Notifies every applicable hook, in order.
    pub async fn post_tool_use(&self, notice: &PostToolUse<'_>) {
        for hook in self.hooks.iter().filter(|h| h.applies_to(notice.tool)) {
            hook.post_tool_use(notice).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Fixed(&'static str, Decision);

    impl Hook for Fixed {
        fn name(&self) -> &str {
            self.0
        }
        fn applies_to(&self, tool: &str) -> bool {
            tool != "exempt"
        }
        fn pre_tool_use<'a>(
            &'a self,
            _call: &'a PreToolUse<'a>,
        ) -> BoxFuture<'a, (Decision, String)> {
            Box::pin(async move { (self.1.clone(), format!("{} says so", self.0)) })
        }
    }

    fn call(tool: &str) -> PreToolUse<'static> {
        static INPUT: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
        PreToolUse {
            session_id: "s",
            call_id: "c",
            index: 0,
            tool: if tool == "exempt" { "exempt" } else { "t" },
            input: INPUT.get_or_init(|| json!({"a": 1})),
            attempt: 1,
        }
    }

    fn hooks(list: Vec<Fixed>) -> Hooks {
        Hooks::new(
            list.into_iter()
                .map(|h| Arc::new(h) as Arc<dyn Hook>)
                .collect(),
        )
    }

    #[tokio::test]
    async fn the_first_block_or_ask_wins_in_order() {
        let set = hooks(vec![
            Fixed("a", Decision::Allow),
            Fixed("b", Decision::Block("no".into())),
            Fixed("c", Decision::Ask("sure?".into())),
        ]);
        let (gate, records) = set.pre_tool_use(&call("t")).await;
        assert_eq!(gate, Gate::Refuse("no".into()));
        let sources: Vec<&str> = records.iter().map(|r| r.source.as_str()).collect();
        assert_eq!(sources, ["a", "b"]);
        let set = hooks(vec![
            Fixed("m", Decision::Modify(json!({"a": 2}))),
            Fixed("c", Decision::Ask("sure?".into())),
            Fixed("b", Decision::Block("no".into())),
        ]);
        let (gate, _) = set.pre_tool_use(&call("t")).await;
        let ask = Gate::Ask {
            source: "c".into(),
            message: "sure?".into(),
            modified: Some(json!({"a": 2})),
            resume: 2,
        };
        assert_eq!(
            gate, ask,
            "paused at the asking hook, with the input as modified so far"
        );
        // Resumed after it (once a person approved), the later hooks still decide.
        let (gate, records) = set.pre_tool_use_from(&call("t"), 2).await;
        assert_eq!(gate, Gate::Refuse("no".into()));
        assert_eq!(records.len(), 1);
    }

    #[tokio::test]
    async fn modify_replaces_the_input_for_later_hooks_and_the_tool() {
        let set = hooks(vec![
            Fixed("m", Decision::Modify(json!({"a": 2}))),
            Fixed("a", Decision::Allow),
        ]);
        let (gate, records) = set.pre_tool_use(&call("t")).await;
        assert_eq!(gate, Gate::Proceed(Some(json!({"a": 2}))));
        assert_eq!(records.len(), 2);
    }

    #[tokio::test]
    async fn hooks_apply_only_to_their_tools_and_an_empty_set_allows() {
        let set = hooks(vec![Fixed("b", Decision::Block("no".into()))]);
        let (gate, records) = set.pre_tool_use(&call("exempt")).await;
        assert_eq!(gate, Gate::Proceed(None), "the input as given");
        assert!(records.is_empty());
        let (gate, _) = Hooks::default().pre_tool_use(&call("t")).await;
        assert_eq!(gate, Gate::Proceed(None), "the input as given");
    }
}
