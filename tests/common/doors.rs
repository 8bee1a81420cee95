//! Doors: a hand-written HTTP/1.1 server on `127.0.0.1:0` that answers as a capsule's door
//! would, or as a broken one would (silent, garbage, HTTP 500, a turned-away token), and
//! records every request it received.
//!
//! Invariant: a [`DoorServer`] answers only what its [`DoorMode`] says, and every request is
//! logged before it is answered, so a test can check what the registry sent.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use murmur_registry::running::MURMUR_CAPSULE_EXTENSION;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// The path of the public agent card.
pub const CARD_PATH: &str = "/.well-known/agent-card.json";

/// A spec-generation card: the session id at top level.
pub fn spec_card(session_id: &str) -> Value {
    json!({
        "name": "test-capsule",
        "version": "0.1.0",
        "session_id": session_id,
    })
}

/// An A2A v1.0 card naming `session_id` in the murmur capsule extension, preceded by a decoy
/// extension whose `sessionId` must not be taken.
pub fn a2a_card(session_id: &str) -> Value {
    json!({
        "protocolVersion": "1.0",
        "name": "test-capsule",
        "version": "0.1.0",
        "capabilities": {
            "streaming": true,
            "extensions": [
                {"uri": "https://example.invalid/another-extension",
                 "params": {"sessionId": "ses_decoy00000000000000000000000000"}},
                {"uri": MURMUR_CAPSULE_EXTENSION, "required": false,
                 "params": {"sessionId": session_id}},
            ],
        },
        "skills": [
            {"id": "summarize", "name": "Summarize", "description": "Shortens a text",
             "tags": ["text", "nlp"]},
            {"id": "plan", "name": "Plan"},
        ],
    })
}

/// The public card of an authenticated door: it names no session.
pub fn public_card_without_session() -> Value {
    json!({
        "protocolVersion": "1.0",
        "name": "test-capsule",
        "supportsAuthenticatedExtendedCard": true,
        "capabilities": {"extensions": [{"uri": MURMUR_CAPSULE_EXTENSION, "params": {}}]},
    })
}

/// How an authenticated door turns away a wrong or missing bearer token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// `401 Unauthorized`.
    Http401,
    /// `200` with a JSON-RPC error object.
    JsonRpcError,
    /// `200` with a JSON-RPC error whose message quotes the `Authorization` header it received
    /// (a careless door: its words must not carry the token into a reason).
    EchoingJsonRpcError,
}

/// What a [`DoorServer`] does with a request.
#[derive(Debug, Clone)]
pub enum DoorMode {
    /// `GET /.well-known/agent-card.json` answers [`spec_card`]; anything else is a 404.
    SpecCard(String),
    /// `GET /.well-known/agent-card.json` answers [`a2a_card`]; anything else is a 404.
    A2aCard(String),
    /// Accepts connections, reads the request, never answers.
    Silent,
    /// Answers `200` with a body that is not JSON.
    NotJson,
    /// Answers bytes that are not HTTP at all.
    NotHttp,
    /// Answers `500` — with a body that is a valid card for this session, so only the status
    /// can make the probe fail.
    ServerError(String),
    /// An authenticated door: `POST /` with JSON-RPC `GetExtendedAgentCard` and
    /// `Authorization: Bearer <token>` answers the [`a2a_card`] in `result`; a wrong or missing
    /// token is turned away as `rejection` says; `GET` of the public card answers
    /// [`public_card_without_session`].
    Authenticated {
        session_id: String,
        token: String,
        rejection: Rejection,
    },
    /// A murmur 0.8 door that serves `murmur.StopSession`; see [`StoppableDoor`].
    Stoppable(StoppableDoor),
    /// Answers the [`spec_card`] after a `100 Continue`, in chunks (one with an extension) and
    /// with a trailer.
    Chunked(String),
    /// Answers the [`spec_card`] as HTTP/1.0 with no length: the body ends when the door closes.
    CloseDelimited(String),
    /// `GET /.well-known/agent-card.json` answers these very bytes as JSON (a card whose
    /// numbers must reach the registry as written, which a [`Value`] would print again).
    CardText(String),
    /// Reads the request and closes the connection without a word.
    ClosesUnanswered,
    /// Reads the request and resets the connection (`SO_LINGER` 0) without a word.
    ResetsUnanswered,
}

