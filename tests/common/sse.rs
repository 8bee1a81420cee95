//! Server-Sent Events as a client reads them: `/events` and `/fleet/events` read chunk by chunk
//! off a real response ([`EventStream`]), through one incremental parser ([`SseParser`]) that
//! a test can also feed bytes of its own (a socket it reads itself).
//!
//! Invariant: every event a test reads has passed the stream contract's checks: an id, a name,
//! one line of JSON data, and an id above the stream's previous one (a `resources` event
//! repeats the id of the event before it). Chunks may split anywhere, even inside a character.
//! Waiting is for the stream's next chunk under a deadline per event, never by sleeping.

use std::time::Duration;

use reqwest::header;
use serde_json::Value;

/// The longest wait for the next event of a stream. Never how long a test takes.
pub const EVENT_DEADLINE: Duration = Duration::from_secs(15);

/// The event that changes nothing in the picture, so it carries the id of the change before it
/// (a reconnect from it misses nothing).
const CARRIES_THE_LAST_ID: &str = "resources";

/// One event as a client sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub id: u64,
    pub name: String,
    pub data: Value,
}

impl SseEvent {
    /// The `session_id` the event's data names; empty when it names none.
    pub fn session_id(&self) -> &str {
        self.data["session_id"].as_str().unwrap_or_default()
    }
}

/// An incremental `text/event-stream` parser: `id:`, `event:` and `data:` lines, a blank line
/// ending each event, `:` comments and `retry:` skipped; any other field fails the test, as does
/// an event that breaks the contract (see the module's invariant).
#[derive(Default)]
pub struct SseParser {
    pending: Vec<u8>,
    id: Option<u64>,
    name: Option<String>,
    data: Vec<String>,
    last_id: Option<u64>,
    /// The text of the last comment, while no event has followed it.
    last_comment: Option<String>,
}

impl SseParser {
    /// Add bytes as they came; they may end anywhere.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    /// The next complete event fed so far, if any.
    pub fn next_event(&mut self) -> Option<SseEvent> {
        while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let line = String::from_utf8(line).expect("the stream is UTF-8");
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if let Some(event) = self.dispatch() {
                    return Some(event);
                }
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "" => self.last_comment = Some(value.to_owned()),
                "id" => self.id = Some(value.parse().expect("an event id is a decimal")),
                "event" => self.name = Some(value.to_owned()),
                "data" => self.data.push(value.to_owned()),
                // The reconnection delay: nothing a test reads.
                "retry" => {}
                other => panic!("unexpected field {other:?} in the stream"),
            }
        }
        None
    }

    /// The comment the stream carried last, if no event came after it (a stream's last words).
    pub fn last_comment(&self) -> Option<&str> {
        self.last_comment.as_deref()
    }

    /// The event the blank line just ended, if it carried anything.
    fn dispatch(&mut self) -> Option<SseEvent> {
        let (id, name, data) = (
            self.id.take(),
            self.name.take(),
            std::mem::take(&mut self.data),
        );
        if id.is_none() && name.is_none() && data.is_empty() {
            return None;
        }
        let id = id.unwrap_or_else(|| panic!("an event without an id: {name:?} {data:?}"));
        let name = name.unwrap_or_else(|| panic!("an event without a name: {id} {data:?}"));
        assert_eq!(data.len(), 1, "one line of data per event: {name} {data:?}");
        let data: Value = serde_json::from_str(&data[0]).expect("event data is JSON");
        if let Some(last) = self.last_id {
            if name == CARRIES_THE_LAST_ID {
                assert_eq!(id, last, "a {name} event repeats the previous id");
            } else {
                assert!(
                    id > last,
                    "ids strictly increase within a stream: {id} after {last} ({name})"
                );
            }
        }
        self.last_id = Some(id);
        self.last_comment = None;
        Some(SseEvent { id, name, data })
    }
}

/// How the server ended a stream.
enum StreamEnd {
    /// The body ended as framed.
    Closed,
    /// The connection broke off (e.g. a server shutting down); the error as reqwest saw it.
    Broken(String),
}

