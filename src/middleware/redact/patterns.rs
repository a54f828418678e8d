//! What the redactor treats as a secret: the built-in patterns, in the order they are applied,
//! and the checks that confirm a match where a regex alone would be too eager.

use std::borrow::Cow;

use regex::Match;

/// A built-in rule. Its replacement is `[REDACTED:<kind>]`, preceded by the group `k` (the key
/// of a key/value pair, a URL's scheme) and followed by the group `t` when the regex has them.
pub(super) struct Pattern {
    pub kind: &'static str,
    pub regex: &'static str,
    /// When set, a match is replaced only if this says it is a secret, given the whole text.
    pub confirm: Option<Confirm>,
}

/// Whether a match (in the text it was found in) is a secret.
pub(super) type Confirm = fn(&str, &Match<'_>) -> bool;

const fn rule(kind: &'static str, regex: &'static str) -> Pattern {
    Pattern {
        kind,
        regex,
        confirm: None,
    }
}

/// Applied in this order: a text's secret is named by the first, most specific, rule that
/// matches it, and later rules see `[REDACTED:...]` in its place.
pub(super) const BUILTIN: &[Pattern] = &[
    // A block cut before its END line is redacted to the end of the text.
    rule(
        "pem_private_key",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY-----|[\s\S]*)",
    ),
    // Provider keys with a recognisable prefix (the gitleaks rule set's formats). Anthropic
    // comes before OpenAI: both start with `sk-`.
    rule("anthropic_key", r"\bsk-ant-[A-Za-z0-9_\-]{20,}"),
    rule(
        "openai_key",
        r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
    ),
    rule("stripe_key", r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"),
    rule("slack_token", r"\bxox[abeoprs]-[A-Za-z0-9\-]{10,}"),
    rule("google_api_key", r"\bAIza[0-9A-Za-z_\-]{35}"),
    rule(
        "sendgrid_key",
        r"\bSG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}",
    ),
    rule("huggingface_token", r"\bhf_[A-Za-z0-9]{30,}"),
    rule("npm_token", r"\bnpm_[A-Za-z0-9]{36}"),
    rule(
        "jwt",
        r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
    ),
    rule(
        "url_credentials",
        r"(?i)(?P<k>\b[a-z][a-z0-9+.\-]*://)[^/\s:@]+:[^/\s@]+(?P<t>@)",
    ),
    rule("basic_auth", r"(?i)\bbasic\s+[A-Za-z0-9+/]{12,}={0,2}"),
    rule("bearer", r"(?i)\bbearer\s+[A-Za-z0-9\-._~+/]{8,}=*"),
    rule("aws_access_key", r"\b(?:AKIA|ASIA|AGPA)[A-Z0-9]{16}\b"),
    // An AWS secret access key named as such, whatever it looks like.
    rule(
        "aws_secret_key",
        r#"(?i)(?P<k>\b(?:aws[_-]?secret[_-]?(?:access[_-]?)?key|secret[_-]?access[_-]?key)["']?[ \t]*[:=][ \t]*["']?)[A-Za-z0-9/+]{40}"#,
    ),
    // A bare one (no name beside it) is found by `redact_bare_aws_secrets`.
    rule(
        "github_token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b",
    ),
    rule("gitlab_token", r"\bglpat-[A-Za-z0-9\-_]{20,}"),
    rule(
        "api_key_kv",
        r#"(?i)(?P<k>\b[a-z0-9_\-]*(?:api[_-]?key|secret|token|password|passwd|access[_-]?key)["']?\s*[:=]\s*["']?)[A-Za-z0-9_\-./+]{16,}"#,
    ),
];

/// Whether a field or pair name says its value is a secret: it ends with one of the usual words,
/// so `openai_api_key` and `access_token` are, `max_tokens` and `tokenizer` are not.
pub(super) fn is_secret_name(name: &str) -> bool {
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

/// The text with its bare AWS secret access keys replaced: 30 random bytes in base64, so runs of
/// exactly 40 characters of `[A-Za-z0-9+/]`, standing on their own and random-looking.
///
/// The look-alikes of this field are told apart like this:
/// - a git SHA or hex hash has no upper case; words, paths and most identifiers no digit;
/// - base64 image data, hashes and tokens of other lengths are longer or shorter runs; a run
///   glued to `_`, `-` or a dotted name is part of an identifier or a host name, and one
///   followed by `=` is padded base64 of another length;
/// - identifiers and paths are made of words: cut into camelCase tokens (`Http`, `HTTP`, `v`,
///   `64`, `/`), a random key makes about 22 of them (standard deviation 2.8), a 40-character
///   identifier about 10; at least 14 are required (AWS's documentation key
///   `wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY`, which people test redactors with, makes 14);
/// - text reuses a few letters: a random key has about 30 distinct characters of its 40, text
///   rarely 23, which are required;
/// - the last line of a wrapped base64 body (a PEM certificate) can be exactly 40 characters
///   long; the full-width line above it gives it away.
///
/// Measured: about 2 random keys in 1,000 fail one of these, and about 16 in 1,000 camelCase
/// identifiers of exactly 40 characters made of short words and a digit pass them (the tests
/// pin both). Over 1.1 GB of Rust crates, Python and documentation (74,000 files) it fired 5
/// times, all on lines of PEM private keys written as escaped string literals, which the PEM
/// rule removes anyway. A key named as such (`aws_secret_access_key = ...`) is caught whatever
/// it looks like.
pub(super) fn redact_bare_aws_secrets(text: &str) -> Cow<'_, str> {
    // A byte scan rather than a rule: `[A-Za-z0-9+/]{40,}` in the RegexSet multiplied its DFA
    // states and made every text with long base64 in it about 8 times slower to scan.
    let bytes = text.as_bytes();
    let mut out = String::new();
    let (mut copied, mut start) = (0, 0);
    for end in 0..=bytes.len() {
        if bytes.get(end).is_some_and(|&c| is_base64(c)) {
            continue;
        }
        if end - start == AWS_SECRET_LEN && bare_aws_secret(bytes, start, end) {
            out.push_str(text.get(copied..start).unwrap_or_default());
            out.push_str("[REDACTED:aws_secret_key]");
            copied = end;
        }
        start = end + 1;
    }
    if copied == 0 {
        return Cow::Borrowed(text);
    }
    out.push_str(text.get(copied..).unwrap_or_default());
    Cow::Owned(out)
}

/// The length of an AWS secret access key: 30 bytes in base64.
const AWS_SECRET_LEN: usize = 40;

fn is_base64(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'+' || c == b'/'
}

/// Whether the run `text[start..end]` of 40 base64 characters is a key (see above).
fn bare_aws_secret(text: &[u8], start: usize, end: usize) -> bool {
    let before = text.get(..start).unwrap_or_default();
    let after = text.get(end..).unwrap_or_default();
    if matches!(before.last(), Some(b'_' | b'-' | b'.'))
        || matches!(after, [b'_' | b'-' | b'=', ..])
        || matches!(after, [b'.', next, ..] if next.is_ascii_alphanumeric())
        || ends_wrapped_base64_line(before)
    {
        return false;
    }
    looks_random(text.get(start..end).unwrap_or_default())
}

/// Whether `text` ends with a line break after a full-width (60+ characters) line of base64.
fn ends_wrapped_base64_line(text: &[u8]) -> bool {
    let Some(text) = text.strip_suffix(b"\n") else {
        return false;
    };
    let text = text.strip_suffix(b"\r").unwrap_or(text);
    let line = text.iter().rev().take_while(|&&c| is_base64(c)).count();
    line >= 60
}

/// Upper case, lower case and digits, many camelCase tokens and many distinct characters: what
/// random base64 has and words and identifiers do not (see `redact_bare_aws_secrets`).
fn looks_random(key: &[u8]) -> bool {
    #[derive(Clone, Copy, PartialEq)]
    enum Class {
        Upper,
        Lower,
        Digit,
        Symbol,
    }
    let class = |c: u8| match c {
        b'A'..=b'Z' => Class::Upper,
        b'a'..=b'z' => Class::Lower,
        b'0'..=b'9' => Class::Digit,
        _ => Class::Symbol,
    };
    let classes: Vec<Class> = key.iter().map(|&c| class(c)).collect();
    // A token starts at a symbol and at a change of class, except where a capital starts a
    // word (`Type`); an acronym before a word ends before the word's capital (`HTTP|Args`).
    let mut tokens = 1;
    for (i, pair) in classes.windows(2).enumerate() {
        let [previous, current] = [pair[0], pair[1]];
        let next = classes.get(i + 2).copied();
        let starts = current == Class::Symbol
            || (current != previous && !(previous == Class::Upper && current == Class::Lower))
            || (previous == Class::Upper && current == Class::Upper && next == Some(Class::Lower));
        tokens += usize::from(starts);
    }
    let mut seen = [false; 128];
    for &c in key {
        if let Some(seen) = seen.get_mut(usize::from(c)) {
            *seen = true;
        }
    }
    let distinct = seen.iter().filter(|&&seen| seen).count();
    [Class::Upper, Class::Lower, Class::Digit]
        .iter()
        .all(|wanted| classes.contains(wanted))
        && tokens >= 14
        && distinct >= 23
}
