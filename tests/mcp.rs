//! `/mcp`, the registry as an MCP server, against the real app on `127.0.0.1:0`, real capsule
//! processes and real doors.
//!
//! Two kinds of client:
//! - The official MCP Python SDK (`mcp` on PyPI, pinned by `.ci/run` in its own virtualenv,
//!   [`SDK_VENV`]), running `tests/mcp/client.py`, for both protocol revisions: 2025-11-25
//!   (initialize, MCP sessions, `resources/subscribe`) and 2026-07-28 (`server/discover`,
//!   `subscriptions/listen`). It checks the identity and instructions, the tool catalogue and
//!   annotations, every read tool against the REST route's JSON for live capsules, a gone
//!   record, a door that hangs and a door that answers for another session, the refusals and
//!   argument errors as `isError` results, unknown tools and resources, no secret in any
//!   result, and (its own check) every result's `structuredContent` against its output schema;
//!   a reused pid is never signalled; SIGKILL is heard as `notifications/resources/updated`
//!   within a second, timed at the client. These tests are ignored by plain `cargo test` (they
//!   need the SDK's virtualenv); `.ci/run` makes it and runs them.
//! - Plain HTTP (reqwest), for what any client meets before MCP: the token (401 with
//!   `WWW-Authenticate: Bearer`), the Host and Origin gate (403), the 16 KiB limit (a 20 KiB
//!   request refused), an invalid JSON-RPC body answered by MCP, not as a problem; a client that
//!   opens 100 MCP sessions and never closes them (bounded: the oldest dropped, `/events`
//!   still served); a GET stream taking an event-stream place; shutdown ending an open stream;
//!   the fleet tools listed and answering as `/fleet/*` only with a fleet (JSON-RPC by hand);
//!   CORS for an allowed browser origin carrying its MCP session.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::server::TestServer;
use common::*;
use murmur_registry::http::ServeLimits;
use murmur_registry::running::DoorProbe;
use reqwest::{StatusCode, header};
use serde_json::{Value, json};

/// The SDK's virtualenv, as `.ci/run` makes it (under `${XDG_CACHE_HOME:-$HOME/.cache}`).
const SDK_VENV: &str = "murmur-registry-ci/mcp-2.3.0";
/// A door token written into a record: it must reach no tool result.
const DOOR_TOKEN: &str = "door-token-that-must-never-be-shown-6d1f";
/// The revision a client asks for with `initialize`.
const LEGACY: &str = "2025-11-25";

/// The Python of the SDK's virtualenv; a clear failure when `.ci/run` has not made it.
fn sdk_python() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache"));
    let python = cache.join(SDK_VENV).join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: .ci/run installs the MCP Python SDK there",
        python.display()
    );
    python
}

/// Run `scenario` of `tests/mcp/client.py` for `world`, off the runtime serving the registry;
/// fail with everything it said unless it passes.
async fn run_client(scenario: &str, world: Value) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/client.py");
    let python = sdk_python();
    let scenario = scenario.to_owned();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(script)
            .arg(&scenario)
            .arg(world.to_string())
            .output()
            .expect("run the MCP client")
    })
    .await
    .expect("the client's thread");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the MCP client failed ({}):\n{stdout}\n{stderr}",
        output.status,
    );
    // The SDK ends its 2025-11-25 session with DELETE and warns of any answer but 200 or 204.
    assert!(!stderr.contains("termination failed"), "{stderr}");
    stdout
}

/// A server whose probe gives up on a door within a second.
async fn server() -> TestServer {
    let probe = DoorProbe::with_limits(Duration::from_millis(300), Duration::from_millis(700), 64);
    TestServer::builder().probe(probe).start().await
}

fn world(server: &TestServer, mode: &str) -> Value {
    json!({ "url": server.base(), "token": server.token(), "mode": mode })
}

/// A record naming this very process, whose door is `door`.
fn own_record(session_id: &str, door: &DoorServer) -> RecordJson {
    RecordJson::new(session_id)
        .process(std::process::id(), &own_start_token())
        .url(door.url())
}

