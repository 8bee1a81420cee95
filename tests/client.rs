//! The typed client (`murmur_registry::client`) against the real server: every operation
//! answers its wire type, every problem it can meet arrives whole, the event stream carries on
//! across a restart of the registry with a fresh snapshot, no request goes to a proxy the
//! environment names, the `find_peers` example finds a peer by skill, and (feature `fleet`,
//! a real etcd) the fleet's operations and stream read two real registries' fleet.
//!
//! These are tests of behaviour: the contract itself (field names, statuses) is checked with
//! raw JSON and raw sockets elsewhere (`http_api.rs`, `openapi.rs`), never against these types.

mod common;

use std::net::TcpListener;
use std::process::Command;

use common::binary::{Home, User, registry, run};
use common::server::TestServer;
use common::*;
use futures_util::StreamExt;
use murmur_registry::client::{Client, Error, Event};
use murmur_registry::registry::SignalKind;
use murmur_registry::wire::{EventsQuery, ListQuery, Outcome, ProbeQuery, SessionState, StopQuery};
use rustix::process::Signal;

/// A live session: a sleeping process whose door serves an A2A card with skills.
struct Live {
    _process: TestProcess,
    _door: DoorServer,
    id: String,
}

fn live_in(dir: &std::path::Path) -> Live {
    let process = TestProcess::sleeping();
    let record = process.record();
    let door = DoorServer::start(DoorMode::A2aCard(record.session_id()));
    let record = record.url(door.url());
    record.write_in(dir);
    Live {
        _process: process,
        _door: door,
        id: record.session_id(),
    }
}

