//! Scenario 4: a hundred clients polling fifty live records at once, against each client
//! verifying them one at a time for itself; the doors count how many probes of one session
//! overlap.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use murmur_registry::running::{self, DoorProbe, RunningRecord};
use serde_json::Value;

use crate::door_host::Doors;
use crate::figures::{Row, add, ms, percentile, ratio};
use crate::server::{Server, count_live};

/// Concurrent pollers and the records they poll.
const POLLERS: usize = 100;
const POLLED: usize = 50;
const POLLS_EACH: usize = 20;
/// The polled doors take a moment to answer, as a busy capsule's would, so that probes of one
/// session would overlap if nothing kept them apart.
const POLLED_DELAY: Duration = Duration::from_millis(5);

pub async fn pollers_at_once(rows: &mut Vec<Row>) {
    let mut doors = Doors::start(POLLED, POLLED_DELAY, "0003");
    let dir = doors.running_dir(POLLED);
    let server = Server::start(dir.path());
    let server_cpu = server.cpu();
    let (mut latencies, errors) = poll_together(&server, "/sessions").await;
    let server_cpu = (server.cpu() - server_cpu) / (POLLERS * POLLS_EACH) as u32;
    let (most_open, requests) = doors.stats();
    latencies.sort();
    let p99 = percentile(&latencies, 0.99);

    let dir_path = dir.path().to_path_buf();
    let baseline = sequential_pollers(&dir_path).await;
    let (baseline_open, _) = doors.stats();
    let baseline_p99 = percentile(&baseline, 0.99);
    add(
        rows,
        Row {
            scenario: format!(
                "{POLLERS} clients polling {POLLED} live records (doors take 5 ms), p99 ({} req)",
                latencies.len()
            ),
            measured: format!("{} (p50 {})", ms(p99), ms(percentile(&latencies, 0.5))),
            target: "<= 250 ms".to_owned(),
            baseline: ms(baseline_p99),
            ratio: ratio(baseline_p99, p99),
            met: p99 <= Duration::from_millis(250) && errors == 0 && most_open <= 1,
        },
    );
    add(
        rows,
        Row {
            scenario: "  most probes of one session in flight at once; errors".to_owned(),
            measured: format!(
                "{most_open}; {errors} errors ({requests} probes, {:.2} ms CPU/req)",
                server_cpu.as_secs_f64() * 1e3
            ),
            target: "1; 0 errors".to_owned(),
            baseline: format!("{baseline_open}"),
            ratio: "-".to_owned(),
            met: most_open <= 1 && errors == 0,
        },
    );
}

/// `POLLERS` clients, each on its own connection, each polling `path` `POLLS_EACH` times.
async fn poll_together(server: &Server, path: &str) -> (Vec<Duration>, usize) {
    let mut tasks = tokio::task::JoinSet::new();
    let mut clients = Vec::new();
    for _ in 0..POLLERS {
        clients.push(server.client().await);
    }
    let start = Arc::new(tokio::sync::Barrier::new(POLLERS));
    for mut client in clients {
        let (path, start) = (path.to_owned(), start.clone());
        tasks.spawn(async move {
            start.wait().await;
            let mut latencies = Vec::new();
            let mut errors = 0;
            for _ in 0..POLLS_EACH {
                let began = Instant::now();
                match client.get(&path).await {
                    Ok(body) => {
                        let body: Value = serde_json::from_slice(&body).unwrap_or_default();
                        if count_live(&body) == POLLED {
                            latencies.push(began.elapsed());
                        } else {
                            errors += 1;
                        }
                    }
                    Err(_) => errors += 1,
                }
            }
            (latencies, errors)
        });
    }
    let mut latencies = Vec::new();
    let mut errors = 0;
    while let Some(joined) = tasks.join_next().await {
        let (mut l, e) = joined.expect("poller");
        latencies.append(&mut l);
        errors += e;
    }
    (latencies, errors)
}

/// The same polling done upstream's way: each client verifies the records one at a time, in
/// this process, sharing nothing with the others. Fewer polls each: it is slow.
async fn sequential_pollers(dir: &Path) -> Vec<Duration> {
    let mut tasks = tokio::task::JoinSet::new();
    let start = Arc::new(tokio::sync::Barrier::new(POLLERS));
    for _ in 0..POLLERS {
        let (dir, start): (PathBuf, _) = (dir.to_path_buf(), start.clone());
        tasks.spawn(async move {
            start.wait().await;
            let mut latencies = Vec::new();
            for _ in 0..3 {
                let began = Instant::now();
                let dir = dir.clone();
                let records: Vec<RunningRecord> =
                    tokio::task::spawn_blocking(move || running::list(&dir).expect("scan"))
                        .await
                        .expect("scan");
                let door = DoorProbe::new();
                for record in &records {
                    running::verify(record, &door).await;
                }
                latencies.push(began.elapsed());
            }
            latencies
        });
    }
    let mut latencies = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        latencies.append(&mut joined.expect("poller"));
    }
    latencies.sort();
    latencies
}
