//! What each confirmed process costs (CPU, memory, threads), read from `/proc/<pid>/stat` for
//! the pids that passed layers 1–2 and for no other.
//!
//! Invariants kept here:
//! - Only the pids of readings whose process is `Alive` are read, never the whole process
//!   table: one `/proc/<pid>/stat` each, which holds every figure and the start time.
//! - A figure belongs to the process layers 1–2 confirmed: the start time read with it must be
//!   the record's, and layers 1–2 are read again after the sample (through the pins, so a held
//!   pidfd answers without `/proc`); a process that is not the same one gets no figure.
//! - `cpu_percent` is measured by the registry itself, per process (pid and start time), over
//!   the time since its previous sample of that process: one state for every caller, so one
//!   caller's sample never skews another's figure, and a reused pid never inherits a baseline.
//!
//! Why not `sysinfo`: for each pid it is given it reads `status` (to tell a thread from a
//! process), `stat`, `statm` and the `task` directory, about 42 µs a process here, where the
//! one `stat` line holds every figure: 1,000 processes cost +60–100 ms a listing, not +15.

use std::collections::{HashMap, HashSet};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::process_key::ProcessKey;
use super::{Reading, Registry, blocking};
use crate::running::{ProcessState, RunningRecord, process_usage};

/// A previous sample older than this gives no `cpu_percent`: a figure averaged over minutes
/// would pass for the process's current load.
pub const CPU_BASELINE_FRESH: Duration = Duration::from_secs(10);

/// Two samples closer than this measure CPU too coarsely (the kernel counts it in ticks of
/// 10 ms): the later one reports the figure of the earlier and keeps its baseline.
pub const CPU_SPAN_MIN: Duration = Duration::from_millis(100);

/// At most this many threads read side by side (one a core).
const MAX_SHARDS: usize = 4;

/// Fewer processes than this are read on the calling thread alone: a thread costs more.
const PROCESSES_PER_SHARD: usize = 256;

/// What one confirmed process costs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Resources {
    /// Share of one CPU core used since the registry's previous sample of this process, in
    /// percent (above 100 for a process busy on several cores); `None` without a sample from
    /// the last [`CPU_BASELINE_FRESH`].
    pub cpu_percent: Option<f64>,
    /// CPU time used since the process started (user and system), in milliseconds.
    pub cpu_time_ms: u64,
    /// Resident memory, in bytes.
    pub rss_bytes: u64,
    /// Threads in the process.
    pub threads: usize,
}

/// One process's counters as read.
#[derive(Debug, Clone, Copy)]
struct Counters {
    cpu_time_ms: u64,
    rss_bytes: u64,
    threads: usize,
}

/// The registry's sampling state, shared by every caller.
#[derive(Debug, Default)]
pub(super) struct ResourceSampler {
    /// The CPU baseline of each process sampled within [`CPU_BASELINE_FRESH`].
    tracks: Mutex<HashMap<ProcessKey, CpuTrack>>,
}

/// A process's CPU baseline: its CPU time at one sample, and the figure that sample reported.
#[derive(Debug, Clone, Copy, PartialEq)]
struct CpuTrack {
    cpu_time_ms: u64,
    at: Instant,
    percent: Option<f64>,
}

/// The track after a sample of `cpu_time_ms` at `at`, given the one before (see the module's
/// invariants): its `percent` is the figure this sample reports.
fn next_track(previous: Option<CpuTrack>, cpu_time_ms: u64, at: Instant) -> CpuTrack {
    let fresh = previous.filter(|p| at.saturating_duration_since(p.at) <= CPU_BASELINE_FRESH);
    let Some(previous) = fresh else {
        return CpuTrack {
            cpu_time_ms,
            at,
            percent: None,
        };
    };
    let span = at.saturating_duration_since(previous.at);
    if span < CPU_SPAN_MIN {
        return previous;
    }
    let used = cpu_time_ms.saturating_sub(previous.cpu_time_ms) as f64;
    let percent = used / span.as_secs_f64() / 10.0;
    CpuTrack {
        cpu_time_ms,
        at,
        // One decimal: the counters are not finer than that over a useful span.
        percent: Some((percent * 10.0).round() / 10.0),
    }
}

