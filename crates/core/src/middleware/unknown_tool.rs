//! Unknown tools: `tool 'x' is not available`, and `. Did you mean 'y'?` when a registered
//! name is similar enough. A call resolves its tool before the stack runs, so a name the batch's
//! registry lacks is answered there (`dispatch::call::unknown_tool`) and never reaches a layer.

use crate::tools::ToolRegistry;

/// The one answer to a name no registered tool has: `tool 'x' is not available`, plus
/// `. Did you mean 'y'?` when a registered name is similar enough.
pub(crate) fn unknown_tool_message(name: &str, registry: &ToolRegistry, threshold: f64) -> String {
    let mut message = not_available(name);
    if let Some(candidate) = suggest(name, registry, threshold) {
        message.push_str(&did_you_mean(&candidate));
    }
    message
}

/// `tool 'x' is not available`, before a suggestion.
fn not_available(name: &str) -> String {
    format!("tool '{name}' is not available")
}

fn did_you_mean(candidate: &str) -> String {
    format!(". Did you mean '{candidate}'?")
}

/// Similarity of two names in [0, 1]: longest common subsequence over the longer length, plus a
/// small bonus for a common prefix; case-insensitive.
pub(crate) fn similarity(a: &str, b: &str) -> f64 {
    let a: Vec<char> = a.to_lowercase().chars().collect();
    let b: Vec<char> = b.to_lowercase().chars().collect();
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    if a == b {
        return 1.0;
    }
    let mut row = vec![0usize; b.len() + 1];
    for ca in &a {
        let mut diagonal = 0;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == cb {
                diagonal + 1
            } else {
                above.max(row[j])
            };
            diagonal = above;
        }
    }
    let lcs = row[b.len()];
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    #[allow(clippy::cast_precision_loss)]
    let longest = a.len().max(b.len()) as f64;
    #[allow(clippy::cast_precision_loss)]
    let score = lcs as f64 / longest + 0.1 * prefix as f64 / longest;
    score.min(1.0)
}

/// The most similar registered name at or above `threshold` (ties: alphabetical first).
pub(crate) fn suggest(name: &str, registry: &ToolRegistry, threshold: f64) -> Option<String> {
    let mut best: Option<(f64, &str)> = None;
    for registered in registry.iter() {
        let candidate = registered.tool.name();
        let score = similarity(name, candidate);
        if score >= threshold && best.is_none_or(|(s, _)| score > s) {
            best = Some((score, candidate));
        }
    }
    best.map(|(_, n)| n.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{ToolSource, builtin_tools};

    fn registry(count: usize) -> ToolRegistry {
        let mut r = ToolRegistry::default();
        for tool in builtin_tools(&[]).into_iter().take(count) {
            r.register(tool, ToolSource::Builtin).unwrap();
        }
        r
    }

    #[test]
    fn an_unknown_name_reads_the_same_with_or_without_a_suggestion() {
        assert_eq!(
            unknown_tool_message("x", &registry(0), 0.4),
            "tool 'x' is not available"
        );
        assert_eq!(
            unknown_tool_message("slep", &registry(2), 0.4),
            "tool 'slep' is not available. Did you mean 'sleep'?"
        );
    }

    #[test]
    fn similarity_rewards_shared_letters_and_prefixes() {
        assert_eq!(similarity("", ""), 1.0);
        assert_eq!(similarity("a", ""), 0.0);
        assert_eq!(similarity("Echo", "echo"), 1.0);
        assert!(similarity("slep", "sleep") > 0.8);
        assert!(similarity("weather", "echo") < 0.4);
    }

    #[test]
    fn suggestions_need_the_threshold() {
        let r = registry(6);
        assert_eq!(suggest("slep", &r, 0.4).as_deref(), Some("sleep"));
        assert_eq!(
            suggest("scratch_wrte", &r, 0.4).as_deref(),
            Some("scratch_write")
        );
        assert_eq!(suggest("get_weather", &r, 0.4), None);
        assert_eq!(suggest("slep", &r, 1.0), None, "1.0 needs an exact match");
    }
}
