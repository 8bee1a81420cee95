//! The judge's decisions, on readings made up in memory: no server, no directory, no process.

use std::sync::Arc;

use super::*;
use crate::running::Unreadable;
use crate::test_records::{record, record_in};

const CARRIED: &str = "ses_0190a5c0f4d17c3e8b2a4d6f8e0c1b3a";
const ABSENT: &str = "ses_0190a5c0f4d17c3e8b2a4d6f8e0c1b3b";
const OTHER: &str = "ses_0190a5c0f4d17c3e8b2a4d6f8e0c1b3c";

/// The departure of `session_id`, whose file is not among the unreadable entries.
fn left_readably(session_id: &str) -> Departure {
    Departure {
        session_id: session_id.to_owned(),
        file_unreadable: false,
    }
}

/// A live session, its record with a door.
fn live(session_id: &str) -> Reading {
    Reading {
        record: record(session_id),
        process: ProcessState::Alive,
        liveness: Some(Liveness::Live),
        skills: Default::default(),
    }
}

fn gone(session_id: &str) -> Reading {
    let reason = "no process holds pid 1".to_owned();
    Reading {
        record: record(session_id),
        process: ProcessState::Gone {
            reason: reason.clone(),
        },
        liveness: Some(Liveness::Gone { reason }),
        skills: Default::default(),
    }
}

/// Layers 1–2 say alive; the door is still to be asked.
fn undecided(session_id: &str) -> Reading {
    Reading {
        liveness: None,
        ..live(session_id)
    }
}

fn unreachable(session_id: &str, reason: &str) -> Reading {
    Reading {
        liveness: Some(Liveness::Unreachable {
            reason: reason.to_owned(),
        }),
        ..live(session_id)
    }
}

/// Whether two readings say the same (a `Reading` has no `PartialEq` of its own).
fn same(a: &Reading, b: &Reading) -> bool {
    a.record == b.record && a.process == b.process && a.liveness == b.liveness
}

/// Whether `picture` holds `reading` for its session, exactly.
fn holds(picture: &Picture, reading: &Reading) -> bool {
    picture
        .get(&reading.record.session_id)
        .is_some_and(|held| same(held, reading))
}

fn picture_with(readings: &[Reading]) -> Picture {
    let mut picture = Picture::default();
    for reading in readings {
        picture.insert(reading.clone());
    }
    picture
}

fn on_disk_of(readings: &[Reading]) -> SessionRecords {
    readings.iter().map(|r| Arc::clone(&r.record)).collect()
}

/// The session ids of `records`, each once.
fn ids_of(records: &[Arc<RunningRecord>]) -> HashSet<String> {
    let ids: HashSet<String> = records.iter().map(|r| r.session_id.clone()).collect();
    assert_eq!(ids.len(), records.len(), "a session twice in {records:?}");
    ids
}

fn entry(session_id: &str, why: Unreadable) -> UnreadableEntry {
    UnreadableEntry {
        file_name: format!("{session_id}{RECORD_SUFFIX}"),
        why,
    }
}

fn later(readings: Vec<Reading>) -> (Pass, PassRead) {
    let read = PassRead {
        readings,
        ..PassRead::default()
    };
    (Pass::Later, read)
}

fn judge(pass: Pass, read: PassRead, picture: &mut Picture, known: &[Reading]) -> PassJudgement {
    judge_pass(
        pass,
        read,
        picture,
        &on_disk_of(known),
        &SessionRecords::default(),
    )
}

fn io_failure() -> Unreadable {
    Unreadable::Io("Permission denied (os error 13)".to_owned())
}

#[test]
fn a_read_failure_of_a_session_in_the_picture_carries_it_and_is_not_counted() {
    for why in [
        Unreadable::Io("Too many open files (os error 24)".to_owned()),
        Unreadable::Io("Permission denied (os error 13)".to_owned()),
        Unreadable::Replaced,
    ] {
        let picture = picture_with(&[live(CARRIED)]);
        let (carried, counted) = sort_unreadable(&picture, vec![entry(CARRIED, why)]);
        assert_eq!(carried, HashSet::from([CARRIED.to_owned()]));
        assert!(counted.is_empty(), "{counted:?}");
    }
}

