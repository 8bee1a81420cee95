//! The registry's own counts, for `/metrics`: the door probes it made, the records it removed,
//! the signals and stops it ran, and what its latest picture holds. Plain atomics and no
//! exporter's types: the HTTP layer reads them and renders them (`http::metrics`).
//!
//! Invariants kept here:
//! - Counters only grow, and each event is counted once, where it happens: a probe at the door
//!   (once per visit, however many callers share it; its time from connecting to the answer,
//!   not the wait for a probe slot), a removal only when this registry's unlink removed the
//!   file.
//! - Reading the figures does nothing else: no directory pass, no probe.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use super::{Listing, Reading, RemovalCause, SignalKind, StopOutcome};
use crate::running::{Liveness, SignalOutcome};

/// The upper bounds (seconds) of the duration histograms' buckets: from a loopback answer
/// (about a millisecond) to a door that uses its whole connect and answer deadlines (7 s).
pub const DURATION_BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// How a door probe ended: the door named the session, or it did not (no answer in time, a
/// refusal, another session's card).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeEnd {
    /// The door answered for the session.
    Confirmed,
    /// It did not.
    Unconfirmed,
}

/// How a signal or a stop ended, without its reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionEnd {
    /// A signal was delivered.
    Sent,
    /// A stop ended the process.
    Stopped,
    /// The process was gone before anything was sent.
    AlreadyGone,
    /// Nothing (more) was sent: unconfirmed process, the kernel's refusal, or a process that
    /// outlived SIGKILL's grace.
    Refused,
}

impl ActionEnd {
    /// How a signal can end, in a fixed order.
    pub const OF_SIGNALS: [Self; 3] = [Self::Sent, Self::AlreadyGone, Self::Refused];
    /// How a stop can end, in a fixed order.
    pub const OF_STOPS: [Self; 3] = [Self::Stopped, Self::AlreadyGone, Self::Refused];

    fn index(self) -> usize {
        self as usize
    }
}

/// The removal causes the registry itself counts ([`RemovalCause::RecordRemoved`] is someone
/// else's doing).
pub const COUNTED_REMOVALS: [RemovalCause; 3] = [
    RemovalCause::Pruned,
    RemovalCause::Stopped,
    RemovalCause::Unreadable,
];

/// What the registry's latest picture holds: a verified listing's (all three layers), a verified
/// page's (the sessions it verified: a page is a listing of its own) or, while the live view
/// runs, its picture after each change, whichever came last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PictureFigures {
    /// Sessions whose door confirmed them (or that have none).
    pub live: u64,
    /// Sessions alive or unverified whose door did not confirm them.
    pub unreachable: u64,
    /// Sessions whose process is gone (the record still on disk).
    pub gone: u64,
    /// Entries that are not valid records.
    pub unreadable: u64,
    /// When the picture was taken.
    pub at: Option<SystemTime>,
}

/// How many readings of a picture are in each state. A reading whose probe is still out is in
/// none: it has no verdict yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StateCounts {
    /// Readings whose verdict is live.
    pub live: u64,
    /// Readings whose verdict is unreachable.
    pub unreachable: u64,
    /// Readings whose verdict is gone.
    pub gone: u64,
}

impl StateCounts {
    /// The counts of `readings`, counted one by one.
    pub fn of<'a>(readings: impl IntoIterator<Item = &'a Reading>) -> Self {
        let mut counts = Self::default();
        for reading in readings {
            counts.add(reading);
        }
        counts
    }

    /// Count `reading` in.
    pub fn add(&mut self, reading: &Reading) {
        if let Some(n) = self.of_state(reading) {
            *n += 1;
        }
    }

    /// Count `reading` out again: it was counted in, so its state's count is at least one.
    pub fn remove(&mut self, reading: &Reading) {
        if let Some(n) = self.of_state(reading) {
            debug_assert!(*n > 0, "a reading counted out that was not counted in");
            *n = n.saturating_sub(1);
        }
    }

    fn of_state(&mut self, reading: &Reading) -> Option<&mut u64> {
        match reading.liveness {
            Some(Liveness::Live) => Some(&mut self.live),
            Some(Liveness::Unreachable { .. }) => Some(&mut self.unreachable),
            Some(Liveness::Gone { .. }) => Some(&mut self.gone),
            None => None,
        }
    }
}

