//! Signalling a session's process through the running module's pidfd path; the kernel's ESRCH
//! is evidence, so a record found gone is pruned before the answer.

use std::sync::Arc;

use super::prune::unlink_gone;
use super::{Registry, RegistryError, RemovalCause, RemovalNotes, blocking};
use crate::running::{self, FileFate, RunningRecord, SignalOutcome};

/// Which signal to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalKind {
    /// SIGTERM: ask the capsule to finish.
    Term,
    /// SIGKILL: end it now.
    Kill,
}

impl SignalKind {
    /// Every signal the registry sends, in the order its documents list them.
    pub const ALL: [Self; 2] = [Self::Term, Self::Kill];

    /// The signal's conventional name, `SIGTERM` or `SIGKILL`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Term => "SIGTERM",
            Self::Kill => "SIGKILL",
        }
    }

    /// The name without its `SIG`: `TERM` or `KILL`, which [`SignalKind::parse`] takes too.
    pub fn short_name(self) -> &'static str {
        match self {
            Self::Term => "TERM",
            Self::Kill => "KILL",
        }
    }

    /// Parse a [`SignalKind::name`] or a [`SignalKind::short_name`], in any case.
    pub fn parse(text: &str) -> Option<Self> {
        let upper = text.to_ascii_uppercase();
        let short = upper.strip_prefix("SIG").unwrap_or(&upper);
        Self::ALL
            .into_iter()
            .find(|kind| kind.short_name() == short)
    }
}

/// What a signal request did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignalReport {
    /// The outcome.
    pub outcome: SignalOutcome,
    /// The record the signal was meant for.
    pub record: RunningRecord,
    /// For `AlreadyGone`, what the prune that followed did to the record.
    pub pruned: Option<FileFate>,
}

fn send_signal(record: &RunningRecord, kind: SignalKind) -> SignalOutcome {
    match kind {
        SignalKind::Term => running::signal_term(record),
        SignalKind::Kill => running::signal_kill(record),
    }
}

/// Prune a record whose process a signal or stop has just found gone. What the signal or stop
/// did stands whether or not the file could be removed, so a failure is logged and answered,
/// not returned as an error; the record stays and the next prune finds the same evidence.
pub(super) fn prune_after_the_fact(
    record: &RunningRecord,
    reason: &str,
    notes: &RemovalNotes,
    cause: RemovalCause,
) -> FileFate {
    match unlink_gone(record, reason, notes, cause) {
        Ok(fate) => fate,
        Err(error) => {
            tracing::warn!(
                session_id = %record.session_id,
                %error,
                "could not prune a gone session's record"
            );
            FileFate::Kept {
                error: error.to_string(),
            }
        }
    }
}

impl Registry {
    /// Send one signal to a session's process, through the module's pidfd path.
    ///
    /// An `AlreadyGone` outcome is evidence, so the record is pruned before this returns.
    pub async fn signal(
        &self,
        session_id: &str,
        kind: SignalKind,
    ) -> Result<SignalReport, RegistryError> {
        let record = self.record(session_id).await?;
        let (outcome, pruned) = self
            .signal_record(&record, kind, RemovalCause::Pruned)
            .await?;
        Ok(SignalReport {
            outcome,
            record,
            pruned,
        })
    }

    /// Signal and, on `AlreadyGone`, prune (noting `cause`): the kernel's ESRCH is evidence.
    /// Answers what the prune did, when there was one.
    pub(super) async fn signal_record(
        &self,
        record: &RunningRecord,
        kind: SignalKind,
        cause: RemovalCause,
    ) -> Result<(SignalOutcome, Option<FileFate>), RegistryError> {
        let record = record.clone();
        let notes = self.removals.clone();
        let tally = Arc::clone(&self.tally);
        blocking(move || {
            let outcome = send_signal(&record, kind);
            tally.signalled(kind, &outcome);
            let pruned = match &outcome {
                SignalOutcome::AlreadyGone { reason } => {
                    Some(prune_after_the_fact(&record, reason, &notes, cause))
                }
                _ => None,
            };
            (outcome, pruned)
        })
        .await
    }
}
