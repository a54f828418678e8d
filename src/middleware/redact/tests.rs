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

/// A secret from the corpus: its text, the secret in it, and the text as it must come back.
struct Positive {
    line: usize,
    text: String,
    secret: String,
    expected: String,
}

/// The corpus file: positives and look-alikes (its header says how it is written).
fn corpus() -> (Vec<Positive>, Vec<String>) {
    let (mut positives, mut negatives) = (Vec::new(), Vec::new());
    for (n, line) in include_str!("corpus.txt").lines().enumerate() {
        if let Some(negative) = line.strip_prefix("- ") {
            negatives.push(unescape(negative));
        } else if let Some(positive) = line.strip_prefix("+ ") {
            let (kind, text) = positive.split_once(' ').unwrap();
            let text = unescape(text);
            let (before, secret, after) = match text.split_once('«') {
                Some((before, rest)) => {
                    let (secret, after) = rest.split_once('»').unwrap();
                    (before, secret, after)
                }
                None => ("", text.as_str(), ""),
            };
            positives.push(Positive {
                line: n + 1,
                text: format!("{before}{secret}{after}"),
                secret: secret.to_owned(),
                expected: format!("{before}[REDACTED:{kind}]{after}"),
            });
        } else {
            assert!(
                line.is_empty() || line.starts_with('#'),
                "corpus line {}: {line}",
                n + 1
            );
        }
    }
    (positives, negatives)
}

/// `\n` is a line break and `\\` a backslash; everything else is as written.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (c, chars.clone().next()) {
            ('\\', Some('n')) => {
                out.push('\n');
                chars.next();
            }
            ('\\', Some('\\')) => {
                out.push('\\');
                chars.next();
            }
            _ => out.push(c),
        }
    }
    out
}

#[test]
fn a_corpus_of_this_fields_secrets_is_redacted_and_look_alikes_survive() {
    let r = Redactor::new(&[], false).unwrap();
    let (positives, negatives) = corpus();
    let (mut missed, mut wrong) = (Vec::new(), Vec::new());
    for p in &positives {
        let out = r.redact(&p.text);
        if out.contains(&p.secret) {
            missed.push(format!("line {}: {}", p.line, p.text));
        } else if out != p.expected {
            wrong.push(format!("line {}: {out}", p.line));
        }
    }
    let mangled: Vec<String> = negatives
        .iter()
        .filter_map(|text| {
            let out = r.redact(text);
            (out != *text).then(|| format!("{text} -> {out}"))
        })
        .collect();
    let summary = format!(
        "{} positives: {} false negatives, {} redacted other than expected; \
         {} negatives: {} false positives",
        positives.len(),
        missed.len(),
        wrong.len(),
        negatives.len(),
        mangled.len()
    );
    eprintln!("redaction corpus: {summary}");
    assert!(
        missed.is_empty() && wrong.is_empty() && mangled.is_empty(),
        "{summary}\nfalse negatives: {missed:#?}\nother than expected: {wrong:#?}\n\
         false positives: {mangled:#?}"
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
