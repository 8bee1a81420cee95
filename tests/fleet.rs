//! The fleet through the real binary: three `murmur-registry serve` processes, hosts `a`, `b`
//! and `c` (each with its own `HOME`, running directory, port and real capsule processes),
//! publishing to and reading from one real etcd (or a three-member cluster), with a short lease
//! (`--fleet-ttl 3s`, a pass every `500ms`) so that a host that dies is seen to leave.
//!
//! What is held, as a user of three hosts would see it:
//! - the three converge: each serves every host's live sessions once; a capsule started on `b`
//!   arrives on `a`'s `/fleet/events` as `session.added` with `host_id` `b`, and one killed on
//!   `b` leaves it within `b`'s pass plus [`PASS_SLACK`]; no key etcd holds carries a door
//!   token or a registry token;
//! - `b` killed (`kill -9`) or frozen (`kill -STOP`) leaves `a` and `c`, its host and its
//!   sessions, within [`LEAVE_BOUND`] (TTL + 1 s); restarted at once after `kill -9` it waits
//!   for its old lease to lapse, then rejoins; thawed, its lost lease is replaced and it
//!   rejoins; SIGTERM takes it out at once (the lease revoked: within [`REVOKED_BOUND`], which
//!   a lapse could not meet) and it exits 0;
//! - etcd killed, or frozen: every registry's `/fleet/*` answers 503 `fleet-unavailable` within
//!   the TTL while its local `/sessions` answers as before; etcd back, the fleet is whole again
//!   with what changed meanwhile, once each, nothing of a registry that died meanwhile, and
//!   (frozen past the TTL) every lease that expired replaced with all its keys on the new one;
//! - a second registry claiming a live host id exits 1 after waiting about one TTL, naming the
//!   id, and the holder is untouched;
//! - a host's keys are its registry's: a lease-less host key keeps nobody out, an entry forged
//!   or deleted under its id is put back within a pass and never served by its own registry;
//!   with etcd's roles as the README deploys them, each host's user publishes and reads the
//!   fleet and can write no other host's key;
//! - a three-member cluster whose leader is killed: publishing and reading go on, no host
//!   leaves, and a reader unavailable during the election is back within a TTL; a follower
//!   killed (the first endpoint each registry is given) is noticed by no reader.
//!
//! Every test needs `/usr/bin/etcd` (Debian's `etcd-server`) and the `fleet` feature, so each is
//! ignored by plain `cargo test`. Waiting is by polling the registries (or reading their
//! streams) under deadlines, never by sleeping; the one wait on the clock is an outage's own
//! length (etcd frozen past the TTL), which is the scenario, not a synchronisation. The times
//! measured are printed (`--nocapture` shows them).

#![cfg(feature = "fleet")]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use common::binary::{Home, run};
use common::etcd::{Etcd, EtcdCluster, connect};
use common::fleet_members::{
    LEAVE_BOUND, Member, PREFIX, Picture, TTL, UNAVAILABLE, get_json, poll, serve_member,
};
use common::{
    CapsuleProcess, DEADLINE, DoorMode, DoorServer, EventStream, RecordJson, Rejection,
    ServedBinary, session_id,
};
use etcd_client::{Client, GetOptions};
use rustix::process::{Pid, Signal};
use serde_json::Value;

/// How often each registry passes over its running directory (`--events-interval`).
const INTERVAL: Duration = Duration::from_millis(500);
/// How long a host whose lease is revoked may stay: half the TTL, which a lease left to lapse
/// (renewed at most one pass before) cannot meet, so passing it proves the revocation.
const REVOKED_BOUND: Duration = Duration::from_millis(1500);
/// Beyond one pass of its host, how long a session killed there may stay in another's fleet:
/// the pass's own work, one etcd transaction and one watch event, on a loaded machine.
const PASS_SLACK: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------------------------------------
// One host: a registry and its capsules
// ---------------------------------------------------------------------------------------------

/// One host of the fleet: `murmur-registry serve --host-id <id>` in a private `HOME`, and the
/// capsule processes whose records it reads. Everything is killed and reaped on drop.
struct Host {
    id: &'static str,
    home: Home,
    endpoints: String,
    /// `None` while it is not running (killed, stopped with SIGTERM, restarting).
    server: Option<ServedBinary>,
    /// Its registry token, as its token file holds it.
    token: String,
    /// Its capsule processes, by session id (one session each).
    capsules: BTreeMap<String, CapsuleProcess>,
    /// Its doors that want a token (named in the record's `door_token`), by session id: the
    /// door and the token.
    guarded: BTreeMap<String, (DoorServer, String)>,
    http: reqwest::Client,
}

impl Drop for Host {
    /// A failing test shows each registry's log: what its lease and its watch did is often the
    /// only way to tell a lease that lapsed from a view that lost a host.
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(server) = self.server.as_mut()
        {
            eprintln!("--- the log of registry {} ---\n{}", self.id, server.kill());
        }
    }
}

impl Host {
    /// Start host `id`'s registry against `endpoints`, answering once it listens (and so once
    /// it claimed its host id).
    fn start(id: &'static str, endpoints: &[String]) -> Self {
        Self::start_with(id, endpoints, |_, _| {})
    }

