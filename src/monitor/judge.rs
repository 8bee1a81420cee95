//! The loop's decisions, apart from its I/O: from what a pass (or a batch of probes) read and the
//! picture as it is, the picture's changes as events, and the follow-up work (doors to probe
//! now, doors to keep rechecking, gone records to prune).
//!
//! Invariants:
//! - A session enters the picture only with a complete verdict; a record waiting for its first
//!   probe is not in it yet.
//! - Removal on evidence only. A directory that cannot be read never reaches the judge. A record
//!   file that merely failed to read ([`crate::running::Unreadable::is_read_failure`]) carries
//!   its session over: the last reading stands, but for what layers 1–2 say afresh of the record
//!   last read. Only a file that stays unreadable (any other reason, a file over the size cap
//!   included) removes its session as `unreadable`; the file itself is never removed here.
//! - A probe's verdict is applied only if the record it probed is still the one on disk and its
//!   process was not found gone meanwhile.

use std::collections::HashSet;
use std::sync::Arc;

use super::event::EventKind;
use super::picture::Picture;
use super::session_records::SessionRecords;
use crate::registry::{Reading, RemovalCause};
use crate::running::{Liveness, ProcessState, RECORD_SUFFIX, RunningRecord, UnreadableEntry};

/// Which pass the loop makes.
#[derive(Debug, Clone, Copy)]
pub(super) enum Pass {
    /// The loop's first picture: every door probed, the result kept as the baseline that
    /// listeners get as their snapshot (only prunes are events).
    First,
    /// A later pass: layers 1–2 of every record; a door is probed only when its record is new,
    /// rewritten, or its process newly confirmed (the recheck schedule asks the others again).
    Later,
}

/// What one pass read.
#[derive(Debug, Default)]
pub(super) struct PassRead {
    /// Every record of the scan: layers 1–2, and the door too on the first pass.
    pub(super) readings: Vec<Reading>,
    /// Every entry of the scan that is not a record.
    pub(super) unreadable: Vec<UnreadableEntry>,
    /// Layers 1–2 of the record last read for each file that failed to read but is still the
    /// file read: a file replaced since may name another process, whose death proves nothing.
    pub(super) carried: Vec<Reading>,
}

/// What a pass changes and leaves to do.
#[derive(Debug, Default)]
pub(super) struct PassJudgement {
    /// The picture's changes, in order; published before the departures.
    pub(super) events: Vec<EventKind>,
    /// Sessions that left the picture; each is named once the registry's note is taken.
    pub(super) left: Vec<Departure>,
    /// The record on disk for every session the scan saw, probed or not.
    pub(super) on_disk: SessionRecords,
    /// Records whose door must be asked now.
    pub(super) to_probe: Vec<Arc<RunningRecord>>,
    /// The record of every session whose record names a door and whose process passed layers
    /// 1–2, each session once: the doors the recheck schedule keeps asking.
    pub(super) doors: Vec<Arc<RunningRecord>>,
    /// Sessions found gone, to prune.
    pub(super) gone: Vec<String>,
    /// Sessions whose file failed to read, carried over on the record last read: found gone
    /// later, they are reported but never pruned (see [`judge_answers`]).
    pub(super) carried: HashSet<String>,
}

/// A session whose record left the directory, or stopped being a record.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Departure {
    pub(super) session_id: String,
    /// Its file is still there, and proves it is no record.
    pub(super) file_unreadable: bool,
}

impl Departure {
    /// The event of this departure, given the registry's note of its own removal, if any: the
    /// registry's cause and evidence win over what the scan saw.
    pub(super) fn removed(self, note: Option<(RemovalCause, String)>) -> EventKind {
        let (cause, detail) = match note {
            Some((cause, evidence)) => (cause, Some(evidence)),
            None if self.file_unreadable => (RemovalCause::Unreadable, None),
            None => (RemovalCause::RecordRemoved, None),
        };
        EventKind::Removed {
            session_id: self.session_id,
            cause,
            detail,
        }
    }
}

/// A probe's answer: the record that was probed and what the three layers said of it. Also what
/// layers 1–2 say of a record read again because the kernel reported its process's exit (judged
/// alike: a verdict on a record read earlier).
#[derive(Debug)]
pub(super) struct ProbeAnswer {
    pub(super) probed: Arc<RunningRecord>,
    pub(super) reading: Reading,
}