#[test]
fn a_file_that_stays_unreadable_is_counted_and_carries_nothing() {
    for why in [
        Unreadable::Symlink,
        Unreadable::Directory,
        Unreadable::NotRegularFile,
        Unreadable::ForeignOwner(4242),
        Unreadable::TooLarge,
        Unreadable::Malformed("it is not valid JSON (line 1, column 3)".to_owned()),
        Unreadable::NameMismatch(ABSENT.to_owned()),
    ] {
        let unreadable = vec![entry(CARRIED, why)];
        let (carried, counted) =
            sort_unreadable(&picture_with(&[live(CARRIED)]), unreadable.clone());
        assert!(carried.is_empty(), "{carried:?}");
        assert_eq!(counted, unreadable);
    }
}

#[test]
fn a_read_failure_of_a_session_not_in_the_picture_is_counted() {
    let unreadable = vec![
        entry(
            ABSENT,
            Unreadable::Io("Input/output error (os error 5)".to_owned()),
        ),
        entry(ABSENT, Unreadable::Replaced),
    ];
    let (carried, counted) = sort_unreadable(&picture_with(&[live(CARRIED)]), unreadable.clone());
    assert!(carried.is_empty(), "{carried:?}");
    assert_eq!(counted, unreadable);
}

#[test]
fn the_first_pass_is_a_baseline_without_events_that_prunes_the_gone_and_probes_the_rest() {
    let mut picture = picture_with(&[live(OTHER)]);
    let read = PassRead {
        readings: vec![live(CARRIED), gone(ABSENT), undecided(OTHER)],
        ..PassRead::default()
    };
    let judgement = judge(Pass::First, read, &mut picture, &[live(OTHER)]);
    assert!(judgement.events.is_empty(), "{:?}", judgement.events);
    assert!(
        judgement.left.is_empty(),
        "nothing of an earlier loop is left"
    );
    assert_eq!(judgement.gone, [ABSENT]);
    assert_eq!(judgement.to_probe, [undecided(OTHER).record]);
    assert!(picture.contains(CARRIED) && picture.contains(ABSENT));
    assert!(
        !picture.contains(OTHER),
        "awaiting its probe, not in the picture yet"
    );
    assert_eq!(judgement.on_disk.records().count(), 3);
}

#[test]
fn a_new_session_with_a_verdict_is_added() {
    let mut picture = Picture::default();
    let (pass, read) = later(vec![live(CARRIED)]);
    let judgement = judge(pass, read, &mut picture, &[]);
    assert!(matches!(&judgement.events[..], [EventKind::Added(r)] if same(r, &live(CARRIED))));
    assert!(holds(&picture, &live(CARRIED)));
}

#[test]
fn a_session_found_gone_is_changed_to_gone_and_pruned() {
    let mut picture = picture_with(&[live(CARRIED)]);
    let (pass, read) = later(vec![gone(CARRIED)]);
    let judgement = judge(pass, read, &mut picture, &[live(CARRIED)]);
    let [EventKind::Changed { old, now }] = &judgement.events[..] else {
        panic!("one change: {:?}", judgement.events);
    };
    assert_eq!(*old, Liveness::Live);
    assert!(same(now, &gone(CARRIED)));
    assert_eq!(judgement.gone, [CARRIED]);
    assert!(judgement.left.is_empty(), "kept until pruned");
}

#[test]
fn a_new_record_whose_process_is_gone_is_added_as_gone_then_pruned() {
    let mut picture = Picture::default();
    let (pass, read) = later(vec![gone(CARRIED)]);
    let judgement = judge(pass, read, &mut picture, &[]);
    assert!(matches!(&judgement.events[..], [EventKind::Added(r)] if same(r, &gone(CARRIED))));
    assert_eq!(judgement.gone, [CARRIED]);
}

