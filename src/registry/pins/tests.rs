//! The pin table against real processes: children of this test that live, exit, and are reaped.

use std::process::{Child, Command};

use super::*;

fn sleeper() -> Child {
    Command::new("sleep")
        .arg("600")
        .spawn()
        .expect("spawn sleep")
}

fn record_of(pid: u32) -> RunningRecord {
    let token = running::process_start_token(pid).expect("start token");
    let json = format!(
        r#"{{"session_id":"ses_pins{pid}","url":null,"pid":{pid},"process_start":"{token}",
        "capsule_name":"t","capsule_version":"1","workdir":"/tmp","outlives_launcher":true,
        "started_at":"2026-12-01T00:00:00Z"}}"#
    );
    serde_json::from_str(&json).expect("record")
}

/// An exit watch over `pins`, as `Registry::process_exits` makes one.
fn watch(pins: &Arc<Pins>) -> crate::registry::exits::ProcessExits {
    let epoll = pins.epoll().expect("epoll").try_clone().expect("dup");
    crate::registry::exits::ProcessExits::over(epoll, Arc::clone(pins)).expect("watch")
}

/// Wait until `pid` is a zombie (it was killed and is not reaped yet).
fn wait_for_zombie(pid: u32) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
        if stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z'))
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "pid {pid} never became a zombie"
        );
        std::thread::yield_now();
    }
}

#[test]
fn a_live_process_is_pinned_once_and_read_without_proc() {
    let mut child = sleeper();
    let record = record_of(child.id());
    let pins = Pins::new();
    assert_eq!(pins.state(&record), ProcessState::Alive);
    assert_eq!(pins.held(), 1);
    // A second record of the same process shares the pin.
    let mut other = record.clone();
    other.session_id = "ses_other".to_owned();
    assert_eq!(pins.state(&other), ProcessState::Alive);
    assert_eq!(pins.held(), 1);
    child.kill().expect("kill");
    wait_for_zombie(child.id());
    // Not reaped yet: a zombie is no process, and the pidfd says so.
    let state = pins.state(&record);
    assert!(matches!(state, ProcessState::Gone { .. }), "{state:?}");
    assert_eq!(pins.held(), 0, "the exited process's pidfd is closed");
    child.wait().expect("reap");
    assert!(matches!(pins.state(&other), ProcessState::Gone { .. }));
}

#[test]
fn a_wrong_start_token_is_never_pinned() {
    let mut child = sleeper();
    let mut record = record_of(child.id());
    record.process_start = "1".to_owned();
    let pins = Pins::new();
    assert!(matches!(pins.state(&record), ProcessState::Gone { .. }));
    assert_eq!(pins.held(), 0);
    record.process_start = String::new();
    assert!(matches!(
        pins.state(&record),
        ProcessState::Unverified { .. }
    ));
    assert_eq!(pins.held(), 0);
    child.kill().expect("kill");
    child.wait().expect("reap");
}

/// One whole-directory pass over `records`: its begin, its scan's sweep.
fn pass_over(pins: &Pins, records: &[Arc<RunningRecord>]) {
    let pass = pins.begin_pass();
    pins.sweep(pass, records);
}

#[test]
fn a_pin_no_record_names_is_swept_within_one_pass() {
    let mut child = sleeper();
    let record = Arc::new(record_of(child.id()));
    let pins = Pins::new();
    assert_eq!(pins.state(&record), ProcessState::Alive);
    pass_over(&pins, std::slice::from_ref(&record));
    assert_eq!(pins.held(), 1, "its record is in the directory");
    // Named by a reading after the pass began (a record written since its scan): kept.
    let pass = pins.begin_pass();
    assert_eq!(pins.state(&record), ProcessState::Alive);
    pins.sweep(pass, &[]);
    assert_eq!(pins.held(), 1, "named since the pass began");
    pass_over(&pins, &[]);
    assert_eq!(pins.held(), 0, "its record is gone: swept in the one pass");
    child.kill().expect("kill");
    child.wait().expect("reap");
}

#[test]
fn a_named_pin_survives_every_sweep() {
    let mut child = sleeper();
    let record = record_of(child.id());
    let pins = Pins::new();
    let records = [Arc::new(record.clone())];
    for _ in 0..5 {
        pass_over(&pins, &records);
        assert_eq!(pins.state(&record), ProcessState::Alive);
    }
    assert_eq!(pins.held(), 1);
    child.kill().expect("kill");
    child.wait().expect("reap");
}

