//! Repository invariants the compiler cannot see: every source file says what it is for, the
//! engine crate stays free of gRPC and configuration, modules inside a crate point only down,
//! log messages are lowercase. (Which crate may use which is the manifests' business.)

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every Rust source of the workspace's crates (the server's `src/` and `crates/*/src`), as
/// (path from the repository, text).
fn sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    for krate in std::fs::read_dir(root.join("crates")).unwrap() {
        rust_files(&krate.unwrap().path().join("src"), &mut files);
    }
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            (rel, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

#[test]
fn every_source_file_opens_with_a_module_doc_line() {
    for (path, text) in sources() {
        assert!(
            text.starts_with("//!"),
            "{path} must start with a //! line saying what it is for"
        );
    }
}

#[test]
fn the_engine_depends_on_no_grpc_and_no_configuration() {
    let manifest = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/crates/core/Cargo.toml"
    ))
    .unwrap();
    let manifest: toml::Table = manifest.parse().unwrap();
    let dependencies = manifest["dependencies"].as_table().unwrap();
    for name in [
        "tonic",
        "prost",
        "prost-types",
        "hyper",
        "http",
        "toml",
        "clap",
    ] {
        assert!(
            !dependencies.contains_key(name),
            "crates/core depends on {name}: the engine speaks domain types; the wire and the \
             config file are the server's (ARCHITECTURE.md, Crates)"
        );
    }
    for crate_name in ["toolgate", "toolgate-proto", "toolgate-remotes"] {
        assert!(
            !dependencies.contains_key(crate_name),
            "crates/core depends on {crate_name}"
        );
    }
}

#[test]
fn grpc_types_stay_in_the_grpc_boundary_of_the_server() {
    // In the server crate, configuration and telemetry speak domain types too.
    // The stdio bridge is a gRPC client of a running server.
    let allowed = ["src/grpc", "src/app.rs", "src/lib.rs", "src/bridge.rs"];
    for (path, text) in sources() {
        if !path.starts_with("src/") || allowed.iter().any(|a| path.starts_with(a)) {
            continue;
        }
        for needle in ["tonic::", "prost::", "prost_types::", "toolgate_proto::pb"] {
            assert!(
                !text.contains(needle),
                "{path} uses {needle}; only the gRPC boundary may"
            );
        }
    }
}

/// Every log macro call in the sources: (path, the call's text up to its `);`).
fn log_calls() -> Vec<(String, String)> {
    let mut calls = Vec::new();
    for (path, text) in sources() {
        for macro_name in ["info!(", "warn!(", "error!(", "debug!(", "trace!("] {
            for (i, _) in text.match_indices(macro_name) {
                let call = &text[i + macro_name.len()..];
                let end = call.find(");").unwrap_or(call.len());
                calls.push((path.clone(), call[..end].to_owned()));
            }
        }
    }
    calls
}

#[test]
fn log_messages_are_lowercase() {
    for (path, call) in log_calls() {
        // The message is the first string after the target, if any.
        let call = match call.trim_start().strip_prefix("target:") {
            Some(rest) => rest.splitn(3, '"').nth(2).unwrap_or_default(),
            None => &call,
        };
        let Some(start) = call.find('"') else {
            continue;
        };
        let first = call[start + 1..].chars().next().unwrap_or('a');
        assert!(
            !first.is_uppercase(),
            "{path}: log message must start lowercase: {}",
            &call[..call.len().min(120)]
        );
    }
}

/// One filter directive (`toolgate=debug`, `toolgate::dispatch=debug`) covers the whole service:
/// the other crates' log lines name a target under `toolgate::` (their module's path from before
/// the workspace split), not their own crate's.
#[test]
fn every_log_line_of_the_other_crates_has_a_toolgate_target() {
    for (path, call) in log_calls() {
        if path.starts_with("crates/") && !path.contains("/tests") && !path.ends_with("tests.rs") {
            assert!(
                call.trim_start().starts_with("target: \"toolgate::"),
                "{path}: a log line outside the server crate needs `target: \"toolgate::...\"`: {}",
                &call[..call.len().min(120)]
            );
        }
    }
}

