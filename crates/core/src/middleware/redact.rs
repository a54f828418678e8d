//! Redaction: secrets removed from results and errors before anything leaves the pipeline:
//! provider keys and tokens in the formats of the gitleaks and trufflehog rule sets, private
//! keys, credentials in headers, URLs, connection strings and key/value pairs (`patterns.rs`),
//! bare AWS secret keys (`bare_aws.rs`), secrets named in JSON, configured patterns and an
//! optional entropy heuristic; each replaced by `[REDACTED:<kind>]`.

use std::borrow::Cow;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use regex::{Regex, RegexSet};
use serde_json::Value;
use tower::{Layer, Service};

use super::{Invocation, Invoked, Reply};
use crate::metrics::Metrics;
use crate::tools::{BoxFuture, ContentPart, ToolOutput};

mod bare_aws;
mod patterns;

use bare_aws::redact_bare_aws_secrets;
use patterns::{BUILTIN, Confirm, is_secret_name};

/// A redaction pattern that does not compile.
#[derive(Debug, thiserror::Error)]
pub enum PatternError {
    #[error("built-in pattern {kind}: {source}")]
    Builtin {
        kind: &'static str,
        source: regex::Error,
    },
    #[error("redaction pattern '{kind}': {source}")]
    Custom { kind: String, source: regex::Error },
    /// The patterns together (one set, matched first) exceed the regex engine's limits.
    #[error(transparent)]
    Set(#[from] regex::Error),
}

/// Object keys shorter than this are never scanned as secrets (every built-in format is longer).
const SECRET_KEY_MIN: usize = 16;

/// A field named like a secret (`api_key`, `client_secret`, `password`) holds one when its string
/// value is at least this long; shorter values (`""`, `"none"`) are left as they are.
const SECRET_FIELD_MIN: usize = 8;

/// Runs of secret-alphabet characters at least this long are scored by the entropy heuristic.
const ENTROPY_MIN_LEN: usize = 32;
/// Shannon entropy (bits per character) at or above which such a run is treated as a secret.
const ENTROPY_BITS: f64 = 4.5;

/// The compiled redaction rules.
#[derive(Debug)]
pub struct Redactor {
    enabled: bool,
    rules: Vec<Rule>,
    /// All rules at once, to skip texts with nothing to redact in one pass.
    any: Option<RegexSet>,
    entropy: bool,
    entropy_runs: Option<Regex>,
    /// The fewest bytes any rule, the bare AWS key scan or the entropy heuristic replaces: a
    /// shorter text (most keys, names and short values) is returned without a scan.
    shortest: usize,
    /// Every kind this redactor writes into `[REDACTED:<kind>]`: the only label values its
    /// counts may carry.
    kinds: Vec<String>,
    /// Where redactions of tool results are counted, by kind.
    metrics: Option<Arc<Metrics>>,
}

/// One compiled pattern.
#[derive(Debug)]
struct Rule {
    re: Regex,
    /// `re` anchored at the start of the text: tried where a replacement just ended.
    glued: Regex,
    /// A replacement template: `$k` and `$t` keep what the pattern captured around the secret.
    replacement: String,
    confirm: Option<Confirm>,
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
            shortest: 0,
            entropy: false,
            entropy_runs: None,
            kinds: Vec::new(),
            metrics: None,
        }
    }

    /// Counts the redactions of tool results (`Redact` layer) into `metrics`, by kind.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// How many markers of each known kind `output` carries.
    fn markers(&self, output: &ToolOutput) -> Vec<(usize, u64)> {
        // Almost every output has none: no allocation, one substring search per string.
        let mut counts: Vec<(usize, u64)> = Vec::new();
        let mut count_in = |text: &str| {
            // A memchr for the marker's first byte before the substring search, whose set-up
            // alone cost more than the search in a short string.
            if !text.as_bytes().contains(&b'[') {
                return;
            }
            for (at, _) in text.match_indices(MARKER) {
                let rest = &text[at + MARKER.len()..];
                let Some(i) = rest
                    .find(']')
                    .and_then(|end| self.kinds.iter().position(|k| k == &rest[..end]))
                else {
                    continue;
                };
                match counts.iter_mut().find(|(j, _)| *j == i) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((i, 1)),
                }
            }
        };
        match output {
            ToolOutput::Text(text) => count_in(text),
            ToolOutput::Json(value) => strings_of(value, &mut count_in),
            ToolOutput::Parts(parts) => {
                for part in parts {
                    if let ContentPart::Text(text) = part {
                        count_in(text);
                    }
                }
            }
        }
        counts
    }

    /// Redacts a tool's output and counts what was redacted, by kind (markers the output
    /// already carried are not counted).
    fn redact_output_counted(&self, output: &mut ToolOutput) {
        let Some(metrics) = self.metrics.as_ref().filter(|_| self.enabled) else {
            self.redact_output(output);
            return;
        };
        let before = self.markers(output);
        if !self.redact_output_changed(output) {
            return;
        }
        for (i, after) in self.markers(output) {
            let had = before.iter().find(|(j, _)| *j == i).map_or(0, |(_, n)| *n);
            if after > had {
                metrics.redacted(&self.kinds[i], after - had);
            }
        }
    }

    /// The built-in patterns plus `custom` (kind, regex); fails on a regex that does not compile.
    pub fn new(custom: &[(String, String)], entropy: bool) -> Result<Self, PatternError> {
        let mut rules = Vec::new();
        for pattern in BUILTIN {
            let kind = pattern.kind;
            // The patterns write `\b` for readability and mean an ASCII word boundary: a
            // Unicode `\b` makes the regex engine's DFA give up at the first non-ASCII byte
            // and fall back to a much slower engine (BENCHMARKS.md §18). Every secret format
            // here is ASCII.
            let source = pattern.regex.replace(r"\b", r"(?-u:\b)");
            let builtin = |source| PatternError::Builtin { kind, source };
            let re = Regex::new(&source).map_err(builtin)?;
            let group = |name: &str| re.capture_names().any(|n| n == Some(name));
            let replacement = format!(
                "{}[REDACTED:{kind}]{}",
                if group("k") { "${k}" } else { "" },
                if group("t") { "${t}" } else { "" },
            );
            rules.push(Rule {
                glued: anchored(&source).map_err(builtin)?,
                re,
                replacement,
                confirm: pattern.confirm,
            });
        }
        for (kind, pattern) in custom {
            let custom = |source| PatternError::Custom {
                kind: kind.clone(),
                source,
            };
            let re = Regex::new(pattern).map_err(custom)?;
            rules.push(Rule {
                glued: anchored(pattern).map_err(custom)?,
                re,
                replacement: format!("[REDACTED:{kind}]"),
                confirm: None,
            });
        }
        let any = RegexSet::new(rules.iter().map(|rule| rule.re.as_str()))?;
        let entropy_runs = Regex::new(r"[A-Za-z0-9+/_\-]{32,}={0,2}")?;
        let shortest = rules
            .iter()
            .map(|rule| shortest_match(rule.re.as_str()))
            .chain([bare_aws::AWS_SECRET_LEN])
            .chain(entropy.then_some(ENTROPY_MIN_LEN))
            .min()
            .unwrap_or(0);
        let mut kinds: Vec<String> = BUILTIN.iter().map(|p| p.kind.to_owned()).collect();
        kinds.extend(custom.iter().map(|(kind, _)| kind.clone()));
        kinds.extend(["high_entropy", "secret_field", "aws_secret_key"].map(str::to_owned));
        kinds.sort();
        kinds.dedup();
        Ok(Redactor {
            enabled: true,
            rules,
            any: Some(any),
            entropy,
            entropy_runs: Some(entropy_runs),
            shortest,
            kinds,
            metrics: None,
        })
    }

    /// The text with secrets replaced. Redacting the result again changes nothing.
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        if !self.enabled {
            return Cow::Borrowed(text);
        }
        let Cow::Owned(mut out) = self.redact_once(text) else {
            return Cow::Borrowed(text);
        };
        // A replacement can change what stands next to a secret: two AWS keys glued together
        // (`aws_secret_key:<key>aws_secret_key:<key>`) form one run too long to be a key, and
        // only once the first is replaced does the second stand alone. So a text that changed
        // is redacted again until it stops changing; texts with nothing to redact pay nothing.
        for _ in 1..MAX_PASSES {
            match self.redact_once(&out) {
                Cow::Owned(again) => out = again,
                Cow::Borrowed(_) => break,
            }
        }
        Cow::Owned(out)
    }

    /// One pass of every rule, the bare AWS key scan and the entropy heuristic.
    fn redact_once<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let mut out = Cow::Borrowed(text);
        if text.len() < self.shortest {
            return out;
        }
        // `is_match` stops at the first hit and needs no per-pattern set: most texts are clean,
        // and only a text that holds something learns which rules matched.
        if let Some(any) = &self.any
            && any.is_match(text)
        {
            for index in any.matches(text).iter() {
                if let Cow::Owned(replaced) = self.rules[index].apply(&out) {
                    out = Cow::Owned(replaced);
                }
            }
        }
        // After the rules: a key named as such (`aws_secret_access_key = ...`) is gone already,
        // whatever it looks like.
        if let Cow::Owned(replaced) = redact_bare_aws_secrets(&out) {
            out = Cow::Owned(replaced);
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
    pub(crate) fn redact_value(&self, value: &mut Value) {
        self.redact_value_changed(value);
    }

    /// `redact_value`, saying whether anything changed.
    fn redact_value_changed(&self, value: &mut Value) -> bool {
        if !self.enabled {
            return false;
        }
        match value {
            Value::String(s) => match self.redact(s) {
                Cow::Owned(r) => {
                    *s = r;
                    true
                }
                Cow::Borrowed(_) => false,
            },
            Value::Array(items) => items
                .iter_mut()
                .fold(false, |changed, v| self.redact_value_changed(v) | changed),
            Value::Object(map) => self.redact_object(map),
            _ => false,
        }
    }

    /// An object's values, its keys (a secret used as a key), the value of a field whose name
    /// says it holds a secret (`"api_key": "..."`, whatever the secret looks like), and the
    /// `value` of a `{"name": "api_key", "value": "..."}` pair.
    fn redact_object(&self, map: &mut serde_json::Map<String, Value>) -> bool {
        let mut changed = false;
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
                    changed = true;
                }
                other => changed |= self.redact_value_changed(other),
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
        changed |= !renamed.is_empty();
        for (n, (old, mut new)) in renamed.into_iter().enumerate() {
            if let Some(value) = map.remove(&old) {
                // Two secrets that redact alike keep both values.
                if map.contains_key(&new) {
                    new = format!("{new}#{}", n + 2);
                }
                map.insert(new, value);
            }
        }
        changed
    }

    /// Redacts a tool output in place.
    pub(crate) fn redact_output(&self, output: &mut ToolOutput) {
        self.redact_output_changed(output);
    }

    /// `redact_output`, saying whether anything changed.
    fn redact_output_changed(&self, output: &mut ToolOutput) -> bool {
        let mut changed = false;
        let mut redact = |text: &mut String| {
            if let Cow::Owned(r) = self.redact(text) {
                *text = r;
                changed = true;
            }
        };
        match output {
            ToolOutput::Text(text) => redact(text),
            ToolOutput::Json(value) => return self.redact_value_changed(value),
            ToolOutput::Parts(parts) => {
                for part in parts {
                    if let ContentPart::Text(text) = part {
                        redact(text);
                    }
                }
            }
        }
        changed
    }
}

