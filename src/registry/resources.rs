//! What each confirmed process costs (CPU, memory, threads), read with `sysinfo` for the pids
//! that passed layers 1–2 and for no other.
//!
//! Invariants kept here:
//! - Only the pids of readings whose process is `Alive` are read (`ProcessesToUpdate::Some`),
//!   never the whole process table, and only the fields the figures need.
//! - A figure belongs to the process layers 1–2 confirmed: they are read again after the
//!   sample (through the pins, so a held pidfd answers without `/proc`), and a process that is
//!   not the same one then gets no figure. A process cannot exit and come back, so confirmed
//!   before and after means the sample in between was of it.
//! - `cpu_percent` is measured by the registry itself, per process (pid and start time), over
//!   the time since its previous sample of that process: one state for every caller, so one
//!   caller's sample never skews another's figure, and a reused pid never inherits a baseline.
//! - Many processes are read in shards side by side (a pid always in the same shard, whose
//!   `sysinfo` state knows it), and `sysinfo` keeps at most [`KEPT_STAT_FILES`]-worth of
//!   `/proc/<pid>/stat` files open, so pins and door probes keep the descriptors they are
//!   budgeted.

use std::collections::{HashMap, HashSet};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, MutexGuard, Once, PoisonError};
use std::time::{Duration, Instant};

use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};

use super::pins::ProcessKey;
use super::{Reading, Registry, blocking};
use crate::running::{ProcessState, RunningRecord};

/// A previous sample older than this gives no `cpu_percent`: a figure averaged over minutes
/// would pass for the process's current load.
pub const CPU_BASELINE_FRESH: Duration = Duration::from_secs(10);

/// Two samples closer than this measure CPU too coarsely (the kernel counts it in ticks of
/// 10 ms): the later one reports the figure of the earlier and keeps its baseline.
pub const CPU_SPAN_MIN: Duration = Duration::from_millis(100);

/// Past this many processes a shard's `sysinfo` state remembers beyond the ones sampled lately
/// (twice theirs, plus this), it is made anew, so processes that left the registry are not kept.
const FORGOTTEN_SLACK: usize = 64;

/// The most `/proc/<pid>/stat` files `sysinfo` keeps open to read again (cheaper than opening
/// each anew): at most this many, and at most a sixteenth of the open-files limit.
const KEPT_STAT_FILES: usize = 1024;

/// At most this many shards read side by side (one a core).
const MAX_SHARDS: usize = 4;

/// Fewer processes than this are read on the calling thread alone: a thread costs more.
const PROCESSES_PER_SHARD: usize = 64;

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

/// One process's counters as `sysinfo` read them.
#[derive(Debug, Clone, Copy)]
struct Counters {
    cpu_time_ms: u64,
    rss_bytes: u64,
    threads: usize,
}

/// The registry's sampling state, shared by every caller.
#[derive(Debug)]
pub(super) struct ResourceSampler {
    /// `sysinfo`'s state of each shard: it keeps each process it read, to read it again faster.
    shards: Vec<Mutex<Option<System>>>,
    /// The CPU baseline of each process sampled within [`CPU_BASELINE_FRESH`].
    tracks: Mutex<HashMap<ProcessKey, CpuTrack>>,
}

impl Default for ResourceSampler {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        Self {
            shards: (0..cores.clamp(1, MAX_SHARDS))
                .map(|_| Mutex::default())
                .collect(),
            tracks: Mutex::default(),
        }
    }
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
    /// Read the counters of `pids` (only these); a pid that could not be read is absent.
    ///
    /// Blocking (`/proc` reads); call it off async workers.
    fn read(&self, pids: &[Pid]) -> HashMap<u32, Counters> {
        static FEW_FILES: Once = Once::new();
        FEW_FILES.call_once(|| {
            let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
                .current
                .unwrap_or(u64::MAX);
            let kept = usize::try_from(soft / 16).unwrap_or(usize::MAX);
            sysinfo::set_open_files_limit(kept.min(KEPT_STAT_FILES));
        });
        let shards = self
            .shards
            .len()
            .min(pids.len().div_ceil(PROCESSES_PER_SHARD))
            .max(1);
        let of_shard = |shard: usize| -> Vec<Pid> {
            let in_shard = |pid: &&Pid| pid.as_u32() as usize % shards == shard;
            pids.iter().filter(in_shard).copied().collect()
        };
        if shards == 1 {
            return self.read_shard(0, &of_shard(0));
        }
        std::thread::scope(|scope| {
            let others: Vec<_> = (1..shards)
                .map(|shard| {
                    let pids = of_shard(shard);
                    scope.spawn(move || self.read_shard(shard, &pids))
                })
                .collect();
            let mut counters = self.read_shard(0, &of_shard(0));
            for other in others {
                // A shard that panicked read nothing: its processes get no figure.
                counters.extend(other.join().unwrap_or_default());
            }
            counters
        })
    }

    /// [`ResourceSampler::read`] of the pids of one shard, with that shard's `sysinfo` state.
    fn read_shard(&self, shard: usize, pids: &[Pid]) -> HashMap<u32, Counters> {
        if pids.is_empty() {
            return HashMap::new();
        }
        let mut system = self.shards[shard]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let system = system.get_or_insert_with(System::new);
        system.refresh_processes_specifics(
            ProcessesToUpdate::Some(pids),
            true,
            ProcessRefreshKind::nothing()
                .with_cpu()
                .with_memory()
                .with_tasks(),
        );
        pids.iter()
            .filter_map(|pid| {
                let process = system.process(*pid)?;
                // No task list: a thread's id, not a process's, or its list could not be read.
                // The list leaves out the main thread, whose id is the pid.
                let threads = process.tasks()?.len() + 1;
                Some((
                    pid.as_u32(),
                    Counters {
                        cpu_time_ms: process.accumulated_cpu_time(),
                        rss_bytes: process.memory(),
                        threads,
                    },
                ))
            })
            .collect()
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
        let kept = tracks.len();
        drop(tracks);
        for shard in &self.shards {
            let mut system = shard.lock().unwrap_or_else(PoisonError::into_inner);
            if system
                .as_ref()
                .is_some_and(|system| system.processes().len() > 2 * kept + FORGOTTEN_SLACK)
            {
                *system = None;
            }
        }
        figures
    }

    fn tracks(&self) -> MutexGuard<'_, HashMap<ProcessKey, CpuTrack>> {
        // Every write leaves the map whole: a poisoned lock still holds a usable one.
        self.tracks.lock().unwrap_or_else(PoisonError::into_inner)
    }
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
            let pids: Vec<Pid> = confirmed
                .iter()
                .flatten()
                .filter(|(key, _)| seen.insert(key.pid))
                .map(|(key, _)| Pid::from_u32(key.pid))
                .collect();
            let counters = sampler.read(&pids);
            let at = Instant::now();
            // Layers 1–2 again, for the records whose process was read.
            let read: Vec<(ProcessKey, Arc<RunningRecord>)> = confirmed
                .iter()
                .flatten()
                .filter(|(key, _)| counters.contains_key(&key.pid))
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
                    .filter_map(|key| Some((*key, *counters.get(&key.pid)?))),
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
