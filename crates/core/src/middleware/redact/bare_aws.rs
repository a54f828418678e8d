//! A bare AWS secret access key (40 base64 characters with no prefix and no name beside it),
//! told apart from the identifiers, hashes and base64 data that look like one.

use std::borrow::Cow;

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
    // states and made every text with long base64 in it about 8 times slower to scan. The
    // loop has no branch on the text's bytes but the rare end of a 40-character run, so it
    // costs about a nanosecond a byte whatever the text.
    let bytes = text.as_bytes();
    if bytes.len() < AWS_SECRET_LEN {
        return Cow::Borrowed(text);
    }
    let mut out = String::new();
    let (mut copied, mut run) = (0, 0);
    for end in 0..=bytes.len() {
        let base64 = bytes.get(end).is_some_and(|&c| BASE64[usize::from(c)]);
        if (run == AWS_SECRET_LEN) & !base64 {
            let start = end - AWS_SECRET_LEN;
            if bare_aws_secret(bytes, start, end) {
                out.push_str(text.get(copied..start).unwrap_or_default());
                out.push_str("[REDACTED:aws_secret_key]");
                copied = end;
            }
        }
        run = (run + 1) * usize::from(base64);
    }
    if copied == 0 {
        return Cow::Borrowed(text);
    }
    out.push_str(text.get(copied..).unwrap_or_default());
    Cow::Owned(out)
}

/// The base64 alphabet, `[A-Za-z0-9+/]`, as a table indexed by byte.
const BASE64: [bool; 256] = {
    let mut table = [false; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        table[c] = b.is_ascii_alphanumeric() || b == b'+' || b == b'/';
        c += 1;
    }
    table
};

/// The length of an AWS secret access key: 30 bytes in base64.
pub(super) const AWS_SECRET_LEN: usize = 40;

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
    let line = text
        .iter()
        .rev()
        .take_while(|&&c| BASE64[usize::from(c)])
        .count();
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
