//! `GET /sessions?include=card` and the `capsule` and `skill` filters, end to end: the real
//! server on `127.0.0.1:0`, real live processes, real doors that count what they receive.
//!
//! Covered here:
//! - one `include=card` listing asks each door exactly once, and every live session carries the
//!   card its door served; sessions not live (unreachable, gone) and a live one without a door
//!   carry `card: null`; a listing without `include` has no `card` key at all;
//! - an authenticated door's extended card is redacted of every record secret exactly as
//!   `GET /sessions/{id}/card` redacts it, and no secret reaches the listing;
//! - a listing with the card joins a probe already in flight for a plain listing: the door is
//!   still asked once, and the card is there;
//! - a card over the size cap leaves the session unreachable, with or without `include=card`
//!   (the card never changes a verdict);
//! - `capsule=` and `skill=` (id and tag matches, comma lists, combined with `status`), and
//!   the 400s: `include=card` or `skill=` with `probe=false`, unknown include words, empty
//!   names; the running directory untouched by all of them;
//! - `murmur-registry ps --capsule … --skill …` filtering the same way, table and `--json`.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::binary::{Home, User, registry, run};
use common::server::TestServer;
use common::*;
use murmur_registry::running::DoorProbe;
use serde_json::{Value, json};

/// The size cap a door's card is read to (the registry's `MAX_CARD_BYTES`).
const MAX_CARD_BYTES: usize = 256 * 1024;

/// The registry served in-process, with short probe deadlines, and a client.
struct Api {
    server: TestServer,
    client: reqwest::Client,
}

impl Api {
    async fn start() -> Self {
        let probe =
            DoorProbe::with_deadlines(Duration::from_millis(500), Duration::from_millis(5000));
        Self {
            server: TestServer::builder().probe(probe).start().await,
            client: reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("a client"),
        }
    }

    /// GET `path`: the status and the body as text.
    async fn get_text(&self, path: &str) -> (u16, String) {
        let response = (self.client.get(format!("{}{path}", self.server.base())))
            .bearer_auth(self.server.token())
            .send()
            .await
            .expect("the registry answers");
        let status = response.status().as_u16();
        (status, response.text().await.expect("a body"))
    }

    /// GET `path`, expecting `200` and JSON.
    async fn get(&self, path: &str) -> Value {
        let (status, text) = self.get_text(path).await;
        assert_eq!(status, 200, "GET {path}: {text}");
        serde_json::from_str(&text).expect("a JSON body")
    }

    fn write(&self, record: &RecordJson) {
        record.write_in(self.server.dir());
    }
}

/// `session_id -> session object` of a listing.
fn by_id(listing: &Value) -> BTreeMap<String, Value> {
    (listing["sessions"]
        .as_array()
        .expect("a sessions list")
        .iter())
    .map(|s| {
        (
            s["session_id"].as_str().expect("an id").to_owned(),
            s.clone(),
        )
    })
    .collect()
}

/// The session ids a listing holds, sorted.
fn ids(listing: &Value) -> Vec<String> {
    by_id(listing).into_keys().collect()
}

fn sorted(ids: &[&String]) -> Vec<String> {
    let mut ids: Vec<String> = ids.iter().map(|id| (*id).clone()).collect();
    ids.sort();
    ids
}

/// How many requests each door received.
fn counts(doors: &[&DoorServer]) -> Vec<usize> {
    doors.iter().map(|door| door.requests().len()).collect()
}

