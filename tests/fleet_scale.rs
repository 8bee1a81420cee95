//! The fleet at CI scale, correctness only (the figures are the bench's `fleet-scale`): 20
//! simulated hosts × 200 sessions publishing through the registry's own `Publisher`
//! (`common::fleet_sim`), two reading registries (the real app fed by the real watcher), one
//! real etcd.
//!
//! What is held: each reader serves the whole fleet; a paged walk sees every session present
//! throughout exactly once while sessions come, change and go; 200 changes published one by one
//! reach every reader's `/fleet/events`, none lost; a host whose publisher is dropped without
//! leaving is gone from every reader, host and sessions, once its lease lapses; a cold read of
//! many pages, each within its deadline but all of them together far past it, finishes, and
//! the reader serves nothing of it before the whole. Needs `/usr/bin/etcd` and the `fleet`
//! feature.

#![cfg(feature = "fleet")]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::EventStream;
use common::etcd::Etcd;
use common::fleet_sim::{SimFleet, SimSettings, sim_host_id, sim_session_id};
use common::server::TestServer;
use murmur_registry::test_support::fleet::etcd::EtcdSettings;
use murmur_registry::test_support::fleet::keys::FleetKeys;
use murmur_registry::test_support::fleet::watcher::{self, FleetWatcher};
use murmur_registry::test_support::fleet::{FleetView, HostId};
use murmur_registry::test_support::start_fleet_watcher_paged;
use serde_json::Value;

const HOSTS: usize = 20;
const SESSIONS: usize = 200;
const PREFIX: &str = "/test/scale";
const TTL: Duration = Duration::from_secs(3);

/// A reading registry on host `reader<n>` following `etcd`.
async fn reader(etcd: &Etcd, n: usize) -> (TestServer, FleetWatcher) {
    let view = FleetView::new(format!("reader{n}").parse::<HostId>().expect("a host id"));
    #[allow(clippy::needless_update)]
    let settings = EtcdSettings {
        endpoints: vec![etcd.endpoint()],
        ..Default::default()
    };
    let watcher = watcher::start(settings, FleetKeys::new(PREFIX), TTL, view.clone());
    (TestServer::builder().fleet(view).start().await, watcher)
}

/// How long a wait for the fleet may take before the test fails.
const WAIT: Duration = Duration::from_secs(15);

/// How long the cold read of one-key pages may take: 4,020 round trips to etcd, about 15 s on
/// a loaded 2-core machine. The read it guards against (one deadline for the whole read) never
/// finishes, so a generous bound loses nothing.
const PAGED_READ_WAIT: Duration = Duration::from_secs(90);

