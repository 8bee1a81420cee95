//! Layers 1 and 2 on a bare pid: is it held by a living process, and is that process the one
//! that started at the recorded time? (The invariants are the module's.)

use std::collections::BTreeSet;
use std::ffi::OsString;

use rustix::io::Errno;
use rustix::process::Pid;

use super::stat::{parse_stat_bytes, read_stat};

/// What layers 1 and 2 say about the process a record names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessState {
    /// The pid is held, not by a zombie, and by the process that wrote the record.
    Alive,
    /// The pid is held, but whether by the writer could not be established. Kept, reported as
    /// unreachable, never signalled.
    Unverified {
        /// What could not be read, for a person.
        reason: String,
    },
    /// No process holds the pid, or another process does: evidence the session is over.
    Gone {
        /// The evidence, in the spec's words.
        reason: String,
    },
}

/// The reason given when no process holds `pid` (zombies count as none).
pub fn reason_no_process(pid: u32) -> String {
    format!("no process holds pid {pid}")
}

/// The reason given when the process a held pidfd names has exited (a zombie counts): the pid
/// itself may be held by another process by now.
pub fn reason_exited(pid: u32) -> String {
    format!("the process that held pid {pid} has exited")
}

/// The reason given when `pid` now belongs to a process that started at another time.
pub fn reason_pid_reused(pid: u32) -> String {
    format!("pid {pid} is held by a process that started at another time")
}

/// The recorded pid as a `Pid` a syscall may be given, or `None` when no process can hold it.
pub(crate) fn checked_pid(pid: u32) -> Option<Pid> {
    let raw = i32::try_from(pid).ok()?;
    // `raw` is positive here; zero is refused by `from_raw`.
    Pid::from_raw(raw)
}

/// Layers 1 and 2 for a bare pid and recorded start token (`running::process_state` asks this
/// for a record).
pub(crate) fn state_of(pid: u32, recorded_start: &str) -> ProcessState {
    let gone = || ProcessState::Gone {
        reason: reason_no_process(pid),
    };
    let Some(checked) = checked_pid(pid) else {
        return gone();
    };
    match is_held(checked) {
        Held::No => return gone(),
        Held::Yes => {}
        Held::Unknown(errno) => {
            return ProcessState::Unverified {
                reason: format!("could not tell whether pid {pid} is held: {errno}"),
            };
        }
    }
    let stat = match read_stat(pid) {
        Ok(stat) => stat,
        Err(error) => {
            // The process may have exited between the two readings; only `kill` can say so.
            // An entry hidden from us (hidepid) also reads as missing while the pid is held.
            if matches!(is_held(checked), Held::No) {
                return gone();
            }
            return ProcessState::Unverified {
                reason: format!("pid {pid} is alive but its start time cannot be read: {error}"),
            };
        }
    };
    if stat.is_dead() {
        // A leader shows `Z` as soon as its own thread exits, while other threads of the
        // process may still run: only a thread group with no live task is no process.
        match live_threads_remain(pid) {
            Ok(false) => return gone(),
            Ok(true) => {}
            Err(error) => {
                if matches!(is_held(checked), Held::No) {
                    return gone();
                }
                return ProcessState::Unverified {
                    reason: format!(
                        "pid {pid}'s main thread has exited and its other threads cannot be read: {error}"
                    ),
                };
            }
        }
    }
    if recorded_start.is_empty() {
        return ProcessState::Unverified {
            reason: format!(
                "pid {pid} is alive but the record holds no start time to compare, \
                 so it cannot be confirmed as the capsule"
            ),
        };
    }
    // A recorded token that is not a number this platform writes (another OS, or a damaged
    // record) proves nothing about reuse, so it leaves the process unverified.
    let (Some(recorded), Some(now)) = (start_ticks(recorded_start), start_ticks(&stat.start_token))
    else {
        return ProcessState::Unverified {
            reason: format!(
                "pid {pid} is alive but the record's start time {recorded_start:?} is not one \
                 this machine can compare"
            ),
        };
    };
    if recorded != now {
        return ProcessState::Gone {
            reason: reason_pid_reused(pid),
        };
    }
    ProcessState::Alive
}

