//! Scenario `chaos`: what one `/events` listener believes (its snapshot plus every event since,
//! applied in order), and the comparison with a fresh listing. Pure: bytes in, a picture out.
//!
//! Invariant: a picture is only ever built from what the stream said, the way a client would
//! (a `snapshot` replaces everything, mid-stream too; `session.added` and `session.changed`
//! set a session; `session.removed` drops it), so comparing it with `GET /sessions` compares
//! the registry's stream with its own listing, not with anything this scenario knows.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::server::by_session_id;

/// What a picture holds of one session: its `liveness.state` and `liveness.process`.
pub type Verdict = (String, String);

/// Session id to verdict.
pub type Picture = BTreeMap<String, Verdict>;

/// One event off the stream.
pub struct SseEvent {
    pub id: Option<u64>,
    pub name: String,
    pub data: Value,
}

/// An incremental `text/event-stream` reader: chunks in (split anywhere), events out.
#[derive(Default)]
pub struct SseReader {
    pending: Vec<u8>,
}

impl SseReader {
    /// Add a chunk; answer every event it completed.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.pending.extend_from_slice(bytes);
        let mut events = Vec::new();
        while let Some(end) = self.pending.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = self.pending.drain(..end + 2).collect();
            if let Some(event) = parse_block(&String::from_utf8_lossy(&block)) {
                events.push(event);
            }
        }
        events
    }
}

/// One block of `id:`, `event:` and `data:` lines; `None` for a comment alone.
fn parse_block(block: &str) -> Option<SseEvent> {
    let (mut id, mut name, mut data) = (None, None, String::new());
    for line in block.lines() {
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "id" => id = value.parse().ok(),
            "event" => name = Some(value.to_owned()),
            "data" => data.push_str(value),
            _ => {}
        }
    }
    Some(SseEvent {
        id,
        name: name?,
        data: serde_json::from_str(&data).unwrap_or(Value::Null),
    })
}

/// The verdict a session object (as `GET /sessions` and the events carry it) shows.
pub fn verdict_of(session: &Value) -> Verdict {
    let word = |key: &str| session["liveness"][key].as_str().unwrap_or("-").to_owned();
    (word("state"), word("process"))
}

/// The picture of a `{"sessions": [...]}` body (a listing, a snapshot, `/fleet/sessions`).
pub fn picture_of(body: &Value) -> Picture {
    by_session_id(body, verdict_of)
}

/// Apply one event to `picture`; answers the id of a session it removed.
pub fn apply(picture: &mut Picture, event: &SseEvent) -> Option<String> {
    let id = || {
        event.data["session_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    match event.name.as_str() {
        "snapshot" => *picture = picture_of(&event.data),
        "session.added" | "session.changed" => {
            picture.insert(id(), verdict_of(&event.data["session"]));
        }
        "session.removed" => {
            picture.remove(&id());
            return Some(id());
        }
        _ => {}
    }
    None
}

/// What differs between `seen` and `listed`, briefly (`""` when they agree).
pub fn difference(seen: &Picture, listed: &Picture) -> String {
    let mut out = Vec::new();
    for (id, verdict) in listed {
        match seen.get(id) {
            None => out.push(format!("{id} missing ({verdict:?} listed)")),
            Some(v) if v != verdict => out.push(format!("{id} {v:?}, listed {verdict:?}")),
            Some(_) => {}
        }
    }
    for id in seen.keys().filter(|id| !listed.contains_key(*id)) {
        out.push(format!("{id} not listed"));
    }
    out.join("; ")
}
