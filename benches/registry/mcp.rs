//! Issue 24, `/mcp` (`--only mcp`): what an MCP client pays next to a REST one, each figure
//! taken against its REST or `/events` counterpart in the same run, at the wire (`mcp_client`,
//! MCP's streamable HTTP spoken by this process, so no SDK's own costs are counted):
//! - `find_peers` over 100 live sessions with ~2 KiB cards against `GET
//!   /sessions?status=live&include=card`, rounds interleaved (target: at most 1.2x, judged on
//!   the median of each round's ratio, as `include=card` is);
//! - SIGKILL of a capsule → `notifications/resources/updated` on the session's GET stream
//!   (`resources/subscribe` to each session), with an `/events` listener's `session.removed`
//!   for the same kills beside it (target: p99 <= 50 ms);
//! - an idle MCP session with one subscription over 1,000 live sessions against an idle
//!   `/events` listener: the registry's CPU in windows taken in turn (target: no more).
//!
//! Invariant: a figure is taken only once its premise is seen (every session live and carded
//! in both answers, the same JSON in both; every kill heard), so it measures the path it names.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::door_host::Doors;
use crate::event_listener::{EventListener, StreamEvent};
use crate::figures::{Row, add, median, ms, percentile};
use crate::include_card::CardDoors;
use crate::mcp_client::{McpClient, McpMessage};
use crate::pid_holders::PidHolders;
use crate::records::private_temp_dir;
use crate::server::{Client, Server, count_live};

/// Live sessions with cards for `find_peers`.
const PEERS: usize = 100;
/// Timed rounds, each one REST listing and one tool call, which goes first alternating.
const ROUNDS: usize = 60;
const TARGET_RATIO: f64 = 1.2;
const REST_PEERS: &str = "/sessions?status=live&include=card";
/// Capsules killed one at a time, each heard on both streams.
const KILLED: usize = 40;
const KILL_SPACING: Duration = Duration::from_millis(200);
const HEARD_DEADLINE: Duration = Duration::from_secs(10);
const TARGET_P99: Duration = Duration::from_millis(50);
/// Live sessions under the idle listeners, each of its own process.
const IDLE: usize = 1_000;
/// Windows per side, taken in turn (the first side alternating round by round).
const IDLE_ROUNDS: usize = 3;
const IDLE_WINDOW: Duration = Duration::from_secs(20);
/// After a listener opens, the live view's first picture and its first rechecks settle.
const SETTLE: Duration = Duration::from_secs(3);
/// What "no more CPU" allows for the machine's noise between windows.
const IDLE_NOISE: f64 = 1.10;

pub async fn mcp_figures(rows: &mut Vec<Row>) {
    step!(find_peers_against_rest(rows));
    step!(sigkill_to_updated(rows));
    step!(idle_subscription_against_events(rows));
}

/// `find_peers` and the REST listing it stands for, over the same doors, side by side.
async fn find_peers_against_rest(rows: &mut Vec<Row>) {
    let doors = CardDoors::start(PEERS);
    let dir = private_temp_dir();
    doors.write_records(dir.path());
    let server = Server::start(dir.path());
    let mut rest = server.client().await;
    let mut mcp = server.mcp().await;
    step!(same_answer_both_ways(&mut rest, &mut mcp));
    let rounds = step!(rounds_of_both(&mut rest, &mut mcp));
    let mut paired: Vec<f64> = (rounds.mcp.iter().zip(&rounds.rest))
        .map(|(mcp, rest)| mcp.as_secs_f64() / rest.as_secs_f64().max(1e-9))
        .collect();
    paired.sort_by(f64::total_cmp);
    let paired = paired[paired.len() / 2];
    let (rest_small, mcp_small) = step!(small_calls(&mut rest, &mut mcp));
    let p50 = |samples: &[Duration]| median(samples.to_vec()).expect("timed rounds");
    println!(
        "mcp fixed cost: an answer of a few hundred bytes (an unknown session) takes p50 {} by \
         REST, {} as a tool call",
        ms(p50(&rest_small)),
        ms(p50(&mcp_small))
    );
    let (rest_p50, mcp_p50) = (p50(&rounds.rest), p50(&rounds.mcp));
    println!(
        "mcp find_peers: REST p50 {} ({} B, last byte at {}), find_peers p50 {} ({} B, last \
         byte at {}); ratio of medians {:.2}x, median of the rounds' ratios {paired:.2}x \
         (target <= {TARGET_RATIO}x)",
        ms(rest_p50),
        rounds.rest_bytes,
        ms(p50(&rounds.rest_arrived)),
        ms(mcp_p50),
        rounds.mcp_bytes,
        ms(p50(&rounds.mcp_arrived)),
        mcp_p50.as_secs_f64() / rest_p50.as_secs_f64().max(1e-9)
    );
    add(
        rows,
        Row {
            scenario: format!("MCP find_peers, {PEERS} live, ~2 KiB cards, p50 at the client"),
            measured: format!("{}, {paired:.2}x REST {}", ms(mcp_p50), ms(rest_p50)),
            target: format!("<= {TARGET_RATIO}x REST"),
            baseline: format!("{} (GET ?include=card)", ms(rest_p50)),
            ratio: format!("{paired:.2}x"),
            met: paired <= TARGET_RATIO,
        },
    );
}

