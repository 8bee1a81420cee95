//! Issue 24, `/mcp` (`--only mcp`): what an MCP client pays next to a REST one, each figure
//! taken against its REST or `/events` counterpart in the same run, at the wire (`mcp_client`,
//! MCP's streamable HTTP spoken by this process, so no SDK's own costs are counted):
//! - `find_peers` over 100 live sessions with ~2 KiB cards, asked in each revision (2025-11-25
//!   in an MCP session, 2026-07-28 request by request), against `GET
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
use crate::mcp_client::{McpClient, McpMessage, Revision};
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

/// `find_peers` in each revision and the REST listing it stands for, over the same doors,
/// side by side.
async fn find_peers_against_rest(rows: &mut Vec<Row>) {
    let doors = CardDoors::start(PEERS);
    let dir = private_temp_dir();
    doors.write_records(dir.path());
    let server = Server::start(dir.path());
    let mut askers = vec![Asker::Rest(server.client().await)];
    for revision in REVISIONS {
        let client = McpClient::open_as(server.addr(), server.token(), revision).await;
        askers.push(Asker::Mcp(client));
    }
    step!(same_answer_every_way(&mut askers));
    let rounds = step!(rotating(&mut askers, Ask::Peers));
    let small = step!(rotating(&mut askers, Ask::Missing));
    let (rest, rest_small) = (&rounds[0], &small[0]);
    for (index, revision) in REVISIONS.into_iter().enumerate() {
        let (mcp, mcp_small) = (&rounds[index + 1], &small[index + 1]);
        let mut paired: Vec<f64> = (mcp.iter().zip(rest))
            .map(|(mcp, rest)| mcp.whole.as_secs_f64() / rest.whole.as_secs_f64().max(1e-9))
            .collect();
        paired.sort_by(f64::total_cmp);
        let paired = paired[paired.len() / 2];
        let name = revision.name();
        println!(
            "mcp fixed cost ({name}): an answer of a few hundred bytes (an unknown session) \
             takes p50 {} by REST, {} as a tool call",
            ms(p50(rest_small, |turn| turn.whole)),
            ms(p50(mcp_small, |turn| turn.whole))
        );
        let (rest_p50, mcp_p50) = (p50(rest, |turn| turn.whole), p50(mcp, |turn| turn.whole));
        println!(
            "mcp find_peers ({name}): REST p50 {} ({} B, last byte at {}), find_peers p50 {} \
             ({} B, last byte at {}); ratio of medians {:.2}x, median of the rounds' ratios \
             {paired:.2}x (target <= {TARGET_RATIO}x)",
            ms(rest_p50),
            rest[0].bytes,
            ms(p50(rest, |turn| turn.arrived)),
            ms(mcp_p50),
            mcp[0].bytes,
            ms(p50(mcp, |turn| turn.arrived)),
            mcp_p50.as_secs_f64() / rest_p50.as_secs_f64().max(1e-9)
        );
        add(
            rows,
            Row {
                scenario: format!(
                    "MCP {name} find_peers, {PEERS} live, ~2 KiB cards, p50 at the client"
                ),
                measured: format!("{}, {paired:.2}x REST {}", ms(mcp_p50), ms(rest_p50)),
                target: format!("<= {TARGET_RATIO}x REST"),
                baseline: format!("{} (GET ?include=card)", ms(rest_p50)),
                ratio: format!("{paired:.2}x"),
                met: paired <= TARGET_RATIO,
            },
        );
    }
}

/// The revisions `find_peers` is timed in, each beside the same REST listing.
const REVISIONS: [Revision; 2] = [Revision::Sessions, Revision::PerRequest];

/// Who asks in a round: the REST client, or an MCP client (of one revision).
enum Asker {
    Rest(Client),
    Mcp(McpClient),
}

/// What a round asks each side.
#[derive(Debug, Clone, Copy)]
enum Ask {
    /// Every live session with its card (`find_peers`, `GET /sessions?status=live&include=card`).
    Peers,
    /// A session that does not exist (no door asked): the fixed cost of each path.
    Missing,
}

/// One side's turn: the answer whole and parsed at the client, its last byte (the server's
/// work and the transfer, before the client parses), and its size.
struct Turn {
    whole: Duration,
    arrived: Duration,
    bytes: usize,
}

/// The median of `of` over `turns`.
fn p50(turns: &[Turn], of: fn(&Turn) -> Duration) -> Duration {
    median(turns.iter().map(of).collect()).expect("timed rounds")
}

/// Each tool's `structuredContent` is the REST answer (see [`same_answer_both_ways`]).
async fn same_answer_every_way(askers: &mut [Asker]) {
    let Some((Asker::Rest(rest), mcps)) = askers.split_first_mut() else {
        panic!("the REST client asks first");
    };
    for asker in mcps {
        let Asker::Mcp(mcp) = asker else {
            panic!("only the first asker is REST's");
        };
        same_answer_both_ways(rest, mcp).await;
    }
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

/// [`ROUNDS`] of `ask` put to each of `askers` in turn, the first to ask moving on by one each
/// round: each side's turns, in `askers`' order.
async fn rotating(askers: &mut [Asker], ask: Ask) -> Vec<Vec<Turn>> {
    let sides = askers.len();
    let mut turns: Vec<Vec<Turn>> = (0..sides).map(|_| Vec::with_capacity(ROUNDS)).collect();
    for round in 0..ROUNDS {
        for offset in 0..sides {
            let side = (round + offset) % sides;
            turns[side].push(take_turn(&mut askers[side], ask, Instant::now()).await);
        }
    }
    turns
}

/// `asker` answering `ask`, timed from `began`; the answer is checked to be what `ask` expects.
async fn take_turn(asker: &mut Asker, ask: Ask, began: Instant) -> Turn {
    const MISSING: &str = "ses_00000000000000000000000000000000";
    match (asker, ask) {
        (Asker::Rest(rest), Ask::Peers) => {
            let body = rest.get(REST_PEERS).await.expect("GET");
            let arrived = began.elapsed();
            let listing: Value = serde_json::from_slice(&body).expect("JSON body");
            let whole = began.elapsed();
            assert_eq!(count_live(&listing), PEERS);
            let bytes = body.len();
            Turn {
                whole,
                arrived,
                bytes,
            }
        }
        (Asker::Rest(rest), Ask::Missing) => {
            let answer = rest.get(&format!("/sessions/{MISSING}")).await;
            let whole = began.elapsed();
            assert_eq!(answer, Err("HTTP 404 Not Found".to_owned()));
            let (arrived, bytes) = (whole, 0);
            Turn {
                whole,
                arrived,
                bytes,
            }
        }
        (Asker::Mcp(mcp), ask) => {
            let params = match ask {
                Ask::Peers => json!({ "name": "find_peers", "arguments": {} }),
                Ask::Missing => {
                    json!({ "name": "get_session", "arguments": { "session_id": MISSING } })
                }
            };
            let answered = mcp.call_timed("tools/call", params).await;
            let whole = began.elapsed();
            match ask {
                Ask::Peers => {
                    assert_eq!(count_live(&answered.result["structuredContent"]), PEERS);
                }
                Ask::Missing => assert_eq!(answered.result["isError"], true),
            }
            let (arrived, bytes) = (answered.arrived - began, answered.bytes);
            Turn {
                whole,
                arrived,
                bytes,
            }
        }
    }
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
