//! What the redactor treats as a secret: the built-in patterns, in the order they are applied,
//! and the checks that confirm a match where a regex alone would be too eager.

/// A built-in rule. Its replacement is `[REDACTED:<kind>]`, preceded by the group `k` (the key
/// of a key/value pair, a URL's scheme) and followed by the group `t` when the regex has them.
pub(super) struct Pattern {
    pub kind: &'static str,
    pub regex: &'static str,
    /// When set, a match is replaced only if this says its secret part (the match without `k`
    /// and `t`) is a secret.
    pub confirm: Option<Confirm>,
}

/// Whether the secret part of a match is a secret.
pub(super) type Confirm = fn(&str) -> bool;

/// The start of a key/value rule: `k` opens on a name that ends like a secret's.
macro_rules! secret_name {
    () => {
        r"(?i)(?P<k>\b[a-z0-9_\-]*(?:api[_-]?key|secret(?:[_-]?key)?|token|password|passwd|passphrase|access[_-]?key|private[_-]?key|app[_-]?key)"
    };
}

/// The start of a password rule: `k` opens on a name that ends like a password's.
macro_rules! password_name {
    () => {
        r"(?i)(?P<k>\b[a-z0-9_\-]*(?:password|passwd|pwd)"
    };
}

/// A password value: one word of 6 or more characters that is not a placeholder or a path.
macro_rules! password_value {
    () => {
        r#"[^\s"'&;,$<{%*/~.\[][^\s"'&;,]{5,}"#
    };
}

const fn rule(kind: &'static str, regex: &'static str) -> Pattern {
    Pattern {
        kind,
        regex,
        confirm: None,
    }
}

const fn checked(kind: &'static str, regex: &'static str, confirm: Confirm) -> Pattern {
    Pattern {
        kind,
        regex,
        confirm: Some(confirm),
    }
}

