//! The fleet endpoints: `GET /fleet/sessions`, `GET /fleet/hosts` and `GET /fleet/events`, served
//! from the [`FleetView`](crate::fleet::FleetView) in [`AppState`] (wire types in [`wire`]).
//!
//! Invariants kept here:
//! - Compiled in every build, so the OpenAPI document is the same with the `fleet` feature on
//!   or off; a registry without `--fleet-etcd` answers 404 `fleet-not-configured`.
//! - Only a current fleet is served: while etcd cannot be reached every fleet endpoint answers
//!   503 `fleet-unavailable` saying why, and open streams end with the reason. The local API is
//!   never touched by the fleet's state.
//! - `/fleet/events` follows `/events`'s rules: a snapshot first, growing ids, each event encoded
//!   once, a listener that falls behind ended, a last comment saying why a stream ended; it
//!   takes an event-stream place (`--max-event-streams`).

pub mod wire;

use std::collections::HashSet;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{Method, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::Stream;
use serde::Serialize;

use super::AppState;
use super::error::{ApiError, Problem, quoted};
use super::event_data::encode;
use super::event_stream::EventName;
use super::events::{fell_behind, last_words};
use super::json_body::json_body;
use super::list_filter::{ListFilter, query_words};
use super::paging::{FleetCursor, expired, page_size};
use super::responses::GateProblems;
use super::sse_body::{Frame, shared_text, sse_response};
use crate::fleet::cache::CachedSession;
use crate::fleet::cache::FleetChange;
use crate::fleet::view::{FleetEvent, FleetNext, FleetSnapshot, FleetSubscription};
use crate::fleet::{HOST_ID_RULE, HostId};
use crate::registry::RegistryError;
use wire::{
    FleetHosts, FleetQuery, FleetSessionAdded, FleetSessionChanged, FleetSessionRemoved,
    FleetSessions, FleetStreamEvent, HostJoined, HostLeft, page_json, published_state,
    sessions_json, state_of,
};

/// The tag of the fleet endpoints in the OpenAPI spec.
pub const TAG: &str = "fleet";

/// Where the fleet's event stream is served.
pub const EVENTS_PATH: &str = "/fleet/events";

/// What `/fleet/*` answers without a fleet, or while etcd cannot be reached.
const FLEET_404: &str = "This registry is not part of a fleet: it was started without \
    `--fleet-etcd` (`fleet-not-configured`)";
const FLEET_503: &str = "Unavailable for now: etcd cannot be reached, or the fleet is not read \
    yet (`fleet-unavailable`, saying why; never a stale fleet; back within one `--fleet-ttl` of \
    etcd answering), too many requests in flight (`overloaded`, with Retry-After), or the token \
    file is unusable (`token-file-unusable`), or the registry is shutting down \
    (`events-unavailable`)";
const FLEET_EVENTS_503: &str = "Unavailable for now: as for `GET /fleet/sessions` \
    (`fleet-unavailable`, `overloaded`, `token-file-unusable`), the registry is shutting down \
    (`events-unavailable`), or as many event streams are open as `--max-event-streams` allows \
    (`too-many-event-streams`, with Retry-After; answered before the token is checked)";

/// Every session of every host in the fleet, as their registries verified and published them.
///
/// Served from this registry's cache of the fleet's etcd prefix (no door is asked); newest
/// first. With `limit`, one page by host then session id, and `next_cursor` (`null` on the
/// last page): a session present for the whole walk is on exactly one page. Takes the filters of `GET /sessions` (`status`, `capsule`, `skill`), plus `host`.
/// `host_id` names this registry's own host: act (stop, signal) only on sessions of that host,
/// through this registry; talk to another host's session at its door (a door whose
/// `door_scope` is `host` is reachable only from its own host).
#[utoipa::path(
    get, path = "/fleet/sessions", tag = TAG,
    params(FleetQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The fleet's sessions that match", body = FleetSessions),
        (status = 400, description = "Unknown status, an invalid host id, an empty capsule or \
            skill name, more than 64 words in one list, a limit outside 1–10,000, a cursor \
            without a limit (`invalid-query`), or a cursor this list did not hand out \
            (`invalid-cursor`)",
            body = Problem, content_type = "application/problem+json"),
        (status = 404, description = FLEET_404, body = Problem,
            content_type = "application/problem+json"),
        (status = 410, description = "The cursor's walk began at an etcd revision since \
            compacted away (`cursor-expired`): start again without a cursor",
            body = Problem, content_type = "application/problem+json"),
        GateProblems,
        (status = 503, description = FLEET_503, body = Problem,
            content_type = "application/problem+json"),
    )
)]
pub async fn fleet_sessions(
    State(state): State<AppState>,
    Query(query): Query<FleetQuery>,
) -> Result<Response, ApiError> {
    let keep = Filter::of(&query)?;
    if let Some(limit) = page_size(query.limit, query.cursor.as_deref())? {
        return fleet_page(&state, &keep, limit, query.cursor.as_deref()).await;
    }
    let snapshot = state.fleet().current()?;
    if keep.is_everything() {
        // Made once per picture, shared with the streams' snapshots: the body is those bytes,
        // not a copy.
        encode_apart(&snapshot).await;
        return Ok(json_body(shared_text(snapshot, |s| s.encoded(whole))));
    }
    let body = sessions_json(&snapshot, |h| keep.host(&h.host_id), |s| keep.session(s));
    Ok(json_body(Bytes::from(body)))
}