/// A histogram of durations: a count per bucket of [`DURATION_BUCKETS`] and one for longer.
#[derive(Debug, Default)]
struct Durations {
    buckets: [AtomicU64; DURATION_BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
    count: AtomicU64,
}

/// A [`Durations`] read at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct DurationFigures {
    /// `(upper bound in seconds, count in that bucket alone)`, the last bound infinite.
    pub buckets: Vec<(f64, u64)>,
    /// The sum of every duration, in seconds.
    pub sum_seconds: f64,
    /// How many durations.
    pub count: u64,
}

impl Durations {
    /// Count one duration.
    fn observe(&self, took: Duration) {
        let seconds = took.as_secs_f64();
        let bucket = DURATION_BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(DURATION_BUCKETS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// The histogram now. Read without a lock: a scrape racing an observation may see it in
    /// the count and not yet in its bucket, which the next scrape settles.
    fn figures(&self) -> DurationFigures {
        let bounds = DURATION_BUCKETS.iter().copied().chain([f64::INFINITY]);
        DurationFigures {
            buckets: bounds
                .zip(&self.buckets)
                .map(|(bound, n)| (bound, n.load(Ordering::Relaxed)))
                .collect(),
            sum_seconds: Duration::from_nanos(self.sum_nanos.load(Ordering::Relaxed)).as_secs_f64(),
            count: self.count.load(Ordering::Relaxed),
        }
    }
}

/// The registry's counts. One per [`super::Registry`], shared with its flights and removals.
#[derive(Debug, Default)]
pub struct Tally {
    probes: [AtomicU64; 2],
    probe_durations: Durations,
    removals: [AtomicU64; COUNTED_REMOVALS.len()],
    signals: [[AtomicU64; 4]; SignalKind::ALL.len()],
    stops: [AtomicU64; 4],
    latest_picture: Mutex<PictureFigures>,
}

impl Tally {
    /// Count one visit to a door: whether it confirmed the session, and how long the door took.
    pub(super) fn visited(&self, confirmed: bool, took: Duration) {
        self.probe_durations.observe(took);
        let end = if confirmed {
            ProbeEnd::Confirmed
        } else {
            ProbeEnd::Unconfirmed
        };
        self.probes[end as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Count `n` removals for `cause` (the registry's unlink removed the files).
    pub fn removed(&self, cause: RemovalCause, n: usize) {
        if let Some(i) = COUNTED_REMOVALS.iter().position(|c| *c == cause) {
            let n = u64::try_from(n).unwrap_or(u64::MAX);
            self.removals[i].fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Count one signal of `kind` that ended in `outcome`.
    pub fn signalled(&self, kind: SignalKind, outcome: &SignalOutcome) {
        let end = match outcome {
            SignalOutcome::Sent => ActionEnd::Sent,
            SignalOutcome::AlreadyGone { .. } => ActionEnd::AlreadyGone,
            SignalOutcome::Refused { .. } => ActionEnd::Refused,
        };
        self.signals[signal_index(kind)][end.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Count one stop that ended in `outcome`.
    pub(super) fn stopped(&self, outcome: &StopOutcome) {
        let end = match outcome {
            StopOutcome::Stopped { .. } => ActionEnd::Stopped,
            StopOutcome::AlreadyGone => ActionEnd::AlreadyGone,
            StopOutcome::Refused { .. } => ActionEnd::Refused,
        };
        self.stops[end.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Keep what a verified listing found, as the figures of the registry's picture.
    pub(super) fn listed(&self, listing: &Listing) {
        self.pictured(StateCounts::of(&listing.readings), listing.unreadable.len());
    }

    /// Keep `counts` and the count of unreadable entries as the figures of the registry's
    /// picture: a verified listing's or page's, or the live view's after each step, whichever
    /// came last.
    pub fn pictured(&self, counts: StateCounts, unreadable: usize) {
        let figures = PictureFigures {
            live: counts.live,
            unreachable: counts.unreachable,
            gone: counts.gone,
            unreadable: u64::try_from(unreadable).unwrap_or(u64::MAX),
            at: Some(SystemTime::now()),
        };
        *self
            .latest_picture
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = figures;
    }

    /// Door probes that ended in `end`.
    pub fn probes(&self, end: ProbeEnd) -> u64 {
        self.probes[end as usize].load(Ordering::Relaxed)
    }

    /// How long door probes took.
    pub fn probe_durations(&self) -> DurationFigures {
        self.probe_durations.figures()
    }

    /// Records (or unreadable entries) the registry removed for `cause`.
    pub fn removals(&self, cause: RemovalCause) -> u64 {
        COUNTED_REMOVALS
            .iter()
            .position(|c| *c == cause)
            .map_or(0, |i| self.removals[i].load(Ordering::Relaxed))
    }

    /// Signals of `kind` that ended in `end`.
    pub fn signals(&self, kind: SignalKind, end: ActionEnd) -> u64 {
        self.signals[signal_index(kind)][end.index()].load(Ordering::Relaxed)
    }

    /// Stops that ended in `end`.
    pub fn stops(&self, end: ActionEnd) -> u64 {
        self.stops[end.index()].load(Ordering::Relaxed)
    }

    /// What the latest picture holds (all zero, `at: None`, before the first).
    pub fn latest_picture(&self) -> PictureFigures {
        *self
            .latest_picture
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

fn signal_index(kind: SignalKind) -> usize {
    match kind {
        SignalKind::Term => 0,
        SignalKind::Kill => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_lands_in_the_first_bucket_that_holds_it() {
        let durations = Durations::default();
        durations.observe(Duration::from_millis(1));
        durations.observe(Duration::from_millis(30));
        durations.observe(Duration::from_secs(60));
        let figures = durations.figures();
        assert_eq!(figures.count, 3);
        assert_eq!(figures.buckets.len(), DURATION_BUCKETS.len() + 1);
        let counted: Vec<(f64, u64)> = figures
            .buckets
            .iter()
            .copied()
            .filter(|(_, n)| *n > 0)
            .collect();
        assert_eq!(counted, [(0.001, 1), (0.05, 1), (f64::INFINITY, 1)]);
        assert!((figures.sum_seconds - 60.031).abs() < 1e-9);
    }

    #[test]
    fn a_probe_is_counted_by_how_it_ended() {
        let tally = Tally::default();
        tally.visited(true, Duration::from_millis(3));
        tally.visited(false, Duration::from_millis(40));
        tally.visited(false, Duration::from_secs(5));
        assert_eq!(tally.probes(ProbeEnd::Confirmed), 1);
        assert_eq!(tally.probes(ProbeEnd::Unconfirmed), 2);
        assert_eq!(tally.probe_durations().count, 3);
    }

    #[test]
    fn signals_stops_and_removals_count_apart() {
        let tally = Tally::default();
        tally.signalled(SignalKind::Kill, &SignalOutcome::Sent);
        tally.signalled(
            SignalKind::Term,
            &SignalOutcome::AlreadyGone {
                reason: "exited".into(),
            },
        );
        tally.stopped(&StopOutcome::AlreadyGone);
        tally.removed(RemovalCause::Unreadable, 2);
        tally.removed(RemovalCause::RecordRemoved, 5);
        assert_eq!(tally.signals(SignalKind::Kill, ActionEnd::Sent), 1);
        assert_eq!(tally.signals(SignalKind::Term, ActionEnd::Sent), 0);
        assert_eq!(tally.signals(SignalKind::Term, ActionEnd::AlreadyGone), 1);
        assert_eq!(tally.stops(ActionEnd::AlreadyGone), 1);
        assert_eq!(tally.stops(ActionEnd::Stopped), 0);
        assert_eq!(tally.removals(RemovalCause::Unreadable), 2);
        assert_eq!(tally.removals(RemovalCause::RecordRemoved), 0, "not ours");
    }
}