#[tokio::test]
async fn an_exit_is_reported_through_the_reactor() {
    let mut child = sleeper();
    let record = record_of(child.id());
    let pins = Arc::new(Pins::new());
    assert_eq!(pins.state(&record), ProcessState::Alive);
    let mut exits = watch(&pins);
    child.kill().expect("kill");
    let exited = exits.next().await;
    assert_eq!(exited.len(), 1);
    assert!(exited[0].names(&record));
    let mut restarted = record.clone();
    restarted.process_start = format!("{}1", record.process_start);
    assert!(
        !exited[0].names(&restarted),
        "another start time is another process"
    );
    let mut elsewhere = record.clone();
    elsewhere.pid += 1;
    assert!(
        !exited[0].names(&elsewhere),
        "another pid is another process"
    );
    child.wait().expect("reap");
}

/// More exits at once than one read takes: every one is reported (the watch stays ready until
/// the kernel has no more), and a process that did not exit is never named.
#[tokio::test]
async fn a_crowd_of_exits_is_reported_whole_and_only_the_exits() {
    const CROWD: usize = super::EXITS_PER_READ + 44;
    // The budget follows the limit: under a harness's 1,024 it would pin only 256.
    crate::cli::raise_open_files_limit();
    let mut survivor = sleeper();
    let survivor_record = record_of(survivor.id());
    let pins = Arc::new(Pins::new());
    assert_eq!(pins.state(&survivor_record), ProcessState::Alive);
    let mut crowd: Vec<Child> = (0..CROWD).map(|_| sleeper()).collect();
    let records: Vec<RunningRecord> = crowd.iter().map(|child| record_of(child.id())).collect();
    for record in &records {
        assert_eq!(pins.state(record), ProcessState::Alive);
    }
    assert_eq!(pins.held(), CROWD + 1, "the premise: every process pinned");
    let mut exits = watch(&pins);
    for child in &mut crowd {
        child.kill().expect("kill");
    }
    // Every exit is in the kernel's ready list before the first read.
    for child in &crowd {
        wait_for_zombie(child.id());
    }
    let mut reported = std::collections::HashSet::new();
    let deadline = std::time::Duration::from_secs(30);
    while reported.len() < CROWD {
        let exited = tokio::time::timeout(deadline, exits.next())
            .await
            .unwrap_or_else(|_| panic!("only {} of {CROWD} exits reported", reported.len()));
        for process in exited {
            assert!(
                !process.names(&survivor_record),
                "a live process reported exited"
            );
            let named = records.iter().position(|record| process.names(record));
            reported.insert(named.expect("an exit of the crowd"));
        }
    }
    for child in &mut crowd {
        child.wait().expect("reap");
    }
    assert_eq!(pins.state(&survivor_record), ProcessState::Alive);
    survivor.kill().expect("kill");
    survivor.wait().expect("reap");
}

#[test]
fn pins_leave_probes_and_connections_their_descriptors() {
    // A usual limit: everything but the reserve and the spare.
    assert_eq!(budget_under(1 << 20, DEFAULT_RESERVE), (1 << 20) - 1_344);
    // A server allowing 10,000 connections keeps them all.
    assert_eq!(budget_under(1 << 20, 256 + 10_000), (1 << 20) - 10_320);
    // Low limits: a quarter pins, the rest stays for sockets.
    assert_eq!(budget_under(1_024, DEFAULT_RESERVE), 256);
    assert_eq!(budget_under(4_096, 256 + 2_000), 4_096 - 2_320);
    assert_eq!(budget_under(128, DEFAULT_RESERVE), 32);
    assert_eq!(budget_under(0, DEFAULT_RESERVE), 0);
    // No limit at all, and a reserve past any limit.
    assert_eq!(
        budget_under(u64::MAX, DEFAULT_RESERVE),
        usize::try_from(u64::MAX - 1_344).unwrap_or(usize::MAX)
    );
    assert_eq!(budget_under(1_024, u64::MAX), 256);
}

#[test]
fn a_reserve_given_later_replaces_the_default() {
    let pins = Pins::new();
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    pins.reserve(300);
    assert_eq!(pins.budget.load(Ordering::Relaxed), budget_under(soft, 300));
}

/// An exit a reading finds first (closing the pidfd, and the kernel's report with it) still
/// reaches the watch.
#[tokio::test]
async fn an_exit_a_reading_saw_first_still_reaches_the_watch() {
    let mut child = sleeper();
    let record = record_of(child.id());
    let pins = Arc::new(Pins::new());
    assert_eq!(pins.state(&record), ProcessState::Alive);
    let mut exits = watch(&pins);
    child.kill().expect("kill");
    wait_for_zombie(child.id());
    assert!(matches!(pins.state(&record), ProcessState::Gone { .. }));
    let exited = tokio::time::timeout(std::time::Duration::from_secs(30), exits.next())
        .await
        .expect("the exit reaches the watch");
    assert!(
        exited.iter().any(|process| process.names(&record)),
        "{exited:?}"
    );
    child.wait().expect("reap");
}

