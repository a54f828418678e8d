//! Redaction tests: each built-in kind, a corpus of secrets and look-alikes, JSON walks.

use super::*;

#[track_caller]
fn check(input: &str, expected: &str) {
    let r = Redactor::new(&[("ticket".into(), r"TKT-\d{6}".into())], true).unwrap();
    assert_eq!(r.redact(input), expected);
}

/// Found by the `redact` fuzz target: a candidate the check turned down hid the candidate that
/// overlaps it, so a second pass redacted what the first one had left.
#[test]
fn a_turned_down_match_does_not_hide_the_secret_that_overlaps_it() {
    check(
        "x_token:a_b_token:s3cr3tV4lu3abcdefgh12",
        "x_token:a_b_token:[REDACTED:api_key_kv]",
    );
    let r = Redactor::new(&[], true).unwrap();
    let crash = "O\u{0}\u{0}\u{0}ZZZZZZZZ\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}99999lqiib_tgit:38/7lppr_tokestgit:38/7lppr_tokes_secret_ke55-awrOyrawemkeyr_tgithub7zbpkkkObpulumi_token:_secrrmOmi_token:_secr_secret_ke55-awrOyrawemkeyr_tgithub7zbpkkkObpulumi_token:_secrrmOmi_token:_secrrkokeykkr\u{5}r";
    let once = r.redact(crash).into_owned();
    assert_eq!(r.redact(&once), once, "redaction is stable");
    assert!(once.contains("mi_token:[REDACTED:api_key_kv]"), "{once}");
}

/// Found by the `redact` fuzz target: two AWS keys glued together form one run too long to be a
/// key; only once the first is replaced does the second stand alone. One call redacts both.
#[test]
fn redaction_is_stable_when_a_replacement_frees_the_next_secret() {
    let r = Redactor::new(&[], true).unwrap();
    let crash = "aws_secret_key:KKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKObpulaws_secret_key:KKKKKKKKKKKKKKKKKKKKKKKKKKKCKKKKKKKKKKKKKKKKKKKKKKKKKKK_secrp\u{0}\u{0}\u{0}~miaws_secret_key:KKKKKKKKKKKKKKKKKKKKKKKObpulp\u{0}\u{0}\u{0}~mi_token:'KKK_token:'KKKKrm\u{0}baO\u{0}\u{0}\u{0}aws_secret_key:KKKKKKKKKKKKKKKKKKKKKKKKKKKKKKK_secrrm\u{0}baO\u{0}\u{0}\u{0}aws_secret_key:KKKKKKK_secrrmOabn--\u{1}\u{0}KK\u{0}\u{0}\u{0}\u{0}\u{0},aK\u{0}Kaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaanstok";
    let once = r.redact(crash).into_owned();
    assert_eq!(r.redact(&once), once, "redaction is stable");
    assert!(
        once.starts_with(
            "aws_secret_key:[REDACTED:aws_secret_key]aws_secret_key:[REDACTED:aws_secret_key]"
        ),
        "{once}"
    );
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
        "Credentials": {"AccessKeyId": "ASIA-not-a-real-id", "SecretAccessKey": "plain words here"},
        "settings": {"SECRET_KEY": "plain words here", "dd_app_key": "plain words here", "gpg_passphrase": "plain words here"},
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
            "Credentials": {"AccessKeyId": "ASIA-not-a-real-id", "SecretAccessKey": "[REDACTED:secret_field]"},
            "settings": {"SECRET_KEY": "[REDACTED:secret_field]", "dd_app_key": "[REDACTED:secret_field]", "gpg_passphrase": "[REDACTED:secret_field]"},
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
    let mut v = serde_json::json!({"a": ["token: abcdefghij0123456789"], "n": 1});
    r.redact_value(&mut v);
    assert_eq!(
        v,
        serde_json::json!({"a": ["token: [REDACTED:api_key_kv]"], "n": 1})
    );
}

/// A small deterministic generator (splitmix64): the same keys on every run.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn pick(&mut self, alphabet: &[u8], len: usize) -> String {
        (0..len)
            .map(|_| char::from(alphabet[(self.next() % alphabet.len() as u64) as usize]))
            .collect()
    }
}

const BASE64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