impl ResourceSampler {
    /// Read the counters of `processes` (only these); one that could not be read, or whose
    /// start time is not its key's, is absent.
    ///
    /// Blocking (`/proc` reads); call it off async workers.
    fn read(processes: &[ProcessKey]) -> HashMap<ProcessKey, Counters> {
        let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        let shards = (processes.len() / PROCESSES_PER_SHARD).clamp(1, cores.min(MAX_SHARDS));
        if shards == 1 {
            return read_each(processes);
        }
        let per_shard = processes.len().div_ceil(shards);
        std::thread::scope(|scope| {
            let mut chunks = processes.chunks(per_shard);
            let first = chunks.next().unwrap_or_default();
            let others: Vec<_> = chunks
                .map(|chunk| scope.spawn(move || read_each(chunk)))
                .collect();
            let mut counters = read_each(first);
            for other in others {
                // A thread that panicked read nothing: its processes get no figure.
                counters.extend(other.join().unwrap_or_default());
            }
            counters
        })
    }

    /// The figures of processes sampled at `at`, each CPU baseline moved on, and the state of
    /// processes not sampled lately let go.
    fn figures(
        &self,
        sampled: impl Iterator<Item = (ProcessKey, Counters)>,
        at: Instant,
    ) -> HashMap<ProcessKey, Resources> {
        let mut tracks = self.tracks();
        let figures = sampled
            .map(|(key, counters)| {
                let track = next_track(tracks.get(&key).copied(), counters.cpu_time_ms, at);
                tracks.insert(key, track);
                let resources = Resources {
                    cpu_percent: track.percent,
                    cpu_time_ms: counters.cpu_time_ms,
                    rss_bytes: counters.rss_bytes,
                    threads: counters.threads,
                };
                (key, resources)
            })
            .collect();
        tracks.retain(|_, track| at.saturating_duration_since(track.at) <= CPU_BASELINE_FRESH);
        figures
    }