#[tokio::test]
async fn one_listing_with_cards_asks_each_door_once_and_cards_only_live_sessions() {
    let api = Api::start().await;
    let process = TestProcess::sleeping();

    let a2a = process.record();
    let a2a_door = DoorServer::start(DoorMode::A2aCard(a2a.session_id()));
    let a2a = a2a.url(a2a_door.url());
    let spec = process.record();
    let spec_door = DoorServer::start(DoorMode::SpecCard(spec.session_id()));
    let spec = spec.url(spec_door.url());
    // A door that answers for another session: the process is alive, the session unreachable.
    let wrong = process.record();
    let wrong_door = DoorServer::start(DoorMode::A2aCard(session_id()));
    let wrong = wrong.url(wrong_door.url());
    let gone = ExitedChild::spawn().record();
    let doorless = process.record().no_door();
    for record in [&a2a, &spec, &wrong, &gone, &doorless] {
        api.write(record);
    }

    let listing = api.get("/sessions?include=card").await;
    assert_eq!(counts(&[&a2a_door, &spec_door, &wrong_door]), [1, 1, 1]);
    let sessions = by_id(&listing);
    assert_eq!(sessions.len(), 5);
    let a2a_view = &sessions[&a2a.session_id()];
    assert_eq!(a2a_view["liveness"]["state"], "live");
    assert_eq!(a2a_view["card"], a2a_card(&a2a.session_id()));
    assert_eq!(
        sessions[&spec.session_id()]["card"],
        spec_card(&spec.session_id())
    );
    let not_carded = [
        (&wrong, "unreachable"),
        (&gone, "gone"),
        (&doorless, "live"),
    ];
    for (record, state) in not_carded {
        let view = &sessions[&record.session_id()];
        assert_eq!(view["liveness"]["state"], state, "{view}");
        assert_eq!(view.get("card"), Some(&Value::Null), "{view}");
    }

    // Without include: the same verdicts, and no `card` key anywhere.
    let (status, plain) = api.get_text("/sessions").await;
    assert_eq!(status, 200);
    assert!(!plain.contains("\"card\""), "{plain}");
    let plain: Value = serde_json::from_str(&plain).expect("JSON");
    for (id, view) in by_id(&plain) {
        assert_eq!(view["liveness"], sessions[&id]["liveness"], "{id}");
    }
    assert_eq!(counts(&[&a2a_door, &spec_door, &wrong_door]), [2, 2, 2]);
}

#[tokio::test]
async fn an_authenticated_doors_card_is_redacted_as_the_card_route_redacts_it() {
    let api = Api::start().await;
    let process = TestProcess::sleeping();
    let record = process.record();
    // The door's card echoes both secrets: the token is its `name`, a credential a skill id.
    let token = "test-capsule";
    let door = DoorServer::start(DoorMode::Authenticated {
        session_id: record.session_id(),
        token: token.to_owned(),
        rejection: Rejection::Http401,
    });
    let record = (record.url(door.url()).door_token(token))
        .set("credentials", json!({"peer": "summarize"}))
        .set("capsule_name", "vault");
    api.write(&record);
    let id = record.session_id();

    let (status, text) = api.get_text("/sessions?include=card").await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(door.requests().len(), 1);
    let listed = by_id(&serde_json::from_str(&text).expect("JSON"))[&id]["card"].clone();
    let alone = api.get(&format!("/sessions/{id}/card")).await;
    assert_eq!(listed, alone);
    assert_eq!(listed["name"], "[redacted]");
    assert_eq!(listed["skills"][0]["id"], "[redacted]");
    assert_eq!(listed["skills"][1]["id"], "plan");
    for secret in [token, "summarize"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    // The extended card was asked for with the token, as the card route asks.
    let asked = &door.requests()[0];
    assert_eq!(asked.method, "POST");
    assert_eq!(asked.header("authorization"), Some("Bearer test-capsule"));
}

#[tokio::test]
async fn a_listing_with_cards_joins_a_probe_already_in_flight() {
    let api = Arc::new(Api::start().await);
    let process = TestProcess::sleeping();
    let record = process.record();
    // The hold is the window the second listing has to join in: long against a loaded
    // machine's scheduling, within the probe's 5 s answer deadline.
    let door = DoorServer::start_slow(
        DoorMode::A2aCard(record.session_id()),
        Duration::from_millis(3500),
    );
    let record = record.url(door.url());
    api.write(&record);

    let plain = {
        let api = Arc::clone(&api);
        tokio::spawn(async move { api.get("/sessions").await })
    };
    // The plain listing's probe has reached the door, which holds its answer for 3.5 s: the
    // listing with cards joins that probe.
    let waited = std::time::Instant::now();
    while door.requests().is_empty() {
        assert!(waited.elapsed() < DEADLINE, "the door was never asked");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let carded = api.get("/sessions?include=card").await;
    let plain = plain.await.expect("the plain listing");
    assert_eq!(door.requests().len(), 1);
    let id = record.session_id();
    assert_eq!(by_id(&carded)[&id]["card"], a2a_card(&id));
    assert_eq!(by_id(&plain)[&id].get("card"), None);
}

/// A door on `127.0.0.1:0` that answers every request with `body` as a `200` JSON card, and
/// counts the requests; served on its own thread until the test process ends.
fn door_answering(body: Vec<u8>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let url = listener.local_addr().expect("an address").to_string();
    let asked = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&asked);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                head.push(byte[0]);
            }
            counted.fetch_add(1, Ordering::SeqCst);
            let answer = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes());
            let _ = stream.write_all(&body);
        }
    });
    (url, asked)
}

