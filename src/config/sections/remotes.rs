//! `[remote_registration]`: what clients may register at run time, and the policy it makes.

use serde::Deserialize;

use super::parse;

/// `[remote_registration]`: whether clients may add and remove remotes at run time.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RemoteRegistrationConfig {
    pub enabled: bool,
    /// Programs a stdio MCP server registered at run time may run, each pinned to its argv.
    pub commands: Vec<CommandConfig>,
    /// Addresses (blocks such as `10.0.0.0/8`, or single addresses) and host names registered
    /// remotes may reach beyond the default (which refuses loopback, link-local, metadata,
    /// unspecified, multicast and broadcast addresses).
    pub egress_allow: Vec<String>,
    /// Let a registration set `follow_redirects` on an HTTP tool.
    pub allow_redirects: bool,
}

/// `[remote_registration]` rules that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RegistrationConfigError {
    #[error("remote_registration.commands[{0}].argv: required")]
    NoArgv(usize),
    #[error("remote_registration.commands[{index}].args_pattern: {source}")]
    ArgsPattern {
        index: usize,
        #[source]
        source: toolgate_remotes::PatternError,
    },
    #[error("remote_registration.egress_allow: {0}")]
    EgressAllow(#[source] toolgate_remotes::EgressRuleError),
}

impl RemoteRegistrationConfig {
    /// The policy run-time registrations are checked against.
    pub fn policy(&self) -> Result<toolgate_remotes::RegistrationPolicy, RegistrationConfigError> {
        use toolgate_remotes::{CommandRule, EgressRule, RegistrationPolicy, anchored};
        let mut commands = Vec::new();
        for (i, c) in self.commands.iter().enumerate() {
            if c.argv.is_empty() {
                return Err(RegistrationConfigError::NoArgv(i));
            }
            let args =
                match &c.args_pattern {
                    None => None,
                    Some(pattern) => Some(anchored(pattern).map_err(|source| {
                        RegistrationConfigError::ArgsPattern { index: i, source }
                    })?),
                };
            commands.push(CommandRule {
                argv: c.argv.clone(),
                args,
                env_keys: c.env_keys.clone(),
                cwd: c.cwd.clone(),
            });
        }
        let egress_allow = self
            .egress_allow
            .iter()
            .map(|e| EgressRule::parse(e).map_err(RegistrationConfigError::EgressAllow))
            .collect::<Result<_, _>>()?;
        Ok(RegistrationPolicy {
            commands,
            egress_allow,
            allow_redirects: self.allow_redirects,
        })
    }
}

/// `[[remote_registration.commands]]`: one allowlisted stdio program.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandConfig {
    /// The whole argv, or its prefix when `args_pattern` is set.
    pub argv: Vec<String>,
    /// A regex each argument after `argv` must match whole; `None` (`""` in the file): no
    /// further arguments.
    #[serde(default, deserialize_with = "parse::empty_as_none")]
    pub args_pattern: Option<String>,
    /// Environment keys a registration may set.
    #[serde(default)]
    pub env_keys: Vec<String>,
    /// Working directories a registration may use.
    #[serde(default)]
    pub cwd: Vec<String>,
}
