//! The registry: every tool the server can run, by name, with where it came from.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use super::Tool;

/// Where a registered tool came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolSource {
    Builtin,
    Embedded,
    Worker,
    Mcp,
    Http,
}

impl ToolSource {
    /// The name used on the wire and on spans (`BUILTIN`).
    pub fn name(self) -> &'static str {
        match self {
            ToolSource::Builtin => "BUILTIN",
            ToolSource::Embedded => "EMBEDDED",
            ToolSource::Worker => "WORKER",
            ToolSource::Mcp => "MCP",
            ToolSource::Http => "HTTP",
        }
    }
}

/// A registered tool and its source. A call resolves its tool once, from its batch's snapshot
/// of the registry, and carries this (shared) to everything downstream: planner, breaker,
/// validation, execution and result see the same definition whatever is registered meanwhile.
#[derive(Clone)]
pub struct Registered {
    pub tool: Arc<dyn Tool>,
    pub source: ToolSource,
    /// Remote tools: the pinned definition digest, and whether a change awaits approval.
    pub pin: Option<ToolPin>,
    /// Its input schema, compiled by the validation layer on the first call that needs it
    /// (`None` inside: the schema does not compile). A changed definition is a new
    /// `Registered`, compiled afresh.
    pub(crate) input_validator: OnceLock<Option<Arc<jsonschema::Validator>>>,
}

impl std::fmt::Debug for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registered")
            .field("name", &self.name())
            .field("source", &self.source)
            .field("pin", &self.pin)
            .finish()
    }
}

/// A registered tool as one caller is shown it (`Registered::shown_to`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    pub definition: Definition,
    /// For an admin viewing a quarantined tool: the changed definition's digest and what
    /// changed (`Definition::changes_to`); empty otherwise.
    pub changed_digest: String,
    pub change: String,
}

impl Registered {
    /// The tool as `viewer` may see it: admins see a quarantined tool's changed definition and
    /// what changed; everyone else sees the definition that was pinned, or nothing when it is
    /// not known. A changed description is a remote's word, and may be written to steer the
    /// model that reads it. Every front shows tools through this.
    pub fn shown_to(&self, viewer: &crate::identity::Caller) -> Option<Shown> {
        let current = Definition::of(self.tool.as_ref());
        let admin = viewer.has(crate::identity::Role::Admin);
        let shown = match &self.pin {
            Some(ToolPin {
                changed_to: Some(changed),
                accepted,
                ..
            }) => match (admin, accepted) {
                (true, accepted) => Shown {
                    change: accepted
                        .as_ref()
                        .map(|was| was.changes_to(&current))
                        .unwrap_or_default(),
                    definition: current,
                    changed_digest: changed.clone(),
                },
                (false, Some(accepted)) => Shown {
                    definition: (**accepted).clone(),
                    changed_digest: String::new(),
                    change: String::new(),
                },
                (false, None) => return None,
            },
            _ => Shown {
                definition: current,
                changed_digest: String::new(),
                change: String::new(),
            },
        };
        Some(shown)
    }

    /// `tool`, registered from `source` (and pinned, for a remote's).
    pub fn new(tool: Arc<dyn Tool>, source: ToolSource, pin: Option<ToolPin>) -> Self {
        Registered {
            tool,
            source,
            pin,
            input_validator: OnceLock::new(),
        }
    }

    /// The name it is registered and called under.
    pub fn name(&self) -> &str {
        self.tool.name()
    }

    /// Its pin's digest and the definition it changed to, while a change awaits an operator
    /// (calls are refused QUARANTINED meanwhile).
    pub fn quarantined(&self) -> Option<(&str, &str)> {
        let pin = self.pin.as_ref()?;
        Some((pin.digest.as_str(), pin.changed_to.as_deref()?))
    }
}

/// A remote tool's pinned definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPin {
    /// The remote that contributed the tool.
    pub remote: String,
    /// Digest of the accepted definition.
    pub digest: String,
    /// Set when the remote now offers a different definition: its digest. Calls are refused
    /// (QUARANTINED) until an operator accepts it.
    pub changed_to: Option<String>,
    /// While `changed_to` is set: the accepted definition, the only one agents are shown (the
    /// registered tool carries the changed one, for admins). `None` when it is not known.
    pub accepted: Option<Arc<Definition>>,
}

/// What a caller is shown of a tool: its description, input schema and hints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Definition {
    pub description: String,
    pub input_schema: serde_json::Value,
    /// JSON Schema of the result, when the tool declares one.
    pub output_schema: Option<serde_json::Value>,
    pub annotations: super::Annotations,
    pub concurrency_safe: bool,
}