/// The tool's `structuredContent` is the REST answer, every session live with its card.
async fn same_answer_both_ways(rest: &mut Client, mcp: &mut McpClient) {
    for _ in 0..3 {
        rest.timed_get(REST_PEERS).await;
        find_peers(mcp).await;
    }
    let (_, by_rest) = rest.timed_get(REST_PEERS).await;
    let result = find_peers(mcp).await;
    assert_eq!(result["isError"], false, "{result}");
    let structured = &result["structuredContent"];
    assert_eq!(count_live(structured), PEERS, "every session is live");
    let carded = (structured["sessions"].as_array().into_iter().flatten())
        .filter(|session| session["card"]["skills"].is_array())
        .count();
    assert_eq!(carded, PEERS, "every session carries its card");
    // Liveness carries when it was checked: the sessions and their cards must agree.
    let peers = |listing: &Value| -> Vec<(Value, Value)> {
        (listing["sessions"].as_array().into_iter().flatten())
            .map(|session| (session["session_id"].clone(), session["card"].clone()))
            .collect()
    };
    assert_eq!(
        peers(&by_rest),
        peers(structured),
        "find_peers answers what the REST listing answers"
    );
}

async fn find_peers(mcp: &mut McpClient) -> Value {
    mcp.call(
        "tools/call",
        json!({ "name": "find_peers", "arguments": {} }),
    )
    .await
}

/// What the rounds measured, per side: each answer whole and parsed at the client, and each
/// answer's last byte (the server's work and the transfer, before the client parses).
#[derive(Default)]
struct Rounds {
    rest: Vec<Duration>,
    mcp: Vec<Duration>,
    rest_arrived: Vec<Duration>,
    mcp_arrived: Vec<Duration>,
    rest_bytes: usize,
    mcp_bytes: usize,
}

/// [`ROUNDS`] of one REST listing and one `find_peers`, which goes first alternating.
async fn rounds_of_both(rest: &mut Client, mcp: &mut McpClient) -> Rounds {
    let by_rest = async |began: Instant| {
        let body = rest.get(REST_PEERS).await.expect("GET");
        let arrived = began.elapsed();
        let listing: Value = serde_json::from_slice(&body).expect("JSON body");
        let whole = began.elapsed();
        assert_eq!(count_live(&listing), PEERS);
        (whole, arrived, body.len())
    };
    let by_mcp = async |began: Instant| {
        let params = json!({ "name": "find_peers", "arguments": {} });
        let answered = mcp.call_timed("tools/call", params).await;
        let whole = began.elapsed();
        assert_eq!(count_live(&answered.result["structuredContent"]), PEERS);
        (whole, answered.arrived - began, answered.bytes)
    };
    let (by_rest, by_mcp) = alternating(by_rest, by_mcp).await;
    let mut rounds = Rounds::default();
    for (whole, arrived, bytes) in by_rest {
        rounds.rest.push(whole);
        rounds.rest_arrived.push(arrived);
        rounds.rest_bytes = bytes;
    }
    for (whole, arrived, bytes) in by_mcp {
        rounds.mcp.push(whole);
        rounds.mcp_arrived.push(arrived);
        rounds.mcp_bytes = bytes;
    }
    rounds
}