/// Applied in this order: a text's secret is named by the first, most specific, rule that
/// matches it, and later rules see `[REDACTED:...]` in its place. The formats are those of the
/// public gitleaks and trufflehog rule sets for the services an agent's tools meet; `\b` is an
/// ASCII word boundary (see `Redactor::new`).
pub(super) const BUILTIN: &[Pattern] = &[
    // A block cut before its END line is redacted to the end of the text.
    rule(
        "pem_private_key",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?:[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|[\s\S]*)",
    ),
    // The same block base64-encoded (a Kubernetes secret's `tls.key`, a kubeconfig's
    // `client-key-data`): `-----BEGIN` encodes to `LS0tLS1CRUdJTi`. The whole run goes, its
    // wrapped lines included; a certificate (public) is left.
    checked(
        "pem_private_key",
        r"\bLS0tLS1CRUdJTi[A-Za-z0-9+/_\-]*(?:\r?\n[A-Za-z0-9+/_\-]+)*={0,2}",
        encodes_a_private_key,
    ),
    // URLs that are secrets in themselves: the host stays, the path goes.
    rule(
        "webhook_url",
        r"(?P<k>https://(?:hooks\.slack\.com/(?:services|workflows|triggers)/|(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/))[A-Za-z0-9_\-+/]{20,}",
    ),
    // LLM providers. Anthropic and OpenRouter come before OpenAI: all start with `sk-`.
    rule("anthropic_key", r"\bsk-ant-[A-Za-z0-9_\-]{20,}"),
    rule("openrouter_key", r"\bsk-or-v1-[0-9a-f]{64}\b"),
    rule(
        "openai_key",
        r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
    ),
    rule("groq_key", r"\bgsk_[A-Za-z0-9]{52}\b"),
    rule("replicate_token", r"\br8_[A-Za-z0-9]{37}\b"),
    rule("perplexity_key", r"\bpplx-[A-Za-z0-9]{48}\b"),
    rule("xai_key", r"\bxai-[A-Za-z0-9_]{80}\b"),
    rule("huggingface_token", r"\b(?:hf_|api_org_)[A-Za-z0-9]{30,}"),
    // Google: API keys, OAuth access and refresh tokens.
    rule("google_api_key", r"\bAIza[0-9A-Za-z_\-]{35}"),
    rule(
        "google_oauth_token",
        r"\b(?:ya29\.[0-9A-Za-z_\-]{20,}|1//0[0-9A-Za-z_\-]{40,})",
    ),
    // Code hosting and package registries.
    rule(
        "github_token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b",
    ),
    rule(
        "gitlab_token",
        r"\b(?:gl(?:pat|dt|rt|ptt|ft|imt|cbt|oas|soat|agent|ffct)-[A-Za-z0-9_\-]{20,}|GR1348941[A-Za-z0-9_\-]{20,})",
    ),
    rule("npm_token", r"\bnpm_[A-Za-z0-9]{36}"),
    rule("pypi_token", r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{50,}"),
    // Payments, messaging and email.
    rule(
        "stripe_key",
        r"\b(?:(?:sk|rk)_(?:live|test|prod)_[A-Za-z0-9]{16,}|whsec_[A-Za-z0-9]{24,})",
    ),
    rule(
        "slack_token",
        r"\b(?:xox[abeoprs]-[A-Za-z0-9\-]{10,}|xapp-\d-[A-Za-z0-9\-]{10,})",
    ),
    rule(
        "sendgrid_key",
        r"\bSG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}",
    ),
    rule("twilio_key", r"\bSK[0-9a-fA-F]{32}\b"),
    rule(
        "mailgun_key",
        r"\b(?:key-[0-9a-z]{32}|[0-9a-f]{32}-[0-9a-f]{8}-[0-9a-f]{8})\b",
    ),
    rule(
        "discord_bot_token",
        r"\b[MNO][A-Za-z0-9_\-]{23,27}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,40}",
    ),
    rule("telegram_bot_token", r"\d{8,10}:A[A-Za-z0-9_\-]{34}\b"),
    rule("shopify_token", r"\bshp(?:at|ca|pa|ss)_[0-9a-fA-F]{32}\b"),
    // Clouds and platforms.
    rule(
        "aws_access_key",
        r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|A3T[A-Z0-9])[A-Z0-9]{16}\b",
    ),
    // An AWS secret access key named as such, whatever it looks like; a bare one (no name
    // beside it) is found by `bare_aws.rs`.
    rule(
        "aws_secret_key",
        r#"(?i)(?P<k>\b(?:aws[_-]?secret[_-]?(?:access[_-]?)?key|secret[_-]?access[_-]?key)["']?[ \t]*[:=][ \t]*["']?)[A-Za-z0-9/+]{40}"#,
    ),
    rule(
        "azure_storage_key",
        r"(?i)(?P<k>\b(?:AccountKey|SharedAccessKey)[ \t]*=[ \t]*)[A-Za-z0-9+/]{20,}={0,2}",
    ),
    rule(
        "azure_sas_signature",
        r"(?P<k>[?&]sig=)[A-Za-z0-9%+/=]{20,}",
    ),
    rule(
        "azure_client_secret",
        r"[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}",
    ),
    rule("digitalocean_token", r"\bdo[opr]_v1_[0-9a-f]{64}\b"),
    rule("databricks_token", r"\bdapi[0-9a-f]{32}(?:-\d)?\b"),
    // HashiCorp Vault's service, batch and recovery tokens: `hvs.` and 24 characters or
    // (with an HMAC or a namespace) many more.
    checked(
        "vault_token",
        r"\bhv[sbr]\.[A-Za-z0-9_\-]{24,}",
        has_two_character_classes,
    ),
    rule(
        "doppler_token",
        r"\bdp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,}",
    ),
    rule("pulumi_token", r"\bpul-[0-9a-f]{40}\b"),
    rule("heroku_key", r"\bHRKU-AA[A-Za-z0-9_\-]{58}"),
    rule(
        "grafana_token",
        r"\b(?:glsa_[A-Za-z0-9]{32}_[0-9a-fA-F]{8}|glc_[A-Za-z0-9+/]{32,}={0,2})",
    ),
    rule("onepassword_token", r"\bops_eyJ[A-Za-z0-9+/]{100,}={0,3}"),
    rule("age_secret_key", r"\bAGE-SECRET-KEY-1[0-9A-Z]{58}\b"),
    // HashiCorp Vault's older service, batch and recovery tokens (`s.` and 24 characters).
    checked("vault_token", r"\b[sbr]\.[A-Za-z0-9]{24}\b", is_a_token),
    // A PuTTY key file's private part, to the end of its MAC line (or of the text).
    rule(
        "putty_private_key",
        r"PuTTY-User-Key-File-\d+:[\s\S]*?(?:Private-MAC:[ \t]*[0-9a-fA-F]+|\z)",
    ),
    // Work tools.
    rule("linear_key", r"\blin_api_[A-Za-z0-9]{40}\b"),
    rule(
        "notion_token",
        r"\b(?:ntn_\d{11}[A-Za-z0-9]{35}|secret_[A-Za-z0-9]{43})\b",
    ),
    rule("atlassian_token", r"\bATATT3[A-Za-z0-9_\-=]{150,}"),
    rule("sentry_token", r"\bsntry[us]_[A-Za-z0-9+/=_]{40,}"),
    // A Sentry DSN, sentry.io's or self-hosted: `https://<32 hex>[:<32 hex>]@host/<project>`.
    // The key goes; host and project stay.
    rule(
        "sentry_dsn",
        r"(?P<k>\bhttps?://)[0-9a-fA-F]{32}(?::[0-9a-fA-F]{32})?(?P<t>@[A-Za-z0-9.\-]+(?::\d{1,5})?/(?:[^\s/?#@]+/)*\d+)\b",
    ),
    rule("postman_key", r"\bPMAK-[0-9a-f]{24}-[0-9a-f]{34}\b"),
    // Credential files and headers whose shape says where the secret is.
    // Docker's config.json: `"auth": "<base64 of user:password>"`, and its identity token.
    rule(
        "docker_auth",
        r#"(?P<k>"(?:auth|identitytoken)"[ \t]*:[ \t]*")[A-Za-z0-9+/=._\-]{8,}"#,
    ),
    // `docker login -p SECRET` (or `--password SECRET`, `--password=SECRET`), and podman's and
    // nerdctl's: whatever follows the flag is the password, short or plain. Not a variable
    // (`$PASSWORD`, quoted or not), a placeholder or `--password-stdin`.
    rule(
        "docker_password",
        r#"(?P<k>\b(?:docker|podman|nerdctl)[ \t]+(?:[^\n|;&]*?[ \t])?login\b[^\n|;&]*?[ \t](?:-p|--password)(?:[ \t]+|=))["']?[^\s\-$<{\["'][^\s]*"#,
    ),
    // Cookie headers: every cookie is a session until known otherwise.
    rule(
        "cookie",
        r"(?im)(?P<k>^[ \t]*(?:set-)?cookie[ \t]*:[ \t]*)[^\s;=]+=[^\r\n]*",
    ),
    rule(
        "cookie",
        r#"(?i)(?P<k>"(?:set-)?cookie"[ \t]*:[ \t]*")[^"]+"#,
    ),
    // `Authorization: Token ...` and the like (Bearer and Basic have rules of their own).
    rule(
        "authorization",
        r#"(?i)(?P<k>\bauthorization["']?[ \t]*[:=][ \t]*["']?(?:token|bot|apikey|api-key|sso-key|key)[ \t]+)[A-Za-z0-9\-._~+/=:]{8,}"#,
    ),
    // XML elements named like a secret.
    rule(
        "password",
        r"(?i)(?P<k><(?:password|passwd|secret|token|api_?key|access_?key)>)[^<\s$%{*\[][^<]*(?P<t></)",
    ),
    // netrc: `machine HOST login USER password SECRET` (or `default ... password SECRET`).
    rule(
        "netrc",
        r"(?i)(?P<k>\b(?:machine[ \t]+\S+|default)(?:[ \t\n]+login[ \t]+\S+)?[ \t\n]+password[ \t]+)\S+",
    ),
    // .pgpass: `host:port:database:user:password`, one entry per line.
    rule(
        "pgpass",
        r"(?m)(?P<k>^[A-Za-z0-9.\-_*]+:(?:\d{1,5}|\*):[^:\s]+:[^:\s]*[A-Za-z*][^:\s]*:)[^\s\[]{4,}$",
    ),
    // Generic forms, after every named format.
    rule(
        "jwt",
        r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
    ),
    // `scheme://user:password@`, the user optional (`redis://:password@host`), and not a
    // marker an earlier rule left (`https://[REDACTED:sentry_dsn]@`).
    rule(
        "url_credentials",
        r"(?i)(?P<k>\b[a-z][a-z0-9+.\-]*://)(?:[^/\s:@\[][^/\s:@]*)?:[^/\s@]+(?P<t>@)",
    ),
    rule(
        "curl_user",
        r"(?P<k>\bcurl\b[^\n]*?[ \t](?:-u|--user)[ \t]*)[^\s:\[]+:[^\s]+",
    ),
    checked(
        "basic_auth",
        r"(?i)\bbasic[ \t]+[A-Za-z0-9+/]{12,}={0,2}",
        last_word_is_a_token,
    ),
    checked(
        "bearer",
        r"(?i)\bbearer[ \t]+[A-Za-z0-9\-._~+/]{8,}=*",
        last_word_is_a_token,
    ),
    // Key/value pairs named like a secret. A quoted value is a literal; an unquoted one may be
    // code (`colon_token: node.colon_token`, `password: Option<String>`, `token =
    // CancellationToken`) and must read as a literal secret. A password is a single word of 6
    // or more characters, not a placeholder (`$DB_PASSWORD`, `<password>`, `{{ ... }}`, `%s`,
    // `****`), a path or a secret already redacted (`[REDACTED:...]`).
    checked(
        "password",
        concat!(
            password_name!(),
            r#"["']?[ \t]*[:=][ \t]*["'])"#,
            password_value!()
        ),
        is_a_token,
    ),
    checked(
        "password",
        concat!(
            password_name!(),
            r#"["']?[ \t]*[:=][ \t]*)"#,
            password_value!()
        ),
        is_a_literal_secret,
    ),
    rule(
        "api_key_kv",
        concat!(
            secret_name!(),
            r#"["']?[ \t]*[:=][ \t]*["'])[A-Za-z0-9_\-./+]{16,}"#
        ),
    ),
    checked(
        "api_key_kv",
        concat!(
            secret_name!(),
            r#"["']?[ \t]*[:=][ \t]*)[A-Za-z0-9_\-./+]{16,}"#
        ),
        is_a_literal_secret,
    ),
    // Command-line flags that carry a secret, and a database client's `-pSECRET`: last, so a
    // value a named rule or a `--password=` pair already took keeps that rule's kind.
    checked(
        "cli_secret",
        r"(?P<k>(?:^|\s)--(?:token|password|passwd|secret|api-key|apikey|access-key|auth-token)(?:[ \t]+|=))[^\s\-$<{\[][^\s]{5,}",
        is_a_token,
    ),
    rule(
        "cli_secret",
        r"(?P<k>\b(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump)\b[^\n]*?[ \t]-p)[^\s\-\[][^\s]{3,}",
    ),
];

