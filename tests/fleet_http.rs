//! The fleet endpoints against a real etcd: entries written with `etcd-client` as other hosts'
//! registries would (under their leases), the real app served with a [`FleetView`] fed by the
//! real watcher; etcd killed and frozen (SIGSTOP) under it.
//!
//! What is held: the fleet is served as etcd holds it and followed live on `/fleet/events`
//! (snapshot first, then changes carrying `host_id`, `host.joined` / `host.left`); a registry
//! without a fleet answers 404; etcd killed or frozen makes `/fleet/*` answer 503 within the
//! TTL while the local `/sessions` answers as before; etcd back makes the fleet current within
//! one TTL, with nothing that left meanwhile still in it.
//!
//! The etcd tests need `/usr/bin/etcd` (Debian's `etcd-server`) and the `fleet` feature; they
//! are ignored by default. Waiting is by polling the answer under a deadline, never by
//! sleeping.

mod common;

use common::server::ServeTask;
use common::temp_dir;
use murmur_registry::http::{AppState, ServeLimits, serve_with};
use murmur_registry::registry::Registry;
use murmur_registry::running::DoorProbe;
use murmur_registry::test_support::fleet::FleetView;
use murmur_registry::test_support::fleet::cache::FleetCache;
use murmur_registry::test_support::fleet::keys::FleetKeys;
use murmur_registry::token::TokenStore;
use serde_json::Value;
use tempfile::TempDir;

/// The registry's app served in-process with `fleet` as its fleet view.
struct FleetServer {
    base: String,
    token: String,
    http: reqwest::Client,
    _running: TempDir,
    _home: TempDir,
    _serving: ServeTask,
}

impl FleetServer {
    async fn start(fleet: FleetView) -> Self {
        Self::start_with(fleet, ServeLimits::default()).await
    }

    async fn start_with(fleet: FleetView, limits: ServeLimits) -> Self {
        let home = temp_dir();
        let running = temp_dir();
        let token_path = home.path().join("token");
        let tokens = TokenStore::open(&token_path).expect("a token store");
        let token = std::fs::read_to_string(&token_path)
            .expect("the token")
            .trim()
            .to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("the bound address");
        let state = AppState::new(
            Registry::new(running.path(), DoorProbe::new()),
            tokens,
            addr,
            &[],
            &[],
        )
        .with_fleet(fleet);
        let serving = ServeTask::spawn(move |signal| serve_with(listener, state, limits, signal));
        Self {
            base: format!("http://{addr}"),
            token,
            http: reqwest::Client::new(),
            _running: running,
            _home: home,
            _serving: serving,
        }
    }

    async fn request(&self, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("the registry answers")
    }

    /// `GET path`: its status and JSON body.
    async fn get(&self, path: &str) -> (u16, Value) {
        let response = self.request(path).await;
        let status = response.status().as_u16();
        let bytes = response.bytes().await.expect("a body");
        let body = serde_json::from_slice(&bytes).expect("a JSON body");
        (status, body)
    }
}

#[tokio::test]
async fn without_a_fleet_the_fleet_endpoints_are_404_and_the_local_api_answers() {
    let server = FleetServer::start(FleetView::not_configured()).await;
    for path in ["/fleet/sessions", "/fleet/hosts", "/fleet/events"] {
        let (status, problem) = server.get(path).await;
        assert_eq!(status, 404, "{path}");
        assert_eq!(
            problem["type"], "urn:murmur-registry:problem:fleet-not-configured",
            "{path}"
        );
    }
    assert_eq!(server.get("/sessions").await.0, 200);
}