/// The fixed cost of each path: [`ROUNDS`] of a tiny answer (a session that does not exist,
/// no door asked), by REST and as a tool call, which goes first alternating.
async fn small_calls(rest: &mut Client, mcp: &mut McpClient) -> (Vec<Duration>, Vec<Duration>) {
    const MISSING: &str = "ses_00000000000000000000000000000000";
    let by_rest = async |began: Instant| {
        let answer = rest.get(&format!("/sessions/{MISSING}")).await;
        let whole = began.elapsed();
        assert_eq!(answer, Err("HTTP 404 Not Found".to_owned()));
        whole
    };
    let by_mcp = async |began: Instant| {
        let params = json!({ "name": "get_session", "arguments": { "session_id": MISSING } });
        let result = mcp.call("tools/call", params).await;
        let whole = began.elapsed();
        assert_eq!(result["isError"], true, "{result}");
        whole
    };
    alternating(by_rest, by_mcp).await
}

/// [`ROUNDS`] of one turn of each side, the tool call first in even rounds: what each turn
/// measured, by side (REST's first). A turn is given the instant it began.
async fn alternating<S>(
    mut by_rest: impl AsyncFnMut(Instant) -> S,
    mut by_mcp: impl AsyncFnMut(Instant) -> S,
) -> (Vec<S>, Vec<S>) {
    let (mut rest, mut mcp) = (Vec::with_capacity(ROUNDS), Vec::with_capacity(ROUNDS));
    for round in 0..ROUNDS {
        for mcp_turn in [round % 2 == 0, round % 2 != 0] {
            if mcp_turn {
                mcp.push(by_mcp(Instant::now()).await);
            } else {
                rest.push(by_rest(Instant::now()).await);
            }
        }
    }
    (rest, mcp)
}

/// Kill capsules one at a time: when each is heard on the MCP stream and on `/events`.
async fn sigkill_to_updated(rows: &mut Vec<Row>) {
    let holders = PidHolders::start(KILLED);
    let doors = Doors::start(KILLED, Duration::ZERO, "0024");
    let dir = doors.running_dir_of(&holders);
    let server = Server::start(dir.path());
    let mut events = EventListener::open(&server).await;
    events.snapshot().await;
    let mut mcp = server.mcp().await;
    let mut stream = mcp.stream().await;
    for (session_id, _) in &doors.sessions {
        let uri = format!("murmur://sessions/{session_id}");
        mcp.call("resources/subscribe", json!({ "uri": uri })).await;
    }
    let mut killed_at = HashMap::new();
    for (index, (session_id, _)) in doors.sessions.iter().enumerate() {
        // Spread over the registry's interval rather than in step with it.
        let jitter = Duration::from_millis((index as u64 * 37) % 100);
        tokio::time::sleep(KILL_SPACING + jitter).await;
        killed_at.insert(session_id.clone(), Instant::now());
        holders.kill(index);
    }
    let on_mcp = async |until| stream.next_before(until).await;
    let by_mcp = step!(heard(on_mcp, updated, &killed_at));
    let on_events = async |until| events.next_before(until).await;
    let by_events = step!(heard(on_events, removed, &killed_at));
    let summary = |heard: &[Duration]| {
        let never = KILLED - heard.len();
        let never = if never == 0 {
            String::new()
        } else {
            format!(", {never} never")
        };
        format!(
            "{} / {}{never}",
            ms(percentile(heard, 0.5)),
            ms(percentile(heard, 0.99))
        )
    };
    println!(
        "mcp kill -> resources/updated p50 / p99: {}; /events session.removed: {}",
        summary(&by_mcp),
        summary(&by_events)
    );
    add(
        rows,
        Row {
            scenario: format!("MCP SIGKILL -> resources/updated, {KILLED} kills, p50 / p99"),
            measured: summary(&by_mcp),
            target: format!("p99 <= {}", ms(TARGET_P99)),
            baseline: format!("{} (/events)", summary(&by_events)),
            ratio: "-".to_owned(),
            met: by_mcp.len() == KILLED && percentile(&by_mcp, 0.99) <= TARGET_P99,
        },
    );
}

