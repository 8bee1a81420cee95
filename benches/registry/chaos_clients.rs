//! Scenario `chaos`: the registry's clients, all the while: workers listing, asking liveness,
//! pruning, stopping and signalling (and listing the fleet), and listeners reading `/events`,
//! each keeping its own picture and reconnecting whenever the registry is killed.
//!
//! Invariants checked here: no answer is a 5xx (but a `/fleet/*` 503 while etcd is away); the
//! registry never signals through a crafted record (a `sent` signal or a `stopped` stop naming
//! one); no listener ever hears `session.removed` for a protected capsule; event ids rise on a
//! stream. Requests that change something hold the gate to read, so a quiesce phase waits for
//! them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::capsules::Rng;
use crate::chaos_picture::{Picture, SseReader, apply};
use crate::chaos_tally::Shared;
use crate::chaos_world::{World, lock};

/// What a request of a worker is.
#[derive(Clone, Copy)]
enum Ask {
    List,
    ListLean,
    Liveness,
    PruneAll,
    PruneOne,
    Stop,
    Signal(&'static str),
    Fleet,
}

impl Ask {
    fn pick(rng: &mut Rng, fleet: bool) -> Self {
        match rng.below(if fleet { 11 } else { 10 }) {
            0 | 1 => Self::List,
            2 => Self::ListLean,
            3 => Self::Liveness,
            4 => Self::PruneAll,
            5 => Self::PruneOne,
            6 | 7 => Self::Stop,
            8 => Self::Signal("SIGTERM"),
            9 => Self::Signal("SIGKILL"),
            _ => Self::Fleet,
        }
    }

    /// The operation's name in the tally, the method and the path.
    fn request(self, id: &str) -> (&'static str, &'static str, String) {
        match self {
            Self::List => ("GET /sessions", "GET", "/sessions".to_owned()),
            Self::ListLean => (
                "GET /sessions?probe=false",
                "GET",
                "/sessions?probe=false".into(),
            ),
            Self::Liveness => (
                "GET /sessions/{id}/liveness",
                "GET",
                format!("/sessions/{id}/liveness"),
            ),
            Self::PruneAll => ("DELETE /sessions", "DELETE", "/sessions".to_owned()),
            Self::PruneOne => ("DELETE /sessions/{id}", "DELETE", format!("/sessions/{id}")),
            Self::Stop => (
                "POST /sessions/{id}/stop",
                "POST",
                format!("/sessions/{id}/stop?timeout=0"),
            ),
            Self::Signal(_) => (
                "POST /sessions/{id}/signal",
                "POST",
                format!("/sessions/{id}/signal"),
            ),
            Self::Fleet => ("GET /fleet/sessions", "GET", "/fleet/sessions".to_owned()),
        }
    }

    fn changes_something(self) -> bool {
        matches!(
            self,
            Self::PruneAll | Self::PruneOne | Self::Stop | Self::Signal(_)
        )
    }
}

/// One worker, until the soak is done.
pub async fn worker(shared: Arc<Shared>, world: Arc<Mutex<World>>, seed: u64) {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("client");
    let mut rng = Rng(seed | 1);
    while !shared.is_done() {
        let ask = Ask::pick(&mut rng, shared.fleet);
        let Some(id) = lock(&world).pick_askable(&mut rng) else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let _held = if ask.changes_something() {
            Some(shared.gate.read().await)
        } else {
            None
        };
        one_request(&shared, &world, &client, ask, &id).await;
        drop(_held);
        // Pacing only: the soak is a correctness run on a shared machine, not a load test.
        tokio::time::sleep(Duration::from_millis(5 + rng.below(15) as u64)).await;
    }
}

async fn one_request(
    shared: &Shared,
    world: &Mutex<World>,
    client: &reqwest::Client,
    ask: Ask,
    id: &str,
) {
    let (name, method, path) = ask.request(id);
    let mut request = client
        .request(
            method.parse().expect("a method"),
            format!("{}{path}", shared.base()),
        )
        .bearer_auth(&shared.token);
    if let Ask::Signal(signal) = ask {
        request = request
            .header("content-type", "application/json")
            .body(format!(r#"{{"signal":"{signal}"}}"#));
    }
    let Ok(response) = request.send().await else {
        shared
            .operations
            .add("requests failed to connect (registry restarting)");
        // Pacing while the registry is away.
        tokio::time::sleep(Duration::from_millis(50)).await;
        return;
    };
    let status = response.status().as_u16();
    let Ok(text) = response.text().await else {
        shared.operations.add("answers cut off (registry killed)");
        return;
    };
    shared.operations.add(name);
    let body: Value = serde_json::from_str(&text).unwrap_or_default();
    shared
        .invariants
        .add("answers checked (no 5xx; nothing signalled through a crafted record)");
    let etcd_away = matches!(ask, Ask::Fleet) && status == 503;
    if status >= 500 && !etcd_away {
        shared.violation(format!("{method} {path} answered {status}: {text}"));
    }
    let outcome = body["outcome"].as_str().unwrap_or_default();
    let acted = match ask {
        Ask::Signal(_) => status == 200,
        Ask::Stop => status == 200 && outcome == "stopped",
        _ => false,
    };
    if acted && lock(world).crafted.contains(id) {
        shared.violation(format!("{method} {path} acted on a crafted record: {text}"));
    }
}

/// One listener's picture, as the director reads it.
#[derive(Default)]
pub struct Listening {
    /// Its stream is open and its snapshot has arrived.
    pub connected: bool,
    /// The registry the stream is from (a new address after each restart).
    pub base: String,
    pub picture: Picture,
}

/// One `/events` listener, until the soak is done: connect, apply, reconnect.
pub async fn listener(shared: Arc<Shared>, protected: Vec<String>, state: Arc<Mutex<Listening>>) {
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    while !shared.is_done() {
        let base = shared.base();
        let request = client
            .get(format!("{base}/events"))
            .bearer_auth(&shared.token)
            .header("accept", "text/event-stream");
        if let Ok(response) = request.send().await
            && response.status().is_success()
        {
            shared.operations.add("/events connections");
            lock_listening(&state).base = base;
            read_stream(&shared, &protected, &state, response).await;
        }
        lock_listening(&state).connected = false;
        // Pacing between reconnections; the picture is only trusted again after a snapshot.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn read_stream(
    shared: &Shared,
    protected: &[String],
    state: &Mutex<Listening>,
    mut response: reqwest::Response,
) {
    let mut reader = SseReader::default();
    let mut last_id: Option<u64> = None;
    while let Ok(Some(chunk)) = response.chunk().await {
        for event in reader.feed(&chunk) {
            shared.operations.add("/events events read");
            if let (Some(id), Some(last)) = (event.id, last_id) {
                // A `resources` event repeats the id of the change before it.
                let repeats = event.name == "resources" && id == last;
                if id <= last && !repeats {
                    shared.violation(format!("event id {id} after {last} on one stream"));
                }
            }
            last_id = event.id.or(last_id);
            let mut listening = lock_listening(state);
            if event.name == "snapshot" {
                listening.connected = true;
            }
            if let Some(removed) = apply(&mut listening.picture, &event) {
                shared
                    .invariants
                    .add("session.removed events checked against protected capsules");
                if protected.contains(&removed) {
                    shared.violation(format!("session.removed for protected capsule {removed}"));
                }
            }
        }
        if shared.is_done() {
            return;
        }
    }
}

pub fn lock_listening(state: &Mutex<Listening>) -> std::sync::MutexGuard<'_, Listening> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
