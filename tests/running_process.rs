//! Layers 1 and 2 (`process_state`, `process_start_token`) and signalling (`signal_term`,
//! `signal_kill`), against real processes the test owns: the test process itself, a live
//! `sleep` child, a child that exited and was reaped, an unreaped zombie, and a live process
//! whose main thread has exited (its leader shows `Z` while another thread runs, or while its
//! threads keep handing over to new ones).
//!
//! Recorded start tokens that cannot be compared (`""`, or not decimal) make a live pid
//! unverified, never alive and never signalled.
//!
//! Every record here names one of those processes, or a pid no process can hold; the only pid
//! beyond `i32::MAX` given to a signal function is 2147483649 (as `pid_t`, the nonexistent group
//! -2147483647), which must be refused before any syscall.

mod common;

use std::os::unix::process::ExitStatusExt;

use common::{
    DEADLINE, ExitedChild, RecordJson, TestProcess, Zombie, own_start_token, proc_state,
    task_states, wait_until, wire_word, wrong_start_token,
};
use murmur_registry::running::{
    ProcessState, RunningRecord, SignalOutcome, process_start_token, process_state,
    reason_no_process, reason_pid_reused, signal_kill, signal_term,
};
use murmur_registry::wire::ProcessStatus;

const SIGTERM: i32 = 15;
const SIGKILL: i32 = 9;

/// The word a client sees for `state` (the HTTP contract's one vocabulary).
fn gone_no_process(pid: u32) -> ProcessState {
    ProcessState::Gone {
        reason: format!("no process holds pid {pid}"),
    }
}

fn gone_reused(pid: u32) -> ProcessState {
    ProcessState::Gone {
        reason: format!("pid {pid} is held by a process that started at another time"),
    }
}

fn record_for(pid: u32, token: &str) -> RunningRecord {
    RecordJson::fresh().process(pid, token).parse()
}

/// The child is alive and not a zombie, by two independent readings.
fn assert_survives(child: &mut TestProcess) {
    let pid = child.pid();
    assert!(child.is_running(), "child {pid} exited");
    let state = proc_state(pid);
    assert!(
        matches!(state, Some(s) if s != 'Z' && s != 'X'),
        "child {pid} is in state {state:?}"
    );
}

#[test]
fn the_reasons_are_the_specs_words() {
    assert_eq!(reason_no_process(42), "no process holds pid 42");
    assert_eq!(
        reason_pid_reused(42),
        "pid 42 is held by a process that started at another time"
    );
}

#[test]
fn start_tokens_are_read_for_live_pids_only() {
    let own = own_start_token();
    assert!(
        !own.is_empty() && own.bytes().all(|b| b.is_ascii_digit()),
        "{own:?}"
    );
    assert_eq!(process_start_token(std::process::id()), Some(own.clone()));

    let child = TestProcess::sleeping();
    let token = child.start_token();
    assert!(token.bytes().all(|b| b.is_ascii_digit()), "{token:?}");
    // Stable across readings.
    assert_eq!(process_start_token(child.pid()), Some(token));

    let exited = ExitedChild::spawn();
    assert_eq!(process_start_token(exited.pid), None);
    for impossible in [0, i32::MAX as u32 + 1, u32::MAX] {
        assert_eq!(process_start_token(impossible), None, "pid {impossible}");
    }
}

#[test]
fn this_process_with_its_real_token_is_alive() {
    let record = RecordJson::fresh().parse();
    assert_eq!(record.pid, std::process::id());
    assert_eq!(process_state(&record), ProcessState::Alive);
    assert_eq!(
        wire_word(ProcessStatus::from(&ProcessState::Alive)),
        "alive"
    );
}

#[test]
fn a_live_child_with_its_real_token_is_alive() {
    let mut child = TestProcess::sleeping();
    let record = child.record().parse();
    assert_eq!(process_state(&record), ProcessState::Alive);
    assert_survives(&mut child);
}

#[test]
fn a_child_that_exited_and_was_reaped_is_gone() {
    let exited = ExitedChild::spawn();
    let record = exited.record().parse();
    let state = process_state(&record);
    assert_eq!(state, gone_no_process(exited.pid));
    assert_eq!(wire_word(ProcessStatus::from(&state)), "gone");
}

#[test]
fn an_unreaped_zombie_is_gone() {
    let zombie = Zombie::spawn();
    // With its real start token: the zombie is the writer, and it will never answer again.
    let record = zombie.record().parse();
    assert_eq!(process_state(&record), gone_no_process(zombie.pid()));
    assert_eq!(proc_state(zombie.pid()), Some('Z'), "still unreaped");
}

