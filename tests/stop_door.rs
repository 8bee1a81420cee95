//! A stop asks the capsule first, as `mur stop` does: `murmur.StopSession` through the door,
//! right after a fresh probe, before SIGTERM; then the signals, whatever the door said.
//!
//! Real capsule processes (children this test owns) and real doors on `127.0.0.1:0`
//! ([`StoppableDoor`]), the registry served in-process and, for the CLI, the binary itself.
//! Covers each `door.outcome`, the order (the door is called while the process runs), the
//! skips (`door=false`, `timeout=0`, `--no-door`), the ask's deadline, the size cap, the
//! bearer token, redaction of a secret the door echoes, and the CLI's lines.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use common::binary::{Home, User, registry, run};
use common::server::TestServer;
use common::*;
use murmur_registry::registry::{Removal, RemovalCause};
use murmur_registry::running::{DoorProbe, MAX_STOP_ANSWER_BYTES, STOP_ASK_DEADLINE};
use serde_json::{Value, json};

/// A registry served in-process over its own running directory, and a client for it.
struct Registry {
    server: TestServer,
    client: reqwest::Client,
}

/// An answer's status, its body as JSON, and its text.
#[derive(Debug)]
struct Answer {
    status: u16,
    body: Value,
    text: String,
}

impl Registry {
    async fn start() -> Self {
        // Short probe deadlines, so a door that fails the probe fails it fast.
        let probe =
            DoorProbe::with_deadlines(Duration::from_millis(500), Duration::from_millis(1500));
        Self {
            server: TestServer::builder().probe(probe).start().await,
            client: reqwest::Client::builder().no_proxy().build().unwrap(),
        }
    }

    /// `POST /sessions/{id}/stop?{query}`.
    async fn stop(&self, id: &str, query: &str) -> Answer {
        let url = format!("{}/sessions/{id}/stop?{query}", self.server.base());
        self.send(self.client.post(url)).await
    }

    /// `DELETE /sessions/{id}`: prune on evidence.
    async fn prune(&self, id: &str) -> Answer {
        let url = format!("{}/sessions/{id}", self.server.base());
        self.send(self.client.delete(url)).await
    }

    /// `request` with the token, its answer read whole.
    async fn send(&self, request: reqwest::RequestBuilder) -> Answer {
        let response =
            (request.bearer_auth(self.server.token()).send().await).expect("the registry answers");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Answer { status, body, text }
    }

    /// Why the registry last removed `id`'s record (taken, as the live view takes it).
    fn removal(&self, id: &str) -> Option<Removal> {
        self.server.state().registry().take_removal(id)
    }
}

/// A sleeping process standing for capsule `id`, its record (naming `door`) written in the
/// registry's directory.
fn capsule_behind(registry: &Registry, id: &str, door: &DoorServer) -> TestProcess {
    let process = TestProcess::sleeping();
    record_behind(id, &process, door).write_in(registry.server.dir());
    process
}

/// [`capsule_behind`] for a door that checks `token` as bearer: the record holds it.
fn capsule_behind_authenticated(
    registry: &Registry,
    id: &str,
    door: &DoorServer,
    token: &str,
) -> TestProcess {
    let process = TestProcess::sleeping();
    (record_behind(id, &process, door).set("door_token", token)).write_in(registry.server.dir());
    process
}

fn record_behind(id: &str, process: &TestProcess, door: &DoorServer) -> RecordJson {
    RecordJson::new(id)
        .process(process.pid(), &process.start_token())
        .url(door.url())
}

/// The `murmur.StopSession` calls a door received.
fn stop_calls(door: &DoorServer) -> Vec<Received> {
    door.requests()
        .into_iter()
        .filter(|r| is_call_of(r, "murmur.StopSession"))
        .collect()
}

fn answers(canceled: Value, residue: Value) -> StopAnswer {
    let list = |v: Value| v.as_array().cloned().expect("a JSON array");
    StopAnswer::Answers {
        canceled: list(canceled),
        residue: list(residue),
    }
}