/// Whether a credential after a scheme word (`Basic ...`, `Bearer ...`) is a token, not prose
/// (`Basic authentication`): a token's shape (`is_a_token`) or 20 characters or more.
fn last_word_is_a_token(matched: &str) -> bool {
    let Some(word) = matched.split_whitespace().last() else {
        return false;
    };
    // A challenge's parameter (`Bearer resource_metadata="..."`) is a name, not a token.
    if let Some(name) = word.strip_suffix('=')
        && (name.contains('_') || name.bytes().all(|c| c.is_ascii_lowercase()))
        && name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
    {
        return false;
    }
    // A sentence's full stop is not part of the word: `bearer authentication.` English words
    // are shorter than 20 letters; an opaque token of plain letters is not.
    let word = word.trim_end_matches(['.', ',']);
    word.len() >= 20 || is_a_token(word)
}

/// An unquoted value that reads as a literal secret rather than code (a type, a field, a call,
/// a constant's name): it has a digit, no `.`, `::`, brackets or parentheses, and it is not a
/// `snake_case` or `SCREAMING_CASE` name.
fn is_a_literal_secret(value: &str) -> bool {
    let bytes = value.as_bytes();
    let digit = bytes.iter().any(u8::is_ascii_digit);
    let code = bytes
        .iter()
        .any(|c| matches!(c, b'.' | b':' | b'<' | b'>' | b'(' | b')' | b'[' | b']'));
    let name_case = |case: fn(&u8) -> bool| {
        bytes.contains(&b'_')
            && bytes
                .iter()
                .all(|c| case(c) || c.is_ascii_digit() || *c == b'_')
    };
    digit && !code && !name_case(u8::is_ascii_uppercase) && !name_case(u8::is_ascii_lowercase)
}

