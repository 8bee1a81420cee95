//! Session ids and record files as murmur writes them, and as no murmur would.
//!
//! Invariant: a [`RecordJson`] names the test process itself unless the test says otherwise,
//! so a record can never lead the registry to signal anything else on the machine.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use murmur_registry::running::{RunningRecord, process_start_token};
use serde_json::{Value, json};

use super::write_raw;

/// A distinct session id shaped like murmur's: `ses_` + 32 lowercase hex digits.
///
/// Like murmur's UUIDv7 ids, each id sorts after every id handed out before it in this process
/// (a fixed time prefix, then a counter), so "newest first" is "descending".
pub fn session_id() -> String {
    static EPOCH_MS: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(1);
    let epoch = *EPOCH_MS.get_or_init(|| {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock after 1970")
            .as_millis();
        u64::try_from(ms).expect("milliseconds fit u64") & 0xffff_ffff_ffff
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("ses_{epoch:012x}7{n:019x}")
}

/// The nine keys every generation of record carries.
pub const NINE_FIELDS: [&str; 9] = [
    "session_id",
    "url",
    "pid",
    "process_start",
    "capsule_name",
    "capsule_version",
    "workdir",
    "outlives_launcher",
    "started_at",
];

/// The start token of the test process itself: the one a record written by it would carry.
pub fn own_start_token() -> String {
    process_start_token(std::process::id()).expect("this process reads its own start token")
}

/// A start token that is certainly not `pid`'s: its real token plus one.
pub fn wrong_start_token(pid: u32) -> String {
    let real: u64 = process_start_token(pid)
        .expect("the start token of a live pid")
        .parse()
        .expect("start tokens are decimal on Linux");
    (real + 1).to_string()
}

/// A record as the raw JSON object a murmur writer would put on disk.
///
/// Starts as a spec-generation record (the nine fields) naming **the test process itself** with
/// its real start token, so by default layers 1 and 2 read it as alive and nothing can ever be
/// signalled through it (the registry refuses to signal itself). The door defaults to
/// `127.0.0.1:1`, where nothing listens. Every key can be replaced, removed or added.
#[derive(Debug, Clone)]
pub struct RecordJson {
    fields: serde_json::Map<String, Value>,
}

impl RecordJson {
    /// A nine-field record for `session_id`, naming the test process.
    pub fn new(session_id: &str) -> Self {
        let Value::Object(fields) = json!({
            "session_id": session_id,
            "url": "127.0.0.1:1",
            "pid": std::process::id(),
            "process_start": own_start_token(),
            "capsule_name": "test-capsule",
            "capsule_version": "0.1.0",
            "workdir": format!("/tmp/murmur-test/{session_id}"),
            "outlives_launcher": false,
            "started_at": "2026-11-30T04:52:00Z",
        }) else {
            unreachable!("a JSON object literal")
        };
        Self { fields }
    }

    /// A record with a fresh [`session_id`].
    pub fn fresh() -> Self {
        Self::new(&session_id())
    }

    /// The session id this record names.
    pub fn session_id(&self) -> String {
        self.fields["session_id"]
            .as_str()
            .expect("session_id is a string here")
            .to_owned()
    }

    /// The file name murmur would give it: `<session_id>.json`.
    pub fn file_name(&self) -> String {
        format!("{}.json", self.session_id())
    }

    /// Set any key to any JSON value (including unknown keys and wrong types).
    pub fn set(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.fields.insert(key.to_owned(), value.into());
        self
    }

    /// Remove a key.
    pub fn without(mut self, key: &str) -> Self {
        self.fields.remove(key);
        self
    }

    /// The process the record names.
    pub fn pid(self, pid: u32) -> Self {
        self.set("pid", pid)
    }

    /// The recorded start token.
    pub fn process_start(self, token: &str) -> Self {
        self.set("process_start", token)
    }

    /// The process and its start token.
    pub fn process(self, pid: u32, token: &str) -> Self {
        self.pid(pid).process_start(token)
    }

    /// The door's `host:port`.
    pub fn url(self, url: impl Into<String>) -> Self {
        self.set("url", url.into())
    }

    /// `"url": null`: a script capsule with no door.
    pub fn no_door(self) -> Self {
        self.set("url", Value::Null)
    }

    /// The operator bearer token of an authenticated door.
    pub fn door_token(self, token: &str) -> Self {
        self.set("door_token", token)
    }

    /// The record as a JSON value.
    pub fn to_json(&self) -> Value {
        Value::Object(self.fields.clone())
    }

    /// The record's bytes, as a writer would put them on disk.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(&self.fields).expect("serialize a JSON map")
    }

    /// Parse the bytes with the crate's parser, as a record built in memory (no file behind it).
    pub fn parse(&self) -> RunningRecord {
        RunningRecord::parse(&self.to_bytes()).expect("the record parses")
    }

    /// Write it as `<dir>/<session_id>.json`, mode 0600; answers the path.
    pub fn write_in(&self, dir: &Path) -> PathBuf {
        write_raw(dir, &self.file_name(), self.to_bytes())
    }

    /// Write it under another file name (e.g. one that disagrees with its session id).
    pub fn write_as(&self, dir: &Path, file_name: &str) -> PathBuf {
        write_raw(dir, file_name, self.to_bytes())
    }
}