impl Definition {
    /// `tool`'s definition as it stands.
    pub fn of(tool: &dyn Tool) -> Self {
        let no_input = serde_json::Value::Object(serde_json::Map::new());
        Definition {
            description: tool.description().to_owned(),
            input_schema: tool.input_schema(),
            output_schema: tool.output_schema(),
            annotations: tool.annotations(),
            concurrency_safe: tool.is_concurrency_safe(&no_input),
        }
    }

    /// What changed from `self` to `next`, field by field (`- was` and `+ now` lines, the
    /// schema as canonical JSON), for the admin who decides whether to accept it.
    pub fn changes_to(&self, next: &Definition) -> String {
        let mut out = String::new();
        let mut field = |name: &str, was: String, now: String| {
            if was != now {
                out.push_str(&format!("{name}:\n"));
                for line in was.lines() {
                    out.push_str(&format!("- {line}\n"));
                }
                for line in now.lines() {
                    out.push_str(&format!("+ {line}\n"));
                }
            }
        };
        field(
            "description",
            self.description.clone(),
            next.description.clone(),
        );
        field(
            "input_schema",
            crate::json::canonical(&self.input_schema),
            crate::json::canonical(&next.input_schema),
        );
        let schema = |s: &Option<serde_json::Value>| {
            s.as_ref().map(crate::json::canonical).unwrap_or_default()
        };
        field(
            "output_schema",
            schema(&self.output_schema),
            schema(&next.output_schema),
        );
        field(
            "annotations",
            format!("{:?}", self.annotations),
            format!("{:?}", next.annotations),
        );
        field(
            "concurrency_safe",
            self.concurrency_safe.to_string(),
            next.concurrency_safe.to_string(),
        );
        out
    }
}

/// Why a tool could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("tool '{0}' is registered twice")]
    DuplicateName(String),
    #[error("tool name '{0}' is invalid: use 1 to 64 ASCII letters, digits, '_', '-' or '.'")]
    InvalidName(String),
}

/// All tools, sorted by name.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<Registered>>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl ToolRegistry {
    /// Adds a tool; names are unique and limited to what every provider accepts.
    pub fn register(
        &mut self,
        tool: Arc<dyn Tool>,
        source: ToolSource,
    ) -> Result<(), RegistryError> {
        self.register_pinned(tool, source, None)
    }

    /// Adds a tool with its pin (remote tools).
    pub fn register_pinned(
        &mut self,
        tool: Arc<dyn Tool>,
        source: ToolSource,
        pin: Option<ToolPin>,
    ) -> Result<(), RegistryError> {
        let name = tool.name().to_owned();
        if !valid_name(&name) {
            return Err(RegistryError::InvalidName(name));
        }
        if self.tools.contains_key(&name) {
            return Err(RegistryError::DuplicateName(name));
        }
        let registered = Arc::new(Registered::new(tool, source, pin));
        self.tools.insert(name, registered);
        Ok(())
    }

    /// Removes a tool; true if it was registered.
    pub fn remove(&mut self, name: &str) -> bool {
        self.tools.remove(name).is_some()
    }

    /// The tool registered under `name`, shared (a call holds it for as long as it runs).
    pub fn get(&self, name: &str) -> Option<&Arc<Registered>> {
        self.tools.get(name)
    }

    /// Every tool, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &Registered> {
        self.tools.values().map(Arc::as_ref)
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::builtin_tools;

    #[test]
    fn names_are_unique_and_validated() {
        let mut registry = ToolRegistry::default();
        for tool in builtin_tools(&[]) {
            registry.register(tool, ToolSource::Builtin).unwrap();
        }
        let echo = builtin_tools(&[])
            .into_iter()
            .find(|t| t.name() == "echo")
            .unwrap();
        assert_eq!(
            registry.register(echo, ToolSource::Embedded),
            Err(RegistryError::DuplicateName("echo".into()))
        );
        let names: Vec<&str> = registry.iter().map(|r| r.tool.name()).collect();
        assert_eq!(
            names,
            [
                "echo",
                "now",
                "scratch_list",
                "scratch_read",
                "scratch_write",
                "sleep"
            ]
        );
        assert!(valid_name("server.tool-1_x"));
        assert!(!valid_name(""));
        assert!(!valid_name("has space"));
        assert!(!valid_name(&"x".repeat(65)));
    }
}
