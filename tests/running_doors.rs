//! Layer 3 and the verdict of all three layers (`verify`, and the registry's concurrent
//! `verify`), against real doors: hand-written HTTP/1.1 servers on `127.0.0.1:0` that answer a
//! spec-generation card, an A2A v1.0 card, another session's card, nothing, garbage, HTTP 500,
//! or an authenticated extended card, and that record every request they receive.
//!
//! Records name the test process itself (alive, never signalled) unless a test needs a process
//! that is gone (a reaped child or a zombie) or unverified (an empty recorded start token).

mod common;

use std::time::{Duration, Instant};

use common::server::TestServer;
use common::{
    CARD_PATH, CapsuleProcess, DEADLINE, DoorMode, DoorServer, ExitedChild, RecordJson, Rejection,
    SquattingDoor, TestProcess, Zombie, refused_url, session_id, spec_card, wire_word,
    wrong_start_token,
};
use murmur_registry::registry::Registry;
use murmur_registry::running::{
    DoorProbe, Liveness, ProcessState, RunningRecord, process_state, reason_no_process,
    reason_pid_reused, verify,
};
use murmur_registry::wire::SessionState;
use serde_json::{Value, json};

const TOKEN: &str = "door-token-SECRET-5e1f0c";

/// A prober that gives up quickly, for doors expected to fail.
fn quick_probe() -> DoorProbe {
    DoorProbe::with_deadlines(Duration::from_millis(300), Duration::from_millis(500))
}

/// A record for this (live) process whose door is `door`.
fn record_behind(door: &DoorServer, session_id: &str) -> RunningRecord {
    RecordJson::new(session_id).url(door.url()).parse()
}

/// What layers 1–2 and all three layers say of one record.
#[derive(Debug)]
struct Verdict {
    process: ProcessState,
    liveness: Liveness,
}

/// Layers 1–2 (`process_state`) and all three (`verify`) for one record.
async fn verify_verdict(record: &RunningRecord, door: &DoorProbe) -> Verdict {
    Verdict {
        process: process_state(record),
        liveness: verify(record, door).await,
    }
}

/// Every record verified at once, as the service does: doors probed side by side.
async fn verify_many(records: &[RunningRecord], door: &DoorProbe) -> Vec<Verdict> {
    let registry = Registry::new(std::env::temp_dir(), door.clone());
    let readings = registry.verify(records.to_vec(), true).await;
    readings
        .into_iter()
        .map(|reading| Verdict {
            process: reading.process,
            liveness: reading.liveness.expect("all three layers decide"),
        })
        .collect()
}

/// The word a client sees for `liveness` (the HTTP contract's one vocabulary).
fn unreachable_reason(liveness: &Liveness) -> &str {
    match liveness {
        Liveness::Unreachable { reason } => reason,
        other => panic!("expected unreachable, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_spec_card_naming_this_session_is_live() {
    let id = session_id();
    let door = DoorServer::start(DoorMode::SpecCard(id.clone()));
    let record = record_behind(&door, &id);
    let verdict = verify_verdict(&record, &quick_probe()).await;
    assert_eq!(verdict.process, ProcessState::Alive);
    assert_eq!(verdict.liveness, Liveness::Live);
    assert_eq!(wire_word(SessionState::from(&verdict.liveness)), "live");
    assert_eq!(verdict.liveness.reason(), None);

    let requests = door.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0].method, "GET");
    assert_eq!(requests[0].path, CARD_PATH);
    assert_eq!(requests[0].header("a2a-version"), Some("1.0"));
    assert_eq!(requests[0].header("authorization"), None);
}