#[tokio::test]
async fn a_card_over_the_size_cap_leaves_the_session_unreachable_with_or_without_cards() {
    let api = Api::start().await;
    let process = TestProcess::sleeping();
    let record = process.record();
    let mut card = spec_card(&record.session_id());
    card["padding"] = json!("x".repeat(MAX_CARD_BYTES));
    let (url, asked) = door_answering(serde_json::to_vec(&card).expect("JSON"));
    let record = record.url(url);
    api.write(&record);
    let id = record.session_id();

    let carded = api.get("/sessions?include=card").await;
    let plain = api.get("/sessions").await;
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    let carded = &by_id(&carded)[&id];
    assert_eq!(carded["liveness"]["state"], "unreachable");
    assert_eq!(carded["card"], Value::Null);
    assert_eq!(carded["liveness"], by_id(&plain)[&id]["liveness"]);
    let reason = carded["liveness"]["reason"].as_str().expect("a reason");
    assert!(reason.contains("more than"), "{reason}");
}

/// Three sessions of two capsules: `alpha` live with skills (`summarize` tagged `text`, `nlp`;
/// `plan`), `beta` live with a card listing none, `alpha` unreachable.
struct Fleetlet {
    api: Api,
    _process: TestProcess,
    _doors: Vec<DoorServer>,
    skilled: String,
    plain: String,
    unreachable: String,
}

impl Fleetlet {
    async fn start() -> Self {
        let api = Api::start().await;
        let process = TestProcess::sleeping();
        let skilled = process.record().set("capsule_name", "alpha");
        let skilled_door = DoorServer::start(DoorMode::A2aCard(skilled.session_id()));
        let plain = process.record().set("capsule_name", "beta");
        let plain_door = DoorServer::start(DoorMode::SpecCard(plain.session_id()));
        let unreachable = (process.record().set("capsule_name", "alpha")).url(refused_url());
        for record in [
            skilled.clone().url(skilled_door.url()),
            plain.clone().url(plain_door.url()),
            unreachable.clone(),
        ] {
            api.write(&record);
        }
        Self {
            api,
            _process: process,
            _doors: vec![skilled_door, plain_door],
            skilled: skilled.session_id(),
            plain: plain.session_id(),
            unreachable: unreachable.session_id(),
        }
    }
}

#[tokio::test]
async fn capsule_and_skill_filters_keep_what_they_name_and_combine_with_status() {
    let f = Fleetlet::start().await;
    let (s, p, u) = (&f.skilled, &f.plain, &f.unreachable);
    let cases: [(&str, Vec<&String>); 14] = [
        ("capsule=alpha", vec![s, u]),
        ("capsule=beta", vec![p]),
        ("capsule=beta,%20alpha", vec![s, p, u]),
        ("capsule=gamma", vec![]),
        ("capsule=beta&probe=false", vec![p]),
        ("skill=plan", vec![s]),
        ("skill=nlp", vec![s]),
        ("skill=nothing,text", vec![s]),
        ("skill=summ", vec![]),
        ("skill=plan&capsule=beta", vec![]),
        ("status=unreachable&capsule=alpha", vec![u]),
        ("status=live&capsule=alpha", vec![s]),
        ("status=live&skill=summarize&capsule=alpha,beta", vec![s]),
        ("status=live,unreachable&capsule=beta", vec![p]),
    ];
    for (query, expected) in cases {
        let listing = f.api.get(&format!("/sessions?{query}")).await;
        assert_eq!(ids(&listing), sorted(&expected), "{query}");
        assert!(listing["sessions"][0].get("card").is_none(), "{query}");
    }
    let carded = f.api.get("/sessions?include=card&skill=plan").await;
    assert_eq!(ids(&carded), std::slice::from_ref(s));
    assert_eq!(carded["sessions"][0]["card"], a2a_card(s));
}

