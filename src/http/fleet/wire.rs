//! The fleet endpoints' wire types: the bodies of `GET /fleet/sessions` and `GET /fleet/hosts`,
//! the data of each `/fleet/events` event, each documented by its own type (the filters are
//! `wire::FleetQuery`, read by the client too).
//!
//! Invariant: a fleet session is served as etcd holds it (its host built it from the public
//! session view, so it has no place for a secret); these types borrow the cached entries and
//! add only the ids that say whose and which.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::Schema;
use utoipa::{PartialSchema, ToSchema};

use super::super::event_data::encode;
use super::super::event_stream::{EventName, one_event_schema};
use crate::fleet::cache::CachedSession;
use crate::fleet::view::{FleetPage, FleetSnapshot};
use crate::fleet::{DoorScope, HostEntry};
use crate::running::Skill;
pub use crate::wire::FleetQuery;
use crate::wire::{SessionState, SessionView};

/// One session of the fleet: the session object `GET /sessions` serves on its host, plus whose
/// it is and what it offers.
#[derive(Debug, Serialize, ToSchema)]
pub struct FleetSessionView {
    /// The host whose registry verified it.
    #[schema(example = "web01")]
    pub host_id: String,
    /// When its verdict last changed, as its host saw it (RFC 3339, UTC).
    pub changed_at: String,
    /// `host`: its door listens on loopback, reachable only from its own host; `network`:
    /// other hosts may reach it; `null`: it has no door.
    pub door_scope: Option<DoorScope>,
    /// The ids and tags of the skills its verified card lists (empty unless live), in the
    /// card's order; the first ones only, when `skills_omitted` is present.
    pub skills: Vec<Skill>,
    /// How many skills of the card, its last ones, its host left out to keep the entry within
    /// the 64 KiB a fleet value may hold (at most 64 skills of 16 tags); absent when none were.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub skills_omitted: Option<usize>,
    /// The session as its host serves it.
    #[serde(flatten)]
    pub session: SessionView,
}

/// The fleet's sessions (`GET /fleet/sessions`), and a `/fleet/events` snapshot.
#[derive(Debug, Serialize, ToSchema)]
pub struct FleetSessions<'a> {
    /// The etcd revision this answer describes.
    pub revision: i64,
    /// This registry's own host id: actions (stop, signal) belong on its own sessions only.
    pub host_id: &'a str,
    /// The hosts in the fleet (those the `host` filter names, if given); on a page (`limit`),
    /// the hosts of its sessions (every host is `GET /fleet/hosts`).
    #[schema(value_type = Vec<HostEntry>)]
    pub hosts: Vec<&'a HostEntry>,
    /// With `limit`: the `cursor` of the next page, `null` on the last. Absent without `limit`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, nullable)]
    pub next_cursor: Option<Option<&'a str>>,
    /// The sessions that match the filters, newest first (`started_at`, then host and session
    /// id); on a page, by host then session id.
    #[schema(value_type = Vec<FleetSessionView>)]
    pub sessions: Vec<&'a RawValue>,
}

/// The fleet's hosts (`GET /fleet/hosts`).
#[derive(Debug, Serialize, ToSchema)]
pub struct FleetHosts<'a> {
    /// The etcd revision this answer describes.
    pub revision: i64,
    /// This registry's own host id.
    pub host_id: &'a str,
    /// Every host in the fleet, by id.
    #[schema(value_type = Vec<HostEntry>)]
    pub hosts: Vec<&'a HostEntry>,
}

/// Data of a fleet `session.added` event.
#[derive(Debug, Serialize, ToSchema)]
pub struct FleetSessionAdded<'a> {
    /// The session.
    pub session_id: &'a str,
    /// Its host.
    pub host_id: &'a str,
    /// The session as its host published it.
    #[schema(value_type = FleetSessionView)]
    pub session: &'a RawValue,
}

/// Data of a fleet `session.changed` event.
#[derive(Debug, Serialize, ToSchema)]
pub struct FleetSessionChanged<'a> {
    /// The session.
    pub session_id: &'a str,
    /// Its host.
    pub host_id: &'a str,
    /// The state before.
    pub old_state: SessionState,
    /// The state now.
    pub new_state: SessionState,
    /// Why it is not live now, when it is not.
    pub reason: Option<&'a str>,
    /// The session as it is now.
    #[schema(value_type = FleetSessionView)]
    pub session: &'a RawValue,
}

/// Data of a fleet `session.removed` event: its host removed it, or left the fleet.
#[derive(Debug, Serialize, ToSchema)]
pub struct FleetSessionRemoved<'a> {
    /// The session.
    pub session_id: &'a str,
    /// Its host.
    pub host_id: &'a str,
}

/// Data of a `host.joined` or `host.changed` event.
#[derive(Debug, Serialize, ToSchema)]
pub struct HostJoined<'a> {
    /// The host.
    pub host_id: &'a str,
    /// Its entry.
    #[schema(value_type = HostEntry)]
    pub host: &'a HostEntry,
}

