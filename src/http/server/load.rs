//! What the accept loop refused for load, and the event streams it holds open: counted here,
//! where they happen, since the loop answers its 503s before any router middleware runs.
//!
//! Invariant: every 503 the loop gives for load is counted under exactly one [`ShedCause`],
//! and the open-stream figure moves with the stream places themselves.

use std::sync::atomic::{AtomicU64, Ordering};

/// Which limit a 503 was given for, named after the limit ([`super::ServeLimits`]' fields and
/// `serve`'s flags): the one vocabulary of the `cause` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// Each variant is the limit's own name (`--max-connections`, …), as the label says it.
#[allow(clippy::enum_variant_names)]
pub enum ShedCause {
    /// Every held connection was inside a request: the newcomer was answered unread.
    MaxConnections,
    /// Too many requests in flight.
    MaxInFlight,
    /// Too many event streams open.
    MaxEventStreams,
}

impl ShedCause {
    /// Every cause, in a fixed order.
    pub const ALL: [Self; 3] = [
        Self::MaxConnections,
        Self::MaxInFlight,
        Self::MaxEventStreams,
    ];

    /// The cause as its label value: the limit's name.
    pub fn word(self) -> &'static str {
        match self {
            Self::MaxConnections => "max_connections",
            Self::MaxInFlight => "max_in_flight",
            Self::MaxEventStreams => "max_event_streams",
        }
    }
}

/// The accept loop's load figures. Shared by the loop and `/metrics`.
#[derive(Debug, Default)]
pub struct LoadFigures {
    shed: [AtomicU64; ShedCause::ALL.len()],
    open_streams: AtomicU64,
}

impl LoadFigures {
    /// Count one 503 given for `cause`.
    pub(super) fn shed(&self, cause: ShedCause) {
        self.shed[cause as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// 503s given for `cause` so far.
    pub fn sheds(&self, cause: ShedCause) -> u64 {
        self.shed[cause as usize].load(Ordering::Relaxed)
    }

    pub(super) fn stream_opened(&self) {
        self.open_streams.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn stream_closed(&self) {
        self.open_streams.fetch_sub(1, Ordering::Relaxed);
    }

    /// Event streams (`/events`, `/fleet/events`) open now.
    pub fn open_streams(&self) -> u64 {
        self.open_streams.load(Ordering::Relaxed)
    }
}
