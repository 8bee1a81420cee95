//! Counts `perf stat` takes of one server process while a scenario acts on it, for figures a
//! busy machine cannot sway: the events `MURMUR_BENCH_PERF_EVENTS` names (comma-separated,
//! e.g. uprobes on `malloc` added with `perf probe`; this machine's VM has no hardware
//! counters). Unset, nothing is counted. With `MURMUR_BENCH_PERF_RECORD` set to a path prefix,
//! those events are recorded with their call graphs instead (`<prefix>-<pid>.data`), to say
//! where they come from.
//!
//! Invariant: a count is read only from a `perf stat` that was stopped, so it is whole.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The variable naming the events to count.
const EVENTS_VAR: &str = "MURMUR_BENCH_PERF_EVENTS";
/// The variable asking for call graphs instead of counts, and where to write them.
const RECORD_VAR: &str = "MURMUR_BENCH_PERF_RECORD";

/// A `perf stat` attached to one process.
pub struct PerfCounts {
    perf: Child,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

impl PerfCounts {
    /// Attach to `pid`, when events are named and `perf` runs.
    pub fn attach(pid: u32) -> Option<Self> {
        let events = std::env::var(EVENTS_VAR).ok().filter(|e| !e.is_empty())?;
        let dir = tempfile::tempdir().ok()?;
        let out = dir.path().join("perf.csv");
        let mut perf = Command::new("perf");
        match std::env::var(RECORD_VAR).ok().filter(|p| !p.is_empty()) {
            Some(prefix) => perf
                .args(["record", "--call-graph", "dwarf,16384", "-e", &events])
                .arg("-o")
                .arg(format!("{prefix}-{pid}.data")),
            None => perf
                .args(["stat", "-x", ",", "-e", &events])
                .arg("-o")
                .arg(&out),
        };
        let perf = (perf.args(["-p", &pid.to_string()]))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        // perf says nothing once attached; its attach takes well under this.
        std::thread::sleep(Duration::from_millis(500));
        Some(Self {
            perf,
            out,
            _dir: dir,
        })
    }

    /// Stop counting: each event with its count (SIGINT, on which `perf stat` writes them).
    pub fn finish(mut self) -> Vec<(String, u64)> {
        let _ = Command::new("kill")
            .args(["-INT", &self.perf.id().to_string()])
            .status();
        let _ = self.perf.wait();
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        (text.lines())
            .filter_map(|line| {
                let fields: Vec<&str> = line.split(',').collect();
                let count = fields.first()?.parse().ok()?;
                Some((fields.get(2)?.to_string(), count))
            })
            .collect()
    }
}
