//! Paging of `GET /sessions` and `GET /fleet/sessions` (`limit`, `cursor`, `next_cursor`),
//! against the real app: record files in a private running directory, real doors, and for the
//! fleet a real etcd followed by the real watcher.
//!
//! What is held: every session present for a whole walk appears exactly once while others come
//! and go between its pages; the last page says `next_cursor: null` and an answer without
//! `limit` has none; a `limit` outside 1–10,000 and a cursor without a limit are 400
//! `invalid-query`, a cursor not handed out is 400 `invalid-cursor`; a `/sessions` page probes
//! only its own sessions' doors (a door that never answers, off the page, is never asked); a
//! fleet cursor whose walk began at a revision etcd has compacted away is 410
//! `cursor-expired`. The etcd tests need `/usr/bin/etcd` and the `fleet` feature.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::server::TestServer;
use common::{DoorMode, DoorServer, RecordJson, session_id};
use serde_json::Value;

/// Every page of `path` (which has its `?`) at `limit` a page, calling `between` after each
/// page but the last; the session ids of each page, in order.
async fn walk(
    server: &TestServer,
    path: &str,
    limit: usize,
    mut between: impl AsyncFnMut(usize),
) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let query = match &cursor {
            Some(cursor) => format!("{path}&limit={limit}&cursor={cursor}"),
            None => format!("{path}&limit={limit}"),
        };
        let (status, body) = server.get_json(&query).await;
        assert_eq!(status, 200, "{query}: {body}");
        let sessions = body["sessions"].as_array().expect("sessions");
        assert!(sessions.len() <= limit);
        pages.push(
            (sessions.iter())
                .map(|s| s["session_id"].as_str().expect("an id").to_owned())
                .collect(),
        );
        match &body["next_cursor"] {
            Value::Null => return pages,
            Value::String(next) => cursor = Some(next.clone()),
            other => panic!("next_cursor {other}"),
        }
        between(pages.len()).await;
    }
}

/// Each id of `stable` once in `pages`, and no id twice.
fn each_once(pages: &[Vec<String>], stable: &BTreeSet<String>) {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for id in pages.iter().flatten() {
        *seen.entry(id).or_default() += 1;
    }
    for id in stable {
        assert_eq!(seen.get(id.as_str()), Some(&1), "{id} in {pages:?}");
    }
    assert!(seen.values().all(|n| *n == 1), "{seen:?}");
}

/// A door-less record of the test process (live on layers 1–2 alone), started at `minute`.
fn record_at(minute: u32) -> RecordJson {
    RecordJson::new(&session_id())
        .no_door()
        .set("started_at", format!("2026-12-01T10:{minute:02}:00Z"))
}

#[tokio::test]
async fn a_walk_of_sessions_sees_each_one_present_throughout_exactly_once() {
    let server = TestServer::start().await;
    let stable: Vec<RecordJson> = (0..23).map(|n| record_at(n % 7)).collect();
    for record in &stable {
        record.write_in(server.dir());
    }
    let stable_ids: BTreeSet<String> = stable.iter().map(RecordJson::session_id).collect();
    let dir = server.dir().to_owned();
    let mut comers: Vec<RecordJson> = Vec::new();
    let pages = walk(&server, "/sessions?probe=true", 4, async |page| {
        // One newer and one older session come; the one that came a page ago goes.
        if let Some(old) = comers.pop() {
            std::fs::remove_file(dir.join(old.file_name())).expect("remove a record");
        }
        for minute in [59, (page % 7) as u32] {
            let record = record_at(minute);
            record.write_in(&dir);
            comers.push(record);
        }
    })
    .await;
    each_once(&pages, &stable_ids);
    let whole = server.get_json("/sessions").await.1;
    assert!(
        whole.get("next_cursor").is_none(),
        "no limit, no next_cursor"
    );
    let ordered: Vec<(String, String)> = (whole["sessions"].as_array().expect("sessions").iter())
        .map(|s| (s["started_at"].to_string(), s["session_id"].to_string()))
        .collect();
    assert!(ordered.windows(2).all(|w| w[0] > w[1]), "newest first");
}

