//! The event stream's writer, read back by a reader of the SSE format written here.
//!
//! Checks: for any events (any JSON data, any rising ids, any event name) and any comments in
//! between, the reader sees exactly the events written, in order: one `data` line each (the
//! value's JSON encoding, which decodes), ids rising, and no comment ever read as an event.
//!
//! Input: frames split at 0xFF bytes; a frame whose first byte is even is a comment of the
//! rest, else an event whose name is picked by that byte and whose data is the rest as a JSON
//! string (or the JSON it parses as, when it does).
#![no_main]

use libfuzzer_sys::fuzz_target;
use murmur_registry::test_support::{EventName, sse_comment_text, sse_event_text};
use serde_json::Value;

const NAMES: [EventName; 8] = [
    EventName::Snapshot,
    EventName::SessionAdded,
    EventName::SessionChanged,
    EventName::SessionRemoved,
    EventName::Resources,
    EventName::HostJoined,
    EventName::HostLeft,
    EventName::HostChanged,
];

/// One event as read: id, name, data lines.
struct Read {
    id: Option<String>,
    name: Option<String>,
    data: Vec<String>,
}

/// The events of `text`, read as the SSE format says: lines end at CR, LF or CRLF; a blank
/// line dispatches; a line starting with `:` is a comment.
fn read_events(text: &str) -> Vec<Read> {
    let mut events = Vec::new();
    let mut now = Read {
        id: None,
        name: None,
        data: Vec::new(),
    };
    let text = text.replace("\r\n", "\n").replace('\r', "\n");
    for line in text.split('\n') {
        if line.is_empty() {
            if !now.data.is_empty() {
                events.push(std::mem::replace(
                    &mut now,
                    Read {
                        id: None,
                        name: None,
                        data: Vec::new(),
                    },
                ));
            } else {
                now = Read {
                    id: None,
                    name: None,
                    data: Vec::new(),
                };
            }
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value).to_owned();
        match field {
            "id" => now.id = Some(value),
            "event" => now.name = Some(value),
            "data" => now.data.push(value),
            _ => {}
        }
    }
    events
}

fuzz_target!(|data: &[u8]| {
    let mut written = Vec::new();
    let mut stream = Vec::new();
    let mut id = 0u64;
    for frame in data.split(|&b| b == 0xFF) {
        let Some((&pick, rest)) = frame.split_first() else {
            continue;
        };
        let text = String::from_utf8_lossy(rest);
        if pick % 2 == 0 {
            stream.extend(sse_comment_text(&text));
            continue;
        }
        id += u64::from(pick);
        let value =
            serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text.into_owned()));
        let name = NAMES[usize::from(pick / 2) % NAMES.len()];
        stream.extend(sse_event_text(id, name, &value));
        written.push((id, name.as_str(), value));
    }
    let text = String::from_utf8(stream).expect("the stream is UTF-8");
    let read = read_events(&text);
    assert_eq!(
        read.len(),
        written.len(),
        "events read are not the events written"
    );
    let mut last = 0u64;
    for (event, (id, name, value)) in read.iter().zip(&written) {
        let read_id: u64 = event
            .id
            .as_deref()
            .and_then(|i| i.parse().ok())
            .expect("a numeric id");
        assert!(read_id > last, "ids do not rise");
        last = read_id;
        assert_eq!(read_id, *id);
        assert_eq!(event.name.as_deref(), Some(*name));
        assert_eq!(event.data.len(), 1, "an event of more than one data line");
        // The text, not a decoded value: serde_json's own float reading may be 1 ulp off.
        let encoded = serde_json::to_string(value).expect("a value encodes");
        assert_eq!(event.data[0], encoded, "data is not the value's encoding");
        serde_json::from_str::<Value>(&event.data[0]).expect("data decodes");
    }
});