/// `HEAD /fleet/events` answers as `GET` would (404 without a fleet, 503 before the fleet is
/// read, 200 once it is), and opens no stream.
#[tokio::test]
async fn head_of_the_fleet_stream_answers_as_get_would_and_opens_no_stream() {
    let head = |server: &FleetServer| {
        (server.http.head(format!("{}/fleet/events", server.base)))
            .bearer_auth(&server.token)
            .send()
    };
    let none = FleetServer::start(FleetView::not_configured()).await;
    let answer = head(&none).await.expect("an answer");
    assert_eq!(answer.status().as_u16(), 404);
    let view = FleetView::new("a".parse().expect("a host id"));
    let limits = ServeLimits {
        max_event_streams: 1,
        ..ServeLimits::default()
    };
    let server = FleetServer::start_with(view.clone(), limits).await;
    assert_eq!(
        head(&server).await.expect("an answer").status().as_u16(),
        503
    );
    let (cache, skipped) = FleetCache::read(FleetKeys::new("/p"), 1, []);
    assert_eq!(skipped, []);
    view.read(cache);
    let answer = head(&server).await.expect("an answer");
    assert_eq!(answer.status().as_u16(), 200);
    let kind = answer.headers().get("content-type").cloned();
    assert_eq!(
        kind.as_ref().map(|v| v.as_bytes()),
        Some(&b"text/event-stream"[..])
    );
    assert_eq!(answer.bytes().await.expect("a body").len(), 0);
    // The one stream place is free: the HEAD held none.
    assert_eq!(server.request("/fleet/events").await.status().as_u16(), 200);
}

/// A fleet stream and a local stream share the `--max-event-streams` places.
#[tokio::test]
async fn a_fleet_stream_takes_an_event_stream_place() {
    let view = FleetView::new("a".parse().expect("a host id"));
    let host =
        br#"{"host_id":"a","version":"1","started_at":"2026-12-01T00:00:00Z","registry_url":null}"#;
    let keys = FleetKeys::new("/p");
    let (cache, skipped) = FleetCache::read(keys, 1, [(&b"/p/hosts/a"[..], &host[..])]);
    assert_eq!(skipped, []);
    view.read(cache);
    let limits = ServeLimits {
        max_event_streams: 1,
        ..ServeLimits::default()
    };
    let server = FleetServer::start_with(view.clone(), limits).await;
    let stream = server.request("/fleet/events").await;
    assert_eq!(stream.status().as_u16(), 200);
    let (status, problem) = server.get("/events").await;
    assert_eq!(
        (status, problem["type"].as_str()),
        (
            503,
            Some("urn:murmur-registry:problem:too-many-event-streams")
        )
    );
    drop(stream);
    // The place is given back when the fleet stream closes.
    let start = std::time::Instant::now();
    while server.request("/fleet/events").await.status().as_u16() != 200 {
        assert!(
            start.elapsed() < common::DEADLINE,
            "the place never came back"
        );
        // Paces the polling only.
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// The resident set of this process, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    (status.lines())
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// A session entry of host `b` whose value is about `bytes` long (a long workdir).
fn bulky_entry(session_id: &str, bytes: usize) -> String {
    serde_json::json!({
        "host_id": "b", "changed_at": "2026-12-01T00:00:00Z", "door_scope": "network",
        "skills": [], "session_id": session_id, "pid": 7, "capsule_name": "c",
        "workdir": "w".repeat(bytes), "started_at": "2026-12-01T00:00:00Z",
        "liveness": {"state": "live", "process": "alive", "reason": null}
    })
    .to_string()
}

/// A client that sends its request for `path` and reads nothing, with the smallest receive
/// buffer the kernel allows, so that what the server sends stays with the server.
async fn stalled_client(server: &FleetServer, path: &str) -> tokio::net::TcpStream {
    let addr = server.base.trim_start_matches("http://");
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let mut stream = socket
        .connect(addr.parse().expect("an address"))
        .await
        .expect("connect");
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\
         Connection: close\r\n\r\n",
        server.token
    );
    tokio::io::AsyncWriteExt::write_all(&mut stream, request.as_bytes())
        .await
        .expect("send the request");
    stream
}

/// Put 400 sessions of host `b`, about 60 KB each (24 MB), numbered by `round` so that each
/// round changes every one, in batches the view sends as events (not as one snapshot).
fn feed_bulky_sessions(view: &FleetView, revision: &mut i64, round: usize) {
    for batch in 0..8 {
        let values: Vec<(String, String)> = (0..50)
            .map(|i| {
                let id = format!("ses_{batch}_{i}");
                (
                    format!("/p/sessions/b/{id}"),
                    bulky_entry(&id, 60_000 + round),
                )
            })
            .collect();
        view.apply(values.iter().map(|(key, value)| {
            *revision += 1;
            let change = murmur_registry::test_support::fleet::cache::WatchChange::Put {
                key: key.as_bytes(),
                value: value.as_bytes(),
            };
            (*revision, change)
        }));
    }
}

/// Twenty `/fleet/events` clients that stop reading, on a fleet whose snapshot is 24 MB (as
/// the report's 20 streams that never read, which took a reader to 1.18 GB), hold that
/// snapshot once between them, not once each; when the fleet then changes by 24 MB (400
/// events: far fewer than the 1,024 a listener may fall behind, far more bytes than its stream
/// may hold) each stream is ended with the reason, which its client finds when it reads again.
/// The resident set is printed at each step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_streams_whose_clients_stop_reading_share_the_snapshot_and_are_ended() {
    use tokio::io::AsyncReadExt;

    const STREAMS: usize = 20;
    let view = FleetView::new("a".parse().expect("a host id"));
    let host =
        br#"{"host_id":"b","version":"1","started_at":"2026-12-01T00:00:00Z","registry_url":null}"#;
    let (cache, _) = FleetCache::read(FleetKeys::new("/p"), 1, [(&b"/p/hosts/b"[..], &host[..])]);
    view.read(cache);
    let mut revision = 1;
    feed_bulky_sessions(&view, &mut revision, 0);
    let server = FleetServer::start(view.clone()).await;
    // The snapshot, encoded once, before any stream: what a stream adds is then its own.
    assert_eq!(
        server.request("/fleet/sessions").await.status().as_u16(),
        200
    );
    let fed = rss_kib();
    let mut clients = Vec::new();
    for _ in 0..STREAMS {
        clients.push(stalled_client(&server, "/fleet/events").await);
    }
    let start = std::time::Instant::now();
    while view.listeners() < STREAMS {
        assert!(
            start.elapsed() < common::DEADLINE,
            "the streams never opened"
        );
        tokio::task::yield_now().await;
    }
    let streaming = rss_kib();
    feed_bulky_sessions(&view, &mut revision, 1);
    let changed = rss_kib();
    println!(
        "RSS: {} MiB with a fleet of 24 MB, {} MiB with {STREAMS} stalled /fleet/events \
         clients, {} MiB after 24 MB of changes sent their way",
        fed / 1024,
        streaming / 1024,
        changed / 1024
    );
    // One copy of the snapshot per stream would be 480 MB.
    assert!(
        streaming.saturating_sub(fed) < 128 * 1024,
        "{STREAMS} stalled streams took {} MiB",
        streaming.saturating_sub(fed) / 1024
    );
    for mut client in clients {
        let mut received = Vec::new();
        tokio::time::timeout(common::DEADLINE, client.read_to_end(&mut received))
            .await
            .expect("the stream ends")
            .expect("read the stream");
        let text = String::from_utf8_lossy(&received);
        let tail = &text[text.len().saturating_sub(400)..];
        assert!(
            tail.contains(": stream ended: this listener fell more than 1024 events or 8 MiB"),
            "the last words: {tail}"
        );
    }
}