/// Whether a token's random part mixes at least two of lower case, upper case and digits, as a
/// generated token does (`hvs.6j4cuewowBGit65rheNoceI7`) and a name in prose or code does not
/// (`hvs.service_token_prefix`).
fn has_two_character_classes(matched: &str) -> bool {
    let random = matched.split_once('.').map_or(matched, |(_, rest)| rest);
    let has = |class: fn(&u8) -> bool| random.bytes().any(|c| class(&c));
    let classes = [
        has(u8::is_ascii_lowercase),
        has(u8::is_ascii_uppercase),
        has(u8::is_ascii_digit),
    ];
    classes.iter().filter(|c| **c).count() >= 2
}

/// Whether a base64 run opening with `-----BEGIN` encodes a private key's header (`-----BEGIN
/// RSA PRIVATE KEY-----`), not a certificate's or a public key's.
fn encodes_a_private_key(run: &str) -> bool {
    use base64::Engine;
    // The header is within the first 64 characters (48 bytes); decode them only.
    let head: String = run
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .take(64)
        .collect();
    let whole = head.len() - head.len() % 4;
    let Ok(decoded) = base64::engine::general_purpose::STANDARD_NO_PAD.decode(&head[..whole])
    else {
        return false;
    };
    let Some(header) = decoded.strip_prefix(b"-----BEGIN ") else {
        return false;
    };
    let end = header
        .windows(5)
        .position(|w| w == b"-----")
        .unwrap_or(header.len());
    header[..end].ends_with(b"PRIVATE KEY") || header[..end].ends_with(b"PRIVATE KEY BLOCK")
}

/// A token, not a word: it has a digit or a symbol, or a capital after its first letter.
fn is_a_token(word: &str) -> bool {
    word.bytes().any(|c| !c.is_ascii_alphabetic())
        || word.bytes().skip(1).any(|c| c.is_ascii_uppercase())
}

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
        "accesskey",
        "secret_key",
        "secretkey",
        "app_key",
        "passphrase",
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
