//! The accept loop: hyper's HTTP/1.1 connection per socket, under the limits that keep slow or
//! many clients from starving real ones.
//!
//! Invariants kept here:
//! - No whole request head within [`ServeLimits::header_read_timeout`] (or a keep-alive idle
//!   that long): the socket is closed before any handler sees it.
//! - No response head within [`ServeLimits::request_timeout`]: 408, connection closed. Only
//!   the head is timed; a streaming body is never cut, and a signal or stop runs in its own task.
//! - At most [`ServeLimits::max_connections`]: a newcomer evicts the oldest connection waiting
//!   for a request head (gone within [`CLOSE_GRACE`]); only if every one is inside a request
//!   (an open stream counts) is it answered 503.
//! - At most [`ServeLimits::max_in_flight`] requests until their response head: the next is 503
//!   with `Retry-After` at once. An open stream holds no such place.
//! - At most [`ServeLimits::max_event_streams`] streams, counted before routing (see
//!   [`super::routes`]) from request head to body end: the next is 503 with `Retry-After`.
//!   The CLI keeps this cap below `max_connections`, so streams never hold every connection.
//! - A peer that takes nothing written for [`ServeLimits::write_stall_timeout`] is closed
//!   (`write_stall`), stream place and queued events with it.
//! - Every 503 given for load, and every open stream, is counted in [`LoadFigures`] (see
//!   `load`) for `/metrics`: these answers never reach the router's middleware.
//! - A request head over [`MAX_REQUEST_LINE`] (414), [`MAX_REQUEST_HEAD`] or
//!   [`MAX_HEADER_LINES`] (431) is answered with a problem at the connection, before hyper
//!   (whose own answer has no body) could see the whole of it; see `head_limit`.
//! - Shutdown closes the listener, then idle connections; in-flight requests finish; whatever
//!   is left after [`ServeLimits::shutdown_grace`] is dropped.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, HttpBody};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use super::error::{Problem, ProblemType};
use super::routes::{HoldsStreamPlace, RouteClass, class_of};
use crate::registry::LONGEST_STOP;
use head_limit::{BodyFraming, HeadLimit};
use head_scan::TooLong;
pub use head_scan::{MAX_HEADER_LINES, MAX_REQUEST_HEAD, MAX_REQUEST_LINE};
pub use load::{LoadFigures, ShedCause};
use write_stall::WriteStallGuard;

mod head_limit;
mod head_scan;
mod load;
mod write_stall;

/// The limits the accept loop enforces. [`Default`] gives the values `serve` uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeLimits {
    /// How long a client may take to send a whole request head, and how long a keep-alive
    /// connection may sit idle. Default 10 s.
    pub header_read_timeout: Duration,
    /// How long a request may wait for its response head before it gets 408. Default 30 s.
    /// A stop (`POST /sessions/{id}/stop`) gets at least its longest wait plus a margin.
    pub request_timeout: Duration,
    /// Sockets held open at once. Default 1024.
    pub max_connections: usize,
    /// Requests handled at once. Default 256.
    pub max_in_flight: usize,
    /// `GET /events` streams open at once. Default `DEFAULT_MAX_EVENT_STREAMS`. It keeps
    /// connections for other requests only when below `max_connections`, which the CLI
    /// requires.
    pub max_event_streams: usize,
    /// How long shutdown waits for in-flight requests before dropping them. Default 30 s.
    pub shutdown_grace: Duration,
    /// How long a connection's writes may find its socket full (its peer reads nothing) before
    /// it is closed. Default 60 s.
    pub write_stall_timeout: Duration,
}

/// The default cap on open event streams: a hundred dashboard tabs (or scripts) still fit,
/// while 896 of the default 1,024 connections stay out of streams' reach, and with the 256
/// requests in flight as well, 640 remain.
pub const DEFAULT_MAX_EVENT_STREAMS: usize = 128;

impl Default for ServeLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_connections: 1024,
            max_in_flight: 256,
            max_event_streams: DEFAULT_MAX_EVENT_STREAMS,
            shutdown_grace: Duration::from_secs(30),
            write_stall_timeout: Duration::from_secs(60),
        }
    }
}