#[test]
fn a_pass_that_finds_everything_as_it_was_changes_nothing_and_keeps_the_snapshot() {
    let mut picture = picture_with(&[live(CARRIED)]);
    let before = picture.snapshot(7);
    let (pass, read) = later(vec![live(CARRIED)]);
    let judgement = judge(pass, read, &mut picture, &[live(CARRIED)]);
    assert!(judgement.events.is_empty() && judgement.left.is_empty());
    assert!(
        Arc::ptr_eq(&before, &picture.snapshot(7)),
        "the cached snapshot survives"
    );
}

#[test]
fn a_reworded_reason_is_stored_silently() {
    let mut picture = picture_with(&[unreachable(CARRIED, "the door timed out")]);
    let known = [unreachable(CARRIED, "the door timed out")];
    let (pass, read) = later(vec![unreachable(CARRIED, "connection refused")]);
    let judgement = judge(pass, read, &mut picture, &known);
    assert!(judgement.events.is_empty(), "{:?}", judgement.events);
    assert!(holds(&picture, &unreachable(CARRIED, "connection refused")));
}

#[test]
fn a_rewritten_record_is_changed_even_with_the_same_state() {
    let mut picture = picture_with(&[live(CARRIED)]);
    let rewritten = Reading {
        record: record_in(CARRIED, "/tmp/murmur-test/elsewhere"),
        ..live(CARRIED)
    };
    let (pass, read) = later(vec![rewritten.clone()]);
    let judgement = judge(pass, read, &mut picture, &[live(CARRIED)]);
    assert!(matches!(
        &judgement.events[..],
        [EventKind::Changed { old: Liveness::Live, now }] if same(now, &rewritten)
    ));
}

#[test]
fn an_unverified_process_is_unreachable_at_once_not_probed() {
    let mut picture = Picture::default();
    let unverified = Reading {
        process: ProcessState::Unverified {
            reason: "cannot read /proc/1/stat".to_owned(),
        },
        liveness: None,
        ..live(CARRIED)
    };
    let (pass, read) = later(vec![unverified]);
    let judgement = judge(pass, read, &mut picture, &[]);
    assert!(judgement.to_probe.is_empty());
    let [EventKind::Added(reading)] = &judgement.events[..] else {
        panic!("added: {:?}", judgement.events);
    };
    assert_eq!(
        reading.liveness,
        Some(Liveness::Unreachable {
            reason: "cannot read /proc/1/stat".to_owned()
        })
    );
}

#[test]
fn a_door_is_probed_when_new_or_rewritten_or_newly_confirmed_and_never_twice_at_once() {
    // New: probed. Known as it is: left to the recheck schedule. Rewritten: probed.
    let rewritten = Reading {
        record: record_in(CARRIED, "/tmp/murmur-rewritten"),
        ..live(CARRIED)
    };
    let unverified = Reading {
        process: ProcessState::Unverified {
            reason: "cannot read /proc/1/stat".to_owned(),
        },
        ..unreachable(CARRIED, "cannot read /proc/1/stat")
    };
    for (known, expected) in [
        (vec![], 1),
        (vec![live(CARRIED)], 0),
        (vec![unreachable(CARRIED, "the door timed out")], 0),
        (vec![rewritten], 1),
        // Layers 1–2 confirm the writer now: its door is asked at once.
        (vec![unverified], 1),
    ] {
        let mut picture = picture_with(&known);
        let (pass, read) = later(vec![undecided(CARRIED)]);
        let judgement = judge(pass, read, &mut picture, &known);
        assert_eq!(judgement.to_probe.len(), expected, "known {known:?}");
        assert_eq!(
            ids_of(&judgement.doors),
            HashSet::from([CARRIED.to_owned()]),
            "a door of a live process, probed or not"
        );
    }
    let mut picture = Picture::default();
    let (pass, read) = later(vec![undecided(CARRIED)]);
    let probing = on_disk_of(&[undecided(CARRIED)]);
    let judgement = judge_pass(
        pass,
        read,
        &mut picture,
        &SessionRecords::default(),
        &probing,
    );
    assert!(judgement.to_probe.is_empty(), "its probe is in flight");
}