    /// [`Host::start`], with `more` adding to its command line (not kept for a restart).
    fn start_with(
        id: &'static str,
        endpoints: &[String],
        more: impl FnOnce(&Home, &mut Command),
    ) -> Self {
        let home = Home::new();
        home.running_dir();
        let endpoints = endpoints.join(",");
        let mut command = serve(&home, id, &endpoints);
        more(&home, &mut command);
        let server = ServedBinary::spawn(command);
        let token = home.token();
        Self {
            id,
            home,
            endpoints,
            server: Some(server),
            token,
            capsules: BTreeMap::new(),
            guarded: BTreeMap::new(),
            http: reqwest::Client::new(),
        }
    }

    /// Its `serve` command line, for starting it again.
    fn command(&self) -> Command {
        serve(&self.home, self.id, &self.endpoints)
    }

    fn server(&self) -> &ServedBinary {
        self.server.as_ref().expect("the registry runs")
    }

    /// Start a capsule process on this host; its session id.
    fn add_capsule(&mut self) -> String {
        let capsule = CapsuleProcess::single();
        self.home.write(&capsule.record());
        let session = capsule.session_id();
        self.capsules.insert(session.clone(), capsule);
        session
    }

    /// Add a session whose door answers only with the token its record names (`door_token`):
    /// a door of this test process, as murmur's authenticated doors are asked.
    fn add_guarded_door(&mut self) {
        let session = session_id();
        let token = format!("door-token-{}", session_id());
        let door = DoorServer::start(DoorMode::Authenticated {
            session_id: session.clone(),
            token: token.clone(),
            rejection: Rejection::Http401,
        });
        self.home
            .write(&RecordJson::new(&session).url(door.url()).door_token(&token));
        self.guarded.insert(session, (door, token));
    }

    /// Every session this host holds, live.
    fn sessions(&self) -> BTreeSet<String> {
        (self.capsules.keys().chain(self.guarded.keys()))
            .cloned()
            .collect()
    }

    /// `kill -9` the capsule holding `session` and reap it.
    fn kill_capsule(&mut self, session: &str) {
        let mut capsule = self
            .capsules
            .remove(session)
            .expect("a capsule of this host");
        capsule.send_signal(9);
        capsule.wait_exit(DEADLINE);
    }

    /// Send `signal` to the registry process.
    fn signal(&self, signal: Signal) {
        let pid = i32::try_from(self.server().pid()).expect("a pid fits i32");
        let pid = Pid::from_raw(pid).expect("a positive pid");
        rustix::process::kill_process(pid, signal).expect("signal the registry");
    }

    /// `GET path` with its token: the status and the JSON body.
    async fn get(&self, path: &str) -> (u16, Value) {
        get_json(&self.http, (self.id, self.server().addr), &self.token, path).await
    }

    /// What it serves as the fleet, or the status and problem it answers instead.
    async fn fleet(&self) -> Result<Picture, String> {
        let (status, body) = self.get("/fleet/sessions").await;
        if status != 200 {
            return Err(format!("{status} {body}"));
        }
        assert_eq!(body["host_id"], self.id, "the answer names its own host");
        Ok(Picture::of(&body))
    }

    /// The session ids its local `/sessions` serves, which must answer 200.
    async fn local_sessions(&self) -> BTreeSet<String> {
        let (status, body) = self.get("/sessions").await;
        assert_eq!(status, 200, "{}'s local /sessions: {body}", self.id);
        let sessions = body["sessions"].as_array().expect("a list of sessions");
        sessions
            .iter()
            .map(|s| s["session_id"].as_str().expect("a session id").to_owned())
            .collect()
    }
}

/// `serve` in `home` as host `id` of the fleet in `endpoints`, with the short lease and pass.
fn serve(home: &Home, id: &str, endpoints: &str) -> Command {
    serve_member(home, id, endpoints, "127.0.0.1:0")
}

impl Member for Host {
    fn id(&self) -> &str {
        self.id
    }

    fn live_sessions(&self) -> BTreeSet<String> {
        self.sessions()
    }
}

/// Hosts `a`, `b` and `c` against `endpoints`, each with two capsules, once every one serves
/// the whole fleet.
async fn three_hosts(endpoints: &[String]) -> Vec<Host> {
    let mut hosts: Vec<Host> = ["a", "b", "c"]
        .into_iter()
        .map(|id| Host::start(id, endpoints))
        .collect();
    for host in &mut hosts {
        host.add_capsule();
        host.add_capsule();
    }
    let all: Vec<&Host> = hosts.iter().collect();
    converged(&all, &all, "the three hosts converge").await;
    hosts
}

// ---------------------------------------------------------------------------------------------
// What a registry serves as the fleet
// ---------------------------------------------------------------------------------------------

/// Wait until every one of `readers` serves exactly the fleet of `members` (within
/// [`DEADLINE`]); how long each took, in order.
async fn converged(readers: &[&Host], members: &[&Host], what: &str) -> Vec<Duration> {
    let expected = Picture::expected(members);
    let since = Instant::now();
    let mut took = Vec::new();
    for reader in readers {
        let what = format!("{what} (as {} serves it)", reader.id);
        let ((), elapsed) = poll(&what, since, DEADLINE, async || {
            let picture = reader.fleet().await?;
            if picture == expected {
                Ok(())
            } else {
                Err(format!("{picture:?}, expected {expected:?}"))
            }
        })
        .await;
        took.push(elapsed);
    }
    took
}

