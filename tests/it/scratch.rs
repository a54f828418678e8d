//! The scratch tools through the API, against a hostile directory: every symlink variant
//! (dangling, to a file, to a directory, as a parent, swapped in between calls) stays inside,
//! directories are private with unguessable names, and the quota is a soft error.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use toolgate::config::Config;
use toolgate::pb::ErrorClass;

use crate::support::*;

/// A server whose sessions' directories go under `<top>/base`, and `<top>/outside` beside it.
struct Hostile {
    ts: TestServer,
    top: PathBuf,
}

impl Hostile {
    async fn start(name: &str, extra: &str) -> Hostile {
        let top =
            std::env::temp_dir().join(format!("toolgate-it-scratch-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&top);
        std::fs::create_dir_all(top.join("base")).unwrap();
        std::fs::create_dir_all(top.join("outside")).unwrap();
        std::fs::write(top.join("outside/secret.txt"), "outside").unwrap();
        let config = format!(
            "[sessions]\nscratch_base = {:?}\n[loop_detection]\nenabled = false\n{extra}",
            top.join("base").display().to_string()
        );
        let ts = start_with(Config::from_toml(&config).unwrap()).await;
        Hostile { ts, top }
    }

    fn outside(&self) -> PathBuf {
        self.top.join("outside")
    }

    /// Runs one scratch call in session "s": (success, error class, error text, content).
    async fn call(&self, tool: &str, arguments: Value) -> (bool, ErrorClass, String, String) {
        let mut req = request(json!([{"id": "c", "name": tool, "arguments": arguments}]));
        req.session_id = "s".into();
        let result = dispatch(&self.ts, req).await;
        let r = &result.results[0];
        (r.success, class(r), r.error.clone(), r.content.clone())
    }

    /// Writes a file in session "s"; whether it worked.
    async fn write(&self, path: &str, content: &str) -> bool {
        let arguments = json!({"path": path, "content": content});
        self.call("scratch_write", arguments).await.0
    }

    /// The session's directory (the only one under the base), made by a first write.
    async fn session_dir(&self) -> PathBuf {
        assert!(self.write("first.txt", "x").await);
        let dirs: Vec<PathBuf> = std::fs::read_dir(self.top.join("base"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(dirs.len(), 1, "{dirs:?}");
        dirs[0].clone()
    }

    fn outside_untouched(&self) {
        let mut names: Vec<String> = std::fs::read_dir(self.outside())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["secret.txt"], "nothing was made outside");
        let text = std::fs::read_to_string(self.outside().join("secret.txt")).unwrap();
        assert_eq!(text, "outside", "nothing outside was changed");
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.top);
    }
}

#[track_caller]
fn refused_as_symlink(answer: (bool, ErrorClass, String, String), path: &str) {
    assert_eq!(
        (answer.0, answer.1, answer.2.as_str()),
        (
            false,
            ErrorClass::InvalidArguments,
            format!("path '{path}' goes through a symlink, which the scratch tools never follow")
                .as_str()
        ),
        "{path}"
    );
}

#[tokio::test]
async fn scratch_symlinks_of_every_kind_stay_inside() {
    let h = Hostile::start("symlinks", "").await;
    let dir = h.session_dir().await;
    let outside = h.outside();
    // Dangling, to a target outside: the review's attack wrote through this one.
    symlink(outside.join("planted.txt"), dir.join("dangling.txt")).unwrap();
    // To a file outside, and to a directory outside.
    symlink(outside.join("secret.txt"), dir.join("file-link.txt")).unwrap();
    symlink(&outside, dir.join("dir-link")).unwrap();
    // A link deeper down, as a parent component.
    std::fs::create_dir_all(dir.join("a/b")).unwrap();
    symlink(&outside, dir.join("a/b/linkdir")).unwrap();
    for path in [
        "dangling.txt",
        "file-link.txt",
        "dir-link/secret.txt",
        "dir-link/new.txt",
        "dir-link/made/new.txt",
        "a/b/linkdir/secret.txt",
        "a/b/linkdir/new/deeper.txt",
    ] {
        let write = h
            .call("scratch_write", json!({"path": path, "content": "pwned"}))
            .await;
        refused_as_symlink(write, path);
    }
    for path in [
        "dangling.txt",
        "file-link.txt",
        "dir-link/secret.txt",
        "a/b/linkdir/secret.txt",
    ] {
        refused_as_symlink(h.call("scratch_read", json!({"path": path})).await, path);
    }
    for path in ["dir-link", "a/b/linkdir"] {
        refused_as_symlink(h.call("scratch_list", json!({"path": path})).await, path);
    }
    // The listing shows the links for what they are.
    let (ok, _, _, content) = h.call("scratch_list", json!({})).await;
    assert!(ok);
    let listed: Value = serde_json::from_str(&content).unwrap();
    assert!(
        listed["entries"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "dir-link", "kind": "symlink"})),
        "{listed}"
    );
    h.outside_untouched();
}

#[tokio::test]
async fn a_scratch_directory_swapped_for_a_link_between_calls_is_refused() {
    let h = Hostile::start("swap", "").await;
    let dir = h.session_dir().await;
    assert!(h.write("d/f.txt", "one").await);
    std::fs::rename(dir.join("d"), dir.join("d-old")).unwrap();
    symlink(h.outside(), dir.join("d")).unwrap();
    let write = h
        .call(
            "scratch_write",
            json!({"path": "d/f.txt", "content": "two"}),
        )
        .await;
    refused_as_symlink(write, "d/f.txt");
    refused_as_symlink(
        h.call("scratch_read", json!({"path": "d/secret.txt"}))
            .await,
        "d/secret.txt",
    );
    h.outside_untouched();
}

#[tokio::test]
async fn scratch_directories_are_private_with_unguessable_names() {
    let h = Hostile::start("private", "").await;
    let dir = h.session_dir().await;
    let name = dir.file_name().unwrap().to_str().unwrap();
    let digits = name.strip_prefix("toolgate-").unwrap();
    assert!(
        digits.len() == 32 && digits.bytes().all(|b| b.is_ascii_hexdigit()),
        "{name}"
    );
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert!(h.write("sub/f.txt", "x").await);
    assert_eq!(mode(&dir.join("sub")), 0o700);
    assert_eq!(mode(&dir.join("sub/f.txt")), 0o600);
}

#[tokio::test]
async fn the_scratch_quota_is_a_soft_error_the_model_reads() {
    let h = Hostile::start("quota", "[tools.builtin]\nscratch_quota_bytes = 20000\n").await;
    h.session_dir().await;
    // first.txt took 4097 bytes; 8000 more bytes and an entry fit, 4000 after that do not.
    assert!(h.write("a.txt", &"a".repeat(8000)).await);
    let answer = h
        .call(
            "scratch_write",
            json!({"path": "b.txt", "content": "b".repeat(4000)}),
        )
        .await;
    assert_eq!(
        (answer.0, answer.1, answer.2.as_str()),
        (
            false,
            ErrorClass::InvalidArguments,
            "'b.txt' was not written: the session's scratch files would take 24289 bytes, over its quota of 20000 (overwrite files with less to make room)"
        )
    );
    assert!(
        h.write("a.txt", "").await,
        "overwriting with less makes room"
    );
    assert!(h.write("b.txt", &"b".repeat(4000)).await);
}