/// A query word list over the cap is a 400, on `/sessions` and `/fleet/sessions` alike, and a
/// client's 60 KB value is quoted in a detail by its first few dozen characters only.
#[tokio::test]
async fn long_query_lists_are_refused_and_long_values_quoted_short() {
    let server = FleetServer::start(FleetView::new("a".parse().expect("a host id"))).await;
    let words = (0..65)
        .map(|i| format!("w{i}"))
        .collect::<Vec<_>>()
        .join(",");
    let huge = "x".repeat(60_000);
    for path in ["/sessions", "/fleet/sessions"] {
        for query in [format!("skill={words}"), format!("capsule={words}")] {
            let (status, problem) = server.get(&format!("{path}?{query}")).await;
            assert_eq!(status, 400, "{path}?{query}");
            assert_eq!(problem["type"], "urn:murmur-registry:problem:invalid-query");
            let detail = problem["detail"].as_str().unwrap_or_default();
            assert!(detail.contains("at most 64 words"), "{detail}");
        }
        let (status, problem) = server.get(&format!("{path}?status={huge}")).await;
        assert_eq!(status, 400);
        let detail = problem["detail"].as_str().unwrap_or_default();
        assert!(detail.starts_with("unknown status \"xxxx"), "{detail}");
        assert!(detail.len() < 200, "{} bytes of detail", detail.len());
    }
    let (status, problem) = server.get(&format!("/fleet/sessions?host={huge}")).await;
    assert_eq!(status, 400);
    assert!(problem["detail"].as_str().unwrap_or_default().len() < 200);
}

