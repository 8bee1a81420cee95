//! The kernel's side of pidfds, seen from outside the process that holds them: which processes
//! a process holds pidfds for (its `/proc/<pid>/fdinfo`), a new process started at the exact pid
//! of one that died ([`ProcessAtPid`], `tests/fixtures/at_pid.py`), and a command run where
//! `pidfd_open` fails with ENOSYS as on a kernel before 5.3 ([`without_pidfd_open`],
//! `tests/fixtures/no_pidfd.py`), or with too few file descriptors to pin every process
//! ([`with_open_files_limit`]).
//!
//! Invariant: nothing here asks the code under test anything; every answer is the kernel's.
//! A [`ProcessAtPid`] is this test process's own child, killed and reaped on drop, so its
//! number is never signalled after it could belong to someone else.

use std::process::{Command, Stdio};

use murmur_registry::running::process_start_token;
use rustix::process::{Pid, Signal, WaitOptions};

use super::binary::run;
use super::{DEADLINE, RecordJson, wait_until};

/// The pid of every pidfd `holder` holds, sorted, from the `Pid:` line of each
/// `/proc/<holder>/fdinfo/<fd>` (only a pidfd has one); `-1` for a pidfd whose process exited.
/// Empty when `holder` does not exist.
pub fn pidfds_held_by(holder: u32) -> Vec<i64> {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{holder}/fdinfo")) else {
        return Vec::new();
    };
    let mut pids: Vec<i64> = entries
        .flatten()
        // A descriptor closed since the directory was read has no fdinfo any more.
        .filter_map(|entry| std::fs::read_to_string(entry.path()).ok())
        .filter_map(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("Pid:"))
                .map(|pid| pid.trim().parse().expect("a pidfd's Pid: is a number"))
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// The pids `pids` as [`pidfds_held_by`] answers them, sorted.
pub fn pidfd_pids(pids: &[u32]) -> Vec<i64> {
    let mut pids: Vec<i64> = pids.iter().map(|&pid| i64::from(pid)).collect();
    pids.sort_unstable();
    pids
}

/// The seccomp mode `pid` runs under (`Seccomp:` in `/proc/<pid>/status`: 0 none, 2 a filter).
pub fn seccomp_mode(pid: u32) -> Option<u32> {
    super::status_line(pid, "Seccomp")?.trim().parse().ok()
}

// ---------------------------------------------------------------------------------------------
// A process at a chosen pid
// ---------------------------------------------------------------------------------------------

/// The helper that starts a program at one exact pid.
const AT_PID: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/at_pid.py");

/// A `sleep 1000` started at one exact pid (needs root), this test process's child. Killed and
/// reaped on drop.
pub struct ProcessAtPid {
    pid: u32,
    start_token: String,
}

impl ProcessAtPid {
    /// `sleep 1000` at `pid`, which must be free (the test reaped whatever held it). Answers
    /// once the kernel shows `sleep` running there.
    pub fn sleeping(pid: u32) -> Self {
        let mut helper = Command::new("python3");
        helper
            .arg(AT_PID)
            .arg(pid.to_string())
            .args(["sleep", "1000"]);
        helper.stdin(Stdio::null());
        let started = run(helper);
        assert_eq!(
            started.status.code(),
            Some(0),
            "start sleep at pid {pid}: {started:#?}"
        );
        // Owned from here: the child exists and is ours to reap.
        let mut process = Self {
            pid,
            start_token: String::new(),
        };
        wait_until(&format!("pid {pid} runs sleep"), DEADLINE, || {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
        });
        process.start_token = process_start_token(pid).expect("the start token of a live child");
        process
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Its real start token.
    pub fn start_token(&self) -> &str {
        &self.start_token
    }

    /// A record naming this process with its real start token.
    pub fn record(&self) -> RecordJson {
        RecordJson::fresh().process(self.pid, &self.start_token)
    }
}

impl Drop for ProcessAtPid {
    fn drop(&mut self) {
        let pid = i32::try_from(self.pid)
            .ok()
            .and_then(Pid::from_raw)
            .expect("a child's pid is a valid pid");
        // Unreaped, the number is still this child's (alive or a zombie): the kill cannot
        // reach anyone else.
        let _ = rustix::process::kill_process(pid, Signal::KILL);
        let _ = rustix::process::waitpid(Some(pid), WaitOptions::empty());
    }
}

// ---------------------------------------------------------------------------------------------
// Where pidfd_open does not exist
// ---------------------------------------------------------------------------------------------

/// The helper that installs the seccomp filter and execs its arguments.
pub const NO_PIDFD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/no_pidfd.py");

/// `cmd` run under a seccomp filter that makes `pidfd_open` fail with ENOSYS: the same program,
/// arguments, environment changes and working directory, started through `no_pidfd.py`, which
/// execs it (so its pid is the one the caller sees).
pub fn without_pidfd_open(cmd: Command) -> Command {
    exec_through("python3", &[NO_PIDFD], cmd)
}

/// `cmd` run with its open-files limit, soft and hard, at `limit` (`sh`'s `ulimit -n`, then an
/// exec: the pid is the one the caller sees).
pub fn with_open_files_limit(cmd: Command, limit: u32) -> Command {
    let script = format!("ulimit -n {limit} && exec \"$@\"");
    exec_through("sh", &["-c", &script, "sh"], cmd)
}

/// `cmd` as the arguments of `program args…`, which execs them, with `cmd`'s environment
/// changes and working directory.
fn exec_through(program: &str, args: &[&str], cmd: Command) -> Command {
    let mut wrapped = Command::new(program);
    wrapped
        .args(args)
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (key, value) in cmd.get_envs() {
        match value {
            Some(value) => wrapped.env(key, value),
            None => wrapped.env_remove(key),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        wrapped.current_dir(dir);
    }
    wrapped
}
