//! The body of an event stream (`/events`, `/fleet/events`): its frames taken as they come and
//! queued for the connection within a byte budget.
//!
//! Why: a client that stops reading stops hyper from polling the body, so a stream that made
//! its frames only when polled never learned that it fell behind, and what it had made (a
//! snapshot copied per stream: 53 MB each in a fleet of large values) stayed with it. Here one
//! task per stream takes each frame as it comes and queues it, and a frame's text is shared
//! with every other stream that sends it (a snapshot is encoded once and never copied).
//!
//! Invariants:
//! - What a stream has queued and its connection has not taken is its next frame, whatever its
//!   size (a snapshot larger than the budget still goes to a client that keeps up), and behind
//!   it at most [`STREAM_BUDGET`] bytes in fewer than [`FRAME_BUDGET`] frames: the changes that
//!   come while a large snapshot is made and taken do not end the stream (they did, at 100,000
//!   fleet sessions: issue 27's bench). Frames share their text with the ring and every
//!   other stream, so what a stalled stream adds of its own is a few bytes a frame.
//! - A stream whose next frame does not fit is ended at once: its queue is emptied, only whole
//!   frames (the client never reads half an event), and replaced by a last comment saying why,
//!   which a client that reads again finds before the end; it reconnects to a fresh snapshot.
//! - The task ends with the stream, or as soon as the body is dropped (the client went): a
//!   stream holds its subscription no longer than its connection.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio::sync::{Notify, oneshot};

use super::event_stream::EventName;
use crate::monitor::EVENT_BUFFER;

/// The most bytes a stream may have queued that its connection has not taken. Changes come in
/// bursts of up to [`crate::monitor::SNAPSHOT_OVER`] events at once (more go as one snapshot),
/// queued faster than any client reads them, so a client that keeps up must never be ended by
/// one: 512 events of a session whose record has two paths of `PATH_MAX` (about 10 KB each) fit.
pub(crate) const STREAM_BUDGET: usize = 8 << 20;

/// The most frames a stream may have queued that its connection has not taken: a listener
/// that falls this many events behind is ended, as the ring ends one it outran.
const FRAME_BUDGET: usize = EVENT_BUFFER;

/// How often an idle stream carries a comment, so proxies and clients know it is alive.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// One event or comment of a stream, in the parts its connection writes in order.
#[derive(Debug, Clone)]
pub(super) struct Frame {
    parts: [Bytes; 3],
}

impl Frame {
    /// Event `name` with `id` and `data`: one line of JSON (serde's, which never holds a line
    /// break), shared, not copied.
    pub(super) fn event(id: u64, name: EventName, data: Bytes) -> Self {
        let head = format!("id: {id}\nevent: {}\ndata: ", name.as_str());
        Self {
            parts: [head.into(), data, Bytes::from_static(b"\n\n")],
        }
    }

    /// A comment line (`: text`); line breaks in `text` become spaces.
    pub(super) fn comment(text: &str) -> Self {
        let line = format!(": {}\n\n", text.replace(['\r', '\n'], " "));
        Self {
            parts: [line.into(), Bytes::new(), Bytes::new()],
        }
    }

    /// The keep-alive: an empty comment.
    fn keep_alive() -> Self {
        Self {
            parts: [Bytes::from_static(b":\n\n"), Bytes::new(), Bytes::new()],
        }
    }

    fn len(&self) -> usize {
        self.parts.iter().map(Bytes::len).sum()
    }
}

/// The bytes a stream writes for event `name` with `id` and `value`, encoded as every event's
/// data is (`test_support`: the fuzz target reads them back).
pub(crate) fn sse_event_text(id: u64, name: EventName, value: &serde_json::Value) -> Vec<u8> {
    Frame::event(id, name, super::event_data::encode(value).into())
        .parts
        .concat()
}

/// The bytes a stream writes for the comment `text` (`test_support`, as above).
pub(crate) fn sse_comment_text(text: &str) -> Vec<u8> {
    Frame::comment(text).parts.concat()
}

/// `text`, owned by `owner`, as bytes that share it: a frame's data without a copy.
pub(super) fn shared_text<T: ?Sized + Send + Sync + 'static>(
    owner: Arc<T>,
    text: for<'a> fn(&'a T) -> &'a str,
) -> Bytes {
    struct Shared<T: ?Sized> {
        owner: Arc<T>,
        text: for<'a> fn(&'a T) -> &'a str,
    }
    impl<T: ?Sized> AsRef<[u8]> for Shared<T> {
        fn as_ref(&self) -> &[u8] {
            (self.text)(&self.owner).as_bytes()
        }
    }
    Bytes::from_owner(Shared { owner, text })
}