/// Judge a pass: bring `picture` in line with what was read, given the record on disk for each
/// session after the last pass and the record each in-flight probe is probing.
///
/// No I/O: it changes `picture` in memory and returns everything else for the loop to do.
pub(super) fn judge_pass(
    pass: Pass,
    read: PassRead,
    picture: &mut Picture,
    last_on_disk: &SessionRecords,
    probing: &SessionRecords,
) -> PassJudgement {
    let first = matches!(pass, Pass::First);
    let mut judgement = PassJudgement {
        on_disk: SessionRecords::with_capacity(read.readings.len()),
        doors: Vec::with_capacity(read.readings.len()),
        ..PassJudgement::default()
    };
    if first {
        // A fresh baseline: nothing from an earlier loop carries over.
        picture.clear();
    }
    let (carried, unreadable) = sort_unreadable(picture, read.unreadable);
    carry_over(
        read.carried,
        &carried,
        last_on_disk,
        picture,
        &mut judgement,
    );
    picture.set_unreadable(unreadable.len());
    // Sessions of the picture this pass accounts for (carried over, or read), each once. All of
    // the picture: nobody left.
    let mut accounted = carried.len();
    for reading in read.readings {
        let judged = judge_reading(first, reading, picture, probing, &carried, &mut judgement);
        accounted += usize::from(judged == Accounted::Newly);
    }
    if accounted != picture.len() {
        remove_departed(picture, &carried, &unreadable, &mut judgement);
    }
    judgement.carried = carried;
    judgement
}

/// Carry over the sessions whose file failed to read: the record last read stays theirs on
/// disk, and what layers 1–2 say afresh of it goes in the picture.
fn carry_over(
    readings: Vec<Reading>,
    carried: &HashSet<String>,
    last_on_disk: &SessionRecords,
    picture: &mut Picture,
    judgement: &mut PassJudgement,
) {
    for id in carried {
        // A probe of the record last read may still apply.
        if let Some(record) = last_on_disk.get(id) {
            let _ = judgement.on_disk.insert(Arc::clone(record));
        }
    }
    for mut reading in readings {
        if !carried.contains(&reading.record.session_id) {
            continue;
        }
        settle_unverified(&mut reading);
        // Gone is reported, never pruned on: pruning re-reads the file, and one that cannot be
        // read is never unlinked. Alive with a door to ask: the last verdict stands.
        if reading.liveness.is_some() {
            put(picture, reading, &mut judgement.events);
        }
    }
}

/// Whether a record read accounts for a session of the picture that no other has.
#[derive(Debug, PartialEq, Eq)]
enum Accounted {
    /// The first of its session this pass, not carried over, and in the picture now.
    Newly,
    /// Carried over, named twice, or not in the picture (its door not asked yet).
    Not,
}

/// Judge one record the pass read: its verdict into the picture, or its door to ask.
fn judge_reading(
    first: bool,
    mut reading: Reading,
    picture: &mut Picture,
    probing: &SessionRecords,
    carried: &HashSet<String>,
    judgement: &mut PassJudgement,
) -> Accounted {
    let record = Arc::clone(&reading.record);
    let id = record.session_id.as_str();
    // A session is counted once: not when carried over (then its record is the last read's),
    // nor again when a directory listing named its file twice (a rename racing the read).
    let first_of_session = judgement.on_disk.insert(Arc::clone(&record));
    let uncarried = first_of_session && !carried.contains(id);
    if first_of_session && has_door_to_recheck(&reading) {
        judgement.doors.push(Arc::clone(&record));
    }
    settle_unverified(&mut reading);
    let accounted = match &reading.liveness {
        Some(liveness) => {
            if matches!(liveness, Liveness::Gone { .. }) {
                judgement.gone.push(id.to_owned());
            }
            if first {
                picture.insert(reading);
            } else {
                put(picture, reading, &mut judgement.events);
            }
            uncarried
        }
        None => {
            let pictured = picture.get(id);
            // Its door already answered for this very record and process: the recheck
            // schedule asks it again in its turn.
            let known = pictured.is_some_and(|known| {
                known.record == record && known.process == ProcessState::Alive
            });
            let in_flight = probing.get(id) == Some(&record);
            let accounted = uncarried && pictured.is_some();
            if !in_flight && !known {
                judgement.to_probe.push(record);
            }
            accounted
        }
    };
    if accounted {
        Accounted::Newly
    } else {
        Accounted::Not
    }
}

/// Take out of the picture every session this pass neither read nor carried over, each a
/// departure (its file still there and unreadable, or gone).
fn remove_departed(
    picture: &mut Picture,
    carried: &HashSet<String>,
    unreadable: &[UnreadableEntry],
    judgement: &mut PassJudgement,
) {
    let left: Vec<String> = picture
        .session_ids()
        .filter(|id| !judgement.on_disk.contains(id) && !carried.contains(*id))
        .cloned()
        .collect();
    for session_id in left {
        picture.remove(&session_id);
        let file_unreadable = unreadable
            .iter()
            .any(|entry| is_file_of(&entry.file_name, &session_id));
        judgement.left.push(Departure {
            session_id,
            file_unreadable,
        });
    }
}

