//! Scratch tool tests: the round trip, lexical escapes, every symlink variant (dangling, to a
//! file, to a directory, as a parent, swapped in between calls and during them), hard links,
//! special files and the quota.

use std::os::unix::fs::symlink;
use std::path::PathBuf;

use super::*;
use crate::tools::{Tool, ToolErrorKind};

/// A scratch directory and, beside it, a directory standing for "anywhere outside".
struct Fixture {
    ctx: ToolContext,
    root: PathBuf,
    outside: PathBuf,
}

impl Fixture {
    fn new(name: &str) -> Fixture {
        let top = std::env::temp_dir().join(format!(
            "toolgate-scratch-test-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&top);
        let root = top.join("scratch");
        let outside = top.join("outside");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), "outside").unwrap();
        let ctx = ToolContext::new("s", "c", 0, root.clone());
        Fixture { ctx, root, outside }
    }

    async fn write(&self, path: &str, content: &str) -> Result<ToolOutput, ToolError> {
        SCRATCH_WRITE
            .call(json!({"path": path, "content": content}), &self.ctx)
            .await
    }

    async fn read(&self, path: &str) -> Result<ToolOutput, ToolError> {
        SCRATCH_READ.call(json!({"path": path}), &self.ctx).await
    }

    async fn list(&self, path: &str) -> Result<ToolOutput, ToolError> {
        SCRATCH_LIST.call(json!({"path": path}), &self.ctx).await
    }

    /// What is outside: the names in it, and the one file's text, which nothing may change.
    fn outside_untouched(&self) {
        let mut names: Vec<String> = std::fs::read_dir(&self.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["secret.txt"], "nothing was made outside");
        let text = std::fs::read_to_string(self.outside.join("secret.txt")).unwrap();
        assert_eq!(text, "outside", "nothing outside was changed");
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(top) = self.root.parent() {
            let _ = std::fs::remove_dir_all(top);
        }
    }
}

#[track_caller]
fn assert_symlink_refused(result: Result<ToolOutput, ToolError>, path: &str) {
    let err = result.unwrap_err();
    assert_eq!(
        (err.kind, err.message.as_str()),
        (
            ToolErrorKind::InvalidInput,
            format!("path '{path}' goes through a symlink, which the scratch tools never follow")
                .as_str()
        )
    );
}

#[tokio::test]
async fn write_read_list_round_trip() {
    let f = Fixture::new("roundtrip");
    f.write("a/b.txt", "héllo").await.unwrap();
    let read = f.read("a/b.txt").await.unwrap();
    assert_eq!(read, ToolOutput::Text("héllo".into()));
    let list = SCRATCH_LIST.call(json!({}), &f.ctx).await.unwrap();
    assert_eq!(
        list,
        ToolOutput::Json(json!({"path": "", "entries": [{"name": "a", "kind": "dir"}]}))
    );
    let list = f.list("./a").await.unwrap();
    assert_eq!(
        list,
        ToolOutput::Json(json!({"path": "./a", "entries": [{"name": "b.txt", "kind": "file"}]}))
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(f.root.join("a")), 0o700);
    assert_eq!(mode(f.root.join("a/b.txt")), 0o600);
}

#[tokio::test]
async fn paths_that_escape_are_soft_errors() {
    let f = Fixture::new("escape");
    for path in ["../x", "/etc/passwd", "a/../../x", ".", ""] {
        let err = f.write(path, "x").await.unwrap_err();
        assert_eq!(err.kind, ToolErrorKind::InvalidInput, "{path}: {err}");
    }
    let err = f.read("../../etc/passwd").await.unwrap_err();
    assert_eq!(
        err.message,
        "path '../../etc/passwd' escapes the scratch directory: use a relative path without '..'"
    );
    f.outside_untouched();
}

/// The review's attack: a dangling link whose target is outside. The old check walked up to
/// the nearest existing parent, found it inside, and the write followed the link out.
#[tokio::test]
async fn a_dangling_symlink_is_not_written_through() {
    let f = Fixture::new("dangling");
    symlink(f.outside.join("planted.txt"), f.root.join("notes.txt")).unwrap();
    assert_symlink_refused(f.write("notes.txt", "x").await, "notes.txt");
    assert_symlink_refused(f.read("notes.txt").await, "notes.txt");
    f.outside_untouched();
}

#[tokio::test]
async fn a_symlink_to_a_file_outside_is_neither_read_nor_overwritten() {
    let f = Fixture::new("file-link");
    symlink(f.outside.join("secret.txt"), f.root.join("s.txt")).unwrap();
    assert_symlink_refused(f.read("s.txt").await, "s.txt");
    assert_symlink_refused(f.write("s.txt", "pwned").await, "s.txt");
    f.outside_untouched();
}