    fn tracks(&self) -> MutexGuard<'_, HashMap<ProcessKey, CpuTrack>> {
        // Every write leaves the map whole: a poisoned lock still holds a usable one.
        self.tracks.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// [`ResourceSampler::read`] on this thread.
fn read_each(processes: &[ProcessKey]) -> HashMap<ProcessKey, Counters> {
    let (tick_ms, page_bytes) = (ms_per_tick(), rustix::param::page_size() as u64);
    processes
        .iter()
        .filter_map(|key| {
            let usage = process_usage(key.pid).ok()?;
            // Another process under the pid since the layers looked: none of its figures.
            let counters = Counters {
                cpu_time_ms: usage.cpu_ticks.saturating_mul(tick_ms),
                rss_bytes: usage.rss_pages.saturating_mul(page_bytes),
                threads: usize::try_from(usage.threads).unwrap_or(usize::MAX),
            };
            (usage.start_ticks == key.start).then_some((*key, counters))
        })
        .collect()
}

/// Milliseconds in one clock tick of `/proc`'s CPU times (`USER_HZ`, 100 on Linux: 10 ms).
fn ms_per_tick() -> u64 {
    1000 / rustix::param::clock_ticks_per_second().max(1)
}

impl Registry {
    /// What each reading's process costs, in the readings' order: `None` for a reading whose
    /// process did not pass layers 1–2, no longer passes them after the sample, or could not
    /// be read.
    ///
    /// Reads only the confirmed processes, on the blocking pool. Every call moves each
    /// process's CPU baseline on, so `cpu_percent` is over the time since any caller's previous
    /// sample of it (at least [`CPU_SPAN_MIN`] back; `None` with none in the last
    /// [`CPU_BASELINE_FRESH`]).
    pub async fn resources(&self, readings: &[Reading]) -> Vec<Option<Resources>> {
        let confirmed: Vec<Option<(ProcessKey, Arc<RunningRecord>)>> = readings
            .iter()
            .map(|reading| {
                let alive = matches!(reading.process, ProcessState::Alive);
                let key = ProcessKey::of(&reading.record).filter(|_| alive)?;
                Some((key, Arc::clone(&reading.record)))
            })
            .collect();
        if confirmed.iter().all(Option::is_none) {
            return vec![None; readings.len()];
        }
        let count = readings.len();
        let sampler = Arc::clone(&self.resources);
        let pins = Arc::clone(&self.reader.pins);
        blocking(move || {
            let mut seen = HashSet::new();
            let processes: Vec<ProcessKey> = confirmed
                .iter()
                .flatten()
                .filter(|(key, _)| seen.insert(*key))
                .map(|(key, _)| *key)
                .collect();
            let counters = ResourceSampler::read(&processes);
            let at = Instant::now();
            // Layers 1–2 again, for the records whose process was read.
            let read: Vec<(ProcessKey, Arc<RunningRecord>)> = confirmed
                .iter()
                .flatten()
                .filter(|(key, _)| counters.contains_key(key))
                .cloned()
                .collect();
            let records: Vec<Arc<RunningRecord>> =
                read.iter().map(|(_, record)| Arc::clone(record)).collect();
            let still: HashSet<ProcessKey> = read
                .iter()
                .zip(pins.states(&records))
                .filter(|(_, state)| matches!(state, ProcessState::Alive))
                .map(|((key, _), _)| *key)
                .collect();
            let figures = sampler.figures(
                still
                    .iter()
                    .filter_map(|key| Some((*key, *counters.get(key)?))),
                at,
            );
            confirmed
                .iter()
                .map(|confirmed| figures.get(&confirmed.as_ref()?.0).copied())
                .collect()
        })
        .await
        .unwrap_or_else(|_| vec![None; count])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn track(cpu_time_ms: u64, at: Instant, percent: Option<f64>) -> CpuTrack {
        CpuTrack {
            cpu_time_ms,
            at,
            percent,
        }
    }

    #[test]
    fn the_first_sample_has_no_figure_and_the_next_measures_the_span_between() {
        let start = Instant::now();
        let first = next_track(None, 5_000, start);
        assert_eq!(first, track(5_000, start, None));
        // 500 ms of CPU over one second: half a core.
        let later = start + Duration::from_secs(1);
        let second = next_track(Some(first), 5_500, later);
        assert_eq!(second, track(5_500, later, Some(50.0)));
        // Two cores busy for two seconds.
        let after = later + Duration::from_secs(2);
        assert_eq!(next_track(Some(second), 9_500, after).percent, Some(200.0));
    }

    #[test]
    fn a_stale_baseline_gives_no_figure_and_a_close_one_is_kept() {
        let start = Instant::now();
        let old = track(1_000, start, Some(12.0));
        let late = start + CPU_BASELINE_FRESH + Duration::from_millis(1);
        assert_eq!(next_track(Some(old), 9_000, late), track(9_000, late, None));
        let at_limit = start + CPU_BASELINE_FRESH;
        assert_eq!(
            next_track(Some(old), 2_000, at_limit).percent,
            Some(10.0),
            "a baseline exactly as old as allowed still counts"
        );
        let close = start + CPU_SPAN_MIN - Duration::from_millis(1);
        assert_eq!(next_track(Some(old), 1_010, close), old);
        // A counter that went backwards (it cannot, for one process) reads as idle.
        let next = start + Duration::from_secs(1);
        assert_eq!(next_track(Some(old), 900, next).percent, Some(0.0));
    }

    #[test]
    fn figures_round_to_one_decimal() {
        let start = Instant::now();
        let first = track(0, start, None);
        let third = start + Duration::from_secs(3);
        assert_eq!(next_track(Some(first), 1_000, third).percent, Some(33.3));
    }
}