/// The deadline a stop gets at least: its longest run (door, SIGTERM wait, SIGKILL's grace) and
/// margin.
const STOP_DEADLINE: Duration = LONGEST_STOP.saturating_add(Duration::from_secs(30));

/// How long a connection between requests gets to close cleanly (flush what it wrote) when
/// it is evicted or the server shuts down, before it is dropped.
const CLOSE_GRACE: Duration = Duration::from_millis(200);

/// When a client refused for load is told to come back (`Retry-After`, seconds).
const RETRY_OVERLOADED: HeaderValue = HeaderValue::from_static("1");

/// When a client refused an event stream is told to come back: streams last for as long as a
/// dashboard stays open, so a place rarely frees within a second.
const RETRY_EVENT_STREAMS: HeaderValue = HeaderValue::from_static("5");

/// A pause after an accept error (such as running out of descriptors), so a full table does
/// not spin the loop.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// Serve `router` on `listener` under `limits` until `shutdown` resolves, then drain.
///
/// Returns once every connection has finished or `limits.shutdown_grace` has passed since
/// `shutdown` resolved. Errors only if the listener itself cannot be used. For tests (through
/// `test_support`): the registry serves through [`serve_with`](super::serve_with).
pub(crate) async fn serve_router(
    listener: TcpListener,
    router: Router,
    limits: ServeLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_router_counting(listener, router, limits, Arc::default(), shutdown).await
}

/// [`serve_router`], counting what is refused for load (and the open streams) in `load`.
pub(super) async fn serve_router_counting(
    listener: TcpListener,
    router: Router,
    limits: ServeLimits,
    load: Arc<LoadFigures>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let gate = Arc::new(Gate::new(limits, load));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // Finished connections are reaped as we go, so the set holds only live ones.
        while connections.try_join_next().is_some() {}
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::warn!(%error, "cannot accept a connection");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        match gate.admit() {
            Some(slot) => {
                let router = router.clone();
                let stop = stop_rx.clone();
                connections.spawn(serve_connection(stream, router, slot, stop, limits));
            }
            None => {
                gate.load.shed(ShedCause::MaxConnections);
                connections.spawn(shed(stream));
            }
        }
    }
    // Refuse new connections from here on: the listening socket closes now.
    drop(listener);
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(limits.shutdown_grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            remaining = connections.len(),
            "shutdown grace over; dropping connections still open"
        );
        connections.shutdown().await;
    }
    Ok(())
}

/// Answer a connection that cannot be held with 503, without reading its request.
async fn shed(mut stream: TcpStream) {
    let answer = closing_answer(&overloaded_problem(), Some(&RETRY_OVERLOADED));
    // Bounded: a peer that does not read must not hold the task.
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(&answer).await?;
        stream.shutdown().await
    })
    .await;
}

/// `problem` as a whole HTTP/1.1 answer on the wire, for the answers given outside hyper (its
/// status, the problem's body, `Retry-After` if given), each the connection's last.
fn closing_answer(problem: &Problem, retry_after: Option<&HeaderValue>) -> Vec<u8> {
    let body = serde_json::to_vec(problem).unwrap_or_else(|_| b"{}".to_vec());
    let status = axum::http::StatusCode::from_u16(problem.status)
        .unwrap_or(axum::http::StatusCode::BAD_REQUEST);
    let retry = retry_after
        .and_then(|value| value.to_str().ok())
        .map_or(String::new(), |value| format!("retry-after: {value}\r\n"));
    let mut answer = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: {}\r\ncontent-length: {}\r\n{retry}\
         connection: close\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or_default(),
        super::error::PROBLEM_JSON,
        body.len(),
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    answer
}

/// The answer to a request head over a limit (see `head_scan`).
fn head_refusal(why: TooLong) -> Vec<u8> {
    let problem = match why {
        TooLong::RequestLine => Problem::new(
            ProblemType::UriTooLong,
            format!(
                "the request line is longer than {MAX_REQUEST_LINE} bytes; send fewer or shorter \
                 query parameters"
            ),
        ),
        TooLong::Head => Problem::new(
            ProblemType::HeadersTooLarge,
            format!(
                "the request head is larger than {MAX_REQUEST_HEAD} bytes or has more than \
                 {MAX_HEADER_LINES} header lines"
            ),
        ),
    };
    closing_answer(&problem, None)
}