/// How a [`StoppableDoor`] answers `murmur.StopSession`.
#[derive(Debug, Clone)]
pub enum StopAnswer {
    /// murmur 0.8's shape: `result: {session_id, canceled, residue}` for the door's session.
    Answers {
        canceled: Vec<Value>,
        residue: Vec<Value>,
    },
    /// A JSON-RPC error of its own (`-32000`, with a message the registry must not quote).
    Refuses,
    /// JSON-RPC `-32601`, method not found: a door of a generation without the method.
    MethodNotFound,
    /// Reads the call and never answers.
    Hangs,
    /// 0.8's shape, but naming another session (a door some other capsule now holds).
    ForSession(String),
    /// Kills process `pid` (SIGKILL, waiting until it is no longer running), then answers in
    /// 0.8's shape with `canceled`: a capsule that ends as soon as it is asked to stop.
    EndsThenAnswers { pid: u32, canceled: Vec<Value> },
}

/// A murmur 0.8 door: its card names `session_id` (the public [`a2a_card`]; with `token`, the
/// extended card behind that bearer token, the public one naming no session), and
/// `POST /` with `murmur.StopSession` is answered as `stop` says. With `token`, a `POST`
/// without `Authorization: Bearer <token>` gets `401`. Any other JSON-RPC method is `-32601`.
#[derive(Debug, Clone)]
pub struct StoppableDoor {
    pub session_id: String,
    pub token: Option<String>,
    pub stop: StopAnswer,
    /// Noted at each `murmur.StopSession` call: whether this process was still running.
    pub watched: Option<WatchedProcess>,
}

impl StoppableDoor {
    /// A public door for `session_id` answering `murmur.StopSession` as `stop` says.
    pub fn new(session_id: &str, stop: StopAnswer) -> Self {
        Self {
            session_id: session_id.to_owned(),
            token: None,
            stop,
            watched: None,
        }
    }

    /// The same door, authenticated with `token`.
    pub fn with_token(mut self, token: &str) -> Self {
        self.token = Some(token.to_owned());
        self
    }

    /// The same door, noting at each `murmur.StopSession` call whether `process` still runs.
    pub fn watching(mut self, process: &WatchedProcess) -> Self {
        self.watched = Some(process.clone());
        self
    }
}

/// A process a [`StoppableDoor`] looks at when it is asked to stop: a record of whether it was
/// running (in `/proc`, and not a zombie) at each call, shared with the test.
#[derive(Debug, Clone)]
pub struct WatchedProcess {
    pid: u32,
    seen: Arc<Mutex<Vec<bool>>>,
}

impl WatchedProcess {
    pub fn new(pid: u32) -> Self {
        Self {
            pid,
            seen: Arc::default(),
        }
    }

    /// At each `murmur.StopSession` call so far, whether the process was running.
    pub fn running_at_each_call(&self) -> Vec<bool> {
        self.seen.lock().expect("watch log").clone()
    }

    fn note(&self) {
        let running = super::processes::proc_state(self.pid).is_some_and(|state| state != 'Z');
        self.seen.lock().expect("watch log").push(running);
    }
}

/// Whether `request` is a JSON-RPC call of `method` (`POST /`).
pub fn is_call_of(request: &Received, method: &str) -> bool {
    request.method == "POST"
        && request.path == "/"
        && serde_json::from_str::<Value>(&request.body)
            .is_ok_and(|call| call["jsonrpc"] == "2.0" && call["method"] == method)
}

/// One request a door received.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// Header names lowercased, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Received {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A door on `127.0.0.1:<ephemeral>`, served on its own thread and runtime (so it works from
/// sync and async tests alike) until dropped. Every request is recorded before it is answered.
pub struct DoorServer {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DoorServer {
    /// A door answering at once.
    pub fn start(mode: DoorMode) -> Self {
        Self::start_slow(mode, Duration::ZERO)
    }

    /// A door that waits `delay` after reading each request before it answers.
    pub fn start_slow(mode: DoorMode, delay: Duration) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let addr = listener.local_addr().expect("local address");
        let received = Arc::new(Mutex::new(Vec::new()));
        let (shutdown, mut stop) = oneshot::channel::<()>();
        let log = Arc::clone(&received);
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("door runtime");
            runtime.block_on(async move {
                let listener = TcpListener::from_std(listener).expect("tokio listener");
                let mut connections = tokio::task::JoinSet::new();
                loop {
                    tokio::select! {
                        _ = &mut stop => break,
                        accepted = listener.accept() => {
                            if let Ok((stream, _)) = accepted {
                                let mode = mode.clone();
                                let log = Arc::clone(&log);
                                connections.spawn(serve_connection(stream, mode, delay, log));
                            }
                            while connections.try_join_next().is_some() {}
                        }
                    }
                }
                // Dropping the set aborts connections still held open (a silent door's).
            });
        });
        Self {
            addr,
            received,
            shutdown: Some(shutdown),
            thread: Some(thread),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The door as a record's `url`: `127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        self.addr.to_string()
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Received> {
        self.received.lock().expect("request log").clone()
    }
}

