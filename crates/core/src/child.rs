//! Child processes toolgate starts (command hooks, stdio MCP servers): a scrubbed environment, a
//! process group of their own, and that whole group killed when toolgate is done with them.
//! Invariant: a child sees none of the server's environment but the allowlisted variables and
//! the values configured for it.

use std::collections::BTreeMap;
use std::ffi::OsString;

use rustix::process::{Pid, Signal, kill_process_group};

/// The server's variables a child gets when the config names none: enough to find programs and
/// pick a locale, a home and a temp dir; no credentials.
pub const DEFAULT_ENV_ALLOW: [&str; 6] = ["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"];

/// The environment of a child process: the allowlisted variables of the server's environment as
/// it was when this was made, then the configured values (which win).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildEnv {
    vars: BTreeMap<OsString, OsString>,
}

impl ChildEnv {
    /// The variables named in `allow` that the server has, then `set`.
    pub fn new<'a>(
        allow: impl IntoIterator<Item = &'a str>,
        set: &BTreeMap<String, String>,
    ) -> Self {
        let mut vars = BTreeMap::new();
        for name in allow {
            if let Some(value) = std::env::var_os(name) {
                vars.insert(OsString::from(name), value);
            }
        }
        for (name, value) in set {
            vars.insert(OsString::from(name), OsString::from(value));
        }
        ChildEnv { vars }
    }

    /// Makes `command` start with exactly this environment, as the leader of a new process
    /// group (so the group can be killed whole, and a terminal's signals to toolgate's group do
    /// not reach it), killed if its handle is dropped.
    pub fn apply(&self, command: &mut tokio::process::Command) {
        command
            .env_clear()
            .envs(&self.vars)
            .process_group(0)
            .kill_on_drop(true);
    }
}

/// An environment a child process cannot be given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    #[error("'{0}' is not an environment variable name")]
    Name(String),
    #[error("the value of '{0}' holds a NUL byte")]
    NulInValue(String),
}

/// Checks an allowlist and configured values: names must be non-empty and hold neither `=` nor
/// NUL, values no NUL (the error names the first that does not).
pub fn check_env<'a>(
    allow: impl IntoIterator<Item = &'a str>,
    set: &BTreeMap<String, String>,
) -> Result<(), EnvError> {
    let bad = |name: &str| name.is_empty() || name.contains(['=', '\0']);
    let allowed = allow.into_iter().find(|name| bad(name));
    if let Some(name) = allowed.or_else(|| set.keys().map(String::as_str).find(|name| bad(name))) {
        return Err(EnvError::Name(name.to_owned()));
    }
    match set.iter().find(|(_, value)| value.contains('\0')) {
        Some((name, _)) => Err(EnvError::NulInValue(name.clone())),
        None => Ok(()),
    }
}

impl Default for ChildEnv {
    /// The default allowlist, nothing configured.
    fn default() -> Self {
        ChildEnv::new(DEFAULT_ENV_ALLOW, &BTreeMap::new())
    }
}

/// The process group a child leads (see `ChildEnv::apply`): every process in it is killed when
/// this is dropped, so what the child started in the background goes with it.
#[derive(Debug)]
pub struct ProcessGroup {
    leader: Option<Pid>,
}

impl ProcessGroup {
    /// The group led by the child with this pid (`None`: a child that already exited, or none).
    pub fn led_by(pid: Option<u32>) -> Self {
        let leader = pid
            .and_then(|pid| i32::try_from(pid).ok())
            .and_then(Pid::from_raw);
        ProcessGroup { leader }
    }

