//! Fleet part 1: `GET /fleet/sessions` over 10 simulated hosts × 1,000 sessions, unfiltered
//! and `status=live`, answered from a registry's cache of the prefix.
//!
//! Invariant: the simulated hosts write what a registry would (one lease each, a host entry,
//! one session entry per session, values a registry's cache parses, with skills); the reader
//! is timed only once its answer holds every session.

use std::time::Duration;

use etcd_client::{Client, PutOptions, Txn, TxnOp};
use serde_json::{Value, json};

use crate::door_host::door_session;
use crate::etcd::Etcd;
use crate::figures::{Row, add, ms, percentile};
use crate::fleet::{Deadline, fleet_flags};
use crate::records::private_temp_dir;
use crate::server::{Client as HttpClient, Server};

const PREFIX: &str = "/bench/listing";
const HOSTS: usize = 10;
const SESSIONS_PER_HOST: usize = 1_000;
/// etcd's `--max-txn-ops` default.
const TXN_OPS: usize = 128;
/// One in ten sessions is not live, so `status=live` keeps 9,000 of 10,000.
const NOT_LIVE_EVERY: usize = 10;
const TIMED: usize = 50;

pub async fn fleet_listing(rows: &mut Vec<Row>, etcd: &Etcd) {
    let mut client = etcd.client().await;
    step!(write_simulated_hosts(&mut client));
    let running = private_temp_dir();
    let flags = fleet_flags(etcd, PREFIX, "reader", &[]);
    let server = Server::start_with(
        std::path::Path::new(env!("CARGO_BIN_EXE_murmur-registry")),
        running.path(),
        &flags,
    );
    let mut http = server.client().await;
    let deadline = Deadline::new("the reader holds every session", Duration::from_secs(60));
    while session_count(&mut http).await != Some(HOSTS * SESSIONS_PER_HOST) {
        deadline.tick().await;
    }
    let live = HOSTS * SESSIONS_PER_HOST - HOSTS * SESSIONS_PER_HOST / NOT_LIVE_EVERY;
    for (query, sessions) in [
        ("/fleet/sessions", HOSTS * SESSIONS_PER_HOST),
        ("/fleet/sessions?status=live", live),
    ] {
        step!(timed_listing(rows, &mut http, query, sessions));
    }
}

/// How many sessions `GET /fleet/sessions` answers, when it answers.
async fn session_count(http: &mut HttpClient) -> Option<usize> {
    let body = http.get("/fleet/sessions").await.ok()?;
    let body: Value = serde_json::from_slice(&body).ok()?;
    body["sessions"].as_array().map(Vec::len)
}

/// The ten hosts' keys, each under its own lease, in transactions of at most [`TXN_OPS`].
async fn write_simulated_hosts(client: &mut Client) {
    for host in 0..HOSTS {
        let host_id = format!("sim{host:02}");
        let lease = client.lease_grant(600, None).await.expect("a lease").id();
        let mut puts = vec![TxnOp::put(
            format!("{PREFIX}/hosts/{host_id}"),
            json!({"host_id": host_id, "version": "0.1.0",
                "started_at": "2026-12-01T00:00:00Z", "registry_url": null})
            .to_string(),
            Some(PutOptions::new().with_lease(lease)),
        )];
        for index in 0..SESSIONS_PER_HOST {
            let session_id = door_session(&host_id, index);
            puts.push(TxnOp::put(
                format!("{PREFIX}/sessions/{host_id}/{session_id}"),
                session_entry(&host_id, &session_id, index).to_string(),
                Some(PutOptions::new().with_lease(lease)),
            ));
        }
        for batch in puts.chunks(TXN_OPS) {
            client
                .txn(Txn::new().and_then(batch.to_vec()))
                .await
                .expect("a simulated host's transaction");
        }
    }
}

/// A session entry as a registry publishes it (checked to parse as one).
fn session_entry(host_id: &str, session_id: &str, index: usize) -> Value {
    let live = !index.is_multiple_of(NOT_LIVE_EVERY);
    let (state, reason, skills) = if live {
        let skills = json!([{"id": "summarize", "tags": ["text", "en"]},
            {"id": format!("plan-{}", index % 7), "tags": ["planning"]}]);
        ("live", Value::Null, skills)
    } else {
        (
            "unreachable",
            json!("the door refused the connection"),
            json!([]),
        )
    };
    let entry = json!({
        "host_id": host_id, "changed_at": "2026-12-01T00:00:00Z", "door_scope": "network",
        "skills": skills, "session_id": session_id, "url": format!("10.0.0.{}:{}", index % 250, 20_000 + index),
        "pid": 10_000 + index, "process_start": format!("{}", 5_000_000 + index),
        "capsule_name": "bench-capsule", "capsule_version": "1.0.0",
        "workdir": format!("/srv/bench/{session_id}"), "outlives_launcher": true,
        "started_at": format!("2026-12-01T{:02}:{:02}:{:02}Z", index / 3600 % 24, index / 60 % 60, index % 60),
        "liveness": {"state": state, "process": "alive", "reason": reason}
    });
    serde_json::from_value::<murmur_registry::test_support::fleet::SessionEntry>(entry.clone())
        .expect("shaped like a SessionEntry");
    entry
}

/// `GET query` [`TIMED`] times after a few untimed: p50 and p99 against 50 ms.
async fn timed_listing(rows: &mut Vec<Row>, http: &mut HttpClient, query: &str, sessions: usize) {
    for _ in 0..5 {
        http.get(query).await.expect("GET");
    }
    let mut took = Vec::new();
    let mut bytes = 0;
    for _ in 0..TIMED {
        let started = std::time::Instant::now();
        let body = http.get(query).await.expect("GET");
        took.push(started.elapsed());
        bytes = body.len();
    }
    let (_, body) = http.timed_get(query).await;
    assert_eq!(body["sessions"].as_array().map(Vec::len), Some(sessions));
    took.sort();
    let (p50, p99) = (percentile(&took, 0.5), percentile(&took, 0.99));
    let target = Duration::from_millis(50);
    add(
        rows,
        Row {
            scenario: format!(
                "GET {query}, {HOSTS} hosts x {SESSIONS_PER_HOST} ({sessions} kept, {:.1} MiB)",
                bytes as f64 / (1024.0 * 1024.0)
            ),
            measured: format!("p50 {} / p99 {}", ms(p50), ms(p99)),
            target: format!("p50 <= {}", ms(target)),
            baseline: "-".to_owned(),
            ratio: "-".to_owned(),
            met: p50 <= target,
        },
    );
}
