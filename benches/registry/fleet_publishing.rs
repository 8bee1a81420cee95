//! Fleet part 2: what publishing costs etcd. A registry (`--events-interval 500ms`) that finds
//! 1,000 new live sessions at once, then passes with nothing changed, read off etcd's revision
//! (every write moves it by one, however many keys a transaction puts) and its count of lease
//! renewals (`etcd_debugging_lease_renewed_total` on `/metrics`).
//!
//! Invariant: the window with nothing changed opens only once etcd's revision has stood still
//! for several passes with all 1,000 sessions published live, so it counts steady passes only.

use std::path::Path;
use std::time::{Duration, Instant};

use etcd_client::{Client, GetOptions};
use murmur_registry::test_support::fleet::HOST_LOAD_REFRESH;
use serde_json::Value;

use crate::door_host::Doors;
use crate::etcd::Etcd;
use crate::figures::{Row, add};
use crate::fleet::{Deadline, fleet_flags};
use crate::records::private_temp_dir;
use crate::server::Server;

const PREFIX: &str = "/bench/publishing";
const SESSIONS: usize = 1_000;
const INTERVAL: Duration = Duration::from_millis(500);
/// etcd's `--max-txn-ops` default: 1,000 puts need at least this many transactions.
const FEWEST_TXNS: i64 = SESSIONS.div_ceil(128) as i64;
/// Passes in the window with nothing changed.
const STEADY_PASSES: u32 = 10;

pub async fn publishing_passes(rows: &mut Vec<Row>, etcd: &Etcd) {
    let doors = Doors::start(SESSIONS, Duration::ZERO, "f0b1");
    let staged = doors.running_dir(SESSIONS);
    let running = private_temp_dir();
    let flags = fleet_flags(etcd, PREFIX, "publisher", &["--events-interval", "500ms"]);
    let _server = Server::start_with(
        Path::new(env!("CARGO_BIN_EXE_murmur-registry")),
        running.path(),
        &flags,
    );
    let mut client = etcd.client().await;
    let deadline = Deadline::new("the publisher's host key", Duration::from_secs(30));
    while values_under(&mut client, &format!("{PREFIX}/hosts/"))
        .await
        .len()
        != 1
    {
        deadline.tick().await;
    }
    let before = steady_revision(&mut client).await;
    // The records arrive together, as a burst of launches would: renamed in, not written.
    for entry in std::fs::read_dir(staged.path()).expect("read the staged records") {
        let path = entry.expect("a staged record").path();
        let name = path.file_name().expect("a file name").to_owned();
        std::fs::rename(&path, running.path().join(name)).expect("move a record in");
    }
    let deadline = Deadline::new("1,000 sessions published live", Duration::from_secs(120));
    loop {
        let values = values_under(&mut client, &format!("{PREFIX}/sessions/")).await;
        if values.len() == SESSIONS && values.iter().all(|v| v["liveness"]["state"] == "live") {
            break;
        }
        deadline.tick().await;
    }
    let after = steady_revision(&mut client).await;
    let txns = after - before;
    add(
        rows,
        Row {
            scenario: format!("fleet: a pass with {SESSIONS} new sessions, transactions"),
            measured: format!("{txns} (revisions moved)"),
            target: format!("<= {FEWEST_TXNS} (128 ops/txn)"),
            baseline: "-".to_owned(),
            ratio: "-".to_owned(),
            met: txns <= FEWEST_TXNS,
        },
    );
    step!(steady_passes(rows, &mut client, etcd));
}

/// [`STEADY_PASSES`] passes with nothing changed: revisions moved (puts) and renewals.
async fn steady_passes(rows: &mut Vec<Row>, client: &mut Client, etcd: &Etcd) {
    let (first, renewed) = (revision(client).await, renewals(etcd).await);
    let window = INTERVAL * STEADY_PASSES;
    let opened = Instant::now();
    // A window of time is what is measured here, not something awaited.
    tokio::time::sleep(window).await;
    let (puts, keepalives) = (
        revision(client).await - first,
        renewals(etcd).await - renewed,
    );
    let elapsed = opened.elapsed();
    let passes = elapsed.as_secs_f64() / INTERVAL.as_secs_f64();
    let per_pass = keepalives as f64 / passes;
    // The host entry is written again with its load every HOST_LOAD_REFRESH, wherever that
    // falls: at most one such put in a window shorter than the refresh.
    let load_puts = elapsed.as_secs().div_ceil(HOST_LOAD_REFRESH.as_secs()) as i64;
    add(
        rows,
        Row {
            scenario: format!("fleet: passes with nothing changed ({SESSIONS} live), per pass"),
            measured: format!(
                "{puts} puts, {per_pass:.2} keepalives ({keepalives} in {passes:.1})"
            ),
            target: "0 puts (but the host load's, 1 per 30 s), 1 keepalive".to_owned(),
            baseline: "-".to_owned(),
            ratio: "-".to_owned(),
            met: puts <= load_puts && (0.8..=1.2).contains(&per_pass),
        },
    );
}

/// etcd's revision once it has not moved for four passes.
async fn steady_revision(client: &mut Client) -> i64 {
    let mut last = revision(client).await;
    let mut still_since = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(120);
    while still_since.elapsed() < INTERVAL * 4 {
        assert!(
            Instant::now() < deadline,
            "etcd's revision never stood still"
        );
        tokio::time::sleep(INTERVAL / 5).await;
        let now = revision(client).await;
        if now != last {
            (last, still_since) = (now, Instant::now());
        }
    }
    last
}

async fn revision(client: &mut Client) -> i64 {
    let response = client.get("/", None).await.expect("an etcd read");
    response.header().expect("a response header").revision()
}

/// The values under `prefix`, as JSON.
async fn values_under(client: &mut Client, prefix: &str) -> Vec<Value> {
    let Ok(response) = client
        .get(prefix, Some(GetOptions::new().with_prefix()))
        .await
    else {
        return Vec::new();
    };
    (response.kvs().iter())
        .filter_map(|kv| serde_json::from_slice(kv.value()).ok())
        .collect()
}

/// How many lease renewals etcd has served so far.
async fn renewals(etcd: &Etcd) -> u64 {
    let metrics = etcd.metrics().await;
    (metrics.lines())
        .find_map(|line| line.strip_prefix("etcd_debugging_lease_renewed_total "))
        .and_then(|n| n.trim().parse::<f64>().ok())
        .expect("etcd counts lease renewals") as u64
}
