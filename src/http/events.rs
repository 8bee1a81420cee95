//! `GET /events`: the live view as a Server-Sent Events stream, for dashboards.
//!
//! Invariants kept here:
//! - Every connection starts with a `snapshot` event (the whole picture), with or without
//!   `Last-Event-ID`, so a client that reconnects never has a silent gap: whatever it missed is
//!   in the snapshot.
//! - Every event carries an `id` that only grows (the snapshot's is that of the last event it
//!   includes), an `event` name, and one line of JSON built from the same [`SessionView`] as
//!   `GET /sessions`: no secret has a place in it.
//! - All listeners share one [`crate::monitor::Monitor`]; each event is encoded once, whatever
//!   the number of listeners.
//! - A listener that falls behind is disconnected, never buffered without bound; a shutdown
//!   ends every stream, so a graceful shutdown does not wait on them.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::Stream;
use serde::Serialize;
use tokio::sync::broadcast::error::RecvError;
use utoipa::ToSchema;

use super::AppState;
use super::error::{ApiError, Problem};
use super::sessions::{GateProblems, SessionList, SessionState, SessionView};
use crate::monitor::{Event, EventKind, Snapshot, SubscribeError, Subscription};

/// How often an idle stream carries a comment, so proxies and clients know it is alive.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The tag of the events endpoint in the OpenAPI spec.
pub const TAG: &str = "events";

/// Data of a `session.added` event.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionAdded {
    /// The session.
    pub session_id: String,
    /// The session with its first complete verdict.
    pub session: SessionView,
}

/// Data of a `session.changed` event.
#[derive(Debug, Serialize, ToSchema)]
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

/// Why a session left.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RemovalReason {
    /// The registry pruned its record: its process is gone.
    Pruned,
    /// The registry stopped it (`POST /sessions/{id}/stop`).
    Stopped,
    /// Its record file disappeared (murmur removes it when a capsule exits cleanly).
    RecordRemoved,
    /// Its record file is still there but is no longer a valid record.
    Unreadable,
}

/// Data of a `session.removed` event.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionRemoved {
    /// The session.
    pub session_id: String,
    /// Why it left.
    pub reason: RemovalReason,
    /// The evidence, when there is some (e.g. `no process holds pid 41234`).
    pub detail: Option<String>,
}