/// Data of a `host.left` event: its registry left, or stopped renewing its lease. Its
/// sessions' `session.removed` come before it.
#[derive(Debug, Serialize, ToSchema)]
pub struct HostLeft<'a> {
    /// The host.
    pub host_id: &'a str,
}

/// The JSON of `GET /fleet/sessions` (and a snapshot's data) keeping the hosts and sessions the
/// predicates accept: byte for byte `FleetSessions`' serde encoding, but each session's part is
/// the encoding its cache made when it was read, so no filter re-encodes the fleet.
pub(super) fn sessions_json(
    snapshot: &FleetSnapshot,
    keep_host: impl Fn(&HostEntry) -> bool,
    keep_session: impl Fn(&CachedSession) -> bool,
) -> String {
    let head = FleetSessions {
        revision: snapshot.revision,
        host_id: snapshot.host_id.as_str(),
        hosts: (snapshot.hosts.iter().map(|h| &**h))
            .filter(|h| keep_host(h))
            .collect(),
        next_cursor: None,
        sessions: Vec::new(),
    };
    let sessions = (snapshot.sessions.iter().map(|s| &**s)).filter(|s| keep_session(s));
    joined(head, sessions)
}

/// The JSON of a page of `GET /fleet/sessions`, with `next` as its `next_cursor`.
pub(super) fn page_json(page: &FleetPage, next: Option<&str>) -> String {
    let head = FleetSessions {
        revision: page.revision,
        host_id: page.host_id.as_str(),
        hosts: page.hosts.iter().map(|h| &**h).collect(),
        next_cursor: Some(next),
        sessions: Vec::new(),
    };
    let sessions = (page.sessions.iter()).map(|(_, cached)| &**cached);
    joined(head, sessions)
}

/// `head` (its `sessions` empty) with `sessions`' encodings in its list.
fn joined<'a>(
    head: FleetSessions<'a>,
    sessions: impl Iterator<Item = &'a CachedSession> + Clone,
) -> String {
    let encoded = encode(&head);
    // `sessions` is the last field: its empty list closes the object, so the kept sessions'
    // encodings go between the brackets.
    let Some(start) = encoded.strip_suffix("[]}") else {
        tracing::error!("the fleet's head is not as expected: encoding it whole");
        return encode(&FleetSessions {
            sessions: sessions.map(CachedSession::json).collect(),
            ..head
        });
    };
    // One allocation: the kept sessions are measured before they are copied.
    let most: usize = sessions.clone().map(|s| s.json().get().len() + 1).sum();
    let mut body = String::with_capacity(start.len() + most + 2);
    body.push_str(start);
    body.push('[');
    for (i, session) in sessions.enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(session.json().get());
    }
    body.push_str("]}");
    body
}

/// A fleet session's state, as its host judged it.
pub(super) fn published_state(session: &CachedSession) -> Option<SessionState> {
    let word = serde::de::value::StrDeserializer::<serde::de::value::Error>::new(session.state()?);
    SessionState::deserialize(word).ok()
}

/// A fleet session's state for an event (`unreachable` if its host did not say, as `/events`
/// says of a verdict without one).
pub(super) fn state_of(session: &CachedSession) -> SessionState {
    published_state(session).unwrap_or(SessionState::Unreachable)
}

/// One event of `GET /fleet/events` as a client parses it (documentation only).
pub struct FleetStreamEvent;

impl FleetStreamEvent {
    fn events() -> [(EventName, Cow<'static, str>); 7] {
        [
            (EventName::Snapshot, FleetSessions::name()),
            (EventName::SessionAdded, FleetSessionAdded::name()),
            (EventName::SessionChanged, FleetSessionChanged::name()),
            (EventName::SessionRemoved, FleetSessionRemoved::name()),
            (EventName::HostJoined, HostJoined::name()),
            (EventName::HostLeft, HostLeft::name()),
            (EventName::HostChanged, HostJoined::name()),
        ]
    }
}

impl PartialSchema for FleetStreamEvent {
    fn schema() -> RefOr<Schema> {
        one_event_schema(Self::events())
    }
}

impl ToSchema for FleetStreamEvent {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.extend([
            (FleetSessions::name().into_owned(), FleetSessions::schema()),
            (
                FleetSessionAdded::name().into_owned(),
                FleetSessionAdded::schema(),
            ),
            (
                FleetSessionChanged::name().into_owned(),
                FleetSessionChanged::schema(),
            ),
            (
                FleetSessionRemoved::name().into_owned(),
                FleetSessionRemoved::schema(),
            ),
            (HostJoined::name().into_owned(), HostJoined::schema()),
            (HostLeft::name().into_owned(), HostLeft::schema()),
        ]);
        FleetSessions::schemas(schemas);
        FleetSessionAdded::schemas(schemas);
        FleetSessionChanged::schemas(schemas);
        HostJoined::schemas(schemas);
    }
}