#[test]
fn bare_aws_secret_keys_are_found_and_hex_uuids_and_identifiers_survive() {
    let r = Redactor::new(&[], false).unwrap();
    let mut mix = Mix(11);
    let n = 10_000;
    let missed = (0..n)
        .filter(|_| {
            let key = mix.pick(BASE64, 40);
            let text = format!("export KEY={key}\nrotated: {key}.");
            r.redact(&text)
                != "export KEY=[REDACTED:aws_secret_key]\nrotated: [REDACTED:aws_secret_key]."
        })
        .count();
    // Fewer look-alikes than keys: the regexes are slow in a debug build.
    let m = n / 5;
    let survives = |text: &str| r.redact(text) == text;
    let shas = (0..m)
        .filter(|_| survives(&mix.pick(b"0123456789abcdef", 40)))
        .count();
    let uuids = (0..m)
        .filter(|_| {
            let hex = mix.pick(b"0123456789abcdef", 32);
            let (a, rest) = hex.split_at(8);
            let (b, rest) = rest.split_at(4);
            let (c, rest) = rest.split_at(4);
            let (d, e) = rest.split_at(4);
            survives(&format!("id {a}-{b}-{c}-{d}-{e}"))
        })
        .count();
    // camelCase identifiers of exactly 40 characters, with a digit, from the words of this field.
    let words = [
        "get", "set", "user", "account", "settings", "request", "response", "handler", "async",
        "context", "provider", "security", "info", "by", "key", "event", "args", "changed", "tool",
        "call", "result", "stream", "buffer", "render", "device", "state", "http", "timing",
        "type", "for", "with", "from", "to", "id", "v2", "x64", "utf8",
    ];
    let identifiers = (0..m)
        .filter(|_| {
            let mut id = String::new();
            while id.len() < 40 {
                let word = words[(mix.next() % words.len() as u64) as usize];
                id.push_str(&word[..1].to_uppercase());
                id.push_str(&word[1..]);
            }
            id.truncate(39);
            id.push('2');
            survives(&id)
        })
        .count();
    eprintln!(
        "bare AWS secret keys: {missed} of {n} random keys missed; survived: {shas} of {m} SHAs, \
         {uuids} of {m} UUIDs, {identifiers} of {m} camelCase identifiers"
    );
    // About 2 in 1,000 random keys and 16 in 1,000 such identifiers are misjudged by design
    // (see `redact_bare_aws_secrets`).
    assert!(missed * 250 < n, "{missed} of {n} random keys missed");
    assert_eq!((shas, uuids), (m, m));
    assert!(
        identifiers * 100 > m * 97,
        "{identifiers} of {m} identifiers survived"
    );
}

#[test]
fn glued_secrets_of_one_kind_are_all_replaced_in_one_pass() {
    let r = Redactor::new(&[], true).unwrap();
    let key = "KKKKKKKKKKKCKKKKKKKKKKKKKKKKKKKKKKKKKsen";
    let glued = format!("aws_secret_key:{key}").repeat(6);
    let once = r.redact_once(&glued);
    assert_eq!(once, "aws_secret_key:[REDACTED:aws_secret_key]".repeat(6));
    assert_eq!(r.redact_once(&once), once);
    // The fuzzer's input: five glued keys, which took a pass each, one more than the limit.
    let crash = "Ogit_:K\n\u{0}\u{0}y\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}qqqarrm\u{0}\u{0}---aws_secret_key:KKKKKKKKKKKCKKKKKKKKKKKKKKKKKKKKKKKKKsenaws_secret_key:KKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKsenaws_secret_key:KqKKKKKKKKKCKKKKKKKKKKKKKKKKKKKKKKKKKsenaws_secret_key:KKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKsenaws_secret_key:Kqqq++++++++++++++++++++++++k++++++ObeeOabrOb_awqq++++++++++++++++++++++++k++++++ObeeOabrOb_aws_KKKKKKKKKKKKKKKKKKKsenawsBearer\u{0}hubR\u{2}Ioer16_d_secrrmOoa";
    let once = r.redact(crash).into_owned();
    assert_eq!(r.redact(&once), once, "redaction is stable");
    assert_eq!(
        once.matches("[REDACTED:aws_secret_key]").count(),
        5,
        "{once}"
    );
}

#[test]
fn texts_shorter_than_any_secret_skip_the_scan_and_exactly_those() {
    let custom = Redactor::new(&[("pin".to_owned(), r"\bpin\d{2}\b".to_owned())], false).unwrap();
    // The custom rule is the shortest: 5 bytes.
    assert_eq!(custom.shortest, 5);
    assert_eq!(custom.redact("pin1"), "pin1");
    assert_eq!(custom.redact("pin12"), "[REDACTED:pin]");
    // Without it, the shortest built-in pattern or the bare AWS key length bounds it; a text one
    // byte shorter than a built-in secret's shortest match cannot hold it.
    let builtin = Redactor::new(&[], true).unwrap();
    assert!(
        builtin.shortest > 5 && builtin.shortest <= 32,
        "{}",
        builtin.shortest
    );
    assert_eq!(
        shortest_match(r"[a"),
        0,
        "an unparsable pattern skips nothing"
    );
    assert_eq!(shortest_match(r"sk-[a-z]{20}"), 23);
}
