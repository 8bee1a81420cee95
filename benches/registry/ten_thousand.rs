//! Issue 15, one decade up: 10,000 live records of distinct processes, their doors served by
//! one door host. Full listing and `probe=false` latencies, then the server's memory.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::binaries::{Binaries, Binary};
use crate::door_host::Doors;
use crate::figures::{Row, add, baseline_cell, mib, ms, speed_up};
use crate::pid_holders::PidHolders;
use crate::server::{Server, count_live, states_of};

/// Live records, each of its own process.
const DECADE: usize = 10_000;
/// The targets.
const TARGET_FULL_P50: Duration = Duration::from_millis(1_500);
const TARGET_LEAN_P50: Duration = Duration::from_millis(40);
const TARGET_RSS_KIB: u64 = 60 * 1024;
/// How long after the last listing memory is read: past the server's next heap trim, at most
/// 8 s apart while listings keep coming (`src/heap.rs`); the peak (`VmHWM`) is printed beside.
const SETTLE: Duration = Duration::from_secs(10);

/// What one binary did with the decade.
struct Decade {
    full_p50: Duration,
    /// The fewest sessions a full listing found live.
    fewest_live: usize,
    lean_p50: Duration,
    rss_kib: u64,
    peak_kib: u64,
}

impl Decade {
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
    let mut new = None;
    let mut baseline = None;
    for binary in binaries.each() {
        let decade = step!(listings_and_memory(binary, dir.path()));
        if binary.is_baseline {
            baseline = Some(decade);
        } else {
            new = Some(decade);
        }
    }
    let new = new.expect("this build was measured");
    let base = baseline.as_ref();
    add(
        rows,
        Row {
            scenario: format!("GET /sessions, {DECADE} live (distinct processes), p50"),
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
            scenario: format!("GET /sessions?probe=false, {DECADE} live, p50"),
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
            scenario: format!("RSS after the listings of {DECADE} records"),
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
async fn listings_and_memory(binary: Binary<'_>, dir: &Path) -> Decade {
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
    full.sort();
    lean.sort();
    let decade = Decade {
        full_p50: full[full.len() / 2],
        fewest_live,
        lean_p50: lean[lean.len() / 2],
        rss_kib: server.rss_kib(),
        peak_kib: server.peak_rss_kib(),
    };
    eprintln!(
        "  {DECADE} ({}): full {}, probe=false {}, {}",
        binary.path.display(),
        decade.full(),
        ms(decade.lean_p50),
        decade.memory()
    );
    decade
}