#[test]
fn only_doors_of_processes_that_passed_layers_1_2_are_rechecked() {
    let doorless = Reading {
        record: Arc::new(RunningRecord {
            url: None,
            ..RunningRecord::clone(&record_in(OTHER, "/tmp/murmur-test"))
        }),
        ..live(OTHER)
    };
    let unverified = Reading {
        process: ProcessState::Unverified {
            reason: "cannot read /proc/1/stat".to_owned(),
        },
        liveness: None,
        ..live(ABSENT)
    };
    let first = PassRead {
        readings: vec![live(CARRIED), doorless.clone(), unverified.clone()],
        ..PassRead::default()
    };
    let judgement = judge(Pass::First, first, &mut Picture::default(), &[]);
    assert_eq!(
        ids_of(&judgement.doors),
        HashSet::from([CARRIED.to_owned()])
    );
    let (pass, read) = later(vec![gone(CARRIED), doorless, unverified]);
    let judgement = judge(pass, read, &mut picture_with(&[live(CARRIED)]), &[]);
    assert!(ids_of(&judgement.doors).is_empty(), "{:?}", judgement.doors);
}

#[test]
fn a_session_whose_record_disappeared_left_as_record_removed() {
    let mut picture = picture_with(&[live(CARRIED), live(OTHER)]);
    let (pass, read) = later(vec![live(OTHER)]);
    let judgement = judge(pass, read, &mut picture, &[live(CARRIED), live(OTHER)]);
    assert_eq!(judgement.left, [left_readably(CARRIED)]);
    assert!(!picture.contains(CARRIED));
    let [departure] = <[Departure; 1]>::try_from(judgement.left).expect("one departure");
    assert!(matches!(
        departure.removed(None),
        EventKind::Removed {
            cause: RemovalCause::RecordRemoved,
            detail: None,
            ..
        }
    ));
}

#[test]
fn a_departure_is_found_however_many_sessions_arrive_or_are_carried_beside_it() {
    // As many readings as the picture has sessions, but one of them new and still waiting for
    // its door: the session not read again left all the same.
    let mut picture = picture_with(&[live(CARRIED), live(OTHER)]);
    let (pass, read) = later(vec![live(OTHER), undecided(ABSENT)]);
    let judgement = judge(pass, read, &mut picture, &[live(CARRIED), live(OTHER)]);
    assert_eq!(judgement.left, [left_readably(CARRIED)]);
    // Carried over and read again: the whole picture is accounted for, nobody left.
    let mut picture = picture_with(&[live(CARRIED), live(OTHER)]);
    let read = PassRead {
        readings: vec![live(OTHER)],
        unreadable: vec![entry(CARRIED, io_failure())],
        ..PassRead::default()
    };
    let judgement = judge(
        Pass::Later,
        read,
        &mut picture,
        &[live(CARRIED), live(OTHER)],
    );
    assert!(judgement.left.is_empty(), "{:?}", judgement.left);
    assert!(picture.contains(CARRIED) && picture.contains(OTHER));
    // Carried over, the other gone from the directory: it left.
    let mut picture = picture_with(&[live(CARRIED), live(OTHER)]);
    let read = PassRead {
        unreadable: vec![entry(CARRIED, io_failure())],
        ..PassRead::default()
    };
    let judgement = judge(
        Pass::Later,
        read,
        &mut picture,
        &[live(CARRIED), live(OTHER)],
    );
    assert_eq!(judgement.left, [left_readably(OTHER)]);
}

