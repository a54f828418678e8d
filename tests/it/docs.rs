//! Generated docs: `docs/configuration.md` is made from `config/default.toml` and its comments.
//!
//! In the style of rust-analyzer's sourcegen tests: when the file on disk differs from what the
//! generator makes, the test writes the new file and fails, so the change is seen and committed.
//! The rules the generator reads are written at the top of `config/default.toml`.

use std::path::{Path, PathBuf};

/// The line after which `docs/configuration.md` is generated; the text above it is hand-written.
const MARKER: &str =
    "<!-- Generated from config/default.toml by tests/it/docs.rs: edit that file, not below. -->";

#[test]
fn configuration_md_is_generated_from_default_toml() {
    let path = repo().join("docs/configuration.md");
    let current = std::fs::read_to_string(&path).unwrap();
    let Some((head, _)) = current.split_once(MARKER) else {
        panic!("docs/configuration.md must contain the line {MARKER}");
    };
    let wanted = format!("{head}{MARKER}\n{}", render(&parse(&default_toml())));
    if current != wanted {
        std::fs::write(&path, wanted).unwrap();
        panic!(
            "docs/configuration.md was out of date with config/default.toml and has been \
             regenerated: review and commit it"
        );
    }
}

#[test]
fn every_default_key_is_in_configuration_md() {
    let docs = std::fs::read_to_string(repo().join("docs/configuration.md")).unwrap();
    let table: toml::Table = toml::from_str(&default_toml()).unwrap();
    let mut keys = Vec::new();
    dotted_keys("", &table, &mut keys);
    let missing: Vec<_> = keys
        .iter()
        .filter(|key| !docs.contains(&format!("`{key}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "not in docs/configuration.md: {missing:?}"
    );
}

/// One table of the file, real or a commented-out example, with its keys in file order.
struct Section {
    /// The header as written: `[server]`, `[[remotes]]`, `[per_tool.<name>]`.
    header: String,
    example: bool,
    /// The comment right above the header (and after it on the same line).
    about: String,
    keys: Vec<Key>,
}

struct Key {
    path: String,
    value: String,
    meaning: String,
    /// The line above was a key of the same table: without a meaning of its own, this key shares
    /// that key's row (a comment above a group of keys documents the group).
    follows_key: bool,
}

/// Reads the file line by line. Comment lines gather until a key or a header takes them; a blank
/// line drops them (only the file's own head may be dropped). A comment line holding a `[table]`
/// starts an example block, read as TOML with one `#` taken off each line until a line that is
/// not a commented TOML line (blank, a bare `#`, or uncommented). A key's meaning is the comment
/// above it plus the one after its value (` # …`), which indented comment lines right below may
/// continue.
fn parse(text: &str) -> Vec<Section> {
    let mut sections: Vec<Section> = Vec::new();
    let (mut real, mut current) = (None, None);
    let mut comment: Vec<&str> = Vec::new();
    let mut example = false;
    let mut follows_key = false;
    for raw in text.lines() {
        let mut line = raw;
        if example {
            match raw.strip_prefix('#').filter(|rest| !rest.trim().is_empty()) {
                Some(rest) => line = rest.strip_prefix(' ').unwrap_or(rest),
                None => (example, current) = (false, real),
            }
        }
        let trimmed = line.trim();
        let (content, trailing) = split_comment(trimmed);
        if trimmed.is_empty() {
            assert!(
                comment.is_empty() || sections.is_empty(),
                "config/default.toml: a comment documents nothing: {comment:?}"
            );
            comment.clear();
            follows_key = false;
        } else if let Some(text) = trimmed.strip_prefix('#') {
            let text = text.trim();
            let (header, _) = split_comment(text);
            let commented_header = !example && header.starts_with('[') && header.ends_with(']');
            if text.is_empty() {
                // A bare `#` line, outside an example: a paragraph break inside a comment.
            } else if commented_header {
                example = true;
                current = Some(section(&mut sections, text, true, &mut comment));
            } else if line.starts_with(char::is_whitespace) && follows_key {
                let key = sections[current.unwrap()].keys.last_mut().unwrap();
                key.meaning = join(&[&key.meaning, text]);
            } else {
                comment.push(text);
                follows_key = false;
            }
        } else if content.starts_with('[') {
            let index = section(&mut sections, trimmed, example, &mut comment);
            (current, follows_key) = (Some(index), false);
            if !example {
                real = current;
            }
        } else {
            let Some((key, value)) = content.split_once('=') else {
                panic!("config/default.toml: not a key, a table or a comment: {raw}");
            };
            let table = &mut sections[current.unwrap()];
            let path = format!("{}.{}", header_name(&table.header), key.trim());
            if table.keys.iter().any(|k| k.path == path) {
                // A repeated example table (`[[remotes]]` of another kind) names it again.
                (follows_key, comment) = (false, Vec::new());
                continue;
            }
            let above = comment.join(" ");
            table.keys.push(Key {
                path,
                value: value.trim().to_owned(),
                meaning: join(&[&above, trailing]),
                follows_key,
            });
            (follows_key, comment) = (true, Vec::new());
        }
    }
    sections
}

/// The section with this header (a repeated example header adds to the first), taking the
/// comment gathered above it as its description.
fn section(
    sections: &mut Vec<Section>,
    line: &str,
    example: bool,
    comment: &mut Vec<&str>,
) -> usize {
    let (header, trailing) = split_comment(line);
    let about = join(&[&comment.join(" "), trailing]);
    comment.clear();
    if let Some(i) = sections.iter().position(|s| s.header == header) {
        sections[i].about = join(&[&sections[i].about, &about]);
        return i;
    }
    sections.push(Section {
        header: header.to_owned(),
        example,
        about,
        keys: Vec::new(),
    });
    sections.len() - 1
}

fn render(sections: &[Section]) -> String {
    let links: Vec<String> = sections
        .iter()
        .map(|s| format!("[`{}`](#{})", s.header, anchor(&s.header)))
        .collect();
    let mut out = format!("\nSections: {}.\n", links.join(", "));
    for s in sections {
        out += &format!("\n## `{}`\n\n", s.header);
        if !s.about.is_empty() {
            out += &format!("{}\n\n", markdown(&s.about));
        }
        let column = if s.example {
            out += "Not in the default file: the values are examples.\n\n";
            "Example"
        } else {
            "Default"
        };
        out += &format!("| Key | {column} | Meaning |\n| --- | --- | --- |\n");
        for row in rows(&s.keys) {
            let keys: Vec<String> = row.iter().map(|k| cell(&format!("`{}`", k.path))).collect();
            let values: Vec<String> = row
                .iter()
                .map(|k| cell(&format!("`{}`", k.value)))
                .collect();
            let meaning = cell(&row[0].meaning);
            out += &format!(
                "| {} | {} | {meaning} |\n",
                keys.join("<br>"),
                values.join("<br>")
            );
        }
    }
    out
}

/// Keys in rows: a key without a meaning of its own joins the row of the key above it.
fn rows(keys: &[Key]) -> Vec<Vec<&Key>> {
    let mut rows: Vec<Vec<&Key>> = Vec::new();
    for key in keys {
        if key.meaning.is_empty()
            && key.follows_key
            && let Some(row) = rows.last_mut()
        {
            row.push(key);
            continue;
        }
        assert!(
            !key.meaning.is_empty(),
            "config/default.toml: {} has no comment",
            key.path
        );
        rows.push(vec![key]);
    }
    rows
}

/// `key = value # comment` → (`key = value`, `comment`); ` #` never occurs inside a value here.
fn split_comment(line: &str) -> (&str, &str) {
    match line.split_once(" #") {
        Some((content, comment)) => (content.trim(), comment.trim()),
        None => (line, ""),
    }
}

/// `[[remotes]]` → `remotes`.
fn header_name(header: &str) -> &str {
    header.trim_matches(|c| c == '[' || c == ']')
}

/// GitHub's anchor for a heading made of this header in backticks.
fn anchor(header: &str) -> String {
    header
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '_' || *c == '-')
        .collect::<String>()
        .to_lowercase()
}

/// A table cell: also `|` escaped, which would end the cell even inside a code span.
fn cell(text: &str) -> String {
    markdown(text).replace('|', "\\|")
}

/// `<` escaped outside code spans, where GitHub would read `<name>` as an HTML tag.
fn markdown(text: &str) -> String {
    let mut out = String::new();
    let mut code = false;
    for c in text.chars() {
        code ^= c == '`';
        if c == '<' && !code {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn join(parts: &[&str]) -> String {
    let parts: Vec<&str> = parts.iter().copied().filter(|p| !p.is_empty()).collect();
    parts.join(" ")
}

/// Every key the file sets, dotted from the top (`server.listen`, `auth.jwt.issuer`).
fn dotted_keys(prefix: &str, table: &toml::Table, out: &mut Vec<String>) {
    for (key, value) in table {
        let path = format!("{prefix}{key}");
        match value {
            toml::Value::Table(inner) => dotted_keys(&format!("{path}."), inner, out),
            _ => out.push(path),
        }
    }
}

fn default_toml() -> String {
    std::fs::read_to_string(repo().join("config/default.toml")).unwrap()
}

/// The repository's root: the nearest directory above this crate with a `docs` directory.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|dir| dir.join("docs").is_dir())
        .unwrap()
        .to_path_buf()
}
