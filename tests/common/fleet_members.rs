//! Fleet members through the real binary, as the fleet tests (`tests/fleet.rs`,
//! `tests/fleet_netcut.rs`) see them: the `serve` command line of a host with the short lease,
//! the fleet one of them serves ([`Picture`]), and polling a member until it serves what is
//! wanted ([`poll`]).
//!
//! Invariant: a [`Picture`] keeps duplicates and sorts everything, so two pictures are equal
//! only when they hold the same hosts and sessions once each; waiting is by polling under a
//! deadline, never by sleeping.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::DEADLINE;
use super::binary::{Home, User, registry};

/// The lease every member takes ([`serve_member`]'s `--fleet-ttl`).
pub const TTL: Duration = Duration::from_secs(3);
/// How long a host that stopped renewing may stay in another's fleet: its lease lapses one TTL
/// after its last renewal, and etcd looks for lapsed leases every 500 ms; the bound.
pub const LEAVE_BOUND: Duration = Duration::from_secs(4);
/// Where the members keep their keys (the default `--fleet-prefix`).
pub const PREFIX: &str = "/murmur/registry/v1";
/// The problem type of a fleet that cannot be served now.
pub const UNAVAILABLE: &str = "urn:murmur-registry:problem:fleet-unavailable";

/// `serve` in `home` as host `id` of the fleet in `endpoints` (comma-separated), listening on
/// `bind`, with a 3 s lease and a pass every 500 ms (so a host that dies is seen to leave).
pub fn serve_member(home: &Home, id: &str, endpoints: &str, bind: &str) -> Command {
    let mut command = registry(home.path(), User::Me);
    command.args(["serve", "--bind", bind, "--fleet-etcd", endpoints]);
    command.args([
        "--host-id",
        id,
        "--fleet-ttl",
        &format!("{}s", TTL.as_secs()),
        "--events-interval",
        "500ms",
    ]);
    command
}

/// A host of the fleet as a picture expects it: its id and its live sessions.
pub trait Member {
    fn id(&self) -> &str;
    fn live_sessions(&self) -> BTreeSet<String>;
}

/// A fleet as `GET /fleet/sessions` serves it: its hosts and its sessions as (host, session,
/// state), sorted, duplicates kept (so a duplicate makes it differ from any expected picture).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Picture {
    pub hosts: Vec<String>,
    pub sessions: Vec<(String, String, String)>,
}

impl Picture {
    /// The picture `body` (a `/fleet/sessions` answer) shows.
    pub fn of(body: &Value) -> Self {
        let list = |name: &str| body[name].as_array().cloned().unwrap_or_default();
        let text = |value: &Value| value.as_str().unwrap_or("?").to_owned();
        let mut hosts: Vec<String> = list("hosts").iter().map(|h| text(&h["host_id"])).collect();
        hosts.sort();
        let mut sessions: Vec<_> = list("sessions")
            .iter()
            .map(|s| {
                let mut state = text(&s["liveness"]["state"]);
                // Shown only when it fails a comparison: why a session is not live.
                if let Some(reason) = s["liveness"]["reason"].as_str() {
                    state = format!("{state}: {reason}");
                }
                (text(&s["host_id"]), text(&s["session_id"]), state)
            })
            .collect();
        sessions.sort();
        Self { hosts, sessions }
    }

    /// Every one of `hosts`, with each of their sessions live.
    pub fn expected<M: Member>(hosts: &[&M]) -> Self {
        let mut ids: Vec<String> = hosts.iter().map(|h| h.id().to_owned()).collect();
        ids.sort();
        let mut sessions: Vec<_> = hosts
            .iter()
            .flat_map(|h| {
                (h.live_sessions().into_iter()).map(|s| (h.id().to_owned(), s, "live".to_owned()))
            })
            .collect();
        sessions.sort();
        Self {
            hosts: ids,
            sessions,
        }
    }

    /// Whether host `id` is gone from it: neither the host nor any of its sessions.
    pub fn lacks(&self, id: &str) -> bool {
        !self.hosts.iter().any(|h| h == id) && !self.sessions.iter().any(|(h, ..)| h == id)
    }
}

/// Poll `probe` until it answers `Ok`; that answer and how long since `since` it took. Fails
/// after `deadline` (from `since`) with `what` and the last `Err` it answered.
pub async fn poll<T>(
    what: &str,
    since: Instant,
    deadline: Duration,
    mut probe: impl AsyncFnMut() -> Result<T, String>,
) -> (T, Duration) {
    loop {
        match probe().await {
            Ok(found) => return (found, since.elapsed()),
            Err(last) => assert!(
                since.elapsed() < deadline,
                "gave up after {deadline:?} waiting until {what}; last: {last}"
            ),
        }
        // Paces the polling only.
        tokio::time::sleep(POLL_PACE).await;
    }
}

/// The pause between two polls of one member: paces the loop, decides nothing.
pub const POLL_PACE: Duration = Duration::from_millis(10);

/// `GET path` with `token` on member `id`, serving at `addr`: the status and the JSON body.
pub async fn get_json(
    http: &reqwest::Client,
    (id, addr): (&str, SocketAddr),
    token: &str,
    path: &str,
) -> (u16, Value) {
    let response = http
        .get(format!("http://{addr}{path}"))
        .bearer_auth(token)
        .timeout(DEADLINE)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{id} answers {path}: {e}"));
    let status = response.status().as_u16();
    let bytes = response.bytes().await.expect("a body");
    let body =
        serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{path} on {id}: not JSON ({e})"));
    (status, body)
}
