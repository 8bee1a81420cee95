//! The server's heap policy: memory freed after a burst of work goes back to the kernel.
//!
//! A listing of 10,000 records allocates tens of MiB for a second and frees it all, but glibc
//! keeps freed memory inside its arenas (one per thread that allocated, up to eight a core)
//! unless it sits at an arena's very top, so the registry used to stay at its peak (139 MiB at
//! 10,000 records while its heap held about 21). Invariant kept here: once work stops, within
//! about [`MAX_SPACING`] the resident set is what the heap holds plus what glibc cannot give back
//! (partly used pages), not every arena's past peak. Nothing here on other C libraries. Set by
//! `serve` alone: a command that exits at once has no past peak to give back.

use std::time::{Duration, Instant};

/// How often the resident set is looked at, and the least time between two trims.
const MIN_SPACING: Duration = Duration::from_secs(1);
/// The most time between two trims while memory keeps coming back (work that frees and takes
/// the same pages every pass): each trim then costs page faults to take them back.
const MAX_SPACING: Duration = Duration::from_secs(8);
/// Growth of the resident set since the last trim that is worth a trim (which walks every
/// arena's free chunks): below it, what is free is not worth the walk.
const TRIM_ABOVE_KIB: u64 = 4 * 1024;

/// When to trim, from the resident set alone: after it grew by [`TRIM_ABOVE_KIB`] since it was
/// last settled, and no sooner than `spacing` after the previous trim. A trim needed again soon
/// after the last one doubles `spacing` (up to [`MAX_SPACING`]); one after a long quiet resets it.
#[derive(Debug)]
struct TrimSchedule {
    settled_kib: u64,
    spacing: Duration,
    last_trim: Option<Instant>,
}

impl TrimSchedule {
    fn new(resident_kib: u64) -> Self {
        Self {
            settled_kib: resident_kib,
            spacing: MIN_SPACING,
            last_trim: None,
        }
    }

    /// Whether to trim now, the resident set being `resident_kib` at `now`.
    fn due(&mut self, resident_kib: u64, now: Instant) -> bool {
        if resident_kib <= self.settled_kib + TRIM_ABOVE_KIB {
            self.settled_kib = self.settled_kib.min(resident_kib);
            return false;
        }
        let Some(last) = self.last_trim else {
            return true;
        };
        let since = now.saturating_duration_since(last);
        if since < self.spacing {
            return false;
        }
        self.spacing = if since < self.spacing * 4 {
            (self.spacing * 2).min(MAX_SPACING)
        } else {
            MIN_SPACING
        };
        true
    }

