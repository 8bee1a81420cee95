//! Process identity read from `/proc`: whether a pid is held, by which process (its start
//! token), and what state it is in. The bottom floor's one reader of `/proc`: `running` (layers
//! 1 and 2), `private_fs` (who owns a quarantine) and the registry's pins and resources ask here.
//!
//! Invariants kept here:
//! - Only evidence makes a process `Gone`: `kill(pid, 0)` answering ESRCH, a zombie whose
//!   every thread has exited (it will never answer again; a leader alone in `Z` with live
//!   threads is still a process), a pid no process can hold (0, or beyond `pid_t`), or a start
//!   token read off `/proc` that differs from the recorded one (the pid was reused).
//! - Anything that could not be read is `Unverified`, never `Gone`: an EPERM from `kill` still
//!   means a process holds the pid, and a `/proc` entry we may not read (hidepid) proves nothing.
//! - A recorded token of `""` (its writer could not read its own) never matches, so it is never
//!   `Alive` and never signalled; it is not evidence of reuse either, so it is `Unverified`.
//!   So is a recorded token that is not decimal: it was not written by this platform's rule.
//! - The pid is range-checked before any syscall: a record's `u32` cast blindly to `pid_t` could
//!   turn into a negative number, which `kill` reads as a process group, or `-1`, everyone.

mod stat;
mod state;

pub(crate) use stat::process_usage;
pub use state::{
    ProcessState, process_start_token, reason_exited, reason_no_process, reason_pid_reused,
};
pub(crate) use state::{checked_pid, start_ticks, state_of};
