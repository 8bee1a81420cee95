//! A host cut off by the network: three `murmur-registry serve` processes on one real etcd with
//! a 3 s lease, hosts `a` and `b` beside etcd, host `c` (its registry and its capsules) in a
//! network namespace of its own that reaches etcd only through a router namespace
//! ([`CutNetwork`]). The cut is made at the router, once by taking its link to `c` down and
//! once silently (`blackhole` routes for the forwarded packets, so neither end sees an error).
//!
//! What is held, measured from the cut (and from the heal):
//! - `a` and `b` drop `c`, its host and its sessions, within [`LEAVE_BOUND`] (TTL + 1 s: its
//!   lease lapses one TTL after its last renewal, and etcd looks for lapsed leases every
//!   500 ms), and hold each other only;
//! - `c`'s own `/fleet/*` answer 503 `fleet-unavailable` within one TTL, while its `/sessions`
//!   answers the same sessions, live; so it stays, and `a` and `b` hold each other only, for as
//!   long as the cut lasts (a TTL past the lapse of `c`'s lease);
//! - healed, `c` is back within one TTL in every view (its own included), on a new lease, its
//!   old one lapsed: every view holds each host once with exactly its sessions (no ghost, no
//!   duplicate), and so do etcd's keys.
//!
//! Each bound is asserted with [`POLL_SLACK`] on top: a time is taken when the first answer
//! showing the change arrives, which is at most one poll of that registry after the change.
//!
//! `c`'s HTTP is reached over a side link of its namespace that no cut touches: it listens on
//! that link's address with `--allow-remote` (`serve` refuses a bind beyond loopback without
//! it; the bound address is then a Host it answers, so no `--allow-host` is needed). Its
//! capsules run in its namespace too, so their doors are on the loopback it probes.
//!
//! Needs root, `ip` (iproute2) and `/usr/bin/etcd`, and the `fleet` feature: ignored by plain
//! `cargo test`. Waiting is by polling under deadlines, never by sleeping; the measured times
//! are printed (`--nocapture` shows them).

#![cfg(feature = "fleet")]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use common::binary::Home;
use common::etcd::Etcd;
use common::fleet_members::{
    LEAVE_BOUND, Member, POLL_PACE, PREFIX, Picture, TTL, UNAVAILABLE, get_json, poll, serve_member,
};
use common::netns::{Cut, CutNetwork};
use common::{CapsuleProcess, DEADLINE, ServedBinary, session_id};
use etcd_client::{Client, GetOptions};
use serde_json::Value;

/// What a measured time may exceed its bound by: the answer showing a change comes at most one
/// poll of that registry after it (a request on a loaded 2-core machine, plus the 10 ms pace of
/// [`poll`]).
const POLL_SLACK: Duration = Duration::from_millis(250);

/// One host: its registry and two capsules, killed and reaped on drop (before the network,
/// whose namespace they would keep alive: declare the [`CutNetwork`] first).
struct Host {
    id: &'static str,
    server: ServedBinary,
    capsules: Vec<CapsuleProcess>,
    /// Held for the registry, which reads its running directory there.
    _home: Home,
    token: String,
    http: reqwest::Client,
}

impl Host {
    /// Host `id` beside etcd, on loopback.
    fn beside(id: &'static str, etcd: &Etcd) -> Self {
        let home = Home::new();
        let command = serve_member(&home, id, &etcd.endpoint(), "127.0.0.1:0");
        Self::start(id, home, command, || Command::new("python3"))
    }

    /// Host `c` in `net`'s host namespace, reaching etcd through the router, listening on the
    /// side link.
    fn behind(net: &CutNetwork, etcd: &Etcd) -> Self {
        let home = Home::new();
        let endpoint = etcd.endpoint_on(IpAddr::V4(net.uplink_ip()));
        let bind = format!("{}:0", net.host_ip());
        let mut command = serve_member(&home, "c", &endpoint, &bind);
        command.arg("--allow-remote");
        Self::start("c", home, net.inside(&command), || {
            net.inside(&Command::new("python3"))
        })
    }

    fn start(
        id: &'static str,
        home: Home,
        command: Command,
        python3: impl Fn() -> Command,
    ) -> Self {
        home.running_dir();
        let server = ServedBinary::spawn(command);
        let capsules: Vec<CapsuleProcess> = (0..2)
            .map(|_| CapsuleProcess::spawn_with(python3(), &[session_id()]))
            .collect();
        for capsule in &capsules {
            home.write(&capsule.record());
        }
        let token = home.token();
        Self {
            id,
            server,
            capsules,
            _home: home,
            token,
            http: reqwest::Client::new(),
        }
    }

    /// `GET path` with its token: the status and the JSON body.
    async fn get(&self, path: &str) -> (u16, Value) {
        get_json(&self.http, (self.id, self.server.addr), &self.token, path).await
    }

    /// What it serves as the fleet, or the status and problem it answers instead.
    async fn fleet(&self) -> Result<Picture, (u16, Value)> {
        let (status, body) = self.get("/fleet/sessions").await;
        if status != 200 {
            return Err((status, body));
        }
        assert_eq!(body["host_id"], self.id, "the answer names its own host");
        Ok(Picture::of(&body))
    }

