//! When the live view asks each door of a live process again: every door on its own schedule,
//! one recheck period apart, at a phase of its own, so N doors make a steady N / period probes
//! a second and never a burst.
//!
//! Invariants:
//! - Pure: every decision is made at an instant the caller gives; nothing here reads a clock.
//! - A door is due at one instant at a time: entering it again replaces its due instant.
//! - Doors entered at one instant get phases spread evenly over the period (a golden-ratio
//!   sequence from a random start), so no slot of the period holds much more than its share.
//! - A door keeps its phase: taken when due, it is next due a whole number of periods after
//!   that, at the first such instant after the one it was taken at (a late loop skips rechecks
//!   rather than bunching them).
//! - Doors are taken [`WAKES_PER_PERIOD`] times a period at most, each time every door due by
//!   then: the rate stays N / period, and a wake-up of the loop is shared by N / 40 probes
//!   rather than paid by each (on an idle machine the wake-ups cost more than the probes).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::running::RunningRecord;

/// 2^64 divided by the golden ratio: consecutive multiples of it, taken modulo 2^64, fall into
/// the largest gap left by those before (the three-gap theorem), so phases handed out one after
/// another cover the period evenly however many there are.
const GOLDEN_STEP: u64 = 0x9E37_79B9_7F4A_7C15;

/// The most times a period the loop wakes to take doors due: every 250 ms at the default 10 s.
/// A door is asked at most a fortieth of a period late, so "within one recheck" still holds.
pub(super) const WAKES_PER_PERIOD: u32 = 40;

/// Each door's next recheck, by session.
#[derive(Debug)]
pub(super) struct RecheckSchedule {
    period: Duration,
    /// The next phase handed out, as a fraction of the period in 64-bit fixed point.
    next_phase: u64,
    /// Every door's due instant, earliest first.
    due: BTreeSet<(Instant, Arc<str>)>,
    by_session: HashMap<Arc<str>, Instant>,
    /// When doors were last taken.
    last_taken: Option<Instant>,
}

impl RecheckSchedule {
    /// An empty schedule asking each door every `period`; `start` is where the phases begin (a
    /// random number, so that registries started together do not ask in step).
    pub(super) fn new(period: Duration, start: u64) -> Self {
        Self {
            period: period.max(Duration::from_millis(1)),
            next_phase: start,
            due: BTreeSet::new(),
            by_session: HashMap::new(),
            last_taken: None,
        }
    }

    /// Schedule `session_id`'s door anew, as just asked at `now`: its first recheck falls at
    /// its own offset within one period from `now`, replacing any it had.
    pub(super) fn enter(&mut self, session_id: &str, now: Instant) {
        self.leave(session_id);
        let phase = self.next_phase;
        self.next_phase = self.next_phase.wrapping_add(GOLDEN_STEP);
        let offset = (self.period.as_nanos() * u128::from(phase)) >> 64;
        // Below the period, which fits in a `Duration`; saturating only to stay panic-free.
        let offset = Duration::from_nanos(u64::try_from(offset).unwrap_or(u64::MAX));
        self.insert(Arc::from(session_id), now + offset);
    }

    /// Take `session_id`'s door off the schedule (its session left, or has no door to ask).
    pub(super) fn leave(&mut self, session_id: &str) {
        if let Some((id, due)) = self.by_session.remove_entry(session_id) {
            self.due.remove(&(due, id));
        }
    }

    /// Bring the schedule in line with a pass made at `now`: `doors` are the records of every
    /// door of a live process the pass found, each session once; those in `asked_now` (new,
    /// rewritten, or just confirmed alive) start afresh from `now`, the others already here
    /// keep their phase, new ones enter, and every door not in `doors` leaves.
    pub(super) fn follow(
        &mut self,
        doors: &[Arc<RunningRecord>],
        asked_now: &HashSet<&str>,
        now: Instant,
    ) {
        let mut entering = Vec::new();
        let mut scheduled = 0;
        for id in doors.iter().map(|record| record.session_id.as_str()) {
            let known = self.by_session.contains_key(id);
            scheduled += usize::from(known);
            if asked_now.contains(id) || !known {
                entering.push(id);
            }
        }
        // Every door scheduled is still one of `doors` when as many of them are scheduled.
        if scheduled < self.by_session.len() {
            let found: HashSet<&str> = doors.iter().map(|r| r.session_id.as_str()).collect();
            let leaving: Vec<Arc<str>> = self
                .by_session
                .keys()
                .filter(|id| !found.contains(&***id))
                .cloned()
                .collect();
            for id in leaving {
                self.leave(&id);
            }
        }
        for id in entering {
            self.enter(id, now);
        }
    }

    /// When to take the doors due next, if any door is scheduled: when the earliest is due,
    /// but no sooner than a [`WAKES_PER_PERIOD`]th of a period after doors were last taken.
    pub(super) fn next_due(&self) -> Option<Instant> {
        let earliest = self.due.first().map(|(due, _)| *due)?;
        let spacing = self.period / WAKES_PER_PERIOD;
        Some(match self.last_taken {
            Some(last) => earliest.max(last + spacing),
            None => earliest,
        })
    }

    /// Every door due at or before `now`, earliest first; each is scheduled again at its own
    /// phase, the first whole number of periods after its due instant that is past `now`.
    pub(super) fn take_due(&mut self, now: Instant) -> Vec<Arc<str>> {
        self.last_taken = Some(now);
        // A wake's share of the doors, in the steady state: room made once, not grown to it.
        let share = self.by_session.len() / WAKES_PER_PERIOD as usize + 1;
        let mut taken = Vec::with_capacity(share);
        while let Some((due, _)) = self.due.first()
            && *due <= now
        {
            let Some((due, id)) = self.due.pop_first() else {
                break;
            };
            let periods_late = (now - due).as_nanos() / self.period.as_nanos();
            let periods = u32::try_from(periods_late + 1).unwrap_or(u32::MAX);
            let next = due + self.period.saturating_mul(periods);
            taken.push(Arc::clone(&id));
            self.insert(id, next);
        }
        taken
    }

    fn insert(&mut self, id: Arc<str>, due: Instant) {
        self.by_session.insert(Arc::clone(&id), due);
        self.due.insert((due, id));
    }
}

#[cfg(test)]
mod tests;
