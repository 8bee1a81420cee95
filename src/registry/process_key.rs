//! A process as the pins name it (its pid and start time), and one of them that exited.
//!
//! Invariant: a key is made only from a record whose pid can be a process's and whose start
//! token compares, so two keys are equal exactly when they name one process.

use crate::running::{self, RunningRecord};

/// The process a record names, as far as pins go: its pid and start time in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct ProcessKey {
    pub(super) pid: u32,
    pub(super) start: u64,
}

impl ProcessKey {
    /// The key of `record`'s process; `None` when no process can hold its pid or its token
    /// cannot be compared (such a record is never pinned).
    pub(super) fn of(record: &RunningRecord) -> Option<Self> {
        running::checked_pid(record.pid)?;
        Some(Self {
            pid: record.pid,
            start: running::start_ticks(&record.process_start)?,
        })
    }
}

/// A pinned process that exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitedProcess {
    key: ProcessKey,
}

impl ExitedProcess {
    pub(super) fn new(key: ProcessKey) -> Self {
        Self { key }
    }

    /// Whether `record` names this process (its pid and start time).
    pub fn names(&self, record: &RunningRecord) -> bool {
        ProcessKey::of(record) == Some(self.key)
    }
}
