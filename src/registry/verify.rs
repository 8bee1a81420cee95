//! Verifying records already read: door probes are single-flight (see `flights`), and layers 1–2
//! settle a verdict without a probe wherever they can.
//!
//! Invariant: a reading keeps the skills of the card that verified it, never the card; a card is
//! handed only to a caller that asked for it ([`Cards::Wanted`]), beside the readings, and it
//! never changes a verdict.

use std::sync::Arc;

use futures_util::future::Either;

use super::flights::Flight;
use super::{Registry, blocking};
use crate::running::{self, Liveness, ProcessState, RedactedCard, RunningRecord, Skill};

/// Whether a verification hands back the cards that verified its sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cards {
    /// Only the verdicts (and the cards' skills).
    Unwanted,
    /// The cards too: each live session's, redacted for its record.
    Wanted,
}

/// The card that verified one reading, when cards were wanted and the door named the session.
pub type ReadingCard = Option<Arc<RedactedCard>>;

/// One record with what the layers said about it.
#[derive(Debug, Clone)]
pub struct Reading {
    /// The record as read, shared with the registry's cache of the directory (and with every
    /// other reading of that very file): a reading never copies a record.
    pub record: Arc<RunningRecord>,
    /// Layers 1–2.
    pub process: ProcessState,
    /// All three layers; `None` when the door was not probed and layers 1–2 cannot decide.
    pub liveness: Option<Liveness>,
    /// What the card that verified the session lists (ids and tags only, secrets redacted);
    /// empty unless the door was probed and named the session.
    pub skills: Arc<[Skill]>,
}

/// The door probes in flight at one moment (`Registry::probes_in_flight`, for tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbesInFlight {
    /// Probes whose door has not answered yet: at most one per distinct record.
    pub probes: usize,
    /// Verifications waiting on them, summed over the probes.
    pub waiters: usize,
}

/// A reading from layers 1–2 alone: a verdict only where they decide it.
pub(super) fn lean_reading((record, process): (Arc<RunningRecord>, ProcessState)) -> Reading {
    let liveness = running::decided_by_process(&record, &process);
    Reading {
        record,
        process,
        liveness,
        skills: Arc::default(),
    }
}

/// A record whose verdict is settled (`Err`) or awaits its door's probe (`Ok`).
struct PendingReading {
    record: Arc<RunningRecord>,
    process: ProcessState,
    verdict: Result<Arc<Flight>, Liveness>,
}

impl PendingReading {
    /// The reading, once the probe (if any) has answered, and its card if the flight kept one;
    /// reason and card redacted for this record.
    async fn finish(self) -> (Reading, ReadingCard) {
        let (liveness, skills, card) = match self.verdict {
            Err(settled) => (settled, Arc::default(), None),
            Ok(flight) => match flight.answer().await {
                // A flight's waiters hold the same secrets (they key it), so its card is
                // redacted for each of them already.
                Ok(verified) => (Liveness::Live, verified.skills, verified.card),
                Err(reason) => {
                    let reason = running::redact_secrets(reason, &self.record);
                    (Liveness::Unreachable { reason }, Arc::default(), None)
                }
            },
        };
        let reading = Reading {
            record: self.record,
            process: self.process,
            liveness: Some(liveness),
            skills,
        };
        (reading, card)
    }
}

impl Registry {
    /// The registry's one verification of records already read: three layers when `probe`,
    /// else layers 1–2 (a verdict only where they decide it). Readings come back in the
    /// records' order.
    ///
    /// For a caller that holds records from an earlier scan (a monitor comparing readings,
    /// say): layers 1–2 are read afresh, through the pins where a process is pinned, and door
    /// probes are shared with every other caller verifying an identical record at the same
    /// moment, exactly as [`Registry::sessions`] shares them. Records may be given owned or
    /// shared.
    pub async fn verify<R: Into<Arc<RunningRecord>>>(
        &self,
        records: Vec<R>,
        probe: bool,
    ) -> Vec<Reading> {
        let records: Vec<Arc<RunningRecord>> = records.into_iter().map(Into::into).collect();
        let states = self.process_states(&records).await;
        self.read_all(records, states, probe).await
    }