fn problem(error: Error) -> (u16, String) {
    let problem = error
        .problem()
        .unwrap_or_else(|| panic!("a problem: {error}"));
    (problem.status, problem.slug().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_answers_its_wire_type() {
    let server = TestServer::start().await;
    let live = live_in(server.dir());
    let gone = ExitedChild::spawn().record();
    gone.write_in(server.dir());
    let client = Client::new(server.base(), server.token()).unwrap();

    client.healthz().await.unwrap();
    let all = client.sessions(&ListQuery::default()).await.unwrap();
    assert_eq!(all.sessions.len(), 2, "{all:?}");
    assert_eq!(all.next_cursor, None, "no page asked for");
    let state_of = |id: &str| {
        let session = all.sessions.iter().find(|s| s.session_id == id).unwrap();
        session.liveness.state
    };
    assert_eq!(state_of(&live.id), Some(SessionState::Live));
    assert_eq!(state_of(&gone.session_id()), Some(SessionState::Gone));

    let page = ListQuery {
        probe: Some(false),
        limit: Some(1),
        ..ListQuery::default()
    };
    let first = client.sessions(&page).await.unwrap();
    assert_eq!(first.sessions.len(), 1);
    let Some(Some(cursor)) = first.next_cursor else {
        panic!("a first page of two has a next cursor: {first:?}");
    };
    let last = ListQuery {
        cursor: Some(cursor),
        ..page
    };
    let second = client.sessions(&last).await.unwrap();
    assert_eq!(second.sessions.len(), 1);
    assert_eq!(second.next_cursor, Some(None), "the last page says so");
    assert_ne!(first.sessions[0].session_id, second.sessions[0].session_id);

    let skilled = ListQuery {
        skill: Some("summarize".into()),
        include: Some("card,resources".into()),
        ..ListQuery::default()
    };
    let skilled = client.sessions(&skilled).await.unwrap();
    assert_eq!(skilled.sessions.len(), 1);
    let card = skilled.sessions[0].card.clone().flatten().expect("a card");
    assert_eq!(card.json()["name"], "test-capsule");
    assert!(matches!(skilled.sessions[0].resources, Some(Some(_))));

    let one = client.session(&live.id, &ProbeQuery::default()).await;
    assert_eq!(one.unwrap().liveness.state, Some(SessionState::Live));
    let report = client.liveness(&live.id).await.unwrap();
    assert_eq!(report.state, SessionState::Live);
    let card = client.card(&live.id).await.unwrap();
    assert_eq!(card.json()["skills"][0]["id"], "summarize");

    let pruned = client.prune(&gone.session_id()).await.unwrap();
    assert!(pruned.pruned);
    let none_left = client.prune_all().await.unwrap();
    assert!(none_left.pruned.is_empty(), "{none_left:?}");

    let other = TestProcess::sleeping();
    let record = other.record();
    record.write_in(server.dir());
    let signalled = client.signal(&record.session_id(), SignalKind::Term).await;
    assert_eq!(signalled.unwrap().outcome, Outcome::Sent);
    let stop = StopQuery {
        timeout: Some(5),
        door: Some(false),
    };
    let stopped = client.stop(&live.id, &stop).await.unwrap();
    assert_eq!(stopped.outcome, Outcome::Stopped);
    assert_eq!(stopped.signal_sent.as_deref(), Some("SIGTERM"));

    let metrics = client.metrics().await.unwrap();
    assert!(metrics.contains("# TYPE"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_carries_its_problem() {
    let server = TestServer::start().await;
    let live = live_in(server.dir());
    let gone = ExitedChild::spawn().record();
    gone.write_in(server.dir());
    let client = Client::new(server.base(), server.token()).unwrap();
    let all = ListQuery::default();

    let stranger = Client::new(server.base(), "0".repeat(64)).unwrap();
    let refused = stranger.sessions(&all).await.unwrap_err();
    assert_eq!(problem(refused), (401, "unauthorized".into()));
    let unknown = client.session(&session_id(), &ProbeQuery::default()).await;
    assert_eq!(problem(unknown.unwrap_err()), (404, "not-found".into()));
    let bad_id = client.liveness("not an id!").await.unwrap_err();
    assert_eq!(problem(bad_id), (400, "invalid-session-id".into()));
    let bad_status = ListQuery {
        status: Some("asleep".into()),
        ..ListQuery::default()
    };
    let bad_status = client.sessions(&bad_status).await.unwrap_err();
    assert_eq!(problem(bad_status), (400, "invalid-query".into()));
    let bad_cursor = ListQuery {
        limit: Some(1),
        cursor: Some("not-a-cursor".into()),
        ..ListQuery::default()
    };
    let bad_cursor = client.sessions(&bad_cursor).await.unwrap_err();
    assert_eq!(problem(bad_cursor), (400, "invalid-cursor".into()));
    let no_card = client.card(&gone.session_id()).await.unwrap_err();
    assert_eq!(problem(no_card), (409, "session-not-live".into()));
    let alive = client.prune(&live.id).await.unwrap_err();
    let (status, slug) = problem(alive);
    assert_eq!((status, slug.as_str()), (409, "session-not-gone"));
    let too_late = client.signal(&gone.session_id(), SignalKind::Kill).await;
    assert_eq!(problem(too_late.unwrap_err()), (410, "already-gone".into()));
    let no_fleet = client.fleet_hosts().await.unwrap_err();
    assert_eq!(problem(no_fleet), (404, "fleet-not-configured".into()));
    std::fs::write(server.dir().join("ses_notarecord.json"), "not JSON").unwrap();
    let junk = client
        .session("ses_notarecord", &ProbeQuery::default())
        .await;
    assert_eq!(problem(junk.unwrap_err()), (404, "not-a-record".into()));
    // The running directory moved away, and back (the server's own temporary directory).
    let away = server.dir().with_extension("away");
    std::fs::rename(server.dir(), &away).unwrap();
    let missing = client.sessions(&all).await.unwrap_err();
    std::fs::rename(&away, server.dir()).unwrap();
    assert_eq!(problem(missing), (503, "running-dir-unavailable".into()));

    let nobody = Client::new("http://127.0.0.1:1", "t").unwrap();
    let error = nobody.healthz().await.unwrap_err();
    assert!(error.to_string().contains("no registry answers"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_carry_on_across_a_restart_with_a_fresh_snapshot() {
    let home = Home::new();
    let first = ServedBinary::start(home.path(), User::Me);
    let client = Client::discover_in(&home.registry_dir()).await.unwrap();
    assert_eq!(client.url(), format!("http://{}", first.addr));
    let mut events = Box::pin(client.events(&EventsQuery::default()));
    let snapshot = |event: Option<Result<Event, Error>>| match event {
        Some(Ok(Event::Snapshot(list))) => Some(list),
        _ => None,
    };
    let before = tokio::time::timeout(DEADLINE, events.next()).await.unwrap();
    assert_eq!(
        snapshot(before).expect("a first snapshot").sessions.len(),
        0
    );

    let (exit, stderr) = first.stop_with(Signal::TERM);
    assert!(exit.success(), "{stderr}");
    // Written while no registry runs: only a fresh snapshot can show it.
    let capsule = TestProcess::sleeping();
    let record = capsule.record();
    home.write(&record);
    let second = ServedBinary::start(home.path(), User::Me);
    let after = tokio::time::timeout(DEADLINE, async {
        loop {
            if let Some(list) = snapshot(events.next().await) {
                return list;
            }
        }
    })
    .await
    .expect("a snapshot from the restarted registry");
    assert_eq!(after.sessions.len(), 1, "{after:?}");
    assert_eq!(after.sessions[0].session_id, record.session_id());
    drop(second);
}

/// `health` and `status` (both on the typed client) with every proxy variable naming a
/// listener: it sees no connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_request_goes_through_a_proxy() {
    let home = Home::new();
    let server = ServedBinary::start(home.path(), User::Me);
    let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
    proxy.set_nonblocking(true).unwrap();
    let proxy_url = format!("http://{}", proxy.local_addr().unwrap());
    let with_proxy = |args: &[&str]| {
        let mut cmd = registry(home.path(), User::Me);
        cmd.args(args);
        for name in ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"] {
            cmd.env(name, &proxy_url);
        }
        cmd.env_remove("NO_PROXY").env_remove("no_proxy");
        run(cmd)
    };
    let bind = server.addr.to_string();
    with_proxy(&["health", "--bind", &bind]).assert_success();
    let status = with_proxy(&["status"]);
    status.assert_success();
    assert!(status.stdout.contains("sessions: 0"), "{status:#?}");
    let met = proxy.accept();
    assert!(
        matches!(&met, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the proxy saw a connection: {met:?}"
    );
}

/// The example a capsule author copies: built by `cargo test` (as every example is) and run
/// against a real registry with a peer offering `summarize`.
#[test]
fn find_peers_prints_each_live_peer_offering_the_skill() {
    let example = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("examples/find_peers");
    assert!(
        example.exists(),
        "{} is built by `cargo test` (or `cargo build --examples`)",
        example.display()
    );
    let home = Home::new();
    let server = ServedBinary::start(home.path(), User::Me);
    let peer = live_in(&home.running_dir());
    let _other = live_in(&home.running_dir());
    let mut cmd = Command::new(&example);
    cmd.env("HOME", home.path()).args(["--skill", "summarize"]);
    let done = run(cmd);
    done.assert_success();
    let lines = done.stdout_lines();
    assert_eq!(lines.len(), 2, "{done:#?}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("{} http://127.0.0.1:", peer.id))
                && l.ends_with(" test-capsule")),
        "{done:#?}"
    );
    let mut none = Command::new(&example);
    none.env("HOME", home.path()).args(["--skill", "juggling"]);
    let done = run(none);
    done.assert_success();
    assert_eq!(done.stdout, "", "{done:#?}");
    drop(server);
}

/// The fleet's operations against two real registries (the binary) publishing to a real etcd:
/// every body read as its wire type (the host entries with their load, the sessions with their
/// skills and door scope), paging to the end, the filters and their refusals, the event
/// stream following a session that starts and a host that leaves, and etcd gone as a problem.
#[cfg(feature = "fleet")]
mod fleet {
    use std::time::Instant;

    use futures_util::StreamExt;
    use murmur_registry::client::{Client, FleetEvent};
    use murmur_registry::wire::{DoorScope, FleetQuery, FleetSessions, SessionState};
    use rustix::process::Signal;

    use super::common::binary::Home;
    use super::common::etcd::Etcd;
    use super::common::fleet_members::{poll, serve_member};
    use super::common::{DEADLINE, ServedBinary, TestProcess};
    use super::{live_in, problem};

    /// Every session `client`'s fleet holds, walked a page of one at a time.
    async fn walked(client: &Client) -> Vec<String> {
        let mut query = FleetQuery {
            limit: Some(1),
            ..FleetQuery::default()
        };
        let mut seen = Vec::new();
        loop {
            let page = client.fleet_sessions(&query).await.unwrap();
            seen.extend(page.sessions.iter().map(|s| s.session.session_id.clone()));
            match page.next_cursor {
                Some(Some(cursor)) => query.cursor = Some(cursor),
                Some(None) => return seen,
                None => panic!("a page without next_cursor: {page:?}"),
            }
        }
    }

    /// Whether `fleet` holds both hosts and both their live sessions.
    fn whole(fleet: &FleetSessions) -> bool {
        fleet.hosts.len() == 2
            && fleet.sessions.len() == 2
            && (fleet.sessions.iter()).all(|s| s.session.liveness.state == Some(SessionState::Live))
    }

    /// The fleet once `client` sees it whole.
    async fn until_whole(client: &Client) -> FleetSessions {
        let (fleet, _) = poll(
            "both hosts and both live sessions",
            Instant::now(),
            DEADLINE,
            async || {
                let fleet = client.fleet_sessions(&FleetQuery::default()).await;
                let fleet = fleet.map_err(|e| e.to_string())?;
                if whole(&fleet) {
                    Ok(fleet)
                } else {
                    Err(format!("{fleet:?}"))
                }
            },
        )
        .await;
        fleet
    }

    /// `fleet`, as registry a serves it, holds each host's load and b's session as b wrote it.
    fn assert_read_whole(fleet: &FleetSessions, b_session: &str) {
        assert_eq!(fleet.host_id, "a");
        assert_eq!(fleet.next_cursor, None, "no page asked for");
        for host in &fleet.hosts {
            let load = host.load.as_ref().expect("this machine's load is read");
            assert!(load.cpus >= 1 && load.memory_total_bytes > 0, "{host:?}");
        }
        let of_b = (fleet.sessions.iter())
            .find(|s| s.host_id == "b")
            .expect("b's session");
        assert_eq!(of_b.session.session_id, b_session);
        assert_eq!(of_b.door_scope, Some(DoorScope::Host), "a loopback door");
        assert!(of_b.skills.iter().any(|s| s.id == "summarize"), "{of_b:?}");
    }

    /// Paging walks `sessions` once each; the filters and `/fleet/hosts` answer; a bad host
    /// id and a cursor without a limit are refused as invalid queries.
    async fn assert_queries(client: &Client, sessions: [&str; 2]) {
        let mut pages = walked(client).await;
        pages.sort();
        let mut ids = sessions.map(str::to_owned).to_vec();
        ids.sort();
        assert_eq!(pages, ids, "each session on exactly one page");
        let only_b = FleetQuery {
            host: Some("b".into()),
            skill: Some("summarize".into()),
            ..FleetQuery::default()
        };
        let only_b = client.fleet_sessions(&only_b).await.unwrap();
        assert_eq!(only_b.sessions.len(), 1);
        assert_eq!(only_b.hosts.len(), 1, "{only_b:?}");
        let hosts = client.fleet_hosts().await.unwrap();
        let mut host_ids: Vec<_> = hosts.hosts.iter().map(|h| h.host_id.as_str()).collect();
        host_ids.sort();
        assert_eq!(host_ids, ["a", "b"]);

        let bad_host = FleetQuery {
            host: Some("not a host!".into()),
            ..FleetQuery::default()
        };
        let bad_host = client.fleet_sessions(&bad_host).await.unwrap_err();
        assert_eq!(problem(bad_host), (400, "invalid-query".into()));
        let loose_cursor = FleetQuery {
            cursor: Some("x".into()),
            ..FleetQuery::default()
        };
        let loose_cursor = client.fleet_sessions(&loose_cursor).await.unwrap_err();
        assert_eq!(problem(loose_cursor), (400, "invalid-query".into()));
    }

    /// The next event `pick` takes from `events`, within the deadline; `what` names it.
    async fn next_of<T>(
        events: &mut (
                 impl futures_util::Stream<Item = Result<FleetEvent, murmur_registry::client::Error>>
                 + Unpin
             ),
        what: &str,
        mut pick: impl FnMut(FleetEvent) -> Option<T>,
    ) -> T {
        let found = tokio::time::timeout(DEADLINE, async {
            loop {
                match events.next().await {
                    Some(Ok(event)) => {
                        if let Some(found) = pick(event) {
                            return found;
                        }
                    }
                    other => panic!("the stream broke: {other:?}"),
                }
            }
        });
        found
            .await
            .unwrap_or_else(|_| panic!("{what} within the deadline"))
    }

    /// The event stream starts whole, then follows a session started on b, then b leaving:
    /// its sessions go, then the host.
    async fn follow_b_until_it_leaves(
        client: &Client,
        home_b: &Home,
        b: ServedBinary,
        b_session: &str,
    ) {
        let mut events = Box::pin(client.fleet_events());
        let first = tokio::time::timeout(DEADLINE, events.next()).await.unwrap();
        let Some(Ok(FleetEvent::Snapshot(snapshot))) = first else {
            panic!("a snapshot first: {first:?}");
        };
        assert!(whole(&snapshot), "{snapshot:?}");
        let later = TestProcess::sleeping();
        let later = (later.record(), later);
        home_b.write(&later.0);
        let added = next_of(&mut events, "b's new session", |event| match event {
            FleetEvent::SessionAdded(added) => Some(added),
            _ => None,
        });
        let added = added.await;
        assert_eq!(added.session.session.session_id, later.0.session_id());
        assert_eq!(added.host_id, "b");
        let (exit, stderr) = b.stop_with(Signal::TERM);
        assert!(exit.success(), "{stderr}");
        let mut removed = Vec::new();
        let left = next_of(&mut events, "b leaving", |event| match event {
            FleetEvent::SessionRemoved(gone) => {
                removed.push(gone.session_id);
                None
            }
            FleetEvent::HostLeft(host) => Some(host.host_id),
            _ => None,
        });
        assert_eq!(left.await, "b");
        assert!(removed.contains(&b_session.to_owned()), "{removed:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
    async fn the_fleet_is_read_as_its_wire_types_and_followed() {
        let mut etcd = Etcd::start().await;
        let (home_a, home_b) = (Home::new(), Home::new());
        let peer_a = live_in(&home_a.running_dir());
        let peer_b = live_in(&home_b.running_dir());
        let bind = "127.0.0.1:0";
        let _a = ServedBinary::spawn(serve_member(&home_a, "a", &etcd.endpoint(), bind));
        let b = ServedBinary::spawn(serve_member(&home_b, "b", &etcd.endpoint(), bind));
        let client = Client::discover_in(&home_a.registry_dir()).await.unwrap();

        assert_read_whole(&until_whole(&client).await, &peer_b.id);
        assert_queries(&client, [peer_a.id.as_str(), &peer_b.id]).await;
        follow_b_until_it_leaves(&client, &home_b, b, &peer_b.id).await;

        // etcd gone: the fleet is not served stale, and the client says why.
        etcd.kill();
        let since = Instant::now();
        let (unavailable, _) =
            poll(
                "the fleet is unavailable",
                since,
                DEADLINE,
                async || match client.fleet_hosts().await {
                    Err(error) if error.problem().is_some() => Ok(problem(error)),
                    other => Err(format!("{other:?}")),
                },
            )
            .await;
        assert_eq!(unavailable, (503, "fleet-unavailable".into()));
    }
}