/// A start token as the number it stands for, or `None` when it is not one this platform
/// writes. Tokens are compared as numbers: a writer might pad with zeros.
pub(crate) fn start_ticks(token: &str) -> Option<u64> {
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    token.parse().ok()
}

enum Held {
    Yes,
    No,
    Unknown(Errno),
}

/// Layer 1's raw reading: `kill(pid, 0)`. EPERM still means a process holds the pid.
fn is_held(pid: Pid) -> Held {
    match rustix::process::test_kill_process(pid) {
        Ok(()) | Err(Errno::PERM) => Held::Yes,
        Err(Errno::SRCH) => Held::No,
        Err(errno) => Held::Unknown(errno),
    }
}

/// How many listings of a zombie leader's tasks are read before the reading counts as failed.
/// A listing after the first is needed only when threads came and went while it was read.
const MAX_TASK_LISTINGS: usize = 32;

/// Whether any task of `pid`'s thread group is neither a zombie nor dead.
///
/// One listing cannot say "none": a listed thread may start another and exit before its stat
/// is read, and the thread it started is not in that listing. So "none" is answered only when
/// a listing names no task beyond an earlier listing whose tasks all read dead: any task live
/// when the later listing was taken would be in it, and was already dead.
fn live_threads_remain(pid: u32) -> std::io::Result<bool> {
    let mut dead_before: Option<BTreeSet<OsString>> = None;
    for _ in 0..MAX_TASK_LISTINGS {
        let Some(dead_now) = dead_tasks(pid)? else {
            return Ok(true);
        };
        if dead_before.is_some_and(|before| dead_now.is_subset(&before)) {
            return Ok(false);
        }
        dead_before = Some(dead_now);
    }
    Err(std::io::Error::other(
        "they kept changing while they were read",
    ))
}

/// The tasks `/proc/<pid>/task` lists now when every one reads dead or has exited; `None` as
/// soon as one reads live.
fn dead_tasks(pid: u32) -> std::io::Result<Option<BTreeSet<OsString>>> {
    let mut listed = BTreeSet::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let entry = entry?;
        // Bytes, not a string: a thread may name itself with any bytes, and a name that is not
        // UTF-8 must not turn a live thread into an unreadable one.
        match std::fs::read(entry.path().join("stat")) {
            Ok(line) => {
                if parse_stat_bytes(&line).is_some_and(|task| !task.is_dead()) {
                    return Ok(None);
                }
            }
            Err(e) if task_exited(&e) => {}
            Err(e) => return Err(e),
        }
        listed.insert(entry.file_name());
    }
    Ok(Some(listed))
}

/// Whether reading a task's stat failed because the task exited while we looked: before the
/// open (ENOENT) or between the open and the read (ESRCH).
fn task_exited(error: &std::io::Error) -> bool {
    error.kind() == std::io::ErrorKind::NotFound
        || error.raw_os_error() == Some(Errno::SRCH.raw_os_error())
}

/// Layer 2's reading: an opaque, platform-local token for when `pid`'s process started.
///
/// On Linux, field 22 of `/proc/<pid>/stat` (clock ticks since boot). `None` when it cannot be
/// read; a writer then records `""`, which never matches.
pub fn process_start_token(pid: u32) -> Option<String> {
    checked_pid(pid)?;
    read_stat(pid).ok().map(|stat| stat.start_token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_no_process_can_hold_are_refused_before_any_syscall() {
        assert!(checked_pid(0).is_none());
        assert!(checked_pid(i32::MAX as u32 + 1).is_none());
        assert!(checked_pid(u32::MAX).is_none());
        assert!(checked_pid(1).is_some());
    }

    #[test]
    fn only_a_task_that_exited_is_skipped_as_exited() {
        let exited = [Errno::NOENT, Errno::SRCH];
        let unreadable = [Errno::ACCESS, Errno::PERM, Errno::IO, Errno::NOMEM];
        for errno in exited {
            assert!(task_exited(&errno.into()), "{errno:?}");
        }
        for errno in unreadable {
            assert!(!task_exited(&errno.into()), "{errno:?}");
        }
    }

    #[test]
    fn this_process_reads_its_own_token() {
        let token = process_start_token(std::process::id()).unwrap();
        assert!(token.bytes().all(|b| b.is_ascii_digit()));
        assert_eq!(state_of(std::process::id(), &token), ProcessState::Alive);
    }
}
