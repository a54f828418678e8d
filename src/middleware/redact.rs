//! Redaction: secrets removed from results and errors before anything leaves the pipeline:
//! bearer and basic credentials, key/value API keys, AWS access keys, PEM private keys, the
//! prefixed keys of GitHub, GitLab, OpenAI, Anthropic, Stripe, Slack, Google, SendGrid, Hugging
//! Face and npm, JWTs, passwords in URLs, configured patterns, and an optional entropy heuristic;
//! each replaced by `[REDACTED:<kind>]`.

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
        // A block cut before its END line is redacted to the end of the text.
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY-----|[\s\S]*)",
        "[REDACTED:pem_private_key]",
    ),
    // Provider keys with a recognisable prefix (the gitleaks rule set's formats). Anthropic
    // comes before OpenAI: both start with `sk-`.
    (
        "anthropic_key",
        r"\bsk-ant-[A-Za-z0-9_\-]{20,}",
        "[REDACTED:anthropic_key]",
    ),
    (
        "openai_key",
        r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
        "[REDACTED:openai_key]",
    ),
    (
        "stripe_key",
        r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",
        "[REDACTED:stripe_key]",
    ),
    (
        "slack_token",
        r"\bxox[abeoprs]-[A-Za-z0-9\-]{10,}",
        "[REDACTED:slack_token]",
    ),
    (
        "google_api_key",
        r"\bAIza[0-9A-Za-z_\-]{35}",
        "[REDACTED:google_api_key]",
    ),
    (
        "sendgrid_key",
        r"\bSG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}",
        "[REDACTED:sendgrid_key]",
    ),
    (
        "huggingface_token",
        r"\bhf_[A-Za-z0-9]{30,}",
        "[REDACTED:huggingface_token]",
    ),
    (
        "npm_token",
        r"\bnpm_[A-Za-z0-9]{36}",
        "[REDACTED:npm_token]",
    ),
    (
        "jwt",
        r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
        "[REDACTED:jwt]",
    ),
    (
        "url_credentials",
        r"(?i)(?P<k>\b[a-z][a-z0-9+.\-]*://)[^/\s:@]+:[^/\s@]+@",
        "${k}[REDACTED:url_credentials]@",
    ),
    (
        "basic_auth",
        r"(?i)\bbasic\s+[A-Za-z0-9+/]{12,}={0,2}",
        "[REDACTED:basic_auth]",
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

/// Object keys shorter than this are never scanned as secrets (every built-in format is longer).
const SECRET_KEY_MIN: usize = 16;

/// A field named like a secret (`api_key`, `client_secret`, `password`) holds one when its string
/// value is at least this long; shorter values (`""`, `"none"`) are left as they are.
const SECRET_FIELD_MIN: usize = 8;

/// Whether a field or pair name says its value is a secret: it ends with one of the usual words,
/// so `openai_api_key` and `access_token` are, `max_tokens` and `tokenizer` are not.
fn is_secret_name(name: &str) -> bool {
    const ENDINGS: &[&str] = &[
        "api_key",
        "apikey",
        "secret",
        "token",
        "password",
        "passwd",
        "access_key",
        "credential",
        "credentials",
        "private_key",
    ];
    // Compared in place (case-insensitive, `-` as `_`): this runs for every key of every object.
    let name = name.as_bytes();
    ENDINGS.iter().any(|ending| {
        let ending = ending.as_bytes();
        name.len() >= ending.len()
            && name[name.len() - ending.len()..]
                .iter()
                .zip(ending)
                .all(|(&c, &e)| c.to_ascii_lowercase() == e || (c == b'-' && e == b'_'))
    })
}

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
            Value::Object(map) => self.redact_object(map),
            _ => {}
        }
    }

    /// An object's values, its keys (a secret used as a key), the value of a field whose name
    /// says it holds a secret (`"api_key": "..."`, whatever the secret looks like), and the
    /// `value` of a `{"name": "api_key", "value": "..."}` pair.
    fn redact_object(&self, map: &mut serde_json::Map<String, Value>) {
        let pair_is_secret = ["name", "key"].iter().any(|k| {
            map.get(*k)
                .and_then(Value::as_str)
                .is_some_and(is_secret_name)
        });
        for (key, value) in map.iter_mut() {
            let named_secret = is_secret_name(key) || (pair_is_secret && key == "value");
            match value {
                Value::String(text) if named_secret && text.chars().count() >= SECRET_FIELD_MIN => {
                    *text = "[REDACTED:secret_field]".to_owned();
                }
                other => self.redact_value(other),
            }
        }
        // Every built-in secret format is at least 16 characters long: shorter keys are names.
        let renamed: Vec<(String, String)> = map
            .keys()
            .filter(|k| k.len() >= SECRET_KEY_MIN)
            .filter_map(|k| match self.redact(k) {
                Cow::Owned(r) => Some((k.clone(), r)),
                Cow::Borrowed(_) => None,
            })
            .collect();
        for (n, (old, mut new)) in renamed.into_iter().enumerate() {
            if let Some(value) = map.remove(&old) {
                // Two secrets that redact alike keep both values.
                if map.contains_key(&new) {
                    new = format!("{new}#{}", n + 2);
                }
                map.insert(new, value);
            }
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
            // The provider's own format names the kind more precisely than the key does.
            "\"OPENAI_API_KEY\": \"[REDACTED:openai_key]\"",
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

    /// Secrets in the formats of this field, each of which must be redacted.
    const POSITIVES: &[(&str, &str)] = &[
        ("openai_key", "sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD"),
        (
            "openai_key",
            "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z_Ab3dEf6hIj9kL",
        ),
        (
            "anthropic_key",
            "sk-ant-api03-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb3dEf6hIj9kLm2n-AA",
        ),
        (
            "slack_token",
            "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOpQrStUvWx",
        ),
        ("stripe_key", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
        ("google_api_key", "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"),
        (
            "sendgrid_key",
            "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",
        ),
        ("huggingface_token", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"),
        ("npm_token", "npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"),
        (
            "jwt",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        ),
        (
            "url_credentials",
            "postgres://admin:hunter2secret@db.internal:5432/app",
        ),
        (
            "basic_auth",
            "Authorization: Basic dXNlcjpwYXNzd29yZDEyMw==",
        ),
        (
            "pem_private_key",
            "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
        ),
        ("github_token", "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"),
        ("aws_access_key", "AKIAIOSFODNN7EXAMPLE"),
    ];

    /// Look-alikes that must survive untouched.
    const NEGATIVES: &[&str] = &[
        "550e8400-e29b-41d4-a716-446655440000",
        "commit 4727fa7c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a",
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
        "the_quick_brown_fox_jumps_over_the_lazy_dog_identifier",
        "https://docs.example.com/guide/install?lang=en#step-2",
        "mailto:someone@example.com",
        "skeleton-key-of-the-castle",
        "task-list: sk-1 done",
        "Basic usage: run it",
        "eyJhbGciOi is the start of many tokens",
    ];

    #[test]
    fn a_corpus_of_this_fields_secrets_is_redacted_and_look_alikes_survive() {
        let r = Redactor::new(&[], false).unwrap();
        let missed: Vec<&str> = POSITIVES
            .iter()
            .filter(|(kind, secret)| {
                let text = format!("value: {secret} end");
                let out = r.redact(&text);
                out.contains(secret) || !out.contains(&format!("[REDACTED:{kind}]"))
            })
            .map(|(kind, _)| *kind)
            .collect();
        let mangled: Vec<&str> = NEGATIVES
            .iter()
            .copied()
            .filter(|text| r.redact(text) != *text)
            .collect();
        assert!(
            missed.is_empty() && mangled.is_empty(),
            "false negatives {}/{}: {missed:?}; false positives {}/{}: {mangled:?}",
            missed.len(),
            POSITIVES.len(),
            mangled.len(),
            NEGATIVES.len()
        );
    }

    #[test]
    fn secrets_in_json_are_found_by_their_names_and_as_keys() {
        let r = Redactor::new(&[], false).unwrap();
        let mut value = serde_json::json!({
            "api_key": "short-but-real1",
            "config": {"client_secret": "plain words here", "max_tokens": 512, "tokenizer": "cl100k_base"},
            "env": [{"name": "OPENAI_API_KEY", "value": "anything at all"}, {"name": "HOME", "value": "/home/ada"}],
            "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z_Ab3dEf6hIj9kL": true,
            "password": "none",
        });
        r.redact_value(&mut value);
        assert_eq!(
            value,
            serde_json::json!({
                "api_key": "[REDACTED:secret_field]",
                "config": {"client_secret": "[REDACTED:secret_field]", "max_tokens": 512, "tokenizer": "cl100k_base"},
                "env": [{"name": "OPENAI_API_KEY", "value": "[REDACTED:secret_field]"}, {"name": "HOME", "value": "/home/ada"}],
                "[REDACTED:openai_key]": true,
                "password": "none",
            })
        );
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
