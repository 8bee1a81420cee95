//! The recheck schedule's decisions, over instants made up here: no clock, no door.

use super::*;
use crate::test_records::record;

const PERIOD: Duration = Duration::from_secs(10);

fn id(n: usize) -> String {
    format!("ses_{n:032x}")
}

/// The session ids of doors taken, as strings.
fn ids(taken: Vec<Arc<str>>) -> Vec<String> {
    taken.iter().map(ToString::to_string).collect()
}

/// Starts of the phase sequence to try: zero, the far end, and a few in between.
const STARTS: [u64; 4] = [0, u64::MAX, 0x0123_4567_89ab_cdef, 1 << 63];

/// How many doors fall due in each `slot` (from its start to just before its end), over
/// `periods` periods from `from`, taking them as a loop woken at each slot's end would.
fn due_per_slot(
    schedule: &mut RecheckSchedule,
    from: Instant,
    slot: Duration,
    periods: u32,
) -> Vec<usize> {
    let slots = (PERIOD * periods).as_nanos() / slot.as_nanos();
    (1..=slots)
        .map(|n| {
            let end = from + slot * u32::try_from(n).unwrap();
            schedule.take_due(end - Duration::from_nanos(1)).len()
        })
        .collect()
}

#[test]
fn doors_entered_together_fall_due_evenly_spread_over_the_period() {
    for doors in [10, 100, 1_000, 10_000] {
        for start in STARTS {
            for slot in [PERIOD / 1_000, PERIOD / 100, PERIOD / 10] {
                let now = Instant::now();
                let mut schedule = RecheckSchedule::new(PERIOD, start);
                for n in 0..doors {
                    schedule.enter(&id(n), now);
                }
                let counts = due_per_slot(&mut schedule, now, slot, 3);
                // The slot's share of the doors, rounded up: what a perfectly even spread puts
                // in the busiest slot. A golden-ratio spread strays from it by a couple of
                // doors at most (its discrepancy grows with the logarithm of the count).
                let share = (doors as u128 * slot.as_nanos()).div_ceil(PERIOD.as_nanos());
                let share = usize::try_from(share).unwrap();
                let busiest = counts.iter().copied().max().unwrap();
                assert!(
                    busiest <= share + 2,
                    "{doors} doors, start {start:#x}, slot {slot:?}: {busiest} due in one slot, \
                     share {share}"
                );
                assert_eq!(
                    counts.iter().sum::<usize>(),
                    doors * 3,
                    "every door once a period"
                );
            }
        }
    }
}

#[test]
fn doors_entered_at_different_instants_still_share_the_period() {
    let now = Instant::now();
    let mut schedule = RecheckSchedule::new(PERIOD, 42);
    for n in 0..500 {
        schedule.enter(&id(n), now);
    }
    let later = now + Duration::from_millis(3_333);
    for n in 500..1_000 {
        schedule.enter(&id(n), later);
    }
    let counts = due_per_slot(&mut schedule, now, PERIOD / 100, 2);
    // Each half spreads evenly on its own: at most the sum of their shares, plus two each.
    let busiest = counts.iter().copied().max().unwrap();
    assert!(busiest <= 5 + 5 + 4, "{busiest} due in one slot of 100 ms");
}

#[test]
fn a_door_entered_is_first_due_within_one_period() {
    let now = Instant::now();
    let mut schedule = RecheckSchedule::new(PERIOD, 7);
    for n in 0..100 {
        schedule.enter(&id(n), now);
        let due = schedule.by_session[id(n).as_str()];
        assert!(due >= now && due < now + PERIOD, "{:?}", due - now);
    }
    assert!(schedule.next_due().is_some_and(|due| due < now + PERIOD));
    assert!(schedule.take_due(now + PERIOD).len() == 100);
}

#[test]
fn a_door_taken_when_due_is_due_again_one_period_later() {
    let now = Instant::now();
    let mut schedule = RecheckSchedule::new(PERIOD, 99);
    schedule.enter("a", now);
    let due = schedule.next_due().unwrap();
    assert!(schedule.take_due(due - Duration::from_nanos(1)).is_empty());
    assert_eq!(ids(schedule.take_due(due)), ["a"]);
    assert_eq!(schedule.next_due(), Some(due + PERIOD));
    assert!(
        schedule
            .take_due(due + PERIOD - Duration::from_nanos(1))
            .is_empty()
    );
    assert_eq!(ids(schedule.take_due(due + PERIOD)), ["a"]);
}

