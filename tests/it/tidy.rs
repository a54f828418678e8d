//! Repository invariants: every source file says what it is for, gRPC types stay at the boundary.

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

fn sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
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
fn grpc_types_stay_in_the_grpc_boundary() {
    let allowed = [
        "src/grpc",
        "src/pb.rs",
        "src/protojson",
        "src/safety/hooks/grpc.rs",
        "src/app.rs",
        "src/lib.rs",
        "src/tools/remote",
    ];
    for (path, text) in sources() {
        if allowed.iter().any(|a| path.starts_with(a)) {
            continue;
        }
        for needle in ["tonic::", "prost::", "prost_types::", "crate::pb"] {
            assert!(
                !text.contains(needle),
                "{path} uses {needle}; only the gRPC boundary may"
            );
        }
    }
}

#[test]
fn log_messages_are_lowercase() {
    for (path, text) in sources() {
        for macro_name in ["info!(", "warn!(", "error!(", "debug!("] {
            for (i, _) in text.match_indices(macro_name) {
                let call = &text[i..];
                let Some(start) = call.find('"') else {
                    continue;
                };
                let end = call.find(");").unwrap_or(call.len());
                if start > end {
                    continue;
                }
                let first = call[start + 1..].chars().next().unwrap_or('a');
                assert!(
                    !first.is_uppercase(),
                    "{path}: log message must start lowercase: {}",
                    &call[..end.min(120)]
                );
            }
        }
    }
}

/// The module layers, lowest first (ARCHITECTURE.md draws the same picture). A module may use
/// modules of lower layers only: never its own layer's neighbours, never a higher layer.
const LAYERS: &[&[&str]] = &[
    &["hash", "duration", "glob", "child"],
    &["json", "trace", "metrics", "identity"],
    &["protojson", "calls", "mapping"],
    // The generated code (in OUT_DIR, so not read here) holds `protojson` types (extern_path).
    &["pb"],
    &["tools"],
    &["safety"],
    &["session"],
    &["middleware"],
    &["dispatch"],
    &["config"],
    &["grpc", "telemetry"],
    &["app"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
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
        let rel = path.trim_start_matches("src/");
        let module = rel.split(['/', '.']).next().unwrap_or_default();
        if matches!(module, "lib" | "main") || rel.contains("/tests") || rel.ends_with("tests.rs") {
            continue;
        }
        let own = layer_of(module).unwrap_or_else(|| {
            panic!("{path}: module `{module}` has no place in LAYERS (tidy.rs)")
        });
        // Unit tests sit at the bottom of a file and may reach anywhere.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for target in crate_modules(code) {
            if target == module {
                continue;
            }
            let theirs = layer_of(&target)
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
