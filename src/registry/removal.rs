//! Why a session left the picture: one enum for the registry's removal notes, the live view's
//! events and the `reason` of a `session.removed` event on the wire.
//!
//! Invariant: a note is taken at most once, so each removal is named once; a note nobody takes
//! is forgotten after [`REMOVAL_NOTE_LIFETIME`], so the notes cannot grow without a listener.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;
use utoipa::ToSchema;

// The schema keeps its published name: the OpenAPI document is part of the fixed contract.
/// Why a session left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = RemovalReason)]
pub enum RemovalCause {
    /// Its process is gone, and its record was pruned on that evidence.
    Pruned,
    /// The registry stopped it (`POST /sessions/{id}/stop`), and its record went with it.
    Stopped,
    /// Its record file disappeared, removed by someone else (murmur itself on a clean exit).
    RecordRemoved,
    /// Its record file is still there and proves it is no longer a valid record.
    Unreadable,
}

/// One removal the registry made: why, on what evidence, and when.
#[derive(Debug, Clone)]
pub struct Removal {
    /// Why: [`RemovalCause::Pruned`] or [`RemovalCause::Stopped`], the registry's own removals.
    pub cause: RemovalCause,
    /// The evidence (layers 1–2's reason).
    pub evidence: String,
    at: Instant,
}

/// How long a removal note waits to be taken: the live view takes its notes within one pass,
/// and nobody else reads them.
const REMOVAL_NOTE_LIFETIME: Duration = Duration::from_secs(60);

/// The removals the registry made lately, by session id. Shared with blocking tasks.
#[derive(Debug, Clone, Default)]
pub(super) struct RemovalNotes(Arc<Mutex<HashMap<String, Removal>>>);

impl RemovalNotes {
    /// Note that the registry removed `session_id`'s record, replacing any older note.
    pub(super) fn note(&self, session_id: &str, cause: RemovalCause, evidence: &str) {
        let mut notes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        // Forget notes nobody took, so the map cannot grow while no event stream runs.
        notes.retain(|_, note| note.at.elapsed() < REMOVAL_NOTE_LIFETIME);
        notes.insert(
            session_id.to_owned(),
            Removal {
                cause,
                evidence: evidence.to_owned(),
                at: Instant::now(),
            },
        );
    }

    /// The note of `session_id`'s removal, taken.
    pub(super) fn take(&self, session_id: &str) -> Option<Removal> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(session_id)
    }
}