/// A page of `GET /fleet/sessions`: the `limit` sessions `keep` admits after the cursor, by
/// host then session id. The cursor's walk must have begun at a revision etcd still holds.
async fn fleet_page(
    state: &AppState,
    keep: &Filter,
    limit: usize,
    cursor: Option<&str>,
) -> Result<Response, ApiError> {
    let cursor = cursor.map(FleetCursor::decode).transpose()?;
    if let Some(cursor) = &cursor
        && !state.fleet().holds(cursor.revision).await?
    {
        return Err(expired(cursor.revision));
    }
    let after = (cursor.as_ref()).map(|c| (c.host_id.clone(), c.session_id.clone()));
    let page = state
        .fleet()
        .page(after.as_ref(), limit, |s| keep.session(s))?;
    let began = cursor.map_or(page.revision, |cursor| cursor.revision);
    let last = page.sessions.last().filter(|_| page.more);
    let next = last.map(|(host, cached)| {
        FleetCursor {
            revision: began,
            host_id: host.clone(),
            session_id: cached.session_id().to_owned(),
        }
        .encode()
    });
    Ok(json_body(Bytes::from(page_json(&page, next.as_deref()))))
}

/// Every host in the fleet: each registry taking part, by id.
#[utoipa::path(
    get, path = "/fleet/hosts", tag = TAG,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The fleet's hosts", body = FleetHosts),
        (status = 404, description = FLEET_404, body = Problem,
            content_type = "application/problem+json"),
        GateProblems,
        (status = 503, description = FLEET_503, body = Problem,
            content_type = "application/problem+json"),
    )
)]
pub async fn fleet_hosts(State(state): State<AppState>) -> Result<Response, ApiError> {
    let now = state.fleet().hosts()?;
    json_response(&FleetHosts {
        revision: now.revision,
        host_id: now.own.as_str(),
        hosts: now.hosts.iter().map(|h| &**h).collect(),
    })
}

/// A 200 with `body` as JSON.
fn json_response(body: &impl Serialize) -> Result<Response, ApiError> {
    match serde_json::to_vec(body) {
        Ok(bytes) => Ok(json_body(Bytes::from(bytes))),
        Err(e) => Err(RegistryError::Task(format!("encoding the fleet: {e}")).into()),
    }
}

/// The stream of changes to the fleet (Server-Sent Events), as `/events` is for this host.
///
/// - `snapshot` (`FleetSessions`): the whole fleet; replace your table with it. Always the
///   first event, with or without `Last-Event-ID`; also sent in place of more than 512 changes
///   at once.
/// - `session.added` / `session.changed` / `session.removed`: as on `/events`, each carrying
///   `host_id`.
/// - `host.joined` (`HostJoined`) / `host.left` (`HostLeft`): a registry joined or left (its
///   lease lapsed: it stopped renewing within `--fleet-ttl`); its sessions' removals come first.
/// - `host.changed` (`HostJoined`, its data): a host's entry was rewritten (its load is read
///   again every 30 s); replace the host.
///
/// When etcd cannot be reached the stream ends with a comment saying why, and a reconnect gets
/// the 503. A client more than 1,024 events or 8 MiB behind is disconnected at once, reading or
/// not (its last comment says so); the stream takes one of the
/// `--max-event-streams` places. `HEAD` answers as `GET` would, opening no stream.
#[utoipa::path(
    get, path = EVENTS_PATH, tag = TAG,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The event stream", content_type = "text/event-stream",
            body = FleetStreamEvent),
        (status = 404, description = FLEET_404, body = Problem,
            content_type = "application/problem+json"),
        GateProblems,
        (status = 503, description = FLEET_EVENTS_503, body = Problem,
            content_type = "application/problem+json"),
    )
)]
pub async fn fleet_events(
    State(state): State<AppState>,
    method: Method,
) -> Result<Response, ApiError> {
    if method == Method::HEAD {
        state.fleet().available()?;
        let headers = [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ];
        return Ok((headers, ()).into_response());
    }
    let (snapshot, subscription) = state.fleet().subscribe()?;
    Ok(sse_response(stream(snapshot, subscription), fell_behind))
}