fn overloaded_problem() -> Problem {
    Problem::new(
        ProblemType::Overloaded,
        "the registry is handling as many requests as it takes; retry shortly",
    )
}

fn too_many_event_streams_problem(limit: usize) -> Problem {
    Problem::new(
        ProblemType::TooManyEventStreams,
        format!(
            "the registry already serves {limit} event streams (--max-event-streams); close one or \
             retry later"
        ),
    )
}

async fn serve_connection(
    stream: TcpStream,
    router: Router,
    slot: Arc<Slot>,
    mut stop: watch::Receiver<bool>,
    limits: ServeLimits,
) {
    // Every answer is written whole or as events that must go out at once: Nagle's algorithm
    // would hold a body's last small write (an SSE body's closing chunk, an event after another)
    // until the peer's delayed ACK, 40 ms on Linux.
    if let Err(error) = stream.set_nodelay(true) {
        tracing::debug!(%error, "cannot set TCP_NODELAY");
    }
    let framing = Arc::new(BodyFraming::default());
    let service = Handler {
        router,
        slot: slot.clone(),
        limits,
        framing: framing.clone(),
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let stream = WriteStallGuard::new(stream, limits.write_stall_timeout);
    let stream = HeadLimit::new(stream, framing, head_refusal);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    let mut connection = std::pin::pin!(connection);
    let mut closing = false;
    // Set when the connection is told to close while it waits for a request head: a peer that
    // stalls mid-head would otherwise hold it until the header timeout.
    let mut cut_off: Option<Pin<Box<tokio::time::Sleep>>> = None;
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, "connection ended with an error");
                }
                break;
            }
            () = slot.evicted.notified(), if !closing => {
                closing = true;
                connection.as_mut().graceful_shutdown();
                cut_off = Some(Box::pin(tokio::time::sleep(CLOSE_GRACE)));
            }
            changed = stop.changed(), if !closing => {
                if changed.is_err() || *stop.borrow() {
                    closing = true;
                    connection.as_mut().graceful_shutdown();
                    if slot.is_waiting() {
                        cut_off = Some(Box::pin(tokio::time::sleep(CLOSE_GRACE)));
                    }
                }
            }
            () = async { if let Some(sleep) = cut_off.as_mut() { sleep.await } },
                if cut_off.is_some() =>
            {
                // Only a connection between requests is cut off: nothing is lost.
                if slot.is_waiting() {
                    break;
                }
                cut_off = None;
            }
        }
    }
    slot.close();
}

/// The per-connection hyper service: in-flight accounting, the request deadline, the router.
#[derive(Clone)]
struct Handler {
    router: Router,
    slot: Arc<Slot>,
    limits: ServeLimits,
    /// Where the connection's head measure learns how long each request's body is.
    framing: Arc<BodyFraming>,
}