    /// Sends SIGKILL to every process of the group, once. A group that is gone already is fine.
    pub fn kill(&mut self) {
        let Some(leader) = self.leader.take() else {
            return;
        };
        // The group id stays taken while any member lives (or the leader is unreaped), so it
        // cannot name another group; once all are gone the id is free again, but only a wrap of
        // the pid space between their exit and this call could hand it to a new group.
        match kill_process_group(leader, Signal::KILL) {
            Ok(()) => {}
            Err(rustix::io::Errno::SRCH) => {}
            Err(error) => {
                tracing::warn!(target: "toolgate::child", pgid = leader.as_raw_nonzero().get(), %error, "process group not killed");
            }
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn only_allowlisted_and_configured_variables_pass() {
        // Read-only use of the test process's environment: PATH is set wherever tests run.
        let path = std::env::var_os("PATH").unwrap();
        let set = BTreeMap::from([
            ("TOKEN".to_owned(), "configured".to_owned()),
            ("PATH".to_owned(), "/only/here".to_owned()),
        ]);
        let env = ChildEnv::new(["PATH", "TOOLGATE_SURELY_UNSET_VARIABLE"], &set);
        assert_eq!(
            env.vars,
            BTreeMap::from([
                (OsString::from("PATH"), OsString::from("/only/here")),
                (OsString::from("TOKEN"), OsString::from("configured")),
            ]),
            "configured values win; unset names are skipped"
        );
        let env = ChildEnv::new(["PATH"], &BTreeMap::new());
        assert_eq!(env.vars, BTreeMap::from([(OsString::from("PATH"), path)]));
    }

    #[test]
    fn names_that_no_environment_can_hold_are_refused() {
        let ok = BTreeMap::from([("TOKEN".to_owned(), "x=y".to_owned())]);
        let check_env = |allow: &[&str], set: &BTreeMap<String, String>| {
            check_env(allow.iter().copied(), set).map_err(|e| e.to_string())
        };
        assert_eq!(check_env(&["PATH", "LC_ALL"], &ok), Ok(()));
        for bad in ["", "A=B", "A\0"] {
            assert_eq!(
                check_env(&[bad], &BTreeMap::new()),
                Err(format!("'{bad}' is not an environment variable name"))
            );
        }
        let nul = BTreeMap::from([("TOKEN".to_owned(), "a\0b".to_owned())]);
        assert_eq!(
            check_env(&[], &nul),
            Err("the value of 'TOKEN' holds a NUL byte".to_owned())
        );
    }

    #[tokio::test]
    async fn a_child_sees_only_its_environment_and_leads_its_group() {
        let set = BTreeMap::from([("TOKEN".to_owned(), "configured".to_owned())]);
        let mut command = tokio::process::Command::new("sh");
        command.args(["-c", "env; echo pgid=$(cut -d' ' -f5 /proc/$$/stat) pid=$$"]);
        ChildEnv::new(["PATH"], &set).apply(&mut command);
        let output = command.output().await.unwrap();
        let text = String::from_utf8(output.stdout).unwrap();
        let mut names: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split_once('=').map(|(name, _)| name))
            .filter(|name| !["pgid", "PWD", "SHLVL", "_"].contains(name))
            .collect();
        names.sort_unstable();
        // sh itself adds PWD, SHLVL and `_`; everything else is what the child was given.
        assert_eq!(names, ["PATH", "TOKEN"], "{text}");
        if std::path::Path::new("/proc/self/stat").exists() {
            let last = text.lines().last().unwrap();
            let (pgid, pid) = last.split_once(' ').unwrap();
            assert_eq!(
                pgid.trim_start_matches("pgid="),
                pid.trim_start_matches("pid=")
            );
        }
    }

    #[tokio::test]
    async fn dropping_the_group_kills_what_the_child_left_running() {
        let dir = std::env::temp_dir().join(format!("toolgate-child-group-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pid_file = dir.join("pid");
        let mut command = tokio::process::Command::new("sh");
        command.args([
            "-c",
            &format!(
                "sleep 1000 >/dev/null 2>&1 & echo $! > {}",
                pid_file.display()
            ),
        ]);
        ChildEnv::default().apply(&mut command);
        let mut child = command.spawn().unwrap();
        let group = ProcessGroup::led_by(child.id());
        assert!(child.wait().await.unwrap().success());
        let grandchild: u32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            running(grandchild),
            "the background sleep outlives its parent"
        );
        drop(group);
        assert!(ends(grandchild).await, "the group was killed");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Whether the process stops running within a few seconds (killed processes end at once;
    /// the wait only covers the kernel and the reaper).
    pub(crate) async fn ends(pid: u32) -> bool {
        for _ in 0..500 {
            if !running(pid) {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        false
    }

    /// Whether the process runs (a zombie waiting to be reaped does not).
    fn running(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => false,
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        }
    }
}