/// The module layers of each crate, lowest first (ARCHITECTURE.md draws the same picture). A
/// module may use modules of lower layers of its own crate only: never its own layer's
/// neighbours, never a higher layer. Between crates the manifests decide.
const LAYERS: &[(&str, &[&[&str]])] = &[
    (
        "crates/core/src/",
        &[
            &["hash", "duration", "glob", "child"],
            &["json", "trace", "metrics", "identity"],
            &["calls", "mapping"],
            &["tools"],
            &["safety"],
            &["session"],
            &["approvals"],
            &["middleware"],
            &["dispatch"],
        ],
    ),
    ("crates/proto/src/", &[&["protojson"], &["pb"], &["codec"]]),
    (
        "src/",
        &[
            &["config"],
            &["front", "telemetry", "store"],
            &["grpc", "mcp", "console"],
            &["app", "bridge"],
        ],
    ),
];

fn layer_of(layers: &[&[&str]], module: &str) -> Option<usize> {
    layers.iter().position(|layer| layer.contains(&module))
}

/// The top-level modules a source text names through `crate::`, including `crate::{a, b::c}`.
fn crate_modules(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut item_start = true;
            let mut word = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 1 => break,
                    '}' => depth -= 1,
                    ',' if depth == 1 => {
                        if !word.is_empty() {
                            found.push(std::mem::take(&mut word));
                        }
                        item_start = true;
                    }
                    c if c.is_alphanumeric() || c == '_' => {
                        if item_start {
                            word.push(c);
                        }
                    }
                    _ => {
                        if !word.is_empty() {
                            found.push(std::mem::take(&mut word));
                            item_start = false;
                        }
                    }
                }
            }
            if !word.is_empty() {
                found.push(word);
            }
        } else {
            let word: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !word.is_empty() {
                found.push(word);
            }
        }
    }
    found
}

#[test]
fn modules_only_use_lower_layers() {
    for (path, text) in sources() {
        let Some((root, layers)) = LAYERS.iter().find(|(root, _)| path.starts_with(root)) else {
            continue;
        };
        let rel = &path[root.len()..];
        let module = rel.split(['/', '.']).next().unwrap_or_default();
        if matches!(module, "lib" | "main") || rel.contains("/tests") || rel.ends_with("tests.rs") {
            continue;
        }
        let own = layer_of(layers, module).unwrap_or_else(|| {
            panic!("{path}: module `{module}` has no place in LAYERS (tidy.rs)")
        });
        // Unit tests sit at the bottom of a file and may reach anywhere.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for target in crate_modules(code) {
            if target == module {
                continue;
            }
            let theirs = layer_of(layers, &target)
                .unwrap_or_else(|| panic!("{path}: uses crate::{target}, which has no layer"));
            assert!(
                theirs < own,
                "{path} (layer {own}, `{module}`) uses crate::{target} (layer {theirs}): a module \
                 may only use lower layers; move the shared name down (ARCHITECTURE.md, Layers)"
            );
        }
    }
}

#[test]
fn the_layer_check_reads_grouped_imports() {
    assert_eq!(
        crate_modules("use crate::{hash, json::canonical};\nlet x = crate::tools::X;"),
        ["hash", "json", "tools"]
    );
    assert_eq!(crate_modules("use crate::{a::{b, c}, d};"), ["a", "d"]);
}

/// The module a source file is, from its path below its crate's `src/`: `grpc/service.rs` is
/// `grpc::service`, `grpc/service/tests.rs` is `grpc::service::tests`, `lib.rs` is the root.
fn module_path(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("lib" | "main" | "mod")
    ) {
        parts.pop();
    }
    parts
}

/// The module paths a source text names through `crate::` or `super::` (resolved against
/// `own`, the file's module), each as far as its lowercase segments go, grouped imports
/// (`super::{a, b::c}`) taken item by item.
fn module_references(text: &str, own: &[String]) -> Vec<Vec<String>> {
    let word = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect()
    };
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(i) = text[at..].find(['c', 's']).map(|i| at + i) {
        at = i + 1;
        // Only at the start of a path (not inside an identifier such as `my_crate::`).
        if text[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
        {
            continue;
        }
        let rest = &text[i..];
        let (base, rest) = if let Some(r) = rest.strip_prefix("crate::") {
            (Vec::new(), r)
        } else if rest.starts_with("super::") {
            let mut base = own.to_vec();
            let mut r = rest;
            while let Some(next) = r.strip_prefix("super::") {
                base.pop();
                r = next;
            }
            (base, r)
        } else {
            continue;
        };
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let path = segments(base.clone(), item.trim(), &word);
                if path.len() > base.len() {
                    found.push(path);
                }
            }
        } else {
            found.push(segments(base, rest, &word));
        }
    }
    found
}

