//! One `/events` listener, and the reader of a Server-Sent Events stream it (and `mcp_client`'s
//! GET stream) is read by: a task of its own that stamps each block with the instant its bytes
//! arrived.
//!
//! Invariant: an event's `at` is taken by the reader as the frame arrives, never by whoever
//! later takes it from the queue, so a scenario busy elsewhere does not inflate a latency.

use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::server::{Client, Server};

/// How long the first picture may take to arrive (10,000 records on a loaded machine).
const FIRST_PICTURE: Duration = Duration::from_secs(120);

/// One Server-Sent Event.
pub struct StreamEvent {
    /// Its `event:` name (`snapshot`, `session.removed`, …).
    pub name: String,
    /// Its `data:`, parsed.
    pub data: Value,
    /// When its last byte was read.
    pub at: Instant,
}

/// A connected listener; its reader stops when it is dropped.
pub struct EventListener {
    events: SseReader<StreamEvent>,
    _client: Client,
}

impl EventListener {
    /// Open `GET /events` on `server`.
    pub async fn open(server: &Server) -> Self {
        Self::open_at(server, "/events").await
    }

    /// Open the event stream at `path` (`/events`, `/fleet/events`) on `server`.
    pub async fn open_at(server: &Server, path: &str) -> Self {
        let mut client = server.client().await;
        let body = client.stream(path).await;
        Self {
            events: SseReader::spawn(body, parse_block),
            _client: client,
        }
    }

    /// Open the event stream at `path` on the registry at `addr` with `token`: from a task of
    /// another runtime, whose clock then stamps the events (`fleet-scale`'s, feature `fleet`).
    #[cfg_attr(not(feature = "fleet"), allow(dead_code))]
    pub async fn open_on(addr: &str, token: &str, path: &str) -> Self {
        let mut client = Client::connect(addr, token).await;
        let body = client.stream(path).await;
        Self {
            events: SseReader::spawn(body, parse_block),
            _client: client,
        }
    }

    /// The next event, or `None` once `deadline` passes or the stream ended.
    pub async fn next_before(&mut self, deadline: Instant) -> Option<StreamEvent> {
        self.events.next_before(deadline).await
    }

    /// The first event, which must be the `snapshot`: its `data`.
    pub async fn snapshot(&mut self) -> Value {
        let first = self
            .next_before(Instant::now() + FIRST_PICTURE)
            .await
            .expect("a first event on /events");
        assert_eq!(first.name, "snapshot", "the stream starts with a snapshot");
        first.data
    }

    /// Every event already read, without waiting.
    pub fn drain(&mut self) -> Vec<StreamEvent> {
        let mut events = Vec::new();
        while let Ok(event) = self.events.items.try_recv() {
            events.push(event);
        }
        events
    }
}

/// A Server-Sent Events stream read in a task of its own: each complete block is handed to the
/// reader's parse with the instant its last frame arrived, and what that makes of it is queued.
/// The task stops when this is dropped.
pub struct SseReader<T> {
    items: mpsc::UnboundedReceiver<T>,
    reader: JoinHandle<()>,
}

impl<T: Send + 'static> SseReader<T> {
    /// Read `body`, each block (`\n\n`-ended, the blank line included) made into items by `parse`.
    pub fn spawn<I>(mut body: Incoming, parse: fn(&str, Instant) -> I) -> Self
    where
        I: IntoIterator<Item = T> + 'static,
    {
        let (send, items) = mpsc::unbounded_channel();
        let reader = tokio::spawn(async move {
            // `pending` before `scanned` holds no block's end: each byte is looked at once, so a
            // snapshot of 50 MB in thousands of frames is not searched from its start each time.
            let (mut pending, mut scanned) = (String::new(), 0);
            while let Some(Ok(frame)) = body.frame().await {
                let at = Instant::now();
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                pending.push_str(&String::from_utf8_lossy(&data));
                while let Some(end) = pending[scanned..].find("\n\n").map(|at| scanned + at) {
                    let block: String = pending.drain(..end + 2).collect();
                    scanned = 0;
                    for item in parse(&block, at) {
                        if send.send(item).is_err() {
                            return;
                        }
                    }
                }
                // A `\n` last may begin a block's end; every other byte is a char boundary.
                scanned = pending.len() - usize::from(pending.ends_with('\n'));
            }
        });
        Self { items, reader }
    }

    /// The next item, or `None` once `deadline` passes or the stream ended.
    pub async fn next_before(&mut self, deadline: Instant) -> Option<T> {
        tokio::time::timeout_at(deadline.into(), self.items.recv())
            .await
            .ok()
            .flatten()
    }
}

impl<T> Drop for SseReader<T> {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// One event block (`id:`, `event:`, `data:` lines); `None` for a comment alone.
fn parse_block(block: &str, at: Instant) -> Option<StreamEvent> {
    let mut name = None;
    let mut data = String::new();
    for line in block.lines() {
        if let Some(value) = line.strip_prefix("event:") {
            name = Some(value.trim().to_owned());
        } else if let Some(value) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(value.strip_prefix(' ').unwrap_or(value));
        }
    }
    Some(StreamEvent {
        name: name?,
        data: serde_json::from_str(&data).unwrap_or(Value::Null),
        at,
    })
}
