//! The verdict of all three layers: what layers 1–2 decide alone, and what the door probe adds
//! for a process that passed them.
//!
//! Invariants kept here:
//! - Only layers 1–2 make a record `Gone`; a door that fails the probe makes it `Unreachable`,
//!   and so does a process that could not be verified, which is never probed: whatever answers
//!   on its door, the pid's holder is not confirmed as the writer.
//! - Layers 1–2 run on the blocking pool; a check that panicked decides nothing.

use std::net::SocketAddr;

use super::RunningRecord;
use super::door_probe::DoorProbe;
use super::process::process_state;
use crate::process_identity::ProcessState;

/// What all three layers say about a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// The process is the writer and its door answers for this session (or it has no door).
    Live,
    /// The process passed layers 1–2 (or could not be verified) but the door did not confirm
    /// the session. The record is kept.
    Unreachable {
        /// What failed, for a person.
        reason: String,
    },
    /// Layers 1–2 found evidence the session is over; the record may be pruned.
    Gone {
        /// The evidence.
        reason: String,
    },
}

impl Liveness {
    /// The reason, for anything but `Live`.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::Live => None,
            Self::Unreachable { reason } | Self::Gone { reason } => Some(reason),
        }
    }
}

/// Both readings of one verification: layers 1–2 alone, and the verdict of all three.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// What layers 1 and 2 said.
    pub(crate) process: ProcessState,
    /// What all three layers say.
    pub(crate) liveness: Liveness,
}

/// What layers 1–2 decide alone: `gone`, and `live` for a record with no door.
///
/// `None` for an alive process with a door (only the probe can tell) and for an unverified
/// process (nothing can tell).
pub fn decided_by_process(record: &RunningRecord, process: &ProcessState) -> Option<Liveness> {
    match process {
        ProcessState::Gone { reason } => Some(Liveness::Gone {
            reason: reason.clone(),
        }),
        ProcessState::Alive if record.url.is_none() => Some(Liveness::Live),
        _ => None,
    }
}

/// The verdict without a probe where one would prove nothing, or `Err` handing the process
/// state back when only the probe can tell.
///
/// An unverified process is unreachable and never probed: whatever answers on its door, the
/// pid's holder is not confirmed as the writer.
pub(crate) fn settled_without_door(
    record: &RunningRecord,
    process: ProcessState,
) -> Result<Verdict, ProcessState> {
    let liveness = match (decided_by_process(record, &process), &process) {
        (Some(liveness), _) => liveness,
        (None, ProcessState::Unverified { reason }) => Liveness::Unreachable {
            reason: reason.clone(),
        },
        (None, _) => return Err(process),
    };
    Ok(Verdict { process, liveness })
}

/// All three layers, door probe included.
///
/// Layers 1–2 run on the blocking pool; the door is probed only for a process that passed them.
pub async fn verify(record: &RunningRecord, door: &DoorProbe) -> Liveness {
    match verified_at(record, door).await {
        Ok(_) => Liveness::Live,
        Err(liveness) => liveness,
    }
}

/// [`verify`], with the socket address whose answer made the session live: `Err` with the
/// verdict when it is not live through its door (a doorless live session included).
pub(crate) async fn verified_at(
    record: &RunningRecord,
    door: &DoorProbe,
) -> Result<SocketAddr, Liveness> {
    let process = process_state_off_worker(record.clone()).await;
    match settled_without_door(record, process) {
        Ok(verdict) => Err(verdict.liveness),
        Err(_) => door
            .confirmed_at(record)
            .await
            .map_err(|reason| Liveness::Unreachable { reason }),
    }
}

/// Layers 1–2 for one record, on the blocking pool.
async fn process_state_off_worker(record: RunningRecord) -> ProcessState {
    tokio::task::spawn_blocking(move || process_state(&record))
        .await
        .unwrap_or_else(|_| process_check_failed())
}

/// The state of a process whose check panicked: nothing was learnt, so nothing is decided.
pub(crate) fn process_check_failed() -> ProcessState {
    ProcessState::Unverified {
        reason: "the process check failed".to_owned(),
    }
}