/// The stream of changes to the verified picture (Server-Sent Events).
///
/// `text/event-stream`; each event has an `id` (a decimal that only grows), an `event` name
/// and one line of JSON `data`:
///
/// | event | data |
/// |---|---|
/// | `snapshot` | `SessionList`: every session, newest first, and the count of unreadable entries. Always the first event of a connection, with or without `Last-Event-ID`; its `id` is that of the last change it includes. Replace your whole table with it. |
/// | `session.added` | `SessionAdded`: a new session, with its first complete verdict |
/// | `session.changed` | `SessionChanged`: its `state` moved (e.g. `live` → `unreachable`), or its record was rewritten |
/// | `session.removed` | `SessionRemoved`: it left, and why (`pruned`, `stopped`, `record_removed`, `unreadable`) |
///
/// A record whose process is found gone is `session.changed` to `gone` (or, if it is new,
/// `session.added` as `gone`), then pruned on that evidence and `session.removed` with reason
/// `pruned`: while anyone listens, the registry prunes gone records as `DELETE` would. Records
/// already gone when the first listener arrives are pruned before its snapshot. Every session is re-verified each
/// interval (`--events-interval`, 2 s by default) and at once when its record file changes.
/// An idle stream carries a `: keep-alive` comment every 15 s. A client that falls more than
/// 1,024 events behind is disconnected; on reconnecting it gets a fresh snapshot. At most
/// `--max-event-streams` streams (128 by default) are open at once. Browsers'
/// `EventSource` cannot send the `Authorization` header: read the stream with `fetch`.
#[utoipa::path(
    get, path = "/events", tag = TAG,
    security(("bearer" = [])),
    params(("Last-Event-ID" = Option<String>, Header,
        description = "The id of the last event a reconnecting client saw. Accepted; the stream starts with a full snapshot either way.")),
    responses(
        (status = 200, description = "The event stream", content_type = "text/event-stream", body = String),
        GateProblems,
        (status = 503, description = "The running directory cannot be read, the registry is shutting down, too many requests are in flight (`overloaded`, with Retry-After), as many event streams are open as `--max-event-streams` allows (`too-many-event-streams`, with Retry-After; answered before the token is checked), or the token file is unusable", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn events(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    if let Some(last) = headers.get("last-event-id") {
        tracing::debug!(last_event_id = ?last, "a client resumes; it gets a snapshot first");
    }
    let subscription = state.events().subscribe().await.map_err(|error| {
        let detail = match &error {
            SubscribeError::Unavailable(_) => {
                tracing::warn!(%error, "cannot start an event stream");
                "the running directory cannot be read; see the registry's log".to_owned()
            }
            SubscribeError::Closing => error.to_string(),
        };
        ApiError::from(Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "events-unavailable",
            detail,
        ))
    })?;
    Ok(Sse::new(stream(subscription)).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
}

/// The snapshot, then every event, until the listener lags, the monitor stops or the registry
/// shuts down.
fn stream(subscription: Subscription) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let first = snapshot_event(&subscription.snapshot);
    futures_util::stream::unfold(
        (Some(first), subscription),
        |(first, mut subscription)| async move {
            if let Some(first) = first {
                return Some((Ok(first), (None, subscription)));
            }
            let next = tokio::select! {
                // `wait_for` also ends the stream if the monitor is dropped.
                () = crate::monitor::closed(&mut subscription.closing) => None,
                received = subscription.events.recv() => match received {
                    Ok(event) => Some(sse_event(&event)),
                    Err(RecvError::Lagged(missed)) => {
                        tracing::info!(missed, "dropping an event listener that fell behind");
                        None
                    }
                    Err(RecvError::Closed) => None,
                },
            };
            next.map(|event| (Ok(event), (None, subscription)))
        },
    )
}

fn snapshot_event(snapshot: &Snapshot) -> SseEvent {
    let data = snapshot.encoded(|snapshot| {
        encode(&SessionList {
            sessions: snapshot.readings.iter().map(SessionView::of).collect(),
            unreadable: snapshot.unreadable,
        })
    });
    SseEvent::default()
        .id(snapshot.id.to_string())
        .event("snapshot")
        .data(data)
}

fn sse_event(event: &Arc<Event>) -> SseEvent {
    let name = match &event.kind {
        EventKind::Added(_) => "session.added",
        EventKind::Changed { .. } => "session.changed",
        EventKind::Removed { .. } => "session.removed",
    };
    let data = event.encoded(|kind| match kind {
        EventKind::Added(reading) => encode(&SessionAdded {
            session_id: reading.record.session_id.clone(),
            session: SessionView::of(reading),
        }),
        EventKind::Changed { old, now } => {
            let session = SessionView::of(now);
            encode(&SessionChanged {
                session_id: now.record.session_id.clone(),
                old_state: SessionState::from(old),
                new_state: session.liveness.state.unwrap_or(SessionState::Unreachable),
                reason: session.liveness.reason.clone(),
                session,
            })
        }
        EventKind::Removed {
            session_id,
            because,
            detail,
        } => encode(&SessionRemoved {
            session_id: session_id.clone(),
            reason: match because {
                crate::monitor::RemovedBecause::Pruned => RemovalReason::Pruned,
                crate::monitor::RemovedBecause::Stopped => RemovalReason::Stopped,
                crate::monitor::RemovedBecause::RecordRemoved => RemovalReason::RecordRemoved,
                crate::monitor::RemovedBecause::Unreadable => RemovalReason::Unreadable,
            },
            detail: detail.clone(),
        }),
    });
    SseEvent::default()
        .id(event.id.to_string())
        .event(name)
        .data(data)
}

/// One line of JSON. Serializing these types cannot fail (string keys, no maps of non-strings).
fn encode(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|error| {
        tracing::error!(%error, "cannot encode an event");
        "{}".to_owned()
    })
}