/// Kill `child` and wait until it is a zombie (exited, not reaped).
fn kill_to_zombie(child: &mut Child) {
    child.kill().expect("kill");
    wait_for_zombie(child.id());
}

/// A pass whose scan finds no record: every pin is dropped.
fn sweep_until_unnamed(pins: &Pins) {
    pass_over(pins, &[]);
    assert_eq!(pins.held(), 0, "the premise: swept");
}

/// A pin swept while its process's exit is unread hands the exit to the watch.
#[tokio::test]
async fn an_exit_swept_with_its_pin_still_reaches_the_watch() {
    let mut child = sleeper();
    let record = record_of(child.id());
    let pins = Arc::new(Pins::new());
    assert_eq!(pins.state(&record), ProcessState::Alive);
    let mut exits = watch(&pins);
    kill_to_zombie(&mut child);
    sweep_until_unnamed(&pins);
    let exited = tokio::time::timeout(std::time::Duration::from_secs(30), exits.next())
        .await
        .expect("the exit reaches the watch");
    assert!(
        exited.iter().any(|process| process.names(&record)),
        "{exited:?}"
    );
    child.wait().expect("reap");
}

/// Without a watch, a swept exit is nobody's to hand over: nothing is kept for it (kept, the
/// list would only grow). With one, a pin swept while its process lives hands over no exit.
#[tokio::test]
async fn a_sweep_hands_over_exits_only_to_a_watch_and_only_real_ones() {
    let mut gone = sleeper();
    let gone_record = record_of(gone.id());
    let pins = Arc::new(Pins::new());
    assert_eq!(pins.state(&gone_record), ProcessState::Alive);
    kill_to_zombie(&mut gone);
    sweep_until_unnamed(&pins);
    assert!(
        pins.take_closed_exits().is_empty(),
        "no watch, nothing kept"
    );
    gone.wait().expect("reap");

    // A reading that finds its pin exited, with no watch: nothing kept either.
    let mut read = sleeper();
    let read_record = record_of(read.id());
    assert_eq!(pins.state(&read_record), ProcessState::Alive);
    kill_to_zombie(&mut read);
    let records = [Arc::new(read_record)];
    let states = pins.pinned_states(&records);
    assert!(
        matches!(states.as_slice(), [Some(ProcessState::Gone { .. })]),
        "{states:?}"
    );
    assert!(
        pins.take_closed_exits().is_empty(),
        "read without a watch: nothing kept"
    );
    read.wait().expect("reap");

    let mut live = sleeper();
    let live_record = record_of(live.id());
    let _exits = watch(&pins);
    assert_eq!(pins.state(&live_record), ProcessState::Alive);
    sweep_until_unnamed(&pins);
    assert!(
        pins.take_closed_exits().is_empty(),
        "a live process swept is not an exit"
    );
    live.kill().expect("kill");
    live.wait().expect("reap");
}

/// Readings of many pins at once, with the set of exits and (where a pidfd could not join it)
/// with a poll of each pin: the same answers, each record in its place.
#[test]
fn many_pins_read_at_once_tell_the_exited_from_the_live_with_or_without_the_exited_set() {
    for with_exited_set in [true, false] {
        let mut pins = Pins::new();
        if !with_exited_set {
            pins.exited_set = None;
        }
        let mut children: Vec<Child> = (0..3).map(|_| sleeper()).collect();
        let records: Vec<Arc<RunningRecord>> = children
            .iter()
            .map(|child| Arc::new(record_of(child.id())))
            .collect();
        let alive = pins.states(&records);
        assert!(alive.iter().all(|s| *s == ProcessState::Alive), "{alive:?}");
        assert_eq!(pins.held(), 3);
        children[1].kill().expect("kill");
        wait_for_zombie(children[1].id());
        let states = pins.pinned_states(&records);
        assert_eq!(states[0], Some(ProcessState::Alive), "{with_exited_set}");
        assert!(
            matches!(states[1], Some(ProcessState::Gone { .. })),
            "{with_exited_set}: {states:?}"
        );
        assert_eq!(states[2], Some(ProcessState::Alive), "{with_exited_set}");
        assert_eq!(pins.held(), 2, "the exited process's pidfd is closed");
        for child in &mut children {
            let _ = child.kill();
            child.wait().expect("reap");
        }
    }
}