#[tokio::test]
async fn a_symlink_to_a_directory_outside_is_not_entered() {
    let f = Fixture::new("dir-link");
    symlink(&f.outside, f.root.join("link")).unwrap();
    assert_symlink_refused(f.read("link/secret.txt").await, "link/secret.txt");
    assert_symlink_refused(f.write("link/new.txt", "x").await, "link/new.txt");
    assert_symlink_refused(f.write("link/made/new.txt", "x").await, "link/made/new.txt");
    assert_symlink_refused(f.list("link").await, "link");
    f.outside_untouched();
}

#[tokio::test]
async fn a_symlink_in_a_parent_component_is_not_entered() {
    let f = Fixture::new("parent-link");
    f.write("a/b/keep.txt", "inside").await.unwrap();
    symlink(&f.outside, f.root.join("a/b/linkdir")).unwrap();
    for path in ["a/b/linkdir/secret.txt", "a/b/linkdir/x/y.txt"] {
        assert_symlink_refused(f.write(path, "x").await, path);
        assert_symlink_refused(f.read(path).await, path);
    }
    assert_symlink_refused(f.list("a/b/linkdir").await, "a/b/linkdir");
    f.outside_untouched();
}

#[tokio::test]
async fn a_symlink_pointing_inside_is_not_followed_either() {
    let f = Fixture::new("inner-link");
    f.write("real.txt", "inside").await.unwrap();
    symlink(f.root.join("real.txt"), f.root.join("alias.txt")).unwrap();
    assert_symlink_refused(f.read("alias.txt").await, "alias.txt");
}

#[tokio::test]
async fn listing_reports_links_without_following_them() {
    let f = Fixture::new("list-links");
    f.write("d/f.txt", "x").await.unwrap();
    symlink(&f.outside, f.root.join("out")).unwrap();
    symlink(f.outside.join("gone"), f.root.join("dangling")).unwrap();
    let list = f.list("").await.unwrap();
    assert_eq!(
        list,
        ToolOutput::Json(json!({"path": "", "entries": [
            {"name": "d", "kind": "dir"},
            {"name": "dangling", "kind": "symlink"},
            {"name": "out", "kind": "symlink"},
        ]}))
    );
}

/// A directory swapped for a link after an earlier call used it: each call opens every name
/// again from the scratch directory's descriptor, so what a previous call saw counts for nothing.
#[tokio::test]
async fn a_directory_swapped_for_a_link_between_calls_is_refused() {
    let f = Fixture::new("swap-between");
    f.write("d/f.txt", "first").await.unwrap();
    std::fs::rename(f.root.join("d"), f.root.join("d-old")).unwrap();
    symlink(&f.outside, f.root.join("d")).unwrap();
    assert_symlink_refused(f.write("d/f.txt", "second").await, "d/f.txt");
    assert_symlink_refused(f.write("d/secret.txt", "second").await, "d/secret.txt");
    f.outside_untouched();
}

/// A link planted after the path was validated and right before the write: validation is only
/// lexical, and the write's own `openat` with `O_NOFOLLOW` is what refuses the link, so there is
/// no check whose answer a swap could make stale.
#[tokio::test]
async fn a_link_planted_between_validation_and_the_write_is_refused() {
    let f = Fixture::new("swap-during");
    let parts = confine("notes.txt").unwrap();
    symlink(f.outside.join("planted.txt"), f.root.join("notes.txt")).unwrap();
    let (quota, mut used) = f.ctx.scratch.budget();
    let mut budget = Budget {
        quota,
        used: &mut used,
    };
    let written = beneath::write(&f.root, &parts, b"x", &mut budget);
    assert!(matches!(written, Err(BeneathError::Symlink)), "{written:?}");
    f.outside_untouched();
}

/// A racer swaps a directory and a link to outside as fast as it can while writes and reads
/// go on: whatever the interleaving, nothing lands outside and nothing outside is read.
#[tokio::test]
async fn writes_racing_a_swapped_link_never_leave_the_directory() {
    let f = Fixture::new("swap-race");
    f.write("d/seed.txt", "x").await.unwrap();
    std::fs::write(f.outside.join("f.txt"), "outside-f").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let racer = {
        let (root, outside, stop) = (f.root.clone(), f.outside.clone(), stop.clone());
        std::thread::spawn(move || {
            let (d, real, link) = (root.join("d"), root.join("d-real"), root.join("d-link"));
            symlink(&outside, &link).unwrap();
            std::fs::rename(&d, &real).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::fs::rename(&link, &d);
                let _ = std::fs::rename(&d, &link);
                let _ = std::fs::rename(&real, &d);
                let _ = std::fs::rename(&d, &real);
            }
        })
    };
    for i in 0..300 {
        let _ = f.write("d/f.txt", &format!("inside {i}")).await;
        if let Ok(ToolOutput::Text(text)) = f.read("d/f.txt").await {
            assert!(text.starts_with("inside"), "read outside: {text}");
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    racer.join().unwrap();
    let text = std::fs::read_to_string(f.outside.join("f.txt")).unwrap();
    assert_eq!(text, "outside-f", "a write went through the link");
}

#[tokio::test]
async fn hard_links_and_special_files_are_refused() {
    let f = Fixture::new("special");
    std::fs::hard_link(f.outside.join("secret.txt"), f.root.join("hard.txt")).unwrap();
    let err = f.read("hard.txt").await.unwrap_err();
    assert_eq!(
        err.message,
        "'hard.txt' has other hard links, which the scratch tools do not touch"
    );
    let err = f.write("hard.txt", "pwned").await.unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::InvalidInput, "{err}");
    // A FIFO would block a plain open for reading until a writer came.
    let fifo = f.root.join("pipe");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let err = f.read("pipe").await.unwrap_err();
    assert_eq!(err.message, "'pipe' is not a regular file");
    let err = f.write("pipe", "x").await.unwrap_err();
    assert_eq!(err.message, "'pipe' is not a regular file");
    f.outside_untouched();
}