    /// Its local `/sessions`, which must answer 200: each session id with its state.
    async fn local(&self) -> BTreeMap<String, String> {
        let (status, body) = self.get("/sessions").await;
        assert_eq!(status, 200, "{}'s local /sessions: {body}", self.id);
        let sessions = body["sessions"].as_array().expect("a list of sessions");
        let text = |value: &Value| value.as_str().unwrap_or("?").to_owned();
        sessions
            .iter()
            .map(|s| (text(&s["session_id"]), text(&s["liveness"]["state"])))
            .collect()
    }
}

impl Member for Host {
    fn id(&self) -> &str {
        self.id
    }

    fn live_sessions(&self) -> BTreeSet<String> {
        self.capsules
            .iter()
            .map(CapsuleProcess::session_id)
            .collect()
    }
}

/// Poll `reader` until host `id` is gone from the fleet it serves: how long since `since`.
async fn until_gone(reader: &Host, id: &str, since: Instant) -> Duration {
    let what = format!("{id} is gone from {}'s fleet", reader.id);
    let ((), took) = poll(&what, since, DEADLINE, async || {
        match reader.fleet().await {
            Ok(picture) if picture.lacks(id) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    took
}

/// Poll `reader` until its `/fleet/sessions` and `/fleet/hosts` answer 503
/// `fleet-unavailable` saying why: how long since `since`.
async fn until_unavailable(reader: &Host, since: Instant) -> Duration {
    let what = format!("{}'s fleet is unavailable", reader.id);
    let ((), took) = poll(&what, since, DEADLINE, async || {
        assert_unavailable(reader, "/fleet/sessions").await
    })
    .await;
    assert_unavailable(reader, "/fleet/hosts")
        .await
        .unwrap_or_else(|why| panic!("/fleet/hosts after /fleet/sessions went 503: {why}"));
    took
}

/// `Ok` if `path` answers 503 `fleet-unavailable` naming etcd; the status otherwise.
async fn assert_unavailable(reader: &Host, path: &str) -> Result<(), String> {
    let (status, problem) = reader.get(path).await;
    if status != 503 {
        return Err(format!("{path}: {status}"));
    }
    assert_eq!(problem["type"], UNAVAILABLE, "{problem}");
    assert!(
        (problem["detail"].as_str()).is_some_and(|d| d.contains("etcd")),
        "says why: {problem}"
    );
    Ok(())
}

/// Poll `reader` until it serves exactly the fleet of `members`: how long since `since`.
async fn until_whole(reader: &Host, members: &[&Host], since: Instant) -> Duration {
    let expected = Picture::expected(members);
    let what = format!("{}'s fleet is whole", reader.id);
    let ((), took) = poll(&what, since, DEADLINE, async || {
        match reader.fleet().await {
            Ok(picture) if picture == expected => Ok(()),
            other => Err(format!("{other:?}, expected {expected:?}")),
        }
    })
    .await;
    took
}

/// Each host's lease as etcd's keys hold it, checked: every key is a fleet key, each host key
/// hangs off a lease and each session key off its host's, and the session keys are exactly
/// each host's sessions.
async fn leases(client: &mut Client, hosts: &[&Host]) -> BTreeMap<String, i64> {
    let all = GetOptions::new().with_all_keys();
    let response = client.get("", Some(all)).await.expect("read every key");
    let mut leases = BTreeMap::new();
    let mut sessions: BTreeMap<String, (i64, BTreeSet<String>)> = BTreeMap::new();
    for kv in response.kvs() {
        let key = String::from_utf8_lossy(kv.key());
        let path = key.strip_prefix(PREFIX).unwrap_or_else(|| panic!("{key}"));
        if let Some(host) = path.strip_prefix("/hosts/") {
            assert_ne!(kv.lease(), 0, "{key} hangs off a lease");
            assert!(leases.insert(host.to_owned(), kv.lease()).is_none());
        } else if let Some((host, session)) =
            (path.strip_prefix("/sessions/")).and_then(|p| p.split_once('/'))
        {
            let (lease, ids) = sessions.entry(host.to_owned()).or_default();
            *lease = kv.lease();
            ids.insert(session.to_owned());
        } else {
            panic!("a key no registry writes: {key}");
        }
    }
    let wanted: BTreeMap<String, BTreeSet<String>> = hosts
        .iter()
        .map(|h| (h.id.to_owned(), h.live_sessions()))
        .collect();
    let held: BTreeMap<String, BTreeSet<String>> = sessions
        .iter()
        .map(|(host, (lease, ids))| {
            assert_eq!(
                leases.get(host),
                Some(lease),
                "{host}'s sessions on its lease"
            );
            (host.clone(), ids.clone())
        })
        .collect();
    assert_eq!(held, wanted, "the session keys etcd holds");
    assert_eq!(
        leases.keys().collect::<BTreeSet<_>>(),
        wanted.keys().collect::<BTreeSet<_>>(),
        "one host key each"
    );
    leases
}

/// Cut `c` off `how`: `a` and `b` drop it within [`LEAVE_BOUND`] and hold each other only, its
/// own `/fleet/*` answer 503 within one TTL. When the cut was made.
async fn cut_off(net: &CutNetwork, how: Cut, rest: [&Host; 2], c: &Host) -> Instant {
    let cut_at = Instant::now();
    net.cut(how);
    let (left_a, left_b, dark) = tokio::join!(
        until_gone(rest[0], "c", cut_at),
        until_gone(rest[1], "c", cut_at),
        until_unavailable(c, cut_at)
    );
    println!(
        "measured ({how:?}): c left a in {left_a:?}, b in {left_b:?}; c's /fleet/* 503 in {dark:?}"
    );
    for left in [left_a, left_b] {
        assert!(left <= LEAVE_BOUND + POLL_SLACK, "c left after {left:?}");
    }
    assert!(dark <= TTL + POLL_SLACK, "c's /fleet/* 503 after {dark:?}");
    for reader in rest {
        until_whole(reader, &rest, cut_at).await;
    }
    cut_at
}

/// Keep the cut a TTL past the lapse of `c`'s lease (the scenario's length, not a
/// synchronisation), so its retries meet a dead network again and again; asked all along, its
/// `/sessions` still answers `local`, its fleet stays 503, `a` and `b` hold each other only.
async fn hold_the_cut(
    cut_at: Instant,
    rest: [&Host; 2],
    c: &Host,
    local: &BTreeMap<String, String>,
) {
    let rest_only = Picture::expected(&rest);
    while cut_at.elapsed() < LEAVE_BOUND + TTL {
        assert_eq!(
            &c.local().await,
            local,
            "c's /sessions untouched by the cut"
        );
        assert_unavailable(c, "/fleet/sessions")
            .await
            .expect("c's fleet stays 503 while cut");
        for reader in rest {
            let served = reader.fleet().await;
            assert_eq!(
                served.as_ref().ok(),
                Some(&rest_only),
                "{}: {served:?}",
                reader.id
            );
        }
        // Paces the asking only.
        tokio::time::sleep(POLL_PACE).await;
    }
}

/// Heal the cut: every view (`c`'s own included) whole again within one TTL.
async fn heal(net: &CutNetwork, how: Cut, all: &[&Host; 3]) {
    let healed_at = Instant::now();
    net.heal(how);
    let (back_a, back_b, back_c) = tokio::join!(
        until_whole(all[0], all, healed_at),
        until_whole(all[1], all, healed_at),
        until_whole(all[2], all, healed_at)
    );
    println!(
        "measured ({how:?}): healed, c whole again in a's view in {back_a:?}, b's {back_b:?}, its own {back_c:?}"
    );
    for back in [back_a, back_b, back_c] {
        assert!(back <= TTL + POLL_SLACK, "whole again after {back:?}");
    }
}

/// Cut `c` off `how`, check how each registry takes it, heal, check the fleet whole again.
async fn cut_off_and_healed(how: Cut) {
    let net = CutNetwork::build();
    let etcd = Etcd::start_also_on(IpAddr::V4(net.uplink_ip())).await;
    let (a, b, c) = (
        Host::beside("a", &etcd),
        Host::beside("b", &etcd),
        Host::behind(&net, &etcd),
    );
    let all = [&a, &b, &c];
    let since = Instant::now();
    for reader in all {
        until_whole(reader, &all, since).await;
    }
    let mut client = etcd.client().await;
    let old = leases(&mut client, &all).await["c"];
    let local = c.local().await;
    let live = |s: &BTreeMap<String, String>| s.values().all(|state| state == "live");
    assert!(live(&local), "c's sessions are live: {local:?}");
    assert_eq!(
        local.keys().cloned().collect::<BTreeSet<_>>(),
        c.live_sessions()
    );

    let cut_at = cut_off(&net, how, [&a, &b], &c).await;
    hold_the_cut(cut_at, [&a, &b], &c, &local).await;
    heal(&net, how, &all).await;
    let new = leases(&mut client, &all).await["c"];
    assert_ne!(new, old, "c rejoined on a new lease");
    let lapsed = client
        .lease_time_to_live(old, None)
        .await
        .expect("ask about a lease");
    assert!(lapsed.ttl() <= 0, "c's old lease lapsed");
    assert_eq!(
        c.local().await,
        local,
        "c's /sessions untouched by the heal"
    );
}

#[tokio::test]
#[ignore = "needs root, ip and etcd: network namespaces (iproute2), Debian etcd-server, --features fleet"]
async fn a_host_cut_off_by_a_link_down_leaves_within_the_ttl_and_healed_rejoins_once() {
    cut_off_and_healed(Cut::LinkDown).await;
}

#[tokio::test]
#[ignore = "needs root, ip and etcd: network namespaces (iproute2), Debian etcd-server, --features fleet"]
async fn a_host_cut_off_silently_leaves_within_the_ttl_and_healed_rejoins_once() {
    cut_off_and_healed(Cut::Blackhole).await;
}
