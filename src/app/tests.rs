//! Start and stop: a crashed server task is an error, and stale scratch bases are cleared.

use std::path::Path;

use super::build::{remove_stale_bases, stale_base_owner};
use super::*;

#[test]
fn only_scratch_bases_of_dead_processes_are_removed() {
    assert_eq!(stale_base_owner("toolgate-123-0"), Some(123));
    assert_eq!(
        stale_base_owner("toolgate-123-0123456789abcdef0123456789abcdef"),
        Some(123)
    );
    for other in [
        "toolgate-0123456789abcdef0123456789abcdef",
        "toolgate-12-xyz",
        "toolgate-abc-0",
        "toolgate-12",
        "toolgate-12-",
        "toolgate--1",
        "mine-1-2",
    ] {
        assert_eq!(stale_base_owner(other), None, "{other}");
    }
    let temp = std::env::temp_dir().join(format!("toolgate-stale-test-{}", std::process::id()));
    std::fs::create_dir_all(&temp).unwrap();
    // pid 4194304 is above Linux's pid_max, so it is never alive.
    let dead = temp.join("toolgate-4194304-0");
    let alive = temp.join(format!("toolgate-{}-9", std::process::id()));
    let unrelated = temp.join("toolgate-notes");
    for dir in [&dead, &alive, &unrelated] {
        std::fs::create_dir_all(dir.join("session")).unwrap();
    }
    remove_stale_bases(&temp);
    let proc_exists = Path::new("/proc/self").exists();
    assert_eq!(dead.exists(), !proc_exists, "a dead process's base goes");
    assert!(
        alive.exists() && unrelated.exists(),
        "nothing else is touched"
    );
    std::fs::remove_dir_all(&temp).unwrap();
}

#[tokio::test]
async fn the_default_scratch_base_is_private_and_unguessable() {
    use std::os::unix::fs::PermissionsExt;
    let sessions = super::build::sessions(&Config::default(), Arc::default()).unwrap();
    let base = sessions.base().to_path_buf();
    let name = base.file_name().unwrap().to_str().unwrap().to_owned();
    let prefix = format!("toolgate-{}-", std::process::id());
    let token = name.strip_prefix(&prefix).unwrap();
    assert!(
        token.len() == 32 && token.bytes().all(|b| b.is_ascii_hexdigit()),
        "{name}"
    );
    assert_eq!(stale_base_owner(&name), Some(std::process::id()));
    let session = sessions.open("default", "s");
    session.scratch().create().await.unwrap();
    let mode = std::fs::metadata(&base).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    sessions.release(&session);
    sessions.remove_all();
    assert!(!base.exists());
}

#[tokio::test]
async fn an_aborted_server_task_is_an_error() {
    let server = Server::new(Config::default()).start_local().await.unwrap();
    server.task.abort();
    let error = server.wait().await.unwrap_err();
    assert!(
        matches!(&error, ServeError::TaskFailed(join) if join.is_cancelled()),
        "{error}"
    );
    assert!(
        error.to_string().starts_with("the server task failed: "),
        "{error}"
    );
}

#[tokio::test]
async fn a_panicked_server_task_is_an_error() {
    let server = RunningServer {
        admin_addr: None,
        mcp_addr: None,
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        trigger: CancellationToken::new(),
        task: tokio::spawn(async { panic!("the server broke") }),
    };
    let error = server.wait().await.unwrap_err();
    assert!(
        matches!(&error, ServeError::TaskFailed(join) if join.is_panic()),
        "{error}"
    );
    assert!(error.to_string().contains("the server broke"), "{error}");
}

/// The engine defines the pipeline's defaults once (`PipelineSettings::default`); the config's
/// sections default to them, and the shipped `config/default.toml` states the same values: both
/// map onto exactly the engine's settings (the redactor aside: the server builds it from
/// `[redaction]`, whose patterns it compiles).
#[test]
fn the_shipped_defaults_and_an_empty_config_give_the_engines_settings() {
    use toolgate_core::dispatch::PipelineSettings;
    let engine = PipelineSettings::default();
    for (what, text) in [("default.toml", crate::config::DEFAULT_TOML), ("empty", "")] {
        let config = Config::from_toml(text).unwrap();
        let ours = super::build::pipeline_settings(&config, Arc::default()).unwrap();
        assert_eq!(ours.breaker, engine.breaker, "{what}");
        assert_eq!(ours.policy, engine.policy, "{what}");
        assert_eq!(ours.ask_policies, engine.ask_policies, "{what}");
        let scalars = |s: &PipelineSettings| {
            let m = &s.middleware;
            (
                m.default_timeout,
                m.validate,
                m.max_output_chars,
                m.cache_max_entries,
                m.cache_max_bytes,
                m.suggestion_threshold.to_bits(),
                (s.batch_budget_chars, s.preview_chars, s.max_error_chars),
                s.approval_timeout,
            )
        };
        assert_eq!(scalars(&ours), scalars(&engine), "{what}");
        let m = &ours.middleware;
        assert!(
            m.tool_timeouts.is_empty()
                && m.permissions.is_empty()
                && m.tool_output_chars.is_empty()
                && m.cache_rules.is_empty()
                && m.cache_invalidators.is_empty()
                && m.select_pass_through.is_empty(),
            "{what}"
        );
    }
}