#[test]
fn a_late_take_keeps_the_phase_and_asks_once() {
    let now = Instant::now();
    let mut schedule = RecheckSchedule::new(PERIOD, 5);
    schedule.enter("a", now);
    let due = schedule.next_due().unwrap();
    // Three and a half periods late: asked once, next due at its phase after now.
    let late = due + PERIOD * 3 + PERIOD / 2;
    assert_eq!(ids(schedule.take_due(late)), ["a"]);
    assert_eq!(schedule.next_due(), Some(due + PERIOD * 4));
    assert!(schedule.take_due(late).is_empty());
}

#[test]
fn entering_again_replaces_and_leaving_removes() {
    let now = Instant::now();
    let mut schedule = RecheckSchedule::new(PERIOD, 1 << 62);
    schedule.enter("a", now);
    let later = now + PERIOD * 5;
    schedule.enter("a", later);
    assert_eq!(schedule.due.len(), 1, "one due instant per door");
    assert!(schedule.next_due().is_some_and(|due| due >= later));
    schedule.leave("a");
    assert_eq!(schedule.next_due(), None);
    assert!(schedule.take_due(later + PERIOD * 2).is_empty());
    schedule.leave("never entered");
    assert!(schedule.by_session.is_empty() && schedule.due.is_empty());
}

#[test]
fn following_a_pass_keeps_phases_restarts_the_asked_and_drops_the_rest() {
    let now = Instant::now();
    let mut schedule = RecheckSchedule::new(PERIOD, 3);
    for door in ["kept", "rewritten", "gone"] {
        schedule.enter(door, now);
    }
    let kept_due = schedule.by_session["kept"];
    let later = now + PERIOD * 7;
    let doors = ["kept", "rewritten", "new"].map(record);
    schedule.follow(&doors, &HashSet::from(["rewritten"]), later);
    assert_eq!(schedule.by_session["kept"], kept_due, "its phase kept");
    for door in ["rewritten", "new"] {
        let due = schedule.by_session[door];
        assert!(
            due >= later && due < later + PERIOD,
            "{door}: {:?}",
            due - now
        );
    }
    assert!(!schedule.by_session.contains_key("gone"));
    assert_eq!(schedule.due.len(), 3);
}

#[test]
fn following_a_pass_that_found_the_same_doors_keeps_them_all_and_a_swapped_one_leaves() {
    let now = Instant::now();
    let mut schedule = RecheckSchedule::new(PERIOD, 11);
    for door in ["a", "b"] {
        schedule.enter(door, now);
    }
    let before = schedule.by_session.clone();
    let later = now + PERIOD * 3;
    let same = ["a", "b"].map(record);
    schedule.follow(&same, &HashSet::new(), later);
    assert_eq!(schedule.by_session, before, "every phase kept");
    assert_eq!(schedule.due.len(), 2);
    // As many doors as scheduled, but one of them new: the one not found leaves.
    let swapped = ["a", "c"].map(record);
    schedule.follow(&swapped, &HashSet::new(), later);
    assert_eq!(schedule.by_session["a"], before["a"]);
    assert!(!schedule.by_session.contains_key("b"));
    assert!(schedule.by_session["c"] >= later);
    assert_eq!(schedule.due.len(), 2);
}

/// A loop that wakes when told wakes about [`WAKES_PER_PERIOD`] times a period, takes every
/// door within it (and one spacing), and none later than a spacing after it is due.
#[test]
fn wakes_are_shared_by_the_doors_due_together() {
    let start = Instant::now();
    let mut schedule = RecheckSchedule::new(PERIOD, STARTS[2]);
    for n in 0..1_000 {
        schedule.enter(&id(n), start);
    }
    let spacing = PERIOD / WAKES_PER_PERIOD;
    let (mut wakes, mut taken) = (0, HashSet::new());
    let mut now = start;
    while let Some(wake) = schedule.next_due() {
        // The last doors of the period are taken up to a spacing after it.
        if wake >= start + PERIOD + spacing {
            break;
        }
        assert!(wake >= now, "never backwards");
        let earliest = schedule.due.first().map(|(due, _)| *due).unwrap();
        assert!(
            wake <= earliest + spacing,
            "a door waits at most one spacing"
        );
        now = wake;
        wakes += 1;
        taken.extend(schedule.take_due(now));
    }
    assert!(wakes <= WAKES_PER_PERIOD as usize + 2, "{wakes} wakes");
    assert_eq!(
        taken.len(),
        1_000,
        "every door within the period and a spacing"
    );
}
