//! `GET /events`: the live view as a Server-Sent Events stream, for dashboards.
//!
//! Invariants kept here:
//! - Every connection starts with a `snapshot` (the whole picture), `Last-Event-ID` or not, so
//!   a reconnect has no silent gap. A mid-stream `snapshot` (too many changes at once) means
//!   the same; a listener behind it gets the latest one, so no picture is held for it.
//! - Every event has a growing `id`, an `event` name ([`EventName`]) and one line of JSON built
//!   from the same [`SessionView`] as `GET /sessions`: no secret has a place in it.
//! - Listeners share one [`crate::monitor::Monitor`]; each event is encoded once.
//! - A listener that falls behind is disconnected, never buffered without bound (the budgets of
//!   [`super::sse_body`], enforced while its client reads nothing); shutdown, or a
//!   running directory that stays unreadable, ends every stream, and a stream asked for while
//!   it is unreadable gets the 503 `GET /sessions` gives.
//! - A stream the registry ends says why in a last comment (`: stream ended: …`).

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, header};
use axum::response::{IntoResponse, Response};
use tokio::sync::broadcast::error::RecvError;

use super::AppState;
use super::error::{ApiError, Problem, ProblemType, problem_for};
use super::event_data::encode;
use super::event_stream::{EventName, StreamEvent};
use super::include::Includes;
use super::resource_feed::ResourceListener;
use super::responses::GateProblems;
use super::sse_body::{Frame, STREAM_BUDGET, shared_text, sse_response};
use crate::monitor::{Event, EventKind, Next, Snapshot, SubscribeError, Subscription};
use crate::wire::{
    EventsQuery, SessionAdded, SessionChanged, SessionList, SessionRemoved, SessionState,
    SessionView,
};

/// The tag of the events endpoint in the OpenAPI spec.
pub const TAG: &str = "events";

/// Where the stream is served.
pub const PATH: &str = "/events";

