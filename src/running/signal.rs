//! Signalling the process a record names, only while it is provably still that process.
//!
//! Invariants kept here:
//! - No signal without layers 1–2 reading `Alive` in the same call. `Unverified` is refused,
//!   `Gone` is reported as already gone; neither is signalled.
//! - The check and the signal cannot be separated by a pid reuse. The process is pinned first
//!   with `pidfd_open(pid)`; the start token is compared *after* that; the signal goes through
//!   the pidfd. If the pinned process exits after the check, the kernel answers ESRCH instead
//!   of signalling whoever holds the number next. (If the token read after pinning matches,
//!   the recorded process held the pid throughout, so the pidfd pins that very process.)
//! - Only where pidfds do not exist (Linux before 5.3, ENOSYS) does this fall back to check then
//!   `kill(2)`, which leaves a window of microseconds in which the pid could be reused.
//! - The registry never signals itself.

use std::os::fd::OwnedFd;

use rustix::io::Errno;
use rustix::process::{PidfdFlags, Signal};

use super::RunningRecord;
use crate::process_identity::{ProcessState, checked_pid, reason_no_process, state_of};

/// What sending one signal to a record's process did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignalOutcome {
    /// The process was confirmed and the kernel accepted the signal.
    Sent,
    /// The process is gone (or the pid belongs to another process now): nothing was sent.
    /// This is evidence: the record may be pruned.
    AlreadyGone {
        /// The evidence.
        reason: String,
    },
    /// Nothing was sent: the process could not be confirmed, or the kernel refused (EPERM).
    Refused {
        /// Why, for a person (an errno's text when the kernel refused).
        reason: String,
    },
}

/// SIGTERM the process a record names, if it is still that process.
///
/// Blocking (syscalls and a `/proc` read); call it off async workers.
pub fn signal_term(record: &RunningRecord) -> SignalOutcome {
    send(record, Signal::TERM)
}

/// SIGKILL the process a record names, if it is still that process.
///
/// Blocking (syscalls and a `/proc` read); call it off async workers.
pub fn signal_kill(record: &RunningRecord) -> SignalOutcome {
    send(record, Signal::KILL)
}

fn send(record: &RunningRecord, signal: Signal) -> SignalOutcome {
    let pid = record.pid;
    let Some(checked) = checked_pid(pid) else {
        return SignalOutcome::AlreadyGone {
            reason: reason_no_process(pid),
        };
    };
    let pinned: Option<OwnedFd> = match rustix::process::pidfd_open(checked, PidfdFlags::empty()) {
        Ok(fd) => Some(fd),
        Err(Errno::SRCH) => {
            return SignalOutcome::AlreadyGone {
                reason: reason_no_process(pid),
            };
        }
        Err(Errno::NOSYS) => None,
        // EINVAL (ENOENT on recent kernels, e.g. 6.18): the number names a thread, not a process;
        // layers 1–2 tell what that means for the record, and no pidfd means no signal below.
        Err(Errno::INVAL | Errno::NOENT) => {
            return match state_of(pid, &record.process_start) {
                ProcessState::Gone { reason } => SignalOutcome::AlreadyGone { reason },
                _ => SignalOutcome::Refused {
                    reason: format!("pid {pid} does not name a process that can be pinned"),
                },
            };
        }
        Err(errno) => {
            return SignalOutcome::Refused {
                reason: format!("pid {pid} could not be pinned: {}", describe(errno)),
            };
        }
    };
    match state_of(pid, &record.process_start) {
        ProcessState::Alive => {}
        ProcessState::Gone { reason } => return SignalOutcome::AlreadyGone { reason },
        ProcessState::Unverified { reason } => return SignalOutcome::Refused { reason },
    }
    // Checked only now: a record naming this pid with another start time is simply gone.
    if pid == std::process::id() {
        return SignalOutcome::Refused {
            reason: format!("pid {pid} is the registry itself"),
        };
    }
    let sent = match &pinned {
        Some(pidfd) => rustix::process::pidfd_send_signal(pidfd, signal),
        None => rustix::process::kill_process(checked, signal),
    };
    match sent {
        Ok(()) => SignalOutcome::Sent,
        Err(Errno::SRCH) => SignalOutcome::AlreadyGone {
            reason: reason_no_process(pid),
        },
        Err(errno) => SignalOutcome::Refused {
            reason: format!(
                "the kernel refused to signal pid {pid}: {}",
                describe(errno)
            ),
        },
    }
}

fn describe(errno: Errno) -> String {
    std::io::Error::from(errno).to_string()
}
