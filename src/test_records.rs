//! Records made up in memory for unit tests (the monitor's, the flights'): no directory, no
//! process.

use std::sync::Arc;

use crate::running::RunningRecord;

/// A record of `session_id` with a door, as most capsules have.
pub(crate) fn record(session_id: &str) -> Arc<RunningRecord> {
    record_in(session_id, "/tmp/murmur-test")
}

/// [`record`], written for a capsule working in `workdir` (another record of the same session).
pub(crate) fn record_in(session_id: &str, workdir: &str) -> Arc<RunningRecord> {
    let record = RunningRecord::parse(
        serde_json::json!({
            "session_id": session_id,
            "url": "127.0.0.1:1",
            "pid": 1,
            "process_start": "1",
            "capsule_name": "test-capsule",
            "capsule_version": "0.1.0",
            "workdir": workdir,
            "outlives_launcher": false,
            "started_at": "2026-11-30T04:52:00Z",
        })
        .to_string()
        .as_bytes(),
    )
    .expect("a nine-field record parses");
    Arc::new(record)
}