    /// A trim ended at `now`, leaving `resident_kib`.
    fn trimmed(&mut self, resident_kib: u64, now: Instant) {
        self.settled_kib = resident_kib;
        self.last_trim = Some(now);
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod glibc {
    use std::ffi::c_int;
    use std::time::Instant;

    use super::{MIN_SPACING, TrimSchedule};

    unsafe extern "C" {
        fn mallopt(param: c_int, value: c_int) -> c_int;
        fn malloc_trim(pad: usize) -> c_int;
    }

    /// `M_ARENA_MAX` from glibc's `malloc.h`.
    const M_ARENA_MAX: c_int = -8;

    // The mmap threshold is left to glibc: fixed low, a listing's multi-MiB vectors were mapped
    // and faulted in afresh on every request (4,500 page faults, +10 % CPU a `probe=false` of
    // 10,000), where glibc's own threshold soon keeps them in an arena for the trim to return.

    /// Two arenas for two runtime workers and the blocking pool: each arena keeps its own past
    /// peak, so fewer arenas hold less; most work runs on the two workers.
    const ARENA_MAX: c_int = 2;

    pub fn return_freed_memory() {
        // SAFETY: mallopt only sets an allocator parameter; `serve` calls this before it starts
        // any thread, so no allocation races with the change.
        unsafe {
            mallopt(M_ARENA_MAX, ARENA_MAX);
        }
        let trimmer = std::thread::Builder::new()
            .name("heap-trim".to_owned())
            .stack_size(64 * 1024)
            .spawn(trim_after_bursts);
        if let Err(error) = trimmer {
            eprintln!("warning: freed memory will stay with the allocator: {error}");
        }
    }

    /// Forever: look at the resident set every [`MIN_SPACING`] and trim when it is due.
    fn trim_after_bursts() {
        let mut schedule = TrimSchedule::new(resident_kib());
        loop {
            std::thread::sleep(MIN_SPACING);
            if schedule.due(resident_kib(), Instant::now()) {
                // SAFETY: malloc_trim takes each arena's lock itself; any thread may call it.
                unsafe { malloc_trim(0) };
                schedule.trimmed(resident_kib(), Instant::now());
            }
        }
    }

    /// The resident set of this process, in KiB; 0 when it cannot be read (then nothing is
    /// trimmed on account of it). From `statm`, whose second field is the resident pages:
    /// `status` says the same in KiB, but the kernel renders some fifty lines for it each time.
    pub(super) fn resident_kib() -> u64 {
        std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|statm| statm.split_ascii_whitespace().nth(1)?.parse::<u64>().ok())
            .map(|pages| pages * (rustix::param::page_size() as u64 / 1024))
            .unwrap_or(0)
    }
}

/// Set the allocator up to give freed memory back, and start the thread that trims it. Call it
/// before any other thread exists.
pub(crate) fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    glibc::return_freed_memory();
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024;

    #[test]
    fn small_growth_never_trims_and_a_lower_resident_set_becomes_the_base() {
        let start = Instant::now();
        let mut schedule = TrimSchedule::new(20 * MIB);
        assert!(!schedule.due(24 * MIB, start));
        assert!(!schedule.due(10 * MIB, start + MIN_SPACING));
        assert!(schedule.due(15 * MIB, start + MIN_SPACING * 2));
    }

    #[test]
    fn a_burst_after_a_quiet_time_is_trimmed_at_once() {
        let start = Instant::now();
        let mut schedule = TrimSchedule::new(10 * MIB);
        assert!(schedule.due(80 * MIB, start));
        schedule.trimmed(12 * MIB, start);
        let later = start + MAX_SPACING * 10;
        assert!(schedule.due(90 * MIB, later));
        assert_eq!(schedule.spacing, MIN_SPACING);
    }

    #[test]
    fn memory_that_keeps_coming_back_is_trimmed_ever_less_often() {
        let mut now = Instant::now();
        let mut schedule = TrimSchedule::new(10 * MIB);
        let mut trims = Vec::new();
        // Every look finds the pages taken back, as a pass every second would.
        for second in 0..60 {
            if schedule.due(40 * MIB, now) {
                trims.push(second);
                schedule.trimmed(10 * MIB, now);
            }
            now += MIN_SPACING;
        }
        assert_eq!(&trims[..5], &[0, 1, 3, 7, 15]);
        let gaps: Vec<u64> = trims.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|g| *g <= MAX_SPACING.as_secs()), "{gaps:?}");
        assert_eq!(gaps.last().copied(), Some(MAX_SPACING.as_secs()));
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn the_resident_set_read_is_the_one_status_reports() {
        let vm_rss = || -> u64 {
            let status = std::fs::read_to_string("/proc/self/status").expect("status");
            let line = status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .expect("VmRSS");
            line[6..]
                .trim()
                .trim_end_matches(" kB")
                .parse()
                .expect("KiB")
        };
        let (before, read, after) = (vm_rss(), glibc::resident_kib(), vm_rss());
        // Other test threads may move it a little between the reads.
        let (low, high) = (before.min(after), before.max(after));
        assert!(
            read + MIB >= low && read <= high + MIB,
            "statm says {read} KiB, status {before} then {after}"
        );
    }
}
