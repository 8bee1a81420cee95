//! The picture's counts by state, checked against a recount after every kind of change.

use std::sync::Arc;

use super::*;
use crate::running::{Liveness, ProcessState};
use crate::test_records::record;

fn reading(session_id: &str, liveness: Option<Liveness>) -> Reading {
    Reading {
        record: record(session_id),
        process: ProcessState::Alive,
        liveness,
        skills: Arc::default(),
    }
}

fn id(n: usize) -> String {
    format!("ses_0190a5c0f4d17c3e8b2a4d6f8e0c{n:04x}")
}

/// Each state a reading can be in, no verdict included.
fn state(n: usize) -> Option<Liveness> {
    match n % 4 {
        0 => Some(Liveness::Live),
        1 => Some(Liveness::Unreachable {
            reason: "no answer".to_owned(),
        }),
        2 => Some(Liveness::Gone {
            reason: "exited".to_owned(),
        }),
        _ => None,
    }
}

fn assert_counts_recount(picture: &Picture, after: &str) {
    assert_eq!(
        picture.counts(),
        StateCounts::of(picture.sessions.values()),
        "after {after}"
    );
}

#[test]
fn counts_by_state_equal_a_recount_after_every_change() {
    let mut picture = Picture::default();
    assert_eq!(picture.counts(), StateCounts::default());
    for n in 0..40 {
        picture.insert(reading(&id(n), state(n)));
        assert_counts_recount(&picture, "an insert");
    }
    // Every session replaced by a reading in another state, then by one in the same state.
    for n in 0..40 {
        picture.insert(reading(&id(n), state(n + 1)));
        assert_counts_recount(&picture, "a replacement into another state");
        picture.insert(reading(&id(n), state(n + 1)));
        assert_counts_recount(&picture, "a replacement in the same state");
    }
    for n in (0..40).step_by(3) {
        picture.remove(&id(n));
        assert_counts_recount(&picture, "a removal");
        picture.remove(&id(n));
        assert_counts_recount(&picture, "removing a session no longer there");
    }
    let counts = picture.counts();
    assert!(
        counts.live > 0 && counts.unreachable > 0 && counts.gone > 0,
        "{counts:?}"
    );
    picture.clear();
    assert_eq!(picture.counts(), StateCounts::default());
    picture.insert(reading(&id(1), state(0)));
    assert_counts_recount(&picture, "an insert after a clear");
    assert_eq!(picture.counts().live, 1);
}