#[test]
fn a_process_whose_main_thread_exited_while_another_runs_is_alive() {
    let mut leader = TestProcess::zombie_leader();
    let pid = leader.pid();
    let record = leader.record().parse();
    assert_eq!(process_state(&record), ProcessState::Alive);
    // The premise held throughout: the leader is `Z`, another thread is not, nothing exited.
    assert_eq!(proc_state(pid), Some('Z'));
    assert!(
        task_states(pid).iter().any(|s| !matches!(s, 'Z' | 'X')),
        "{:?}",
        task_states(pid)
    );
    assert!(leader.is_running());
    // With another start time it is a reused pid like any other.
    let reused = record_for(pid, &wrong_start_token(pid));
    assert_eq!(process_state(&reused), gone_reused(pid));
}

/// A process whose main thread has exited and whose other thread keeps handing over to a new
/// one: each thread starts its successor, then exits. The process is alive throughout.
const THREAD_RELAY: &str = "import threading,ctypes
def relay():
    threading.Thread(target=relay).start()
threading.Thread(target=relay).start()
ctypes.CDLL(None).pthread_exit(None)";

/// How many readings the relay gets: enough that some reading lists a thread which exits
/// before its stat is read (with the relay running, most readings do).
const RELAY_READINGS: usize = 2000;

#[test]
fn a_thread_that_exits_while_a_zombie_leaders_threads_are_read_is_skipped() {
    let mut relay = TestProcess::python(THREAD_RELAY);
    let pid = relay.pid();
    wait_until(
        &format!("pid {pid}'s leader is a zombie while the relay runs"),
        DEADLINE,
        || proc_state(pid) == Some('Z') && task_states(pid).len() > 1,
    );
    let record = relay.record().parse();
    for reading in 0..RELAY_READINGS {
        let state = process_state(&record);
        assert_eq!(state, ProcessState::Alive, "reading {reading}");
    }
    // The premise held throughout: the leader is still `Z` and the relay still runs.
    assert_eq!(proc_state(pid), Some('Z'));
    assert!(relay.is_running());
}

#[test]
fn a_live_thread_whose_name_is_not_utf8_still_keeps_its_process_alive() {
    let mut leader = TestProcess::zombie_leader_with_non_utf8_thread_name();
    let record = leader.record().parse();
    assert_eq!(process_state(&record), ProcessState::Alive);
    assert_eq!(proc_state(leader.pid()), Some('Z'), "the premise held");
    assert!(leader.is_running());
}

#[test]
fn signal_kill_on_a_process_whose_main_thread_exited_is_sent_and_it_dies_of_sigkill() {
    let mut leader = TestProcess::zombie_leader();
    let record = leader.record().parse();
    assert_eq!(signal_kill(&record), SignalOutcome::Sent);
    let status = leader.wait_exit(DEADLINE);
    assert_eq!(status.signal(), Some(SIGKILL), "{status:?}");
    // Reaped now: the same record reads as gone.
    assert_eq!(process_state(&record), gone_no_process(leader.pid()));
}

#[test]
fn signal_term_on_a_process_whose_main_thread_exited_is_sent_and_it_dies_of_sigterm() {
    let mut leader = TestProcess::zombie_leader();
    let record = leader.record().parse();
    assert_eq!(signal_term(&record), SignalOutcome::Sent);
    let status = leader.wait_exit(DEADLINE);
    assert_eq!(status.signal(), Some(SIGTERM), "{status:?}");
}

#[test]
fn this_process_with_a_wrong_token_is_a_reused_pid() {
    let pid = std::process::id();
    let record = record_for(pid, &wrong_start_token(pid));
    assert_eq!(process_state(&record), gone_reused(pid));
}

#[test]
fn a_live_child_with_a_wrong_token_is_a_reused_pid_and_is_never_signalled() {
    let mut child = TestProcess::sleeping();
    let pid = child.pid();
    let record = record_for(pid, &wrong_start_token(pid));
    assert_eq!(process_state(&record), gone_reused(pid));
    for outcome in [signal_term(&record), signal_kill(&record)] {
        assert_eq!(
            outcome,
            SignalOutcome::AlreadyGone {
                reason: reason_pid_reused(pid)
            }
        );
    }
    assert_survives(&mut child);
}

