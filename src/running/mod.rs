//! The machine-wide map of reachable capsules: one record per session that opened an A2A door,
//! at `~/.murmur/running/<session_id>.json`. No HTTP here; the service and the CLI reach it
//! through [`crate::registry`].
//!
//! Invariants kept here:
//! - A record is a hint. [`verify`] puts three layers between it and "live", none enough alone:
//!   the pid is held ([`process_state`]), its holder started when the record says
//!   ([`process_start_token`]), and the door answers with this session's id ([`DoorProbe`]).
//! - A record is removed only on evidence: layer 1 finds no process (a zombie counts as none),
//!   or layer 2 reads another start time (the pid was reused). A failed reading is no
//!   evidence: an unreadable start time is [`ProcessState::Unverified`] (kept, reported
//!   unreachable, never signalled), and a live process whose door fails layer 3 is kept too.
//! - A record names a process and its door, nothing of the writer's environment. The directory
//!   is 0700 and each record 0600 ([`running_dir`], [`RunningGuard`]); door secrets stay in
//!   memory ([`Secret`]).

mod dir;
mod door_address;
mod door_exchange;
mod door_json;
mod door_owner;
mod door_probe;
mod door_redaction;
mod door_stop;
mod process;
mod record;
mod signal;
mod skills;
mod verdict;

pub use crate::private_fs::FileFate;
pub use crate::process_identity::{
    ProcessState, process_start_token, reason_exited, reason_no_process, reason_pid_reused,
};
pub(crate) use crate::process_identity::{checked_pid, process_usage, start_ticks};
pub use dir::{
    MAX_RECORD_BYTES, RecordCache, Scan, Unreadable, UnreadableEntry, list, prune, read_record,
    running_dir, running_dir_in, scan, still_the_file_read,
};
pub(crate) use dir::{recover_quarantined, remove_unreadable};
#[cfg_attr(not(feature = "server"), allow(unused_imports))]
pub(crate) use door_json::parse_door_json;
pub(crate) use door_probe::MAX_CONCURRENT_PROBES;
pub use door_probe::{ANSWER_DEADLINE, CONNECT_DEADLINE, DoorProbe, MURMUR_CAPSULE_EXTENSION};
pub use door_redaction::RedactedCard;
pub(crate) use door_redaction::redact_secrets;
pub use door_stop::{
    DOOR_STOP_DEADLINE, DoorStop, MAX_STOP_ANSWER_BYTES, STOP_ASK_DEADLINE, STOP_PROBE_DEADLINE,
    ask_door_to_stop,
};
pub use process::{has_controlling_terminal, process_state};
pub use record::{
    CONTROL_SUFFIX, FormationLauncher, RECORD_SUFFIX, RunningGuard, RunningRecord, Secret,
    is_murmur_session_id, is_valid_session_id,
};
pub use signal::{SignalOutcome, signal_kill, signal_term};
pub use skills::{MAX_SKILL_TEXT, MAX_SKILLS, MAX_TAGS, Skill, skills_of};
pub use verdict::{Liveness, verify};
pub(crate) use verdict::{Verdict, decided_by_process, process_check_failed, settled_without_door};

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
