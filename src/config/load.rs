//! Loading: the embedded default, then a TOML file, then `TOOLGATE_*` variables, merged as TOML
//! tables in that order; then each section typed on its own, so one bad section does not hide
//! problems in another; then validation, so every problem comes back at once.

use std::path::Path;
use std::sync::OnceLock;

use serde::de::DeserializeOwned;
use toml::Table;

use super::{Config, ConfigError, DEFAULT_TOML, ENV_PREFIX};

impl Config {
    /// Loads the embedded default, then `file` (if any), then `TOOLGATE_*` variables from `env`.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let mut problems = Vec::new();
        let mut table = default_table(&mut problems);
        if let Some(path) = file {
            match std::fs::read_to_string(path) {
                Ok(text) => {
                    let overrides = parse_toml(&text, &path.display().to_string(), &mut problems);
                    merge(&mut table, overrides);
                }
                Err(e) => problems.push(format!("{}: cannot read: {e}", path.display())),
            }
        }
        apply_env(&mut table, env, &mut problems);
        finish(table, problems)
    }

    /// Parses a TOML document on top of the embedded default, without the environment.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let mut problems = Vec::new();
        let mut table = default_table(&mut problems);
        merge(&mut table, parse_toml(text, "config", &mut problems));
        finish(table, problems)
    }
}

/// Types the merged table and checks it, adding to the problems found while merging.
fn finish(table: Table, mut problems: Vec<String>) -> Result<Config, ConfigError> {
    let config = Config::read_sections(table, &mut problems);
    problems.extend(config.problems());
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(ConfigError { problems })
    }
}

/// The embedded default as a table, parsed once: it is mostly comments, and parsing it was most
/// of the cost of reading a small config (every `Config::default()`, every fuzz input).
fn default_table(problems: &mut Vec<String>) -> Table {
    static PARSED: OnceLock<Result<Table, String>> = OnceLock::new();
    let parsed = PARSED.get_or_init(|| {
        let mut problems = Vec::new();
        let table = parse_toml(DEFAULT_TOML, "embedded default", &mut problems);
        match problems.pop() {
            None => Ok(table),
            Some(problem) => Err(problem),
        }
    });
    match parsed {
        Ok(table) => table.clone(),
        Err(problem) => {
            problems.push(problem.clone());
            Table::new()
        }
    }
}

fn parse_toml(text: &str, origin: &str, problems: &mut Vec<String>) -> Table {
    match text.parse::<Table>() {
        Ok(table) => table,
        Err(e) => {
            problems.push(format!("{origin}: {}", e.to_string().trim_end()));
            Table::new()
        }
    }
}

/// Deep-merges `overrides` into `base`: tables merge key by key, anything else replaces.
fn merge(base: &mut Table, overrides: Table) {
    for (key, value) in overrides {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(into)), toml::Value::Table(from)) => merge(into, from),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// `TOOLGATE_SECTION__KEY=value` sets `section.key`; the value is read as a TOML value when it
/// parses as one (`100`, `true`, `["a"]`) and as a string otherwise. `TOOLGATE_LISTEN` is short
/// for `TOOLGATE_SERVER__LISTEN`. Variables without `__` are not config keys and are ignored.
fn apply_env(
    table: &mut Table,
    env: impl IntoIterator<Item = (String, String)>,
    problems: &mut Vec<String>,
) {
    let mut vars: Vec<(String, String)> = env
        .into_iter()
        .filter(|(k, _)| k.starts_with(ENV_PREFIX))
        .collect();
    vars.sort();
    for (name, raw) in vars {
        let rest = &name[ENV_PREFIX.len()..];
        let path: Vec<String> = if rest == "LISTEN" {
            vec!["server".into(), "listen".into()]
        } else if rest.contains("__") {
            rest.split("__").map(str::to_lowercase).collect()
        } else {
            continue;
        };
        if path.iter().any(String::is_empty) {
            problems.push(format!("{name}: malformed variable name"));
            continue;
        }
        let value = format!("v = {raw}")
            .parse::<Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or(toml::Value::String(raw));
        if let Err(part) = set_path(table, &path, value) {
            problems.push(format!("{name}: '{part}' is not a section"));
        }
    }
}

/// Sets `path` in nested tables, creating them; fails with the segment that is not a table.
fn set_path(table: &mut Table, path: &[String], value: toml::Value) -> Result<(), String> {
    match path {
        [] => Ok(()),
        [last] => {
            table.insert(last.clone(), value);
            Ok(())
        }
        [first, rest @ ..] => {
            let entry = table
                .entry(first.clone())
                .or_insert_with(|| toml::Value::Table(Table::new()));
            match entry {
                toml::Value::Table(next) => set_path(next, rest, value),
                _ => Err(first.clone()),
            }
        }
    }
}

/// Types section `name` into `into`, adding a problem for each key that cannot be read. A value
/// typed as it is read names its own key (`server.listen: ...`, `parse.rs`) and is reported as
/// it is; any other problem is the section's (`[dispatch]: 'soon' is not a duration`).
///
/// A key that cannot be read does not hide the others: each key is tried alone, the ones that
/// fail are reported and left at their defaults, and the rest of the section is read, so the
/// rules of `validate.rs` still judge every value that was given.
pub(super) fn section<T: DeserializeOwned>(
    table: &mut Table,
    name: &str,
    into: &mut T,
    problems: &mut Vec<String>,
) {
    let Some(value) = table.remove(name) else {
        return;
    };
    let first = match value.clone().try_into::<T>() {
        Ok(parsed) => {
            *into = parsed;
            return;
        }
        Err(e) => e,
    };
    let toml::Value::Table(mut keys) = value else {
        problems.push(section_problem(name, &first));
        return;
    };
    let bad: Vec<(String, toml::de::Error)> = keys
        .iter()
        .filter_map(|(key, v)| {
            let alone = Table::from_iter([(key.clone(), v.clone())]);
            let error = toml::Value::Table(alone).try_into::<T>().err()?;
            // A key that fails only for want of the others is not the bad one.
            (!error.message().starts_with("missing field")).then(|| (key.clone(), error))
        })
        .collect();
    if bad.is_empty() {
        problems.push(section_problem(name, &first));
        return;
    }
    for (key, error) in &bad {
        problems.push(section_problem(name, error));
        keys.remove(key);
    }
    match toml::Value::Table(keys).try_into::<T>() {
        Ok(parsed) => *into = parsed,
        Err(e) => problems.push(section_problem(name, &e)),
    }
}

/// A section's problem as it is reported: as it is when it names its own key, else under the
/// section's name.
fn section_problem(name: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim_end();
    match message.strip_prefix(name) {
        Some(key) if key.starts_with('.') => message.to_owned(),
        _ => format!("[{name}]: {message}"),
    }
}
