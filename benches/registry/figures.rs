//! How figures are taken and printed: the summary's rows, percentiles and their formatting,
//! and what `/proc` says of a process's CPU time and memory.
//!
//! Invariant: a row's `met` is the figure judged against its target, never against the
//! baseline; a missed target prints `MISSED` and fails nothing.

use std::time::Duration;

/// One line of the summary.
pub struct Row {
    pub scenario: String,
    pub measured: String,
    pub target: String,
    /// The sequential baseline, or the pre-issue binary's figure in the same run.
    pub baseline: String,
    pub ratio: String,
    pub met: bool,
}

impl Row {
    pub fn print(&self) {
        println!(
            "{:<58} {:<34} {:<18} {:<30} {:<10} {}",
            self.scenario,
            self.measured,
            self.target,
            self.baseline,
            self.ratio,
            if self.met { "met" } else { "MISSED" }
        );
    }
}

pub fn add(rows: &mut Vec<Row>, row: Row) {
    row.print();
    rows.push(row);
}

pub fn print_header() {
    println!(
        "{:<58} {:<34} {:<18} {:<30} {:<10} target",
        "scenario", "registry (min / median / max)", "target", "baseline", "speed-up"
    );
}

pub fn latency_row(
    scenario: &str,
    took: &[Duration],
    target: Duration,
    baseline: &[Duration],
) -> Row {
    let mut took = took.to_vec();
    took.sort();
    let mut baseline = baseline.to_vec();
    baseline.sort();
    let median = took[took.len() / 2];
    let base = baseline[baseline.len() / 2];
    Row {
        scenario: scenario.to_owned(),
        measured: format!(
            "{} / {} / {}",
            ms(took[0]),
            ms(median),
            ms(took[took.len() - 1])
        ),
        target: format!("<= {}", ms(target)),
        baseline: ms(base),
        ratio: ratio(base, median),
        met: median <= target,
    }
}

/// The median of `samples`; `None` when there are none.
pub fn median(mut samples: Vec<Duration>) -> Option<Duration> {
    samples.sort();
    samples.get(samples.len() / 2).copied()
}

pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let at = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[at]
}

pub fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms >= 10_000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

pub fn ratio(baseline: Duration, measured: Duration) -> String {
    format!(
        "{:.1}x",
        baseline.as_secs_f64() / measured.as_secs_f64().max(1e-9)
    )
}

pub fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        })
        .unwrap_or(0)
}

/// CPU time `pid` has used so far (user + system), from fields 14 and 15 of its stat line.
pub fn cpu_time(pid: u32) -> Duration {
    // USER_HZ is 100 on every Linux this runs on.
    const TICKS_PER_SECOND: f64 = 100.0;
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|line| {
            let after = &line[line.rfind(')')? + 1..];
            let fields: Vec<&str> = after.split_whitespace().collect();
            // Field 3 is the first after the name; utime is field 14, stime field 15.
            let utime: u64 = fields.get(11)?.parse().ok()?;
            let stime: u64 = fields.get(12)?.parse().ok()?;
            Some(Duration::from_secs_f64(
                (utime + stime) as f64 / TICKS_PER_SECOND,
            ))
        })
        .unwrap_or_default()
}

pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".to_owned())
}

/// The baseline column of an issue-15 row: the pre-issue binary's figure, or a dash when no
/// baseline binary was named.
pub fn baseline_cell(baseline: Option<String>) -> String {
    baseline.map_or_else(
        || "- (no baseline)".to_owned(),
        |b| format!("{b} (pre-issue)"),
    )
}

/// `baseline / measured` as `N.Nx`, or `-` without a baseline.
pub fn speed_up(baseline: Option<Duration>, measured: Duration) -> String {
    baseline.map_or_else(|| "-".to_owned(), |b| ratio(b, measured))
}

/// `kib` as MiB with one decimal.
pub fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}