/// The snapshot, then every change, until the listener lags, the fleet becomes unavailable or
/// the registry shuts down; then a last comment saying which. Only the snapshot's frame keeps
/// it, until the connection has taken it.
fn stream(
    snapshot: Arc<FleetSnapshot>,
    subscription: FleetSubscription,
) -> impl Stream<Item = Frame> + use<> {
    futures_util::stream::unfold(Some((Some(snapshot), subscription)), |state| async move {
        // `None`: the last comment went out; the stream is over.
        let (first, mut subscription) = state?;
        if let Some(first) = first {
            return Some((snapshot_frame(first).await, Some((None, subscription))));
        }
        Some(match subscription.next().await {
            Ok(FleetNext::Snapshot(snapshot)) => {
                (snapshot_frame(snapshot).await, Some((None, subscription)))
            }
            Ok(FleetNext::Event(event)) => (event_frame(event), Some((None, subscription))),
            Err(why) => (last_words(&why), None),
        })
    })
}

async fn snapshot_frame(snapshot: Arc<FleetSnapshot>) -> Frame {
    encode_apart(&snapshot).await;
    let id = snapshot.id;
    let data = shared_text(snapshot, |snapshot| snapshot.encoded(whole));
    Frame::event(id, EventName::Snapshot, data)
}

/// Make `snapshot`'s wire form, if not made yet, on the blocking pool: at 100,000 sessions it
/// is 57 MB and hundreds of milliseconds of a core, which on a runtime worker (two on two
/// cores) the fleet's watch and every other stream would wait behind. Should the pool fail
/// us, it is made where it is first read.
async fn encode_apart(snapshot: &Arc<FleetSnapshot>) {
    if snapshot.is_encoded() {
        return;
    }
    let snapshot = Arc::clone(snapshot);
    let _ = tokio::task::spawn_blocking(move || {
        snapshot.encoded(whole);
    })
    .await;
}

/// The whole fleet's JSON: a snapshot's data, and the unfiltered `GET /fleet/sessions`.
fn whole(snapshot: &FleetSnapshot) -> String {
    sessions_json(snapshot, |_| true, |_| true)
}

fn event_frame(event: Arc<FleetEvent>) -> Frame {
    let name = match &event.change {
        FleetChange::SessionAdded(_) => EventName::SessionAdded,
        FleetChange::SessionChanged { .. } => EventName::SessionChanged,
        FleetChange::SessionRemoved { .. } => EventName::SessionRemoved,
        FleetChange::HostJoined(_) => EventName::HostJoined,
        FleetChange::HostChanged(_) => EventName::HostChanged,
        FleetChange::HostLeft { .. } => EventName::HostLeft,
    };
    let id = event.id;
    let data = shared_text(event, |event| event.encoded(encode_change));
    Frame::event(id, name, data)
}

fn encode_change(change: &FleetChange) -> String {
    match change {
        FleetChange::SessionAdded(session) => encode(&FleetSessionAdded {
            session_id: session.session_id(),
            host_id: session.host_id().as_str(),
            session: session.json(),
        }),
        FleetChange::SessionChanged { old, now } => encode(&FleetSessionChanged {
            session_id: now.session_id(),
            host_id: now.host_id().as_str(),
            old_state: state_of(old),
            new_state: state_of(now),
            reason: now.reason(),
            session: now.json(),
        }),
        FleetChange::SessionRemoved {
            host_id,
            session_id,
        } => encode(&FleetSessionRemoved {
            session_id,
            host_id: host_id.as_str(),
        }),
        FleetChange::HostJoined(host) | FleetChange::HostChanged(host) => encode(&HostJoined {
            host_id: &host.host_id,
            host,
        }),
        FleetChange::HostLeft { host_id } => encode(&HostLeft {
            host_id: host_id.as_str(),
        }),
    }
}

/// The filters of `GET /fleet/sessions`, parsed: those of `GET /sessions`, plus `host`.
struct Filter {
    list: ListFilter,
    /// Host ids, each valid.
    hosts: Option<HashSet<String>>,
}

impl Filter {
    fn of(query: &FleetQuery) -> Result<Self, ApiError> {
        let host = |word: &str| match word.parse::<HostId>() {
            Ok(_) => Ok(word.to_owned()),
            Err(_) => Err(format!("invalid host id {}: {HOST_ID_RULE}", quoted(word))),
        };
        let hosts = (query.host.as_deref())
            .map(|hosts| query_words("host", hosts, host))
            .transpose()?;
        let (status, capsule, skill) = (&query.status, &query.capsule, &query.skill);
        Ok(Self {
            list: ListFilter::parse(status.as_deref(), capsule.as_deref(), skill.as_deref())?,
            hosts,
        })
    }

    fn is_everything(&self) -> bool {
        self.list.is_everything() && self.hosts.is_none()
    }

    fn host(&self, host_id: &str) -> bool {
        (self.hosts.as_ref()).is_none_or(|hosts| hosts.contains(host_id))
    }

    fn session(&self, session: &CachedSession) -> bool {
        self.host(session.host_id().as_str()) && admitted(&self.list, session)
    }
}

/// Whether `filter` admits `session`, judged on what its host published.
pub(crate) fn admitted(filter: &ListFilter, session: &CachedSession) -> bool {
    filter.admits(
        published_state(session),
        session.capsule_name(),
        session.skills(),
    )
}

#[cfg(test)]
mod tests;