/// The capsule stand-in the end-to-end tests rely on: a separate process whose own doors
/// answer for their own sessions, and which a SIGSTOP silences.
#[tokio::test(flavor = "multi_thread")]
async fn a_capsule_process_is_live_on_every_door_and_silent_when_stopped() {
    let capsule = CapsuleProcess::spawn(&[session_id(), session_id()]);
    let records: Vec<RunningRecord> = capsule.records().iter().map(RecordJson::parse).collect();
    for verdict in verify_many(&records, &quick_probe()).await {
        assert_eq!(verdict.liveness, Liveness::Live);
    }
    // Another door of the same process answers for the other session, not this one.
    let crossed = RecordJson::new(&records[0].session_id)
        .process(capsule.pid(), &records[0].process_start)
        .url(records[1].url.clone().expect("a door"))
        .parse();
    assert!(unreachable_reason(&verify(&crossed, &quick_probe()).await).contains("not this one"));

    capsule.send_signal(19); // SIGSTOP
    let frozen = verify_verdict(&records[0], &quick_probe()).await;
    assert_eq!(frozen.process, ProcessState::Alive);
    assert!(unreachable_reason(&frozen.liveness).contains("did not answer"));
    capsule.send_signal(18); // SIGCONT
    assert_eq!(verify(&records[0], &quick_probe()).await, Liveness::Live);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_a2a_card_naming_this_session_in_the_murmur_extension_is_live() {
    let id = session_id();
    let door = DoorServer::start(DoorMode::A2aCard(id.clone()));
    let record = record_behind(&door, &id);
    assert_eq!(verify(&record, &quick_probe()).await, Liveness::Live);
    let requests = door.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].header("A2A-Version"), Some("1.0"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_door_spelled_localhost_is_probed_too() {
    let id = session_id();
    let door = DoorServer::start(DoorMode::SpecCard(id.clone()));
    let record = RecordJson::new(&id)
        .url(format!("localhost:{}", door.addr().port()))
        .parse();
    // `localhost` may resolve to ::1 first, where nothing listens; the probe must go on to
    // 127.0.0.1 within its deadlines.
    assert_eq!(verify(&record, &DoorProbe::new()).await, Liveness::Live);
    assert_eq!(door.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_card_is_read_however_http_frames_it() {
    let id = session_id();
    for mode in [
        DoorMode::Chunked(id.clone()),
        DoorMode::CloseDelimited(id.clone()),
    ] {
        let door = DoorServer::start(mode.clone());
        let record = record_behind(&door, &id);
        assert_eq!(
            verify(&record, &quick_probe()).await,
            Liveness::Live,
            "{mode:?}"
        );
        let card = quick_probe().card(&record).await.expect("the card");
        assert_eq!(card, spec_card(&id), "{mode:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_card_for_another_session_is_unreachable_never_gone() {
    let id = session_id();
    let other = session_id();
    for mode in [
        DoorMode::SpecCard(other.clone()),
        DoorMode::A2aCard(other.clone()),
    ] {
        let door = DoorServer::start(mode);
        let record = record_behind(&door, &id);
        let verdict = verify_verdict(&record, &quick_probe()).await;
        assert_eq!(verdict.process, ProcessState::Alive);
        let reason = unreachable_reason(&verdict.liveness);
        assert!(reason.contains(&other), "{reason}");
        assert_eq!(door.requests().len(), 1);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_door_that_never_answers_is_unreachable_within_the_deadlines() {
    let id = session_id();
    let door = DoorServer::start(DoorMode::Silent);
    let record = record_behind(&door, &id);
    let start = Instant::now();
    let liveness = verify(&record, &quick_probe()).await;
    let took = start.elapsed();
    let reason = unreachable_reason(&liveness);
    assert!(reason.contains(&door.url()), "{reason}");
    assert!(took < DEADLINE, "verify took {took:?}");
    assert!(
        took >= Duration::from_millis(500),
        "verify gave up after {took:?}, before the answer deadline"
    );
    assert_eq!(door.requests().len(), 1, "the door was reached and asked");
}

/// Verify a record of `session_id` behind a door in `mode`, which must leave it unreachable: the
/// door (to ask what it received) and the reason.
async fn unreachable_behind(mode: DoorMode, session_id: &str) -> (DoorServer, String) {
    let door = DoorServer::start(mode);
    let record = record_behind(&door, session_id);
    let liveness = verify(&record, &quick_probe()).await;
    let reason = unreachable_reason(&liveness).to_owned();
    (door, reason)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_door_answering_garbage_is_unreachable() {
    let id = session_id();
    for mode in [DoorMode::NotJson, DoorMode::NotHttp] {
        let (door, reason) = unreachable_behind(mode.clone(), &id).await;
        assert!(reason.contains(&door.url()), "{mode:?}: {reason}");
        assert_eq!(door.requests().len(), 1, "{mode:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_door_that_hangs_up_without_answering_is_unreachable_and_says_so() {
    let id = session_id();
    for mode in [DoorMode::ClosesUnanswered, DoorMode::ResetsUnanswered] {
        let (door, reason) = unreachable_behind(mode.clone(), &id).await;
        assert_eq!(
            reason,
            format!(
                "door at {} closed the connection without a valid HTTP answer",
                door.url()
            ),
            "{mode:?}"
        );
        assert_eq!(door.requests().len(), 1, "{mode:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_door_answering_http_500_is_unreachable_even_with_a_matching_body() {
    let id = session_id();
    let door = DoorServer::start(DoorMode::ServerError(id.clone()));
    let record = record_behind(&door, &id);
    let liveness = verify(&record, &quick_probe()).await;
    let reason = unreachable_reason(&liveness);
    assert!(reason.contains("500"), "{reason}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_door_refusing_the_connection_is_unreachable() {
    let id = session_id();
    let url = refused_url();
    let record = RecordJson::new(&id).url(url.as_str()).parse();
    let start = Instant::now();
    let liveness = verify(&record, &quick_probe()).await;
    let reason = unreachable_reason(&liveness);
    assert!(reason.contains(&url), "{reason}");
    assert!(start.elapsed() < DEADLINE);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_door_off_loopback_is_never_probed() {
    let id = session_id();
    // TEST-NET-1 (RFC 5737): nothing there, and the probe must not even try.
    let record = RecordJson::new(&id)
        .url("192.0.2.1:80")
        .door_token(TOKEN)
        .parse();
    let liveness = verify(&record, &quick_probe()).await;
    let reason = unreachable_reason(&liveness);
    assert!(reason.contains("not probed"), "{reason}");
    assert!(!reason.contains(TOKEN));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_authenticated_door_with_the_right_token_is_live_and_got_the_bearer_token() {
    let id = session_id();
    let door = DoorServer::start(DoorMode::Authenticated {
        session_id: id.clone(),
        token: TOKEN.to_owned(),
        rejection: Rejection::Http401,
    });
    let record = RecordJson::new(&id)
        .url(door.url())
        .door_token(TOKEN)
        .parse();
    assert_eq!(verify(&record, &quick_probe()).await, Liveness::Live);

    let requests = door.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    let request = &requests[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/");
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    assert_eq!(request.header("a2a-version"), Some("1.0"));
    assert!(
        request
            .header("content-type")
            .is_some_and(|ct| ct.starts_with("application/json")),
        "{request:?}"
    );
    let call: Value = serde_json::from_str(&request.body).unwrap();
    assert_eq!(
        call,
        json!({"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {}})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_authenticated_door_turning_away_a_wrong_token_is_unreachable() {
    let id = session_id();
    for rejection in [Rejection::Http401, Rejection::JsonRpcError] {
        let door = DoorServer::start(DoorMode::Authenticated {
            session_id: id.clone(),
            token: "the-door's-real-token".to_owned(),
            rejection,
        });
        let record = RecordJson::new(&id)
            .url(door.url())
            .door_token(TOKEN)
            .parse();
        let verdict = verify_verdict(&record, &quick_probe()).await;
        assert_eq!(verdict.process, ProcessState::Alive);
        let reason = unreachable_reason(&verdict.liveness);
        assert!(!reason.contains(TOKEN), "{rejection:?}: {reason}");
        assert!(!format!("{verdict:?}").contains(TOKEN));
        assert_eq!(door.requests().len(), 1);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_door_echoing_the_token_back_does_not_carry_it_into_the_reason() {
    let id = session_id();
    let door = DoorServer::start(DoorMode::Authenticated {
        session_id: id.clone(),
        token: "the-door's-real-token".to_owned(),
        rejection: Rejection::EchoingJsonRpcError,
    });
    let record = RecordJson::new(&id)
        .url(door.url())
        .door_token(TOKEN)
        .parse();
    let verdict = verify_verdict(&record, &quick_probe()).await;
    let reason = unreachable_reason(&verdict.liveness);
    assert!(!reason.contains(TOKEN), "the door token leaked: {reason}");
    assert!(!format!("{verdict:?}").contains(TOKEN));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_record_without_a_door_token_reads_the_public_card_of_an_authenticated_door() {
    let id = session_id();
    let door = DoorServer::start(DoorMode::Authenticated {
        session_id: id.clone(),
        token: TOKEN.to_owned(),
        rejection: Rejection::Http401,
    });
    let record = record_behind(&door, &id);
    let liveness = verify(&record, &quick_probe()).await;
    // The public card of an authenticated door names no session.
    let reason = unreachable_reason(&liveness);
    assert!(reason.contains("names no session"), "{reason}");

    let requests = door.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0].method, "GET");
    assert_eq!(requests[0].path, CARD_PATH);
    assert_eq!(requests[0].header("authorization"), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_door_token_is_sent_only_to_its_own_door() {
    let with_token = session_id();
    let without = session_id();
    let auth_door = DoorServer::start(DoorMode::Authenticated {
        session_id: with_token.clone(),
        token: TOKEN.to_owned(),
        rejection: Rejection::Http401,
    });
    let spec_door = DoorServer::start(DoorMode::SpecCard(without.clone()));
    let a2a_door = DoorServer::start(DoorMode::A2aCard(without.clone()));
    let records = [
        RecordJson::new(&with_token)
            .url(auth_door.url())
            .door_token(TOKEN)
            .parse(),
        record_behind(&spec_door, &without),
        record_behind(&a2a_door, &without),
    ];
    let verdicts = verify_many(&records, &quick_probe()).await;
    let liveness: Vec<_> = verdicts.iter().map(|v| v.liveness.clone()).collect();
    assert_eq!(liveness, [Liveness::Live, Liveness::Live, Liveness::Live]);
    assert_eq!(auth_door.requests().len(), 1);
    for door in [&spec_door, &a2a_door] {
        let requests = door.requests();
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].header("authorization"), None);
        assert!(!format!("{requests:?}").contains(TOKEN));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gone_process_is_never_probed() {
    let exited = ExitedChild::spawn();
    let zombie = Zombie::spawn();
    let live = TestProcess::sleeping();
    let reused_token = wrong_start_token(live.pid());
    let cases = [
        (
            exited.pid,
            exited.start_token.clone(),
            reason_no_process(exited.pid),
        ),
        (
            zombie.pid(),
            zombie.start_token.clone(),
            reason_no_process(zombie.pid()),
        ),
        (live.pid(), reused_token, reason_pid_reused(live.pid())),
    ];
    for (pid, token, reason) in cases {
        let id = session_id();
        // The door would confirm the session: only layers 1-2 can make it gone.
        let door = DoorServer::start(DoorMode::SpecCard(id.clone()));
        let record = RecordJson::new(&id)
            .url(door.url())
            .door_token(TOKEN)
            .process(pid, &token)
            .parse();
        let verdict = verify_verdict(&record, &quick_probe()).await;
        assert_eq!(
            verdict.liveness,
            Liveness::Gone {
                reason: reason.clone()
            }
        );
        assert_eq!(wire_word(SessionState::from(&verdict.liveness)), "gone");
        assert_eq!(verdict.process, ProcessState::Gone { reason });
        assert!(door.requests().is_empty(), "pid {pid}: the door was probed");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unverified_process_is_unreachable_and_its_door_is_not_trusted() {
    let id = session_id();
    let door = DoorServer::start(DoorMode::SpecCard(id.clone()));
    let record = RecordJson::new(&id)
        .url(door.url())
        .process_start("")
        .parse();
    let verdict = verify_verdict(&record, &quick_probe()).await;
    assert!(
        matches!(verdict.process, ProcessState::Unverified { .. }),
        "{verdict:?}"
    );
    assert!(
        matches!(verdict.liveness, Liveness::Unreachable { .. }),
        "{verdict:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_process_without_a_door_is_live_without_a_probe() {
    let record = RecordJson::fresh().no_door().parse();
    let verdict = verify_verdict(&record, &quick_probe()).await;
    assert_eq!(verdict.process, ProcessState::Alive);
    assert_eq!(verdict.liveness, Liveness::Live);

    let exited = ExitedChild::spawn();
    let gone = exited.record().no_door().parse();
    assert_eq!(
        verify(&gone, &quick_probe()).await,
        Liveness::Gone {
            reason: reason_no_process(exited.pid)
        }
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_many_probes_slow_doors_concurrently_and_keeps_the_input_order() {
    const DOORS: usize = 20;
    // Every door answers after at least 1.5 s, the first ones last: one after the other this
    // would take over 37 s.
    let delay = |i: usize| Duration::from_millis(1500 + 40 * (DOORS - 1 - i) as u64);
    let ids: Vec<String> = (0..DOORS).map(|_| session_id()).collect();
    let doors: Vec<DoorServer> = (0..DOORS)
        .map(|i| {
            // Odd doors answer for another session, so each verdict can be told apart.
            let answers_for = if i % 2 == 0 {
                ids[i].clone()
            } else {
                format!("ses_other{i:023}")
            };
            DoorServer::start_slow(DoorMode::SpecCard(answers_for), delay(i))
        })
        .collect();
    let records: Vec<RunningRecord> = (0..DOORS)
        .map(|i| record_behind(&doors[i], &ids[i]))
        .collect();

    let start = Instant::now();
    let verdicts = verify_many(&records, &DoorProbe::new()).await;
    let took = start.elapsed();
    assert!(took < DEADLINE, "verify_many took {took:?}");
    assert!(took >= Duration::from_millis(1500), "took only {took:?}");

    assert_eq!(verdicts.len(), DOORS);
    for (i, verdict) in verdicts.iter().enumerate() {
        assert_eq!(verdict.process, ProcessState::Alive, "record {i}");
        if i % 2 == 0 {
            assert_eq!(verdict.liveness, Liveness::Live, "record {i}");
        } else {
            let reason = unreachable_reason(&verdict.liveness);
            assert!(reason.contains(&doors[i].url()), "record {i}: {reason}");
            assert!(
                reason.contains(&format!("ses_other{i:023}")),
                "record {i}: {reason}"
            );
        }
        assert_eq!(doors[i].requests().len(), 1, "door {i}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_many_keeps_the_order_of_mixed_verdicts() {
    let live_id = session_id();
    let live_door = DoorServer::start(DoorMode::A2aCard(live_id.clone()));
    let silent_door = DoorServer::start(DoorMode::Silent);
    let exited = ExitedChild::spawn();
    let records = [
        exited.record().parse(),
        RecordJson::fresh().url(silent_door.url()).parse(),
        record_behind(&live_door, &live_id),
        RecordJson::fresh().no_door().parse(),
        RecordJson::fresh().process_start("").parse(),
    ];
    let verdicts = verify_many(&records, &quick_probe()).await;
    let states: Vec<String> = verdicts
        .iter()
        .map(|v| wire_word(SessionState::from(&v.liveness)))
        .collect();
    assert_eq!(
        states,
        ["gone", "unreachable", "live", "live", "unreachable"]
    );
    assert_eq!(
        verdicts[0].liveness.reason(),
        Some(reason_no_process(exited.pid).as_str())
    );
    assert!(verify_many(&[], &quick_probe()).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_door_token_never_shows_in_debug_output_or_reasons() {
    let id = session_id();
    let door = DoorServer::start(DoorMode::Authenticated {
        session_id: id.clone(),
        token: TOKEN.to_owned(),
        rejection: Rejection::Http401,
    });
    let silent = DoorServer::start(DoorMode::Silent);
    let records = [
        RecordJson::new(&id)
            .url(door.url())
            .door_token(TOKEN)
            .set("credentials", json!({"ops": TOKEN}))
            .parse(),
        RecordJson::fresh()
            .url(silent.url())
            .door_token(TOKEN)
            .parse(),
        RecordJson::fresh()
            .url(refused_url())
            .door_token(TOKEN)
            .parse(),
        RecordJson::fresh()
            .url("not a door")
            .door_token(TOKEN)
            .parse(),
    ];
    let probe = quick_probe();
    let verdicts = verify_many(&records, &probe).await;
    assert_eq!(verdicts[0].liveness, Liveness::Live);
    let shown = format!("{records:?} {records:#?} {verdicts:?} {verdicts:#?} {probe:?}");
    assert!(!shown.contains(TOKEN), "the token leaked: {shown}");
    for verdict in &verdicts[1..] {
        let reason = unreachable_reason(&verdict.liveness);
        assert!(!reason.contains(TOKEN), "{reason}");
    }
}

/// The reason `liveness` gives, which must say that a door held by uid 65534 was sent nothing.
fn assert_withheld_from_nobody(liveness: &Liveness, url: &str, withheld: &str) {
    let reason = unreachable_reason(liveness);
    assert!(
        reason.starts_with(&format!(
            "door at {url} is held by uid 65534, not by the records' owner"
        )),
        "{reason}"
    );
    assert!(reason.ends_with(withheld), "{reason}");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: the squatter runs as uid 65534 (setpriv)"]
async fn a_door_port_held_by_another_user_gets_no_byte_and_the_session_is_unreachable() {
    let id = session_id();
    let squatter = SquattingDoor::start(&id);
    let with_token = RecordJson::new(&id)
        .url(squatter.url())
        .door_token(TOKEN)
        .parse();
    let without_token = RecordJson::new(&id).url(squatter.url()).parse();
    for (record, withheld) in [
        (with_token, "; the token was not sent"),
        (without_token, "; nothing was sent"),
    ] {
        // The squatter answers as this session's door would: only the check keeps it out.
        let liveness = verify(&record, &quick_probe()).await;
        assert_withheld_from_nobody(&liveness, &squatter.url(), withheld);
        assert_eq!(squatter.connections(), [""], "the squatter got bytes");
    }
}

/// `GET path` of `server` with its token: a 200's JSON body.
async fn get_json(server: &TestServer, path: &str) -> Value {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let url = format!("{}{path}", server.base());
    let answer = client.get(url).bearer_auth(server.token()).send().await;
    let answer = answer.expect("the registry answers");
    assert_eq!(answer.status(), 200, "{path}");
    serde_json::from_str(&answer.text().await.unwrap()).expect("JSON")
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: the squatter runs as uid 65534 (setpriv)"]
async fn sessions_and_liveness_over_http_send_a_squatter_nothing() {
    let id = session_id();
    let squatter = SquattingDoor::start(&id);
    let server = TestServer::builder().probe(quick_probe()).start().await;
    RecordJson::new(&id)
        .url(squatter.url())
        .door_token(TOKEN)
        .write_in(server.dir());
    let listed = get_json(&server, "/sessions").await;
    let liveness = &listed["sessions"][0]["liveness"];
    assert_eq!(liveness["state"], "unreachable", "{listed}");
    let reason = liveness["reason"].as_str().unwrap_or_default().to_owned();
    let said = Liveness::Unreachable { reason };
    assert_withheld_from_nobody(&said, &squatter.url(), "; the token was not sent");
    let one = get_json(&server, &format!("/sessions/{id}/liveness")).await;
    assert_eq!(one["state"], "unreachable", "{one}");
    assert_eq!(one["reason"], liveness["reason"], "{one}");
    let received = squatter.connections();
    assert!(received.iter().all(String::is_empty), "{received:?}");
}