/// Poll each of `readers` until host `id` is gone from the fleet it serves; when each first
/// served it gone, since `since`.
async fn until_gone(readers: &[&Host], id: &str, since: Instant) -> Vec<Duration> {
    let mut gone_at: Vec<Option<Duration>> = vec![None; readers.len()];
    while gone_at.iter().any(Option::is_none) {
        for (reader, gone) in readers.iter().zip(&mut gone_at) {
            if gone.is_some() {
                continue;
            }
            let served = reader.fleet().await;
            if served.as_ref().is_ok_and(|p| p.lacks(id)) {
                *gone = Some(since.elapsed());
            }
            assert!(
                since.elapsed() < DEADLINE,
                "{id} still in {}'s fleet after {DEADLINE:?}: {served:?}",
                reader.id
            );
        }
        // Paces the polling only.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    gone_at.into_iter().flatten().collect()
}

/// Poll each of `readers` until its `/fleet/sessions` and `/fleet/hosts` answer 503
/// `fleet-unavailable` saying why, checking meanwhile that its local `/sessions` serves its own
/// capsules; how long each took, since `since`.
async fn until_unavailable(readers: &[&Host], since: Instant) -> Vec<Duration> {
    let mut took = Vec::new();
    for reader in readers {
        let what = format!("{}'s fleet is unavailable", reader.id);
        let ((), elapsed) = poll(&what, since, DEADLINE, async || {
            let (status, problem) = reader.get("/fleet/sessions").await;
            if status != 503 {
                return Err(format!("{status}"));
            }
            assert_eq!(problem["type"], UNAVAILABLE, "{problem}");
            assert!(
                problem["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("etcd")),
                "says why: {problem}"
            );
            Ok(())
        })
        .await;
        took.push(elapsed);
        let (status, problem) = reader.get("/fleet/hosts").await;
        assert_eq!((status, &problem["type"]), (503, &Value::from(UNAVAILABLE)));
        assert_local_untouched(reader).await;
    }
    took
}

/// Its local `/sessions` answers 200 with exactly its own capsules.
async fn assert_local_untouched(host: &Host) {
    let wanted = host.sessions();
    let since = Instant::now();
    // A capsule started or killed a moment ago takes a pass to show.
    poll("the local /sessions", since, DEADLINE, async || {
        let local = host.local_sessions().await;
        if local == wanted {
            Ok(())
        } else {
            Err(format!("{}: {local:?}, expected {wanted:?}", host.id))
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// What etcd holds
// ---------------------------------------------------------------------------------------------

/// Every key etcd holds, with its value and lease.
async fn every_key(client: &mut Client) -> Vec<(String, String, i64)> {
    let response = client
        .get("", Some(GetOptions::new().with_all_keys()))
        .await
        .expect("read every key");
    response
        .kvs()
        .iter()
        .map(|kv| {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            let value = String::from_utf8_lossy(kv.value()).into_owned();
            (key, value, kv.lease())
        })
        .collect()
}

/// Each host's lease, checked against what etcd holds: every key is a fleet key, every
/// session key hangs off its own host key's lease, and the session keys of each of `hosts` are
/// exactly its capsules.
async fn host_leases(client: &mut Client, hosts: &[&Host]) -> BTreeMap<String, i64> {
    let keys = every_key(client).await;
    let mut leases = BTreeMap::new();
    let mut sessions: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (key, _, lease) in &keys {
        let path = key.strip_prefix(PREFIX).unwrap_or_else(|| panic!("{key}"));
        if let Some(host) = path.strip_prefix("/hosts/") {
            assert_ne!(*lease, 0, "{key} hangs off a lease");
            leases.insert(host.to_owned(), *lease);
        }
    }
    for (key, _, lease) in &keys {
        let path = key.strip_prefix(PREFIX).unwrap_or_default();
        if let Some((host, session)) = path
            .strip_prefix("/sessions/")
            .and_then(|p| p.split_once('/'))
        {
            assert_eq!(leases.get(host), Some(lease), "{key} on its host's lease");
            sessions
                .entry(host.to_owned())
                .or_default()
                .insert(session.to_owned());
        }
    }
    let wanted: BTreeMap<String, BTreeSet<String>> = hosts
        .iter()
        .filter(|h| !h.sessions().is_empty())
        .map(|h| (h.id.to_owned(), h.sessions()))
        .collect();
    assert_eq!(sessions, wanted, "the session keys etcd holds");
    let ids: BTreeSet<&str> = hosts.iter().map(|h| h.id).collect();
    assert_eq!(
        leases.keys().map(String::as_str).collect::<BTreeSet<_>>(),
        ids
    );
    leases
}

/// Whether etcd still knows `lease`.
async fn lease_lives(client: &mut Client, lease: i64) -> bool {
    let answer = client
        .lease_time_to_live(lease, None)
        .await
        .expect("ask about a lease");
    answer.ttl() > 0
}

// ---------------------------------------------------------------------------------------------
// A registry's /fleet/events
// ---------------------------------------------------------------------------------------------

/// `GET /fleet/events` of one host, read event by event through the common reader.
struct FleetEvents {
    of: &'static str,
    stream: EventStream,
}

impl FleetEvents {
    async fn open(host: &Host) -> Self {
        let response = host
            .http
            .get(format!("http://{}/fleet/events", host.server().addr))
            .bearer_auth(&host.token)
            .send()
            .await
            .expect("open /fleet/events");
        let mut events = Self {
            of: host.id,
            stream: EventStream::new(response, DEADLINE),
        };
        events.stream.snapshot().await;
        events
    }

    /// Read events until one satisfies `done`, all within [`DEADLINE`] of `since`: every event
    /// read (`name subject`, where the subject is the session id or host id), and how long
    /// since `since` the last took.
    async fn until(
        &mut self,
        since: Instant,
        what: &str,
        done: impl Fn(&str, &Value) -> bool,
    ) -> (Vec<String>, Duration) {
        let mut seen = Vec::new();
        loop {
            let deadline = since + DEADLINE;
            let event = tokio::time::timeout_at(deadline.into(), self.stream.expect_event())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "{what} not on {}'s stream within {DEADLINE:?}; seen {seen:?}",
                        self.of
                    )
                });
            let subject = (event.data["session_id"].as_str())
                .or(event.data["host_id"].as_str())
                .unwrap_or("");
            seen.push(format!("{} {subject}", event.name));
            if done(&event.name, &event.data) {
                return (seen, since.elapsed());
            }
        }
    }
}

/// Whether the event is `name` about `subject` (a session id, or a host id for `host.*`).
fn is(name: &str, data: &Value, wanted: &str, subject: &str) -> bool {
    let about = match wanted {
        "host.joined" | "host.left" => &data["host_id"],
        _ => &data["session_id"],
    };
    name == wanted && about == subject
}

// ---------------------------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------------------------

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn three_hosts_converge_follow_each_other_live_and_publish_no_secret() {
    let etcd = Etcd::start().await;
    let mut hosts = three_hosts(&[etcd.endpoint()]).await;
    for host in &mut hosts {
        host.add_guarded_door();
    }
    let all: Vec<&Host> = hosts.iter().collect();
    converged(
        &all,
        &all,
        "the doors that want a token are live everywhere",
    )
    .await;

    let (_, body) = hosts[0].get("/fleet/sessions").await;
    for session in body["sessions"].as_array().expect("sessions") {
        assert_eq!(
            session["door_scope"], "host",
            "a door on loopback: {session}"
        );
        assert!(session.get("door_token").is_none(), "{session}");
    }
    let (status, body) = hosts[2].get("/fleet/hosts").await;
    let served: Vec<&str> = (body["hosts"].as_array().expect("hosts").iter())
        .filter_map(|h| h["host_id"].as_str())
        .collect();
    assert_eq!((status, served), (200, vec!["a", "b", "c"]));
    for host in body["hosts"].as_array().expect("hosts") {
        let cpus = host["load"]["cpus"].as_u64();
        assert!(
            cpus.is_some_and(|n| n >= 1),
            "each host says its load: {host}"
        );
    }

    let mut on_a = FleetEvents::open(&hosts[0]).await;
    let started = Instant::now();
    let session = hosts[1].add_capsule();
    let (_, took) = on_a
        .until(started, "b's new session", |name, data| {
            is(name, data, "session.added", &session) && data["host_id"] == "b"
        })
        .await;
    println!("measured: a capsule started on b reached a's /fleet/events in {took:?}");
    let all: Vec<&Host> = hosts.iter().collect();
    converged(&all, &all, "b's new session is served everywhere").await;

    let killed = Instant::now();
    hosts[1].kill_capsule(&session);
    let (seen, took) = on_a
        .until(killed, "the killed session's removal", |name, data| {
            is(name, data, "session.removed", &session)
        })
        .await;
    println!("measured: a capsule killed on b left a's /fleet/events in {took:?}: {seen:?}");
    assert!(
        took <= INTERVAL + PASS_SLACK,
        "removed after {took:?}, over one pass and {PASS_SLACK:?}"
    );

    // Nothing secret: read every key etcd holds.
    let mut client = etcd.client().await;
    let keys = every_key(&mut client).await;
    assert_eq!(
        keys.len(),
        3 + 9,
        "every host and session, nothing else: {keys:?}"
    );
    let secrets: Vec<&String> = (hosts.iter())
        .flat_map(|h| h.guarded.values().map(|(_, token)| token).chain([&h.token]))
        .collect();
    assert_eq!(secrets.len(), 6);
    for (key, value, _) in &keys {
        assert!(!value.contains("door_token"), "{key}: {value}");
        for secret in &secrets {
            assert!(
                !key.contains(*secret) && !value.contains(*secret),
                "{key}: {value}"
            );
        }
    }
    let all: Vec<&Host> = hosts.iter().collect();
    host_leases(&mut client, &all).await;
}

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn a_host_killed_leaves_within_the_ttl_and_restarted_at_once_rejoins_after_its_old_lease() {
    let etcd = Etcd::start().await;
    let mut hosts = three_hosts(&[etcd.endpoint()]).await;
    let mut client = etcd.client().await;
    let old = host_leases(&mut client, &hosts.iter().collect::<Vec<_>>()).await["b"];
    let mut on_a = FleetEvents::open(&hosts[0]).await;
    let mut on_c = FleetEvents::open(&hosts[2]).await;

    let mut b = hosts[1].server.take().expect("b runs");
    b.kill();
    let killed = Instant::now();
    // Restarted at once: its claim must wait for the old lease, not take over or give up.
    let restarting = tokio::task::spawn_blocking({
        let command = hosts[1].command();
        move || ServedBinary::spawn(command)
    });
    let left = |name: &str, data: &Value| is(name, data, "host.left", "b");
    let ((seen_a, took_a), (seen_c, took_c)) = tokio::join!(
        on_a.until(killed, "b leaving a", left),
        on_c.until(killed, "b leaving c", left)
    );
    println!("measured: b killed -9 left a in {took_a:?}, c in {took_c:?}");
    for (seen, took) in [(&seen_a, took_a), (&seen_c, took_c)] {
        assert!(took <= LEAVE_BOUND, "left after {took:?}: {seen:?}");
        for session in hosts[1].sessions() {
            let removed = format!("session.removed {session}");
            assert!(
                seen.contains(&removed),
                "{removed} before host.left: {seen:?}"
            );
        }
        assert!(!seen.iter().any(|e| e == "host.joined b"), "{seen:?}");
    }

    let joined = |name: &str, data: &Value| is(name, data, "host.joined", "b");
    let (_, took) = on_a.until(killed, "b rejoining a", joined).await;
    println!("measured: b restarted at once rejoined a {took:?} after the kill");
    hosts[1].server = Some(restarting.await.expect("the restart"));
    let all: Vec<&Host> = hosts.iter().collect();
    converged(&all, &all, "b is back everywhere, its sessions once each").await;
    let new = host_leases(&mut client, &all).await["b"];
    assert_ne!(new, old, "b rejoined on a lease of its own");
    assert!(!lease_lives(&mut client, old).await, "the old lease lapsed");
}

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn a_host_frozen_leaves_within_the_ttl_and_thawed_replaces_its_lease_and_rejoins() {
    let etcd = Etcd::start().await;
    let hosts = three_hosts(&[etcd.endpoint()]).await;
    let mut client = etcd.client().await;
    let all: Vec<&Host> = hosts.iter().collect();
    let old = host_leases(&mut client, &all).await["b"];

    hosts[1].signal(Signal::STOP);
    let stopped = Instant::now();
    let took = until_gone(&[&hosts[0], &hosts[2]], "b", stopped).await;
    println!("measured: b stopped (SIGSTOP) left a and c in {took:?}");
    for took in &took {
        assert!(
            *took <= LEAVE_BOUND,
            "left after {took:?}, over {LEAVE_BOUND:?}"
        );
    }
    let rest = [&hosts[0], &hosts[2]];
    converged(&rest, &rest, "a and c hold each other only").await;

    hosts[1].signal(Signal::CONT);
    let took = converged(&all, &all, "b thawed is back everywhere, once each").await;
    println!("measured: b thawed (SIGCONT) was back everywhere within {took:?}");
    let new = host_leases(&mut client, &all).await["b"];
    assert_ne!(new, old, "the lapsed lease was replaced");
    assert!(!lease_lives(&mut client, old).await);
}

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn a_host_stopped_with_sigterm_leaves_at_once_and_exits_0() {
    let etcd = Etcd::start().await;
    let mut hosts = three_hosts(&[etcd.endpoint()]).await;
    let mut client = etcd.client().await;
    let old = host_leases(&mut client, &hosts.iter().collect::<Vec<_>>()).await["b"];

    let b = hosts[1].server.take().expect("b runs");
    let signalled = Instant::now();
    let stopping = tokio::task::spawn_blocking(move || b.stop_with(Signal::TERM));
    let took = until_gone(&[&hosts[0], &hosts[2]], "b", signalled).await;
    println!("measured: b stopped with SIGTERM left a and c in {took:?}");
    for took in &took {
        assert!(
            *took <= REVOKED_BOUND,
            "left after {took:?}: not at once, as a revoked lease would"
        );
    }
    let (status, log) = stopping.await.expect("b's end");
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(log.contains("left the fleet"), "{log}");
    assert!(!lease_lives(&mut client, old).await, "b's lease is revoked");
    let rest = [&hosts[0], &hosts[2]];
    converged(&rest, &rest, "a and c hold each other only").await;
    host_leases(&mut client, &rest).await;
}

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn etcd_killed_is_503_within_the_ttl_and_back_the_fleet_resyncs_without_ghosts() {
    let mut etcd = Etcd::start().await;
    let mut hosts = three_hosts(&[etcd.endpoint()]).await;

    etcd.kill();
    let killed = Instant::now();
    let all: Vec<&Host> = hosts.iter().collect();
    let took = until_unavailable(&all, killed).await;
    println!("measured: etcd killed: /fleet/* 503 on a, b, c after {took:?}");
    for took in &took {
        assert!(*took <= TTL, "503 after {took:?}, over the TTL");
    }

    // Meanwhile: a gains a session, b loses one, c dies without a word.
    hosts[0].add_capsule();
    let gone = hosts[1]
        .capsules
        .keys()
        .next()
        .cloned()
        .expect("b's capsule");
    hosts[1].kill_capsule(&gone);
    hosts[2].server.take().expect("c runs").kill();
    for host in &hosts[..2] {
        assert_local_untouched(host).await;
    }

    etcd.restart().await;
    let back = Instant::now();
    let survivors = [&hosts[0], &hosts[1]];
    for host in survivors {
        let what = format!("{}'s fleet is served again", host.id);
        let ((), took) = poll(&what, back, DEADLINE, async || host.fleet().await.map(drop)).await;
        println!(
            "measured: etcd back: {} serves the fleet again after {took:?}",
            host.id
        );
        assert!(took <= TTL, "served again after {took:?}, over the TTL");
    }
    // c's lease was renewed by nobody since etcd came back: it lapses, and c with it.
    let took = converged(&survivors, &survivors, "a and b resync without c").await;
    println!("measured: etcd back: a and b whole again, c gone, after {took:?} more");
    let mut client = etcd.client().await;
    host_leases(&mut client, &survivors).await;
}

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn etcd_frozen_is_503_within_the_ttl_and_thawed_the_expired_leases_are_replaced() {
    let etcd = Etcd::start().await;
    let mut hosts = three_hosts(&[etcd.endpoint()]).await;
    let mut client = etcd.client().await;
    let old = host_leases(&mut client, &hosts.iter().collect::<Vec<_>>()).await;

    etcd.freeze();
    let frozen = Instant::now();
    let all: Vec<&Host> = hosts.iter().collect();
    let took = until_unavailable(&all, frozen).await;
    println!("measured: etcd frozen: /fleet/* 503 on a, b, c after {took:?}");
    for took in &took {
        assert!(*took <= TTL, "503 after {took:?}, over the TTL");
    }

    // Meanwhile: b gains a session and c loses one.
    hosts[1].add_capsule();
    let gone = hosts[2]
        .capsules
        .keys()
        .next()
        .cloned()
        .expect("c's capsule");
    hosts[2].kill_capsule(&gone);
    // The outage outlasts every lease (the scenario's length, not a synchronisation); the
    // local API is asked all along and must not notice.
    let outage = TTL + Duration::from_secs(1);
    while frozen.elapsed() < outage {
        for host in &hosts {
            assert_local_untouched(host).await;
        }
    }

    etcd.thaw();
    let all: Vec<&Host> = hosts.iter().collect();
    let took = converged(&all, &all, "the fleet resyncs after the thaw").await;
    println!("measured: etcd thawed: the fleet whole again everywhere within {took:?}");
    let mut client = etcd.client().await;
    let new = host_leases(&mut client, &all).await;
    for (host, lease) in &old {
        assert_ne!(new[host], *lease, "{host}'s expired lease was replaced");
        assert!(!lease_lives(&mut client, *lease).await);
    }
}

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn a_second_registry_claiming_a_live_host_id_is_refused_naming_it() {
    let etcd = Etcd::start().await;
    let hosts = three_hosts(&[etcd.endpoint()]).await;
    let mut client = etcd.client().await;
    let all: Vec<&Host> = hosts.iter().collect();
    let before = host_leases(&mut client, &all).await;

    let intruder = Home::new();
    intruder.running_dir();
    let refused = run(serve(&intruder, "b", &etcd.endpoint()));
    println!(
        "measured: the second b was refused after {:?}",
        refused.took
    );
    refused.assert_failure();
    let error = (refused.stderr.lines())
        .find(|l| l.starts_with("error"))
        .expect("an error line");
    assert!(error.contains("host id b"), "{error}");
    assert!(
        refused.took >= TTL,
        "refused after {:?}, before waiting one TTL for the holder's lease",
        refused.took
    );

    converged(&all, &all, "the holder b is untouched").await;
    assert_eq!(host_leases(&mut client, &all).await, before);
}

/// Unavailable spans by reader: when it first and last answered 503 and each distinct reason.
type Outages<'a> = BTreeMap<&'a str, (Duration, Duration, String)>;

/// Poll every host's fleet until each serves exactly the fleet of all of them, checking all
/// along that no host ever leaves another's fleet; when each reader was unavailable (since
/// `since`), and why: it answered 503, or it hid its own host.
///
/// A reader hides its own host when its publisher has not renewed the lease for a TTL (during
/// an election a renewal waits for the new leader): it cannot know the lease still holds, so
/// it must not offer Stop and Kill on entries it may no longer own. That is the reader's
/// outage, bounded like a 503; another host leaving it never is.
async fn read_all_along(hosts: &[Host], since: Instant) -> Outages<'_> {
    let all: Vec<&Host> = hosts.iter().collect();
    let expected = Picture::expected(&all);
    let mut outages = Outages::new();
    let mut pending: BTreeSet<&str> = hosts.iter().map(|h| h.id).collect();
    while !pending.is_empty() {
        for host in hosts {
            let answer = host.fleet().await.and_then(|picture| {
                let others = |ids: &[String]| -> Vec<String> {
                    ids.iter().filter(|id| *id != host.id).cloned().collect()
                };
                assert_eq!(
                    others(&picture.hosts),
                    others(&expected.hosts),
                    "as {} serves it",
                    host.id
                );
                if picture.hosts.iter().any(|id| id == host.id) {
                    Ok(picture)
                } else {
                    Err("its own host hidden: no renewal for a TTL".to_owned())
                }
            });
            match answer {
                Ok(picture) => {
                    if picture == expected {
                        pending.remove(host.id);
                    }
                }
                Err(problem) => {
                    let at = since.elapsed();
                    let seen = outages.entry(host.id).or_insert((at, at, String::new()));
                    seen.1 = at;
                    // Each distinct reason once, shortened to its cause.
                    let why = problem.split("detail").nth(1).unwrap_or(&problem);
                    let why: String = why.chars().take(160).collect();
                    if !seen.2.contains(&why) {
                        seen.2.push_str(&format!("{at:?}: {why} | "));
                    }
                }
            }
        }
        assert!(
            since.elapsed() < DEADLINE,
            "not current everywhere after {DEADLINE:?}: {pending:?}, {outages:?}"
        );
        // Paces the polling only.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    outages
}

/// The endpoints of the members still running.
fn running(cluster: &EtcdCluster) -> Vec<String> {
    (cluster.members.iter())
        .filter(|m| m.pid().is_some())
        .map(Etcd::endpoint)
        .collect()
}

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn a_three_member_clusters_leader_killed_publishing_and_reading_go_on() {
    let mut cluster = EtcdCluster::start(3).await;
    let mut hosts = three_hosts(&cluster.endpoints()).await;
    let mut client = connect(&cluster.endpoints())
        .await
        .expect("a cluster client");
    let before = host_leases(&mut client, &hosts.iter().collect::<Vec<_>>()).await;

    let leader = cluster.leader().await;
    cluster.members[leader].kill();
    let killed = Instant::now();
    hosts[1].add_capsule();
    let gone = hosts[0]
        .capsules
        .keys()
        .next()
        .cloned()
        .expect("a's capsule");
    hosts[0].kill_capsule(&gone);

    // A reader may be unavailable while the members elect a leader (a read then waits out
    // its deadline), never as long as a TTL; no host leaves.
    let outages = read_all_along(&hosts, killed).await;
    println!(
        "measured: leader killed: the changes were everywhere after {:?}; 503 spans (first, last, why): {outages:?}",
        killed.elapsed()
    );
    for (host, (first, last, why)) in &outages {
        assert!(
            *last - *first < TTL,
            "{host} unavailable from {first:?} to {last:?}: {why}"
        );
    }
    let mut client = connect(&running(&cluster)).await.expect("a client");
    let after = host_leases(&mut client, &hosts.iter().collect::<Vec<_>>()).await;
    assert_eq!(after, before, "every lease lived through the leader change");
}

/// Without an election, a member's loss is not a reader's: its watch breaks and is read again
/// at once from another member. The lost member is the first endpoint each registry is given.
#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn a_three_member_clusters_follower_killed_no_reader_is_ever_unavailable() {
    let mut cluster = EtcdCluster::start(3).await;
    let follower = (cluster.leader().await + 1) % 3;
    let mut endpoints = cluster.endpoints();
    endpoints.rotate_left(follower);
    let mut hosts = three_hosts(&endpoints).await;

    cluster.members[follower].kill();
    let killed = Instant::now();
    hosts[1].add_capsule();
    let gone = hosts[2]
        .capsules
        .keys()
        .next()
        .cloned()
        .expect("c's capsule");
    hosts[2].kill_capsule(&gone);
    let outages = read_all_along(&hosts, killed).await;
    println!(
        "measured: follower killed: the changes were everywhere after {:?}; 503 spans: {outages:?}",
        killed.elapsed()
    );
    assert_eq!(outages, Outages::new(), "no reader noticed");
    let mut client = connect(&running(&cluster)).await.expect("a client");
    host_leases(&mut client, &hosts.iter().collect::<Vec<_>>()).await;
}

/// What `session` on `host` carries as its capsule name in `data` (a `session.*` event).
fn capsule_in(data: &Value) -> Option<&str> {
    data["session"]["capsule_name"].as_str()
}

/// A host's keys are its registry's alone. A host key left without a lease does not keep the
/// registry out (it starts listening at once and takes the key); an entry forged under its id
/// (another capsule, pid 1, no lease) is never served by its own registry as "this host" (its
/// own view is its own verified picture) and is put back by its next pass, as is an entry
/// deleted by hand, as every other registry sees.
#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn a_hosts_keys_are_its_own_forged_deleted_or_lease_less_are_put_back_and_never_served() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    let lease_less = r#"{"host_id":"a","version":"0","started_at":"2026-01-01T00:00:00Z"}"#;
    client
        .put(format!("{PREFIX}/hosts/a"), lease_less, None)
        .await
        .expect("a host key without a lease");
    let started = Instant::now();
    let mut hosts = [
        Host::start("a", &[etcd.endpoint()]),
        Host::start("b", &[etcd.endpoint()]),
    ];
    let took = started.elapsed();
    println!("measured: with a lease-less host key, a and b listened after {took:?}");
    assert!(took < TTL, "a waited {took:?} on a key no lease holds");
    let session = hosts[0].add_capsule();
    hosts[1].add_capsule();
    let all: Vec<&Host> = hosts.iter().collect();
    converged(&all, &all, "a took its host key and both converge").await;
    host_leases(&mut client, &all).await;

    let mut on_a = FleetEvents::open(&hosts[0]).await;
    let mut on_b = FleetEvents::open(&hosts[1]).await;
    let key = format!("{PREFIX}/sessions/a/{session}");
    let real = client.get(key.as_str(), None).await.expect("read");
    let real: Value = serde_json::from_slice(real.kvs()[0].value()).expect("an entry");
    let mut forged = real.clone();
    forged["capsule_name"] = "scratch-test (safe to stop)".into();
    forged["pid"] = 1.into();
    let forged_at = Instant::now();
    client
        .put(key.as_str(), forged.to_string(), None)
        .await
        .expect("forge a's entry");
    let real_name = real["capsule_name"].as_str().expect("a capsule name");
    let (seen, took) = on_b
        .until(forged_at, "a's entry put back, on b", |name, data| {
            name == "session.changed" && capsule_in(data) == Some(real_name)
        })
        .await;
    println!("measured: a forged entry of a was put back (as b saw it) in {took:?}: {seen:?}");
    assert!(took <= INTERVAL + PASS_SLACK, "put back after {took:?}");

    let deleted_at = Instant::now();
    client.delete(key.as_str(), None).await.expect("delete");
    let (seen, took) = on_b
        .until(
            deleted_at,
            "a's deleted entry put back, on b",
            |name, data| is(name, data, "session.added", &session),
        )
        .await;
    println!("measured: a deleted entry of a was put back (as b saw it) in {took:?}: {seen:?}");
    assert!(took <= INTERVAL + PASS_SLACK, "put back after {took:?}");

    // A change made after all of it, on b: a's stream carries it after every event the forgery
    // and the deletion caused on a (the watch follows etcd's order); none is about a's session.
    let marker = hosts[1].add_capsule();
    let (seen, _) = on_a
        .until(Instant::now(), "b's new session, on a", |name, data| {
            assert_ne!(data["session_id"], session.as_str(), "{name} {data}");
            is(name, data, "session.added", &marker)
        })
        .await;
    assert_eq!(seen.len(), 1, "a served nothing but b's change: {seen:?}");
    let (_, body) = hosts[0].get("/fleet/sessions").await;
    let own: Vec<&Value> = (body["sessions"].as_array().expect("sessions").iter())
        .filter(|s| s["session_id"] == session.as_str())
        .collect();
    assert_eq!(own.len(), 1, "{body}");
    assert_eq!(
        (own[0]["capsule_name"].as_str(), own[0]["pid"].as_u64()),
        (Some(real_name), real["pid"].as_u64())
    );
    let all: Vec<&Host> = hosts.iter().collect();
    converged(&all, &all, "both serve the fleet as it is").await;
    host_leases(&mut client, &all).await;
}

/// The role of host `id`'s etcd user, as the README deploys it: write exactly its host key and
/// its sessions' prefix (with the `/`: `sessions/a` would also cover host `ab`'s), read the
/// whole prefix (the watch, and asking etcd about a lease, need it).
async fn grant_host(admin: &mut Client, id: &str) {
    use etcd_client::Permission;
    let role = format!("fleet-host-{id}");
    admin.role_add(role.as_str()).await.expect("add the role");
    for permission in [
        Permission::read(format!("{PREFIX}/")).with_prefix(),
        Permission::read_write(format!("{PREFIX}/hosts/{id}")),
        Permission::read_write(format!("{PREFIX}/sessions/{id}/")).with_prefix(),
    ] {
        (admin.role_grant_permission(role.as_str(), permission).await).expect("grant");
    }
    admin
        .user_add(id, format!("{id}-password"), None)
        .await
        .expect("add the user");
    (admin.user_grant_role(id, role.as_str()).await).expect("give the user its role");
}

/// A client of `etcd` as host `id`'s user.
async fn as_user(etcd: &Etcd, id: &str) -> Client {
    let options = etcd_client::ConnectOptions::new()
        .with_user(id, format!("{id}-password"))
        .with_timeout(DEADLINE);
    Client::connect([etcd.endpoint()], Some(options))
        .await
        .expect("connect as a host's user")
}

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn with_etcd_roles_each_host_publishes_and_reads_and_can_write_no_other_hosts_keys() {
    let etcd = Etcd::start().await;
    let mut admin = etcd.client().await;
    admin.user_add("root", "root-pw", None).await.expect("root");
    (admin.user_grant_role("root", "root").await).expect("root's role");
    for id in ["a", "b", "ab"] {
        grant_host(&mut admin, id).await;
    }
    admin.auth_enable().await.expect("enable authentication");
    let credentials = |id: &'static str| {
        move |home: &Home, command: &mut Command| {
            let file = home.path().join("etcd-credentials");
            std::fs::write(&file, format!("{id}:{id}-password\n")).expect("write");
            let private = std::os::unix::fs::PermissionsExt::from_mode(0o600);
            std::fs::set_permissions(&file, private).expect("chmod 600");
            command.arg("--fleet-credentials-file").arg(&file);
        }
    };
    let endpoints = [etcd.endpoint()];
    let mut hosts = [
        Host::start_with("a", &endpoints, credentials("a")),
        Host::start_with("b", &endpoints, credentials("b")),
    ];
    for host in &mut hosts {
        host.add_capsule();
    }
    let all: Vec<&Host> = hosts.iter().collect();
    converged(&all, &all, "a and b publish and read as their users").await;

    let b_session = hosts[1].sessions().into_iter().next().expect("b's session");
    let mut as_a = as_user(&etcd, "a").await;
    let value = r#"{"forged":true}"#;
    for key in [
        format!("{PREFIX}/hosts/b"),
        format!("{PREFIX}/sessions/b/{b_session}"),
        format!("{PREFIX}/hosts/ab"),
        format!("{PREFIX}/sessions/ab/{b_session}"),
        format!("{PREFIX}/elsewhere"),
    ] {
        let refused = as_a.put(key.as_str(), value, None).await;
        let error = refused.expect_err(&key).to_string();
        assert!(error.contains("permission denied"), "{key}: {error}");
        let deleted = as_a.delete(key.as_str(), None).await;
        assert!(deleted.is_err(), "{key}: a's user deleted it");
    }
    // What a's user may write is its own: a's registry puts back anything odd there itself.
    let own = format!("{PREFIX}/sessions/a/ses_0190a5c0f4d17c3e8b2a4d6f8e0c1b3f");
    as_a.put(own.as_str(), "{}", None)
        .await
        .expect("a's own prefix");
    let written = Instant::now();
    let ((), took) = poll(
        "a's pass deletes the key it did not write",
        written,
        DEADLINE,
        async || {
            let left = as_a
                .get(own.as_str(), None)
                .await
                .map_err(|e| e.to_string())?;
            if left.kvs().is_empty() {
                Ok(())
            } else {
                Err("still there".to_owned())
            }
        },
    )
    .await;
    println!("measured: a key a's registry did not write under its prefix went in {took:?}");
    let all: Vec<&Host> = hosts.iter().collect();
    converged(&all, &all, "the fleet is untouched").await;
    let mut root = as_user_root(&etcd).await;
    host_leases(&mut root, &all).await;
}

/// A client of `etcd` as its root user.
async fn as_user_root(etcd: &Etcd) -> Client {
    let options = etcd_client::ConnectOptions::new()
        .with_user("root", "root-pw")
        .with_timeout(DEADLINE);
    Client::connect([etcd.endpoint()], Some(options))
        .await
        .expect("connect as root")
}
