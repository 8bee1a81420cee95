//! Stopping a session as `mur stop` does: ask the capsule's door first (`murmur.StopSession`),
//! then SIGTERM, a bounded wait, and SIGKILL only if layers 1–2 still confirm the process.
//! Stops of one session run one at a time.
//!
//! Invariant: what the door answers is reported, never consulted: the signals go out (or are
//! refused) exactly as they would without the ask.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::signal::{SignalKind, prune_after_the_fact};
use super::{Registry, RegistryError, RemovalCause, blocking};
use crate::running::{self, DoorStop, FileFate, ProcessState, RunningRecord, SignalOutcome};

/// The longest a stop may wait between SIGTERM and SIGKILL.
pub const MAX_STOP_TIMEOUT: Duration = Duration::from_secs(300);
/// The wait between SIGTERM and SIGKILL when the caller names none (murmur's default).
pub const DEFAULT_STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a stop waits for the kernel to remove a process after SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(10);
/// The longest one stop takes: asking the door, the longest wait after SIGTERM, SIGKILL's
/// grace (besides reading the record and layers 1–2 between them).
pub const LONGEST_STOP: Duration = running::DOOR_STOP_DEADLINE
    .saturating_add(MAX_STOP_TIMEOUT)
    .saturating_add(KILL_GRACE);
/// How often a stop re-reads layers 1–2 while it waits for the process to go.
const STOP_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// How a stop ended, and what the prune that followed did to the record once the process was
/// found gone.
type StopEnd = (StopOutcome, Option<FileFate>);

/// Whether a stop asks the capsule's door to stop its work before the signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AskDoor {
    /// Ask first, as `mur stop` does (skipped anyway when the stop sends SIGKILL at once).
    First,
    /// Signals only.
    Never,
}

/// Whether a stop with `ask` and `timeout` asks the door: a zero timeout means SIGKILL at
/// once, which leaves the capsule nothing to wind down.
fn asks_door(ask: AskDoor, timeout: Duration) -> bool {
    ask == AskDoor::First && !timeout.is_zero()
}

/// How a stop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopOutcome {
    /// The process was ended by the signal named.
    Stopped {
        /// The last signal sent: SIGTERM if that sufficed, else SIGKILL.
        signal_sent: SignalKind,
    },
    /// The process was already gone before any signal was sent.
    AlreadyGone,
    /// Not ended: the process could not be confirmed, the kernel refused (EPERM), or it
    /// outlived the grace period after SIGKILL (an uninterruptible sleep).
    Refused {
        /// Why.
        reason: String,
        /// The signal the stop could not get through (sent but outlived, for SIGKILL's grace).
        signal: SignalKind,
        /// The last signal that was delivered before the stop gave up, if any.
        sent: Option<SignalKind>,
    },
}

/// What a stop request did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopReport {
    /// How it ended.
    pub outcome: StopOutcome,
    /// The record of the session that was stopped.
    pub record: RunningRecord,
    /// How long the stop waited for the process to go.
    pub waited: Duration,
    /// Once the process was found gone, what the prune that followed did to the record.
    pub pruned: Option<FileFate>,
    /// What asking the door came to, before any signal.
    pub door: DoorStop,
}

impl Registry {
    /// Stop a session: ask its door (unless `ask` is [`AskDoor::Never`] or `timeout` is zero),
    /// then SIGTERM, wait up to `timeout` for the process to go, then SIGKILL if it is still the
    /// same process. A zero timeout sends SIGKILL at once.
    ///
    /// The door is asked only right after a fresh probe has shown it answers as this session
    /// ([`running::ask_door_to_stop`]); that takes at most [`running::DOOR_STOP_DEADLINE`],
    /// before the SIGTERM, and never changes what is signalled.
    ///
    /// The wait re-reads layers 1–2 every few milliseconds and ends as soon as the process is
    /// gone. The record is pruned once it is. Stops of one session run one at a time; a later
    /// one finds the record already pruned and answers [`RegistryError::NotFound`]. Every stop
    /// that ends is counted for `/metrics` by its outcome.
    pub async fn stop(
        &self,
        session_id: &str,
        timeout: Duration,
        ask: AskDoor,
    ) -> Result<StopReport, RegistryError> {
        let stopped = self.stop_serialised(session_id, timeout, ask).await;
        if let Ok(report) = &stopped {
            self.tally.stopped(&report.outcome);
        }
        stopped
    }

    /// [`Registry::stop`], uncounted.
    async fn stop_serialised(
        &self,
        session_id: &str,
        timeout: Duration,
        ask: AskDoor,
    ) -> Result<StopReport, RegistryError> {
        let timeout = timeout.min(MAX_STOP_TIMEOUT);
        let lock = self.stop_lock(session_id);
        let _serialised = lock.lock().await;
        let record = self.record(session_id).await?;
        let door = if asks_door(ask, timeout) {
            running::ask_door_to_stop(&record, &self.door).await
        } else {
            DoorStop::Skipped
        };
        let started = Instant::now();
        let (outcome, pruned) = self.signal_until_gone(&record, timeout).await?;
        Ok(StopReport {
            outcome,
            record,
            waited: started.elapsed(),
            pruned,
            door,
        })
    }