#[cfg(feature = "fleet")]
mod with_etcd {
    use std::time::{Duration, Instant};

    use etcd_client::{Client, PutOptions};
    use murmur_registry::test_support::fleet::etcd::EtcdSettings;
    use murmur_registry::test_support::fleet::watcher::{self, FleetWatcher};
    use murmur_registry::test_support::fleet::{FleetView, HostId};
    use serde_json::json;

    use super::common::DEADLINE;
    use super::*;
    use common::etcd::{Etcd, EtcdCluster};
    use common::{EventStream, SseEvent};

    /// The view's TTL: short, so outages show quickly; the deadlines are fractions of it.
    const TTL: Duration = Duration::from_secs(3);
    const PREFIX: &str = "/test/fleet";

    /// A registry on host `a` whose fleet view follows `etcd`.
    async fn registry_on(etcd: &Etcd) -> (FleetServer, FleetWatcher) {
        registry_on_endpoints(vec![etcd.endpoint()]).await
    }

    /// A registry on host `a` whose fleet view follows the etcd at `endpoints`.
    async fn registry_on_endpoints(endpoints: Vec<String>) -> (FleetServer, FleetWatcher) {
        let view = FleetView::new("a".parse::<HostId>().expect("a host id"));
        // The shared settings carry TLS and credential fields on the publishing branch.
        #[allow(clippy::needless_update)]
        let settings = EtcdSettings {
            endpoints,
            ..Default::default()
        };
        let watcher = watcher::start(settings, FleetKeys::new(PREFIX), TTL, view.clone());
        (FleetServer::start(view).await, watcher)
    }

    /// Another host's registry, as etcd sees it: a lease, its host key, its session keys.
    struct OtherHost {
        id: &'static str,
        lease: i64,
    }

    impl OtherHost {
        async fn join(client: &mut Client, id: &'static str, lease_ttl: i64) -> Self {
            let lease = client
                .lease_grant(lease_ttl, None)
                .await
                .expect("a lease")
                .id();
            let host = json!({"host_id": id, "version": "1",
                "started_at": "2026-12-01T00:00:00Z", "registry_url": null});
            let keys = FleetKeys::new(PREFIX);
            let host_id: HostId = id.parse().expect("a host id");
            client
                .put(
                    keys.host(&host_id),
                    host.to_string(),
                    Some(PutOptions::new().with_lease(lease)),
                )
                .await
                .expect("put the host");
            Self { id, lease }
        }

        async fn put_session(&self, client: &mut Client, session_id: &str, state: &str) {
            self.try_put_session(client, session_id, state)
                .await
                .expect("put a session");
        }

        async fn try_put_session(
            &self,
            client: &mut Client,
            session_id: &str,
            state: &str,
        ) -> Result<(), etcd_client::Error> {
            let entry = json!({
                "host_id": self.id, "changed_at": "2026-12-01T00:00:00Z",
                "door_scope": "network", "skills": [{"id": "plan", "tags": []}],
                "session_id": session_id, "url": "10.0.0.2:4000", "pid": 7,
                "process_start": "1", "capsule_name": "c", "capsule_version": "1",
                "workdir": "/w", "outlives_launcher": false,
                "started_at": "2026-12-01T00:00:00Z",
                "liveness": {"state": state, "process": "alive", "reason": null}
            });
            client
                .put(
                    self.session_key(session_id),
                    entry.to_string(),
                    Some(PutOptions::new().with_lease(self.lease)),
                )
                .await
                .map(|_| ())
        }

        async fn delete_session(&self, client: &mut Client, session_id: &str) {
            client
                .delete(self.session_key(session_id), None)
                .await
                .expect("delete a session");
        }

        fn session_key(&self, session_id: &str) -> String {
            let host_id: HostId = self.id.parse().expect("a host id");
            FleetKeys::new(PREFIX).session(&host_id, session_id)
        }
    }

