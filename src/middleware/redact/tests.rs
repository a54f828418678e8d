//! Redaction tests: each built-in kind, a corpus of secrets and look-alikes, JSON walks.

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