/// The stream of changes to the verified picture (Server-Sent Events).
///
/// Each event has an `id` (a decimal that only grows), an `event` name and one line of JSON
/// `data`, whose schema depends on the name:
///
/// - `snapshot` (`SessionList`): the whole picture; replace your table with it. Always the
///   first event of a connection, with or without `Last-Event-ID` (its `id` is that of the
///   last change it includes); also sent mid-stream in place of more than 512 changes at once,
///   and then a client that fell behind gets the latest one.
/// - `session.added` (`SessionAdded`): a new session, with its first complete verdict.
/// - `session.changed` (`SessionChanged`): its `state` moved, or its record was rewritten.
/// - `session.removed` (`SessionRemoved`): it left, and why.
/// - `resources` (`ResourcesEvent`), only on a stream opened with `?include=resources`: after
///   each periodic pass, what every session whose process is confirmed costs (CPU, memory,
///   threads). It changes nothing in the picture: its `id` is that of the last change sent.
///   Sampling runs only while such a stream is open.
///
/// While anyone listens, a record whose process is found gone is `session.changed` to `gone`
/// (or `session.added` as `gone`), then pruned as `DELETE` would and `session.removed` as
/// `pruned`; records already gone when the first listener arrives are pruned before its
/// snapshot. Records are read, and their processes checked, every `--events-interval` (2 s)
/// and when they change; each live process's door is asked again every `--door-recheck`
/// (10 s). An idle stream carries a comment (`:`) every 15 s; a client more than 1,024
/// events or 8 MiB behind is disconnected at once, reading or not (its last comment says so);
/// at most `--max-event-streams` (128) streams are open.
///
/// A running directory that cannot be read is never evidence that sessions ended; if it stays
/// unreadable for one more interval every stream ends, and a reconnect gets the 503
/// `GET /sessions` gives. A stream the registry ends closes with a comment saying why
/// (`: stream ended: …`). `HEAD /events` answers as `GET` would, opening no stream. Browsers'
/// `EventSource` cannot send `Authorization`: read the stream with `fetch`.
#[utoipa::path(
    get, path = PATH, tag = TAG,
    security(("bearer" = [])),
    params(("Last-Event-ID" = Option<String>, Header,
        description = "The id of the last event a reconnecting client saw. Accepted; the \
            stream starts with a full snapshot either way."), EventsQuery),
    responses(
        (
            status = 200,
            description = "The event stream",
            content_type = "text/event-stream",
            body = StreamEvent
        ),
        (
            status = 400,
            description = "Unknown include (only `resources` is offered here)",
            body = Problem,
            content_type = "application/problem+json"
        ),
        GateProblems,
        (
            status = 503,
            description = "Unavailable for now: the running directory is missing, replaced or open \
                to others (`running-dir-unavailable`, as for `GET /sessions`), the registry is \
                shutting down (`events-unavailable`), too many requests are in flight \
                (`overloaded`, with Retry-After), as many event streams are open as \
                `--max-event-streams` allows (`too-many-event-streams`, with Retry-After; answered \
                before the token is checked), or the token file is unusable \
                (`token-file-unusable`)",
            body = Problem,
            content_type = "application/problem+json"
        ),
    )
)]
pub async fn events(
    State(state): State<AppState>,
    method: Method,
    headers: HeaderMap,
    Query(query): Query<EventsQuery>,
) -> Result<Response, ApiError> {
    let includes = Includes::parse(query.include.as_deref())?;
    if includes.card {
        return Err(ApiError::bad_query(
            "include=card is not offered on /events: use include=resources",
        ));
    }
    if method == Method::HEAD {
        // What a GET would be answered, without its stream: subscribing starts the live view,
        // which prunes gone records, and a HEAD must change nothing. A plain listing (which
        // only reads) tells whether the stream could start.
        if state.events().is_closing() {
            return Err(closing_problem());
        }
        state.registry().sessions(false).await?;
        return Ok((
            [
                (header::CONTENT_TYPE, "text/event-stream"),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            (),
        )
            .into_response());
    }
    if let Some(last) = headers.get("last-event-id") {
        tracing::debug!(last_event_id = ?last, "a client resumes; it gets a snapshot first");
    }
    let subscription = state
        .events()
        .subscribe()
        .await
        .map_err(|error| match error {
            // Answered as `GET /sessions` answers the same failure, and logged the same way.
            SubscribeError::Unavailable(error) => ApiError::from(error),
            SubscribeError::Closing => closing_problem(),
        })?;
    // Asked for after the subscription, so the sampling's own follows a running live view.
    let resources = includes.resources.then(|| state.listen_resources());
    Ok(sse_response(stream(subscription, resources), fell_behind))
}

/// 503 `events-unavailable`: the registry is shutting down and gives out no stream.
fn closing_problem() -> ApiError {
    ApiError::from(Problem::new(
        ProblemType::EventsUnavailable,
        SubscribeError::Closing.to_string(),
    ))
}

/// A stream between its events: the snapshot still to send, the live view's changes, and the
/// `resources` events if it asked for them.
struct OpenStream {
    first: Option<Frame>,
    subscription: Subscription,
    resources: Option<ResourceListener>,
    /// The id of the last event sent, which a `resources` event carries too.
    last_id: u64,
}

/// What the stream sends next.
enum Turn {
    Closing,
    Received(Result<Next, RecvError>),
    Resources(Option<Arc<str>>),
}

/// The snapshot, then every event (with `resources` events, when asked for), until the listener
/// lags, the monitor stops or the registry shuts down; then a last comment saying which.
fn stream(
    mut subscription: Subscription,
    resources: Option<ResourceListener>,
) -> impl futures_util::Stream<Item = Frame> + use<> {
    let first = snapshot_frame(&subscription.snapshot);
    let last_id = subscription.snapshot.id;
    // Only its frame keeps the picture, for as long as the connection has not taken it.
    drop(std::mem::take(&mut subscription.snapshot));
    let open = OpenStream {
        first: Some(first),
        subscription,
        resources,
        last_id,
    };
    futures_util::stream::unfold(Some(open), |state| async move {
        // `None`: the last comment went out; the stream is over.
        let mut open = state?;
        if let Some(first) = open.first.take() {
            return Some((first, Some(open)));
        }
        Some(match next_frame(&mut open).await {
            Ok(frame) => (frame, Some(open)),
            Err(why) => (last_words(&why), None),
        })
    })
}

/// The stream's next frame, or why it ends.
async fn next_frame(open: &mut OpenStream) -> Result<Frame, String> {
    // A clone (an Arc's count), as `recv` borrows the whole subscription.
    let mut closing = open.subscription.closing.clone();
    loop {
        let turn = tokio::select! {
            // In this order: a `resources` event never goes out before the change events
            // of the step it samples.
            biased;
            // `wait_for` also ends the stream if the monitor is dropped.
            () = crate::monitor::closed(&mut closing) => Turn::Closing,
            received = open.subscription.recv() => Turn::Received(received),
            data = next_resources(&mut open.resources) => Turn::Resources(data),
        };
        return match turn {
            Turn::Closing => Err(SubscribeError::Closing.to_string()),
            // Many changes at once: the whole picture, encoded once (and shared with the
            // snapshots of listeners arriving after it).
            Turn::Received(Ok(Next::Snapshot(snapshot))) => {
                open.last_id = snapshot.id;
                Ok(snapshot_frame(&snapshot))
            }
            Turn::Received(Ok(Next::Event(event))) => {
                open.last_id = event.id;
                Ok(event_frame(&event))
            }
            Turn::Received(Err(RecvError::Lagged(missed))) => {
                tracing::info!(missed, "dropping an event listener that fell behind");
                Err(format!(
                    "this listener fell more than {} events behind",
                    crate::monitor::EVENT_BUFFER
                ))
            }
            Turn::Received(Err(RecvError::Closed)) => Err(match open.subscription.ended_by() {
                Some(error) => problem_for(error).detail,
                None => SubscribeError::Closing.to_string(),
            }),
            Turn::Resources(Some(data)) => Ok(resources_frame(data, open.last_id)),
            // The sampling stopped with the live view, whose end the stream hears next.
            Turn::Resources(None) => {
                open.resources = None;
                continue;
            }
        };
    }
}

/// The data of the next `resources` event, for a stream that asked for them; never, otherwise.
async fn next_resources(resources: &mut Option<ResourceListener>) -> Option<Arc<str>> {
    match resources {
        Some(listener) => listener.next().await,
        None => std::future::pending().await,
    }
}

/// A `resources` event: it changes nothing in the picture, so it carries the id of the last
/// change the stream sent (a reconnect from it misses nothing).
fn resources_frame(data: Arc<str>, last_id: u64) -> Frame {
    Frame::event(
        last_id,
        EventName::Resources,
        shared_text(data, |data| data),
    )
}

/// The comment that ends a stream: why, and what a reconnect gets.
pub(super) fn last_words(why: &str) -> Frame {
    Frame::comment(&format!(
        "stream ended: {why}; a reconnect gets a fresh snapshot, or the reason it cannot"
    ))
}

/// The last words of a stream whose client fell too far behind.
pub(super) fn fell_behind() -> Frame {
    last_words(&format!(
        "this listener fell more than {} events or {} MiB behind",
        crate::monitor::EVENT_BUFFER,
        STREAM_BUDGET >> 20
    ))
}

fn snapshot_frame(snapshot: &Snapshot) -> Frame {
    let data = shared_text(Arc::new(snapshot.clone()), snapshot_event_data);
    Frame::event(snapshot.id, EventName::Snapshot, data)
}

fn snapshot_event_data(snapshot: &Snapshot) -> &str {
    snapshot.encoded(|snapshot| {
        encode(&SessionList {
            sessions: snapshot.readings.iter().map(SessionView::of).collect(),
            unreadable: snapshot.unreadable,
            next_cursor: None,
        })
    })
}

fn event_frame(event: &Arc<Event>) -> Frame {
    let name = match &event.kind {
        EventKind::Added(_) => EventName::SessionAdded,
        EventKind::Changed { .. } => EventName::SessionChanged,
        EventKind::Removed { .. } => EventName::SessionRemoved,
    };
    Frame::event(event.id, name, shared_text(Arc::clone(event), event_data))
}

/// An event's data, encoded once however many streams send it.
fn event_data(event: &Event) -> &str {
    event.encoded(|kind| match kind {
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
            cause,
            detail,
        } => encode(&SessionRemoved {
            session_id: session_id.clone(),
            reason: *cause,
            detail: detail.clone(),
        }),
    })
}
