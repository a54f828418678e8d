//! Redaction: secrets removed from results and errors before anything leaves the pipeline:
//! bearer tokens, key/value API keys, AWS access keys, PEM private keys, GitHub and GitLab tokens,
//! configured patterns, and an optional entropy heuristic; each replaced by `[REDACTED:<kind>]`.

use std::borrow::Cow;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use regex::{Regex, RegexSet};
use serde_json::Value;
use tower::{Layer, Service};

use super::{Invocation, Invoked, Reply};
use crate::tools::{BoxFuture, ContentPart, ToolOutput};

/// Built-in patterns: (kind, regex, replacement). `$k` keeps the key of a key/value pair.
const BUILTIN: &[(&str, &str, &str)] = &[
    (
        "pem_private_key",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY-----",
        "[REDACTED:pem_private_key]",
    ),
    (
        "bearer",
        r"(?i)\bbearer\s+[A-Za-z0-9\-._~+/]{8,}=*",
        "[REDACTED:bearer]",
    ),
    (
        "aws_access_key",
        r"\b(?:AKIA|ASIA|AGPA)[A-Z0-9]{16}\b",
        "[REDACTED:aws_access_key]",
    ),
    (
        "github_token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b",
        "[REDACTED:github_token]",
    ),
    (
        "gitlab_token",
        r"\bglpat-[A-Za-z0-9\-_]{20,}",
        "[REDACTED:gitlab_token]",
    ),
    (
        "api_key_kv",
        r#"(?i)(?P<k>\b[a-z0-9_\-]*(?:api[_-]?key|secret|token|password|passwd|access[_-]?key)["']?\s*[:=]\s*["']?)[A-Za-z0-9_\-./+]{16,}"#,
        "${k}[REDACTED:api_key_kv]",
    ),
];

/// Runs of secret-alphabet characters at least this long are scored by the entropy heuristic.
const ENTROPY_MIN_LEN: usize = 32;
/// Shannon entropy (bits per character) at or above which such a run is treated as a secret.
const ENTROPY_BITS: f64 = 4.5;

/// The compiled redaction rules.
#[derive(Debug)]
pub struct Redactor {
    enabled: bool,
    rules: Vec<(Regex, String)>,
    /// All rules at once, to skip texts with nothing to redact in one pass.
    any: Option<RegexSet>,
    entropy: bool,
    entropy_runs: Option<Regex>,
}

impl Default for Redactor {
    fn default() -> Self {
        Redactor::disabled()
    }
}

impl Redactor {
    /// Redacts nothing.
    pub fn disabled() -> Self {
        Redactor {
            enabled: false,
            rules: Vec::new(),
            any: None,
            entropy: false,
            entropy_runs: None,
        }
    }

    /// The built-in patterns plus `custom` (kind, regex); fails on a regex that does not compile.
    pub fn new(custom: &[(String, String)], entropy: bool) -> Result<Self, String> {
        let mut rules = Vec::new();
        for (kind, pattern, replacement) in BUILTIN {
            let re = Regex::new(pattern).map_err(|e| format!("built-in pattern {kind}: {e}"))?;
            rules.push((re, (*replacement).to_owned()));
        }
        for (kind, pattern) in custom {
            let re = Regex::new(pattern).map_err(|e| format!("redaction pattern '{kind}': {e}"))?;
            rules.push((re, format!("[REDACTED:{kind}]")));
        }
        let any =
            RegexSet::new(rules.iter().map(|(re, _)| re.as_str())).map_err(|e| e.to_string())?;
        let entropy_runs = Regex::new(r"[A-Za-z0-9+/_\-]{32,}={0,2}").map_err(|e| e.to_string())?;
        Ok(Redactor {
            enabled: true,
            rules,
            any: Some(any),
            entropy,
            entropy_runs: Some(entropy_runs),
        })
    }

    /// The text with secrets replaced.
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        if !self.enabled {
            return Cow::Borrowed(text);
        }
        let mut out = Cow::Borrowed(text);
        if let Some(any) = &self.any {
            let hits = any.matches(text);
            if hits.matched_any() {
                for index in hits.iter() {
                    let (re, replacement) = &self.rules[index];
                    let replaced = re.replace_all(&out, replacement.as_str()).into_owned();
                    out = Cow::Owned(replaced);
                }
            }
        }
        if self.entropy
            && let Some(runs) = &self.entropy_runs
        {
            // Runs never span whitespace or newlines, so a secret on its own line in an .env dump
            // is scored alone, not joined with its neighbours.
            let replaced = runs.replace_all(&out, |caps: &regex::Captures<'_>| {
                let run = &caps[0];
                if run.chars().count() >= ENTROPY_MIN_LEN && shannon(run) >= ENTROPY_BITS {
                    "[REDACTED:high_entropy]".to_owned()
                } else {
                    run.to_owned()
                }
            });
            if let Cow::Owned(s) = replaced {
                out = Cow::Owned(s);
            }
        }
        out
    }

    /// Redacts every string inside a JSON value.
    pub fn redact_value(&self, value: &mut Value) {
        if !self.enabled {
            return;
        }
        match value {
            Value::String(s) => {
                if let Cow::Owned(r) = self.redact(s) {
                    *s = r;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_value(v)),
            Value::Object(map) => map.values_mut().for_each(|v| self.redact_value(v)),
            _ => {}
        }
    }

    /// Redacts a tool output in place.
    pub fn redact_output(&self, output: &mut ToolOutput) {
        match output {
            ToolOutput::Text(text) => {
                if let Cow::Owned(r) = self.redact(text) {
                    *text = r;
                }
            }
            ToolOutput::Json(value) => self.redact_value(value),
            ToolOutput::Parts(parts) => {
                for part in parts {
                    if let ContentPart::Text(text) = part
                        && let Cow::Owned(r) = self.redact(text)
                    {
                        *text = r;
                    }
                }
            }
        }
    }
}