#[test]
fn a_session_whose_file_stays_unreadable_left_as_unreadable_and_is_counted() {
    let mut picture = picture_with(&[live(CARRIED)]);
    let read = PassRead {
        unreadable: vec![entry(CARRIED, Unreadable::TooLarge)],
        ..PassRead::default()
    };
    let judgement = judge(Pass::Later, read, &mut picture, &[live(CARRIED)]);
    assert_eq!(picture.snapshot(0).unreadable, 1);
    let [departure] = <[Departure; 1]>::try_from(judgement.left).expect("one departure");
    assert!(departure.file_unreadable);
    assert!(matches!(
        departure.removed(None),
        EventKind::Removed {
            cause: RemovalCause::Unreadable,
            detail: None,
            ..
        }
    ));
}

#[test]
fn the_registry_note_names_a_departure_it_caused() {
    for cause in [RemovalCause::Pruned, RemovalCause::Stopped] {
        for file_unreadable in [false, true] {
            let departure = Departure {
                session_id: CARRIED.to_owned(),
                file_unreadable,
            };
            let evidence = "no process holds pid 1".to_owned();
            let EventKind::Removed {
                session_id,
                cause: named,
                detail,
            } = departure.removed(Some((cause, evidence.clone())))
            else {
                panic!("a removal");
            };
            assert_eq!((session_id.as_str(), named), (CARRIED, cause));
            assert_eq!(detail, Some(evidence));
        }
    }
}

#[test]
fn a_prune_is_named_by_the_registry_note_or_else_pruned() {
    for (noted, expected) in [
        (None, RemovalCause::Pruned),
        (Some(RemovalCause::Pruned), RemovalCause::Pruned),
        (Some(RemovalCause::Stopped), RemovalCause::Stopped),
    ] {
        let EventKind::Removed { cause, detail, .. } = pruned(
            CARRIED.to_owned(),
            "no process holds pid 1".to_owned(),
            noted,
        ) else {
            panic!("a removal");
        };
        assert_eq!(cause, expected);
        assert_eq!(detail.as_deref(), Some("no process holds pid 1"));
    }
}

#[test]
fn a_carried_session_keeps_its_reading_and_record_and_is_not_counted() {
    let mut picture = picture_with(&[live(CARRIED)]);
    let read = PassRead {
        unreadable: vec![entry(CARRIED, io_failure())],
        carried: vec![undecided(CARRIED)],
        ..PassRead::default()
    };
    let judgement = judge(Pass::Later, read, &mut picture, &[live(CARRIED)]);
    assert!(judgement.events.is_empty() && judgement.left.is_empty());
    assert!(judgement.to_probe.is_empty() && judgement.gone.is_empty());
    assert_eq!(judgement.carried, HashSet::from([CARRIED.to_owned()]));
    assert!(holds(&picture, &live(CARRIED)), "the last verdict stands");
    assert_eq!(judgement.on_disk.get(CARRIED), Some(&live(CARRIED).record));
    assert_eq!(picture.snapshot(0).unreadable, 0);
}

#[test]
fn a_carried_session_found_gone_is_changed_to_gone_but_not_pruned() {
    let mut picture = picture_with(&[live(CARRIED)]);
    let read = PassRead {
        unreadable: vec![entry(CARRIED, io_failure())],
        carried: vec![gone(CARRIED)],
        ..PassRead::default()
    };
    let judgement = judge(Pass::Later, read, &mut picture, &[live(CARRIED)]);
    assert!(matches!(
        &judgement.events[..],
        [EventKind::Changed { old: Liveness::Live, now }] if same(now, &gone(CARRIED))
    ));
    assert!(
        judgement.gone.is_empty(),
        "a file nobody can read is never pruned"
    );
    assert!(picture.contains(CARRIED));
}

