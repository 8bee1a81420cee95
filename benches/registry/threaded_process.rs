//! Issue 15, `probe=false` over records whose one process runs many threads: the kernel renders
//! `/proc/<pid>/stat` by summing CPU time over every thread, so reading it per record costs
//! what the thread count costs. One process here (the door host, with parked threads).

use std::path::Path;
use std::time::Duration;

use crate::binaries::{Binaries, Binary, Sides};
use crate::door_host::Doors;
use crate::figures::{Row, add, baseline_cell, median, ms, speed_up, status_kib};
use crate::server::{Server, states_of, warm_up};

/// Records, all naming the one process.
const RECORDS: usize = 1_000;
/// Threads that process runs (parked).
const THREADS: usize = 1_000;
const LEAN_PATH: &str = "/sessions?probe=false";
/// The target.
const TARGET_P50: Duration = Duration::from_millis(12);

pub async fn probe_false_over_threaded_process(rows: &mut Vec<Row>, binaries: &Binaries) {
    let doors = Doors::start_with_threads(RECORDS, Duration::ZERO, "0007", THREADS);
    let threads = status_kib(doors.pid, "Threads:");
    assert!(
        threads as usize > THREADS,
        "the door host runs its parked threads"
    );
    let dir = doors.running_dir(RECORDS);
    warm_up(binaries.each()[0].path, dir.path(), &[LEAN_PATH; 3]).await;
    let mut sides = Sides::new();
    for binary in binaries.balanced() {
        let took = step!(probe_false_listings(binary, dir.path()));
        sides.push(binary, took);
    }
    let new = median(sides.new.concat()).expect("this build was measured");
    let baseline = median(sides.baseline.concat());
    add(
        rows,
        Row {
            scenario: format!(
                "GET /sessions?probe=false, {RECORDS} live, 1 process of {threads} threads, p50 (2 x 30)"
            ),
            measured: ms(new),
            target: format!("<= {}", ms(TARGET_P50)),
            baseline: baseline_cell(baseline.map(ms)),
            ratio: speed_up(baseline, new),
            met: new <= TARGET_P50,
        },
    );
}

/// `binary` over `dir`: 30 `probe=false` listings after 3 to warm up, how long each took.
async fn probe_false_listings(binary: Binary<'_>, dir: &Path) -> Vec<Duration> {
    let server = Server::start_binary(binary.path, dir);
    let mut client = server.client().await;
    for _ in 0..3 {
        client.timed_get(LEAN_PATH).await;
    }
    let mut took = Vec::new();
    for _ in 0..30 {
        let (t, body) = client.timed_get(LEAN_PATH).await;
        assert_eq!(states_of(&body).len(), RECORDS, "every record listed");
        took.push(t);
    }
    eprintln!(
        "  probe=false over one threaded process ({}): p50 {}",
        binary.path.display(),
        ms(median(took.clone()).unwrap_or_default())
    );
    took
}
