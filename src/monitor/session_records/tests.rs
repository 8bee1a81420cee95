//! Sets of records by session id: found by the id, one per session.

use super::*;
use crate::monitor::test_records::record;

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
