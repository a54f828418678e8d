//! Rule hooks from the config: a tool glob, optional conditions on the input by JSON pointer
//! (equals, regex, exists), and an action (allow, block, ask) with a reason.

use regex::Regex;
use serde_json::Value;

use super::{Decision, Hook, PreToolUse};
use crate::glob::glob_match;
use crate::json::Pointer;
use crate::tools::BoxFuture;

/// One condition on the input; all of a rule's conditions must hold.
#[derive(Debug, Clone)]
pub enum Condition {
    Equals {
        pointer: Pointer,
        value: Value,
    },
    /// The value at `pointer` is a string matching the regex.
    Matches {
        pointer: Pointer,
        regex: Regex,
    },
    Exists {
        pointer: Pointer,
        exists: bool,
    },
}

/// What a matching rule does (`action = "allow" | "block" | "ask"` in config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Allow,
    Block,
    Ask,
}

/// A configured rule.
#[derive(Debug, Clone)]
pub struct RuleHook {
    id: String,
    tools: String,
    conditions: Vec<Condition>,
    action: Action,
    reason: String,
}

impl Condition {
    fn holds(&self, input: &Value) -> bool {
        match self {
            Condition::Equals { pointer, value } => pointer.find(input) == Some(value),
            Condition::Matches { pointer, regex } => pointer
                .find(input)
                .and_then(Value::as_str)
                .is_some_and(|s| regex.is_match(s)),
            Condition::Exists { pointer, exists } => pointer.find(input).is_some() == *exists,
        }
    }
}

impl RuleHook {
    pub fn new(
        id: String,
        tools: String,
        conditions: Vec<Condition>,
        action: Action,
        reason: String,
    ) -> Self {
        RuleHook {
            id,
            tools,
            conditions,
            action,
            reason,
        }
    }

    /// The rule's decision for an input, as a plain function.
    pub fn decide(&self, input: &Value) -> (Decision, String) {
        if !self.conditions.iter().all(|c| c.holds(input)) {
            return (Decision::Allow, "conditions not met".to_owned());
        }
        let decision = match self.action {
            Action::Allow => Decision::Allow,
            Action::Block => Decision::Block(self.reason.clone()),
            Action::Ask => Decision::Ask(self.reason.clone()),
        };
        (decision, self.reason.clone())
    }
}

impl Hook for RuleHook {
    fn name(&self) -> &str {
        &self.id
    }
    fn applies_to(&self, tool: &str) -> bool {
        glob_match(&self.tools, tool)
    }
    fn pre_tool_use<'a>(&'a self, call: &'a PreToolUse<'a>) -> BoxFuture<'a, (Decision, String)> {
        Box::pin(async move { self.decide(call.input) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(conditions: Vec<Condition>, action: Action) -> RuleHook {
        RuleHook::new(
            "r".into(),
            "scratch_*".into(),
            conditions,
            action,
            "not there".into(),
        )
    }

    #[test]
    fn conditions_select_inputs() {
        let r = rule(
            vec![Condition::Matches {
                pointer: "/path".into(),
                regex: Regex::new("^secrets/").unwrap(),
            }],
            Action::Block,
        );
        assert_eq!(
            r.decide(&json!({"path": "secrets/key"})).0,
            Decision::Block("not there".into())
        );
        assert_eq!(r.decide(&json!({"path": "notes/a"})).0, Decision::Allow);
        assert_eq!(r.decide(&json!({"path": 5})).0, Decision::Allow);
        let r = rule(
            vec![Condition::Equals {
                pointer: "/mode".into(),
                value: json!("force"),
            }],
            Action::Ask,
        );
        assert_eq!(
            r.decide(&json!({"mode": "force"})).0,
            Decision::Ask("not there".into())
        );
        let r = rule(
            vec![Condition::Exists {
                pointer: "/danger".into(),
                exists: true,
            }],
            Action::Block,
        );
        assert!(matches!(
            r.decide(&json!({"danger": null})).0,
            Decision::Block(_)
        ));
        assert_eq!(r.decide(&json!({})).0, Decision::Allow);
        let r = rule(Vec::new(), Action::Block);
        assert!(
            matches!(r.decide(&json!({})).0, Decision::Block(_)),
            "no conditions: always"
        );
        assert!(r.applies_to("scratch_write") && !r.applies_to("echo"));
    }
}