    /// Values over the caps (1.38 MB of 3,000 skills, as a hostile writer put them; 65 small
    /// skills) are refused: never served, counted, and the honest entries beside them are.
    #[tokio::test]
    #[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
    async fn fleet_values_over_the_caps_are_refused_and_counted() {
        let etcd = Etcd::start().await;
        let mut client = etcd.client().await;
        let (server, _watcher) = registry_on(&etcd).await;
        let b = OtherHost::join(&mut client, "b", 60).await;
        let entry = |session_id: &str, skills: usize, tag: usize| {
            let skills: Vec<Value> = (0..skills)
                .map(|i| json!({"id": format!("skill-{i}"), "tags": ["t".repeat(tag)]}))
                .collect();
            json!({
                "host_id": "b", "changed_at": "2026-12-01T00:00:00Z", "door_scope": "network",
                "skills": skills, "session_id": session_id, "pid": 7, "capsule_name": "c",
                "workdir": "/w", "started_at": "2026-12-01T00:00:00Z",
                "liveness": {"state": "live", "process": "alive", "reason": null}
            })
            .to_string()
        };
        let huge = entry("ses_huge", 3_000, 440);
        assert!(huge.len() > 1_300_000, "{}", huge.len());
        for (id, value) in [
            ("ses_huge", huge),
            ("ses_wide", entry("ses_wide", 65, 1)),
            ("ses_fine", entry("ses_fine", 64, 1)),
        ] {
            let options = PutOptions::new().with_lease(b.lease);
            (client.put(b.session_key(id), value, Some(options)).await).expect("put");
        }
        b.put_session(&mut client, "ses_last", "live").await;
        until(
            &server,
            "/fleet/sessions",
            "the last put is served",
            |_, body| sessions(body).contains(&"ses_last".to_owned()),
        )
        .await;
        let (_, body) = server.get("/fleet/sessions").await;
        let mut served = sessions(&body);
        served.sort();
        assert_eq!(served, ["ses_fine", "ses_last"]);
        let metrics = server
            .request("/metrics")
            .await
            .text()
            .await
            .expect("metrics");
        let refused = (metrics.lines())
            .find_map(|l| {
                l.strip_prefix("murmur_registry_fleet_entries_refused_total{reason=\"too_large\"} ")
            })
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or(0);
        assert!(refused >= 2, "{metrics}");
    }