/// Shannon entropy in bits per character (characters, not bytes).
fn shannon(text: &str) -> f64 {
    let mut counts = std::collections::HashMap::new();
    let mut total = 0usize;
    for c in text.chars() {
        *counts.entry(c).or_insert(0usize) += 1;
        total += 1;
    }
    #[allow(clippy::cast_precision_loss)]
    let n = total as f64;
    counts
        .values()
        .map(|&c| {
            #[allow(clippy::cast_precision_loss)]
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

/// Applies `Redact`.
#[derive(Debug, Clone)]
pub struct RedactLayer {
    redactor: Arc<Redactor>,
}

/// Removes secrets from replies.
#[derive(Debug, Clone)]
pub struct Redact<S> {
    inner: S,
    redactor: Arc<Redactor>,
}

impl RedactLayer {
    pub fn new(redactor: Arc<Redactor>) -> Self {
        RedactLayer { redactor }
    }
}

impl<S> Layer<S> for RedactLayer {
    type Service = Redact<S>;
    fn layer(&self, inner: S) -> Redact<S> {
        Redact {
            inner,
            redactor: self.redactor.clone(),
        }
    }
}

impl<S> Service<Invocation> for Redact<S>
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
        let redactor = self.redactor.clone();
        let running = self.inner.call(inv);
        Box::pin(async move {
            let Ok(mut invoked) = running.await;
            match &mut invoked.reply {
                Reply::Output(output) => redactor.redact_output(output),
                Reply::Error {
                    message, output, ..
                } => {
                    if let Cow::Owned(r) = redactor.redact(message) {
                        *message = r;
                    }
                    if let Some(output) = output {
                        redactor.redact_output(output);
                    }
                }
            }
            for gate in &mut invoked.gates {
                if let Cow::Owned(r) = redactor.redact(&gate.reason) {
                    gate.reason = r;
                }
            }
            Ok(invoked)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(input: &str, expected: &str) {
        let r = Redactor::new(&[("ticket".into(), r"TKT-\d{6}".into())], true).unwrap();
        assert_eq!(r.redact(input), expected);
    }

    #[test]
    fn every_builtin_kind_is_redacted() {
        check(
            "Authorization: Bearer abcdefghijklmnop.qrs",
            "Authorization: [REDACTED:bearer]",
        );
        check(
            "api_key=abcdefghijklmnop1234",
            "api_key=[REDACTED:api_key_kv]",
        );
        check(
            "\"OPENAI_API_KEY\": \"sk-abcdefghijklmnop1234\"",
            "\"OPENAI_API_KEY\": \"[REDACTED:api_key_kv]\"",
        );
        check(
            "key AKIAABCDEFGHIJKLMNOP here",
            "key [REDACTED:aws_access_key] here",
        );
        check(
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc\n-----END RSA PRIVATE KEY-----",
            "[REDACTED:pem_private_key]",
        );
        check(
            &format!("t={}", "ghp_".to_owned() + &"a".repeat(36)),
            "t=[REDACTED:github_token]",
        );
        check("glpat-abcdefghij0123456789", "[REDACTED:gitlab_token]");
        check("see TKT-123456", "see [REDACTED:ticket]");
        check("nothing secret here", "nothing secret here");
    }

    #[test]
    fn the_entropy_heuristic_scores_lines_on_their_own() {
        let secret = "Zx8Qw3Lp0Vb7Nm2Kj5Hg9Fd4Sa1Rt6Yu+/Ec";
        let env = format!("DEBUG=true\nSESSION={secret}\nNAME=toolgate");
        let r = Redactor::new(&[], true).unwrap();
        let out = r.redact(&env);
        assert!(out.contains("SESSION=[REDACTED:high_entropy]"), "{out}");
        assert!(
            out.contains("DEBUG=true\n") && out.ends_with("NAME=toolgate"),
            "{out}"
        );
        let plain = "a".repeat(40);
        assert_eq!(r.redact(&plain), plain, "long but low-entropy text stays");
        let off = Redactor::new(&[], false).unwrap();
        assert_eq!(off.redact(&env), env);
    }

    #[test]
    fn json_strings_are_redacted_recursively() {
        let r = Redactor::new(&[], false).unwrap();
        let mut v = serde_json::json!({"a": ["token: abcdefghijklmnopqrstu"], "n": 1});
        r.redact_value(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"a": ["token: [REDACTED:api_key_kv]"], "n": 1})
        );
    }
}
