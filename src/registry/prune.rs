//! Pruning on evidence: a record goes only when layers 1–2, read afresh just before the unlink,
//! say its process is gone; an unreadable entry only when what was read proves it never a record.

use std::collections::HashSet;
use std::sync::Arc;

use super::stopping::{StopsInProgress, is_stopping};
use super::verify::Reading;
use super::{Registry, RegistryError, RemovalCause, RemovalNotes, blocking};
use crate::running::{
    self, FileFate, Liveness, ProcessState, RunningError, RunningRecord, UnreadableEntry,
};

/// What a prune of one session decided, on layers 1–2 read afresh: remove the record (its
/// process is gone) or keep it (alive, or not verified either way).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PruneDecision {
    /// The process is gone and this prune unlinked the record, on this evidence.
    Removed {
        /// The evidence.
        reason: String,
    },
    /// The process is alive or unverified; the record stays.
    Kept {
        /// What layers 1–2 said.
        process: ProcessState,
    },
}

/// What a prune of the whole directory did.
#[derive(Debug, Default)]
pub struct PruneReport {
    /// `(session_id, evidence)` for each record removed.
    pub pruned: Vec<(String, String)>,
    /// The unreadable entries removed.
    pub removed_unreadable: Vec<UnreadableEntry>,
}

/// The sessions left after a pruning pass over a listing ([`Registry::sessions_pruned`]).
#[derive(Debug)]
pub struct PrunedListing {
    /// Newest session first; none the pass pruned.
    pub readings: Vec<Reading>,
    /// What the pass removed.
    pub report: PruneReport,
}

/// Read layers 1–2 afresh on `record` and unlink it if they say gone. `None` when the file was
/// already gone or replaced, so nothing was unlinked. A removal while a stop of the session
/// runs is the stop's doing: its SIGTERM or SIGKILL ended the process before the stop polled.
fn prune_if_gone(
    record: &RunningRecord,
    notes: &RemovalNotes,
    stops: &StopsInProgress,
) -> Result<Option<PruneDecision>, RunningError> {
    match running::process_state(record) {
        ProcessState::Gone { reason } => {
            let cause = if is_stopping(stops, &record.session_id) {
                RemovalCause::Stopped
            } else {
                RemovalCause::Pruned
            };
            Ok(match unlink_gone(record, &reason, notes, cause)? {
                FileFate::Removed => Some(PruneDecision::Removed { reason }),
                FileFate::AlreadyGone | FileFate::Replaced | FileFate::Kept { .. } => None,
            })
        }
        process => Ok(Some(PruneDecision::Kept { process })),
    }
}

/// Unlink a record whose process is gone and, if this call removed it, note why.
pub(super) fn unlink_gone(
    record: &RunningRecord,
    reason: &str,
    notes: &RemovalNotes,
    cause: RemovalCause,
) -> Result<FileFate, RunningError> {
    // Noted before the unlink: the live view, woken by the unlink itself, must find the note
    // when it sees the file gone. Taken back if this call did not remove the file.
    let note = notes.note(&record.session_id, cause, reason);
    let pruned = running::prune(
        record,
        &Liveness::Gone {
            reason: reason.to_owned(),
        },
    );
    if matches!(pruned, Ok(FileFate::Removed)) {
        notes.made(cause, 1);
    } else {
        notes.take_back(&record.session_id, note);
    }
    pruned
}

impl Registry {
    /// Prune one session on fresh evidence: re-read layers 1–2 and unlink only if gone.
    ///
    /// A prune that finds the process gone while a stop of the session is under way is the
    /// stop's doing (the stop's SIGTERM or SIGKILL ended it; the stop merely had not polled
    /// yet), so its removal note says [`RemovalCause::Stopped`].
    pub async fn prune_session(&self, session_id: &str) -> Result<PruneDecision, RegistryError> {
        let record = self.record(session_id).await?;
        let (notes, stops) = (self.removals.clone(), Arc::clone(&self.stopping));
        // `None`: someone else removed or replaced it since it was read; nothing of ours went.
        blocking(move || prune_if_gone(&record, &notes, &stops))
            .await??
            .ok_or_else(|| RegistryError::NotFound(session_id.to_owned()))
    }

    /// Prune every record whose process is gone, and every removable unreadable entry.
    pub async fn prune_all(&self) -> Result<PruneReport, RegistryError> {
        let dir = self.dir().to_path_buf();
        let (notes, stops) = (self.removals.clone(), Arc::clone(&self.stopping));
        blocking(move || {
            running::recover_quarantined(&dir)?;
            let scan = running::scan(&dir, None)?;
            let mut report = PruneReport::default();
            for record in &scan.records {
                if let Some(PruneDecision::Removed { reason }) =
                    prune_if_gone(record, &notes, &stops)?
                {
                    report.pruned.push((record.session_id.clone(), reason));
                }
            }
            report.removed_unreadable = running::remove_unreadable(&dir, &scan.unreadable)?;
            notes.made(RemovalCause::Unreadable, report.removed_unreadable.len());
            Ok(report)
        })
        .await?
    }

    /// Every session verified by all three layers, after pruning on fresh evidence what the
    /// listing found gone and removing the unreadable entries that can never be records (the
    /// CLI's `ps`). Entries stranded in quarantine are put back first, so they are listed.
    pub async fn sessions_pruned(&self) -> Result<PrunedListing, RegistryError> {
        let dir = self.dir().to_path_buf();
        blocking(move || running::recover_quarantined(&dir)).await??;
        let listing = self.sessions(true).await?;
        let is_gone = |reading: &Reading| matches!(reading.liveness, Some(Liveness::Gone { .. }));
        let gone: Vec<String> = listing
            .readings
            .iter()
            .filter(|reading| is_gone(reading))
            .map(|reading| reading.record.session_id.clone())
            .collect();
        let (dir, unreadable) = (self.dir().to_path_buf(), listing.unreadable.clone());
        let (notes, stops) = (self.removals.clone(), Arc::clone(&self.stopping));
        let (report, revived) = blocking(move || {
            let mut report = PruneReport::default();
            let mut revived = HashSet::new();
            for id in gone {
                // Read again: the listing may hold a reading of an unchanged file from earlier.
                let Some(record) = running::read_record(&dir, &id)? else {
                    continue;
                };
                match prune_if_gone(&record, &notes, &stops)? {
                    Some(PruneDecision::Removed { reason }) => report.pruned.push((id, reason)),
                    Some(PruneDecision::Kept { .. }) => _ = revived.insert(id),
                    None => {}
                }
            }
            report.removed_unreadable = running::remove_unreadable(&dir, &unreadable)?;
            notes.made(RemovalCause::Unreadable, report.removed_unreadable.len());
            Ok::<_, RegistryError>((report, revived))
        })
        .await??;
        let readings = listing
            .readings
            .iter()
            .filter(|reading| !is_gone(reading) || revived.contains(&reading.record.session_id))
            .cloned()
            .collect();
        Ok(PrunedListing { readings, report })
    }
}
