//! Sets of records by session id: found by the id, one per session.

use super::*;
use crate::test_records::record;

#[test]
fn a_record_is_found_by_its_session_id_and_replaces_its_sessions_last() {
    let mut records = SessionRecords::default();
    assert_eq!(records.records().count(), 0);
    let first = record("ses_a");
    records.insert(Arc::clone(&first));
    records.insert(record("ses_b"));
    assert!(
        records
            .get("ses_a")
            .is_some_and(|found| Arc::ptr_eq(found, &first))
    );
    assert!(records.contains("ses_b") && !records.contains("ses_c"));
    let again = record("ses_a");
    records.insert(Arc::clone(&again));
    assert_eq!(records.records().count(), 2, "one record per session");
    assert!(
        records
            .get("ses_a")
            .is_some_and(|found| Arc::ptr_eq(found, &again))
    );
    let mut ids: Vec<&str> = records.records().map(|r| r.session_id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["ses_a", "ses_b"]);
    assert!(
        records
            .remove("ses_a")
            .is_some_and(|taken| Arc::ptr_eq(&taken, &again))
    );
    assert!(records.remove("ses_a").is_none());
    assert!(!records.contains("ses_a") && records.records().count() == 1);
}

#[test]
fn records_of_many_sessions_are_each_kept_apart_and_found_by_their_own_id() {
    // Enough sessions that some share a hash table group and tag: two records are one session
    // only when their ids are equal, never because their hashes look alike.
    const SESSIONS: usize = 2_000;
    let ids: Vec<String> = (0..SESSIONS).map(|n| format!("ses_many{n:05}")).collect();
    let records: SessionRecords = ids.iter().map(|id| record(id)).collect();
    assert_eq!(
        records.records().count(),
        SESSIONS,
        "one record per session"
    );
    for id in &ids {
        let found = records.get(id).map(|found| found.session_id.as_str());
        assert_eq!(found, Some(id.as_str()));
    }
}
