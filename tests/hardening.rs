//! Hostile pages, hostile files and hostile load against the real server on `127.0.0.1:0`.
//!
//! Each test here pins one defence and fails when that defence is taken out (the report of
//! the hardening branch says how each was checked): the Host/Origin gate and CORS for exact
//! origins only; JSON-only bodies; the header-read timeout; the per-request timeout (408)
//! that never cuts a streaming body; the connection cap that evicts stalled sockets rather
//! than real clients; the in-flight cap (503); the cap on event streams (503), which hold no
//! in-flight place while open; a drained shutdown that refuses newcomers; a running directory
//! removed or replaced at runtime (503, then recovery); and a huge file or a FIFO among the
//! records.
//!
//! Requests that a client library would tidy up (no `Host`, an empty one) are written byte for
//! byte on a raw socket.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use common::server::{ServeTask, TestServer};
use common::*;
use murmur_registry::http::ServeLimits;
use murmur_registry::running::DoorProbe;
use murmur_registry::test_support::serve_router;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// A running server: its address, token, and how to stop it.
struct Server {
    addr: String,
    token: String,
    serving: Serving,
}

/// What is served: the registry's own app, or a router a test built.
enum Serving {
    Registry(TestServer),
    Router(ServeTask),
}

impl Server {
    /// The registry's own app under `limits`, with `allow_hosts`/`allow_origins`.
    async fn registry(
        limits: ServeLimits,
        probe: DoorProbe,
        allow_hosts: &[&str],
        allow_origins: &[&str],
    ) -> Self {
        let server = TestServer::builder()
            .limits(limits)
            .probe(probe)
            .allow_hosts(allow_hosts)
            .allow_origins(allow_origins)
            .start()
            .await;
        Self {
            addr: server.addr().to_string(),
            token: server.token().to_owned(),
            serving: Serving::Registry(server),
        }
    }

    async fn default_registry() -> Self {
        Self::registry(ServeLimits::default(), DoorProbe::new(), &[], &[]).await
    }

    /// Any router under `limits` (for handlers that block or stream on the test's say-so).
    async fn router(router: Router, limits: ServeLimits) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let serving =
            ServeTask::spawn(move |signal| serve_router(listener, router, limits, signal));
        Self {
            addr: addr.to_string(),
            token: String::new(),
            serving: Serving::Router(serving),
        }
    }

    /// The running directory of the registry's app.
    fn dir(&self) -> &Path {
        match &self.serving {
            Serving::Registry(server) => server.dir(),
            Serving::Router(_) => panic!("a bare router has no running directory"),
        }
    }

    fn serve_task(&mut self) -> &mut ServeTask {
        match &mut self.serving {
            Serving::Registry(server) => server.serving(),
            Serving::Router(task) => task,
        }
    }

    /// `GET path` with the token and a proper Host, over a fresh connection.
    async fn get(&self, path: &str) -> Raw {
        raw(
            &self.addr,
            &format!(
                "GET {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
                self.addr, self.token
            ),
        )
        .await
    }

    fn begin_shutdown(&mut self) {
        self.serve_task().begin_shutdown();
    }

    async fn shut_down(mut self) {
        let task = self.serve_task().shut_down();
        within_async("the server shuts down", task)
            .await
            .expect("join")
            .expect("serve");
    }
}

async fn within_async<F: std::future::Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(DEADLINE, future)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {DEADLINE:?}"))
}

/// An answer read off a raw socket until the server closed it.
#[derive(Debug)]
struct Raw {
    status: u16,
    head: String,
    body: String,
}

impl Raw {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name)
                .then(|| value.trim().to_owned())
        })
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    fn assert_problem(&self, status: u16, slug: &str) {
        assert_eq!(self.status, status, "{}{}", self.head, self.body);
        assert_eq!(
            self.header("content-type").as_deref(),
            Some("application/problem+json"),
            "{}",
            self.head
        );
        assert_eq!(
            self.json()["type"],
            format!("urn:murmur-registry:problem:{slug}"),
            "{}",
            self.body
        );
    }
}

/// Write `request` on a fresh connection and read the answer to the end.
async fn raw(addr: &str, request: &str) -> Raw {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request.as_bytes()).await.expect("write");
    read_answer(&mut stream).await
}

async fn read_answer(stream: &mut TcpStream) -> Raw {
    let mut bytes = Vec::new();
    within_async("the answer", stream.read_to_end(&mut bytes))
        .await
        .expect("read");
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {text:?}"));
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Raw {
        status,
        head: head.to_owned(),
        body,
    }
}