impl hyper::service::Service<hyper::Request<Incoming>> for Handler {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        // Said at once: the head measure holds what follows the head until it knows.
        let body_length = request.body().size_hint().exact();
        self.framing.body_follows(body_length);
        let slot = self.slot.clone();
        let limits = self.limits;
        let mut router = self.router.clone();
        Box::pin(async move {
            let Some(flight) = slot.begin_request() else {
                slot.gate.load.shed(ShedCause::MaxInFlight);
                // The connection goes back to waiting once the answer is written.
                return Ok(close(
                    overloaded_problem().into_response(),
                    &slot,
                    Some(RETRY_OVERLOADED),
                ));
            };
            // Taken before routing, so a refused stream costs no token check, no subscription
            // and no directory pass; held by the body below for as long as the stream lasts.
            let class = class_of(request.method(), request.uri().path(), request.headers());
            let stream = if class == RouteClass::EventStream {
                match slot.gate.begin_stream() {
                    Some(stream) => Some(stream),
                    None => {
                        slot.gate.load.shed(ShedCause::MaxEventStreams);
                        drop(flight);
                        let limit = limits.max_event_streams.max(1);
                        return Ok(close(
                            too_many_event_streams_problem(limit).into_response(),
                            &slot,
                            Some(RETRY_EVENT_STREAMS),
                        ));
                    }
                }
            } else {
                None
            };
            let mut request = request.map(Body::new);
            if stream.is_some() {
                request.extensions_mut().insert(HoldsStreamPlace);
            }
            let deadline = match class {
                RouteClass::Stop => limits.request_timeout.max(STOP_DEADLINE),
                RouteClass::EventStream | RouteClass::Ordinary => limits.request_timeout,
            };
            let answer =
                tokio::time::timeout(deadline, tower_service::Service::call(&mut router, request))
                    .await;
            // The head is ready: whatever the body takes (a stream, forever) is not in flight.
            drop(flight);
            let response = match answer {
                Ok(Ok(response)) => response,
                Ok(Err(never)) => match never {},
                Err(_) => {
                    return Ok(close(
                        request_timeout_problem().into_response(),
                        &slot,
                        None,
                    ));
                }
            };
            let mut response =
                response.map(|body| Body::new(IdleWhenDone::new(body, slot).holding(stream)));
            if body_length.is_none() {
                // No head after a body of unknown length could be measured: none is read.
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Ok(response)
        })
    }
}

fn request_timeout_problem() -> Problem {
    Problem::new(
        ProblemType::RequestTimeout,
        "the request took longer than the registry allows and gets no other answer; a signal or \
         stop already under way still runs to its end (GET the session to see where it stands)",
    )
}

/// Mark `response` as the connection's last; for 503, tell the client when to come back.
fn close(mut response: Response, slot: &Arc<Slot>, retry_after: Option<HeaderValue>) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    if let Some(retry_after) = retry_after {
        headers.insert(header::RETRY_AFTER, retry_after);
    }
    response.map(|body| Body::new(IdleWhenDone::new(body, slot.clone())))
}

/// Counts of what is held open, and which connections may be closed to make room.
struct Gate {
    limits: ServeLimits,
    state: Mutex<GateState>,
    load: Arc<LoadFigures>,
}

#[derive(Default)]
struct GateState {
    open: usize,
    in_flight: usize,
    /// Event streams between their request head and the end of their body.
    streams: usize,
    next_ticket: u64,
    /// Connections waiting for a request head, oldest ticket first.
    waiting: BTreeMap<u64, Arc<Notify>>,
}

impl Gate {
    fn new(limits: ServeLimits, load: Arc<LoadFigures>) -> Self {
        Self {
            limits,
            state: Mutex::new(GateState::default()),
            load,
        }
    }

    fn lock(&self) -> MutexGuard<'_, GateState> {
        // The counts stay consistent under every critical section, so a poisoned lock (a
        // panic elsewhere) still holds usable numbers.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hold a new connection, closing the oldest waiting one if the cap is reached; `None`
    /// when every held connection is inside a request.
    fn admit(self: &Arc<Self>) -> Option<Arc<Slot>> {
        let mut state = self.lock();
        if state.open >= self.limits.max_connections.max(1) {
            let oldest = state.waiting.keys().next().copied()?;
            if let Some(evicted) = state.waiting.remove(&oldest) {
                // The evicted connection still counts until its task ends; admitting now keeps
                // the newcomer from waiting on it.
                evicted.notify_one();
                state.open = state.open.saturating_sub(1);
            }
        }
        state.open += 1;
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        let evicted = Arc::new(Notify::new());
        state.waiting.insert(ticket, evicted.clone());
        Some(Arc::new(Slot {
            gate: self.clone(),
            evicted,
            ticket: Mutex::new(SlotState::Waiting(ticket)),
            answering: AtomicBool::new(false),
        }))
    }

