//! Scenario 5: the lean path's throughput (`probe=false` over ten records, many connections),
//! and the server's memory across 100,000 requests, which must not grow.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::door_host::Doors;
use crate::figures::{Row, add, cpu_time};
use crate::sequential::sequential_layers_1_2;
use crate::server::Server;

/// Records and requests of the throughput run.
const LEAN: usize = 10;
const LEAN_REQUESTS: usize = 100_000;
const LEAN_CONNECTIONS: usize = 32;
const LEAN_WARM_UP: usize = 50_000;
const LEAN_PATH: &str = "/sessions?probe=false";

pub async fn lean_path_throughput_and_memory(rows: &mut Vec<Row>) {
    let doors = Doors::start(LEAN, Duration::ZERO, "0004");
    let dir = doors.running_dir(LEAN);
    let server = Server::start(dir.path());
    let run = step!(hammer_the_lean_path(&server));
    let baseline = step!(in_process_layers_1_2_rate(dir.path()));
    lean_rows(rows, run, baseline);
}

/// The lean path's figures: request rates of four quarters, errors, CPU per request on both
/// sides, and the server's memory cold, after the warm-up and after each quarter.
struct LeanRun {
    rates: Vec<f64>,
    errors: usize,
    server_cpu: Duration,
    client_cpu: Duration,
    cold: u64,
    before: u64,
    after: u64,
    rss: Vec<u64>,
}

/// [`LEAN_REQUESTS`] of `GET /sessions?probe=false` after [`LEAN_WARM_UP`] of them.
async fn hammer_the_lean_path(server: &Server) -> LeanRun {
    let path = LEAN_PATH;
    // Warm up before memory is taken as the reference: the allocator's per-thread arenas
    // fill over the first tens of thousands of requests (1-2 MiB), then stay put.
    let cold = server.rss_kib();
    hammer(server, path, LEAN_WARM_UP).await;
    let before = server.rss_kib();
    let mut rates = Vec::new();
    let mut errors = 0;
    let runs = 4;
    let (server_cpu, client_cpu) = (server.cpu(), cpu_time(std::process::id()));
    let mut rss = vec![before];
    for _ in 0..runs {
        let (rate, failed) = hammer(server, path, LEAN_REQUESTS / runs).await;
        rates.push(rate);
        errors += failed;
        rss.push(server.rss_kib());
    }
    let per_request = |spent: Duration| spent / LEAN_REQUESTS as u32;
    let server_cpu = per_request(server.cpu() - server_cpu);
    let client_cpu = per_request(cpu_time(std::process::id()) - client_cpu);
    let after = server.rss_kib();
    LeanRun {
        rates,
        errors,
        server_cpu,
        client_cpu,
        cold,
        before,
        after,
        rss,
    }
}

/// Upstream's `probe=false` done in-process, as often as two seconds allow: the rate.
async fn in_process_layers_1_2_rate(dir: &Path) -> f64 {
    let began = Instant::now();
    let mut n = 0u32;
    while began.elapsed() < Duration::from_secs(2) {
        sequential_layers_1_2(dir);
        n += 1;
    }
    f64::from(n) / began.elapsed().as_secs_f64()
}

fn lean_rows(rows: &mut Vec<Row>, run: LeanRun, baseline: f64) {
    let LeanRun {
        mut rates,
        errors,
        server_cpu,
        client_cpu,
        cold,
        before,
        after,
        rss,
    } = run;
    let path = LEAN_PATH;
    rates.sort_by(f64::total_cmp);
    let median = rates[rates.len() / 2];
    add(
        rows,
        Row {
            scenario: format!("GET {path}, {LEAN} records, requests/s ({LEAN_CONNECTIONS} conns)"),
            measured: format!(
                "{:.0} / {:.0} / {:.0}",
                rates[0],
                median,
                rates[rates.len() - 1]
            ),
            target: ">= 10000/s".to_owned(),
            baseline: format!("{baseline:.0}/s (in-process)"),
            ratio: format!("{:.2}x", median / baseline),
            met: median >= 10_000.0 && errors == 0,
        },
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    add(
        rows,
        Row {
            scenario: "  CPU per request: server; load generator".to_owned(),
            measured: format!(
                "{:.0} us; {:.0} us",
                server_cpu.as_secs_f64() * 1e6,
                client_cpu.as_secs_f64() * 1e6
            ),
            target: "-".to_owned(),
            baseline: format!(
                "machine limit ~{:.0}/s",
                cores / (server_cpu + client_cpu).as_secs_f64().max(1e-9)
            ),
            ratio: "-".to_owned(),
            met: true,
        },
    );
    let growth = rss.iter().max().copied().unwrap_or(after) as i64 - before as i64;
    add(
        rows,
        Row {
            scenario: format!(
                "  RSS across {LEAN_REQUESTS} requests (after {LEAN_WARM_UP}: {:.1} MiB cold)",
                cold as f64 / 1024.0
            ),
            measured: format!(
                "{} MiB; {errors} errors",
                rss.iter()
                    .map(|kib| format!("{:.1}", *kib as f64 / 1024.0))
                    .collect::<Vec<_>>()
                    .join(" -> ")
            ),
            target: "< 1 MiB; 0".to_owned(),
            baseline: "-".to_owned(),
            ratio: "-".to_owned(),
            // The allocator's arenas retain a few hundred KiB more or less from one quarter
            // to the next (the heap in use stays flat: valgrind's massif shows it); a leak
            // of even ten bytes a request would exceed 1 MiB here.
            met: growth <= 1024 && errors == 0,
        },
    );
}

/// `requests` GETs of `path` over `LEAN_CONNECTIONS` keep-alive connections; requests/s, errors.
async fn hammer(server: &Server, path: &str, requests: usize) -> (f64, usize) {
    let remaining = Arc::new(AtomicUsize::new(requests));
    let mut clients = Vec::new();
    for _ in 0..LEAN_CONNECTIONS {
        clients.push(server.client().await);
    }
    let began = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for mut client in clients {
        let (remaining, path) = (remaining.clone(), path.to_owned());
        tasks.spawn(async move {
            let mut errors = 0;
            while remaining
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
            {
                if client.get(&path).await.is_err() {
                    errors += 1;
                }
            }
            errors
        });
    }
    let mut errors = 0;
    while let Some(joined) = tasks.join_next().await {
        errors += joined.expect("load generator");
    }
    (requests as f64 / began.elapsed().as_secs_f64(), errors)
}
