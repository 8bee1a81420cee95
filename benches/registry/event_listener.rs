//! One `/events` listener: the stream read in a task of its own, each event stamped with the
//! instant its bytes arrived.
//!
//! Invariant: an event's `at` is taken by the reader as the frame arrives, never by whoever
//! later takes it from the queue, so a scenario busy elsewhere does not inflate a latency.

use std::time::{Duration, Instant};

use http_body_util::BodyExt;
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
    events: mpsc::UnboundedReceiver<StreamEvent>,
    reader: JoinHandle<()>,
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
        let mut body = client.stream(path).await;
        let (send, events) = mpsc::unbounded_channel();
        let reader = tokio::spawn(async move {
            let mut pending = String::new();
            while let Some(Ok(frame)) = body.frame().await {
                let at = Instant::now();
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                pending.push_str(&String::from_utf8_lossy(&data));
                while let Some(end) = pending.find("\n\n") {
                    let block: String = pending.drain(..end + 2).collect();
                    if let Some(event) = parse_block(&block, at)
                        && send.send(event).is_err()
                    {
                        return;
                    }
                }
            }
        });
        Self {
            events,
            reader,
            _client: client,
        }
    }

    /// The next event, or `None` once `deadline` passes or the stream ended.
    pub async fn next_before(&mut self, deadline: Instant) -> Option<StreamEvent> {
        tokio::time::timeout_at(deadline.into(), self.events.recv())
            .await
            .ok()
            .flatten()
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
        while let Ok(event) = self.events.try_recv() {
            events.push(event);
        }
        events
    }
}

impl Drop for EventListener {
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
