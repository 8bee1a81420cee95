//! The loop against a real directory, a real inotify watch and this test's own process: with
//! the periodic read left to the watch alone, every change to a record is still seen.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::monitor::{EventKind, MIN_INTERVAL, Monitor, Next, Subscription};
use crate::registry::{Registry, RemovalCause};
use crate::running::{DoorProbe, process_start_token};

/// How long a broken test waits for an event before failing; never how long a test takes.
const EVENT_DEADLINE: Duration = Duration::from_secs(30);
/// Changes made to one record, each after the loop has passed over the directory a few times
/// without reading it.
const ROUNDS: usize = 4;
/// Periodic passes the loop makes between two changes: every one judges the last read's
/// records again, none reads the directory.
const QUIET_PASSES: u64 = 3;

/// A doorless record of this test's process, written whole (staged under a hidden name, then
/// renamed into place), as murmur writes them.
fn write_record(dir: &Path, session_id: &str, workdir: &str) {
    let pid = std::process::id();
    let json = serde_json::json!({
        "session_id": session_id,
        "url": null,
        "pid": pid,
        "process_start": process_start_token(pid).expect("this process's start token"),
        "capsule_name": "test-capsule",
        "capsule_version": "0.1.0",
        "workdir": workdir,
        "outlives_launcher": false,
        "started_at": "2026-12-01T00:00:00Z",
    });
    let staged = dir.join(format!(".{session_id}.json.tmp"));
    std::fs::write(&staged, json.to_string()).expect("write the staged record");
    std::fs::rename(&staged, dir.join(format!("{session_id}.json"))).expect("rename into place");
}

/// The next change `subscription` hears of, failing the test after [`EVENT_DEADLINE`].
async fn next_change(subscription: &mut Subscription) -> EventKind {
    let next = tokio::time::timeout(EVENT_DEADLINE, subscription.recv())
        .await
        .expect("the change was seen: only the directory watch can have told the loop")
        .expect("the stream goes on");
    match next {
        Next::Event(event) => event.kind.clone(),
        Next::Snapshot(snapshot) => panic!("one change, not a snapshot: {snapshot:?}"),
    }
}

/// Wait until the loop has made [`QUIET_PASSES`] more periodic passes.
async fn quiet_passes(steps: &mut tokio::sync::watch::Receiver<u64>) {
    let from = *steps.borrow_and_update();
    let passed = steps.wait_for(|now| *now >= from + QUIET_PASSES);
    tokio::time::timeout(EVENT_DEADLINE, passed)
        .await
        .expect("the loop keeps passing")
        .expect("the loop runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_reads_left_to_the_watch_every_record_added_rewritten_or_removed_is_seen() {
    let home = tempfile::tempdir().expect("temp dir");
    let dir = home.path().join("running");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod 700");
    let registry = Arc::new(Registry::new(&dir, DoorProbe::new()));
    assert!(
        registry.watch_sees_every_change(),
        "a watch sees every change in a temporary directory"
    );
    let monitor = Monitor::new(registry);
    monitor.set_interval(MIN_INTERVAL);
    monitor.set_read_at_least_every(u32::MAX);
    let mut subscription = monitor.subscribe().await.expect("subscribes");
    assert!(subscription.snapshot.readings.is_empty());
    let mut steps = monitor.steps();

    for round in 0..ROUNDS {
        let id = format!("ses_0190a5c0f4d17c3e8b2a4d6f8e0c1b{round:02x}");
        quiet_passes(&mut steps).await;
        write_record(&dir, &id, "/first");
        match next_change(&mut subscription).await {
            EventKind::Added(reading) => {
                assert_eq!(reading.record.session_id, id);
                assert_eq!(reading.record.workdir, Path::new("/first"));
            }
            other => panic!("round {round}: added, not {other:?}"),
        }

        quiet_passes(&mut steps).await;
        write_record(&dir, &id, "/second");
        match next_change(&mut subscription).await {
            EventKind::Changed { now, .. } => {
                assert_eq!(now.record.session_id, id);
                assert_eq!(now.record.workdir, Path::new("/second"));
            }
            other => panic!("round {round}: changed, not {other:?}"),
        }

        quiet_passes(&mut steps).await;
        std::fs::remove_file(dir.join(format!("{id}.json"))).expect("remove the record");
        match next_change(&mut subscription).await {
            EventKind::Removed {
                session_id, cause, ..
            } => {
                assert_eq!(session_id, id);
                assert_eq!(cause, RemovalCause::RecordRemoved);
            }
            other => panic!("round {round}: removed, not {other:?}"),
        }
    }
}

/// A record rewritten for another process where the watch cannot see it (through a hard link
/// from another directory), after which its old process dies: a pass that does not read the
/// directory must not report the session gone for the old process; it reads the directory and
/// judges the record as it is now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_replaced_unseen_is_not_judged_gone_for_its_old_process() {
    let home = tempfile::tempdir().expect("temp dir");
    let dir = home.path().join("running");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod 700");
    let elsewhere = home.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    let mut old = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .expect("spawn sleep");
    let id = "ses_0190a5c0f4d17c3e8b2a4d6f8e0c1bff";
    let record = |pid: u32| {
        serde_json::json!({
            "session_id": id, "url": null, "pid": pid,
            "process_start": process_start_token(pid).expect("a start token"),
            "capsule_name": "test-capsule", "capsule_version": "0.1.0", "workdir": "/w",
            "outlives_launcher": false, "started_at": "2026-12-01T00:00:00Z",
        })
        .to_string()
    };
    let file = dir.join(format!("{id}.json"));
    std::fs::write(&file, record(old.id())).expect("write the record");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
    let link = elsewhere.join("same-inode.json");
    std::fs::hard_link(&file, &link).expect("a hard link from another directory");

    let registry = Arc::new(Registry::new(&dir, DoorProbe::new()));
    let monitor = Monitor::new(registry);
    monitor.set_interval(MIN_INTERVAL);
    monitor.set_read_at_least_every(u32::MAX);
    let mut subscription = monitor.subscribe().await.expect("subscribes");
    assert_eq!(subscription.snapshot.readings.len(), 1);
    let mut steps = monitor.steps();
    quiet_passes(&mut steps).await;

    // Rewritten in place through the other name: the running directory's watch hears nothing.
    std::fs::write(&link, record(std::process::id())).expect("rewrite through the link");
    old.kill().expect("kill the old process");
    old.wait().expect("reap it");
    match next_change(&mut subscription).await {
        EventKind::Changed { now, .. } => {
            assert_eq!(now.record.pid, std::process::id(), "judged as it is now");
            let gone = matches!(now.liveness, Some(crate::running::Liveness::Gone { .. }));
            assert!(!gone, "{now:?}");
        }
        other => panic!("the record as rewritten, not {other:?}"),
    }
    assert!(file.exists(), "nothing pruned");
}
