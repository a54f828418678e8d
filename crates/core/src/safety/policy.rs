//! The pipeline's settings: global values plus per-tool overrides (built by `config`).

use std::collections::BTreeMap;

use super::backoff::Backoff;
use super::detector::Thresholds;

/// What the per-call driver needs to know from the config. `Default` is the product's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub loop_enabled: bool,
    pub append_loop_warning: bool,
    pub loop_thresholds: Thresholds,
    pub memory_enabled: bool,
    pub backoff: Backoff,
    pub max_retries: u32,
    pub per_tool: BTreeMap<String, ToolOverrides>,
}

/// One tool's overrides of the loop and retry settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ToolOverrides {
    pub loop_detection: PerToolLoop,
    pub retry: PerToolRetry,
}

/// `[per_tool.<name>.retry]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PerToolRetry {
    pub enabled: Option<bool>,
    pub max_retries: Option<u32>,
}

/// `[per_tool.<name>.loop_detection]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PerToolLoop {
    pub warn_after: Option<u32>,
    pub stop_after: Option<u32>,
    pub exempt: bool,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            warn_after: 3,
            stop_after: 10,
        }
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            loop_enabled: true,
            append_loop_warning: true,
            loop_thresholds: Thresholds::default(),
            memory_enabled: true,
            backoff: Backoff::default(),
            max_retries: 3,
            per_tool: BTreeMap::new(),
        }
    }
}

impl Policy {
    /// Loop thresholds for `tool`; `None` when detection is off or the tool is exempt.
    pub fn loop_thresholds(&self, tool: &str) -> Option<Thresholds> {
        if !self.loop_enabled {
            return None;
        }
        let Some(overrides) = self.per_tool.get(tool).map(|p| p.loop_detection) else {
            return Some(self.loop_thresholds);
        };
        if overrides.exempt {
            return None;
        }
        Some(Thresholds {
            warn_after: overrides
                .warn_after
                .unwrap_or(self.loop_thresholds.warn_after),
            stop_after: overrides
                .stop_after
                .unwrap_or(self.loop_thresholds.stop_after),
        })
    }

    /// The operator's `retry.enabled` for `tool`, if set.
    pub fn retry_enabled(&self, tool: &str) -> Option<bool> {
        self.per_tool.get(tool).and_then(|p| p.retry.enabled)
    }

    pub fn max_retries(&self, tool: &str) -> u32 {
        self.per_tool
            .get(tool)
            .and_then(|p| p.retry.max_retries)
            .unwrap_or(self.max_retries)
    }
}
