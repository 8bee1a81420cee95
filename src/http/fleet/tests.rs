//! The fleet endpoints through the whole router (every layer, the token, the Host gate): 404
//! without a fleet, 503 while it is unavailable, the current fleet served with its filters, and
//! the event stream's first events.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::Value;
use tempfile::TempDir;

use super::*;
use crate::fleet::FleetView;
use crate::fleet::cache::WatchChange;
use crate::fleet::sample;
use crate::http::app;
use crate::registry::Registry;
use crate::running::DoorProbe;
use crate::token::TokenStore;

/// A registry's state on a private home, with `fleet`; its token.
fn state_with(fleet: FleetView) -> (AppState, String, TempDir) {
    let home = tempfile::tempdir().expect("a temp dir");
    let token_path = home.path().join("token");
    let tokens = TokenStore::open(&token_path).expect("a token store");
    let token = std::fs::read_to_string(&token_path).expect("the token");
    let running = home.path().join("running");
    std::fs::create_dir(&running).expect("a running dir");
    let private = std::os::unix::fs::PermissionsExt::from_mode(0o700);
    std::fs::set_permissions(&running, private).expect("a private running dir");
    let state = AppState::new(
        Registry::new(running, DoorProbe::new()),
        tokens,
        "127.0.0.1:7420".parse().expect("an address"),
        &[],
        &[],
    )
    .with_fleet(fleet);
    (state, token.trim().to_owned(), home)
}

/// The answer to `GET path`, with its body read whole (a stream: its first `max` bytes).
async fn get(state: &AppState, token: &str, method: &str, path: &str) -> (StatusCode, String) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "127.0.0.1:7420")
        .header("authorization", format!("Bearer {token}"))
        .body(Body::empty())
        .expect("a request");
    let mut router = app(state.clone());
    let response = tower_service::Service::call(&mut router, request)
        .await
        .expect("infallible");
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("a body");
    (status, String::from_utf8(body.to_vec()).expect("utf-8"))
}

fn json(body: &str) -> Value {
    serde_json::from_str(body).expect("JSON")
}

/// Host `a` (this registry's own: shown as its publisher published it, never from etcd) and
/// host `b`.
fn fleet_of_two() -> FleetView {
    let view = FleetView::new("a".parse().expect("a host id"));
    // Before the first read: its picture goes out with the first snapshot, no event of its own.
    view.own(Some(own_a()));
    view.read(sample::cache(
        42,
        &[
            sample::host("b"),
            sample::session("b", "ses_b1", 3, "live", "summarize"),
        ],
    ));
    view
}

/// Host `a` as its own publisher published it.
fn own_a() -> crate::fleet::cache::FleetCache {
    sample::cache(
        0,
        &[
            sample::host("a"),
            sample::session("a", "ses_a1", 1, "live", "plan"),
            sample::session("a", "ses_a2", 2, "gone", "plan"),
        ],
    )
}

/// [`fleet_of_two`] with a third session, of capsule `d`, live on host `b`.
fn fleet_of_two_capsules() -> FleetView {
    let view = FleetView::new("a".parse().expect("a host id"));
    let (key, value) = sample::session("b", "ses_b2", 4, "live", "plan");
    let mut value: Value = serde_json::from_slice(&value).expect("a sample session");
    value["capsule_name"] = "d".into();
    let other = (key, value.to_string().into_bytes());
    view.own(Some(own_a()));
    view.read(sample::cache(
        42,
        &[
            sample::host("b"),
            sample::session("b", "ses_b1", 3, "live", "summarize"),
            other,
        ],
    ));
    view
}

fn session_ids(body: &Value) -> Vec<&str> {
    (body["sessions"].as_array().expect("sessions").iter())
        .map(|s| s["session_id"].as_str().expect("an id"))
        .collect()
}

