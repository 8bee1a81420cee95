//! The registry's prune and stop paths, through `Registry` itself: every record it removes is
//! noted, once, with why (pruned on evidence, or ended by a stop) for the event stream to name.
//!
//! Every record names a child the test owns (a `sleep`, or one that exited and was reaped).

mod common;

use std::time::Duration;

use common::{DEADLINE, ExitedChild, RecordJson, TestProcess, temp_dir, wait_until};
use murmur_registry::registry::{AskDoor, PruneDecision, Registry, RemovalCause, StopOutcome};
use murmur_registry::running::{DoorProbe, reason_no_process};

use std::os::unix::process::ExitStatusExt;
use std::sync::Arc;

fn registry_in(dir: &std::path::Path) -> Registry {
    Registry::new(dir, DoorProbe::new())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_removal_is_noted_once_however_many_follow_it() {
    let dir = temp_dir();
    let registry = registry_in(dir.path());
    let exited: Vec<(ExitedChild, String)> = (0..3)
        .map(|_| {
            let child = ExitedChild::spawn();
            let record = child.record();
            record.write_in(dir.path());
            (child, record.session_id())
        })
        .collect();
    for (_, id) in &exited {
        let outcome = registry.prune_session(id).await.unwrap();
        assert!(
            matches!(outcome, PruneDecision::Removed { .. }),
            "{outcome:?}"
        );
    }
    // Taken only after all three removals: a later note must not push out an earlier one.
    for (child, id) in &exited {
        let note = registry.take_removal(id).expect("a note for each removal");
        assert_eq!(note.cause, RemovalCause::Pruned);
        assert_eq!(note.evidence, reason_no_process(child.pid));
        assert!(registry.take_removal(id).is_none(), "a note is taken once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prune_after_a_stop_has_ended_is_a_prune_not_the_stops_doing() {
    let dir = temp_dir();
    let registry = registry_in(dir.path());
    let mut child = TestProcess::sleeping();
    // No start token: the stop cannot confirm the process, so it is refused and ends.
    let record = RecordJson::fresh().process(child.pid(), "").no_door();
    record.write_in(dir.path());
    let id = record.session_id();
    let report = registry
        .stop(&id, Duration::from_secs(1), AskDoor::First)
        .await
        .unwrap();
    assert!(
        matches!(report.outcome, StopOutcome::Refused { .. }),
        "{:?}",
        report.outcome
    );
    assert!(child.is_running());

    // The capsule ends by other means; the next prune finds it gone.
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &child.pid().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    child.wait_exit(DEADLINE);
    let outcome = registry.prune_session(&id).await.unwrap();
    assert!(
        matches!(outcome, PruneDecision::Removed { .. }),
        "{outcome:?}"
    );
    let note = registry.take_removal(&id).expect("a note for the removal");
    assert_eq!(note.cause, RemovalCause::Pruned);
}

/// A graceful shutdown waits for a stop in progress to end: one abandoned between SIGTERM and
/// SIGKILL would leave its capsule half-stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finishing_stops_waits_for_a_stop_between_sigterm_and_sigkill() {
    let dir = temp_dir();
    let registry = Arc::new(registry_in(dir.path()));
    let ready = dir.path().join("ready");
    let termed = dir.path().join("termed");
    // Survives SIGTERM, and says when it got one.
    let mut child = TestProcess::python(&format!(
        "import signal,time,pathlib; \
         signal.signal(signal.SIGTERM, lambda *a: pathlib.Path({termed:?}).touch()); \
         pathlib.Path({ready:?}).touch(); time.sleep(1000)"
    ));
    wait_until("the child handles SIGTERM", DEADLINE, || ready.exists());
    let record = child.record().no_door();
    record.write_in(dir.path());
    let stop = tokio::spawn({
        let registry = Arc::clone(&registry);
        let id = record.session_id();
        async move {
            registry
                .stop(&id, Duration::from_secs(1), AskDoor::First)
                .await
        }
    });
    let started = std::time::Instant::now();
    while !termed.exists() {
        assert!(started.elapsed() < DEADLINE, "no SIGTERM arrived");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    registry.finish_stops().await;
    // The stop had sent SIGKILL by the time the wait ended, so the child is dead.
    assert_eq!(child.wait_exit(Duration::ZERO).signal(), Some(9));
    let report = stop.await.unwrap().unwrap();
    assert!(
        matches!(report.outcome, StopOutcome::Stopped { .. }),
        "{:?}",
        report.outcome
    );
}