#[test]
fn signal_kill_on_this_process_with_a_wrong_token_is_already_gone() {
    let pid = std::process::id();
    let record = record_for(pid, &wrong_start_token(pid));
    // Layers 1-2 call this record gone (the pid was reused, by us); signalling agrees, so the
    // record may be pruned. Surviving this line is the other half of the assertion.
    let outcome = signal_kill(&record);
    assert_eq!(
        outcome,
        SignalOutcome::AlreadyGone {
            reason: reason_pid_reused(pid)
        }
    );
}

#[test]
fn signalling_this_process_with_its_real_token_is_refused() {
    let record = RecordJson::fresh().parse();
    assert_eq!(process_state(&record), ProcessState::Alive);
    for outcome in [signal_term(&record), signal_kill(&record)] {
        let SignalOutcome::Refused { reason } = &outcome else {
            panic!("the registry must never signal itself: {outcome:?}");
        };
        assert!(!reason.is_empty());
    }
}

#[test]
fn an_empty_recorded_token_never_matches_and_is_never_signalled() {
    let mut child = TestProcess::sleeping();
    let record = record_for(child.pid(), "");
    let state = process_state(&record);
    let ProcessState::Unverified { reason } = &state else {
        panic!("an empty token on a live pid must be unverified, got {state:?}");
    };
    assert!(reason.contains(&child.pid().to_string()), "{reason}");
    assert_eq!(wire_word(ProcessStatus::from(&state)), "unverified");

    for outcome in [signal_term(&record), signal_kill(&record)] {
        assert!(
            matches!(outcome, SignalOutcome::Refused { .. }),
            "{outcome:?}"
        );
    }
    assert_survives(&mut child);

    // This process too: its own pid with no token is not confirmed either.
    let own = record_for(std::process::id(), "");
    assert!(matches!(
        process_state(&own),
        ProcessState::Unverified { .. }
    ));
}

/// Recorded start tokens no Linux writer produces: not decimal, so a difference proves nothing.
const NON_DECIMAL_TOKENS: [&str; 6] = ["boot-1234", "0x1f", "1f", " 123", "+123", "12.5"];

#[test]
fn a_non_decimal_recorded_token_on_a_live_pid_is_unverified_and_never_signalled() {
    let mut child = TestProcess::sleeping();
    let pid = child.pid();
    for token in NON_DECIMAL_TOKENS {
        let record = record_for(pid, token);
        let state = process_state(&record);
        let ProcessState::Unverified { reason } = &state else {
            panic!("token {token:?} on a live pid must be unverified, got {state:?}");
        };
        assert!(reason.contains(&pid.to_string()), "{token:?}: {reason}");
        for outcome in [signal_term(&record), signal_kill(&record)] {
            assert!(
                matches!(outcome, SignalOutcome::Refused { .. }),
                "{token:?}: {outcome:?}"
            );
        }
        assert_survives(&mut child);
    }
    // On a pid nobody holds, the token does not matter: the process is gone.
    let exited = ExitedChild::spawn();
    for token in NON_DECIMAL_TOKENS {
        assert_eq!(
            process_state(&record_for(exited.pid, token)),
            gone_no_process(exited.pid),
            "{token:?}"
        );
    }
}

#[test]
fn the_reason_for_a_non_decimal_token_reads_as_one_sentence() {
    let child = TestProcess::sleeping();
    let state = process_state(&record_for(child.pid(), "boot-1234"));
    let ProcessState::Unverified { reason } = &state else {
        panic!("expected unverified, got {state:?}");
    };
    assert!(!reason.contains("  "), "a run of spaces in {reason:?}");
    assert!(reason.contains("\"boot-1234\""), "{reason}");
}

#[test]
fn pids_no_process_can_hold_are_gone() {
    for pid in [
        0,
        i32::MAX as u32 + 1,
        2_147_483_649,
        u32::MAX - 1,
        u32::MAX,
    ] {
        let record = record_for(pid, &own_start_token());
        assert_eq!(process_state(&record), gone_no_process(pid), "pid {pid}");
    }
}

#[test]
fn a_pid_beyond_pid_t_is_refused_before_any_signal() {
    // As pid_t this is -2147483647: a process group that does not exist. It must never reach
    // kill(2); it is answered as a pid no process holds.
    let pid = 2_147_483_649;
    let record = record_for(pid, &own_start_token());
    assert_eq!(
        signal_term(&record),
        SignalOutcome::AlreadyGone {
            reason: reason_no_process(pid)
        }
    );
}

#[test]
fn signal_term_on_a_confirmed_child_is_sent_and_it_dies_of_sigterm() {
    let mut child = TestProcess::sleeping();
    let record = child.record().parse();
    let outcome = signal_term(&record);
    assert_eq!(outcome, SignalOutcome::Sent);
    let status = child.wait_exit(DEADLINE);
    assert_eq!(status.signal(), Some(SIGTERM), "{status:?}");
}