#[tokio::test]
async fn without_a_fleet_every_fleet_endpoint_is_404_fleet_not_configured() {
    let (state, token, _home) = state_with(FleetView::not_configured());
    for path in ["/fleet/sessions", "/fleet/hosts", "/fleet/events"] {
        let (status, body) = get(&state, &token, "GET", path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        let problem = json(&body);
        assert_eq!(
            problem["type"], "urn:murmur-registry:problem:fleet-not-configured",
            "{path}"
        );
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains("--fleet-etcd"))
        );
    }
    // The local API does not notice.
    let (status, _) = get(&state, &token, "GET", "/sessions?probe=false").await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn an_unavailable_fleet_is_503_saying_why_and_the_local_api_answers() {
    let view = fleet_of_two();
    view.unavailable("etcd at http://127.0.0.1:1 refused the connection".to_owned());
    let (state, token, _home) = state_with(view);
    for (method, path) in [
        ("GET", "/fleet/sessions"),
        ("GET", "/fleet/hosts"),
        ("GET", "/fleet/events"),
        ("HEAD", "/fleet/events"),
    ] {
        let (status, body) = get(&state, &token, method, path).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{method} {path}");
        if method == "GET" {
            let problem = json(&body);
            assert_eq!(
                problem["type"],
                "urn:murmur-registry:problem:fleet-unavailable"
            );
            assert_eq!(
                problem["detail"],
                "the fleet is unavailable: etcd at http://127.0.0.1:1 refused the connection"
            );
        }
    }
    let (status, _) = get(&state, &token, "GET", "/sessions?probe=false").await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn the_current_fleet_is_served_with_its_revision_own_host_and_filters() {
    let (state, token, _home) = state_with(fleet_of_two());
    let (status, body) = get(&state, &token, "GET", "/fleet/sessions").await;
    assert_eq!(status, StatusCode::OK);
    let body = json(&body);
    assert_eq!(body["revision"], 42);
    assert_eq!(body["host_id"], "a");
    assert_eq!(body["hosts"].as_array().map(Vec::len), Some(2));
    assert_eq!(session_ids(&body), ["ses_b1", "ses_a2", "ses_a1"]);
    let first = &body["sessions"][0];
    assert_eq!(first["host_id"], "b");
    assert_eq!(first["door_scope"], "host");
    assert_eq!(first["skills"][0]["id"], "summarize");
    assert_eq!(first["liveness"]["state"], "live");

    for (query, want) in [
        ("status=live", vec!["ses_b1", "ses_a1"]),
        ("status=gone,unreachable", vec!["ses_a2"]),
        ("host=a", vec!["ses_a2", "ses_a1"]),
        ("host=b,c", vec!["ses_b1"]),
        ("skill=summarize", vec!["ses_b1"]),
        ("skill=tag", vec!["ses_b1", "ses_a2", "ses_a1"]),
        ("host=a&status=live&skill=plan", vec!["ses_a1"]),
        ("skill=none", vec![]),
    ] {
        let (status, body) = get(&state, &token, "GET", &format!("/fleet/sessions?{query}")).await;
        assert_eq!(status, StatusCode::OK, "{query}");
        assert_eq!(session_ids(&json(&body)), want, "{query}");
    }
    let (_, body) = get(&state, &token, "GET", "/fleet/sessions?host=b").await;
    let hosts = json(&body)["hosts"].clone();
    assert_eq!(
        hosts.as_array().map(Vec::len),
        Some(1),
        "hosts filtered too"
    );

    let (status, body) = get(&state, &token, "GET", "/fleet/hosts").await;
    assert_eq!(status, StatusCode::OK);
    let body = json(&body);
    assert_eq!(
        (body["revision"].clone(), body["host_id"].clone()),
        (42.into(), "a".into())
    );
    let hosts: Vec<_> = (body["hosts"].as_array().expect("hosts").iter())
        .map(|h| h["host_id"].as_str().expect("an id"))
        .collect();
    assert_eq!(hosts, ["a", "b"]);
}

#[tokio::test]
async fn the_capsule_filter_keeps_the_capsules_it_names_and_combines_with_the_others() {
    let (state, token, _home) = state_with(fleet_of_two_capsules());
    for (query, want) in [
        ("capsule=d", vec!["ses_b2"]),
        ("capsule=c", vec!["ses_b1", "ses_a2", "ses_a1"]),
        (
            "capsule=d,%20c",
            vec!["ses_b2", "ses_b1", "ses_a2", "ses_a1"],
        ),
        ("capsule=e", vec![]),
        ("capsule=c&status=live", vec!["ses_b1", "ses_a1"]),
        ("capsule=c,d&host=b&skill=plan", vec!["ses_b2"]),
        ("capsule=c&skill=plan", vec!["ses_a2", "ses_a1"]),
        ("skill=none,summarize", vec!["ses_b1"]),
        ("skill=summarize,%20plan&capsule=d", vec!["ses_b2"]),
    ] {
        let (status, body) = get(&state, &token, "GET", &format!("/fleet/sessions?{query}")).await;
        assert_eq!(status, StatusCode::OK, "{query}");
        assert_eq!(session_ids(&json(&body)), want, "{query}");
    }
    for query in [
        "capsule=",
        "capsule=c,,d",
        "capsule=c,",
        "skill=",
        "skill=a,,b",
    ] {
        let (status, body) = get(&state, &token, "GET", &format!("/fleet/sessions?{query}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}");
        assert_eq!(
            json(&body)["type"],
            "urn:murmur-registry:problem:invalid-query",
            "{query}"
        );
    }
}

#[tokio::test]
async fn bad_filters_are_400_and_lose_nothing() {
    let (state, token, _home) = state_with(fleet_of_two());
    for query in ["status=alive", "host=-x", "host=a/b", "host=a,,b"] {
        let (status, body) = get(&state, &token, "GET", &format!("/fleet/sessions?{query}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}");
        assert_eq!(
            json(&body)["type"],
            "urn:murmur-registry:problem:invalid-query",
            "{query}"
        );
    }
    let (status, body) = get(&state, &token, "GET", "/fleet/sessions").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(session_ids(&json(&body)).len(), 3);
}

#[tokio::test]
async fn the_fleet_needs_the_token() {
    let (state, _token, _home) = state_with(fleet_of_two());
    let (status, _) = get(&state, "wrong", "GET", "/fleet/sessions").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// The stream's text up to the end it was given: a snapshot, changes, then the last words.
#[tokio::test]
async fn the_stream_sends_the_snapshot_then_changes_then_why_it_ended() {
    let view = fleet_of_two();
    let (state, token, _home) = state_with(view.clone());
    let (status, _) = get(&state, &token, "HEAD", "/fleet/events").await;
    assert_eq!(status, StatusCode::OK);
    let reading = tokio::spawn({
        let state = state.clone();
        async move { get(&state, &token, "GET", "/fleet/events").await }
    });
    // The stream subscribes when the request is handled; its changes go out after the
    // snapshot, then the stream ends when the fleet goes unavailable. Changes made before it
    // subscribed are in its snapshot instead, so the text is checked for what it must hold
    // either way.
    let host = sample::host("c");
    let (key, value) = (&host.0, &host.1);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while view.listeners() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stream never subscribed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    view.apply([(43, WatchChange::Put { key, value })]);
    view.unavailable("etcd went silent".to_owned());
    let (status, text) = reading.await.expect("the request");
    assert_eq!(status, StatusCode::OK);
    let events: Vec<_> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert!(
        events[0].starts_with("id: 0\nevent: snapshot\ndata: {\"revision\":42,"),
        "{text}"
    );
    assert!(
        events[1].starts_with("id: 1\nevent: host.joined\ndata: {\"host_id\":\"c\",\"host\":{"),
        "{text}"
    );
    assert_eq!(
        events[2],
        ": stream ended: the fleet became unavailable: etcd went silent; a reconnect gets a \
         fresh snapshot, or the reason it cannot"
    );
    assert_eq!(events.len(), 3, "{text}");
}

/// Every filter's answer is, byte for byte, serde's encoding of the sessions it keeps: the
/// cached per-session encodings are exactly what re-encoding the entries would give.
#[tokio::test]
async fn every_answer_is_byte_for_byte_the_serde_encoding_of_what_it_keeps() {
    let view = fleet_of_two();
    // A value with escapes, non-ASCII text and a secret the cache drops.
    let mut odd: Value = json(
        &String::from_utf8(sample::session("b", "ses_b2", 4, "unreachable", "x").1).expect("utf-8"),
    );
    odd["workdir"] = "/w/\"quoted\"\\ünï\tcode/\u{1F600}".into();
    odd["door_token"] = "secret".into();
    let (key, value) = (
        b"/p/sessions/b/ses_b2".to_vec(),
        odd.to_string().into_bytes(),
    );
    view.apply([(
        43,
        WatchChange::Put {
            key: &key,
            value: &value,
        },
    )]);
    let (state, token, _home) = state_with(view.clone());
    let snapshot = view.current().expect("current");
    for query in [
        "",
        "status=live",
        "status=gone,unreachable",
        "status=unreachable",
        "host=a",
        "host=b,c",
        "skill=summarize",
        "skill=tag",
        "host=a&status=live&skill=plan",
        "skill=none",
        "capsule=c",
        "capsule=c,x&status=live",
        "capsule=x",
    ] {
        let (status, body) = get(&state, &token, "GET", &format!("/fleet/sessions?{query}")).await;
        assert_eq!(status, StatusCode::OK, "{query}");
        let keep = filter_of(query);
        assert_eq!(body, whole_answer(&snapshot, &keep), "{query}");
        assert!(!body.contains("secret"), "{query}");
        let path = format!("/fleet/sessions?{query}&limit=10000");
        let (status, page) = get(&state, &token, "GET", &path).await;
        assert_eq!(status, StatusCode::OK, "{query}");
        assert_eq!(page, one_page_of_all(&snapshot, &keep), "{query}");
    }
    assert!(
        snapshot.encoded(whole).contains("ünï"),
        "the snapshot's data is the same encoding"
    );
}

/// The filter `query` (a `/fleet/sessions` query string) reads as.
fn filter_of(query: &str) -> Filter {
    let uri = format!("/?{query}").parse().expect("a uri");
    Filter::of(&axum::extract::Query::try_from_uri(&uri).expect("a query").0).expect("a filter")
}

/// serde's encoding of the whole answer `keep` leaves of `snapshot`.
fn whole_answer(snapshot: &FleetSnapshot, keep: &Filter) -> String {
    serde_json::to_string(&FleetSessions {
        revision: snapshot.revision,
        host_id: snapshot.host_id.as_str(),
        hosts: (snapshot.hosts.iter())
            .filter(|h| keep.host(&h.host_id))
            .map(|h| &**h)
            .collect(),
        next_cursor: None,
        sessions: (snapshot.sessions.iter())
            .filter(|s| keep.session(s))
            .map(|s| s.json())
            .collect(),
    })
    .expect("encodes")
}

/// serde's encoding of one page of everything `keep` leaves of `snapshot`: the same sessions by
/// host then session id, the hosts of those sessions, and `next_cursor: null`.
fn one_page_of_all(snapshot: &FleetSnapshot, keep: &Filter) -> String {
    let mut sessions: Vec<&CachedSession> = (snapshot.sessions.iter())
        .filter(|s| keep.session(s))
        .map(|s| &**s)
        .collect();
    sessions.sort_by_key(|s| (s.host_id().clone(), s.session_id().to_owned()));
    serde_json::to_string(&FleetSessions {
        revision: snapshot.revision,
        host_id: snapshot.host_id.as_str(),
        hosts: (snapshot.hosts.iter())
            .filter(|h| sessions.iter().any(|s| s.host_id().as_str() == h.host_id))
            .map(|h| &**h)
            .collect(),
        next_cursor: Some(None),
        sessions: sessions.iter().map(|s| s.json()).collect(),
    })
    .expect("encodes")
}