/// The stop ended the process with SIGTERM, and the answer says `door.outcome` is `outcome`.
fn assert_stopped_by_sigterm(answer: &Answer, process: &mut TestProcess, outcome: &str) {
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.body["outcome"], "stopped", "{}", answer.text);
    assert_eq!(answer.body["signal_sent"], "SIGTERM", "{}", answer.text);
    assert_eq!(answer.body["door"]["outcome"], outcome, "{}", answer.text);
    assert_eq!(process.wait_exit(DEADLINE).signal(), Some(15));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_door_that_answers_is_asked_while_the_process_runs_then_sigterm_ends_it() {
    let registry = Registry::start().await;
    let id = session_id();
    let mut process = TestProcess::sleeping();
    let watched = WatchedProcess::new(process.pid());
    let stop = answers(
        json!(["task_01", "task_02"]),
        json!(["shell: npm run dev (pid 4242)", {"delegate": "ses_child", "pid": 4243}]),
    );
    let door = DoorServer::start(DoorMode::Stoppable(
        StoppableDoor::new(&id, stop).watching(&watched),
    ));
    let record = RecordJson::new(&id)
        .process(process.pid(), &process.start_token())
        .url(door.url());
    let file = record.write_in(registry.server.dir());

    let answer = registry.stop(&id, "").await;
    assert_stopped_by_sigterm(&answer, &mut process, "answered");
    assert_eq!(
        answer.body["door"],
        json!({
            "outcome": "answered",
            "canceled": ["task_01", "task_02"],
            "residue": ["shell: npm run dev (pid 4242)", {"delegate": "ses_child", "pid": 4243}],
            "reason": null,
        })
    );
    assert_eq!(
        watched.running_at_each_call(),
        [true],
        "asked once, while the process still ran (before SIGTERM)"
    );
    // The probe came first, on its own connection, then the call as murmur 0.8 expects it.
    let requests = door.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    assert_eq!(
        (requests[0].method.as_str(), requests[0].path.as_str()),
        ("GET", CARD_PATH)
    );
    let call = &requests[1];
    assert!(is_call_of(call, "murmur.StopSession"), "{call:#?}");
    assert_eq!(
        serde_json::from_str::<Value>(&call.body).unwrap(),
        json!({"jsonrpc": "2.0", "id": 1, "method": "murmur.StopSession", "params": {}})
    );
    assert_eq!(call.header("a2a-version"), Some("1.0"));
    assert_eq!(call.header("content-type"), Some("application/json"));
    assert_eq!(
        call.header("authorization"),
        None,
        "a public door gets no token"
    );
    assert!(!file.exists(), "the stopped session's record is pruned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authenticated_door_is_asked_with_its_bearer_token_and_only_with_it() {
    let registry = Registry::start().await;
    let token = "door-token-7d1c0a5e";
    let id = session_id();
    let door = DoorServer::start(DoorMode::Stoppable(
        StoppableDoor::new(&id, answers(json!(["t1"]), json!([]))).with_token(token),
    ));
    let mut process = capsule_behind_authenticated(&registry, &id, &door, token);

    let answer = registry.stop(&id, "").await;
    assert_stopped_by_sigterm(&answer, &mut process, "answered");
    assert_eq!(answer.body["door"]["canceled"], json!(["t1"]));
    let calls = stop_calls(&door);
    assert_eq!(calls.len(), 1, "{calls:#?}");
    assert_eq!(
        calls[0].header("authorization"),
        Some(format!("Bearer {token}").as_str())
    );
    assert!(!answer.text.contains(token), "{}", answer.text);

    // A record whose token the door turns away fails the probe: the door is not asked.
    let other_id = session_id();
    let strict = DoorServer::start(DoorMode::Stoppable(
        StoppableDoor::new(&other_id, answers(json!(["t1"]), json!([]))).with_token(token),
    ));
    let mut other = TestProcess::sleeping();
    RecordJson::new(&other_id)
        .process(other.pid(), &other.start_token())
        .url(strict.url())
        .set("door_token", "not-the-token")
        .write_in(registry.server.dir());
    let answer = registry.stop(&other_id, "").await;
    assert_stopped_by_sigterm(&answer, &mut other, "not_live");
    assert!(stop_calls(&strict).is_empty(), "{:#?}", strict.requests());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_door_that_refuses_or_lacks_the_method_is_stopped_by_signals_alone() {
    let registry = Registry::start().await;
    for (stop, says) in [
        (StopAnswer::Refuses, "JSON-RPC error -32000"),
        (StopAnswer::MethodNotFound, "method not found"),
    ] {
        let id = session_id();
        let door = DoorServer::start(DoorMode::Stoppable(StoppableDoor::new(&id, stop)));
        let mut process = capsule_behind(&registry, &id, &door);
        let answer = registry.stop(&id, "").await;
        assert_stopped_by_sigterm(&answer, &mut process, "refused");
        let door_view = &answer.body["door"];
        assert_eq!(door_view["canceled"], json!([]), "{}", answer.text);
        assert_eq!(door_view["residue"], json!([]), "{}", answer.text);
        let reason = door_view["reason"].as_str().expect("a reason");
        assert!(reason.contains(says), "{reason}");
        assert!(
            !reason.contains("own words"),
            "the door's message is not quoted"
        );
        assert_eq!(stop_calls(&door).len(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_door_answering_for_another_session_is_a_mismatch_and_its_answer_is_dropped() {
    let registry = Registry::start().await;
    let id = session_id();
    let other = session_id();
    let door = DoorServer::start(DoorMode::Stoppable(StoppableDoor::new(
        &id,
        StopAnswer::ForSession(other.clone()),
    )));
    let mut process = capsule_behind(&registry, &id, &door);
    let answer = registry.stop(&id, "").await;
    assert_stopped_by_sigterm(&answer, &mut process, "mismatch");
    assert_eq!(
        answer.body["door"]["canceled"],
        json!([]),
        "{}",
        answer.text
    );
    let reason = answer.body["door"]["reason"].as_str().unwrap();
    assert!(reason.contains(&other), "{reason}");
    assert_eq!(
        stop_calls(&door).len(),
        1,
        "asked once, after a probe it passed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_door_delays_the_stop_by_at_most_the_ask_deadline() {
    let registry = Registry::start().await;
    let id = session_id();
    let door = DoorServer::start(DoorMode::Stoppable(StoppableDoor::new(
        &id,
        StopAnswer::Hangs,
    )));
    let mut process = capsule_behind(&registry, &id, &door);
    let started = Instant::now();
    let answer = registry.stop(&id, "").await;
    let took = started.elapsed();
    assert_stopped_by_sigterm(&answer, &mut process, "no_answer");
    assert!(
        took >= STOP_ASK_DEADLINE,
        "the ask waited out its deadline: {took:?}"
    );
    // The probe (a card at once), the ask's deadline, then SIGTERM ends the process promptly;
    // the slack is for a loaded machine, far below the 10 s SIGTERM wait.
    assert!(
        took < STOP_ASK_DEADLINE + Duration::from_secs(4),
        "the hanging door held the stop for {took:?}"
    );
    assert!(
        answer.body["waited_ms"].as_u64().unwrap() < 4000,
        "the ask is not counted as the wait for the process: {}",
        answer.text
    );
    let reason = answer.body["door"]["reason"].as_str().unwrap();
    assert!(reason.contains("did not answer"), "{reason}");
    assert_eq!(stop_calls(&door).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_the_size_cap_is_not_read() {
    let registry = Registry::start().await;
    let id = session_id();
    let huge = "x".repeat(MAX_STOP_ANSWER_BYTES);
    let door = DoorServer::start(DoorMode::Stoppable(StoppableDoor::new(
        &id,
        answers(json!([]), json!([huge])),
    )));
    let mut process = capsule_behind(&registry, &id, &door);
    let answer = registry.stop(&id, "").await;
    assert_stopped_by_sigterm(&answer, &mut process, "no_answer");
    assert!(answer.text.len() < 4096, "{} bytes", answer.text.len());
    let reason = answer.body["door"]["reason"].as_str().unwrap();
    assert!(reason.contains("more than"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: the squatter runs as uid 65534 (setpriv)"]
async fn a_door_port_held_by_another_user_is_sent_nothing_and_the_signals_go_on() {
    let registry = Registry::start().await;
    let id = session_id();
    // It would answer the probe and the ask as this session's door: only the check keeps the
    // token from it.
    let squatter = SquattingDoor::start(&id);
    let mut process = TestProcess::sleeping();
    let record = RecordJson::new(&id)
        .process(process.pid(), &process.start_token())
        .url(squatter.url())
        .set("door_token", "stop-token-SECRET-77aa");
    record.write_in(registry.server.dir());
    let answer = registry.stop(&id, "").await;
    // Layers 1–2 still confirm our process: the stop goes on to SIGTERM as without a door.
    assert_stopped_by_sigterm(&answer, &mut process, "not_live");
    let reason = answer.body["door"]["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!(
            "door at {} is held by uid 65534, not by the records' owner",
            squatter.url()
        )),
        "{reason}"
    );
    assert!(reason.ends_with("; the token was not sent"), "{reason}");
    let received = squatter.connections();
    assert!(received.iter().all(String::is_empty), "{received:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_door_that_does_not_answer_as_this_session_is_never_asked() {
    let registry = Registry::start().await;
    let id = session_id();
    // The port now serves another session's capsule.
    let taken_over = DoorServer::start(DoorMode::Stoppable(StoppableDoor::new(
        &session_id(),
        answers(json!(["their-task"]), json!([])),
    )));
    let mut process = capsule_behind(&registry, &id, &taken_over);
    let answer = registry.stop(&id, "").await;
    assert_stopped_by_sigterm(&answer, &mut process, "not_live");
    assert!(
        answer.body["door"]["reason"]
            .as_str()
            .unwrap()
            .contains("not this one"),
        "{}",
        answer.text
    );
    assert!(
        stop_calls(&taken_over).is_empty(),
        "{:#?}",
        taken_over.requests()
    );

    // Nothing listens at all.
    let mut closed = TestProcess::sleeping();
    let record = closed.record().url(refused_url());
    record.write_in(registry.server.dir());
    let answer = registry.stop(&record.session_id(), "").await;
    assert_stopped_by_sigterm(&answer, &mut closed, "not_live");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_door_gone_and_refused_stops_say_what_the_door_came_to() {
    let registry = Registry::start().await;
    let mut doorless = TestProcess::sleeping();
    let record = doorless.record().no_door();
    record.write_in(registry.server.dir());
    let answer = registry.stop(&record.session_id(), "").await;
    assert_stopped_by_sigterm(&answer, &mut doorless, "no_door");
    assert_eq!(answer.body["door"]["reason"], Value::Null);

    // Gone before the stop: the door (still up, as a takeover would be) is not asked.
    let id = session_id();
    let door = DoorServer::start(DoorMode::Stoppable(StoppableDoor::new(
        &id,
        answers(json!(["t"]), json!([])),
    )));
    let exited = ExitedChild::spawn();
    let gone = exited
        .record()
        .url(door.url())
        .set("session_id", id.as_str());
    gone.write_in(registry.server.dir());
    let answer = registry.stop(&id, "").await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.body["outcome"], "already_gone");
    assert_eq!(
        answer.body["door"]["outcome"], "not_live",
        "{}",
        answer.text
    );
    assert!(stop_calls(&door).is_empty());

    // A process that cannot be confirmed: 409, carrying `door` too; nothing asked or sent.
    let id = session_id();
    let door = DoorServer::start(DoorMode::Stoppable(StoppableDoor::new(
        &id,
        answers(json!(["t"]), json!([])),
    )));
    let mut survivor = TestProcess::sleeping();
    RecordJson::new(&id)
        .process(survivor.pid(), "")
        .url(door.url())
        .write_in(registry.server.dir());
    let refused = registry.stop(&id, "timeout=1").await;
    assert_eq!(refused.status, 409, "{}", refused.text);
    assert_eq!(refused.body["outcome"], "refused");
    assert_eq!(
        refused.body["door"]["outcome"], "not_live",
        "{}",
        refused.text
    );
    assert!(refused.body["door"]["reason"].is_string());
    assert!(stop_calls(&door).is_empty());
    assert!(survivor.is_running());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn door_false_and_timeout_zero_never_call_the_door() {
    let registry = Registry::start().await;
    for (query, signal, signo) in [
        ("door=false", "SIGTERM", 15),
        ("door=false&timeout=1", "SIGTERM", 15),
        ("timeout=0", "SIGKILL", 9),
        ("timeout=0&door=true", "SIGKILL", 9),
    ] {
        let id = session_id();
        let door = DoorServer::start(DoorMode::Stoppable(StoppableDoor::new(
            &id,
            answers(json!(["t"]), json!([])),
        )));
        let mut process = capsule_behind(&registry, &id, &door);
        let answer = registry.stop(&id, query).await;
        assert_eq!(answer.status, 200, "{query}: {}", answer.text);
        assert_eq!(answer.body["signal_sent"], signal, "{query}");
        assert_eq!(
            answer.body["door"],
            json!({"outcome": "skipped", "canceled": [], "residue": [], "reason": null}),
            "{query}"
        );
        assert_eq!(process.wait_exit(DEADLINE).signal(), Some(signo));
        assert!(
            door.requests().is_empty(),
            "{query}: not even probed: {:#?}",
            door.requests()
        );
    }
    // Not a boolean: a 400, and nothing happens.
    let mut process = TestProcess::sleeping();
    let record = process.record().no_door();
    record.write_in(registry.server.dir());
    let bad = registry.stop(&record.session_id(), "door=maybe").await;
    assert_eq!(bad.status, 400, "{}", bad.text);
    assert!(process.is_running());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_the_door_echoes_is_redacted_from_its_answer() {
    let registry = Registry::start().await;
    let token = "secret-4f9b2e6a";
    let id = session_id();
    let stop = answers(
        json!([format!("task for {token}")]),
        json!([{"command": format!("curl -H 'Authorization: Bearer {token}'")}]),
    );
    let door = DoorServer::start(DoorMode::Stoppable(
        StoppableDoor::new(&id, stop).with_token(token),
    ));
    let mut process = capsule_behind_authenticated(&registry, &id, &door, token);
    let answer = registry.stop(&id, "").await;
    assert_stopped_by_sigterm(&answer, &mut process, "answered");
    assert!(!answer.text.contains(token), "{}", answer.text);
    assert_eq!(
        answer.body["door"]["canceled"],
        json!(["task for [redacted]"])
    );
    assert_eq!(
        answer.body["door"]["residue"],
        json!([{"command": "curl -H 'Authorization: Bearer [redacted]'"}])
    );
}

// ---------------------------------------------------------------------------------------------
// The CLI
// ---------------------------------------------------------------------------------------------

fn cli_stop(home: &Home, args: &[&str]) -> common::binary::Finished {
    let mut cmd = registry(home.path(), User::Me);
    cmd.arg("stop").args(args);
    run(cmd)
}

#[test]
fn the_cli_prints_what_was_canceled_and_each_thing_left_running() {
    let home = Home::new();
    let id = session_id();
    let door = DoorServer::start(DoorMode::Stoppable(StoppableDoor::new(
        &id,
        answers(
            json!(["task_01", "task_02"]),
            json!(["shell: npm run dev (pid 4242)", {"delegate": "ses_child"}]),
        ),
    )));
    let mut process = TestProcess::sleeping();
    home.write(
        &RecordJson::new(&id)
            .process(process.pid(), &process.start_token())
            .url(door.url())
            .set("capsule_name", "researcher")
            .set("capsule_version", "0.8.0"),
    );
    let done = cli_stop(&home, &[&id]);
    done.assert_success();
    assert_eq!(
        done.stdout_lines(),
        [
            format!("stopped: {id}"),
            "capsule: researcher@0.8.0".to_owned(),
            "signal: SIGTERM".to_owned(),
            "canceled: task_01, task_02".to_owned(),
            "left running: shell: npm run dev (pid 4242)".to_owned(),
            r#"left running: {"delegate":"ses_child"}"#.to_owned(),
        ],
        "{done:#?}"
    );
    assert_eq!(process.wait_exit(DEADLINE).signal(), Some(15));
    assert_eq!(stop_calls(&door).len(), 1);
}

/// A capsule that ends as soon as its door is asked is stopped all the same: the CLI says so,
/// with what it canceled, and no signal was needed.
#[test]
fn the_cli_reports_a_capsule_that_ended_when_asked_as_stopped() {
    let home = Home::new();
    let id = session_id();
    let mut process = TestProcess::sleeping();
    let door = DoorServer::start(DoorMode::Stoppable(StoppableDoor::new(
        &id,
        StopAnswer::EndsThenAnswers {
            pid: process.pid(),
            canceled: vec![json!("task_01")],
        },
    )));
    home.write(
        &RecordJson::new(&id)
            .process(process.pid(), &process.start_token())
            .url(door.url()),
    );
    let done = cli_stop(&home, &[&id]);
    done.assert_success();
    let lines = done.stdout_lines();
    assert_eq!(lines[0], format!("stopped: {id}"), "{done:#?}");
    assert!(lines.contains(&"canceled: task_01"), "{done:#?}");
    assert!(
        lines.iter().any(|l| l.starts_with("signal: none")),
        "{done:#?}"
    );
    assert_eq!(
        process.wait_exit(DEADLINE).signal(),
        Some(9),
        "the door's SIGKILL"
    );
    assert_eq!(stop_calls(&door).len(), 1);
}

#[test]
fn the_cli_notes_a_refusing_door_and_no_door_skips_it() {
    let home = Home::new();
    let id = session_id();
    let door = DoorServer::start(DoorMode::Stoppable(StoppableDoor::new(
        &id,
        StopAnswer::MethodNotFound,
    )));
    let mut process = TestProcess::sleeping();
    home.write(
        &RecordJson::new(&id)
            .process(process.pid(), &process.start_token())
            .url(door.url()),
    );
    let done = cli_stop(&home, &[&id]);
    done.assert_success();
    assert_eq!(done.stdout_lines().len(), 3, "{done:#?}");
    assert!(
        done.stderr
            .lines()
            .any(|l| l.starts_with("note: ") && l.contains("method not found")),
        "{done:#?}"
    );
    assert_eq!(process.wait_exit(DEADLINE).signal(), Some(15));

    let id = session_id();
    let door = DoorServer::start(DoorMode::Stoppable(StoppableDoor::new(
        &id,
        answers(json!(["t"]), json!([])),
    )));
    let mut process = TestProcess::sleeping();
    home.write(
        &RecordJson::new(&id)
            .process(process.pid(), &process.start_token())
            .url(door.url()),
    );
    let done = cli_stop(&home, &[&id, "--no-door"]);
    done.assert_success();
    assert_eq!(done.stdout_lines().len(), 3, "{done:#?}");
    assert!(done.stderr.is_empty(), "{done:#?}");
    assert_eq!(process.wait_exit(DEADLINE).signal(), Some(15));
    assert!(door.requests().is_empty(), "{:#?}", door.requests());
}

/// A capsule that ends while its door is being asked (as one that exits on `StopSession`
/// would) is the stop's doing: a prune meanwhile notes it as stopped. Once the stop has ended,
/// a prune of the same session is a prune again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capsule_that_ends_while_its_door_is_asked_is_removed_as_stopped() {
    let registry = Registry::start().await;
    let id = session_id();
    let door = DoorServer::start(DoorMode::Stoppable(StoppableDoor::new(
        &id,
        StopAnswer::Hangs,
    )));
    let mut process = capsule_behind(&registry, &id, &door);
    let pruned_meanwhile = async {
        let asked = Instant::now();
        while stop_calls(&door).is_empty() {
            assert!(asked.elapsed() < DEADLINE, "the door was never asked");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let killed = std::process::Command::new("kill")
            .args(["-KILL", &process.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(killed.success());
        // SIGKILL is delivered on its own time: prune once the process is no longer running.
        let killed_at = Instant::now();
        while proc_state(process.pid()).is_some_and(|state| state != 'Z') {
            assert!(
                killed_at.elapsed() < DEADLINE,
                "SIGKILL did not end the process"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        registry.prune(&id).await
    };
    let (stopped, pruned) = tokio::join!(registry.stop(&id, ""), pruned_meanwhile);
    assert_eq!(pruned.status, 200, "{}", pruned.text);
    let removal = registry.removal(&id).expect("the prune noted why");
    assert_eq!(removal.cause, RemovalCause::Stopped, "{removal:?}");
    assert_eq!(stopped.status, 200, "{}", stopped.text);
    assert_eq!(stopped.body["outcome"], "already_gone", "{}", stopped.text);
    assert_eq!(
        stopped.body["door"]["outcome"], "no_answer",
        "{}",
        stopped.text
    );
    assert_eq!(process.wait_exit(DEADLINE).signal(), Some(9));

    // The stop is over: the same session's record, gone again, is pruned as a prune.
    let exited = ExitedChild::spawn();
    exited
        .record()
        .set("session_id", id.as_str())
        .write_in(registry.server.dir());
    let pruned = registry.prune(&id).await;
    assert_eq!(pruned.status, 200, "{}", pruned.text);
    let removal = registry.removal(&id).expect("the prune noted why");
    assert_eq!(removal.cause, RemovalCause::Pruned, "{removal:?}");
}

/// Stops of one session run one at a time, even when a stop of another session starts and ends
/// while the first is asking its door (each stop tidies the map of stops in progress).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_stop_waits_for_the_first_across_another_sessions_stop() {
    let registry = Registry::start().await;
    let id = session_id();
    let door = DoorServer::start(DoorMode::Stoppable(StoppableDoor::new(
        &id,
        StopAnswer::Hangs,
    )));
    let mut process = capsule_behind(&registry, &id, &door);
    let mut other = TestProcess::sleeping();
    let other_record = other.record().no_door();
    other_record.write_in(registry.server.dir());
    let meanwhile = async {
        let asked = Instant::now();
        while stop_calls(&door).is_empty() {
            assert!(asked.elapsed() < DEADLINE, "the door was never asked");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let other_stop = registry.stop(&other_record.session_id(), "").await;
        (other_stop, registry.stop(&id, "").await)
    };
    let (first, (other_stop, second)) = tokio::join!(registry.stop(&id, ""), meanwhile);
    assert_stopped_by_sigterm(&other_stop, &mut other, "no_door");
    assert_stopped_by_sigterm(&first, &mut process, "no_answer");
    assert_eq!(
        second.status, 404,
        "the second stop waited: {}",
        second.text
    );
    assert_eq!(stop_calls(&door).len(), 1, "{:#?}", door.requests());
}

/// The dashboard's Kill is a signal (`POST …/signal` with SIGKILL), never a stop: the door is
/// neither probed nor asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_through_the_signal_route_never_reaches_the_door() {
    let registry = Registry::start().await;
    let id = session_id();
    let door = DoorServer::start(DoorMode::Stoppable(StoppableDoor::new(
        &id,
        answers(json!(["t"]), json!([])),
    )));
    let mut process = capsule_behind(&registry, &id, &door);
    let response = registry
        .client
        .post(format!("{}/sessions/{id}/signal", registry.server.base()))
        .bearer_auth(registry.server.token())
        .header("content-type", "application/json")
        .body(r#"{"signal":"SIGKILL"}"#)
        .send()
        .await
        .expect("the registry answers");
    assert_eq!(response.status().as_u16(), 200);
    let body: Value = serde_json::from_str(&response.text().await.expect("a body")).expect("JSON");
    assert!(body.get("door").is_none(), "{body}");
    assert_eq!(process.wait_exit(DEADLINE).signal(), Some(9));
    assert!(door.requests().is_empty(), "{:#?}", door.requests());
}