    /// Poll `GET path` until `done` holds for its status and body; how long that took.
    async fn until(
        server: &FleetServer,
        path: &str,
        what: &str,
        done: impl Fn(u16, &Value) -> bool,
    ) -> Duration {
        let start = Instant::now();
        loop {
            let (status, body) = server.get(path).await;
            if done(status, &body) {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < DEADLINE,
                "gave up waiting until {what}: last {status} {body}"
            );
            // Paces the polling only.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn ids(body: &Value, list: &str, field: &str) -> Vec<String> {
        (body[list].as_array().into_iter().flatten())
            .filter_map(|item| item[field].as_str().map(str::to_owned))
            .collect()
    }

    fn sessions(body: &Value) -> Vec<String> {
        ids(body, "sessions", "session_id")
    }

    fn hosts(body: &Value) -> Vec<String> {
        ids(body, "hosts", "host_id")
    }

    /// The view serves b's one live session as etcd holds it, and filters and lists hosts.
    async fn assert_served_as_etcd_holds_b(server: &FleetServer) {
        until(
            server,
            "/fleet/sessions",
            "b's session is served",
            |s, body| s == 200 && sessions(body) == ["ses_b1"],
        )
        .await;
        let (_, body) = server.get("/fleet/sessions?host=b&status=live").await;
        assert_eq!(body["host_id"], "a", "this registry's own host");
        assert!(body["revision"].as_i64().is_some_and(|r| r > 0));
        assert_eq!(hosts(&body), ["b"]);
        assert_eq!(body["sessions"][0]["host_id"], "b");
        assert_eq!(body["sessions"][0]["door_scope"], "network");
        let (status, body) = server.get("/fleet/sessions?host=c").await;
        assert_eq!((status, sessions(&body)), (200, Vec::<String>::new()));
        let (status, body) = server.get("/fleet/hosts").await;
        assert_eq!((status, hosts(&body)), (200, vec!["b".to_owned()]));
        let (_, whole) = server.get("/fleet/sessions").await;
        let members: Vec<&str> = (body.as_object().expect("an object").keys())
            .map(String::as_str)
            .collect();
        assert_eq!(members, ["host_id", "hosts", "revision"]);
        assert_eq!(body["host_id"], "a");
        assert_eq!(body["revision"], whole["revision"]);
        assert_eq!(body["hosts"], whole["hosts"]);
    }

    /// b adds, changes and removes a session and c joins: each arrives on `stream`, in order.
    /// c, kept by the caller.
    async fn changes_arrive_in_order(
        stream: &mut EventStream,
        client: &mut Client,
        b: &OtherHost,
    ) -> OtherHost {
        b.put_session(client, "ses_b2", "live").await;
        let SseEvent { name, data, .. } = stream.expect_event().await;
        assert_eq!(name, "session.added");
        assert_eq!(
            (data["host_id"].as_str(), data["session_id"].as_str()),
            (Some("b"), Some("ses_b2"))
        );

        b.put_session(client, "ses_b2", "unreachable").await;
        let SseEvent { name, data, .. } = stream.expect_event().await;
        assert_eq!(name, "session.changed");
        assert_eq!(
            (data["old_state"].as_str(), data["new_state"].as_str()),
            (Some("live"), Some("unreachable"))
        );

        b.delete_session(client, "ses_b1").await;
        let SseEvent { name, data, .. } = stream.expect_event().await;
        assert_eq!(
            (name.as_str(), data["session_id"].as_str()),
            ("session.removed", Some("ses_b1"))
        );

        let c = OtherHost::join(client, "c", 60).await;
        let SseEvent { name, data, .. } = stream.expect_event().await;
        assert_eq!(
            (name.as_str(), data["host_id"].as_str()),
            ("host.joined", Some("c"))
        );
        c
    }

    /// b leaves the way a registry does on SIGTERM (its lease revoked, every key at once):
    /// `stream` hears its last session go, then b.
    async fn b_leaving_removes_its_sessions_first(
        stream: &mut EventStream,
        client: &mut Client,
        b: &OtherHost,
    ) {
        client
            .lease_revoke(b.lease)
            .await
            .expect("revoke b's lease");
        let mut left = Vec::new();
        for _ in 0..2 {
            let SseEvent { name, data, .. } = stream.expect_event().await;
            left.push(format!(
                "{name} {}",
                data["session_id"]
                    .as_str()
                    .or(data["host_id"].as_str())
                    .unwrap_or("")
            ));
        }
        assert_eq!(
            left,
            ["session.removed ses_b2", "host.left b"],
            "sessions first"
        );
    }

    #[tokio::test]
    #[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
    async fn other_hosts_are_served_as_etcd_holds_them_and_followed_on_the_stream() {
        let etcd = Etcd::start().await;
        let mut client = etcd.client().await;
        let b = OtherHost::join(&mut client, "b", 60).await;
        b.put_session(&mut client, "ses_b1", "live").await;
        let (server, watcher) = registry_on(&etcd).await;

        assert_served_as_etcd_holds_b(&server).await;
        let mut stream = fleet_events(&server).await;
        let SseEvent { id, name, data } = stream.expect_event().await;
        assert_eq!((id, name.as_str()), (0, "snapshot"));
        assert_eq!(sessions(&data), ["ses_b1"]);
        let _c = changes_arrive_in_order(&mut stream, &mut client, &b).await;
        b_leaving_removes_its_sessions_first(&mut stream, &mut client, &b).await;
        let (_, body) = server.get("/fleet/sessions").await;
        assert_eq!(
            (hosts(&body), sessions(&body)),
            (vec!["c".to_owned()], vec![])
        );

        // A stopped watcher leaves nothing presented as current.
        watcher.stop();
        until(
            &server,
            "/fleet/sessions",
            "a stopped watch is unavailable",
            |s, body| {
                s == 503
                    && body["detail"] == "the fleet is unavailable: the fleet watch was stopped"
            },
        )
        .await;
    }

    #[tokio::test]
    #[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
    async fn the_capsule_filter_keeps_the_capsules_it_names_as_etcd_holds_them() {
        let etcd = Etcd::start().await;
        let mut client = etcd.client().await;
        let b = OtherHost::join(&mut client, "b", 60).await;
        b.put_session(&mut client, "ses_b1", "live").await;
        let entry = json!({
            "host_id": "b", "changed_at": "2026-12-01T00:00:00Z", "door_scope": "network",
            "skills": [], "session_id": "ses_b2", "url": "10.0.0.2:4001", "pid": 8,
            "process_start": "1", "capsule_name": "writer", "capsule_version": "1",
            "workdir": "/w", "outlives_launcher": false, "started_at": "2026-12-01T00:00:01Z",
            "liveness": {"state": "unreachable", "process": "alive", "reason": "slow"}
        });
        let options = PutOptions::new().with_lease(b.lease);
        (client.put(b.session_key("ses_b2"), entry.to_string(), Some(options)))
            .await
            .expect("put a session");
        let (server, _watcher) = registry_on(&etcd).await;
        until(
            &server,
            "/fleet/sessions",
            "both sessions are served",
            |s, body| s == 200 && sessions(body).len() == 2,
        )
        .await;
        for (query, want) in [
            ("capsule=writer", vec!["ses_b2"]),
            ("capsule=c", vec!["ses_b1"]),
            ("capsule=c,writer&status=live", vec!["ses_b1"]),
            ("capsule=writer&status=unreachable&host=b", vec!["ses_b2"]),
            ("capsule=nobody", vec![]),
        ] {
            let (status, body) = server.get(&format!("/fleet/sessions?{query}")).await;
            assert_eq!(status, 200, "{query}");
            assert_eq!(sessions(&body), want, "{query}");
        }
        let (status, body) = server.get("/fleet/sessions?capsule=c,,writer").await;
        assert_eq!(status, 400, "{body}");
    }

    #[tokio::test]
    #[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
    async fn etcd_killed_is_503_within_the_ttl_and_back_current_within_one_ttl_without_ghosts() {
        let mut etcd = Etcd::start().await;
        let mut client = etcd.client().await;
        let b = OtherHost::join(&mut client, "b", 60).await;
        b.put_session(&mut client, "ses_b1", "live").await;
        b.put_session(&mut client, "ses_b2", "live").await;
        // d's lease is never renewed: it lapses while etcd is down or just after.
        let d = OtherHost::join(&mut client, "d", 2).await;
        d.put_session(&mut client, "ses_d1", "live").await;
        let (server, _watcher) = registry_on(&etcd).await;
        until(
            &server,
            "/fleet/sessions",
            "the fleet is served",
            |s, body| s == 200 && sessions(body).len() == 3,
        )
        .await;
        let mut stream = fleet_events(&server).await;
        stream.snapshot().await;

        etcd.kill();
        let took = until(
            &server,
            "/fleet/sessions",
            "the fleet is unavailable",
            |s, _| s == 503,
        )
        .await;
        assert!(took <= TTL, "503 after {took:?}, over the TTL {TTL:?}");
        let (_, problem) = server.get("/fleet/hosts").await;
        assert_eq!(
            problem["type"],
            "urn:murmur-registry:problem:fleet-unavailable"
        );
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.starts_with("the fleet is unavailable: ")),
            "{problem}"
        );
        let (status, local) = server.get("/sessions").await;
        assert_eq!(
            (status, local["sessions"].clone()),
            (200, json!([])),
            "local API untouched"
        );
        let ended = stream.last_words().await;
        assert!(ended.contains("the fleet became unavailable"), "{ended}");

