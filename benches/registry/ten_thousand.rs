//! Issue 15, one decade up: 10,000 live records of distinct processes, their doors served by
//! one door host. Full listing and `probe=false` latencies, then the server's memory.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::binaries::{Binaries, Binary, Sides};
use crate::door_host::Doors;
use crate::figures::{Row, add, baseline_cell, median, mib, ms, speed_up};
use crate::pid_holders::PidHolders;
use crate::server::{Server, count_live, states_of, warm_up};

/// Live records, each of its own process.
const DECADE: usize = 10_000;
/// The targets.
const TARGET_FULL_P50: Duration = Duration::from_millis(1_500);
const TARGET_LEAN_P50: Duration = Duration::from_millis(40);
const TARGET_RSS_KIB: u64 = 60 * 1024;
/// How long after the last listing memory is read: past the server's next heap trim, at most
/// 8 s apart while listings keep coming (`src/heap.rs`); the peak (`VmHWM`) is printed beside.
const SETTLE: Duration = Duration::from_secs(10);

/// One run of one binary over the decade: every latency, the fewest live, its memory.
struct DecadeRun {
    full: Vec<Duration>,
    lean: Vec<Duration>,
    fewest_live: usize,
    rss_kib: u64,
    peak_kib: u64,
}

/// What one binary did with the decade, over its runs: medians of every listing, the least
/// found live, the most memory.
struct Decade {
    full_p50: Duration,
    /// The fewest sessions a full listing found live.
    fewest_live: usize,
    lean_p50: Duration,
    rss_kib: u64,
    peak_kib: u64,
}

impl Decade {
    fn combined(runs: &[DecadeRun]) -> Option<Decade> {
        let pooled = |of: fn(&DecadeRun) -> &Vec<Duration>| {
            median(runs.iter().flat_map(|r| of(r).iter().copied()).collect())
        };
        Some(Decade {
            full_p50: pooled(|r| &r.full)?,
            fewest_live: runs.iter().map(|r| r.fewest_live).min()?,
            lean_p50: pooled(|r| &r.lean)?,
            rss_kib: runs.iter().map(|r| r.rss_kib).max()?,
            peak_kib: runs.iter().map(|r| r.peak_kib).max()?,
        })
    }

    fn full(&self) -> String {
        format!("{} ({} live)", ms(self.full_p50), self.fewest_live)
    }

    fn memory(&self) -> String {
        format!("{} (peak {})", mib(self.rss_kib), mib(self.peak_kib))
    }
}

pub async fn ten_thousand_records(rows: &mut Vec<Row>, binaries: &Binaries) {
    let began = Instant::now();
    let holders = PidHolders::start(DECADE);
    let doors = Doors::start(DECADE, Duration::ZERO, "0008");
    // Listings prune nothing: the same directory serves both binaries.
    let dir = doors.running_dir_of(&holders);
    eprintln!(
        "  {DECADE} processes, doors and records set up in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    let warm_up_paths = ["/sessions", "/sessions?probe=false"];
    warm_up(binaries.each()[0].path, dir.path(), &warm_up_paths).await;
    let mut sides = Sides::new();
    for binary in binaries.balanced() {
        let run = step!(listings_and_memory(binary, dir.path()));
        sides.push(binary, run);
    }
    let new = Decade::combined(&sides.new).expect("this build was measured");
    let baseline = Decade::combined(&sides.baseline);
    let base = baseline.as_ref();
    add(
        rows,
        Row {
            scenario: format!("GET /sessions, {DECADE} live (distinct processes), p50 (2 x 5)"),
            measured: new.full(),
            target: format!("<= {}", ms(TARGET_FULL_P50)),
            baseline: baseline_cell(base.map(Decade::full)),
            ratio: speed_up(base.map(|b| b.full_p50), new.full_p50),
            met: new.full_p50 <= TARGET_FULL_P50 && new.fewest_live == DECADE,
        },
    );
    add(
        rows,
        Row {
            scenario: format!("GET /sessions?probe=false, {DECADE} live, p50 (2 x 20)"),
            measured: ms(new.lean_p50),
            target: format!("<= {}", ms(TARGET_LEAN_P50)),
            baseline: baseline_cell(base.map(|b| ms(b.lean_p50))),
            ratio: speed_up(base.map(|b| b.lean_p50), new.lean_p50),
            met: new.lean_p50 <= TARGET_LEAN_P50,
        },
    );
    add(
        rows,
        Row {
            scenario: format!("RSS after the listings of {DECADE} records (worse run)"),
            measured: new.memory(),
            target: format!("<= {}", mib(TARGET_RSS_KIB)),
            baseline: baseline_cell(base.map(Decade::memory)),
            ratio: "-".to_owned(),
            met: new.rss_kib <= TARGET_RSS_KIB,
        },
    );
}

/// `binary` over `dir`: 5 full listings after one to warm up, 20 `probe=false` after 3, then
/// its memory [`SETTLE`] after the last answer.
async fn listings_and_memory(binary: Binary<'_>, dir: &Path) -> DecadeRun {
    let server = Server::start_binary(binary.path, dir);
    let mut client = server.client().await;
    client.timed_get("/sessions").await;
    let mut full = Vec::new();
    let mut fewest_live = DECADE;
    for _ in 0..5 {
        let (took, body) = client.timed_get("/sessions").await;
        fewest_live = fewest_live.min(count_live(&body));
        full.push(took);
    }
    for _ in 0..3 {
        client.timed_get("/sessions?probe=false").await;
    }
    let mut lean = Vec::new();
    for _ in 0..20 {
        let (took, body) = client.timed_get("/sessions?probe=false").await;
        assert_eq!(states_of(&body).len(), DECADE, "every record listed");
        lean.push(took);
    }
    drop(client);
    tokio::time::sleep(SETTLE).await;
    let run = DecadeRun {
        rss_kib: server.rss_kib(),
        peak_kib: server.peak_rss_kib(),
        full,
        lean,
        fewest_live,
    };
    eprintln!(
        "  {DECADE} ({}): full {}, probe=false {}, {} (peak {})",
        binary.path.display(),
        ms(median(run.full.clone()).unwrap_or_default()),
        ms(median(run.lean.clone()).unwrap_or_default()),
        mib(run.rss_kib),
        mib(run.peak_kib)
    );
    run
}
