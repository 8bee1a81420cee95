//! The data of each event a stream sends (`session.added`, `session.changed`,
//! `session.removed`, `resources`; a `snapshot` is a [`super::SessionList`]), and the names
//! the streams give them ([`EventName`]).
//!
//! Invariant: a session in an event is the [`SessionView`] `GET /sessions` shows, so no secret
//! has a place in it.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{ResourcesView, SessionState, SessionView};
use crate::registry::RemovalCause;

/// Data of a `session.added` event.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SessionAdded {
    /// The session.
    pub session_id: String,
    /// The session with its first complete verdict.
    pub session: SessionView,
}

/// Data of a `session.changed` event.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SessionChanged {
    /// The session.
    pub session_id: String,
    /// The state before.
    pub old_state: SessionState,
    /// The state now.
    pub new_state: SessionState,
    /// Why it is not live now, when it is not.
    pub reason: Option<String>,
    /// The session as it is now.
    pub session: SessionView,
}

/// Data of a `session.removed` event.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SessionRemoved {
    /// The session.
    pub session_id: String,
    /// Why it left.
    pub reason: RemovalCause,
    /// The evidence, when there is some (e.g. `no process holds pid 41234`).
    pub detail: Option<String>,
}

/// Data of a `resources` event.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"sessions": [{"session_id": "ses_0193a4c2e1f07a3b9c5d2e4f6a8b0c1d",
    "resources": {"cpu_percent": 12.5, "cpu_time_ms": 48210, "rss_bytes": 73_400_320,
    "threads": 9}}]}))]
pub struct ResourcesEvent {
    /// Every session in the picture whose process layers 1–2 confirm (live, or unreachable
    /// with its process alive), newest first.
    pub sessions: Vec<SessionResources>,
}

/// One session's figures in a `resources` event.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SessionResources {
    /// The session.
    pub session_id: String,
    /// What its process costs; `null` when layers 1–2 no longer confirmed it after the
    /// sample, or it could not be read.
    pub resources: Option<ResourcesView>,
}

/// The `event:` field of an event on a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventName {
    /// The whole picture: replace everything.
    Snapshot,
    /// A new session.
    SessionAdded,
    /// A session's state or record changed.
    SessionChanged,
    /// A session left.
    SessionRemoved,
    /// What every confirmed session's process costs (`/events?include=resources` only).
    Resources,
    /// A host joined the fleet (`/fleet/events` only).
    HostJoined,
    /// A host left the fleet (`/fleet/events` only).
    HostLeft,
    /// A host's entry was rewritten (`/fleet/events` only).
    HostChanged,
}

impl EventName {
    /// Every name, as [`Self::parse`] reads them.
    pub const ALL: [Self; 8] = [
        Self::Snapshot,
        Self::SessionAdded,
        Self::SessionChanged,
        Self::SessionRemoved,
        Self::Resources,
        Self::HostJoined,
        Self::HostLeft,
        Self::HostChanged,
    ];

    /// The name `text` spells, if it is one.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|name| name.as_str() == text)
    }

    /// The name as sent.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Snapshot => "snapshot",
            Self::SessionAdded => "session.added",
            Self::SessionChanged => "session.changed",
            Self::SessionRemoved => "session.removed",
            Self::Resources => "resources",
            Self::HostJoined => "host.joined",
            Self::HostLeft => "host.left",
            Self::HostChanged => "host.changed",
        }
    }
}
