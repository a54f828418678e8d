//! What the redactor treats as a secret: the built-in patterns, in the order they are applied,
//! and the checks that confirm a match where a regex alone would be too eager.

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
    // A bare one (no name beside it) is found by `bare_aws.rs`.
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
