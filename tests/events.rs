//! The live view end to end: `GET /events` (Server-Sent Events) and `GET /sessions/{id}/card`,
//! against the real server on `127.0.0.1:0`, a temporary running directory, real capsule
//! processes (`python3` serving real doors) and real doors that count what they are asked.
//!
//! Why these tests exist: the event stream is the only part of the registry that acts on its
//! own, over time, for many clients at once. What a dashboard relies on is checked from the
//! outside, as a client reads it:
//!
//! - a capsule's life as events: its record appears (`session.added`, live), SIGSTOP
//!   (`session.changed` to unreachable), SIGCONT (back to live), SIGKILL (`changed` to gone,
//!   then `removed` as `pruned` within one interval plus the probe's deadlines, the file gone;
//!   and at its exit, through the kernel, with both paces at an hour); a door that freezes and
//!   thaws is seen by its own recheck within one `--door-recheck` while the directory pass
//!   waits an hour;
//! - every other way a session leaves: its record removed by someone else (`record_removed`),
//!   rewritten as garbage (`unreadable`), stopped through the API (`stopped`), found gone by
//!   the first listener's picture (pruned before the snapshot); a record that cannot be read
//!   keeps its session, but a death behind it is still `changed` to gone, the file kept until
//!   it reads again and is pruned;
//! - the stream's own contract: a `snapshot` first (also on reconnecting with `Last-Event-ID`),
//!   ids strictly increasing within a stream (checked on every event every test reads), the
//!   content type, the token gate, the end of every stream on shutdown;
//! - its cost: a hundred listeners get the same events with the same ids, and the number of
//!   probes a door receives does not depend on how many listen; the loop runs only while
//!   someone listens and starts again for a newcomer; a listener that never reads (a socket
//!   with a tiny receive buffer) does not hold up the others, and once it is more than 1,024
//!   events behind it is dropped, with no gap in what it did get; one that never reads keeps no
//!   superseded mid-stream snapshot alive, and reading at last skips to the latest one;
//! - many changes at once: more than half the ring's worth in one step of the loop (counting a
//!   pass's changes and the prunes after them together) come as one snapshot, and a listener
//!   that is behind keeps its place;
//! - secrets: a record's `door_token` appears in no event and no snapshot;
//! - the card: the live door's card (with an echoed token redacted), 409 with the layers'
//!   verdict for a stopped, gone, doorless or unverified session, 404, 400 and 401.
//!
//! The server passes over the directory and asks every door again every 200 ms (both
//! `--events-interval` and `--door-recheck`) and probes with 300 ms / 700 ms deadlines, so a
//! frozen door turns unreachable within about a second. The tests of each pace alone set the
//! other to an hour, so only the pace under test can explain what they see. Nothing here sleeps to synchronise: the stream
//! is read with a per-event deadline ([`EVENT_DEADLINE`]) that only bounds how long a broken
//! test takes to fail, and other states are polled under [`DEADLINE`].

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use common::server::TestServer;
use common::*;
use murmur_registry::http::AppState;
use murmur_registry::registry::Registry;
use murmur_registry::running::{DoorProbe, MURMUR_CAPSULE_EXTENSION};
use murmur_registry::test_support::monitor::{Monitor, SNAPSHOT_OVER, SubscribeError};
use reqwest::header;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How often the server under test passes over the directory, and asks every door again.
const INTERVAL: Duration = Duration::from_millis(200);
/// A pace no test waits for: whatever happens within a test happens without it.
const NEVER: Duration = Duration::from_secs(3600);
/// The probe's connection deadline.
const CONNECT: Duration = Duration::from_millis(300);
/// The probe's answer deadline: a SIGSTOPped door is unreachable after this.
const ANSWER: Duration = Duration::from_millis(700);
/// What a loaded 2-core machine may add to the time the loop itself needs to see a change.
const SCHEDULING_SLACK: Duration = Duration::from_secs(3);

// ---------------------------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------------------------

/// A registry server over its own running directory and token file, re-verifying fast.
struct Server {
    server: TestServer,
    base: String,
    token: String,
    client: reqwest::Client,
    state: AppState,
}

impl Server {
    async fn start() -> Self {
        Self::start_paced(INTERVAL, INTERVAL).await
    }

    /// A server passing over the directory every `interval` and asking each door again every
    /// `door_recheck`.
    async fn start_paced(interval: Duration, door_recheck: Duration) -> Self {
        let server = TestServer::builder()
            .probe(DoorProbe::with_deadlines(CONNECT, ANSWER))
            .events_interval(interval)
            .start()
            .await;
        // Read when the loop starts, at the first listener: before any test listens.
        server.state().events().set_door_recheck(door_recheck);
        Self {
            base: server.base().to_owned(),
            token: server.token().to_owned(),
            client: reqwest::Client::builder().no_proxy().build().unwrap(),
            state: server.state().clone(),
            server,
        }
    }

    fn dir(&self) -> &Path {
        self.server.dir()
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Open `/events` with the token; fails unless it is a 200 event stream.
    async fn events(&self) -> EventStream {
        self.events_with(self.client.get(self.url("/events"))).await
    }

    async fn events_with(&self, request: reqwest::RequestBuilder) -> EventStream {
        let response = request
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("the registry answers /events");
        EventStream::new(response, EVENT_DEADLINE)
    }

    /// Open `/events` and read its snapshot.
    async fn listen(&self) -> (EventStream, SseEvent) {
        let mut stream = self.events().await;
        let snapshot = stream.snapshot().await;
        (stream, snapshot)
    }

    /// `HEAD /events` with the token.
    async fn head_events(&self) -> reqwest::Response {
        self.client
            .head(self.url("/events"))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("the registry answers HEAD /events")
    }

    /// `GET path` with the token: status and body as JSON.
    async fn get(&self, path: &str) -> (u16, Value) {
        let response = self
            .client
            .get(self.url(path))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("the registry answers");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// The shutdown future resolves; answers `serve`'s task.
    fn shut_down(&mut self) -> tokio::task::JoinHandle<std::io::Result<()>> {
        self.server.serving().shut_down()
    }
}

// ---------------------------------------------------------------------------------------------
// Reading the stream (the reader itself is `common::sse`'s)
// ---------------------------------------------------------------------------------------------

/// `session.changed`'s new state, or the added session's state.
fn state_of(event: &SseEvent) -> &str {
    match event.name.as_str() {
        "session.changed" => event.data["new_state"].as_str().unwrap_or_default(),
        _ => event.data["session"]["liveness"]["state"]
            .as_str()
            .unwrap_or_default(),
    }
}

/// A listener that asks for `/events` over a socket with a tiny receive buffer and then reads
/// nothing, so the server's writes to it stall after a few kilobytes.
struct IdleListener {
    stream: tokio::net::TcpStream,
}

impl IdleListener {
    async fn connect(server: &Server) -> Self {
        let addr: std::net::SocketAddr = server.base.trim_start_matches("http://").parse().unwrap();
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stream = socket.connect(addr).await.unwrap();
        let request = format!(
            "GET /events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\
             Connection: close\r\n\r\n",
            server.token
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        Self { stream }
    }

    /// Read at last, until the server closes the connection; answers the events it carried.
    async fn read_to_end(mut self) -> Vec<SseEvent> {
        let mut bytes = Vec::new();
        tokio::time::timeout(DEADLINE, self.stream.read_to_end(&mut bytes))
            .await
            .expect("the server ends the connection")
            .expect("read the connection");
        let head_end = bytes
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a response head")
            + 4;
        let head = String::from_utf8_lossy(&bytes[..head_end]).to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 200"), "{head}");
        assert!(head.contains("transfer-encoding: chunked"), "{head}");
        // De-chunk: `<hex size>\r\n<bytes>\r\n`, until the body (or the bytes) end.
        let mut parser = SseParser::default();
        let mut events = Vec::new();
        let mut rest = &bytes[head_end..];
        while let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") {
            let size = std::str::from_utf8(&rest[..line_end]).unwrap();
            let size = usize::from_str_radix(size.trim(), 16).expect("a chunk size");
            let start = line_end + 2;
            if size == 0 || rest.len() < start + size {
                break;
            }
            parser.feed(&rest[start..start + size]);
            events.extend(std::iter::from_fn(|| parser.next_event()));
            rest = &rest[(start + size + 2).min(rest.len())..];
        }
        events
    }
}

/// The session ids a snapshot lists, in its order.
fn snapshot_ids(snapshot: &SseEvent) -> Vec<String> {
    snapshot.data["sessions"]
        .as_array()
        .expect("a snapshot lists sessions")
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_owned())
        .collect()
}

/// Poll `done` until it holds, failing the test with `what` after [`DEADLINE`].
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < DEADLINE,
            "gave up after {DEADLINE:?} waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn is_change_to(state: &'static str) -> impl Fn(&SseEvent) -> bool {
    move |e| e.name == "session.changed" && state_of(e) == state
}