    /// [`Registry::verify`] (all three layers) of each of `records`, each reading awaited on
    /// its own: the live view's rechecks, answered door by door.
    ///
    /// The pins answer layers 1–2 for them all at once, and the doors of pinned processes are
    /// joined (their probes started) now; a record whose process is not pinned is verified
    /// once its reading is first awaited.
    pub(crate) fn verify_each(
        self: &Arc<Self>,
        records: &[Arc<RunningRecord>],
    ) -> Vec<impl Future<Output = Reading> + Send + Sync + 'static> {
        let pinned = self.reader.pins.pinned_states(records);
        (records.iter().zip(pinned))
            .map(|(record, pinned)| {
                let record = Arc::clone(record);
                match pinned {
                    Some(process) => {
                        let pending = self.start_reading(record, process, Cards::Unwanted);
                        Either::Left(async move { pending.finish().await.0 })
                    }
                    None => {
                        let registry = Arc::clone(self);
                        Either::Right(async move {
                            let process = registry.process_state(Arc::clone(&record)).await;
                            registry.read_one(record, process, true).await
                        })
                    }
                }
            })
            .collect()
    }

    /// Layers 1–2 for many records, through the pins, in one trip to the blocking pool; each
    /// unverified if that trip fails.
    async fn process_states(&self, records: &[Arc<RunningRecord>]) -> Vec<ProcessState> {
        // Pinned processes are known without blocking: the pool (a thread hop) only when one
        // must be read from `/proc`.
        let pins = Arc::clone(&self.reader.pins);
        let pinned: Option<Vec<ProcessState>> = pins.pinned_states(records).into_iter().collect();
        if let Some(states) = pinned {
            return states;
        }
        let (records, count) = (records.to_vec(), records.len());
        blocking(move || pins.states(&records))
            .await
            .unwrap_or_else(|_| vec![running::process_check_failed(); count])
    }

    /// [`Registry::process_states`] of one record.
    async fn process_state(&self, record: Arc<RunningRecord>) -> ProcessState {
        let pins = Arc::clone(&self.reader.pins);
        if let Some(state) = pins.pinned_state(&record) {
            return state;
        }
        blocking(move || pins.state(&record))
            .await
            .unwrap_or_else(|_| running::process_check_failed())
    }

    /// How many door probes are in flight right now, and how many verifications wait on them
    /// (several callers verifying one record wait on one probe).
    pub(crate) fn probes_in_flight(&self) -> ProbesInFlight {
        let (probes, waiters) = self.flights.in_flight();
        ProbesInFlight { probes, waiters }
    }

    /// The verdicts for `records`, given what layers 1–2 said of each; the door is probed (when
    /// `probe`) only where they leave the verdict open.
    pub(super) async fn read_all(
        &self,
        records: Vec<Arc<RunningRecord>>,
        states: Vec<ProcessState>,
        probe: bool,
    ) -> Vec<Reading> {
        if !probe {
            return records.into_iter().zip(states).map(lean_reading).collect();
        }
        self.probe_all(records, states, Cards::Unwanted).await.0
    }

    /// Three layers for every record, given what layers 1–2 said of each; with the cards that
    /// verified them when `cards` wants them (else no card: an empty list).
    pub(super) async fn probe_all(
        &self,
        records: Vec<Arc<RunningRecord>>,
        states: Vec<ProcessState>,
        cards: Cards,
    ) -> (Vec<Reading>, Vec<ReadingCard>) {
        // Every flight is joined (and so started) before any answer is awaited: the probes run
        // side by side, and awaiting them in order costs only the slowest one.
        let pending: Vec<_> = records
            .into_iter()
            .zip(states)
            .map(|(record, process)| self.start_reading(record, process, cards))
            .collect();
        let mut readings = Vec::with_capacity(pending.len());
        let mut kept_cards = Vec::new();
        for pending in pending {
            let (reading, card) = pending.finish().await;
            readings.push(reading);
            if cards == Cards::Wanted {
                kept_cards.push(card);
            }
        }
        (readings, kept_cards)
    }

    /// [`Registry::read_all`] of one record.
    pub(super) async fn read_one(
        &self,
        record: Arc<RunningRecord>,
        process: ProcessState,
        probe: bool,
    ) -> Reading {
        if !probe {
            return lean_reading((record, process));
        }
        (self.start_reading(record, process, Cards::Unwanted))
            .finish()
            .await
            .0
    }

    /// The verdict where layers 1–2 settle it, else the probe of the door joined.
    fn start_reading(
        &self,
        record: Arc<RunningRecord>,
        process: ProcessState,
        cards: Cards,
    ) -> PendingReading {
        match running::settled_without_door(&record, process) {
            Ok(verdict) => PendingReading {
                record,
                process: verdict.process,
                verdict: Err(verdict.liveness),
            },
            Err(process) => {
                let flight = self
                    .flights
                    .join(&record, &self.door, cards == Cards::Wanted);
                PendingReading {
                    record,
                    process,
                    verdict: Ok(flight),
                }
            }
        }
    }
}