/// The answer that streams `frames` (which end with their own last comment, if any) as
/// Server-Sent Events, ending the stream with `behind`'s words should its client fall
/// behind (see [`fits`]). Spawns the stream's task: call on a Tokio runtime.
pub(super) fn sse_response(
    frames: impl Stream<Item = Frame> + Send + 'static,
    behind: fn() -> Frame,
) -> Response {
    let queue = Arc::new(Queue::default());
    let (body_held, body_dropped) = oneshot::channel::<Infallible>();
    tokio::spawn(pump(frames, Arc::clone(&queue), body_dropped, behind));
    let body = futures_util::stream::unfold(
        (queue, body_held, VecDeque::new()),
        |(queue, held, mut parts)| async move {
            let part = match parts.pop_front() {
                Some(part) => part,
                None => {
                    // hyper would take an empty chunk for the end of the body.
                    let frame = queue.next().await?;
                    parts.extend(frame.parts.into_iter().filter(|part| !part.is_empty()));
                    parts.pop_front()?
                }
            };
            Some((Ok::<_, Infallible>(part), (queue, held, parts)))
        },
    );
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

/// Take `frames` as they come into `queue` until they end, the client falls behind, or the
/// body is dropped; an idle stream gets a keep-alive every [`KEEP_ALIVE`].
async fn pump(
    frames: impl Stream<Item = Frame>,
    queue: Arc<Queue>,
    mut body_dropped: oneshot::Receiver<Infallible>,
    behind: fn() -> Frame,
) {
    let mut frames = pin!(frames);
    loop {
        let frame = tokio::select! {
            _ = &mut body_dropped => return,
            // `next` resumes where it was when a timeout drops it: the stream keeps its state.
            next = tokio::time::timeout(KEEP_ALIVE, frames.next()) => match next {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(_) => Frame::keep_alive(),
            },
        };
        if !queue.push(frame) {
            tracing::info!("ending an event stream whose client fell behind");
            queue.replace_all(behind());
            break;
        }
    }
    queue.finish();
}

/// The frames a stream made that its connection has not taken, and whether more will come.
#[derive(Debug, Default)]
struct Queue {
    state: Mutex<QueueState>,
    changed: Notify,
}

#[derive(Debug, Default)]
struct QueueState {
    frames: VecDeque<Frame>,
    bytes: usize,
    finished: bool,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, QueueState> {
        // Every change leaves the state whole: a poisoned lock's state is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queue `frame`, unless it does not fit in the budget behind the next frame: `false`
    /// then, and nothing queued.
    fn push(&self, frame: Frame) -> bool {
        let mut state = self.lock();
        let len = frame.len();
        let next = state.frames.front().map_or(0, Frame::len);
        if !fits(state.bytes - next, state.frames.len(), len) {
            return false;
        }
        state.bytes += len;
        state.frames.push_back(frame);
        drop(state);
        self.changed.notify_one();
        true
    }

    /// Drop every frame queued and queue `last` in their place.
    fn replace_all(&self, last: Frame) {
        let mut state = self.lock();
        state.bytes = last.len();
        state.frames = VecDeque::from([last]);
        drop(state);
        self.changed.notify_one();
    }

    /// No frame comes after those queued.
    fn finish(&self) {
        self.lock().finished = true;
        self.changed.notify_one();
    }

    /// The next frame, once there is one; `None` once finished and empty.
    async fn next(&self) -> Option<Frame> {
        loop {
            {
                let mut state = self.lock();
                if let Some(frame) = state.frames.pop_front() {
                    state.bytes -= frame.len();
                    return Some(frame);
                }
                if state.finished {
                    return None;
                }
            }
            // A notification sent since the lock was let go is kept as a permit: none is lost.
            self.changed.notified().await;
        }
    }
}

/// Whether a frame of `len` bytes may join `frames` frames queued, of which those behind the
/// next hold `queued` bytes: within the budgets, or alone.
fn fits(queued: usize, frames: usize, len: usize) -> bool {
    frames == 0 || (frames < FRAME_BUDGET && queued.saturating_add(len) <= STREAM_BUDGET)
}

#[cfg(test)]
mod tests;