/// `base` extended by the lowercase segments `text` starts with (`a::b::Type` adds `a`, `b`).
fn segments(mut base: Vec<String>, mut text: &str, word: &dyn Fn(&str) -> String) -> Vec<String> {
    loop {
        let name = word(text);
        if name.is_empty() {
            return base;
        }
        text = &text[name.len()..];
        base.push(name);
        match text.strip_prefix("::") {
            Some(next) => text = next,
            None => return base,
        }
    }
}

/// The module at `path` below `root` exists as a file or a folder.
fn is_module(root: &Path, path: &[String]) -> bool {
    let joined = path.join("/");
    !path.is_empty() && (root.join(format!("{joined}.rs")).is_file() || root.join(&joined).is_dir())
}

#[test]
fn no_module_and_its_siblings_import_each_other_in_a_circle() {
    use std::collections::{BTreeMap, BTreeSet};
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    // Per parent module, which of its children use which (non-test code).
    let mut edges: BTreeMap<(String, Vec<String>), BTreeMap<String, BTreeSet<String>>> =
        BTreeMap::new();
    for (path, text) in sources() {
        let (root, rel) = match path.find("src/") {
            Some(i) => (&path[..i + 4], &path[i + 4..]),
            None => continue,
        };
        if rel.contains("/tests") || rel.ends_with("tests.rs") {
            continue;
        }
        let own = module_path(rel);
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for target in module_references(code, &own) {
            let common = own.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common >= own.len() || common >= target.len() {
                continue;
            }
            let (from, to) = (&own[common], &target[common]);
            if !is_module(&repo.join(root), &target[..=common]) {
                continue;
            }
            edges
                .entry((root.to_owned(), own[..common].to_vec()))
                .or_default()
                .entry(from.clone())
                .or_default()
                .insert(to.clone());
        }
    }
    // A circle is a child that reaches itself.
    for ((root, parent), graph) in &edges {
        for start in graph.keys() {
            let mut seen = BTreeSet::new();
            let mut stack: Vec<(&String, Vec<&String>)> = vec![(start, vec![start])];
            while let Some((at, trail)) = stack.pop() {
                for next in graph.get(at).into_iter().flatten() {
                    assert!(
                        next != start,
                        "{root}{}: modules import each other in a circle: {} -> {next}; move \
                         what they share down (ARCHITECTURE.md)",
                        parent.join("/"),
                        trail
                            .iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(" -> ")
                    );
                    if seen.insert(next) {
                        let mut longer = trail.clone();
                        longer.push(next);
                        stack.push((next, longer));
                    }
                }
            }
        }
    }
}

#[test]
fn module_references_are_resolved_against_the_file() {
    let own = ["grpc".to_owned(), "service".to_owned()];
    assert_eq!(
        module_references(
            "use super::transport::Connections;\nuse crate::{config, grpc::auth};\nuse super::{slots, Thing};",
            &own
        ),
        [
            vec!["grpc", "transport"],
            vec!["config"],
            vec!["grpc", "auth"],
            vec!["grpc", "slots"],
        ]
    );
}

/// Issue 46, item 7: spans are opened, closed and given their events by one layer
/// (`dispatch/traced.rs`) around the batch, each call and each attempt; the driver's steps emit
/// events and never touch a span or the tracer themselves.
#[test]
fn only_the_trace_layer_makes_spans_in_the_driver() {
    let words = [
        "Span",
        "tracer.start",
        ".event(",
        ".fail(",
        "with_context",
        "attr::",
    ];
    for (path, text) in sources() {
        let driver = path == "crates/core/src/dispatch.rs"
            || path == "crates/core/src/dispatch/call.rs"
            || path.starts_with("crates/core/src/dispatch/call/");
        if !driver {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for word in words {
                assert!(
                    !code.contains(word),
                    "{path}:{}: `{word}` outside the trace layer: {line}",
                    n + 1
                );
            }
        }
    }
}