fn dechunk(mut raw: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = raw.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        raw = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// A router whose `/block` handler waits until the test releases it, announcing each entry.
fn blocking_router(entered: Arc<Notify>, release: Arc<Notify>) -> Router {
    Router::new()
        .route(
            "/block",
            get(move || {
                let entered = entered.clone();
                let release = release.clone();
                async move {
                    entered.notify_one();
                    release.notified().await;
                    "released"
                }
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
}

fn get_request(addr: &str, path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
}

// ---------------------------------------------------------------------------------------------
// Browsers: Host, Origin, CORS, content types
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebinding_hosts_an_empty_host_and_no_host_get_403_even_with_the_token() {
    let server = Server::registry(
        ServeLimits::default(),
        DoorProbe::new(),
        &["registry.internal"],
        &[],
    )
    .await;
    let token = &server.token;
    let with_host = |host: &str| {
        format!(
            "GET /sessions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        )
    };
    for host in [
        "evil.example",
        "localhost.evil.example",
        "localhost.evil.example:7420",
        "127.0.0.1.evil.example",
        "registry.internal.evil.example",
        "[::1]evil",
        "[::1].x.example",
        "[::1].x.example:7420",
        "",
    ] {
        let answer = raw(&server.addr, &with_host(host)).await;
        answer.assert_problem(403, "forbidden-host");
    }
    // No Host at all: HTTP/1.0 lets a client leave it out.
    let no_host = format!(
        "GET /sessions HTTP/1.0\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    raw(&server.addr, &no_host)
        .await
        .assert_problem(403, "forbidden-host");
    // The name the user added, and loopback, pass.
    for host in ["registry.internal", "REGISTRY.internal:7420", "localhost"] {
        let answer = raw(&server.addr, &with_host(host)).await;
        assert_eq!(answer.status, 200, "{host}: {}", answer.body);
    }
    server.shut_down().await;
}

/// Heads over a limit are answered at the connection with a problem, not hyper's empty 414 or
/// 431: a request line past 64 KiB (here also past hyper's own 65,534-byte URI limit), a head
/// past 128 KiB, more than 100 header lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_long_heads_get_a_problem_at_the_connection() {
    let server = Server::default_registry().await;
    let (addr, token) = (&server.addr, &server.token);
    let request = |target: &str, headers: &str| {
        format!(
            "GET {target} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
             {headers}Connection: close\r\n\r\n"
        )
    };
    let long_target = format!("/sessions?capsule={}", "a".repeat(70_000));
    let answer = raw(addr, &request(&long_target, "")).await;
    answer.assert_problem(414, "uri-too-long");
    assert_eq!(answer.json()["status"], 414, "{}", answer.body);

    let big = format!("X-Big: {}\r\n", "b".repeat(200_000));
    raw(addr, &request("/sessions", &big))
        .await
        .assert_problem(431, "headers-too-large");

    let many: String = (0..101).map(|n| format!("X-{n}: v\r\n")).collect();
    raw(addr, &request("/sessions", &many))
        .await
        .assert_problem(431, "headers-too-large");

    // Just within every limit: answered by the service.
    let target = format!("/sessions?capsule={}", "a".repeat(60_000));
    let fewer: String = (0..90).map(|n| format!("X-{n}: v\r\n")).collect();
    let answer = raw(addr, &request(&target, &fewer)).await;
    assert_eq!(answer.status, 200, "{}{}", answer.head, answer.body);
    server.shut_down().await;
}

/// On one kept-alive connection, a body is passed over by its length and the head after it is
/// measured from its first byte: a request whose body would be too many header lines were it
/// measured, a plain one, then one with too many header lines get 200, 200, 431.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_head_after_a_body_is_measured_from_its_first_byte() {
    let server = Server::default_registry().await;
    let (addr, token) = (&server.addr, &server.token);
    let body: String = (0..120).map(|n| format!("X-{n}: v\n")).collect();
    let with_body = format!(
        "DELETE /sessions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let plain =
        format!("GET /sessions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n");
    let many: String = (0..101).map(|n| format!("X-{n}: v\r\n")).collect();
    let over = format!("GET /sessions HTTP/1.1\r\nHost: {addr}\r\n{many}\r\n");
    let answers = raw(addr, &format!("{with_body}{plain}{over}")).await;
    let text = format!("{}\r\n\r\n{}", answers.head, answers.body);
    let statuses: Vec<&str> = text
        .match_indices("HTTP/1.1 ")
        .map(|(at, _)| &text[at + 9..at + 12])
        .collect();
    assert_eq!(statuses, ["200", "200", "431"], "{text}");
    assert!(
        text.ends_with("\"}") && text.contains("urn:murmur-registry:problem:headers-too-large"),
        "{text}"
    );

    // A chunked body has no length to pass over: its answer closes the connection.
    let chunked = format!(
        "DELETE /sessions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{{}}\r\n0\r\n\r\n"
    );
    let answer = raw(addr, &chunked).await;
    assert_eq!(answer.status, 200, "{}{}", answer.head, answer.body);
    assert_eq!(answer.header("connection").as_deref(), Some("close"));
    server.shut_down().await;
}

/// Two `Host` lines are 400 whichever comes first (RFC 9112 section 3.2): a proxy in front may
/// have judged the other one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_host_lines_get_400_whichever_comes_first() {
    let server = Server::default_registry().await;
    let token = &server.token;
    for (first, second) in [
        ("localhost", "evil.example"),
        ("evil.example", "localhost"),
        ("localhost", "localhost"),
    ] {
        let request = format!(
            "GET /sessions HTTP/1.1\r\nHost: {first}\r\nHost: {second}\r\n\
             Authorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        );
        raw(&server.addr, &request)
            .await
            .assert_problem(400, "invalid-host");
    }
    server.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_origin_gets_403_with_a_valid_token_and_cors_is_only_for_listed_origins() {
    let listed = "http://localhost:3000";
    let server = Server::registry(ServeLimits::default(), DoorProbe::new(), &[], &[listed]).await;
    let (addr, token) = (&server.addr, &server.token);
    let with_origin = |origin: &str| {
        format!(
            "GET /sessions HTTP/1.1\r\nHost: {addr}\r\nOrigin: {origin}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        )
    };
    for origin in [
        "http://evil.example",
        "null",
        "http://localhost:3000.evil.example",
        "http://localhost:3001",
        "https://localhost:3000",
        "http://localhost:3000/",
    ] {
        let answer = raw(addr, &with_origin(origin)).await;
        answer.assert_problem(403, "forbidden-origin");
        assert_eq!(answer.header("access-control-allow-origin"), None);
    }
    let allowed = raw(addr, &with_origin(listed)).await;
    assert_eq!(allowed.status, 200, "{}", allowed.body);
    assert_eq!(
        allowed.header("access-control-allow-origin").as_deref(),
        Some(listed)
    );
    // The registry's own origin (the built-in dashboard's) passes, with no CORS header.
    let port = addr.rsplit(':').next().expect("port");
    let own = raw(addr, &with_origin(&format!("http://127.0.0.1:{port}"))).await;
    assert_eq!(own.status, 200, "{}", own.body);
    assert_eq!(own.header("access-control-allow-origin"), None);
    // A preflight from a listed origin is granted; from another, refused before CORS.
    let preflight = |origin: &str| {
        format!(
            "OPTIONS /sessions/x/signal HTTP/1.1\r\nHost: {addr}\r\nOrigin: {origin}\r\n\
             Access-Control-Request-Method: POST\r\n\
             Access-Control-Request-Headers: authorization, content-type\r\nConnection: close\r\n\r\n"
        )
    };
    let granted = raw(addr, &preflight(listed)).await;
    assert_eq!(
        granted.header("access-control-allow-origin").as_deref(),
        Some(listed),
        "{}",
        granted.head
    );
    let refused = raw(addr, &preflight("http://evil.example")).await;
    refused.assert_problem(403, "forbidden-origin");
    assert_eq!(refused.header("access-control-allow-origin"), None);
    server.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_form_or_text_body_a_page_can_send_changes_anything() {
    let server = Server::default_registry().await;
    let mut capsule = TestProcess::sleeping();
    let record = capsule.record();
    record.write_in(server.dir());
    let id = record.session_id();
    // The three content types a page may send without a preflight.
    for content_type in [
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "text/plain",
    ] {
        let body = r#"{"signal":"SIGKILL"}"#;
        let request = format!(
            "POST /sessions/{id}/signal HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: {content_type}\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n{body}",
            addr = server.addr,
            token = server.token,
            len = body.len()
        );
        raw(&server.addr, &request)
            .await
            .assert_problem(415, "unsupported-media-type");
    }
    assert!(
        capsule.is_running(),
        "a form or text body signalled the capsule"
    );
    assert!(server.dir().join(record.file_name()).exists());
    server.shut_down().await;
}

// ---------------------------------------------------------------------------------------------
// Slow and many clients
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_that_never_finishes_its_head_is_closed_after_the_header_timeout() {
    let limits = ServeLimits {
        header_read_timeout: Duration::from_millis(300),
        ..ServeLimits::default()
    };
    let server = Server::default_registry_with(limits).await;
    let mut stalled = TcpStream::connect(&server.addr).await.expect("connect");
    stalled
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .expect("write");
    let started = Instant::now();
    let mut buf = Vec::new();
    // The server closes the socket; without the timeout this read never ends.
    let _ = within_async(
        "the stalled socket is closed",
        stalled.read_to_end(&mut buf),
    )
    .await;
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "closed before the timeout: {:?}",
        started.elapsed()
    );
    // A client that sends its head at once is unaffected.
    assert_eq!(server.get("/healthz").await.status, 200);
    server.shut_down().await;
}

impl Server {
    async fn default_registry_with(limits: ServeLimits) -> Self {
        Self::registry(limits, DoorProbe::new(), &[], &[]).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_not_answered_in_time_gets_408_and_its_work_is_abandoned() {
    let limits = ServeLimits {
        request_timeout: Duration::from_millis(400),
        ..ServeLimits::default()
    };
    // The real app: a liveness check of a capsule whose door reads the request and never
    // answers, under a probe that would wait far longer than the request may.
    let probe = DoorProbe::with_deadlines(Duration::from_secs(5), Duration::from_secs(30));
    let server = Server::registry(limits, probe, &[], &[]).await;
    let door = DoorServer::start(DoorMode::Silent);
    let capsule = TestProcess::sleeping();
    let record = capsule.record().url(door.url());
    record.write_in(server.dir());
    let started = Instant::now();
    let answer = server
        .get(&format!("/sessions/{}/liveness", record.session_id()))
        .await;
    answer.assert_problem(408, "request-timeout");
    assert_eq!(answer.header("connection").as_deref(), Some("close"));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // Nothing was decided on a timeout: the record stays.
    assert!(server.dir().join(record.file_name()).exists());
    server.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_body_outlives_the_request_and_header_timeouts() {
    let limits = ServeLimits {
        request_timeout: Duration::from_millis(200),
        header_read_timeout: Duration::from_millis(200),
        ..ServeLimits::default()
    };
    // Ten chunks, 100 ms apart: the body takes five times either timeout.
    let router = Router::new().route(
        "/events",
        get(|| async {
            let (tx, rx) = tokio::sync::mpsc::channel::<String>(1);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(100));
                for i in 0..10 {
                    tick.tick().await;
                    if tx.send(format!("data: {i}\n\n")).await.is_err() {
                        return;
                    }
                }
            });
            axum::body::Body::new(ChannelBody(rx))
        }),
    );
    let server = Server::router(router, limits).await;
    let answer = raw(&server.addr, &get_request(&server.addr, "/events")).await;
    assert_eq!(answer.status, 200);
    let expected: String = (0..10).map(|i| format!("data: {i}\n\n")).collect();
    assert_eq!(answer.body, expected, "the stream was cut");
    server.shut_down().await;
}

/// A response body fed chunk by chunk through a channel, like a server-sent event stream.
struct ChannelBody(tokio::sync::mpsc::Receiver<String>);

impl axum::body::HttpBody for ChannelBody {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|text| Ok(hyper::body::Frame::data(bytes::Bytes::from(text)))))
    }
}

/// Open `count` sockets to `addr`; every other one sends half a request head and stalls.
async fn stalled_sockets(addr: &str, count: usize) -> Vec<TcpStream> {
    let mut sockets = Vec::with_capacity(count);
    for i in 0..count {
        let mut socket = TcpStream::connect(addr)
            .await
            .expect("connect a stalled socket");
        if i % 2 == 0 {
            socket
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: loc")
                .await
                .expect("half a head");
        }
        sockets.push(socket);
    }
    sockets
}

async fn healthz_within_a_second(server: &Server) {
    let started = Instant::now();
    let answer = server.get("/healthz").await;
    let took = started.elapsed();
    assert_eq!(answer.status, 200, "{}{}", answer.head, answer.body);
    assert!(took < Duration::from_secs(1), "/healthz took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_stalled_sockets_do_not_keep_a_real_client_from_healthz() {
    murmur_registry::test_support::raise_open_files_limit();
    // Default limits: a thousand stalled sockets fit under the cap.
    let server = Server::default_registry().await;
    let stalled = stalled_sockets(&server.addr, 1000).await;
    healthz_within_a_second(&server).await;
    drop(stalled);
    server.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_cap_stalled_sockets_are_evicted_not_the_real_client() {
    murmur_registry::test_support::raise_open_files_limit();
    // A cap far below the flood: every newcomer past it evicts the oldest stalled socket.
    let limits = ServeLimits {
        max_connections: 64,
        ..ServeLimits::default()
    };
    let server = Server::default_registry_with(limits).await;
    let mut stalled = stalled_sockets(&server.addr, 1000).await;
    for _ in 0..3 {
        healthz_within_a_second(&server).await;
    }
    // The oldest stalled sockets were closed by the server to make room.
    let mut buf = [0u8; 64];
    let closed = within_async(
        "the oldest stalled socket is closed",
        stalled[0].read(&mut buf),
    )
    .await
    .map_or(true, |n| n == 0);
    assert!(closed, "the oldest stalled socket is still held");
    drop(stalled);
    server.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_held_connection_is_busy_a_newcomer_gets_503_at_once() {
    let entered = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let limits = ServeLimits {
        max_connections: 2,
        ..ServeLimits::default()
    };
    let server = Server::router(blocking_router(entered.clone(), release.clone()), limits).await;
    let mut busy = Vec::new();
    for _ in 0..2 {
        let mut socket = TcpStream::connect(&server.addr).await.expect("connect");
        socket
            .write_all(get_request(&server.addr, "/block").as_bytes())
            .await
            .expect("write");
        within_async("the handler is entered", entered.notified()).await;
        busy.push(socket);
    }
    let started = Instant::now();
    let shed = raw(&server.addr, &get_request(&server.addr, "/healthz")).await;
    shed.assert_problem(503, "overloaded");
    assert_eq!(shed.header("retry-after").as_deref(), Some("1"));
    assert!(started.elapsed() < Duration::from_secs(1));
    // The busy ones finish normally once released.
    release.notify_waiters();
    for mut socket in busy {
        let answer = read_answer(&mut socket).await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.body, "released");
    }
    server.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_in_flight_cap_a_request_gets_503_with_retry_after() {
    let entered = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let limits = ServeLimits {
        max_in_flight: 1,
        ..ServeLimits::default()
    };
    let server = Server::router(blocking_router(entered.clone(), release.clone()), limits).await;
    let mut first = TcpStream::connect(&server.addr).await.expect("connect");
    first
        .write_all(get_request(&server.addr, "/block").as_bytes())
        .await
        .expect("write");
    within_async("the handler is entered", entered.notified()).await;
    let shed = raw(&server.addr, &get_request(&server.addr, "/healthz")).await;
    shed.assert_problem(503, "overloaded");
    assert_eq!(shed.header("retry-after").as_deref(), Some("1"));
    release.notify_waiters();
    assert_eq!(read_answer(&mut first).await.status, 200);
    // Its place is free again.
    let after = raw(&server.addr, &get_request(&server.addr, "/healthz")).await;
    assert_eq!(after.status, 200);
    server.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_an_in_flight_request_and_refuses_new_connections() {
    let entered = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let mut server = Server::router(
        blocking_router(entered.clone(), release.clone()),
        ServeLimits::default(),
    )
    .await;
    let mut inflight = TcpStream::connect(&server.addr).await.expect("connect");
    inflight
        .write_all(get_request(&server.addr, "/block").as_bytes())
        .await
        .expect("write");
    within_async("the handler is entered", entered.notified()).await;
    // A keep-alive connection that has had its answer and sits idle is closed by the shutdown.
    let mut idle = TcpStream::connect(&server.addr)
        .await
        .expect("connect idle");
    idle.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr).as_bytes())
        .await
        .expect("write");
    let mut first_answer = Vec::new();
    within_async("the idle connection's answer", async {
        let mut buf = [0u8; 1024];
        while !first_answer.ends_with(b"\r\n\r\nok") {
            let n = idle.read(&mut buf).await.expect("read");
            assert!(n > 0, "closed before answering");
            first_answer.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    server.begin_shutdown();
    // Evidence that the listener is closed: a connection is refused.
    let addr = server.addr.clone();
    within_async("new connections are refused", async {
        while TcpStream::connect(&addr).await.is_ok() {
            tokio::task::yield_now().await;
        }
    })
    .await;
    let mut rest = Vec::new();
    within_async("the idle connection closes", idle.read_to_end(&mut rest))
        .await
        .expect("read idle");
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    let task = server.serve_task().take_task();
    assert!(
        !task.is_finished(),
        "serve returned with a request in flight"
    );
    release.notify_waiters();
    let answer = read_answer(&mut inflight).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, "released");
    within_async("serve returns", task)
        .await
        .expect("join")
        .expect("serve");
}

// ---------------------------------------------------------------------------------------------
// Event streams: never evicted, so capped, and never in flight
// ---------------------------------------------------------------------------------------------

/// Ask for `/events` with the token on a fresh connection. A stream (200) is read up to its
/// snapshot, so it is open and counted when this returns, and handed back still open; any
/// other answer is read to its end.
async fn try_stream(server: &Server) -> Result<TcpStream, Raw> {
    let mut socket = TcpStream::connect(&server.addr).await.expect("connect");
    socket
        .write_all(
            format!(
                "GET /events HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\r\n",
                server.addr, server.token
            )
            .as_bytes(),
        )
        .await
        .expect("write");
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    within_async("the head of the answer to /events", async {
        while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = socket.read(&mut buf).await.expect("read");
            assert!(n > 0, "closed mid-head: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    if !seen.starts_with(b"HTTP/1.1 200") {
        let mut rest = Vec::new();
        within_async("the rest of the answer", socket.read_to_end(&mut rest))
            .await
            .expect("read");
        seen.extend_from_slice(&rest);
        let text = String::from_utf8_lossy(&seen);
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        return Err(Raw {
            status: head
                .split(' ')
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
            head: head.to_owned(),
            body: if head
                .to_ascii_lowercase()
                .contains("transfer-encoding: chunked")
            {
                dechunk(body)
            } else {
                body.to_owned()
            },
        });
    }
    within_async("the stream's snapshot", async {
        while !String::from_utf8_lossy(&seen).contains("event: snapshot") {
            let n = socket.read(&mut buf).await.expect("read");
            assert!(
                n > 0,
                "the stream ended: {}",
                String::from_utf8_lossy(&seen)
            );
            seen.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    Ok(socket)
}

async fn open_stream(server: &Server) -> TcpStream {
    match try_stream(server).await {
        Ok(stream) => stream,
        Err(answer) => panic!("/events refused: {}{}", answer.head, answer.body),
    }
}

/// A stream, asked for again while the cap refuses it (each refusal checked), until a place
/// frees; the server notices on its own when one does, so there is no fixed wait.
async fn stream_once_a_place_frees(server: &Server, what: &str) -> TcpStream {
    within_async(what, async {
        loop {
            match try_stream(server).await {
                Ok(stream) => break stream,
                Err(answer) => {
                    answer.assert_problem(503, "too-many-event-streams");
                    tokio::task::yield_now().await;
                }
            }
        }
    })
    .await
}

/// Ordinary requests, each on a fresh connection, all answered 200.
async fn ordinary_requests_answer(server: &Server) {
    for path in ["/healthz", "/sessions", "/healthz", "/sessions"] {
        let answer = server.get(path).await;
        assert_eq!(answer.status, 200, "{path}: {}{}", answer.head, answer.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_event_stream_cap_a_stream_gets_503_and_ordinary_requests_still_answer() {
    // Without the stream cap, streams as many as the connection cap would hold every
    // connection (they are never evicted) and every newcomer would get 503.
    let limits = ServeLimits {
        max_connections: 4,
        max_event_streams: 2,
        ..ServeLimits::default()
    };
    let server = Server::default_registry_with(limits).await;
    let mut streams = Vec::new();
    let mut refused = Vec::new();
    for _ in 0..limits.max_connections {
        match try_stream(&server).await {
            Ok(stream) => streams.push(stream),
            Err(answer) => refused.push(answer),
        }
    }
    assert_eq!(streams.len(), 2, "streams past the cap were accepted");
    for answer in &refused {
        answer.assert_problem(503, "too-many-event-streams");
        assert_eq!(answer.header("retry-after").as_deref(), Some("5"));
        assert_eq!(answer.header("connection").as_deref(), Some("close"));
    }
    ordinary_requests_answer(&server).await;

    // A stream whose client leaves frees its place: a new stream gets in (no fixed wait; the
    // server notices the close on its own).
    drop(streams.pop());
    let replacement = stream_once_a_place_frees(&server, "a new stream is accepted").await;
    streams.push(replacement);
    // Still capped.
    try_stream(&server)
        .await
        .map(drop)
        .expect_err("a third stream was accepted")
        .assert_problem(503, "too-many-event-streams");
    ordinary_requests_answer(&server).await;
    // A drained shutdown still ends the open streams.
    server.shut_down().await;
    for mut stream in streams {
        let mut rest = Vec::new();
        within_async("the stream ends", stream.read_to_end(&mut rest))
            .await
            .expect("read");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_client_reads_nothing_is_closed_once_writes_stall_and_frees_its_place() {
    let limits = ServeLimits {
        max_event_streams: 1,
        write_stall_timeout: Duration::from_millis(500),
        ..ServeLimits::default()
    };
    let server = Server::default_registry_with(limits).await;
    // A snapshot of some 12 MB (200 live records with long working directories): far more
    // than the kernel buffers between the registry and a client that reads nothing.
    for _ in 0..200 {
        RecordJson::fresh()
            .no_door()
            .set("workdir", format!("/srv/{}", "w".repeat(60_000)))
            .write_in(server.dir());
    }
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .set_recv_buffer_size(4096)
        .expect("a small receive buffer");
    let mut stalled = socket
        .connect(server.addr.parse().expect("addr"))
        .await
        .expect("connect");
    stalled
        .write_all(
            format!(
                "GET /events HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\r\n",
                server.addr, server.token
            )
            .as_bytes(),
        )
        .await
        .expect("write");
    // It holds the only stream place until the registry gives up on it; then another client
    // gets its stream. Without the stall limit the place is held for as long as the socket is.
    let mut stream =
        stream_once_a_place_frees(&server, "the stalled stream's place to be freed").await;
    // The newcomer, which reads, is served its snapshot (head already read by `try_stream`).
    let mut read = 0;
    let mut buf = [0u8; 1 << 16];
    within_async("a megabyte of the newcomer's snapshot", async {
        while read < 1 << 20 {
            let n = stream.read(&mut buf).await.expect("read");
            assert!(n > 0, "the newcomer's stream ended after {read} bytes");
            read += n;
        }
    })
    .await;
    drop(stream);
    // The stalled client finds its connection closed by the registry once it reads at last.
    let mut rest = Vec::new();
    within_async(
        "the stalled connection to be closed",
        stalled.read_to_end(&mut rest),
    )
    .await
    .map(drop)
    .or_else(|e| match e.kind() {
        std::io::ErrorKind::ConnectionReset => Ok(()),
        _ => Err(e),
    })
    .expect("read the stalled connection");
    server.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_streams_hold_no_in_flight_place() {
    // Twice as many streams as requests may be in flight at once.
    let limits = ServeLimits {
        max_in_flight: 2,
        max_event_streams: 4,
        ..ServeLimits::default()
    };
    let server = Server::default_registry_with(limits).await;
    let mut streams = Vec::new();
    for _ in 0..limits.max_event_streams {
        streams.push(open_stream(&server).await);
    }
    ordinary_requests_answer(&server).await;
    drop(streams);
    server.shut_down().await;
}

// ---------------------------------------------------------------------------------------------
// Hostile files
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_dir_removed_replaced_or_opened_to_others_is_a_503_until_it_is_back() {
    let server = Server::default_registry().await;
    let capsule = TestProcess::sleeping();
    let record = capsule.record().no_door();
    record.write_in(server.dir());
    let id = record.session_id();
    let dir = server.dir().to_path_buf();
    let aside = dir.with_extension("aside");
    let paths = [
        "/sessions".to_owned(),
        "/sessions?probe=false".to_owned(),
        format!("/sessions/{id}"),
        format!("/sessions/{id}/liveness"),
    ];
    std::fs::rename(&dir, &aside).expect("move the running dir away");
    for path in &paths {
        server
            .get(path)
            .await
            .assert_problem(503, "running-dir-unavailable");
    }
    let prune = raw(
        &server.addr,
        &format!(
            "DELETE /sessions HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
            server.addr, server.token
        ),
    )
    .await;
    prune.assert_problem(503, "running-dir-unavailable");
    std::fs::write(&dir, b"not a directory").expect("a file in its place");
    for path in &paths {
        server
            .get(path)
            .await
            .assert_problem(503, "running-dir-unavailable");
    }
    std::fs::remove_file(&dir).expect("remove the file");
    std::os::unix::fs::symlink(&aside, &dir).expect("a symlink in its place");
    server
        .get("/sessions")
        .await
        .assert_problem(503, "running-dir-unavailable");
    std::fs::remove_file(&dir).expect("remove the symlink");
    std::fs::rename(&aside, &dir).expect("put the running dir back");
    // Back, but opened to others (recreated under another umask, say): refused, not repaired.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod 755");
    for path in &paths {
        let answer = server.get(path).await;
        answer.assert_problem(503, "running-dir-unavailable");
        assert!(answer.body.contains("0755"), "{}", answer.body);
    }
    assert_eq!(mode_of(&dir), 0o755, "a reader repairs nothing");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod 700");
    let listing = server.get("/sessions?probe=false").await;
    assert_eq!(listing.status, 200, "{}", listing.body);
    assert_eq!(listing.json()["sessions"][0]["session_id"], id.as_str());
    assert!(dir.join(record.file_name()).exists());
    server.shut_down().await;
}

/// Bytes this whole process has read through `read(2)`-like calls (`rchar`), sockets included.
fn process_bytes_read() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .expect("io")
        .lines()
        .find_map(|l| l.strip_prefix("rchar:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("rchar")
}

fn resident_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_mb_file_and_a_fifo_among_the_records_neither_stall_nor_bloat_the_server() {
    let server = Server::default_registry().await;
    let capsule = TestProcess::sleeping();
    let record = capsule.record().no_door();
    record.write_in(server.dir());
    // Written for real (not sparse), so reading it would cost its size in memory and time.
    let big = server
        .dir()
        .join("ses_00000000000000000000000000000b16.json");
    {
        use std::io::Write;
        let mut file = std::fs::File::create(&big).expect("create the big file");
        let block = vec![b' '; 1 << 20];
        for _ in 0..200 {
            file.write_all(&block).expect("write 1 MiB");
        }
    }
    make_fifo(&server.dir().join("x.json"));
    let before = resident_kib();
    let read_before = process_bytes_read();
    for _ in 0..5 {
        let started = Instant::now();
        let listing = server.get("/sessions?probe=false").await;
        assert_eq!(listing.status, 200, "{}", listing.body);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "listing took {:?}",
            started.elapsed()
        );
        assert_eq!(
            listing.json()["sessions"][0]["session_id"],
            record.session_id().as_str()
        );
        assert_eq!(listing.json()["unreadable"], 2, "{}", listing.body);
    }
    let one = server
        .get("/sessions/ses_00000000000000000000000000000b16")
        .await;
    one.assert_problem(404, "not-a-record");
    // Five listings of a 200 MB file would read a gigabyte; its size is judged before a read.
    let read = process_bytes_read().saturating_sub(read_before);
    assert!(read < 100 << 20, "the server read {read} bytes");
    let grown = resident_kib().saturating_sub(before);
    assert!(grown < 32 * 1024, "resident memory grew by {grown} KiB");
    server.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: chowns a record to uid 65534"]
async fn a_record_owned_by_another_user_is_never_believed_nor_acted_on() {
    let server = Server::default_registry().await;
    let mut capsule = TestProcess::sleeping();
    // A well-formed record naming a live process with its true start token, but not ours.
    let record = capsule.record().no_door();
    let path = record.write_in(server.dir());
    std::os::unix::fs::chown(&path, Some(65534), Some(65534)).expect("chown to nobody");
    let listing = server.get("/sessions?probe=false").await;
    assert_eq!(listing.status, 200, "{}", listing.body);
    assert_eq!(
        listing.json()["sessions"],
        serde_json::json!([]),
        "{}",
        listing.body
    );
    assert_eq!(listing.json()["unreadable"], 1);
    let id = record.session_id();
    server
        .get(&format!("/sessions/{id}"))
        .await
        .assert_problem(404, "not-a-record");
    let body = r#"{"signal":"SIGKILL"}"#;
    let signal = raw(
        &server.addr,
        &format!(
            "POST /sessions/{id}/signal HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n{body}",
            addr = server.addr,
            token = server.token,
            len = body.len()
        ),
    )
    .await;
    signal.assert_problem(404, "not-a-record");
    assert!(capsule.is_running(), "a foreign record's pid was signalled");
    server.shut_down().await;
}