    /// A stop's signals: SIGTERM and up to `timeout` for the process to go, then SIGKILL (at
    /// once when `timeout` is zero) and its grace.
    async fn signal_until_gone(
        &self,
        record: &RunningRecord,
        timeout: Duration,
    ) -> Result<StopEnd, RegistryError> {
        let first = if timeout.is_zero() {
            SignalKind::Kill
        } else {
            SignalKind::Term
        };
        match self
            .signal_record(record, first, RemovalCause::Pruned)
            .await?
        {
            (SignalOutcome::Sent, _) => {}
            (SignalOutcome::AlreadyGone { .. }, pruned) => {
                return Ok((StopOutcome::AlreadyGone, pruned));
            }
            (SignalOutcome::Refused { reason }, _) => {
                let refused = StopOutcome::Refused {
                    reason,
                    signal: first,
                    sent: None,
                };
                return Ok((refused, None));
            }
        }
        if first == SignalKind::Term
            && let Some(ended) = self.wait_then_kill(record, timeout).await?
        {
            return Ok(ended);
        }
        self.wait_after_kill(record).await
    }

    /// After a delivered SIGTERM: wait up to `timeout` for the process to go, else SIGKILL.
    /// `None` when the SIGKILL was sent and the stop waits for it.
    async fn wait_then_kill(
        &self,
        record: &RunningRecord,
        timeout: Duration,
    ) -> Result<Option<StopEnd>, RegistryError> {
        let by_term = StopOutcome::Stopped {
            signal_sent: SignalKind::Term,
        };
        if let Some(pruned) = self.wait_until_gone(record, timeout).await? {
            return Ok(Some((by_term, Some(pruned))));
        }
        Ok(
            match self
                .signal_record(record, SignalKind::Kill, RemovalCause::Stopped)
                .await?
            {
                // Gone between the last poll and the SIGKILL: SIGTERM did it.
                (SignalOutcome::AlreadyGone { .. }, pruned) => Some((by_term, pruned)),
                (SignalOutcome::Refused { reason }, _) => {
                    let refused = StopOutcome::Refused {
                        reason,
                        signal: SignalKind::Kill,
                        sent: Some(SignalKind::Term),
                    };
                    Some((refused, None))
                }
                (SignalOutcome::Sent, _) => None,
            },
        )
    }

    /// After a delivered SIGKILL: wait [`KILL_GRACE`] for the kernel to end the process.
    async fn wait_after_kill(&self, record: &RunningRecord) -> Result<StopEnd, RegistryError> {
        // SIGKILL cannot be ignored; the wait is only for the kernel to tear the process down.
        // A process stuck in an uninterruptible sleep can outlast it, and is not called stopped.
        Ok(match self.wait_until_gone(record, KILL_GRACE).await? {
            Some(pruned) => {
                let stopped = StopOutcome::Stopped {
                    signal_sent: SignalKind::Kill,
                };
                (stopped, Some(pruned))
            }
            None => {
                let refused = StopOutcome::Refused {
                    reason: format!(
                        "SIGKILL was delivered but pid {} has not exited after {} s",
                        record.pid,
                        KILL_GRACE.as_secs()
                    ),
                    signal: SignalKind::Kill,
                    sent: Some(SignalKind::Kill),
                };
                (refused, None)
            }
        })
    }

    /// Wait until every stop in progress has ended (for a graceful shutdown: a stop abandoned
    /// between SIGTERM and SIGKILL would leave its capsule half-stopped).
    pub async fn finish_stops(&self) {
        let in_progress: Vec<_> = self
            .stopping
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        for stop in in_progress {
            let _ = stop.lock().await;
        }
    }

    fn stop_lock(&self, session_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self
            .stopping
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Forget locks nobody holds, so the map stays as small as the stops in flight.
        locks.retain(|_, lock| Arc::strong_count(lock) > 1);
        Arc::clone(locks.entry(session_id.to_owned()).or_default())
    }

    /// Poll layers 1–2 until the process is gone (then prune) or `limit` passes. Answers what
    /// the prune did once gone, `None` if it never went.
    async fn wait_until_gone(
        &self,
        record: &RunningRecord,
        limit: Duration,
    ) -> Result<Option<FileFate>, RegistryError> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let probe = record.clone();
            let notes = self.removals.clone();
            let gone = blocking(move || match running::process_state(&probe) {
                ProcessState::Gone { reason } => Some(prune_after_the_fact(
                    &probe,
                    &reason,
                    &notes,
                    RemovalCause::Stopped,
                )),
                _ => None,
            })
            .await?;
            if gone.is_some() {
                return Ok(gone);
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep_until(
                deadline.min(tokio::time::Instant::now() + STOP_POLL_INTERVAL),
            )
            .await;
        }
    }
}