/// Judge a batch of probe answers against `picture`, given the record on disk for each
/// session and the sessions whose file failed to read at the last pass: the events, and the
/// sessions found gone (to prune; never a carried one, whose file nobody can read).
pub(super) fn judge_answers(
    answers: Vec<ProbeAnswer>,
    picture: &mut Picture,
    on_disk: &SessionRecords,
    carried: &HashSet<String>,
) -> (Vec<EventKind>, Vec<String>) {
    let mut events = Vec::new();
    let mut gone = Vec::new();
    for ProbeAnswer { probed, reading } in answers {
        // Stale (the record was rewritten or removed since), or no verdict at all.
        if on_disk.get(&probed.session_id) != Some(&probed) || reading.liveness.is_none() {
            continue;
        }
        // Layers 1–2 found it gone while its door was asked: that evidence stands.
        let known_gone = picture.get(&probed.session_id).is_some_and(|known| {
            known.record == probed && matches!(known.liveness, Some(Liveness::Gone { .. }))
        });
        if known_gone {
            continue;
        }
        let found_gone = matches!(reading.liveness, Some(Liveness::Gone { .. }));
        if found_gone && !carried.contains(&probed.session_id) {
            gone.push(probed.session_id.clone());
        }
        put(picture, reading, &mut events);
    }
    (events, gone)
}

/// The event of a record the loop pruned. A note the registry left names a stop in progress
/// whose process this prune found gone before the stop did.
pub(super) fn pruned(
    session_id: String,
    evidence: String,
    noted: Option<RemovalCause>,
) -> EventKind {
    EventKind::Removed {
        session_id,
        cause: noted.unwrap_or(RemovalCause::Pruned),
        detail: Some(evidence),
    }
}

/// Put `reading` in the picture: `added` when new, `changed` when its state or process moved or
/// its record was rewritten, silently when only a reason was reworded, and not at all when
/// nothing differs (so the cached snapshot survives a pass that found everything as it was).
fn put(picture: &mut Picture, reading: Reading, events: &mut Vec<EventKind>) {
    let Some(liveness) = &reading.liveness else {
        return;
    };
    let Some(known) = picture.get(&reading.record.session_id) else {
        picture.insert(reading.clone());
        events.push(EventKind::Added(reading));
        return;
    };
    if known.record == reading.record
        && known.liveness == reading.liveness
        && known.process == reading.process
    {
        return;
    }
    let old = known.liveness.clone().unwrap_or(Liveness::Unreachable {
        reason: "not verified".to_owned(),
    });
    let moved = std::mem::discriminant(&old) != std::mem::discriminant(liveness)
        || std::mem::discriminant(&known.process) != std::mem::discriminant(&reading.process);
    let rewritten = known.record != reading.record;
    picture.insert(reading.clone());
    if moved || rewritten {
        events.push(EventKind::Changed { old, now: reading });
    }
}

/// Whether `reading`'s door is one the live view keeps asking: its record names one, and its
/// process passed layers 1–2 (the verdict may be live or unreachable).
fn has_door_to_recheck(reading: &Reading) -> bool {
    reading.record.url.is_some() && reading.process == ProcessState::Alive
}

/// A reading whose writer layers 1–2 could not confirm is unreachable: no door can make it
/// live, so it is not left waiting for a probe.
fn settle_unverified(reading: &mut Reading) {
    if let (None, ProcessState::Unverified { reason }) = (&reading.liveness, &reading.process) {
        reading.liveness = Some(Liveness::Unreachable {
            reason: reason.clone(),
        });
    }
}

/// Split a scan's unreadable entries into the sessions carried over and the entries counted.
///
/// A read failure of a session in the picture carries it over, uncounted: its session stands
/// for it. Every other entry counts (and removes its session, if it had one in the picture).
fn sort_unreadable(
    picture: &Picture,
    unreadable: Vec<UnreadableEntry>,
) -> (HashSet<String>, Vec<UnreadableEntry>) {
    let mut carried = HashSet::new();
    let mut counted = Vec::with_capacity(unreadable.len());
    for entry in unreadable {
        let session = entry
            .file_name
            .strip_suffix(RECORD_SUFFIX)
            .filter(|id| entry.why.is_read_failure() && picture.contains(id));
        match session {
            Some(id) => {
                carried.insert(id.to_owned());
            }
            None => counted.push(entry),
        }
    }
    (carried, counted)
}

/// Whether `file_name` is the record file of `session_id`.
fn is_file_of(file_name: &str, session_id: &str) -> bool {
    file_name
        .strip_suffix(RECORD_SUFFIX)
        .is_some_and(|stem| stem == session_id)
}

#[cfg(test)]
mod tests;