/// Live capsules (a real capsule process; a door whose card lists skills), a gone record, a
/// door that hangs (with a door token) and a door that answers for another session; then the
/// SDK's tour in `mode`.
async fn tour(mode: &str) {
    let server = server().await;
    let capsule = CapsuleProcess::single();
    capsule.record().write_in(server.dir());
    let skilled = session_id();
    let skilled_door = DoorServer::start(DoorMode::A2aCard(skilled.clone()));
    own_record(&skilled, &skilled_door).write_in(server.dir());
    let exited = ExitedChild::spawn();
    let gone = exited.record();
    gone.write_in(server.dir());
    let hangs = session_id();
    let silent = DoorServer::start(DoorMode::Silent);
    own_record(&hangs, &silent)
        .door_token(DOOR_TOKEN)
        .write_in(server.dir());
    let foreign = session_id();
    let impostor = DoorServer::start(DoorMode::A2aCard(session_id()));
    own_record(&foreign, &impostor).write_in(server.dir());
    let mut world = world(&server, mode);
    world["live"] = json!([capsule.session_id(), skilled]);
    world["skilled"] = json!(skilled);
    world["gone"] = json!(gone.session_id());
    world["hangs"] = json!(hangs);
    world["foreign"] = json!(foreign);
    world["never"] = json!(session_id());
    world["door_token"] = json!(DOOR_TOKEN);
    let said = run_client("tour", world).await;
    assert!(said.contains("ok no secret"), "{said}");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the MCP Python SDK (~/.cache/murmur-registry-ci/mcp-2.3.0), run by .ci/run"]
async fn the_sdk_tours_every_tool_and_resource_over_2025_11_25() {
    tour("legacy").await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the MCP Python SDK (~/.cache/murmur-registry-ci/mcp-2.3.0), run by .ci/run"]
async fn the_sdk_tours_every_tool_and_resource_over_2026_07_28() {
    tour("auto").await;
}

/// A record naming this test's own pid with a wrong start token: the pid changed hands, so the
/// session is gone (and its record pruned on that evidence). Nothing may be sent: were SIGKILL
/// sent, it would end this very test.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the MCP Python SDK (~/.cache/murmur-registry-ci/mcp-2.3.0), run by .ci/run"]
async fn stop_and_signal_never_reach_a_reused_pid() {
    let server = server().await;
    let me = std::process::id();
    for mode in ["legacy", "auto"] {
        for tool in ["signal_session", "stop_session"] {
            let reused = session_id();
            let record = RecordJson::new(&reused).process(me, &wrong_start_token(me));
            let file = record.write_in(server.dir());
            let mut world = world(&server, mode);
            world["reused"] = json!(reused);
            world["tool"] = json!(tool);
            run_client("reused", world).await;
            assert!(
                !file.exists(),
                "{tool}: the gone session's record is pruned"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the MCP Python SDK (~/.cache/murmur-registry-ci/mcp-2.3.0), run by .ci/run"]
async fn stop_session_stops_a_live_capsule() {
    let server = server().await;
    let mut capsule = CapsuleProcess::single();
    let file = capsule.record().write_in(server.dir());
    let mut world = world(&server, "auto");
    world["victim"] = json!(capsule.session_id());
    run_client("stop", world).await;
    capsule.wait_exit(DEADLINE);
    assert!(!file.exists(), "the record of a stopped capsule is removed");
}

/// Subscribe (each revision its own way), SIGKILL the capsule from the client, hear the update
/// within a second and the list change after it.
async fn hears_a_sigkill(mode: &str) {
    let server = server().await;
    let victim = CapsuleProcess::single();
    victim.record().write_in(server.dir());
    let mut world = world(&server, mode);
    world["victim"] = json!(victim.session_id());
    world["victim_pid"] = json!(victim.pid());
    world["never"] = json!(session_id());
    let said = run_client("subscribe", world).await;
    println!("{mode}: {said}");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the MCP Python SDK (~/.cache/murmur-registry-ci/mcp-2.3.0), run by .ci/run"]
async fn a_subscription_hears_a_sigkill_over_2025_11_25() {
    hears_a_sigkill("legacy").await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the MCP Python SDK (~/.cache/murmur-registry-ci/mcp-2.3.0), run by .ci/run"]
async fn a_subscription_hears_a_sigkill_over_2026_07_28() {
    hears_a_sigkill("auto").await;
}

// ---------------------------------------------------------------------------------------------
// Plain HTTP: the gate, the limits, the session bound
// ---------------------------------------------------------------------------------------------

fn http() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// An `initialize` request of the 2025-11-25 revision.
fn initialize() -> Value {
    json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": {},
        "clientInfo": { "name": "murmur-registry-tests", "version": "1" } } })
}

fn mcp_post(server: &TestServer, body: impl Into<reqwest::Body>) -> reqwest::RequestBuilder {
    http()
        .post(format!("{}/mcp", server.base()))
        .bearer_auth(server.token())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .body(body)
}

#[tokio::test]
async fn mcp_keeps_the_token_host_origin_and_body_rules_of_every_route() {
    let server = TestServer::start().await;
    let url = format!("{}/mcp", server.base());
    let body = initialize().to_string();
    let anonymous = http().post(&url).body(body.clone()).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let challenge = anonymous.headers()[header::WWW_AUTHENTICATE]
        .to_str()
        .unwrap();
    assert!(challenge.starts_with("Bearer "), "{challenge}");
    let wrong = http().get(&url).bearer_auth("0".repeat(64)).send().await;
    assert_eq!(wrong.unwrap().status(), StatusCode::UNAUTHORIZED);
    let host = mcp_post(&server, body.clone()).header(header::HOST, "evil.example");
    assert_eq!(host.send().await.unwrap().status(), StatusCode::FORBIDDEN);
    let origin = mcp_post(&server, body.clone()).header(header::ORIGIN, "http://evil.example");
    assert_eq!(origin.send().await.unwrap().status(), StatusCode::FORBIDDEN);
    let mut big = initialize();
    big["params"]["clientInfo"]["name"] = json!("x".repeat(20 * 1024));
    let big = mcp_post(&server, big.to_string()).send().await.unwrap();
    assert_eq!(big.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // Not JSON-RPC at all: MCP's own answer, not reshaped into a problem.
    let garbled = mcp_post(&server, "{").send().await.unwrap();
    assert!(garbled.status().is_client_error(), "{}", garbled.status());
    let kind = garbled.headers().get(header::CONTENT_TYPE);
    assert!(
        kind.is_none_or(|kind| !kind.to_str().unwrap().contains("problem")),
        "{kind:?}"
    );
    let fine = mcp_post(&server, body).send().await.unwrap();
    assert_eq!(fine.status(), StatusCode::OK);
    assert!(fine.headers().contains_key("mcp-session-id"));
}

/// Open an MCP session and read its `initialize` answer whole; its id.
/// `GET /events` with the token: its answer, stream open or refused.
async fn open_events(server: &TestServer) -> reqwest::Response {
    http()
        .get(format!("{}/events", server.base()))
        .bearer_auth(server.token())
        .send()
        .await
        .unwrap()
}

/// `GET /mcp` for MCP session `id` (2025-11-25): its answer, stream open or refused.
async fn open_mcp_stream(server: &TestServer, id: &str) -> reqwest::Response {
    http()
        .get(format!("{}/mcp", server.base()))
        .bearer_auth(server.token())
        .header(header::ACCEPT, "text/event-stream")
        .header("mcp-session-id", id)
        .header("mcp-protocol-version", LEGACY)
        .send()
        .await
        .unwrap()
}

async fn open_session(server: &TestServer) -> String {
    let answer = mcp_post(server, initialize().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    let id = answer.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let text = answer.text().await.unwrap();
    assert!(text.contains("murmur-registry"), "{text}");
    id
}

/// Whether the session `id` still exists: a notification to it is accepted, or 404.
async fn session_exists(server: &TestServer, id: &str) -> bool {
    let note = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    let answer = mcp_post(server, note.to_string())
        .header("mcp-session-id", id)
        .header("mcp-protocol-version", LEGACY)
        .send()
        .await
        .unwrap();
    match answer.status() {
        StatusCode::NOT_FOUND => false,
        status if status.is_success() => true,
        status => panic!("{status} for a notification to session {id}"),
    }
}

#[tokio::test]
async fn a_hundred_unclosed_mcp_sessions_keep_the_newest_32_and_events_served() {
    let server = TestServer::start().await;
    let mut ids = Vec::new();
    for _ in 0..100 {
        ids.push(open_session(&server).await);
    }
    let mut kept = Vec::new();
    for id in &ids {
        kept.push(session_exists(&server, id).await);
    }
    let count = kept.iter().filter(|kept| **kept).count();
    assert_eq!(
        count, 32,
        "--max-mcp-sessions' default bounds them: {kept:?}"
    );
    assert!(
        kept[68..].iter().all(|kept| *kept),
        "the newest are kept: {kept:?}"
    );
    let events = open_events(&server).await;
    assert_eq!(events.status(), StatusCode::OK);
}

#[tokio::test]
async fn an_mcp_get_stream_takes_an_event_stream_place() {
    let limits = ServeLimits {
        max_event_streams: 1,
        ..ServeLimits::default()
    };
    let server = TestServer::builder().limits(limits).start().await;
    let id = open_session(&server).await;
    let stream = open_mcp_stream(&server, &id).await;
    assert_eq!(stream.status(), StatusCode::OK);
    let events = open_events(&server).await;
    assert_eq!(events.status(), StatusCode::SERVICE_UNAVAILABLE);
    drop(stream);
    events_served_again(&server).await;
}

/// The revision whose streams are `subscriptions/listen` requests.
const MODERN: &str = "2026-07-28";

/// A 2026-07-28 `subscriptions/listen` for the list's changes.
fn listen_body() -> String {
    json!({ "jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
        "params": { "notifications": { "resourcesListChanged": true }, "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientInfo": { "name": "murmur-registry-tests", "version": "1" },
            "io.modelcontextprotocol/clientCapabilities": {} } } })
    .to_string()
}

/// [`listen_body`] to `server`, with the headers the revision asks for.
fn listen(server: &TestServer) -> reqwest::RequestBuilder {
    mcp_post(server, listen_body())
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", "subscriptions/listen")
}

/// Read `stream` until `wanted` has arrived; everything read.
async fn read_until(stream: &mut reqwest::Response, wanted: &str) -> String {
    let mut seen = String::new();
    while !seen.contains(wanted) {
        let chunk = tokio::time::timeout(DEADLINE, stream.chunk())
            .await
            .unwrap_or_else(|_| panic!("no {wanted} in {seen:?}"))
            .unwrap();
        let Some(chunk) = chunk else {
            panic!("the stream ended without {wanted}: {seen:?}");
        };
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    seen
}

#[tokio::test]
async fn a_subscriptions_listen_stream_takes_an_event_stream_place() {
    let limits = ServeLimits {
        max_event_streams: 1,
        ..ServeLimits::default()
    };
    let server = TestServer::builder().limits(limits).start().await;
    let mut stream = listen(&server).send().await.unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    read_until(&mut stream, "notifications/subscriptions/acknowledged").await;
    let events = open_events(&server).await;
    assert_eq!(events.status(), StatusCode::SERVICE_UNAVAILABLE);
    let second = listen(&server).send().await.unwrap();
    assert_eq!(second.status(), StatusCode::SERVICE_UNAVAILABLE);
    drop(stream);
    events_served_again(&server).await;
}

/// A listen that reaches `/mcp` without an event-stream place (here served past the accept
/// loop, which takes one for each) is refused, never streamed uncounted.
#[tokio::test]
async fn a_listen_holding_no_stream_place_is_refused() {
    let server = TestServer::start().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bypass = listener.local_addr().unwrap();
    let app = murmur_registry::http::app(server.state().clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let answer = http()
        .post(format!("http://{bypass}/mcp"))
        // The app's Host check knows the server's own address.
        .header(header::HOST, server.addr().to_string())
        .bearer_auth(server.token())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", "subscriptions/listen")
        .body(listen_body())
        .send()
        .await
        .unwrap();
    let text = tokio::time::timeout(DEADLINE, answer.text())
        .await
        .expect("the refusal ends the stream")
        .unwrap();
    assert!(text.contains("-32020"), "{text}");
    assert!(text.contains("--max-event-streams"), "{text}");
}

/// A body typed JSON that is not a JSON-RPC message gets 400 with JSON-RPC's error (no `id`),
/// as MCP's transport asks of input it cannot accept; another media type keeps HTTP's 415.
#[tokio::test]
async fn a_body_that_is_not_json_rpc_gets_400_with_the_json_rpc_error() {
    let server = TestServer::start().await;
    for (body, code) in [
        ("{", -32700),
        ("[1, 2]", -32600),
        (r#"{"hello":"x"}"#, -32600),
    ] {
        let answer = mcp_post(&server, body).send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::BAD_REQUEST, "{body}");
        let kind = answer.headers()[header::CONTENT_TYPE].to_str().unwrap();
        assert_eq!(kind, "application/json", "{body}");
        let error: Value = serde_json::from_slice(&answer.bytes().await.unwrap()).unwrap();
        assert_eq!(
            (&error["jsonrpc"], &error["id"]),
            (&json!("2.0"), &Value::Null)
        );
        assert_eq!(error["error"]["code"], code, "{body}: {error}");
    }
    let typed = http()
        .post(format!("{}/mcp", server.base()))
        .bearer_auth(server.token())
        .header(header::CONTENT_TYPE, "text/plain")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .body(initialize().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(typed.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // A JSON-RPC message still reaches rmcp whole.
    assert!(!open_session(&server).await.is_empty());
}

/// `/events` answers again once the MCP stream's place is free.
async fn events_served_again(server: &TestServer) {
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let events = open_events(server).await;
        if events.status() == StatusCode::OK {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the MCP stream's place was not freed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Shutdown ends MCP's streams with the rest: an open `GET /mcp` stream does not hold the
/// server for its shutdown grace (30 s, beyond the deadline).
#[tokio::test]
async fn shutdown_ends_an_open_mcp_stream() {
    let server = TestServer::start().await;
    let id = open_session(&server).await;
    let stream = open_mcp_stream(&server, &id).await;
    assert_eq!(stream.status(), StatusCode::OK);
    let reading = tokio::spawn(async move { stream.text().await });
    tokio::time::timeout(DEADLINE, server.shut_down_and_wait())
        .await
        .expect("shutdown waits for no MCP stream")
        .expect("a clean shutdown");
    // Ended by the server, cleanly or cut: either way it no longer holds the connection.
    let _ended = tokio::time::timeout(DEADLINE, reading)
        .await
        .expect("the stream ended")
        .expect("the reader's task");
}

/// One MCP session of the 2025-11-25 revision spoken by hand: each request's JSON-RPC answer.
struct HandSession<'a> {
    server: &'a TestServer,
    id: String,
}

impl<'a> HandSession<'a> {
    async fn open(server: &'a TestServer) -> Self {
        let id = open_session(server).await;
        let session = Self { server, id };
        let note = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
        session.post(note).await;
        session
    }

    async fn post(&self, message: Value) -> String {
        let answer = mcp_post(self.server, message.to_string())
            .header("mcp-session-id", &self.id)
            .header("mcp-protocol-version", LEGACY)
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{}", answer.status());
        answer.text().await.unwrap()
    }

    /// `method` with `params`: the JSON-RPC answer (from the response's event stream).
    async fn call(&self, method: &str, params: Value) -> Value {
        let request = json!({ "jsonrpc": "2.0", "id": 7, "method": method, "params": params });
        let text = self.post(request).await;
        text.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .find(|message| message["id"] == 7)
            .unwrap_or_else(|| panic!("no answer to {method} in {text:?}"))
    }
}

async fn rest_json(server: &TestServer, path: &str) -> Value {
    let answer = http()
        .get(format!("{}{path}", server.base()))
        .bearer_auth(server.token())
        .send()
        .await
        .unwrap();
    serde_json::from_slice(&answer.bytes().await.unwrap()).unwrap()
}

fn tool_names(listing: &Value) -> Vec<String> {
    listing["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap().to_owned())
        .collect()
}

/// With a fleet the fleet tools are listed and answer what `/fleet/*` answers; without one they
/// are neither listed nor callable.
#[tokio::test]
async fn the_fleet_tools_exist_only_with_a_fleet_and_answer_as_the_fleet_routes() {
    use murmur_registry::test_support::fleet::FleetView;
    use murmur_registry::test_support::fleet::cache::FleetCache;
    use murmur_registry::test_support::fleet::keys::FleetKeys;
    let view = FleetView::new("a".parse().expect("a host id"));
    let host =
        br#"{"host_id":"a","version":"1","started_at":"2026-12-01T00:00:00Z","registry_url":null}"#;
    let (cache, _) = FleetCache::read(FleetKeys::new("/p"), 1, [(&b"/p/hosts/a"[..], &host[..])]);
    view.read(cache);
    let server = TestServer::builder().fleet(view).start().await;
    let session = HandSession::open(&server).await;
    let names = tool_names(&session.call("tools/list", json!({})).await);
    assert!(
        names.ends_with(&["fleet_sessions".to_owned(), "fleet_hosts".to_owned()]),
        "{names:?}"
    );
    for (tool, arguments, path) in [
        ("fleet_hosts", json!({}), "/fleet/hosts"),
        (
            "fleet_sessions",
            json!({ "host": ["a"] }),
            "/fleet/sessions?host=a",
        ),
    ] {
        let call = json!({ "name": tool, "arguments": arguments });
        let answer = session.call("tools/call", call).await;
        let result = &answer["result"];
        assert_eq!(result["isError"], false, "{answer}");
        assert_eq!(
            result["structuredContent"],
            rest_json(&server, path).await,
            "{tool}"
        );
    }
    let alone = TestServer::start().await;
    let session = HandSession::open(&alone).await;
    let names = tool_names(&session.call("tools/list", json!({})).await);
    assert!(
        !names.iter().any(|name| name.starts_with("fleet_")),
        "{names:?}"
    );
    let call = json!({ "name": "fleet_hosts", "arguments": {} });
    let answer = session.call("tools/call", call).await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
}

/// A browser client of an origin given with `--allow-origin` may name its MCP session and read
/// the header that gives it; CORS grants nothing to any other origin.
#[tokio::test]
async fn cors_lets_an_allowed_browser_origin_carry_its_mcp_session() {
    let server = TestServer::builder()
        .allow_origins(&["http://app.example"])
        .start()
        .await;
    let preflight = http()
        .request(reqwest::Method::OPTIONS, format!("{}/mcp", server.base()))
        .header(header::ORIGIN, "http://app.example")
        .header(header::ACCESS_CONTROL_REQUEST_METHOD, "POST")
        .header(
            header::ACCESS_CONTROL_REQUEST_HEADERS,
            "authorization, content-type, mcp-session-id, mcp-protocol-version",
        )
        .send()
        .await
        .unwrap();
    let allowed = preflight.headers()[header::ACCESS_CONTROL_ALLOW_HEADERS]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(allowed.contains("mcp-session-id"), "{allowed}");
    assert!(allowed.contains("mcp-protocol-version"), "{allowed}");
    let opened = mcp_post(&server, initialize().to_string())
        .header(header::ORIGIN, "http://app.example")
        .send()
        .await
        .unwrap();
    assert_eq!(opened.status(), StatusCode::OK);
    let exposed = opened.headers()[header::ACCESS_CONTROL_EXPOSE_HEADERS]
        .to_str()
        .unwrap();
    assert!(exposed.contains("mcp-session-id"), "{exposed}");
}

/// The fleet tools against a real etcd (feature `fleet`, `/usr/bin/etcd`): another host's
/// entries put under their lease as its registry would, this registry's view fed by the real
/// watcher.
#[cfg(feature = "fleet")]
mod with_etcd {
    use super::*;
    use common::etcd::Etcd;
    use etcd_client::PutOptions;
    use murmur_registry::test_support::fleet::etcd::EtcdSettings;
    use murmur_registry::test_support::fleet::keys::FleetKeys;
    use murmur_registry::test_support::fleet::{FleetView, HostId, watcher};

    const PREFIX: &str = "/test/mcp";

    /// Host `b` with a live and an unreachable session, as its registry publishes them.
    async fn publish_host_b(etcd: &Etcd) {
        let mut client = etcd.client().await;
        let keys = FleetKeys::new(PREFIX);
        let b: HostId = "b".parse().expect("a host id");
        let lease = client.lease_grant(60, None).await.expect("a lease").id();
        let host = json!({"host_id": "b", "version": "1",
            "started_at": "2026-12-01T00:00:00Z", "registry_url": null});
        let under_lease = || Some(PutOptions::new().with_lease(lease));
        client
            .put(keys.host(&b), host.to_string(), under_lease())
            .await
            .expect("put the host");
        for (session_id, state) in [("ses_b1", "live"), ("ses_b2", "unreachable")] {
            let entry = json!({
                "host_id": "b", "changed_at": "2026-12-01T00:00:00Z",
                "door_scope": "network", "skills": [{"id": "plan", "tags": []}],
                "session_id": session_id, "url": "10.0.0.2:4000", "pid": 7,
                "process_start": "1", "capsule_name": "c", "capsule_version": "1",
                "workdir": "/w", "outlives_launcher": false,
                "started_at": "2026-12-01T00:00:00Z",
                "liveness": {"state": state, "process": "alive", "reason": null}
            });
            client
                .put(
                    keys.session(&b, session_id),
                    entry.to_string(),
                    under_lease(),
                )
                .await
                .expect("put a session");
        }
    }

    /// With the fleet on a real etcd, `fleet_sessions` and `fleet_hosts` are listed and their
    /// `structuredContent` is exactly what `/fleet/sessions` and `/fleet/hosts` answer, filters
    /// and all.
    #[tokio::test]
    #[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
    async fn the_fleet_tools_answer_what_the_fleet_routes_answer_over_etcd() {
        let etcd = Etcd::start().await;
        publish_host_b(&etcd).await;
        let view = FleetView::new("a".parse::<HostId>().expect("a host id"));
        // The shared settings carry TLS and credential fields on the publishing branch.
        #[allow(clippy::needless_update)]
        let settings = EtcdSettings {
            endpoints: vec![etcd.endpoint()],
            ..Default::default()
        };
        let keys = FleetKeys::new(PREFIX);
        let _watcher = watcher::start(settings, keys, Duration::from_secs(3), view.clone());
        let server = TestServer::builder().fleet(view).start().await;
        // The watcher's first read takes both of b's entries at once.
        let deadline = std::time::Instant::now() + DEADLINE;
        while rest_json(&server, "/fleet/sessions").await["sessions"]
            .as_array()
            .is_none_or(Vec::is_empty)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "b's sessions never came"
            );
            // Paces the polling only.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let session = HandSession::open(&server).await;
        let names = tool_names(&session.call("tools/list", json!({})).await);
        assert!(names.contains(&"fleet_sessions".to_owned()), "{names:?}");
        assert!(names.contains(&"fleet_hosts".to_owned()), "{names:?}");
        for (tool, arguments, path) in [
            ("fleet_hosts", json!({}), "/fleet/hosts"),
            ("fleet_sessions", json!({}), "/fleet/sessions"),
            (
                "fleet_sessions",
                json!({ "host": ["b"], "status": ["live"] }),
                "/fleet/sessions?host=b&status=live",
            ),
            (
                "fleet_sessions",
                json!({ "skill": ["plan"], "capsule": ["c"] }),
                "/fleet/sessions?skill=plan&capsule=c",
            ),
        ] {
            let call = json!({ "name": tool, "arguments": arguments });
            let answer = session.call("tools/call", call).await;
            let result = &answer["result"];
            assert_eq!(result["isError"], false, "{answer}");
            let rest = rest_json(&server, path).await;
            assert_eq!(result["structuredContent"], rest, "{tool} {arguments}");
            let text: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap())
                .expect("the text is the JSON");
            assert_eq!(text, rest, "{tool}: the text is that JSON too");
        }
        let live_only = rest_json(&server, "/fleet/sessions?status=live").await;
        assert_eq!(live_only["sessions"].as_array().map(Vec::len), Some(1));
    }
}
