//! The processes tests start (servers, nginx, Redis) each in a process group of its own, stopped
//! with everything they started, also when a test fails: a test leaves nothing running
//! (`scripts/reaper` fails the run otherwise).

use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process_group};

/// `command`, made the leader of a new process group when spawned, so `stop` reaches what it
/// starts (nginx's workers, a server's hook programs).
pub(crate) fn own_group(command: &mut Command) -> &mut Command {
    command.process_group(0)
}

/// Stops `child` and its process group: SIGTERM, up to `grace` for it to exit (none: SIGKILL at
/// once), then SIGKILL to whatever of the group is left, which also ends a worker that
/// outlived its master; waits for `child`.
pub(crate) fn stop(child: &mut Child, grace: Duration) {
    let Some(group) = Pid::from_raw(child.id() as i32) else {
        return;
    };
    if !grace.is_zero() {
        let _ = kill_process_group(group, Signal::TERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let _ = kill_process_group(group, Signal::KILL);
    let _ = child.kill();
    let _ = child.wait();
}
