//! Scenarios 1 and 2: a thousand live records, fully verified and with layers 1–2 only, against
//! upstream's one-at-a-time verification; then the server's memory once idle.

use std::path::Path;
use std::time::{Duration, Instant};

use murmur_registry::running::Liveness;

use crate::binaries::{Binaries, Binary, Sides};
use crate::door_host::Doors;
use crate::figures::{Row, add, baseline_cell, latency_row, median, ms, speed_up};
use crate::perf_counts::PerfCounts;
use crate::sequential::{sequential_layers_1_2, sequential_verify};
use crate::server::{Client, Server, count_live, states_of};

/// Live records with fast doors, for the full-verification and `probe=false` latencies.
const MANY: usize = 1_000;

pub async fn many_live_records(rows: &mut Vec<Row>, binaries: &Binaries) {
    let mut doors = Doors::start(MANY, Duration::ZERO, "0001");
    let dir = doors.running_dir(MANY);
    let server = Server::start(dir.path());
    let mut client = server.client().await;
    step!(full_verification(rows, &mut client, &mut doors, dir.path()));
    step!(layers_1_2_only(rows, &mut client, dir.path()));
    drop(client);
    step!(idle_memory(rows, &server));
    drop(server);
    if binaries.each().len() > 1 {
        step!(full_verification_by_binary(rows, binaries, dir.path()));
    }
}

/// The full listing's p50 against this build and the baseline, in balanced order, each on a
/// server of its own over the same records and doors; and the server's CPU time a listing
/// (its `utime + stime`, which a busy machine sways less than the wall clock).
async fn full_verification_by_binary(rows: &mut Vec<Row>, binaries: &Binaries, dir: &Path) {
    let (mut sides, mut cpu) = (Sides::new(), Sides::new());
    for binary in binaries.balanced() {
        let (took, cpu_each) = step!(full_listings(binary, dir));
        sides.push(binary, took);
        cpu.push(binary, cpu_each);
    }
    let p50 = |runs: Vec<Vec<Duration>>| median(runs.concat());
    let (cpu_new, cpu_baseline) = (median(cpu.new), median(cpu.baseline));
    add(
        rows,
        Row {
            scenario: format!("GET /sessions, {MANY} live, full, server CPU a listing (2 x 15)"),
            measured: ms(cpu_new.expect("this build was measured")),
            target: "-".to_owned(),
            baseline: baseline_cell(cpu_baseline.map(ms)),
            ratio: "-".to_owned(),
            met: true,
        },
    );
    let new = p50(sides.new).expect("this build was measured");
    let baseline = p50(sides.baseline);
    add(
        rows,
        Row {
            scenario: format!("GET /sessions, {MANY} live, full, p50 (2 x 15, balanced)"),
            measured: ms(new),
            target: "-".to_owned(),
            baseline: baseline_cell(baseline.map(ms)),
            ratio: speed_up(baseline, new),
            met: true,
        },
    );
}

/// 15 full listings (after 3 uncounted) of a fresh `binary` server: each one's time, and the
/// server's CPU time a listing over the 15.
async fn full_listings(binary: Binary<'_>, dir: &Path) -> (Vec<Duration>, Duration) {
    let server = Server::start_binary(binary.path, dir);
    let mut client = server.client().await;
    let mut took = Vec::new();
    let (mut cpu_before, mut counts) = (server.cpu(), None);
    for round in 0..18 {
        if round == 3 {
            counts = PerfCounts::attach(server.pid());
            cpu_before = server.cpu();
        }
        let (time, body) = client.timed_get("/sessions").await;
        assert_eq!(count_live(&body), MANY, "every record is live");
        if round >= 3 {
            took.push(time);
        }
    }
    let cpu = (server.cpu() - cpu_before) / took.len() as u32;
    for (event, count) in counts.map(PerfCounts::finish).unwrap_or_default() {
        eprintln!("  {event}: {} a listing", count / took.len() as u64);
    }
    let mut sorted = took.clone();
    sorted.sort();
    eprintln!(
        "  full listing ({}): p50 {}, server CPU {} a listing",
        binary.path.display(),
        ms(sorted[sorted.len() / 2]),
        ms(cpu)
    );
    (took, cpu)
}

/// `GET /sessions` over [`MANY`] live records, against upstream's one-at-a-time verification.
async fn full_verification(
    rows: &mut Vec<Row>,
    client: &mut Client,
    doors: &mut Doors,
    dir: &Path,
) {
    for _ in 0..3 {
        let (_, body) = client.timed_get("/sessions").await;
        assert_eq!(count_live(&body), MANY, "every record is live");
    }
    let mut full = Vec::new();
    for _ in 0..15 {
        let (took, body) = client.timed_get("/sessions").await;
        assert_eq!(count_live(&body), MANY, "every record is live");
        full.push(took);
    }
    let (most_open, _) = doors.stats();
    assert!(most_open <= 1, "one probe per door at a time");
    let mut baseline = Vec::new();
    for _ in 0..3 {
        let began = Instant::now();
        let verdicts = sequential_verify(dir, None).await;
        baseline.push(began.elapsed());
        assert!(verdicts.iter().all(|(_, l)| *l == Liveness::Live));
    }
    add(
        rows,
        latency_row(
            &format!("GET /sessions, {MANY} live, full verification, p50"),
            &full,
            Duration::from_millis(200),
            &baseline,
        ),
    );
}

/// `GET /sessions?probe=false` over [`MANY`] live records, against upstream's layers 1-2.
async fn layers_1_2_only(rows: &mut Vec<Row>, client: &mut Client, dir: &Path) {
    let mut lean = Vec::new();
    for _ in 0..3 {
        client.timed_get("/sessions?probe=false").await;
    }
    for _ in 0..30 {
        let (took, body) = client.timed_get("/sessions?probe=false").await;
        assert_eq!(states_of(&body).len(), MANY);
        lean.push(took);
    }
    let mut baseline = Vec::new();
    for _ in 0..5 {
        let began = Instant::now();
        assert_eq!(sequential_layers_1_2(dir), MANY);
        baseline.push(began.elapsed());
    }
    add(
        rows,
        latency_row(
            &format!("GET /sessions?probe=false, {MANY} live, p50"),
            &lean,
            Duration::from_millis(20),
            &baseline,
        ),
    );
}

/// The server's resident memory once its client has gone.
async fn idle_memory(rows: &mut Vec<Row>, server: &Server) {
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = server.rss_kib();
    add(
        rows,
        Row {
            scenario: format!("RSS idle after serving {MANY} records"),
            measured: format!("{:.1} MiB", idle as f64 / 1024.0),
            target: "<= 30 MiB".to_owned(),
            baseline: "-".to_owned(),
            ratio: "-".to_owned(),
            met: idle <= 30 * 1024,
        },
    );
}