/// Calls `each` with every string inside `value`, object keys included.
fn strings_of(value: &Value, each: &mut impl FnMut(&str)) {
    match value {
        Value::String(text) => each(text),
        Value::Array(items) => items.iter().for_each(|v| strings_of(v, each)),
        Value::Object(map) => {
            for (key, v) in map {
                each(key);
                strings_of(v, each);
            }
        }
        _ => {}
    }
}

impl Rule {
    /// The text with this rule's matches replaced (those its check confirms, if it has one).
    ///
    /// By hand rather than `replace_all`, for two reasons.
    /// - A match the check turns down must not hide the matches that overlap it. In
    ///   `x_token:a_b_token:s3cr3t...` the first candidate's value (`a_b_token`, a name) is the
    ///   second candidate's key, so the search resumes where the turned-down value starts, not
    ///   after it.
    /// - Where a replacement ends, the output has a marker (ending in `]`, not a word
    ///   character), so a match may start there even when the input's last secret character
    ///   defeats its leading `\b`: glued secrets (`aws_secret_key:<key>aws_secret_key:<key>`)
    ///   are all replaced in this one pass, not one more per pass.
    ///
    /// Either way a second redaction would otherwise find what the first one skipped.
    fn apply<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let mut out = String::new();
        let mut replaced_any = false;
        let (mut copied, mut at) = (0, 0);
        let mut after_replacement = false;
        while at <= text.len() {
            let glued = if after_replacement {
                text.get(at..)
                    .and_then(|rest| self.glued.captures(rest))
                    .map(|caps| (caps, at))
            } else {
                None
            };
            let Some((caps, base)) =
                glued.or_else(|| self.re.captures_at(text, at).map(|caps| (caps, 0)))
            else {
                break;
            };
            let Some(found) = caps.get(0) else { break };
            let (found_start, found_end) = (base + found.start(), base + found.end());
            let start = caps.name("k").map_or(found_start, |k| base + k.end());
            let end = caps.name("t").map_or(found_end, |t| base + t.start());
            let next_char = text
                .get(found_start..)
                .and_then(|rest| rest.chars().next())
                .map_or(1, char::len_utf8);
            let secret = text.get(start..end).unwrap_or_default();
            if self.confirm.is_none_or(|confirm| confirm(secret)) {
                out.push_str(text.get(copied..found_start).unwrap_or_default());
                caps.expand(&self.replacement, &mut out);
                replaced_any = true;
                copied = found_end;
                // An empty match (a custom pattern can make one) must not hold the search.
                after_replacement = found_end > found_start;
                at = if after_replacement {
                    found_end
                } else {
                    found_start + next_char
                };
            } else {
                // Past the match's start, at the latest where its value begins.
                after_replacement = false;
                at = start.max(found_start + next_char);
            }
        }
        // Matches the check turned down leave the text as it was, borrowed.
        if !replaced_any {
            return Cow::Borrowed(text);
        }
        out.push_str(text.get(copied..).unwrap_or_default());
        Cow::Owned(out)
    }
}

