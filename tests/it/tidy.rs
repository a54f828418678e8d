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