#[test]
fn a_carried_session_whose_process_turns_unverified_is_changed_to_unreachable() {
    let mut picture = picture_with(&[live(CARRIED)]);
    let unverified = Reading {
        process: ProcessState::Unverified {
            reason: "cannot read /proc/1/stat".to_owned(),
        },
        liveness: None,
        ..live(CARRIED)
    };
    let read = PassRead {
        unreadable: vec![entry(CARRIED, io_failure())],
        carried: vec![unverified],
        ..PassRead::default()
    };
    let judgement = judge(Pass::Later, read, &mut picture, &[live(CARRIED)]);
    assert!(matches!(
        &judgement.events[..],
        [EventKind::Changed { old: Liveness::Live, now }]
            if matches!(now.liveness, Some(Liveness::Unreachable { .. }))
    ));
}

#[test]
fn a_reading_of_a_session_not_carried_is_ignored() {
    // Its file reads again (or proves it is no record): the scan's own reading decides.
    let mut picture = picture_with(&[live(CARRIED)]);
    let read = PassRead {
        readings: vec![live(CARRIED)],
        carried: vec![gone(CARRIED)],
        ..PassRead::default()
    };
    let judgement = judge(Pass::Later, read, &mut picture, &[live(CARRIED)]);
    assert!(judgement.events.is_empty() && judgement.gone.is_empty());
}

#[test]
fn a_probe_answer_is_applied_when_its_record_is_still_on_disk() {
    let mut picture = Picture::default();
    let answer = ProbeAnswer {
        probed: live(CARRIED).record,
        reading: unreachable(CARRIED, "the door timed out"),
    };
    let (events, gone_ids) = judge_answers(
        vec![answer],
        &mut picture,
        &on_disk_of(&[live(CARRIED)]),
        &HashSet::new(),
    );
    assert!(matches!(&events[..], [EventKind::Added(_)]));
    assert!(gone_ids.is_empty());
}

#[test]
fn a_stale_or_verdictless_probe_answer_is_dropped() {
    let rewritten = record_in(CARRIED, "/tmp/murmur-test/elsewhere");
    for (on_disk, reading) in [
        (SessionRecords::default(), live(CARRIED)),
        (SessionRecords::from_iter([rewritten]), live(CARRIED)),
        (on_disk_of(&[live(CARRIED)]), undecided(CARRIED)),
    ] {
        let mut picture = Picture::default();
        let answer = ProbeAnswer {
            probed: live(CARRIED).record,
            reading,
        };
        let (events, gone_ids) =
            judge_answers(vec![answer], &mut picture, &on_disk, &HashSet::new());
        assert!(events.is_empty() && gone_ids.is_empty(), "{events:?}");
        assert!(!picture.contains(CARRIED));
    }
}

#[test]
fn a_probe_answer_does_not_revive_a_session_found_gone_meanwhile() {
    let mut picture = picture_with(&[gone(CARRIED)]);
    let answer = ProbeAnswer {
        probed: live(CARRIED).record,
        reading: live(CARRIED),
    };
    let (events, gone_ids) = judge_answers(
        vec![answer],
        &mut picture,
        &on_disk_of(&[live(CARRIED)]),
        &HashSet::new(),
    );
    assert!(events.is_empty() && gone_ids.is_empty());
    assert!(holds(&picture, &gone(CARRIED)));
}

#[test]
fn a_probe_answer_of_gone_is_changed_and_pruned() {
    let mut picture = picture_with(&[unreachable(CARRIED, "the door timed out")]);
    let answer = ProbeAnswer {
        probed: live(CARRIED).record,
        reading: gone(CARRIED),
    };
    let (events, gone_ids) = judge_answers(
        vec![answer],
        &mut picture,
        &on_disk_of(&[live(CARRIED)]),
        &HashSet::new(),
    );
    assert!(matches!(&events[..], [EventKind::Changed { .. }]));
    assert_eq!(gone_ids, [CARRIED]);
}

