//! Layers 1 and 2 for a record: the pid it names is held by a living process, and that process
//! is the one that wrote it. What `/proc` says is read on the bottom floor
//! ([`crate::process_identity`], whose invariants these are); this file asks it for a record, and
//! tells whether the calling process has a terminal (what a writer records as
//! `outlives_launcher`).

use rustix::fs::{Mode, OFlags};

use super::RunningRecord;
use crate::process_identity::{ProcessState, state_of};

/// Layers 1 and 2: the pid is alive, and the process holding it is the one that wrote the record.
///
/// Blocking (a syscall and a `/proc` read); call it off async workers.
pub fn process_state(record: &RunningRecord) -> ProcessState {
    state_of(record.pid, &record.process_start)
}

/// Whether the calling process has a controlling terminal, which decides `outlives_launcher`:
/// a capsule attached to a terminal dies with that window.
///
/// Opens `/dev/tty`, which succeeds exactly when there is one.
pub fn has_controlling_terminal() -> bool {
    rustix::fs::open(
        "/dev/tty",
        OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .is_ok()
}
