//! What a listener of the live view receives: single changes, and snapshots of the picture.
//!
//! Invariant: each event and each snapshot is encoded for the wire at most once, however many
//! listeners send it; the ring holds a mid-stream snapshot only by a weak link.

use std::sync::{Arc, OnceLock, Weak};

use crate::registry::{Reading, RemovalCause};
use crate::running::Liveness;

/// One change in the picture.
#[derive(Debug)]
pub struct Event {
    /// Increases by one per event, for the life of the process.
    pub id: u64,
    /// What changed.
    pub kind: EventKind,
    encoded: OnceLock<String>,
}

impl Event {
    pub(super) fn new(id: u64, kind: EventKind) -> Self {
        Self {
            id,
            kind,
            encoded: OnceLock::new(),
        }
    }

    /// The event's wire form, made by `encode` on first use and shared by every listener after,
    /// so a hundred listeners cost one encoding.
    pub fn encoded(&self, encode: impl FnOnce(&EventKind) -> String) -> &str {
        self.encoded.get_or_init(|| encode(&self.kind))
    }
}

/// What an [`Event`] says.
#[derive(Debug, Clone)]
pub enum EventKind {
    /// A session entered the picture, with its first complete verdict.
    Added(Reading),
    /// A session's verdict moved (its state, or what layers 1–2 say), or its record was
    /// rewritten.
    Changed {
        /// The verdict before.
        old: Liveness,
        /// The session as it is now.
        now: Reading,
    },
    /// A session left the picture.
    Removed {
        /// The session.
        session_id: String,
        /// Why.
        cause: RemovalCause,
        /// The evidence, when there is some (e.g. "no process holds pid 4242").
        detail: Option<String>,
    },
}

impl EventKind {
    /// The session the event is about.
    pub fn session_id(&self) -> &str {
        match self {
            Self::Added(reading) | Self::Changed { now: reading, .. } => &reading.record.session_id,
            Self::Removed { session_id, .. } => session_id,
        }
    }
}

/// What the event ring carries: a change, or a snapshot in place of many.
#[derive(Debug, Clone)]
pub enum Published {
    /// One change.
    Event(Arc<Event>),
    /// Too many changes in one step of the loop (see [`super::SNAPSHOT_OVER`]): the whole
    /// picture after them, to replace everything the listener knows.
    Snapshot(SnapshotLink),
}

/// A mid-stream snapshot as the ring carries it: its id and a weak link to its picture.
///
/// Weak because the ring keeps every value until every receiver has read it, and a stalled
/// listener never reads nor lags: strong links would let it pin one picture per snapshot. The
/// feed holds the latest snapshot strongly, so a dead link always has a later snapshot behind
/// it in the same ring (which includes everything the dead one did), or the ring is closing.
#[derive(Debug, Clone)]
pub struct SnapshotLink {
    /// The snapshot's id: that of the last event it includes.
    pub id: u64,
    picture: Weak<Snapshot>,
}

impl SnapshotLink {
    pub(super) fn to(snapshot: &Arc<Snapshot>) -> Self {
        Self {
            id: snapshot.id,
            picture: Arc::downgrade(snapshot),
        }
    }

    /// The picture, while it is the latest snapshot this loop published.
    pub fn upgrade(&self) -> Option<Snapshot> {
        self.picture.upgrade().map(|snapshot| (*snapshot).clone())
    }
}

/// What [`super::Subscription::recv`] hands over.
#[derive(Debug)]
pub enum Next {
    /// One change.
    Event(Arc<Event>),
    /// Many changes at once: the whole picture after them. Replace everything with it.
    Snapshot(Snapshot),
}

/// The whole picture at one moment, for a listener that just arrived.
///
/// The default is an empty picture (id 0), for a listener that has sent its snapshot and need
/// not keep it.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The id of the last event the snapshot includes (0 before any event).
    pub id: u64,
    /// Every verified session, newest first.
    pub readings: Arc<[Reading]>,
    /// How many entries of the directory are not valid records (an entry that merely failed
    /// to read while its session is in the picture is not counted: its session stands for it).
    pub unreadable: usize,
    encoded: Arc<OnceLock<String>>,
}

impl Snapshot {
    pub(super) fn new(id: u64, readings: Arc<[Reading]>, unreadable: usize) -> Self {
        Self {
            id,
            readings,
            unreadable,
            encoded: Arc::default(),
        }
    }

    /// The snapshot's wire form, made once per picture however many listeners receive it.
    pub fn encoded(&self, encode: impl FnOnce(&Snapshot) -> String) -> &str {
        self.encoded.get_or_init(|| encode(self))
    }
}