#[test]
fn an_answer_of_gone_for_a_carried_session_is_changed_but_not_pruned() {
    // Its process exited while its file could not be read: a file nobody can read is never
    // pruned; it is once it reads again.
    let mut picture = picture_with(&[live(CARRIED)]);
    let answer = ProbeAnswer {
        probed: live(CARRIED).record,
        reading: gone(CARRIED),
    };
    let carried = HashSet::from([CARRIED.to_owned()]);
    let (events, gone_ids) = judge_answers(
        vec![answer],
        &mut picture,
        &on_disk_of(&[live(CARRIED)]),
        &carried,
    );
    assert!(matches!(
        &events[..],
        [EventKind::Changed { old: Liveness::Live, now }] if same(now, &gone(CARRIED))
    ));
    assert!(gone_ids.is_empty(), "{gone_ids:?}");
}

#[test]
fn a_move_of_either_layer_alone_is_a_change() {
    // The door stops answering; layers 1–2 still say alive.
    let mut picture = picture_with(&[live(CARRIED)]);
    let silent = unreachable(CARRIED, "the door timed out");
    let (pass, read) = later(vec![silent.clone()]);
    let judgement = judge(pass, read, &mut picture, &[live(CARRIED)]);
    assert!(matches!(
        &judgement.events[..],
        [EventKind::Changed { old: Liveness::Live, now }] if same(now, &silent)
    ));

    // Still unreachable, but layers 1–2 can no longer confirm the writer.
    let known = [silent];
    let mut picture = picture_with(&known);
    let unverified = Reading {
        process: ProcessState::Unverified {
            reason: "cannot read /proc/1/stat".to_owned(),
        },
        liveness: None,
        ..live(CARRIED)
    };
    let (pass, read) = later(vec![unverified]);
    let judgement = judge(pass, read, &mut picture, &known);
    assert!(matches!(
        &judgement.events[..],
        [EventKind::Changed { old: Liveness::Unreachable { .. }, now }]
            if matches!(now.process, ProcessState::Unverified { .. })
    ));
}

#[test]
fn another_unreadable_file_does_not_name_a_departure_unreadable() {
    let known = [live(CARRIED), live(OTHER)];
    let mut picture = picture_with(&known);
    let read = PassRead {
        readings: vec![live(OTHER)],
        unreadable: vec![entry(ABSENT, Unreadable::TooLarge)],
        ..PassRead::default()
    };
    let judgement = judge(Pass::Later, read, &mut picture, &known);
    assert_eq!(judgement.left, [left_readably(CARRIED)]);
    assert_eq!(picture.snapshot(0).unreadable, 1);
}

/// A directory listing may name one file twice (a record renamed over it while it is read): the
/// session counts once, so another's departure is still found, and its door is handed on once.
#[test]
fn a_session_listed_twice_hides_no_departure_and_is_one_door() {
    let mut picture = picture_with(&[live(CARRIED), live(OTHER)]);
    // OTHER's file is gone; CARRIED was listed twice.
    let (pass, read) = later(vec![live(CARRIED), live(CARRIED)]);
    let judgement = judge(pass, read, &mut picture, &[live(CARRIED), live(OTHER)]);
    assert_eq!(judgement.left, [left_readably(OTHER)]);
    assert!(!picture.contains(OTHER));
    let doors: Vec<&str> = (judgement.doors.iter())
        .map(|record| record.session_id.as_str())
        .collect();
    assert_eq!(doors, [CARRIED]);
}

#[test]
fn a_session_read_and_carried_at_once_is_accounted_once_and_a_departure_still_found() {
    // Not what a scan hands over (one entry per file name), but the judge counts each session
    // once whatever it is given: counted twice, it would take the picture for accounted for.
    let known = [live(CARRIED), live(OTHER)];
    let mut picture = picture_with(&known);
    let read = PassRead {
        readings: vec![live(CARRIED)],
        unreadable: vec![entry(CARRIED, io_failure())],
        ..PassRead::default()
    };
    let judgement = judge(Pass::Later, read, &mut picture, &known);
    assert_eq!(judgement.left, [left_readably(OTHER)]);
    assert!(picture.contains(CARRIED) && !picture.contains(OTHER));
}