#[test]
fn signal_kill_on_a_confirmed_child_is_sent_and_it_dies_of_sigkill() {
    let mut child = TestProcess::sleeping();
    let record = child.record().parse();
    assert_eq!(signal_kill(&record), SignalOutcome::Sent);
    let status = child.wait_exit(DEADLINE);
    assert_eq!(status.signal(), Some(SIGKILL), "{status:?}");
}

/// A live child with two threads, and the id of the one that is not its leader.
fn child_and_thread_id() -> (TestProcess, u32) {
    let child = TestProcess::python(
        "import threading,time; threading.Thread(target=time.sleep,args=(1000,)).start(); \
         time.sleep(1000)",
    );
    let pid = child.pid();
    let mut thread = None;
    wait_until(&format!("pid {pid} has a second thread"), DEADLINE, || {
        thread = std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|task| task.file_name().to_str()?.parse::<u32>().ok())
            .find(|tid| *tid != pid);
        thread.is_some()
    });
    (child, thread.expect("set when the wait ends"))
}

/// A record naming a thread (not a process) cannot be pinned, so it is never signalled: with
/// the thread's own start time it is refused; with another it is a reused pid, already gone.
#[test]
fn a_record_naming_a_thread_is_never_signalled() {
    let (mut child, tid) = child_and_thread_id();
    let token = process_start_token(tid).expect("a live thread's start token");
    let own = record_for(tid, &token);
    for outcome in [signal_term(&own), signal_kill(&own)] {
        let SignalOutcome::Refused { reason } = &outcome else {
            panic!("a thread id must not be signalled: {outcome:?}");
        };
        assert!(reason.contains(&tid.to_string()), "{reason}");
    }
    let reused = record_for(tid, &wrong_start_token(tid));
    for outcome in [signal_term(&reused), signal_kill(&reused)] {
        assert_eq!(
            outcome,
            SignalOutcome::AlreadyGone {
                reason: reason_pid_reused(tid)
            }
        );
    }
    assert_survives(&mut child);
}

/// Set in the copy of this test binary that
/// `a_process_that_cannot_be_pinned_is_refused_with_the_kernels_reason` starts under a low
/// limit of open files.
const UNDER_FD_LIMIT: &str = "MURMUR_REGISTRY_TEST_UNDER_FD_LIMIT";

/// When no descriptor is left for the pidfd, nothing is signalled, and the refusal says why in
/// the kernel's words. Run as a copy of this test binary under `ulimit -n`, so the limit binds
/// no other test.
#[test]
fn a_process_that_cannot_be_pinned_is_refused_with_the_kernels_reason() {
    let name = "a_process_that_cannot_be_pinned_is_refused_with_the_kernels_reason";
    if std::env::var_os(UNDER_FD_LIMIT).is_some() {
        let record = RecordJson::fresh().parse();
        let mut held = Vec::new();
        while let Ok(file) = std::fs::File::open("/dev/null") {
            held.push(file);
        }
        let outcome = signal_term(&record);
        drop(held);
        println!("outcome: {outcome:?}");
        return;
    }
    let output = std::process::Command::new("sh")
        .args([
            "-c",
            "ulimit -n 64 && exec \"$0\" --exact \"$1\" --nocapture",
        ])
        .arg(std::env::current_exe().unwrap())
        .arg(name)
        .env(UNDER_FD_LIMIT, "1")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    let outcome = stdout
        .lines()
        .find_map(|l| l.strip_prefix("outcome: "))
        .unwrap_or_else(|| panic!("no outcome printed: {stdout}"));
    assert!(
        outcome.starts_with("Refused { reason: \"pid ")
            && outcome.ends_with(" could not be pinned: Too many open files (os error 24)\" }"),
        "{outcome}"
    );
}

#[test]
fn signalling_a_reaped_child_is_already_gone() {
    let exited = ExitedChild::spawn();
    let record = exited.record().parse();
    let expected = SignalOutcome::AlreadyGone {
        reason: reason_no_process(exited.pid),
    };
    assert_eq!(signal_term(&record), expected);
    assert_eq!(signal_kill(&record), expected);
}

#[test]
fn signalling_a_zombie_is_already_gone() {
    let zombie = Zombie::spawn();
    let record = zombie.record().parse();
    let expected = SignalOutcome::AlreadyGone {
        reason: reason_no_process(zombie.pid()),
    };
    assert_eq!(signal_term(&record), expected);
    assert_eq!(signal_kill(&record), expected);
}
