//! Issue 13, `include=card` (`--only card`): one listing of 100 live sessions with their cards,
//! against a plain full listing (the target: at most 1.2x, judged on the median of each round's
//! ratio, the two listings of a round taken side by side) and against what an agent does today,
//! the listing and then each card (1 + 100 requests).
//!
//! Invariant: the doors answer realistic A2A cards (about 2 KiB: the murmur extension, skills
//! with descriptions and tags) and count what they are asked, so the figure is taken only once
//! a listing with cards is seen to ask each door exactly once.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use murmur_registry::running::{MURMUR_CAPSULE_EXTENSION, process_start_token};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::door_host::door_session;
use crate::figures::{Row, add, median, ms, ratio};
use crate::records::{private_temp_dir, write_record};
use crate::server::{Client, Server, count_live};

/// Live sessions, each with a door of its own.
const SESSIONS: usize = 100;
/// The target: a listing with cards costs at most this much of a plain one.
const TARGET_RATIO: f64 = 1.2;
/// Timed rounds (each one plain listing and one with cards, alternated).
const ROUNDS: usize = 60;
const PLAIN: &str = "/sessions";
const CARDED: &str = "/sessions?include=card";

pub async fn listing_with_cards(rows: &mut Vec<Row>) {
    let doors = CardDoors::start(SESSIONS);
    let dir = private_temp_dir();
    doors.write_records(dir.path());
    let server = Server::start(dir.path());
    let mut client = server.client().await;
    step!(each_door_asked_once(&mut client, &doors));
    let (plain, carded) = step!(plain_and_carded(&mut client));
    let today = step!(listing_then_each_card(&mut client, &doors));
    // Each round's two listings were taken side by side: their ratio is freer of the machine's
    // drift than the ratio of the medians (both are printed).
    let mut paired: Vec<f64> = (carded.iter().zip(&plain))
        .map(|(carded, plain)| carded.as_secs_f64() / plain.as_secs_f64().max(1e-9))
        .collect();
    paired.sort_by(f64::total_cmp);
    let against_plain = paired[paired.len() / 2];
    let (plain, carded, today) = (
        median(plain).expect("plain listings were timed"),
        median(carded).expect("listings with cards were timed"),
        median(today).expect("1 + 100 requests were timed"),
    );
    println!(
        "include=card: plain listing p50 {}, with cards p50 {} (ratio of medians {:.2}x); \
         median of the rounds' ratios {against_plain:.2}x (target <= {TARGET_RATIO}x); \
         1 + {SESSIONS} requests p50 {}",
        ms(plain),
        ms(carded),
        carded.as_secs_f64() / plain.as_secs_f64().max(1e-9),
        ms(today)
    );
    add(
        rows,
        Row {
            scenario: format!("GET /sessions?include=card, {SESSIONS} live, ~2 KiB cards, p50"),
            measured: format!("{}, {against_plain:.2}x plain {}", ms(carded), ms(plain)),
            target: format!("<= {TARGET_RATIO}x plain"),
            baseline: format!("{} (1 + {SESSIONS} requests)", ms(today)),
            ratio: ratio(today, carded),
            met: against_plain <= TARGET_RATIO,
        },
    );
}

/// A listing with cards asks every door once, and every session carries its card.
async fn each_door_asked_once(client: &mut Client, doors: &CardDoors) {
    // Warm-up, not counted: the first listing against fresh doors costs more than the rest.
    for _ in 0..3 {
        client.timed_get(PLAIN).await;
    }
    let before = doors.asked();
    let (_, body) = client.timed_get(CARDED).await;
    assert_eq!(doors.asked() - before, SESSIONS, "one request per door");
    assert_eq!(count_live(&body), SESSIONS, "every session is live");
    let carded = (body["sessions"].as_array().into_iter().flatten())
        .filter(|session| session["card"]["skills"].is_array())
        .count();
    assert_eq!(carded, SESSIONS, "every session carries its card");
}

