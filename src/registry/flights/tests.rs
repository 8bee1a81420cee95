//! The flight table's bookkeeping, on records made up in memory: which entry a leaving flight
//! takes, and who wants the card.

use super::*;
use crate::test_records::record;

/// Whether the table's entry for `record` wants the card; `None` when it has none.
fn card_wanted(flights: &Flights, record: &Arc<RunningRecord>) -> Option<bool> {
    let table = lock(&flights.table);
    table
        .get(&ProbeKey(Arc::clone(record)))
        .map(|entry| entry.card_wanted)
}

#[test]
fn a_flight_leaving_late_takes_out_only_its_own_entry_not_a_newer_one() {
    let table = Table::default();
    let key = ProbeKey(record("ses_flights_a"));
    let newer = Entry {
        id: 2,
        flight: Weak::new(),
        card_wanted: false,
    };
    lock(&table).insert(key.clone(), newer);
    assert!(leave(&table, &key, 1).is_none(), "flight 1 left already");
    assert!(lock(&table).contains_key(&key), "the newer flight stays");
    assert!(leave(&table, &key, 2).is_some_and(|entry| entry.id == 2));
    assert!(lock(&table).is_empty());
}

// One thread: the flights' tasks cannot run (and leave the table) before the test looks.
#[tokio::test(flavor = "current_thread")]
async fn a_flight_wants_the_card_once_any_waiter_asked_for_it() {
    for asks in [[false, true], [true, false]] {
        let flights = Flights::default();
        let door = DoorProbe::new();
        let probed = record("ses_flights_b");
        let waiters: Vec<Arc<Flight>> = (asks.iter())
            .map(|&want_card| flights.join(&probed, &door, want_card))
            .collect();
        assert!(Arc::ptr_eq(&waiters[0], &waiters[1]), "one flight");
        assert_eq!(card_wanted(&flights, &probed), Some(true), "{asks:?}");
    }
}