/// An event stream read off a reqwest response (`chunk()` by `chunk()`) through an
/// [`SseParser`], each event awaited under the deadline given at [`EventStream::new`].
pub struct EventStream {
    response: reqwest::Response,
    parser: SseParser,
    per_event: Duration,
    /// Everything the stream carried so far, comments included.
    raw: Vec<u8>,
    end: Option<StreamEnd>,
}

impl EventStream {
    /// Read `response`, which must be a 200, waiting at most `per_event` for each event (e.g.
    /// [`EVENT_DEADLINE`]).
    pub fn new(response: reqwest::Response, per_event: Duration) -> Self {
        assert_eq!(response.status().as_u16(), 200, "GET {}", response.url());
        Self {
            response,
            parser: SseParser::default(),
            per_event,
            raw: Vec::new(),
            end: None,
        }
    }

    /// The response's `Content-Type`; empty when it has none.
    pub fn content_type(&self) -> String {
        self.response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    }

    /// The id of the last event read; `None` before the first.
    pub fn last_id(&self) -> Option<u64> {
        self.parser.last_id
    }

    /// Everything the stream carried so far, comments included.
    pub fn raw(&self) -> String {
        String::from_utf8_lossy(&self.raw).into_owned()
    }

    /// The next event, or `None` once the server ended the stream, cleanly or not. Fails the
    /// test if neither comes within the deadline.
    pub async fn next(&mut self) -> Option<SseEvent> {
        let deadline = tokio::time::Instant::now() + self.per_event;
        loop {
            if let Some(event) = self.parser.next_event() {
                return Some(event);
            }
            if self.end.is_some() {
                return None;
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "no event within {:?}; the stream so far:\n{}",
                        self.per_event,
                        self.raw()
                    )
                });
            match chunk {
                Ok(Some(bytes)) => {
                    self.raw.extend_from_slice(&bytes);
                    self.parser.feed(&bytes);
                }
                Ok(None) => self.end = Some(StreamEnd::Closed),
                // A connection the server closes ends the stream as much as a clean end does.
                Err(e) => self.end = Some(StreamEnd::Broken(e.to_string())),
            }
        }
    }

    /// The next event, which must exist.
    pub async fn expect_event(&mut self) -> SseEvent {
        match self.next().await {
            Some(event) => event,
            None => panic!(
                "the stream ended{}; it carried:\n{}",
                self.how(),
                self.raw()
            ),
        }
    }

    /// The next event, which must be a `snapshot`.
    pub async fn snapshot(&mut self) -> SseEvent {
        let event = self.expect_event().await;
        assert_eq!(event.name, "snapshot", "the first event: {event:?}");
        event
    }

    /// Skip events until one satisfies `wanted`; fail on an event `allowed` refuses.
    pub async fn until(
        &mut self,
        what: &str,
        allowed: impl Fn(&SseEvent) -> bool,
        wanted: impl Fn(&SseEvent) -> bool,
    ) -> SseEvent {
        loop {
            let Some(event) = self.next().await else {
                panic!(
                    "the stream ended{} before {what}:\n{}",
                    self.how(),
                    self.raw()
                );
            };
            if wanted(&event) {
                return event;
            }
            assert!(allowed(&event), "unexpected event before {what}: {event:?}");
        }
    }

    /// Read to the stream's end, which must be a clean one, each event within the deadline;
    /// answers the comment it ended with (empty if its last block was an event).
    pub async fn last_words(&mut self) -> String {
        while self.next().await.is_some() {}
        if let Some(StreamEnd::Broken(why)) = &self.end {
            panic!("the stream broke off ({why}); it carried:\n{}", self.raw());
        }
        self.parser.last_comment().unwrap_or_default().to_owned()
    }

    /// How the stream ended, for a failure's message.
    fn how(&self) -> String {
        match &self.end {
            Some(StreamEnd::Broken(why)) => format!(" (broken off: {why})"),
            Some(StreamEnd::Closed) | None => String::new(),
        }
    }
}