/// [`ROUNDS`] plain listings and as many with cards, alternated, each first in every other
/// round, so that drift in the machine's load and what one request leaves to the next (doors
/// still closing its connections) fall on both alike.
async fn plain_and_carded(client: &mut Client) -> (Vec<Duration>, Vec<Duration>) {
    let (mut plain, mut carded) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let order = if round % 2 == 0 {
            [PLAIN, CARDED]
        } else {
            [CARDED, PLAIN]
        };
        for path in order {
            let (took, body) = client.timed_get(path).await;
            assert_eq!(count_live(&body), SESSIONS);
            if path == PLAIN {
                plain.push(took);
            } else {
                carded.push(took);
            }
        }
    }
    (plain, carded)
}

/// What an agent does without `include=card`: the listing, then each live session's card.
async fn listing_then_each_card(client: &mut Client, doors: &CardDoors) -> Vec<Duration> {
    let mut took = Vec::new();
    for _ in 0..5 {
        let began = std::time::Instant::now();
        let (_, body) = client.timed_get(PLAIN).await;
        assert_eq!(count_live(&body), SESSIONS);
        for (session_id, _) in &doors.sessions {
            let (_, card) = client
                .timed_get(&format!("/sessions/{session_id}/card"))
                .await;
            assert!(card["skills"].is_array(), "a card");
        }
        took.push(began.elapsed());
    }
    took
}

/// Doors on `127.0.0.1:0`, served on a thread of their own, each answering an A2A card for its
/// own session and counting the requests.
pub struct CardDoors {
    /// `(session id, door address)`.
    pub sessions: Vec<(String, String)>,
    asked: Arc<AtomicUsize>,
}

impl CardDoors {
    pub fn start(count: usize) -> Self {
        let asked = Arc::new(AtomicUsize::new(0));
        let (ready, listening) = std::sync::mpsc::channel();
        let counter = Arc::clone(&asked);
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the doors' runtime");
            runtime.block_on(serve_doors(count, counter, ready));
        });
        let sessions = listening.recv().expect("the doors listen");
        Self { sessions, asked }
    }

    pub fn asked(&self) -> usize {
        self.asked.load(Ordering::SeqCst)
    }

    /// One record per door, naming this process (alive for as long as the bench runs).
    pub fn write_records(&self, dir: &Path) {
        let pid = std::process::id();
        let token = process_start_token(pid).expect("this process's start token");
        for (session_id, url) in &self.sessions {
            write_record(dir, session_id, url, pid, &token);
        }
    }
}

async fn serve_doors(
    count: usize,
    asked: Arc<AtomicUsize>,
    ready: std::sync::mpsc::Sender<Vec<(String, String)>>,
) {
    let mut sessions = Vec::with_capacity(count);
    for index in 0..count {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a door");
        let session_id = door_session("00ca", index);
        let url = listener.local_addr().expect("its address").to_string();
        let body = card(&session_id).to_string();
        let answer: Arc<[u8]> = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
        .into();
        let asked = Arc::clone(&asked);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (answer, asked) = (Arc::clone(&answer), Arc::clone(&asked));
                tokio::spawn(async move {
                    let mut head = Vec::with_capacity(512);
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    asked.fetch_add(1, Ordering::SeqCst);
                    let _ = stream.write_all(&answer).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        sessions.push((session_id, url));
    }
    ready.send(sessions).expect("the bench waits for its doors");
    std::future::pending::<()>().await;
}

/// An A2A v1.0 card as a capsule with a handful of skills serves it: about 2 KiB.
fn card(session_id: &str) -> Value {
    let skills: Vec<Value> = (0..6)
        .map(|n| {
            json!({
                "id": format!("skill-{n}"),
                "name": format!("Skill number {n}"),
                "description": "Does one thing well, described at the length real cards use \
                    for a skill, with a sentence on inputs and one on outputs.",
                "tags": ["text", "research", format!("t{n}")],
                "inputModes": ["text/plain"],
                "outputModes": ["text/plain", "application/json"],
            })
        })
        .collect();
    json!({
        "protocolVersion": "1.0",
        "name": "bench-capsule",
        "description": "A capsule stand-in for the include=card figure.",
        "version": "1.0.0",
        "capabilities": {
            "streaming": true,
            "extensions": [{
                "uri": MURMUR_CAPSULE_EXTENSION,
                "required": false,
                "params": {"sessionId": session_id},
            }],
        },
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": skills,
    })
}
