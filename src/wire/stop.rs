//! `POST /sessions/{id}/stop` on the wire: its options, what the door said when asked to stop,
//! and the answer of a stop that ended.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::session::EXAMPLE_ID;
use super::signal::Outcome;
use crate::running::DoorStop;

/// Options of `POST /sessions/{id}/stop`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StopQuery {
    /// Seconds to wait after SIGTERM before SIGKILL (default 10, at most 300; `0` = SIGKILL at
    /// once, without asking the door).
    #[param(example = 10, maximum = 300)]
    pub timeout: Option<u64>,
    /// `false` stops by signals alone, without asking the capsule's door
    /// (`murmur.StopSession`) first. Default `true`.
    #[param(example = false)]
    pub door: Option<bool>,
}

/// What asking the door to stop came to, as the `door.outcome` member says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DoorOutcome {
    /// The door answered for this session: `canceled` and `residue` are its answer.
    Answered,
    /// The door answered with an error (method not found included): signals alone stopped it.
    Refused,
    /// No usable answer in time: signals alone stopped it.
    NoAnswer,
    /// The door answered for another session, or none: nothing it said is kept.
    Mismatch,
    /// Not asked: a fresh probe did not show the door answering as this session.
    NotLive,
    /// Not asked: the session has no door.
    NoDoor,
    /// Not asked: `door=false` or `timeout=0`.
    Skipped,
}

/// What the door said to `murmur.StopSession`, asked before any signal.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"outcome": "answered", "canceled": ["task_01"],
    "residue": ["shell: npm run dev (pid 41240)"], "reason": null}))]
pub struct DoorStopView {
    /// How the ask went.
    pub outcome: DoorOutcome,
    /// The tasks the capsule canceled (task ids, as the door named them); empty unless
    /// `answered`.
    pub canceled: Vec<serde_json::Value>,
    /// What the capsule leaves running (detached commands, delegated children), as the door
    /// wrote each item; empty unless `answered`. The signals that follow end the capsule's own
    /// process only.
    pub residue: Vec<serde_json::Value>,
    /// Why the door was not asked, or why its answer was not taken; `null` when `answered`,
    /// `no_door` or `skipped`.
    #[schema(
        example = "the door does not serve murmur.StopSession (JSON-RPC error -32601, method not found)"
    )]
    pub reason: Option<String>,
}

impl DoorStopView {
    /// The view of what a stop's ask came to.
    pub fn of(stop: &DoorStop) -> Self {
        let (outcome, reason) = match stop {
            DoorStop::Answered { canceled, residue } => {
                return Self {
                    outcome: DoorOutcome::Answered,
                    canceled: canceled.clone(),
                    residue: residue.clone(),
                    reason: None,
                };
            }
            DoorStop::Refused { reason } => (DoorOutcome::Refused, Some(reason)),
            DoorStop::NoAnswer { reason } => (DoorOutcome::NoAnswer, Some(reason)),
            DoorStop::Mismatch { reason } => (DoorOutcome::Mismatch, Some(reason)),
            DoorStop::NotLive { reason } => (DoorOutcome::NotLive, Some(reason)),
            DoorStop::NoDoor => (DoorOutcome::NoDoor, None),
            DoorStop::Skipped => (DoorOutcome::Skipped, None),
        };
        Self {
            outcome,
            canceled: Vec::new(),
            residue: Vec::new(),
            reason: reason.cloned(),
        }
    }
}

/// A stop that ended.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"session_id": EXAMPLE_ID, "signal_sent": "SIGTERM",
    "outcome": "stopped", "waited_ms": 132, "door": {"outcome": "answered",
    "canceled": ["task_01"], "residue": [], "reason": null}}))]
pub struct StopResponse {
    /// The session stopped.
    pub session_id: String,
    /// The last signal sent (`SIGTERM` if it sufficed, else `SIGKILL`); `null` if the process
    /// was already gone.
    pub signal_sent: Option<String>,
    /// `stopped` or `already_gone`.
    pub outcome: Outcome,
    /// How long the stop waited for the process to go, in milliseconds (after the door).
    pub waited_ms: u64,
    /// What the door said when asked to stop, before any signal.
    pub door: DoorStopView,
}