/// From each kill to the first message of `next_before`'s that `removal` reads as its session
/// going (the session's id and when the message arrived), sorted.
async fn heard<T>(
    mut next_before: impl AsyncFnMut(Instant) -> Option<T>,
    removal: impl Fn(&T) -> Option<(&str, Instant)>,
    killed_at: &HashMap<String, Instant>,
) -> Vec<Duration> {
    let mut waiting = killed_at.clone();
    let mut heard = Vec::new();
    let deadline = Instant::now() + HEARD_DEADLINE;
    while !waiting.is_empty() {
        let Some(message) = next_before(deadline).await else {
            break;
        };
        if let Some((session, at)) = removal(&message)
            && let Some(killed) = waiting.remove(session)
        {
            heard.push(at.saturating_duration_since(killed));
        }
    }
    heard.sort();
    heard
}

/// The session a `notifications/resources/updated` names, and when it arrived.
fn updated(note: &McpMessage) -> Option<(&str, Instant)> {
    if note.message["method"] != "notifications/resources/updated" {
        return None;
    }
    let uri = note.message["params"]["uri"].as_str()?;
    Some((uri.strip_prefix("murmur://sessions/")?, note.at))
}

/// The session a `session.removed` event names, and when it arrived.
fn removed(event: &StreamEvent) -> Option<(&str, Instant)> {
    if event.name != "session.removed" {
        return None;
    }
    Some((event.data["session_id"].as_str()?, event.at))
}

/// Who listens in an idle window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IdleSide {
    Events,
    Mcp,
}

/// The registry's CPU over 1,000 quiet sessions with one listener of either kind, in turn.
async fn idle_subscription_against_events(rows: &mut Vec<Row>) {
    let holders = PidHolders::start(IDLE);
    let doors = Doors::start(IDLE, Duration::ZERO, "0224");
    let dir = doors.running_dir_of(&holders);
    let server = Server::start(dir.path());
    let (mut by_events, mut by_mcp) = (Vec::new(), Vec::new());
    for round in 0..IDLE_ROUNDS {
        let order = if round % 2 == 0 {
            [IdleSide::Events, IdleSide::Mcp]
        } else {
            [IdleSide::Mcp, IdleSide::Events]
        };
        for side in order {
            let cpu = step!(idle_window(&server, side));
            eprintln!("  idle {side:?}: {cpu:.2} %");
            match side {
                IdleSide::Events => by_events.push(cpu),
                IdleSide::Mcp => by_mcp.push(cpu),
            }
        }
    }
    let mean = |windows: &[f64]| windows.iter().sum::<f64>() / windows.len().max(1) as f64;
    let (events, mcp) = (mean(&by_events), mean(&by_mcp));
    println!(
        "mcp idle, {IDLE} live: registry CPU with one MCP subscription {mcp:.2} % \
         {by_mcp:.2?}, with one /events listener {events:.2} % {by_events:.2?}"
    );
    add(
        rows,
        Row {
            scenario: format!(
                "idle, {IDLE} live, 1 MCP subscription: CPU ({IDLE_ROUNDS} x {} s)",
                IDLE_WINDOW.as_secs()
            ),
            measured: format!("{mcp:.2} %"),
            target: "<= /events (10 % noise)".to_owned(),
            baseline: format!("{events:.2} % (/events)"),
            ratio: format!("{:.2}x", mcp / events.max(0.01)),
            met: mcp <= events * IDLE_NOISE,
        },
    );
}

/// Open one listener of `side`, let it settle, and take the registry's CPU (% of one core)
/// over [`IDLE_WINDOW`]; the listener leaves after.
async fn idle_window(server: &Server, side: IdleSide) -> f64 {
    let (mut events, mut mcp) = (None, None);
    match side {
        IdleSide::Events => {
            let mut listener = EventListener::open(server).await;
            listener.snapshot().await;
            events = Some(listener);
        }
        IdleSide::Mcp => {
            let mut client = server.mcp().await;
            let stream = client.stream().await;
            // Answered once the live view's first picture is taken.
            client
                .call("resources/subscribe", json!({ "uri": "murmur://sessions" }))
                .await;
            mcp = Some((client, stream));
        }
    }
    tokio::time::sleep(SETTLE).await;
    let (cpu_before, began) = (server.cpu(), Instant::now());
    tokio::time::sleep(IDLE_WINDOW).await;
    let spent = server.cpu() - cpu_before;
    let cpu = 100.0 * spent.as_secs_f64() / began.elapsed().as_secs_f64();
    drop(events);
    if let Some((client, stream)) = mcp {
        drop(stream);
        client.close().await;
    }
    cpu
}