/// Poll `done` until it holds, failing after `deadline` (the pause only paces the polling).
async fn wait_until_async(what: &str, deadline: Duration, mut done: impl AsyncFnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done().await {
        assert!(start.elapsed() < deadline, "gave up waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn count(body: &Value, what: &str) -> usize {
    body[what].as_array().map_or(0, Vec::len)
}

/// [`HOSTS`] simulated hosts of [`SESSIONS`] each publishing to `etcd`, loaded all at once.
async fn sim_fleet(etcd: &Etcd) -> SimFleet {
    SimFleet::start(SimSettings {
        endpoint: etcd.endpoint(),
        prefix: PREFIX.to_owned(),
        hosts: HOSTS,
        sessions: SESSIONS,
        ttl: TTL,
        pass: Duration::from_millis(500),
        load_concurrency: HOSTS,
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd (/usr/bin/etcd) and the fleet feature"]
async fn a_simulated_fleet_is_served_paged_followed_and_left() {
    let etcd = Etcd::start().await;
    let mut fleet = sim_fleet(&etcd).await;
    let readers = [reader(&etcd, 0).await, reader(&etcd, 1).await];
    for (server, _) in &readers {
        wait_until_async("a reader serves the whole fleet", WAIT, async || {
            let (status, body) = server.get_json("/fleet/sessions").await;
            status == 200 && count(&body, "sessions") == HOSTS * SESSIONS
        })
        .await;
    }
    let seen = walk_while_churning(&readers[0].0, &fleet).await;
    let mut each = std::collections::BTreeMap::<&str, usize>::new();
    for id in &seen {
        *each.entry(id).or_default() += 1;
    }
    for host in 0..HOSTS {
        for session in 0..SESSIONS {
            let id = sim_session_id(host, session);
            assert_eq!(each.get(id.as_str()), Some(&1), "{id}");
        }
    }
    assert!(each.values().all(|n| *n == 1));
    every_change_arrives(&readers, &fleet).await;

    let gone: HostId = fleet.kill(0);
    assert_eq!(gone.as_str(), sim_host_id(0));
    for (server, _) in &readers {
        wait_until_async("the killed host leaves", WAIT, async || {
            let (_, hosts) = server.get_json("/fleet/hosts").await;
            let (_, sessions) = server
                .get_json(&format!("/fleet/sessions?host={gone}"))
                .await;
            let listed = (hosts["hosts"].as_array().into_iter().flatten())
                .any(|h| h["host_id"] == gone.as_str());
            !listed && sessions["sessions"].as_array().is_some_and(Vec::is_empty)
        })
        .await;
        let (_, whole) = server.get_json("/fleet/sessions").await;
        assert!(count(&whole, "sessions") >= (HOSTS - 1) * SESSIONS);
    }
}

/// A reader starting cold on 20 × 200 entries read one key a range (4,020 ranges, each within
/// 300 ms, all of them together seconds): it gets the whole fleet, though the read outlasts one
/// page's deadline many times over (a whole-read deadline began it again for ever), and until
/// then it answers 503, never part of the fleet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd (/usr/bin/etcd) and the fleet feature"]
async fn a_cold_read_of_many_pages_outlasting_a_page_deadline_finishes_whole() {
    const PAGE_DEADLINE: Duration = Duration::from_millis(300);
    let etcd = Etcd::start().await;
    let _fleet = sim_fleet(&etcd).await;
    let view = FleetView::new("reader-paged".parse::<HostId>().expect("a host id"));
    #[allow(clippy::needless_update)]
    let settings = EtcdSettings {
        endpoints: vec![etcd.endpoint()],
        ..Default::default()
    };
    let started = std::time::Instant::now();
    let keys = FleetKeys::new(PREFIX);
    let _watcher = start_fleet_watcher_paged(settings, keys, TTL, view.clone(), 1, PAGE_DEADLINE);
    let server = TestServer::builder().fleet(view).start().await;
    let mut unavailable = 0;
    wait_until_async(
        "the paged reader serves the whole fleet",
        PAGED_READ_WAIT,
        async || {
            let (status, body) = server.get_json("/fleet/sessions").await;
            if status != 200 {
                assert_eq!(status, 503, "{body}");
                unavailable += 1;
                return false;
            }
            assert_eq!(
                count(&body, "sessions"),
                HOSTS * SESSIONS,
                "never half a read"
            );
            true
        },
    )
    .await;
    let (_, hosts) = server.get_json("/fleet/hosts").await;
    assert_eq!(count(&hosts, "hosts"), HOSTS);
    // The premise: the read took many page deadlines, so one deadline over it would have failed.
    assert!(
        started.elapsed() > PAGE_DEADLINE * 2 && unavailable > 0,
        "the read took {:?}: too quick to outlast its page deadline",
        started.elapsed()
    );
}

/// Every page of `/fleet/sessions?limit=333` on `server`, sessions coming, changing and going
/// between the pages; the session ids seen, in order.
async fn walk_while_churning(server: &TestServer, fleet: &SimFleet) -> Vec<String> {
    let (mut seen, mut cursor, mut page) = (Vec::new(), None::<String>, 0);
    loop {
        let path = match &cursor {
            Some(c) => format!("/fleet/sessions?limit=333&cursor={c}"),
            None => "/fleet/sessions?limit=333".to_owned(),
        };
        let (status, body) = server.get_json(&path).await;
        assert_eq!(status, 200, "{body}");
        let sessions = body["sessions"].as_array().into_iter().flatten();
        seen.extend(sessions.map(|s| s["session_id"].as_str().unwrap_or_default().to_owned()));
        let Some(next) = body["next_cursor"].as_str() else {
            return seen;
        };
        cursor = Some(next.to_owned());
        page += 1;
        for host in [0, HOSTS / 2, HOSTS - 1] {
            fleet.put(host, &sim_session_id(host, SESSIONS + page), "came", true);
            fleet.remove(host, &sim_session_id(host, SESSIONS + page - 1));
            fleet.put(host, &sim_session_id(host, page), "changed", true);
        }
    }
}

/// 200 changes, each published at once by its host, reach every reader's `/fleet/events`.
async fn every_change_arrives(readers: &[(TestServer, FleetWatcher)], fleet: &SimFleet) {
    let mut streams = Vec::new();
    for (server, _) in readers {
        let response = reqwest::Client::new()
            .get(format!("{}/fleet/events", server.base()))
            .bearer_auth(server.token())
            .send()
            .await
            .expect("a stream");
        let mut stream = EventStream::new(response, common::DEADLINE);
        stream.snapshot().await;
        streams.push(stream);
    }
    let marks: BTreeSet<String> = (0..200).map(|n| format!("mark-{n}")).collect();
    for (n, mark) in marks.iter().enumerate() {
        fleet.put(n % HOSTS, &sim_session_id(n % HOSTS, n / HOSTS), mark, true);
    }
    for stream in &mut streams {
        let mut pending = marks.clone();
        while !pending.is_empty() {
            let event = stream.expect_event().await;
            let carried: Vec<&str> = match event.name.as_str() {
                "snapshot" => (event.data["sessions"].as_array().into_iter().flatten())
                    .filter_map(|s| s["changed_at"].as_str())
                    .collect(),
                _ => (event.data["session"]["changed_at"].as_str().into_iter()).collect(),
            };
            for mark in carried {
                pending.remove(mark);
            }
        }
    }
}