fn is_removal(e: &SseEvent) -> bool {
    e.name == "session.removed"
}

/// Skip a changed event for `id` that is not what the test waits for (a probe answering late),
/// never an event for another session, an addition or a removal.
fn minor_change_of(id: String) -> impl Fn(&SseEvent) -> bool {
    move |e| e.name == "session.changed" && e.session_id() == id
}

/// A capsule process whose record is written after `stream` opened, announced live.
///
/// Setup, not the behaviour under test: a door slowed past the answer deadline by the machine's
/// load may make the first verdict unreachable, so a later change to live is accepted too.
async fn announced_capsule(server: &Server, stream: &mut EventStream) -> (CapsuleProcess, String) {
    let capsule = CapsuleProcess::single();
    let id = capsule.session_id();
    capsule.record().write_in(server.dir());
    let added = stream.expect_event().await;
    assert_eq!(added.name, "session.added", "{added:?}");
    assert_eq!(added.session_id(), id);
    if state_of(&added) != "live" {
        stream
            .until("live", minor_change_of(id.clone()), is_change_to("live"))
            .await;
    }
    (capsule, id)
}

// ---------------------------------------------------------------------------------------------
// A capsule's life, as events
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capsule_whose_record_appears_is_announced_added_and_live() {
    let server = Server::start().await;
    let (mut stream, snapshot) = server.listen().await;
    assert_eq!(snapshot.data, json!({"sessions": [], "unreadable": 0}));
    let capsule = CapsuleProcess::single();
    capsule.record().write_in(server.dir());

    let added = stream.expect_event().await;
    assert_eq!(added.name, "session.added");
    assert_eq!(added.session_id(), capsule.session_id());
    let session = &added.data["session"];
    assert_eq!(session["session_id"], capsule.session_id());
    assert_eq!(session["pid"], capsule.pid());
    assert_eq!(session["url"], capsule.url());
    assert_eq!(
        session["liveness"],
        json!({"state": "live", "process": "alive", "reason": null})
    );
    assert!(added.id > snapshot.id, "{added:?} after {snapshot:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigstopped_capsule_is_changed_to_unreachable() {
    let server = Server::start().await;
    let (mut stream, _) = server.listen().await;
    let (capsule, id) = announced_capsule(&server, &mut stream).await;

    capsule.send_signal(19);
    let changed = stream.expect_event().await;
    assert_eq!(changed.name, "session.changed", "{changed:?}");
    assert_eq!(changed.session_id(), id);
    assert_eq!(changed.data["old_state"], "live");
    assert_eq!(changed.data["new_state"], "unreachable");
    assert_eq!(changed.data["session"]["liveness"]["process"], "alive");
    let reason = changed.data["reason"].as_str().expect("a reason");
    assert!(reason.contains(&capsule.url()), "{reason}");
    capsule.send_signal(18);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigcontinued_capsule_is_changed_back_to_live() {
    let server = Server::start().await;
    let (mut stream, _) = server.listen().await;
    let (capsule, id) = announced_capsule(&server, &mut stream).await;
    capsule.send_signal(19);
    stream
        .until("unreachable", |_| false, is_change_to("unreachable"))
        .await;

    capsule.send_signal(18);
    let changed = stream.expect_event().await;
    assert_eq!(changed.name, "session.changed", "{changed:?}");
    assert_eq!(changed.session_id(), id);
    assert_eq!(changed.data["old_state"], "unreachable");
    assert_eq!(changed.data["new_state"], "live");
    assert_eq!(changed.data["reason"], Value::Null);
}

/// Only the door's own recheck can see it stop and start answering: the directory is passed
/// over once an hour, and nothing on disk changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_door_that_stops_and_resumes_answering_is_seen_within_one_recheck() {
    let server = Server::start_paced(NEVER, INTERVAL).await;
    let (mut stream, _) = server.listen().await;
    let (capsule, id) = announced_capsule(&server, &mut stream).await;

    capsule.send_signal(19);
    let stopped = Instant::now();
    let changed = stream.expect_event().await;
    let elapsed = stopped.elapsed();
    assert_eq!(changed.name, "session.changed", "{changed:?}");
    assert_eq!(changed.session_id(), id);
    assert_eq!(changed.data["new_state"], "unreachable");
    assert_eq!(changed.data["session"]["liveness"]["process"], "alive");
    assert!(
        elapsed < INTERVAL + CONNECT + ANSWER + SCHEDULING_SLACK,
        "unreachable {elapsed:?} after the door froze"
    );

    capsule.send_signal(18);
    let resumed = Instant::now();
    let changed = stream.expect_event().await;
    let elapsed = resumed.elapsed();
    assert_eq!(changed.name, "session.changed", "{changed:?}");
    assert_eq!(changed.session_id(), id);
    assert_eq!(changed.data["old_state"], "unreachable");
    assert_eq!(changed.data["new_state"], "live");
    assert!(
        elapsed < INTERVAL + CONNECT + ANSWER + SCHEDULING_SLACK,
        "live {elapsed:?} after the door thawed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_capsule_is_changed_to_gone_then_pruned_within_the_interval() {
    let server = Server::start().await;
    let (mut stream, _) = server.listen().await;
    let (capsule, id) = announced_capsule(&server, &mut stream).await;
    let path = server.dir().join(format!("{id}.json"));

    capsule.send_signal(9);
    let killed = Instant::now();
    // A probe already in flight may see the door refuse before layers 1-2 see the process gone.
    let gone = stream
        .until(
            "changed to gone",
            minor_change_of(id.clone()),
            is_change_to("gone"),
        )
        .await;
    assert_eq!(gone.session_id(), id);
    assert_eq!(gone.data["session"]["liveness"]["process"], "gone");
    let removed = stream.expect_event().await;
    let elapsed = killed.elapsed();
    assert_eq!(removed.name, "session.removed", "{removed:?}");
    assert_eq!(removed.session_id(), id);
    assert_eq!(removed.data["reason"], "pruned");
    let detail = removed.data["detail"].as_str().expect("the evidence");
    assert!(detail.contains(&capsule.pid().to_string()), "{detail}");
    assert!(
        elapsed < INTERVAL + CONNECT + ANSWER + SCHEDULING_SLACK,
        "removed {elapsed:?} after the kill"
    );
    assert_absent(&path);
}

/// Only the kernel's word can explain the events: the directory is passed over and the door
/// asked again once an hour, and nothing on disk changes until the prune. (Where pidfds are
/// unavailable, the registry has no exit watch and this waits for the pass: it fails.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_capsule_is_reported_gone_and_removed_at_its_exit_not_at_the_next_pass() {
    let server = Server::start_paced(NEVER, NEVER).await;
    let (mut stream, _) = server.listen().await;
    let mut capsule = CapsuleProcess::single();
    let id = capsule.session_id();
    let path = server.dir().join(format!("{id}.json"));
    capsule.record().write_in(server.dir());
    // Live, or unreachable if the loaded machine slowed its door: either way its process is
    // confirmed, which is all that matters here (no recheck would come to turn it live).
    let added = stream.expect_event().await;
    assert_eq!(added.name, "session.added", "{added:?}");
    assert_eq!(added.session_id(), id);
    assert_eq!(added.data["session"]["liveness"]["process"], "alive");

    capsule.send_signal(9);
    let gone = stream.expect_event().await;
    assert_eq!(gone.name, "session.changed", "{gone:?}");
    assert_eq!(gone.session_id(), id);
    assert_eq!(gone.data["new_state"], "gone");
    assert_eq!(gone.data["session"]["liveness"]["process"], "gone");
    let removed = stream.expect_event().await;
    assert_eq!(removed.name, "session.removed", "{removed:?}");
    assert_eq!(removed.session_id(), id);
    assert_eq!(removed.data["reason"], "pruned");
    let detail = removed.data["detail"].as_str().expect("the evidence");
    assert!(detail.contains(&capsule.pid().to_string()), "{detail}");
    assert_absent(&path);
    assert!(!capsule.is_running());
}

// ---------------------------------------------------------------------------------------------
// Other ways out
// ---------------------------------------------------------------------------------------------

/// A record naming the test process with no door: live on layers 1-2 alone, never probed.
async fn announced_doorless(server: &Server, stream: &mut EventStream) -> (RecordJson, String) {
    let record = RecordJson::fresh().no_door();
    let id = announced_live(server, stream, &record).await;
    (record, id)
}

/// `record` written, and announced `added` and live as the stream's next event; its id.
async fn announced_live(server: &Server, stream: &mut EventStream, record: &RecordJson) -> String {
    record.write_in(server.dir());
    let added = stream.expect_event().await;
    assert_eq!(added.name, "session.added", "{added:?}");
    assert_eq!(state_of(&added), "live");
    let id = record.session_id();
    assert_eq!(added.session_id(), id);
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_removed_by_someone_else_is_removed_as_record_removed() {
    let server = Server::start().await;
    let (mut stream, _) = server.listen().await;
    let (record, id) = announced_doorless(&server, &mut stream).await;

    std::fs::remove_file(server.dir().join(record.file_name())).unwrap();
    let removed = stream.expect_event().await;
    assert_eq!(removed.name, "session.removed", "{removed:?}");
    assert_eq!(
        removed.data,
        json!({"session_id": id, "reason": "record_removed", "detail": null})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_rewritten_as_garbage_is_removed_as_unreadable() {
    let server = Server::start().await;
    let (mut stream, _) = server.listen().await;
    let (record, id) = announced_doorless(&server, &mut stream).await;

    replace_by_rename(server.dir(), &record.file_name(), b"{ not a record");
    let removed = stream.expect_event().await;
    assert_eq!(removed.name, "session.removed", "{removed:?}");
    assert_eq!(removed.session_id(), id);
    assert_eq!(removed.data["reason"], "unreadable");
    // The file is left alone and counted.
    assert!(server.dir().join(record.file_name()).exists());
    let (_, snapshot) = server.listen().await;
    assert_eq!(snapshot.data, json!({"sessions": [], "unreadable": 1}));
}

/// A real process holding a Linux write lease on a record file: while it holds it, opening
/// the file with `O_NONBLOCK` (as every scan does) fails with `EWOULDBLOCK`, a read failure
/// that says nothing about what the file holds. Once a reader tried, the kernel marks the
/// lease as breaking, which the holder sees by polling the lease's state (`F_GETLEASE`) and
/// reports on stdout. Polled, not told by `SIGIO` (ignored, as its default would kill the
/// holder): with two holders at once a signal was seen to go unreported, and a test to time
/// out. [`LeaseHolder::release`] lets it go (the holder is killed on drop).
struct LeaseHolder {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl LeaseHolder {
    /// Lease `staged` (a file no one else has open), then rename it onto `onto`, so the very
    /// first scan to see the new file under the record's name fails to open it. With an empty
    /// `onto`, `staged` is the record itself, leased in place ([`LeaseHolder::take_in_place`]).
    fn take(staged: &Path, onto: &Path) -> Self {
        const SCRIPT: &str = r#"
import errno, fcntl, os, select, signal, sys
staged, onto = sys.argv[1], sys.argv[2]
signal.signal(signal.SIGIO, signal.SIG_IGN)
fd = os.open(staged, os.O_RDONLY)
while True:
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
        break
    except OSError as e:
        # A scan has the file open this instant (a write lease needs it closed elsewhere).
        if e.errno not in (errno.EAGAIN, errno.EBUSY):
            raise
if onto:
    os.rename(staged, onto)
else:
    # In place: the same mode set again moves only the change time, which is enough for the
    # scan to read the file again (and fail), while it stays the very file it read before.
    os.chmod(staged, os.stat(staged).st_mode & 0o7777)
told = False
while True:
    if not told and fcntl.fcntl(fd, fcntl.F_GETLEASE) != fcntl.F_WRLCK:
        told = True
        os.write(1, b"broken\n")
    ready, _, _ = select.select([0], [], [], 0.01)
    if ready and not os.read(0, 1):
        break
os.close(fd)
"#;
        let mut child = std::process::Command::new("python3")
            .args(["-c", SCRIPT])
            .arg(staged)
            .arg(onto)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn python3");
        let stdout = child.stdout.take().expect("the holder's stdout");
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines }
    }

    /// Lease the record file at `path` where it is (same inode, same modification time), so
    /// the next scan fails to open it.
    fn take_in_place(path: &Path) -> Self {
        Self::take(path, Path::new(""))
    }

    /// Wait (at most [`EVENT_DEADLINE`]) until a reader tried to open the file and failed:
    /// the lease was taken, the file renamed into place, and a scan came by.
    fn wait_broken(&mut self) {
        let line = self
            .lines
            .recv_timeout(EVENT_DEADLINE)
            .unwrap_or_else(|e| panic!("no reader tried the leased file: {e}"));
        assert_eq!(line, "broken");
    }

    /// Release the lease and wait for the holder to exit.
    fn release(mut self) {
        drop(self.child.stdin.take());
        let status = self.child.wait().expect("wait for the lease holder");
        assert!(status.success(), "the lease holder failed: {status}");
    }
}

impl Drop for LeaseHolder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_fails_to_read_keeps_its_session_and_is_not_counted_unreadable() {
    let server = Server::start().await;
    let (mut stream, _) = server.listen().await;
    let (record, id) = announced_doorless(&server, &mut stream).await;

    // The very same record, in a file that cannot be opened for now: no evidence of anything.
    let lease = leased_in(server.dir(), &record).await;

    // Two records added after that failed read: the second is announced by a pass strictly
    // after the one that failed to read the record, so any removal it made came first.
    announced_doorless(&server, &mut stream).await;
    announced_doorless(&server, &mut stream).await;
    let (_, snapshot) = server.listen().await;
    assert!(snapshot_ids(&snapshot).contains(&id), "{snapshot:?}");
    assert_eq!(snapshot.data["unreadable"], 0, "{snapshot:?}");

    tokio::task::spawn_blocking(move || lease.release())
        .await
        .unwrap();
}

/// `record` put in place again under a write lease, once a scan has tried to open it (and
/// failed: the lease is still held).
async fn leased_in(dir: &Path, record: &RecordJson) -> LeaseHolder {
    let staged = write_raw(dir, ".leased.tmp", record.to_bytes());
    let onto = dir.join(record.file_name());
    tokio::task::spawn_blocking(move || {
        let mut lease = LeaseHolder::take(&staged, &onto);
        lease.wait_broken();
        lease
    })
    .await
    .unwrap()
}

/// A record replaced by a new writer (another process took the session over) and not readable
/// yet: the old process's death says nothing of the session, so it is not reported gone; once
/// the file reads, the session follows the new process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_record_not_readable_yet_is_not_reported_gone_when_the_old_process_dies() {
    let server = Server::start().await;
    let (mut stream, _) = server.listen().await;
    let old = TestProcess::sleeping();
    let id = announced_live(&server, &mut stream, &old.record().no_door()).await;

    let successor = TestProcess::sleeping();
    let taken_over = successor.record().no_door().set("session_id", id.clone());
    let lease = leased_in(server.dir(), &taken_over).await;
    drop(old); // killed and reaped: no process holds its pid
    // Each record below is announced by a pass after the death; a `changed` to gone of the
    // taken-over session would come first and fail the announcement.
    announced_doorless(&server, &mut stream).await;
    announced_doorless(&server, &mut stream).await;

    tokio::task::spawn_blocking(move || lease.release())
        .await
        .unwrap();
    let followed = stream
        .until(
            "the session to follow its new process",
            |_| false,
            |event| {
                event.session_id() == id && event.data["session"]["pid"] == json!(successor.pid())
            },
        )
        .await;
    assert_ne!(state_of(&followed), "gone", "{followed:?}");
}

/// The record file of `record` leased where it is, once a scan has tried to open it (and
/// failed: the lease is still held).
async fn leased_in_place(dir: &Path, record: &RecordJson) -> LeaseHolder {
    let path = dir.join(record.file_name());
    tokio::task::spawn_blocking(move || {
        let mut lease = LeaseHolder::take_in_place(&path);
        lease.wait_broken();
        lease
    })
    .await
    .unwrap()
}

/// A session whose record file cannot be read keeps its last reading, but not past its
/// process's death: layers 1–2 still check the record last read, every pass. The file, which
/// no one can read, is left alone until it reads again; then it is pruned on that evidence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_dies_while_its_record_cannot_be_read_is_changed_to_gone_and_its_file_kept()
{
    use std::os::unix::fs::MetadataExt;
    let server = Server::start().await;
    let (mut stream, _) = server.listen().await;
    let child = TestProcess::sleeping();
    let pid = child.pid();
    let record = child.record().no_door();
    let id = announced_live(&server, &mut stream, &record).await;

    // The very same file, which cannot be opened for now; a scan failed to.
    let lease = leased_in_place(server.dir(), &record).await;
    let path = server.dir().join(record.file_name());
    // `stat` does not break a lease.
    let leased = std::fs::symlink_metadata(&path).expect("the leased record");

    drop(child);
    let killed = Instant::now();
    let gone = stream.expect_event().await;
    let elapsed = killed.elapsed();
    assert_eq!(gone.name, "session.changed", "{gone:?}");
    assert_eq!(gone.session_id(), id);
    assert_eq!(gone.data["old_state"], "live");
    assert_eq!(state_of(&gone), "gone");
    assert_eq!(gone.data["session"]["liveness"]["process"], "gone");
    let reason = gone.data["reason"].as_str().expect("the evidence");
    assert!(reason.contains(&pid.to_string()), "{reason}");
    assert!(
        elapsed < INTERVAL + SCHEDULING_SLACK,
        "changed {elapsed:?} after the kill"
    );
    // Not pruned: the file it could not read is the very one it had, untouched.
    let now = std::fs::symlink_metadata(&path).expect("the record is still there");
    assert_eq!(
        (now.ino(), now.len(), now.mtime(), now.mtime_nsec()),
        (
            leased.ino(),
            leased.len(),
            leased.mtime(),
            leased.mtime_nsec()
        )
    );
    let (_, snapshot) = server.listen().await;
    assert_eq!(states_in(&snapshot)[&id], "gone", "{snapshot:?}");
    assert_eq!(snapshot.data["unreadable"], 0, "{snapshot:?}");

    // Readable again: pruned on the evidence it now reads.
    tokio::task::spawn_blocking(move || lease.release())
        .await
        .unwrap();
    let removed = stream.expect_event().await;
    assert_eq!(removed.name, "session.removed", "{removed:?}");
    assert_eq!(removed.session_id(), id);
    assert_eq!(removed.data["reason"], "pruned");
    assert_absent(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capsule_stopped_through_the_api_is_removed_as_stopped() {
    let server = Server::start().await;
    let (mut stream, _) = server.listen().await;
    let (mut capsule, id) = announced_capsule(&server, &mut stream).await;

    let response = server
        .client
        .post(server.url(&format!("/sessions/{id}/stop?timeout=5")))
        .bearer_auth(&server.token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    capsule.wait_exit(DEADLINE);
    // The loop may see the process gone before the record goes: a change to gone comes first.
    let removed = stream
        .until("removed", minor_change_of(id.clone()), is_removal)
        .await;
    assert_eq!(removed.session_id(), id);
    assert_eq!(removed.data["reason"], "stopped", "{removed:?}");
    assert_absent(&server.dir().join(format!("{id}.json")));
}

// ---------------------------------------------------------------------------------------------
// The stream's contract
// ---------------------------------------------------------------------------------------------

/// The reader every test reads through: an event is the same wherever the chunks split it (even
/// inside a character), comments and `retry:` are no events, and the last comment is kept.
#[test]
fn the_parser_reads_an_event_split_anywhere_and_skips_comments_and_retry() {
    let stream = ":\n\nretry: 3000\n: a comment\nid: 7\nevent: session.added\n\
                  data: {\"session_id\":\"ses_é\"}\r\n\n: stream ended: why\n\n"
        .as_bytes();
    let expected = SseEvent {
        id: 7,
        name: "session.added".to_owned(),
        data: json!({"session_id": "ses_é"}),
    };
    let read = |chunks: &mut dyn Iterator<Item = &[u8]>| {
        let mut parser = SseParser::default();
        let mut events = Vec::new();
        for chunk in chunks {
            parser.feed(chunk);
            events.extend(std::iter::from_fn(|| parser.next_event()));
        }
        (events, parser.last_comment().map(str::to_owned))
    };
    let whole = (vec![expected], Some("stream ended: why".to_owned()));
    for at in 0..=stream.len() {
        let (head, tail) = stream.split_at(at);
        assert_eq!(read(&mut [head, tail].into_iter()), whole, "split at {at}");
    }
    assert_eq!(read(&mut stream.chunks(1)), whole, "byte by byte");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_event_is_a_snapshot_of_the_verified_picture() {
    let server = Server::start().await;
    let live = CapsuleProcess::single();
    live.record().write_in(server.dir());
    let doorless = RecordJson::fresh().no_door();
    doorless.write_in(server.dir());
    write_raw(server.dir(), &format!("{}.json", session_id()), b"garbage");

    let (_stream, snapshot) = server.listen().await;
    assert_eq!(snapshot.data["unreadable"], 1);
    // Newest first: the doorless record's id was handed out last.
    assert_eq!(
        snapshot_ids(&snapshot),
        [doorless.session_id(), live.session_id()]
    );
    let states: Vec<&Value> = snapshot.data["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["liveness"]["state"])
        .collect();
    assert_eq!(states, [&json!("live"), &json!("live")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gone_record_found_by_the_first_listener_is_pruned_and_left_out_of_the_snapshot() {
    let server = Server::start().await;
    let gone = ExitedChild::spawn().record().url(refused_url());
    let path = gone.write_in(server.dir());
    let live = RecordJson::fresh().no_door();
    live.write_in(server.dir());

    let (_stream, snapshot) = server.listen().await;
    assert_eq!(snapshot_ids(&snapshot), vec![live.session_id()]);
    // The prune is an event before the snapshot: the snapshot's id counts it.
    assert!(snapshot.id >= 1, "{snapshot:?}");
    assert_absent(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_of_events_answers_like_get_and_changes_nothing() {
    let server = Server::start().await;
    let gone = ExitedChild::spawn().record().url(refused_url());
    let path = gone.write_in(server.dir());
    let head = server.head_events().await;
    assert_eq!(head.status().as_u16(), 200);
    assert_eq!(
        head.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("text/event-stream")
    );
    assert_eq!(head.text().await.expect("body"), "");
    // A GET would have started the live view, which prunes the gone record at once.
    assert!(path.exists(), "a HEAD pruned a record");
    assert!(
        !server.state.events().is_running(),
        "a HEAD started the live view"
    );
    // Refused as a GET is while the directory cannot be read.
    let moved = MovedAside::take(server.dir(), false);
    let refused = server.head_events().await;
    assert_eq!(refused.status().as_u16(), 503);
    moved.put_back();
    assert_eq!(server.head_events().await.status().as_u16(), 200);
    // And while the registry shuts down, as GET is too.
    server.state.events().close();
    let closing = server.head_events().await;
    assert_eq!(closing.status().as_u16(), 503);
    let (status, problem) = server.get("/events").await;
    assert_eq!(status, 503);
    assert_eq!(
        problem["type"],
        "urn:murmur-registry:problem:events-unavailable"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_with_last_event_id_starts_with_a_snapshot_of_the_current_list() {
    let server = Server::start().await;
    let (mut first, _) = server.listen().await;
    let (_capsule, id) = announced_capsule(&server, &mut first).await;
    let (kept, kept_id) = announced_doorless(&server, &mut first).await;
    std::fs::remove_file(server.dir().join(kept.file_name())).unwrap();
    let removed = first.until("removed", |_| false, is_removal).await;
    assert_eq!(removed.session_id(), kept_id);
    let last_seen = removed.id;
    drop(first);

    let mut again = server
        .events_with(
            server
                .client
                .get(server.url("/events"))
                .header("Last-Event-ID", last_seen.to_string()),
        )
        .await;
    let snapshot = again.snapshot().await;
    assert!(snapshot.id >= last_seen, "{snapshot:?} after {last_seen}");
    assert_eq!(snapshot_ids(&snapshot), vec![id.clone()]);
    assert_eq!(snapshot.data["sessions"][0]["liveness"]["state"], "live");

    // And the stream goes on after it, ids still growing (the reader checks every one).
    let (_other, other_id) = announced_doorless(&server, &mut again).await;
    assert_ne!(other_id, id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_without_a_token_are_refused_with_401() {
    let server = Server::start().await;
    let response = server
        .client
        .get(server.url("/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
    assert_eq!(
        response.headers()[header::WWW_AUTHENTICATE],
        "Bearer realm=\"murmur-registry\""
    );
    assert!(!server.state.events().is_running(), "nobody listens");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_served_as_text_event_stream() {
    let server = Server::start().await;
    let stream = server.events().await;
    let content_type = stream.content_type();
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_open_streams_and_serve_returns() {
    let mut server = Server::start().await;
    let (mut one, _) = server.listen().await;
    let (mut two, _) = server.listen().await;

    let serving = server.shut_down();
    assert!(one.next().await.is_none(), "the first stream ends");
    assert!(two.next().await.is_none(), "the second stream ends");
    tokio::time::timeout(DEADLINE, serving)
        .await
        .expect("serve returns after the shutdown")
        .expect("the server task")
        .expect("serve ends cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_stops_when_the_last_listener_leaves_and_starts_again_for_a_new_one() {
    let server = Server::start().await;
    let monitor = server.state.events().clone();
    assert!(!monitor.is_running(), "idle before anyone listens");
    let (one, _) = server.listen().await;
    let (two, _) = server.listen().await;
    assert!(monitor.is_running());

    drop(one);
    eventually("one listener is left", || monitor.listeners() == 1).await;
    assert!(monitor.is_running(), "a listener is still there");
    drop(two);
    eventually("the loop stops", || !monitor.is_running()).await;

    let (mut back, snapshot) = server.listen().await;
    assert!(monitor.is_running(), "a new listener starts the loop");
    assert_eq!(snapshot.data["sessions"], json!([]));
    announced_doorless(&server, &mut back).await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_first_picture_failure_nobody_waited_for_is_not_handed_to_a_later_listener() {
    let home = temp_dir();
    let dir = home.path().join("running");
    let monitor = Monitor::new(Arc::new(Registry::new(&dir, DoorProbe::new())));

    // A listener starts the loop (over a directory that is not there) and leaves before the
    // loop has even run: its first picture fails with nobody waiting.
    // Polled exactly once, then dropped: on this single-threaded runtime the loop it spawned
    // cannot run before the listener is gone.
    let mut subscribing = Box::pin(monitor.subscribe());
    let polled = std::future::poll_fn(|cx| Poll::Ready(subscribing.as_mut().poll(cx))).await;
    assert!(
        polled.is_pending(),
        "the first picture cannot be ready at once"
    );
    drop(subscribing);
    assert!(monitor.is_running());
    assert_eq!(monitor.listeners(), 0);
    eventually("the loop's first picture fails", || !monitor.is_running()).await;

    // The directory is back: a later listener gets it as it is now, not the old failure.
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let subscription = monitor
        .subscribe()
        .await
        .expect("a later listener starts a new loop");
    assert!(subscription.snapshot.readings.is_empty());
    assert_eq!(subscription.snapshot.unreadable, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn a_listener_that_waited_on_a_failing_first_picture_gets_the_failure() {
    let home = temp_dir();
    let dir = home.path().join("running");
    let monitor = Monitor::new(Arc::new(Registry::new(&dir, DoorProbe::new())));
    let (one, two) = tokio::join!(monitor.subscribe(), monitor.subscribe());
    for answer in [one, two] {
        assert!(
            matches!(answer, Err(SubscribeError::Unavailable(_))),
            "{answer:?}"
        );
    }
    assert!(!monitor.is_running());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_that_finds_nothing_changed_keeps_the_snapshot_it_had() {
    let server = Server::start().await;
    let id = session_id();
    let door = DoorServer::start(DoorMode::A2aCard(id.clone()));
    RecordJson::new(&id).url(door.url()).write_in(server.dir());
    let monitor = server.state.events().clone();
    let first = monitor.subscribe().await.unwrap();
    assert_eq!(first.snapshot.readings.len(), 1);

    // A probe starts only once the one before it was answered and applied: more probes seen
    // by the door mean rechecks went by and their probes' answers were applied.
    let before = door.requests().len();
    eventually("the door is probed three times more", || {
        door.requests().len() >= before + 3
    })
    .await;
    let second = monitor.subscribe().await.unwrap();
    assert_eq!(second.snapshot.id, first.snapshot.id, "no event since");
    assert!(
        Arc::ptr_eq(&first.snapshot.readings, &second.snapshot.readings),
        "the same picture, not rebuilt: {:?}",
        second.snapshot
    );
}

// ---------------------------------------------------------------------------------------------
// A running directory that becomes unreadable
// ---------------------------------------------------------------------------------------------

/// The running directory moved aside for a test, put back when dropped (even by a failing
/// test: the server's temporary directory deletes only what is at its own path).
struct MovedAside {
    dir: std::path::PathBuf,
    aside: std::path::PathBuf,
}

impl MovedAside {
    /// Rename `dir` away; if `by_a_file`, a plain file takes its place.
    fn take(dir: &Path, by_a_file: bool) -> Self {
        let aside = dir.with_extension("aside");
        std::fs::rename(dir, &aside).expect("rename the running directory away");
        if by_a_file {
            std::fs::write(dir, b"not a directory").expect("put a file in its place");
        }
        Self {
            dir: dir.to_path_buf(),
            aside,
        }
    }

    /// Put the directory back where it was.
    fn put_back(self) {
        drop(self);
    }
}

impl Drop for MovedAside {
    fn drop(&mut self) {
        if std::fs::symlink_metadata(&self.dir).is_ok_and(|m| !m.is_dir()) {
            let _ = std::fs::remove_file(&self.dir);
        }
        let _ = std::fs::rename(&self.aside, &self.dir);
    }
}

/// The status and problem type of a `GET` answer.
fn status_and_type(answer: &(u16, Value)) -> (u16, &str) {
    (answer.0, answer.1["type"].as_str().unwrap_or_default())
}

/// With a listener following a live capsule, the running directory taken away (`by_a_file`:
/// replaced by a file): the stream ends without a word about the session, a new `/events` is
/// refused as `GET /sessions` is, and once the directory is back a new `/events` starts with
/// a snapshot in which the capsule is live.
async fn an_unreadable_directory_ends_the_stream(by_a_file: bool) {
    let server = Server::start().await;
    let (mut stream, _) = server.listen().await;
    let (capsule, id) = announced_capsule(&server, &mut stream).await;

    let moved = MovedAside::take(server.dir(), by_a_file);
    // Read to the end: `next` fails the test if the stream neither ends nor carries an event
    // within its deadline; a probe answering late may still report the capsule changing, but
    // nothing may say it went.
    while let Some(event) = stream.next().await {
        assert!(
            !is_removal(&event) && !is_change_to("gone")(&event),
            "an unreadable directory is no evidence that a session ended: {event:?}"
        );
    }
    let why = if by_a_file {
        "it is not a directory"
    } else {
        "it does not exist"
    };
    assert!(
        stream.raw().contains(&format!(
            "\n: stream ended: the running directory is unavailable: {why}; the registry answers again once it is back"
        )),
        "the last words say why:\n{}",
        stream.raw()
    );

    let unavailable = (503, "urn:murmur-registry:problem:running-dir-unavailable");
    let events = server.get("/events").await;
    assert_eq!(status_and_type(&events), unavailable, "{events:?}");
    let sessions = server.get("/sessions").await;
    assert_eq!(status_and_type(&sessions), unavailable, "{sessions:?}");
    assert_eq!(events.1["detail"], sessions.1["detail"]);

    moved.put_back();
    assert!(
        server.dir().join(capsule.record().file_name()).exists(),
        "the record is still there"
    );
    let (mut back, snapshot) = server.listen().await;
    assert_eq!(
        snapshot_ids(&snapshot),
        std::slice::from_ref(&id),
        "{snapshot:?}"
    );
    // A door slowed by the machine's load may answer the first picture's probe late.
    if snapshot.data["sessions"][0]["liveness"]["state"] != "live" {
        back.until("live", minor_change_of(id.clone()), is_change_to("live"))
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_renamed_away_ends_streams_and_refuses_new_ones_until_back() {
    an_unreadable_directory_ends_the_stream(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_replaced_by_a_file_ends_streams_and_refuses_new_ones_until_back() {
    an_unreadable_directory_ends_the_stream(true).await;
}

// ---------------------------------------------------------------------------------------------
// Many listeners, one loop
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_listeners_receive_the_same_events_with_the_same_ids() {
    let server = Server::start().await;
    let mut streams = Vec::new();
    for _ in 0..100 {
        streams.push(server.listen().await.0);
    }
    let record = RecordJson::fresh().no_door();
    record.write_in(server.dir());
    let mut readers = tokio::task::JoinSet::new();
    for mut stream in streams {
        readers.spawn(async move {
            let added = stream.expect_event().await;
            (added.id, added.name, added.data)
        });
    }
    let received: Vec<_> = readers.join_all().await;
    assert_eq!(received.len(), 100);
    let first = &received[0];
    assert_eq!(first.1, "session.added");
    assert_eq!(first.2["session_id"], record.session_id());
    for other in &received {
        assert_eq!(other, first, "every listener gets the same event");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_per_interval_do_not_grow_with_listeners() {
    let server = Server::start().await;
    let id = session_id();
    let door = DoorServer::start(DoorMode::A2aCard(id.clone()));
    RecordJson::new(&id).url(door.url()).write_in(server.dir());
    let mut streams = Vec::new();
    for _ in 0..100 {
        let (stream, snapshot) = server.listen().await;
        assert_eq!(snapshot_ids(&snapshot), vec![id.clone()]);
        streams.push(stream);
    }
    assert_eq!(server.state.events().listeners(), 100);

    // Over any window, one loop probes the door at most once per recheck, plus one probe that
    // was already in flight and one recheck at the window's edge.
    let before = door.requests().len();
    let start = Instant::now();
    let wanted = 6;
    eventually("the door is probed a few more times", || {
        door.requests().len() >= before + wanted
    })
    .await;
    let probes = door.requests().len() - before;
    let ticks = (start.elapsed().as_millis() / INTERVAL.as_millis()) as usize;
    assert!(
        probes <= ticks + 2,
        "{probes} probes in {:?} ({ticks} intervals) with 100 listeners",
        start.elapsed()
    );
    drop(streams);
}

/// Add `count` doorless records with bulky fields (each event about 8 KiB) and wait until
/// `reader` has seen every one added; then remove them all and wait until it has seen every one
/// removed. Answers the id of the last event read.
///
/// Written and removed in chunks no pass can see more than [`SNAPSHOT_OVER`] of, waiting for
/// each chunk's events, so every change comes as its own event (more at once would come as one
/// snapshot, and flood nobody).
async fn flood(server: &Server, reader: &mut EventStream, count: usize) -> u64 {
    const CHUNK: usize = SNAPSHOT_OVER / 2;
    let bulky = format!("/tmp/murmur-test/{}", "w".repeat(8 * 1024));
    let records: Vec<RecordJson> = (0..count)
        .map(|_| RecordJson::fresh().no_door().set("workdir", bulky.clone()))
        .collect();
    let mut added = std::collections::BTreeSet::new();
    for chunk in records.chunks(CHUNK) {
        for record in chunk {
            record.write_in(server.dir());
        }
        let target = added.len() + chunk.len();
        while added.len() < target {
            let event = reader.expect_event().await;
            assert_eq!(event.name, "session.added", "{}", event.session_id());
            added.insert(event.session_id().to_owned());
        }
    }
    let mut removed = std::collections::BTreeSet::new();
    let mut last = 0;
    for chunk in records.chunks(CHUNK) {
        for record in chunk {
            std::fs::remove_file(server.dir().join(record.file_name())).unwrap();
        }
        let target = removed.len() + chunk.len();
        while removed.len() < target {
            let event = reader.expect_event().await;
            assert_eq!(event.name, "session.removed", "{} {}", event.id, event.name);
            assert_eq!(event.data["reason"], "record_removed");
            removed.insert(event.session_id().to_owned());
            last = event.id;
        }
    }
    assert_eq!(added, removed);
    last
}

/// Open a reading listener and an [`IdleListener`] and wait until both count.
async fn reader_and_idle_listener(server: &Server) -> (EventStream, IdleListener) {
    let (reader, _) = server.listen().await;
    let idle = IdleListener::connect(server).await;
    let monitor = server.state.events().clone();
    eventually("both listeners count", || monitor.listeners() == 2).await;
    (reader, idle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_that_never_reads_does_not_hold_up_the_others() {
    let server = Server::start().await;
    let (mut reader, idle) = reader_and_idle_listener(&server).await;

    // 2,400 events, megabytes of them: far more than the idle listener's buffers hold.
    for _ in 0..2 {
        flood(&server, &mut reader, 600).await;
    }
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_more_than_1024_events_behind_is_dropped_and_others_go_on() {
    let server = Server::start().await;
    let (mut reader, idle) = reader_and_idle_listener(&server).await;
    let mut last = 0;
    for _ in 0..2 {
        last = flood(&server, &mut reader, 600).await;
    }

    // Reading at last, it gets what was buffered for it, then the end of its stream.
    let received = idle.read_to_end().await;
    assert_eq!(received.first().map(|e| e.name.as_str()), Some("snapshot"));
    let ids: Vec<u64> = received.iter().map(|e| e.id).collect();
    for pair in ids[1..].windows(2) {
        assert_eq!(pair[1], pair[0] + 1, "no gap before it was dropped");
    }
    let got = *ids.last().unwrap();
    assert!(
        got + 1024 < last,
        "dropped {} events behind (it had {got}, the others {last})",
        last - got
    );
    // The others are still served.
    announced_doorless(&server, &mut reader).await;
}

// ---------------------------------------------------------------------------------------------
// Many changes at once
// ---------------------------------------------------------------------------------------------

/// More sessions than the ring holds events, all naming one process (doorless, so live on
/// layers 1–2 alone, with no door to probe).
const MANY: usize = murmur_registry::test_support::monitor::EVENT_BUFFER + 76;

/// The state of every session a snapshot lists.
fn states_in(snapshot: &SseEvent) -> std::collections::HashMap<String, String> {
    snapshot.data["sessions"]
        .as_array()
        .expect("a snapshot lists sessions")
        .iter()
        .map(|s| {
            let id = s["session_id"].as_str().unwrap_or_default().to_owned();
            let state = s["liveness"]["state"].as_str().unwrap_or_default();
            (id, state.to_owned())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_changes_at_once_than_half_the_ring_come_as_one_snapshot_and_keep_listeners() {
    let server = Server::start().await;
    let child = TestProcess::sleeping();
    for _ in 0..MANY {
        child.record().no_door().write_in(server.dir());
    }
    let (mut stream, first) = server.listen().await;
    let mut known = states_in(&first);
    assert_eq!(known.len(), MANY);
    assert!(known.values().all(|state| state == "live"), "{first:?}");

    // Every session's process goes at once: a pass finds them gone (more changes than the
    // ring holds), then they are pruned. A pass the kill lands in the middle of sees only some
    // of them gone (the rest still live, to be found gone by the next pass); whichever of the
    // two passes has more than half the ring's worth of changes sends a snapshot.
    drop(child);
    let mut snapshots = Vec::new();
    let mut events = 0;
    while !known.is_empty() {
        let event = stream.next().await.unwrap_or_else(|| {
            panic!("the listener was dropped after {events} events and {snapshots:?}")
        });
        events += 1;
        match event.name.as_str() {
            "snapshot" => {
                known = states_in(&event);
                snapshots.push((event.id, known.len()));
            }
            "session.changed" => {
                assert_eq!(state_of(&event), "gone", "{event:?}");
                known.insert(event.session_id().to_owned(), "gone".to_owned());
            }
            "session.removed" => {
                assert_eq!(event.data["reason"], "pruned", "{event:?}");
                known.remove(event.session_id());
            }
            other => panic!("unexpected {other}: {event:?}"),
        }
        assert!(
            known
                .values()
                .all(|state| state == "live" || state == "gone"),
            "every session is live or gone (event {} {})",
            event.id,
            event.name
        );
    }
    assert!(
        !snapshots.is_empty(),
        "the changes came as {events} separate events, not as a snapshot"
    );
    assert!(events < MANY, "{events} events for {MANY} sessions");
    assert!(
        std::fs::read_dir(server.dir()).unwrap().next().is_none(),
        "every record was pruned"
    );

    // Still connected: the next change comes as an event, with an id after the snapshot's.
    let last = stream.last_id().expect("events had ids");
    let record = RecordJson::fresh().no_door();
    record.write_in(server.dir());
    let added = stream.expect_event().await;
    assert_eq!(added.name, "session.added", "{added:?}");
    assert_eq!(added.session_id(), record.session_id());
    assert_eq!(
        added.id,
        last + 1,
        "ids grow by one per event, a snapshot included"
    );

    // A listener arriving now gets the same picture as the one that stayed.
    let (_, now) = server.listen().await;
    assert_eq!(snapshot_ids(&now), [record.session_id()]);
    assert_eq!(now.id, added.id);
}

/// A running directory of its own (mode 0700) and a monitor over it, passing over it and asking
/// every door again every `interval`, for tests that listen at the [`Monitor`]'s level.
fn monitor_over_own_dir(interval: Duration) -> (tempfile::TempDir, std::path::PathBuf, Monitor) {
    let home = temp_dir();
    let dir = home.path().join("running");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let monitor = Monitor::new(Arc::new(Registry::new(&dir, DoorProbe::new())));
    monitor.set_interval(interval);
    monitor.set_door_recheck(interval);
    (home, dir, monitor)
}

/// Rewrite every one of `records` (its `workdir` set to `workdir`) so that no pass sees some
/// rewritten and others not: the rewritten records are written in a directory of their own,
/// which then takes the running directory's place. A pass already reading the old directory
/// reads it whole (it is set aside, never emptied); one that finds no directory in the moment
/// between the two renames takes it as no evidence of anything.
fn rewrite_all_at_once(dir: &Path, records: &[RecordJson], workdir: &str) {
    let staged = dir.with_extension("staged");
    std::fs::create_dir(&staged).unwrap();
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o700)).unwrap();
    for record in records {
        record.clone().set("workdir", workdir).write_in(&staged);
    }
    let aside = dir.with_extension(format!("aside-{}", session_id()));
    std::fs::rename(dir, aside).unwrap();
    std::fs::rename(&staged, dir).unwrap();
}

/// A listener that never reads (an HTTP client whose socket stopped draining is never polled,
/// so it never lags either) while step after step of the loop each publishes a snapshot: the
/// ring must not keep those pictures alive for it. Only the latest snapshot is, and a listener
/// that reads at last skips the dead ones (and anything between) to it, with no gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_listener_keeps_no_superseded_snapshot_alive() {
    use murmur_registry::test_support::monitor::{Next, Published};
    const SESSIONS: usize = SNAPSHOT_OVER + 88;
    const STEPS: usize = 6;
    let (_home, dir, monitor) = monitor_over_own_dir(INTERVAL);
    let child = TestProcess::sleeping();
    let records: Vec<RecordJson> = (0..SESSIONS).map(|_| child.record().no_door()).collect();
    for record in &records {
        record.write_in(&dir);
    }
    let mut stalled = monitor.subscribe().await.expect("subscribes");
    let mut behind = monitor.subscribe().await.expect("subscribes");
    assert_eq!(stalled.snapshot.readings.len(), SESSIONS);

    for step in 1..=STEPS {
        rewrite_all_at_once(&dir, &records, &format!("/tmp/murmur-test/step-{step}"));
        // Every session rewritten in one pass: one snapshot in the ring, nothing else.
        eventually("the step's snapshot is published", || {
            stalled.events.len() >= step
        })
        .await;
        assert_eq!(stalled.events.len(), step, "one snapshot per step");
    }
    assert!(monitor.is_running(), "the loop still runs");

    let mut links = Vec::new();
    while let Ok(published) = stalled.events.try_recv() {
        match published {
            Published::Snapshot(link) => links.push(link),
            Published::Event(event) => panic!("an event, not a snapshot: {event:?}"),
        }
    }
    assert_eq!(links.len(), STEPS);
    let alive: Vec<u64> = links
        .iter()
        .filter(|link| link.upgrade().is_some())
        .map(|link| link.id)
        .collect();
    let latest = links.last().unwrap().id;
    assert_eq!(
        alive,
        [latest],
        "only the latest snapshot's picture is alive, of {:?}",
        links.iter().map(|link| link.id).collect::<Vec<_>>()
    );

    // The other listener, reading at last, gets the latest picture, then what follows it.
    let Ok(Next::Snapshot(snapshot)) = behind.recv().await else {
        panic!("a snapshot first");
    };
    assert_eq!(snapshot.id, latest);
    assert_eq!(snapshot.readings.len(), SESSIONS);
    assert!(
        snapshot
            .readings
            .iter()
            .all(|r| r.record.workdir == Path::new(&format!("/tmp/murmur-test/step-{STEPS}"))),
        "the picture after the last step"
    );
    let record = RecordJson::fresh().no_door();
    record.write_in(&dir);
    let next = tokio::time::timeout(EVENT_DEADLINE, behind.recv())
        .await
        .expect("the new record is announced");
    let Ok(Next::Event(added)) = next else {
        panic!("an event: {next:?}");
    };
    assert_eq!(added.id, latest + 1, "no gap, no repeat");
    assert_eq!(added.kind.session_id(), record.session_id());
}

/// [`SNAPSHOT_OVER`] sessions whose process dies: the pass finds them gone ([`SNAPSHOT_OVER`]
/// changes, not more, so not one snapshot by themselves), then prunes them (as many removals).
/// Within one step of the loop that is more than [`SNAPSHOT_OVER`]: the removals must come as a
/// snapshot, so that a listener one event behind, which reads nothing until it is all over, is
/// still within the ring (the step put at most `SNAPSHOT_OVER + 1` entries in it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_whose_changes_and_prunes_exceed_half_the_ring_keeps_a_listener_one_behind() {
    use murmur_registry::test_support::monitor::{EventKind, Next};
    let (_home, dir, monitor) = monitor_over_own_dir(INTERVAL);
    let child = TestProcess::sleeping();
    for _ in 0..SNAPSHOT_OVER {
        child.record().no_door().write_in(&dir);
    }
    let mut listener = monitor.subscribe().await.expect("subscribes");
    let mut known: std::collections::HashSet<String> = listener
        .snapshot
        .readings
        .iter()
        .map(|r| r.record.session_id.clone())
        .collect();
    assert_eq!(known.len(), SNAPSHOT_OVER);

    // One event behind: a session of another process, announced and not read yet.
    let other = RecordJson::fresh().no_door();
    other.write_in(&dir);
    eventually("the other session is announced", || {
        listener.events.len() == 1
    })
    .await;

    // Every process of the first ones goes; the listener reads nothing until all are pruned.
    drop(child);
    eventually("every record of the dead process is pruned", || {
        std::fs::read_dir(&dir).unwrap().count() == 1
    })
    .await;
    let mut snapshots = 0;
    while known.len() != 1 || !known.contains(&other.session_id()) {
        let next = tokio::time::timeout(EVENT_DEADLINE, listener.recv())
            .await
            .unwrap_or_else(|_| panic!("no event; {} sessions known", known.len()));
        match next {
            Ok(Next::Snapshot(snapshot)) => {
                snapshots += 1;
                known = snapshot
                    .readings
                    .iter()
                    .map(|r| r.record.session_id.clone())
                    .collect();
            }
            Ok(Next::Event(event)) => match &event.kind {
                EventKind::Added(reading) => {
                    known.insert(reading.record.session_id.clone());
                }
                EventKind::Changed { .. } => {}
                EventKind::Removed { session_id, .. } => {
                    known.remove(session_id);
                }
            },
            Err(error) => panic!(
                "the listener one event behind was dropped: {error:?} ({} known)",
                known.len()
            ),
        }
    }
    assert!(
        snapshots > 0,
        "more than half the ring in one step is a snapshot"
    );
}

// ---------------------------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_door_token_appears_in_no_event_and_no_snapshot() {
    let server = Server::start().await;
    let (mut stream, _) = server.listen().await;
    // A door that accepts the record's token, and one that refuses it and quotes it back.
    let token = "door-secret-7f3a9c1e5b2d4f6a8c0e";
    let accepted = session_id();
    let accepting = DoorServer::start(DoorMode::Authenticated {
        session_id: accepted.clone(),
        token: token.to_owned(),
        rejection: Rejection::Http401,
    });
    let refused = session_id();
    let echoing = DoorServer::start(DoorMode::Authenticated {
        session_id: refused.clone(),
        token: "another-token".to_owned(),
        rejection: Rejection::EchoingJsonRpcError,
    });
    let live = RecordJson::new(&accepted)
        .url(accepting.url())
        .door_token(token);
    live.write_in(server.dir());
    RecordJson::new(&refused)
        .url(echoing.url())
        .door_token(token)
        .write_in(server.dir());
    let mut states = std::collections::BTreeMap::new();
    while states.len() < 2 {
        let added = stream.expect_event().await;
        assert_eq!(added.name, "session.added", "{added:?}");
        states.insert(added.session_id().to_owned(), state_of(&added).to_owned());
    }
    assert_eq!(states[&accepted], "live", "the token reached the door");
    assert_eq!(states[&refused], "unreachable");
    assert!(
        echoing
            .requests()
            .iter()
            .any(|r| r.header("authorization") == Some(&format!("Bearer {token}"))),
        "the refusing door was sent the token (and echoed it)"
    );
    // A rewrite (changed), a newcomer's snapshot, and a removal carry none either. Rewritten
    // as murmur does, by rename: a file rewritten in place is briefly not a record at all.
    let rewritten = live.clone().set("capsule_version", "0.2.0");
    replace_by_rename(server.dir(), &live.file_name(), rewritten.to_bytes());
    stream
        .until("changed", |_| false, |e| e.name == "session.changed")
        .await;
    let (newcomer, snapshot) = server.listen().await;
    assert_eq!(snapshot_ids(&snapshot).len(), 2);
    std::fs::remove_file(server.dir().join(live.file_name())).unwrap();
    stream.until("removed", |_| false, is_removal).await;

    for (which, raw) in [("stream", stream.raw()), ("snapshot", newcomer.raw())] {
        assert!(
            !raw.contains(token),
            "the {which} carries the token:\n{raw}"
        );
        assert!(!raw.contains("door_token"), "the {which} names door_token");
    }
}

// ---------------------------------------------------------------------------------------------
// GET /sessions/{id}/card
// ---------------------------------------------------------------------------------------------

/// An authenticated door whose extended card quotes the operator token it was sent, in a value
/// and in a key: the registry must not pass the token on.
struct EchoingCardDoor {
    url: String,
    task: tokio::task::JoinHandle<()>,
}

impl EchoingCardDoor {
    async fn start(session_id: &str, token: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = listener.local_addr().unwrap().to_string();
        let mut card = a2a_card(session_id);
        card["description"] = json!(format!("call me with Bearer {token}"));
        card["securitySchemes"] = json!({ token: {"type": "http", "scheme": "bearer"} });
        let expected = format!("authorization: bearer {}", token.to_ascii_lowercase());
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let card = card.clone();
                let expected = expected.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut chunk = [0u8; 4096];
                    // Head and the (small) JSON-RPC body; the probe sends both at once.
                    while !String::from_utf8_lossy(&request).contains("GetExtendedAgentCard") {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let request = String::from_utf8_lossy(&request).to_ascii_lowercase();
                    let body = if request.contains(&expected) {
                        json!({"jsonrpc": "2.0", "id": 1, "result": card})
                    } else {
                        json!({"jsonrpc": "2.0", "id": 1,
                               "error": {"code": -32001, "message": "unauthorized"}})
                    }
                    .to_string();
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        Self { url, task }
    }
}

impl Drop for EchoingCardDoor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn card_session_id(card: &Value) -> Option<&str> {
    card["capabilities"]["extensions"]
        .as_array()?
        .iter()
        .find(|e| e["uri"] == MURMUR_CAPSULE_EXTENSION)?["params"]["sessionId"]
        .as_str()
}

/// A 409 card refusal with its members.
fn assert_card_refused(answer: &(u16, Value), id: &str, state: &str, process: &str) {
    let (status, body) = answer;
    assert_eq!(*status, 409, "{body}");
    assert_eq!(body["status"], 409);
    assert_eq!(body["session_id"], id, "{body}");
    assert_eq!(body["state"], state, "{body}");
    assert_eq!(body["process"], process, "{body}");
    assert!(
        body["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_card_of_a_live_capsule_is_the_card_its_door_serves() {
    let server = Server::start().await;
    let capsule = CapsuleProcess::single();
    let id = capsule.session_id();
    capsule.record().write_in(server.dir());

    let (status, card) = server.get(&format!("/sessions/{id}/card")).await;
    assert_eq!(status, 200, "{card}");
    assert_eq!(card_session_id(&card), Some(id.as_str()), "{card}");
    assert_eq!(card["name"], "test-capsule");
    assert_eq!(card["protocolVersion"], "1.0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_door_token_echoed_in_an_extended_card_is_redacted() {
    let server = Server::start().await;
    let id = session_id();
    let token = "door-secret-0d1e2f3a4b5c6d7e8f90";
    let door = EchoingCardDoor::start(&id, token).await;
    RecordJson::new(&id)
        .url(door.url.clone())
        .door_token(token)
        .write_in(server.dir());

    let (status, card) = server.get(&format!("/sessions/{id}/card")).await;
    assert_eq!(status, 200, "{card}");
    assert_eq!(card_session_id(&card), Some(id.as_str()));
    let text = card.to_string();
    assert!(!text.contains(token), "the card carries the token: {text}");
    assert!(
        card["description"]
            .as_str()
            .is_some_and(|d| d.contains("[redacted]")),
        "{card}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_card_of_a_sigstopped_capsule_is_refused_as_unreachable() {
    let server = Server::start().await;
    let capsule = CapsuleProcess::single();
    let id = capsule.session_id();
    capsule.record().write_in(server.dir());
    capsule.send_signal(19);

    let answer = server.get(&format!("/sessions/{id}/card")).await;
    capsule.send_signal(18);
    assert_card_refused(&answer, &id, "unreachable", "alive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_card_of_a_gone_session_is_refused_as_gone() {
    let server = Server::start().await;
    let record = ExitedChild::spawn().record().url(refused_url());
    record.write_in(server.dir());
    let id = record.session_id();

    let answer = server.get(&format!("/sessions/{id}/card")).await;
    assert_card_refused(&answer, &id, "gone", "gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_card_of_a_session_without_a_door_is_refused() {
    let server = Server::start().await;
    let record = RecordJson::fresh().no_door();
    record.write_in(server.dir());
    let id = record.session_id();

    let answer = server.get(&format!("/sessions/{id}/card")).await;
    assert_card_refused(&answer, &id, "live", "alive");
    assert!(
        answer.1["reason"].as_str().unwrap().contains("no door"),
        "{}",
        answer.1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_card_of_an_unverified_process_is_refused_as_unreachable() {
    let server = Server::start().await;
    // The door would answer: only layers 1-2 stand in the way.
    let capsule = CapsuleProcess::single();
    let record = capsule.record().process_start("");
    record.write_in(server.dir());
    let id = record.session_id();

    let answer = server.get(&format!("/sessions/{id}/card")).await;
    assert_card_refused(&answer, &id, "unreachable", "unverified");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_card_of_an_unknown_session_is_404() {
    let server = Server::start().await;
    let (status, body) = server
        .get(&format!("/sessions/{}/card", session_id()))
        .await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["status"], 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_card_of_an_invalid_session_id_is_400() {
    let server = Server::start().await;
    let (status, body) = server.get("/sessions/not.a%20valid%20id/card").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["status"], 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_card_without_a_token_is_401() {
    let server = Server::start().await;
    let capsule = CapsuleProcess::single();
    capsule.record().write_in(server.dir());
    let response = server
        .client
        .get(server.url(&format!("/sessions/{}/card", capsule.session_id())))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
    let body = response.text().await.unwrap();
    assert!(!body.contains("test-capsule"), "{body}");
}