/// The fewest bytes `pattern` matches: 0 (nothing skipped) when it can match the empty text, when
/// the parser cannot parse it, or when it can never match at all (`minimum_len` says nothing).
fn shortest_match(pattern: &str) -> usize {
    regex_syntax::parse(pattern)
        .ok()
        .and_then(|hir| hir.properties().minimum_len())
        .unwrap_or(0)
}

/// `source` matched only at the start of the text.
fn anchored(source: &str) -> Result<Regex, regex::Error> {
    Regex::new(&format!("^(?:{source})"))
}

/// What every replacement starts with.
const MARKER: &str = "[REDACTED:";

/// Passes `Redactor::redact` makes at most; a pass that changes nothing ends it sooner. A rule
/// replaces glued secrets of its own kind in one pass; more passes are for a replacement by one
/// rule that frees a secret for another, or for the bare-key scan.
const MAX_PASSES: usize = 4;

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
pub(crate) struct RedactLayer {
    redactor: Arc<Redactor>,
}

/// Removes secrets from replies.
#[derive(Debug, Clone)]
pub(crate) struct Redact<S> {
    inner: S,
    redactor: Arc<Redactor>,
}

impl RedactLayer {
    pub(crate) fn new(redactor: Arc<Redactor>) -> Self {
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
                Reply::Output(output) => redactor.redact_output_counted(output),
                Reply::Error {
                    message, output, ..
                } => {
                    if let Cow::Owned(r) = redactor.redact(message) {
                        *message = r;
                    }
                    if let Some(output) = output {
                        redactor.redact_output_counted(output);
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
mod tests;
