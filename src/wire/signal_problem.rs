//! The problem of a signal or stop that did not get through: problem details
//! plus what was attempted.

use serde::Serialize;
use utoipa::ToSchema;

use super::Problem;
use super::signal::Outcome;
use super::stop::DoorStopView;

/// The members a signal or stop problem carries beside `type`, `title`, `status`, `detail`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SignalRefusal {
    /// The session.
    #[schema(example = "ses_0193a4c2e1f07a3b9c5d2e4f6a8b0c1d")]
    pub session_id: String,
    /// The signal that did not get through.
    #[schema(example = "SIGTERM")]
    pub signal: String,
    /// `refused` (409) or `already_gone` (410).
    pub outcome: Outcome,
    /// Why, in the registry's words.
    #[schema(
        example = "the kernel refused to signal pid 41234: Operation not permitted (os error 1)"
    )]
    pub reason: String,
    /// For a stop: the last signal that was delivered before it gave up (`null` when none was).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "SIGTERM")]
    pub signal_sent: Option<Option<String>>,
    /// For a stop: what the door said when asked to stop, before any signal.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub door: Option<DoorStopView>,
}

/// A signal or stop that did not happen, or did not finish: problem details plus what was
/// attempted.
#[derive(Debug, Serialize, ToSchema)]
pub struct SignalProblem {
    /// The problem.
    #[serde(flatten)]
    pub problem: Problem,
    /// What was attempted.
    #[serde(flatten)]
    pub refusal: SignalRefusal,
}
