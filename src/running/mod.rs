//! The machine-wide map of reachable capsules: one record per session that opened an A2A door,
//! at `~/.murmur/running/<session_id>.json`. No HTTP in here; the service and the CLI reach it
//! through [`crate::registry`].
//!
//! # A record is a hint
//!
//! Nothing guarantees a record disappears when its session ends: a capsule killed with SIGKILL
//! cannot clean up after itself. So no reader takes a record at its word. [`verify`] checks it
//! in three layers, none of which would be enough alone:
//!
//! 1. **The pid is held** ([`process_state`]). Without this nothing else matters, but it proves
//!    little: the number may belong to anyone.
//! 2. **The holder started when the record says** ([`process_start_token`]). Pid numbers come
//!    back into use; the start time tells the writer apart from a later process with its pid.
//! 3. **The door answers with this session's id** ([`DoorProbe`]). A live, matching process may
//!    still not be the capsule's door, or may have stopped answering; fetching the agent card
//!    and comparing its session id settles it.
//!
//! # Removal needs evidence
//!
//! A record is removed only when layer 1 finds no process (a zombie counts as none), or layer
//! 2 reads a start time other than the recorded one (the pid was reused). That is the only way
//! records are reaped, and it suffices because a record is only a hint. A reading that failed
//! is not evidence: a held pid whose start time cannot be read is
//! [`ProcessState::Unverified`], which keeps the record, reports it as unreachable and refuses
//! every signal. A record whose process passes layers 1 and 2 but whose door fails layer 3 is
//! kept as well: its capsule is alive, perhaps busy with a long turn, and deleting the record
//! would discard the only way to reach it merely because it answered slowly.
//!
//! # Privacy
//!
//! A record names a process and where its door is; nothing from the writer's environment goes
//! into it. Because the directory as a whole maps every reachable capsule for anyone able to
//! read it, the directory is kept at 0700 and each record at 0600 ([`running_dir`],
//! [`RunningGuard`]). The door's secrets a record may carry stay in memory ([`Secret`]).

mod dir;
mod door;
mod process;
mod record;
mod signal;

pub use dir::{
    MAX_RECORD_BYTES, Pruned, RecordCache, Scan, Unreadable, UnreadableEntry, list, prune,
    read_record, running_dir, running_dir_in, scan, scan_cached, still_the_file_read,
};
pub(crate) use dir::{recover_quarantined, remove_unreadable};
pub use door::{
    ANSWER_DEADLINE, CONNECT_DEADLINE, DoorProbe, Liveness, MAX_CARD_BYTES, MAX_CONCURRENT_PROBES,
    MURMUR_CAPSULE_EXTENSION, decided_by_process, session_id_of, verify,
};
pub(crate) use door::{
    Verdict, process_state_off_worker, process_state_off_workers, redact_secrets,
    settled_without_door,
};
pub use process::{
    ProcessState, has_controlling_terminal, process_start_token, process_state, reason_no_process,
    reason_pid_reused,
};
pub(crate) use process::{checked_pid, state_of};
pub use record::{
    CONTROL_SUFFIX, FormationLauncher, RECORD_SUFFIX, RunningGuard, RunningRecord, Secret,
    is_murmur_session_id, is_valid_session_id,
};
pub use signal::{SignalOutcome, signal_kill, signal_term};

use std::path::PathBuf;

/// What can go wrong in the running module.
#[derive(Debug, thiserror::Error)]
pub enum RunningError {
    /// `HOME` is unset or empty, so `~/.murmur` has no place.
    #[error("HOME is not set; cannot locate ~/.murmur/running")]
    NoHome,
    /// A directory murmur relies on is unsafe to use, or could not be made private.
    #[error(transparent)]
    Dir(#[from] crate::private_fs::PrivateDirError),
    /// A filesystem operation failed.
    #[error("{path}: {cause}")]
    Io {
        /// What was being read or written.
        path: PathBuf,
        /// The error.
        cause: std::io::Error,
    },
    /// The running directory is missing, is not a directory, or is not ours: nothing in it
    /// can be judged until it is back.
    #[error("the running directory {path} is unavailable: {why}")]
    DirUnavailable {
        /// The running directory.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A session id that cannot name a record file.
    #[error("invalid session id {0:?}: expected 1 to 128 of A-Z a-z 0-9 _ -")]
    InvalidSessionId(String),
    /// The record's file exists but is not a valid record.
    #[error("{}: {}", .0.file_name, .0.why)]
    Unreadable(UnreadableEntry),
    /// [`prune`] was asked to remove a record without a `Gone` reading.
    #[error("session {0} is not gone; its record stays")]
    NotGone(String),
    /// [`prune`] was given a record that was not read from disk.
    #[error("session {0}'s record was not read from disk; there is no file to prune")]
    NotFromDisk(String),
}