#[tokio::test]
async fn what_cannot_be_answered_is_a_400_and_changes_nothing() {
    let f = Fleetlet::start().await;
    let before = dir_snapshot(f.api.server.dir());
    let refused = [
        (
            "include=card&probe=false",
            "include=card needs the door probe",
        ),
        ("include=card,resources&probe=false", "needs the door probe"),
        ("skill=plan&probe=false", "skill= needs the door probe"),
        ("include=cards", "unknown include"),
        ("include=card,cpu", "unknown include"),
        ("include=", "unknown include"),
        ("capsule=", "none of them empty"),
        ("capsule=alpha,,beta", "none of them empty"),
        ("skill=plan,", "none of them empty"),
        (
            "status=live&capsule=alpha&probe=false",
            "need the door probe",
        ),
    ];
    for (query, detail) in refused {
        let (status, text) = f.api.get_text(&format!("/sessions?{query}")).await;
        assert_eq!(status, 400, "{query}: {text}");
        let problem: Value = serde_json::from_str(&text).expect("a problem");
        let said = problem["detail"].as_str().expect("a detail");
        assert!(said.contains(detail), "{query}: {said}");
    }
    // One session's card has a route of its own; `include=card` there is refused, not ignored.
    let one = "/sessions/ses_00000000000000000000000000000001?include=card";
    let (status, text) = f.api.get_text(one).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("/sessions/{id}/card"), "{text}");
    assert_eq!(dir_snapshot(f.api.server.dir()), before);
}

#[test]
fn ps_filters_by_capsule_and_skill_in_the_table_and_in_json() {
    let home = Home::new();
    let process = TestProcess::sleeping();
    let skilled = process.record().set("capsule_name", "alpha");
    let skilled_door = DoorServer::start(DoorMode::A2aCard(skilled.session_id()));
    let plain = process.record().set("capsule_name", "beta");
    let plain_door = DoorServer::start(DoorMode::SpecCard(plain.session_id()));
    home.write(&skilled.clone().url(skilled_door.url()));
    home.write(&plain.clone().url(plain_door.url()));
    let ps = |args: &[&str]| {
        let mut cmd = registry(home.path(), User::Me);
        cmd.arg("ps").args(args);
        run(cmd)
    };
    let listed = |done: &common::binary::Finished| -> Vec<String> {
        let mut ids: Vec<String> = (done.json().as_array().expect("a JSON array").iter())
            .map(|s| s["session_id"].as_str().expect("an id").to_owned())
            .collect();
        ids.sort();
        ids
    };
    let cases: [(&[&str], Vec<String>); 5] = [
        (&["--capsule", "beta"], vec![plain.session_id()]),
        (
            &["--capsule", "alpha,beta"],
            sorted(&[&skilled.session_id(), &plain.session_id()]),
        ),
        (&["--skill", "nlp"], vec![skilled.session_id()]),
        (&["--skill", "plan", "--capsule", "beta"], vec![]),
        (
            &["--capsule", "gamma", "--capsule", "alpha"],
            vec![skilled.session_id()],
        ),
    ];
    for (args, expected) in cases {
        let done = ps(&[args, &["--json"][..]].concat());
        done.assert_success();
        assert_eq!(listed(&done), expected, "{args:?}");
    }
    let table = ps(&["--skill", "summarize"]);
    table.assert_success();
    assert!(table.stdout.contains(&skilled.session_id()), "{table:?}");
    assert!(!table.stdout.contains(&plain.session_id()), "{table:?}");
    let none = ps(&["--capsule", "gamma"]);
    none.assert_success();
    assert_eq!(none.stdout, "no running capsules\n");
    let empty = ps(&["--capsule", "alpha,,beta"]);
    assert_ne!(empty.status.code(), Some(0), "{empty:?}");
    assert!(empty.stderr.contains("--capsule"), "{empty:?}");
}
