//! `DELETE /sessions` and `DELETE /sessions/{id}` on the wire: what a prune removed, and the
//! problem of one it refused.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::Problem;
use super::session::{EXAMPLE_ID, ProcessStatus};

/// A record removed on evidence.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"session_id": EXAMPLE_ID, "pruned": true,
    "reason": "no process holds pid 41234"}))]
pub struct PruneResponse {
    /// The session whose record was removed.
    pub session_id: String,
    /// Always `true`.
    pub pruned: bool,
    /// The evidence.
    pub reason: String,
}

/// One record removed by `DELETE /sessions`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PrunedEntry {
    /// The session whose record was removed.
    pub session_id: String,
    /// The evidence.
    pub reason: String,
}

/// What `DELETE /sessions` removed.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"pruned": [{"session_id": EXAMPLE_ID,
    "reason": "pid 41234 is held by a process that started at another time"}],
    "removed_unreadable": 1}))]
pub struct PruneAllResponse {
    /// Records whose process was gone.
    pub pruned: Vec<PrunedEntry>,
    /// How many entries that were not valid records were removed.
    pub removed_unreadable: usize,
}

/// The members a refused prune carries beside `type`, `title`, `status`, `detail`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PruneRefusal {
    /// The session.
    #[schema(example = "ses_0193a4c2e1f07a3b9c5d2e4f6a8b0c1d")]
    pub session_id: String,
    /// `alive` or `unverified`.
    pub process: ProcessStatus,
    /// Why the process could not be verified, when it could not.
    pub reason: Option<String>,
}

/// A refused prune: problem details plus what layers 1–2 said.
#[derive(Debug, Serialize, ToSchema)]
pub struct PruneProblem {
    /// The problem.
    #[serde(flatten)]
    pub problem: Problem,
    /// What layers 1–2 said.
    #[serde(flatten)]
    pub refusal: PruneRefusal,
}