#[tokio::test]
async fn limits_outside_the_bounds_and_cursors_not_handed_out_are_refused() {
    let server = TestServer::start().await;
    for path in ["/sessions", "/fleet/sessions"] {
        for query in ["limit=0", "limit=10001", "cursor=00"] {
            let (status, problem) = server.get_json(&format!("{path}?{query}")).await;
            assert_eq!(status, 400, "{path}?{query}");
            assert_eq!(problem["type"], "urn:murmur-registry:problem:invalid-query");
        }
    }
    for cursor in ["zz", "7b7d", "0", &"ab".repeat(3000)] {
        let (status, problem) = server
            .get_json(&format!("/sessions?limit=5&cursor={cursor}"))
            .await;
        assert_eq!(status, 400, "{cursor}");
        assert_eq!(
            problem["type"],
            "urn:murmur-registry:problem:invalid-cursor"
        );
    }
    let (status, body) = server.get_json("/sessions?limit=10000").await;
    assert_eq!((status, &body["next_cursor"]), (200, &Value::Null));
}

/// A page asks the doors of its own sessions only: a door that never answers, on a session
/// older than the page, is not asked, and the page answers without waiting on it.
#[tokio::test]
async fn a_page_probes_only_its_own_sessions_doors() {
    let server = TestServer::start().await;
    let silent = DoorServer::start(DoorMode::Silent);
    let hanging = record_at(1).url(silent.addr().to_string());
    hanging.write_in(server.dir());
    let newer_id = session_id();
    let answering = DoorServer::start(DoorMode::SpecCard(newer_id.clone()));
    let newer = RecordJson::new(&newer_id)
        .url(answering.addr().to_string())
        .set("started_at", "2026-12-01T10:30:00Z");
    newer.write_in(server.dir());
    record_at(20).write_in(server.dir());
    let (status, page) = server.get_json("/sessions?limit=2").await;
    assert_eq!(status, 200, "{page}");
    let ids: Vec<&str> = (page["sessions"].as_array().expect("sessions").iter())
        .map(|s| s["session_id"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(ids.first(), Some(&newer_id.as_str()));
    assert_eq!(page["sessions"][0]["liveness"]["state"], "live");
    assert!(
        !answering.requests().is_empty(),
        "the page's door was asked"
    );
    assert!(page["next_cursor"].is_string());
    assert!(
        silent.requests().is_empty(),
        "the door of a session off the page was asked"
    );
    // `status=live` fills its page past a session it turns away, still short of the third.
    let (_, live) = server.get_json("/sessions?limit=1&status=live").await;
    assert_eq!(live["sessions"][0]["session_id"], newer_id.as_str());
    assert!(silent.requests().is_empty());
}

#[cfg(feature = "fleet")]
mod with_etcd {
    use std::time::Duration;

    use etcd_client::Client;
    use murmur_registry::test_support::fleet::etcd::EtcdSettings;
    use murmur_registry::test_support::fleet::keys::FleetKeys;
    use murmur_registry::test_support::fleet::watcher::{self, FleetWatcher};
    use murmur_registry::test_support::fleet::{FleetView, HostId};
    use serde_json::json;

    use super::*;
    use common::etcd::Etcd;

    const TTL: Duration = Duration::from_secs(3);
    const PREFIX: &str = "/test/paging";

    /// A registry on host `a` whose fleet view follows `etcd`.
    async fn registry_on(etcd: &Etcd) -> (TestServer, FleetWatcher) {
        let view = FleetView::new("a".parse::<HostId>().expect("a host id"));
        #[allow(clippy::needless_update)]
        let settings = EtcdSettings {
            endpoints: vec![etcd.endpoint()],
            ..Default::default()
        };
        let watcher = watcher::start(settings, FleetKeys::new(PREFIX), TTL, view.clone());
        (TestServer::builder().fleet(view).start().await, watcher)
    }

    async fn put_session(client: &mut Client, host: &str, id: &str) -> i64 {
        let entry = json!({
            "host_id": host, "changed_at": "2026-12-01T00:00:00Z", "door_scope": "network",
            "skills": [], "session_id": id, "url": "10.0.0.2:4000", "pid": 7,
            "process_start": "1", "capsule_name": "c", "capsule_version": "1",
            "workdir": "/w", "outlives_launcher": false,
            "started_at": "2026-12-01T00:00:00Z",
            "liveness": {"state": "live", "process": "alive", "reason": null}
        });
        let host_id: HostId = host.parse().expect("a host id");
        let key = FleetKeys::new(PREFIX).session(&host_id, id);
        let put = client.put(key, entry.to_string(), None).await.expect("put");
        put.header().map_or(0, |h| h.revision())
    }

    async fn delete_session(client: &mut Client, host: &str, id: &str) {
        let host_id: HostId = host.parse().expect("a host id");
        let key = FleetKeys::new(PREFIX).session(&host_id, id);
        client.delete(key, None).await.expect("delete");
    }

    /// The fleet view has reached etcd's `revision`.
    async fn caught_up(server: &TestServer, revision: i64) {
        let start = std::time::Instant::now();
        loop {
            let (status, body) = server.get_json("/fleet/hosts").await;
            if status == 200 && body["revision"].as_i64() >= Some(revision) {
                return;
            }
            assert!(
                start.elapsed() < common::DEADLINE,
                "the view never caught up"
            );
            // Paces the polling only.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    #[ignore = "needs etcd (/usr/bin/etcd) and the fleet feature"]
    async fn a_fleet_walk_sees_each_session_present_throughout_exactly_once() {
        let etcd = Etcd::start().await;
        let mut client = etcd.client().await;
        let (server, _watcher) = registry_on(&etcd).await;
        let mut stable = BTreeSet::new();
        let mut revision = 0;
        for host in ["b", "c", "d"] {
            for n in 0..11 {
                let id = format!("ses_{n:02}");
                revision = put_session(&mut client, host, &id).await;
                stable.insert(format!("{host}/{id}"));
            }
        }
        caught_up(&server, revision).await;
        let mut comers: Vec<(&str, String)> = Vec::new();
        let mut pages = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let query = match &cursor {
                Some(cursor) => format!("/fleet/sessions?limit=5&cursor={cursor}"),
                None => "/fleet/sessions?limit=5".to_owned(),
            };
            let (status, body) = server.get_json(&query).await;
            assert_eq!(status, 200, "{body}");
            let page: Vec<String> = (body["sessions"].as_array().expect("sessions").iter())
                .map(|s| {
                    format!(
                        "{}/{}",
                        s["host_id"].as_str().unwrap_or(""),
                        s["session_id"].as_str().unwrap_or("")
                    )
                })
                .collect();
            let mut sorted = page.clone();
            sorted.sort();
            assert_eq!(page, sorted, "by host, then session");
            pages.push(page);
            let Some(next) = body["next_cursor"].as_str() else {
                assert_eq!(body["next_cursor"], Value::Null);
                break;
            };
            cursor = Some(next.to_owned());
            // Sessions come before, among and after the walk's place; the last comers go.
            if let Some((host, id)) = comers.pop() {
                delete_session(&mut client, host, &id).await;
            }
            for host in ["b", "c", "e"] {
                let id = format!("ses_{:02}x", pages.len());
                revision = put_session(&mut client, host, &id).await;
                comers.push((host, id));
            }
            caught_up(&server, revision).await;
        }
        each_once(&pages, &stable);
        let whole = server.get_json("/fleet/sessions").await.1;
        assert!(whole.get("next_cursor").is_none());
    }

    #[tokio::test]
    #[ignore = "needs etcd (/usr/bin/etcd) and the fleet feature"]
    async fn a_cursor_from_a_compacted_revision_is_410_and_a_malformed_one_400() {
        let etcd = Etcd::start().await;
        let mut client = etcd.client().await;
        let (server, _watcher) = registry_on(&etcd).await;
        let mut revision = 0;
        for n in 0..3 {
            revision = put_session(&mut client, "b", &format!("ses_{n}")).await;
        }
        caught_up(&server, revision).await;
        let (_, first) = server.get_json("/fleet/sessions?limit=1").await;
        let cursor = first["next_cursor"].as_str().expect("a cursor").to_owned();
        let (status, _) = server
            .get_json(&format!("/fleet/sessions?limit=1&cursor={cursor}"))
            .await;
        assert_eq!(status, 200, "etcd still holds the walk's revision");
        revision = put_session(&mut client, "b", "ses_later").await;
        caught_up(&server, revision).await;
        client.compact(revision, None).await.expect("compact");
        let (status, problem) = server
            .get_json(&format!("/fleet/sessions?limit=1&cursor={cursor}"))
            .await;
        assert_eq!(status, 410, "{problem}");
        assert_eq!(
            problem["type"],
            "urn:murmur-registry:problem:cursor-expired"
        );
        assert!(
            problem["detail"]
                .as_str()
                .unwrap_or("")
                .contains("start again")
        );
        record_at(1).write_in(server.dir());
        record_at(2).write_in(server.dir());
        let sessions_cursor = server.get_json("/sessions?limit=1").await.1["next_cursor"].clone();
        let foreign = sessions_cursor.as_str().expect("a sessions cursor");
        for cursor in ["zz", foreign] {
            let (status, problem) = server
                .get_json(&format!("/fleet/sessions?limit=1&cursor={cursor}"))
                .await;
            assert_eq!(status, 400, "{cursor}");
            assert_eq!(
                problem["type"],
                "urn:murmur-registry:problem:invalid-cursor"
            );
        }
    }
}