    /// A place for one more event stream; `None` when the cap is reached.
    fn begin_stream(self: &Arc<Self>) -> Option<StreamPlace> {
        let mut state = self.lock();
        if state.streams >= self.limits.max_event_streams.max(1) {
            return None;
        }
        state.streams += 1;
        self.load.stream_opened();
        Some(StreamPlace { gate: self.clone() })
    }
}

/// An admitted event stream; dropping it (when its body ends or is dropped) frees its place.
struct StreamPlace {
    gate: Arc<Gate>,
}

impl Drop for StreamPlace {
    fn drop(&mut self) {
        let mut state = self.gate.lock();
        state.streams = state.streams.saturating_sub(1);
        self.gate.load.stream_closed();
    }
}

/// One held connection's place in the [`Gate`].
struct Slot {
    gate: Arc<Gate>,
    evicted: Arc<Notify>,
    ticket: Mutex<SlotState>,
    /// Between a request head and the end of its answer (even on an evicted connection).
    answering: AtomicBool,
}

enum SlotState {
    Waiting(u64),
    Busy,
    /// Evicted or closed: no longer counted.
    Gone,
}

/// An admitted request; dropping it frees its in-flight place.
struct Flight {
    gate: Arc<Gate>,
}

impl Drop for Flight {
    fn drop(&mut self) {
        let mut state = self.gate.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
    }
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, SlotState> {
        self.ticket.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection has sent a request head: it may no longer be evicted. Answers `None`
    /// when too many requests are in flight.
    fn begin_request(&self) -> Option<Flight> {
        self.answering.store(true, Ordering::Release);
        let mut mine = self.lock();
        let mut state = self.gate.lock();
        if let SlotState::Waiting(ticket) = *mine {
            // A ticket no longer in line was evicted (and uncounted) by `admit`.
            *mine = if state.waiting.remove(&ticket).is_some() {
                SlotState::Busy
            } else {
                SlotState::Gone
            };
        }
        if state.in_flight >= self.gate.limits.max_in_flight.max(1) {
            return None;
        }
        state.in_flight += 1;
        Some(Flight {
            gate: self.gate.clone(),
        })
    }

    /// The answer has been handed over: the connection waits for its next head, newest in line.
    fn end_request(&self) {
        self.answering.store(false, Ordering::Release);
        let mut mine = self.lock();
        if !matches!(*mine, SlotState::Busy) {
            return;
        }
        let mut state = self.gate.lock();
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.waiting.insert(ticket, self.evicted.clone());
        *mine = SlotState::Waiting(ticket);
    }

    /// Whether the connection is between requests (or was evicted while it was).
    fn is_waiting(&self) -> bool {
        !self.answering.load(Ordering::Acquire)
    }

    fn close(&self) {
        let mut mine = self.lock();
        let was = std::mem::replace(&mut *mine, SlotState::Gone);
        let mut state = self.gate.lock();
        match was {
            SlotState::Waiting(ticket) => {
                // Evicted slots were already removed and uncounted by `admit`.
                if state.waiting.remove(&ticket).is_some() {
                    state.open = state.open.saturating_sub(1);
                }
            }
            SlotState::Busy => state.open = state.open.saturating_sub(1),
            SlotState::Gone => {}
        }
    }
}

/// A response body that puts its connection back in line for eviction once it is written
/// (or abandoned): a streaming answer is never evicted mid-stream. It also holds an event
/// stream's place until then.
struct IdleWhenDone {
    body: Body,
    slot: Option<Arc<Slot>>,
    stream: Option<StreamPlace>,
}

impl IdleWhenDone {
    fn new(body: Body, slot: Arc<Slot>) -> Self {
        Self {
            body,
            slot: Some(slot),
            stream: None,
        }
    }

    /// Hold `stream`'s place until the body is done.
    fn holding(mut self, stream: Option<StreamPlace>) -> Self {
        self.stream = stream;
        self
    }

    fn done(&mut self) {
        self.stream.take();
        if let Some(slot) = self.slot.take() {
            slot.end_request();
        }
    }
}

impl Drop for IdleWhenDone {
    fn drop(&mut self) {
        self.done();
    }
}

impl HttpBody for IdleWhenDone {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) {
            self.done();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}
