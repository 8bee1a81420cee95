//! Issue 15, SIGKILL → `session.removed`: records of distinct live processes, one `/events`
//! listener, the processes killed one at a time; how long from `kill(2)` to the `removed` event
//! of that session, at the default `--events-interval` (2 s).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::binaries::{Binaries, Binary};
use crate::door_host::Doors;
use crate::event_listener::EventListener;
use crate::figures::{Row, add, baseline_cell, ms, percentile, speed_up};
use crate::pid_holders::PidHolders;
use crate::server::Server;

/// Processes killed, each named by one record.
const KILLED: usize = 50;
/// Kills are this far apart, plus up to [`KILL_JITTER_MS`], so they land at every phase of the
/// registry's interval rather than in step with it.
const KILL_SPACING: Duration = Duration::from_millis(200);
const KILL_JITTER_MS: u64 = 100;
/// How long after the last kill the last removal may take before it counts as missing.
const REMOVAL_DEADLINE: Duration = Duration::from_secs(10);
/// The target.
const TARGET_P99: Duration = Duration::from_millis(50);

/// Kill-to-removal latencies, sorted, and kills never reported removed.
struct Removals {
    latencies: Vec<Duration>,
    missing: usize,
}

impl Removals {
    fn p(&self, p: f64) -> Duration {
        percentile(&self.latencies, p)
    }

    fn summary(&self) -> String {
        let missing = match self.missing {
            0 => String::new(),
            n => format!(", {n} never"),
        };
        format!(
            "{} / {} / {}{missing}",
            ms(self.p(0.5)),
            ms(self.p(0.99)),
            ms(self.latencies.last().copied().unwrap_or_default())
        )
    }
}

pub async fn sigkill_to_removed(rows: &mut Vec<Row>, binaries: &Binaries) {
    let mut new = None;
    let mut baseline = None;
    for binary in binaries.each() {
        let removals = step!(kill_one_at_a_time(binary));
        eprintln!(
            "  kill -> removed ({}): {}",
            binary.path.display(),
            removals.summary()
        );
        if binary.is_baseline {
            baseline = Some(removals);
        } else {
            new = Some(removals);
        }
    }
    let new = new.expect("this build was measured");
    add(
        rows,
        Row {
            scenario: format!("SIGKILL -> session.removed, {KILLED} processes, p50 / p99 / max"),
            measured: new.summary(),
            target: format!("p99 <= {}", ms(TARGET_P99)),
            baseline: baseline_cell(baseline.as_ref().map(Removals::summary)),
            ratio: speed_up(baseline.as_ref().map(|b| b.p(0.99)), new.p(0.99)),
            met: new.missing == 0 && new.p(0.99) <= TARGET_P99,
        },
    );
}

/// Start `binary` over [`KILLED`] records of distinct processes, listen, kill them one by one.
async fn kill_one_at_a_time(binary: Binary<'_>) -> Removals {
    let holders = PidHolders::start(KILLED);
    let doors = Doors::start(KILLED, Duration::ZERO, "0005");
    let dir = doors.running_dir_of(&holders);
    let server = Server::start_binary(binary.path, dir.path());
    let mut listener = EventListener::open(&server).await;
    let snapshot = listener.snapshot().await;
    let listed = snapshot["sessions"].as_array().map_or(0, Vec::len);
    assert_eq!(listed, KILLED, "the first picture holds every record");

    let mut killed_at = HashMap::new();
    let mut jitter = Lcg(0x5eed);
    for (index, (session_id, _)) in doors.sessions.iter().enumerate() {
        let pause = KILL_SPACING + Duration::from_millis(jitter.next() % KILL_JITTER_MS);
        tokio::time::sleep(pause).await;
        killed_at.insert(session_id.clone(), Instant::now());
        holders.kill(index);
    }

    let deadline = Instant::now() + REMOVAL_DEADLINE;
    let mut latencies = Vec::new();
    while latencies.len() < KILLED {
        let Some(event) = listener.next_before(deadline).await else {
            break;
        };
        if event.name != "session.removed" {
            continue;
        }
        let session = event.data["session_id"].as_str().unwrap_or_default();
        if let Some(killed) = killed_at.remove(session) {
            latencies.push(event.at.saturating_duration_since(killed));
        }
    }
    latencies.sort();
    Removals {
        latencies,
        missing: killed_at.len(),
    }
}

/// A fixed pseudo-random sequence, so both binaries see the same kill times.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}