        etcd.restart().await;
        // While the view is away, b drops a session: it must not come back as a ghost.
        let mut client = etcd.client().await;
        b.delete_session(&mut client, "ses_b2").await;
        let took = until(
            &server,
            "/fleet/sessions",
            "the fleet is current again, without the session dropped meanwhile",
            |s, body| s == 200 && !sessions(body).iter().any(|id| id == "ses_b2"),
        )
        .await;
        assert!(
            took <= TTL,
            "current again after {took:?}, over the TTL {TTL:?}"
        );
        until(
            &server,
            "/fleet/sessions",
            "d's lapsed lease takes d away",
            |s, body| s == 200 && sessions(body) == ["ses_b1"] && hosts(body) == ["b"],
        )
        .await;
    }

    #[tokio::test]
    #[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
    async fn etcd_frozen_is_503_within_the_ttl_and_thawed_is_current_within_one_ttl() {
        let etcd = Etcd::start().await;
        let mut client = etcd.client().await;
        let b = OtherHost::join(&mut client, "b", 60).await;
        b.put_session(&mut client, "ses_b1", "live").await;
        let (server, _watcher) = registry_on(&etcd).await;
        until(
            &server,
            "/fleet/sessions",
            "the fleet is served",
            |s, body| s == 200 && sessions(body) == ["ses_b1"],
        )
        .await;

        etcd.freeze();
        let took = until(
            &server,
            "/fleet/sessions",
            "the frozen etcd is noticed",
            |s, _| s == 503,
        )
        .await;
        assert!(took <= TTL, "503 after {took:?}, over the TTL {TTL:?}");
        let (_, problem) = server.get("/fleet/sessions").await;
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains("etcd")),
            "says why: {problem}"
        );
        assert_eq!(server.get("/sessions").await.0, 200, "local API untouched");

        etcd.thaw();
        let took = until(
            &server,
            "/fleet/sessions",
            "the fleet is current again",
            |s, body| s == 200 && sessions(body) == ["ses_b1"],
        )
        .await;
        assert!(
            took <= TTL,
            "current again after {took:?}, over the TTL {TTL:?}"
        );
        // And followed again: a change after the thaw arrives.
        let mut client = etcd.client().await;
        b.put_session(&mut client, "ses_b2", "live").await;
        until(
            &server,
            "/fleet/sessions",
            "a change after the thaw is seen",
            |s, body| s == 200 && sessions(body).len() == 2,
        )
        .await;
    }

    #[tokio::test]
    #[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
    async fn a_cluster_whose_leader_is_killed_keeps_the_fleet_served_and_followed() {
        let mut cluster = EtcdCluster::start(3).await;
        let mut client = cluster.members[0].client().await;
        let b = OtherHost::join(&mut client, "b", 60).await;
        b.put_session(&mut client, "ses_b1", "live").await;
        // The registry watches through the first member it is given: a follower, so that the
        // member killed is the cluster's leader and not the one the watch runs on (whose loss
        // ends the streams by design, until the view is read again from another).
        let leader = cluster.leader().await;
        let mut endpoints = cluster.endpoints();
        endpoints.rotate_left((leader + 1) % 3);
        let (server, _watcher) = registry_on_endpoints(endpoints).await;
        until(
            &server,
            "/fleet/sessions",
            "the fleet is served",
            |s, body| s == 200 && sessions(body) == ["ses_b1"],
        )
        .await;
        let mut stream = fleet_events(&server).await;
        stream.snapshot().await;

        assert_eq!(
            cluster.leader().await,
            leader,
            "the leader stayed while the test set up"
        );
        cluster.members[leader].kill();
        let survivor = (leader + 1) % 3;
        let mut client = cluster.members[survivor].client().await;
        // The write waits for the new leader (each try within the client's deadline).
        let start = Instant::now();
        while b
            .try_put_session(&mut client, "ses_b2", "live")
            .await
            .is_err()
        {
            // etcd's own election, slow on a loaded machine: a generous deadline of its own.
            let deadline = DEADLINE * 3;
            assert!(start.elapsed() < deadline, "the cluster never took a write");
        }
        let SseEvent { name, data, .. } = stream.expect_event().await;
        assert_eq!(
            (name.as_str(), data["session_id"].as_str()),
            ("session.added", Some("ses_b2")),
            "the stream went on across the leader change"
        );
        let (status, body) = server.get("/fleet/sessions").await;
        assert_eq!((status, sessions(&body).len()), (200, 2));
    }

    /// `GET /fleet/events`, which must be a 200, each event awaited within [`DEADLINE`].
    async fn fleet_events(server: &FleetServer) -> EventStream {
        EventStream::new(server.request("/fleet/events").await, DEADLINE)
    }
}
