//! Scenario 3: a hundred doors that each take three seconds, against upstream probing them one
//! after another (a sample, extrapolated, unless `--full-baseline`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use murmur_registry::wire::SessionState;

use crate::door_host::Doors;
use crate::figures::{Row, add, latency_row};
use crate::sequential::sequential_verify;
use crate::server::{Server, states_of};

/// Records whose doors answer after [`SLOW_DELAY`].
const SLOW: usize = 100;
const SLOW_DELAY: Duration = Duration::from_secs(3);
/// How many of the slow records the sequential baseline probes unless `--full-baseline`.
const SLOW_SAMPLE: usize = 6;

pub async fn slow_doors(rows: &mut Vec<Row>, full_baseline: bool) {
    let doors = Doors::start(SLOW, SLOW_DELAY, "0002");
    let dir = doors.running_dir(SLOW);
    let server = Server::start(dir.path());
    let mut client = server.client().await;
    let mut took = Vec::new();
    let mut states = HashMap::new();
    for _ in 0..3 {
        let (t, body) = client.timed_get("/sessions").await;
        took.push(t);
        states = states_of(&body);
    }
    let sample = if full_baseline { SLOW } else { SLOW_SAMPLE };
    let began = Instant::now();
    let sequential = sequential_verify(dir.path(), Some(sample)).await;
    let per_record = began.elapsed() / sample as u32;
    let baseline = per_record * SLOW as u32;
    let same = sequential.iter().all(|(id, liveness)| {
        let word = serde_json::to_value(SessionState::from(liveness)).unwrap_or_default();
        states.get(id).map(String::as_str) == word.as_str()
    });
    let live = states.values().filter(|s| *s == "live").count();
    let worst = took.iter().max().copied().unwrap_or_default();
    let mut row = latency_row(
        &format!("GET /sessions, {SLOW} doors answering after 3 s (max)"),
        &took,
        Duration::from_millis(3_500),
        &[baseline],
    );
    row.met = worst <= Duration::from_millis(3_500) && same && live == SLOW;
    if sample < SLOW {
        row.baseline = format!("{} (from {sample} of {SLOW})", row.baseline);
    }
    add(rows, row);
    add(
        rows,
        Row {
            scenario: format!("  verdicts: {live}/{SLOW} live; same as one at a time on {sample}"),
            measured: if same { "identical" } else { "DIFFERENT" }.to_owned(),
            target: "identical".to_owned(),
            baseline: "-".to_owned(),
            ratio: "-".to_owned(),
            met: same,
        },
    );
}
