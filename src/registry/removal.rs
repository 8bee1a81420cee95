//! Why a session left the picture: one enum for the registry's removal notes, the live view's
//! events and the `reason` of a `session.removed` event on the wire.
//!
//! Invariant: a note is taken at most once, so each removal is named once; a note nobody takes
//! is forgotten after [`REMOVAL_NOTE_LIFETIME`], so the notes cannot grow without a listener.
//! Two removals of one record may race (a stop's and the live view's): each takes back only the
//! note it wrote, so the one that removed the file keeps its note.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

// The schema keeps its published name: the OpenAPI document is part of the fixed contract.
/// Why a session left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = RemovalReason)]
pub enum RemovalCause {
    /// Its process is gone, and its record was pruned on that evidence.
    Pruned,
    /// The registry stopped it (`POST /sessions/{id}/stop`), and its record went with it.
    Stopped,
    /// Its record file disappeared, removed by someone else (murmur itself on a clean exit).
    RecordRemoved,
    /// Its record file is still there and no longer reads as a valid record (the file is kept
    /// unless what was read proves it can never be one).
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

/// The removals the registry made lately, by session id (several while removals of one record
/// race). Shared with blocking tasks.
#[derive(Debug, Clone, Default)]
pub(super) struct RemovalNotes {
    notes: Arc<Mutex<Notes>>,
    /// Where each removal made is counted.
    counter: RemovalCounter,
}

/// Told of every removal made, by cause and number (the registry's tally, for `/metrics`);
/// none counts nothing.
#[derive(Clone, Default)]
struct RemovalCounter(Option<Arc<dyn Fn(RemovalCause, usize) + Send + Sync>>);

impl std::fmt::Debug for RemovalCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RemovalCounter")
    }
}

#[derive(Debug, Default)]
struct Notes {
    by_session: HashMap<String, Vec<(NoteId, Removal)>>,
    next: u64,
}

/// One note as written, so that its writer can take back that note and no other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct NoteId(u64);

impl RemovalNotes {
    /// Notes whose removals made are told to `count` (cause, number).
    pub(super) fn counting_by(count: impl Fn(RemovalCause, usize) + Send + Sync + 'static) -> Self {
        Self {
            notes: Arc::default(),
            counter: RemovalCounter(Some(Arc::new(count))),
        }
    }

    /// Count `n` removals made for `cause`: the unlinks removed the files.
    pub(super) fn made(&self, cause: RemovalCause, n: usize) {
        if let Some(count) = &self.counter.0 {
            count(cause, n);
        }
    }

    /// Note that the registry is removing `session_id`'s record; [`RemovalNotes::take_back`]
    /// the note if the removal removed nothing.
    pub(super) fn note(&self, session_id: &str, cause: RemovalCause, evidence: &str) -> NoteId {
        let mut notes = self.lock();
        // Forget notes nobody took, so the map cannot grow while no event stream runs.
        notes.by_session.retain(|_, written| {
            written.retain(|(_, note)| note.at.elapsed() < REMOVAL_NOTE_LIFETIME);
            !written.is_empty()
        });
        let id = NoteId(notes.next);
        notes.next += 1;
        let removal = Removal {
            cause,
            evidence: evidence.to_owned(),
            at: Instant::now(),
        };
        notes
            .by_session
            .entry(session_id.to_owned())
            .or_default()
            .push((id, removal));
        id
    }

    /// Take back the note `id` of a removal that removed nothing; other notes stay.
    pub(super) fn take_back(&self, session_id: &str, id: NoteId) {
        let mut notes = self.lock();
        if let Some(written) = notes.by_session.get_mut(session_id) {
            written.retain(|(written_id, _)| *written_id != id);
            if written.is_empty() {
                notes.by_session.remove(session_id);
            }
        }
    }

    /// The note of `session_id`'s removal, taken (the latest, if removals raced; every note of
    /// the session goes with it, since one file was removed).
    pub(super) fn take(&self, session_id: &str) -> Option<Removal> {
        let (_, latest) = self.lock().by_session.remove(session_id)?.pop()?;
        Some(latest)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Notes> {
        self.notes.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_racing_removal_takes_back_only_its_own_note() {
        let notes = RemovalNotes::default();
        let stop = notes.note("ses_a", RemovalCause::Stopped, "gone");
        let prune = notes.note("ses_a", RemovalCause::Pruned, "gone too");
        // The stop removed the file; the prune found it gone and takes back its note.
        notes.take_back("ses_a", prune);
        let taken = notes.take("ses_a").expect("the stop's note stays");
        assert_eq!(taken.cause, RemovalCause::Stopped);
        assert!(notes.take("ses_a").is_none(), "taken once");
        let _ = stop;
    }

    #[test]
    fn a_note_taken_back_leaves_nothing_and_others_are_untouched() {
        let notes = RemovalNotes::default();
        let mine = notes.note("ses_a", RemovalCause::Pruned, "gone");
        notes.note("ses_b", RemovalCause::Stopped, "gone");
        notes.take_back("ses_a", mine);
        assert!(notes.take("ses_a").is_none());
        assert_eq!(
            notes.take("ses_b").map(|n| n.cause),
            Some(RemovalCause::Stopped)
        );
    }
}