impl Drop for DoorServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A `127.0.0.1:<port>` where nothing listens: a port bound and released at once.
pub fn refused_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local address");
    drop(listener);
    addr.to_string()
}

async fn serve_connection(
    mut stream: TcpStream,
    mode: DoorMode,
    delay: Duration,
    log: Arc<Mutex<Vec<Received>>>,
) {
    let Some(request) = read_request(&mut stream).await else {
        return;
    };
    log.lock().expect("request log").push(request.clone());
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let answer = match answer(&mode, &request) {
        Some(answer) => answer,
        None => {
            // Silent: hold the connection open until the door shuts down.
            std::future::pending::<()>().await;
            return;
        }
    };
    if matches!(mode, DoorMode::ResetsUnanswered) {
        stream.set_zero_linger().expect("SO_LINGER 0");
        return;
    }
    let _ = stream.write_all(&answer).await;
    let _ = stream.shutdown().await;
}

/// Read one HTTP/1.1 request: the head up to the blank line, then `Content-Length` bytes.
async fn read_request(stream: &mut TcpStream) -> Option<Received> {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos;
        }
        if buf.len() > 64 * 1024 {
            return None;
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let path = request_line.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Received {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn http(status: &str, body: &[u8]) -> Vec<u8> {
    let mut answer = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(body);
    answer
}

fn ok_json(value: &Value) -> Vec<u8> {
    http("200 OK", value.to_string().as_bytes())
}

fn not_found() -> Vec<u8> {
    http("404 Not Found", br#"{"error":"not found"}"#)
}

/// The bytes a door in `mode` answers `request` with; `None` for a silent door.
fn answer(mode: &DoorMode, request: &Received) -> Option<Vec<u8>> {
    let is_card_get = request.method == "GET" && request.path == CARD_PATH;
    Some(match mode {
        DoorMode::Silent => return None,
        DoorMode::SpecCard(id) if is_card_get => ok_json(&spec_card(id)),
        DoorMode::A2aCard(id) if is_card_get => ok_json(&a2a_card(id)),
        DoorMode::SpecCard(_) | DoorMode::A2aCard(_) => not_found(),
        DoorMode::NotJson => http("200 OK", b"<html>this is not an agent card"),
        DoorMode::NotHttp => b"SSH-2.0-OpenSSH_9.6\r\n\x00\x01\x02 garbage".to_vec(),
        DoorMode::ServerError(id) => http(
            "500 Internal Server Error",
            spec_card(id).to_string().as_bytes(),
        ),
        DoorMode::Stoppable(door) => return stoppable_answer(door, request, is_card_get),
        DoorMode::Chunked(id) if is_card_get => {
            let card = spec_card(id).to_string();
            let (first, rest) = card.split_at(card.len() / 2);
            format!(
                "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                 Transfer-Encoding: chunked\r\n\r\n{:x};part=1\r\n{first}\r\n{:x}\r\n{rest}\r\n\
                 0\r\nServer-Timing: x\r\n\r\n",
                first.len(),
                rest.len()
            )
            .into_bytes()
        }
        DoorMode::CloseDelimited(id) if is_card_get => format!(
            "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{}",
            spec_card(id)
        )
        .into_bytes(),
        DoorMode::CardText(text) if is_card_get => http("200 OK", text.as_bytes()),
        DoorMode::Chunked(_) | DoorMode::CloseDelimited(_) | DoorMode::CardText(_) => not_found(),
        DoorMode::ClosesUnanswered | DoorMode::ResetsUnanswered => Vec::new(),
        DoorMode::Authenticated { .. } if is_card_get => ok_json(&public_card_without_session()),
        DoorMode::Authenticated {
            session_id,
            token,
            rejection,
        } => {
            if request.method != "POST" || request.path != "/" {
                return Some(not_found());
            }
            let call: Value = serde_json::from_str(&request.body).unwrap_or(Value::Null);
            if call["jsonrpc"] != "2.0" || call["method"] != "GetExtendedAgentCard" {
                return Some(ok_json(&json!({
                    "jsonrpc": "2.0", "id": call["id"],
                    "error": {"code": -32601, "message": "method not found"},
                })));
            }
            let presented = request.header("authorization").unwrap_or("");
            if presented == format!("Bearer {token}") {
                ok_json(
                    &json!({"jsonrpc": "2.0", "id": call["id"], "result": a2a_card(session_id)}),
                )
            } else {
                match rejection {
                    Rejection::Http401 => http("401 Unauthorized", br#"{"error":"unauthorized"}"#),
                    Rejection::JsonRpcError => ok_json(&json!({
                        "jsonrpc": "2.0", "id": call["id"],
                        "error": {"code": -32001, "message": "unauthorized"},
                    })),
                    Rejection::EchoingJsonRpcError => ok_json(&json!({
                        "jsonrpc": "2.0", "id": call["id"],
                        "error": {"code": -32001, "message": format!("bad credentials: {presented}")},
                    })),
                }
            }
        }
    })
}

/// The bytes a [`StoppableDoor`] answers `request` with; `None` when it hangs.
fn stoppable_answer(
    door: &StoppableDoor,
    request: &Received,
    is_card_get: bool,
) -> Option<Vec<u8>> {
    if is_card_get {
        return Some(match door.token {
            Some(_) => ok_json(&public_card_without_session()),
            None => ok_json(&a2a_card(&door.session_id)),
        });
    }
    if request.method != "POST" || request.path != "/" {
        return Some(not_found());
    }
    if let Some(token) = &door.token
        && request.header("authorization") != Some(format!("Bearer {token}").as_str())
    {
        return Some(http("401 Unauthorized", br#"{"error":"unauthorized"}"#));
    }
    let call: Value = serde_json::from_str(&request.body).unwrap_or(Value::Null);
    let reply = |member: &str, value: Value| {
        let mut answer = json!({"jsonrpc": "2.0", "id": call["id"]});
        answer[member] = value;
        Some(ok_json(&answer))
    };
    let method_not_found = json!({"code": -32601, "message": "method not found"});
    match call["method"].as_str() {
        Some("GetExtendedAgentCard") if door.token.is_some() => {
            reply("result", a2a_card(&door.session_id))
        }
        Some("murmur.StopSession") => {
            if let Some(watched) = &door.watched {
                watched.note();
            }
            let answered = |session_id: &str, canceled: &[Value], residue: &[Value]| json!({"session_id": session_id, "canceled": canceled, "residue": residue});
            match &door.stop {
                StopAnswer::Answers { canceled, residue } => {
                    reply("result", answered(&door.session_id, canceled, residue))
                }
                StopAnswer::ForSession(other) => {
                    reply("result", answered(other, &[json!("their-task")], &[]))
                }
                StopAnswer::Refuses => reply(
                    "error",
                    json!({"code": -32000, "message": "not now: the door says so in its own words"}),
                ),
                StopAnswer::MethodNotFound => reply("error", method_not_found),
                StopAnswer::Hangs => None,
                StopAnswer::EndsThenAnswers { pid, canceled } => {
                    let _ = std::process::Command::new("kill")
                        .args(["-9", &pid.to_string()])
                        .status();
                    let asked = std::time::Instant::now();
                    while super::processes::proc_state(*pid).is_some_and(|state| state != 'Z') {
                        assert!(
                            asked.elapsed() < super::DEADLINE,
                            "pid {pid} outlived SIGKILL"
                        );
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    reply("result", answered(&door.session_id, canceled, &[]))
                }
            }
        }
        _ => reply("error", method_not_found),
    }
}

/// `tests/fixtures/squatter.py`: a listener of another user answering as a door would.
const SQUATTER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/squatter.py");

/// A squatter on a door's port: `python3 tests/fixtures/squatter.py` run as uid/gid 65534
/// (`setpriv`, so the test must run as root) on `127.0.0.1:<ephemeral>`, answering as the door
/// of its session would (card, extended card, `murmur.StopSession`) to whoever connects, and
/// telling what each connection brought. Killed when dropped.
pub struct SquattingDoor {
    child: std::process::Child,
    port: u16,
    /// One JSON line per accepted connection: `{"bytes", "request"}`.
    lines: std::sync::mpsc::Receiver<String>,
}

impl SquattingDoor {
    /// A squatter answering as the door of `session_id`.
    pub fn start(session_id: &str) -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            // The system's interpreter: a version manager's shim under root's home is out of
            // uid 65534's reach.
            .args(["/usr/bin/python3", SQUATTER, session_id])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("setpriv python3 (the test needs root)");
        let stdout = child.stdout.take().expect("its stdout");
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let first = lines
            .recv_timeout(super::DEADLINE)
            .expect("the squatter names its port");
        let port = first.trim().parse().expect("a port");
        Self { child, port, lines }
    }

    /// Its address as a record's `url`.
    pub fn url(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// What every connection accepted so far brought (the requests' text), once at least one
    /// was accepted and closed.
    pub fn connections(&self) -> Vec<String> {
        let first = self
            .lines
            .recv_timeout(super::DEADLINE)
            .expect("a connection reached the squatter");
        std::iter::once(first)
            .chain(self.lines.try_iter())
            .map(|line| {
                let seen: Value = serde_json::from_str(&line).expect("a JSON line");
                seen["request"].as_str().expect("its text").to_owned()
            })
            .collect()
    }
}

impl Drop for SquattingDoor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