#[tokio::test]
async fn the_quota_counts_contents_and_entries_and_refuses_softly() {
    let mut f = Fixture::new("quota");
    // 3 entries of 4096 and 4000 bytes of content fit in 20_000; 2000 more bytes do not.
    f.ctx.scratch = f.ctx.scratch.clone().with_quota(20_000);
    f.write("a.txt", &"x".repeat(4000)).await.unwrap();
    f.write("d/b.txt", "").await.unwrap();
    let err = f.write("c.txt", &"y".repeat(2000)).await.unwrap_err();
    assert_eq!(
        (err.kind, err.message.as_str()),
        (
            ToolErrorKind::InvalidInput,
            "'c.txt' was not written: the session's scratch files would take 22384 bytes, over its quota of 20000 (overwrite files with less to make room)"
        )
    );
    assert!(!f.root.join("c.txt").exists());
    // Overwriting with less makes room.
    f.write("a.txt", "short").await.unwrap();
    f.write("c.txt", &"y".repeat(2000)).await.unwrap();
    // A path of many new directories stops at the quota, each directory counted.
    let deep = ["n"; 10].join("/") + "/f.txt";
    let err = f.write(&deep, "x").await.unwrap_err();
    assert!(err.message.contains("over its quota of 20000"), "{err}");
}

#[tokio::test]
async fn missing_files_say_so() {
    let f = Fixture::new("missing");
    let err = f.read("nope.txt").await.unwrap_err();
    assert_eq!(err.message, "'nope.txt' does not exist");
    // The input's fault, not the tool's: never a health failure.
    assert_eq!(err.kind, ToolErrorKind::InvalidInput);
    let err = f.read("nope/x.txt").await.unwrap_err();
    assert_eq!(err.message, "'nope/x.txt' does not exist");
}

#[tokio::test]
async fn a_path_deeper_than_the_limit_is_refused() {
    let f = Fixture::new("deep-path");
    let deep = vec!["d"; MAX_DEPTH + 1].join("/");
    let error = f.write(&deep, "x").await.unwrap_err();
    assert_eq!(error.kind, ToolErrorKind::InvalidInput);
    assert_eq!(
        error.message,
        format!("path '{deep}' is more than {MAX_DEPTH} names deep")
    );
    assert!(f.write(&vec!["d"; MAX_DEPTH].join("/"), "x").await.is_ok());
}

/// Makes a chain of `depth` directories under `root` (one descriptor at a time, as any other
/// program with access to the directory could) with a file at the bottom.
fn deep_tree(root: &Path, depth: usize) {
    use rustix::fs::{Mode, OFlags, mkdirat, openat};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut dir = openat(rustix::fs::CWD, root, flags, Mode::empty()).unwrap();
    for _ in 0..depth {
        mkdirat(&dir, "level", Mode::RWXU).unwrap();
        dir = openat(&dir, "level", flags, Mode::empty()).unwrap();
    }
    let file = openat(&dir, "bottom", OFlags::WRONLY | OFlags::CREATE, Mode::RUSR).unwrap();
    drop(file);
}

#[tokio::test]
async fn a_tree_of_any_depth_is_removed_and_links_inside_are_not_followed() {
    let f = Fixture::new("remove-deep");
    deep_tree(&f.root, 3000);
    symlink(&f.outside, f.root.join("to-outside")).unwrap();
    symlink(f.outside.join("secret.txt"), f.root.join("level/to-secret")).unwrap();
    f.write("a/b/c.txt", "x").await.unwrap();
    remove_tree(&f.root).unwrap();
    assert!(!f.root.exists());
    f.outside_untouched();
    // Removing what is gone is no error.
    remove_tree(&f.root).unwrap();
}
