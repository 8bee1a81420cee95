//! The verification loop: a first picture, then a pass on every tick and every nudge of the
//! directory watch, each door's recheck when it falls due ([`super::recheck`]), the exits of
//! pinned processes as the kernel reports them, and the probe answers as they come in. Each
//! step reads (async I/O), judges ([`super::judge`], pure) and follows up (probes, prunes).
//!
//! Invariants:
//! - A step's events are published as one batch under the hub's lock, then its prunes' as
//!   another: together within one step's share of the ring (see [`super::SNAPSHOT_OVER`]).
//! - Prunes are published after the picture changes that found them gone, so no listener sees a
//!   removal before its session's `changed` (or `added`) to gone.
//! - The first picture and every later pass are judged alike; the first differs only in asking
//!   every door and in keeping its sessions as the baseline rather than publishing them. Its
//!   gone records are pruned before any listener gets it, so no snapshot lists them.
//! - A directory that cannot be read leaves the picture exactly as it was.
//! - A process exit is a reason to read again, never a verdict: the records naming the process
//!   are re-read (layers 1–2) and judged like probe answers, pruned on that fresh evidence. With
//!   no exit watch (no pidfds), the periodic pass finds exits as it always did.
//! - Passes probe only doors whose record is new or rewritten (or whose process was just
//!   confirmed); every other door of a live process is asked on its own schedule, one
//!   `door_recheck` apart. The loop sleeps until the next door is due; it never polls.
//! - Every pass reads layers 1–2 afresh. A periodic pass reads the directory itself only when
//!   the watch cannot vouch that nothing changed since the last read ([`super::rescan`]);
//!   otherwise it judges the records that read found, less those pruned since. The first pass
//!   and every nudged pass read it.

use std::collections::HashSet;
use std::hash::BuildHasher;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::mpsc;

use super::hub::{Hub, HubState, closed};
use super::judge::{self, Pass, PassJudgement, PassRead, ProbeAnswer};
use super::picture::Picture;
use super::recheck::RecheckSchedule;
use super::rescan::{Rescans, SinceLastRead};
use super::session_records::SessionRecords;
use super::watch::DirectoryWatch;
use crate::registry::{ExitedProcess, ProcessExits, PruneDecision, Registry, RegistryError};
use crate::running::{Liveness, RECORD_SUFFIX, RunningRecord, Scan, UnreadableEntry};

/// How many periodic passes in a row (one interval apart) must fail to read the running
/// directory before the loop ends every stream.
///
/// One failed pass is often a blip (`EMFILE` in a burst of connections, a directory murmur is
/// recreating), and ending every stream on it would make every dashboard reconnect; a failure
/// still there an interval later is the directory's state. Only periodic passes count, so a
/// nudge just after a tick cannot make a blip look persistent.
pub const FAILED_PASSES_TO_END: u32 = 2;

/// Start the loop of the generation `state` holds on the monitor's loop thread (see
/// `loop_thread`); `state` is the hub's, locked by the caller.
pub(super) fn spawn(hub: Arc<Hub>, state: &mut HubState) {
    let generation = state.generation;
    state.loop_thread.run(Box::pin(run(hub, generation)));
}

/// One probe of the loop's, as it waits on its door's flight. `Sync` only so that the loop
/// (which it is part of) may be borrowed across an await.
type ProbeInFlight = std::pin::Pin<Box<dyn Future<Output = ProbeAnswer> + Send + Sync>>;

/// The loop's own bookkeeping, beside the hub.
struct Looper {
    hub: Arc<Hub>,
    /// How often a periodic pass reads the whole directory.
    interval: Duration,
    /// The record on disk for every session seen by the last scan (probed or not).
    on_disk: SessionRecords,
    /// Sessions whose file the last pass failed to read, carried over on the record last read.
    carried: HashSet<String>,
    /// The record each in-flight probe is probing, by session.
    probing: SessionRecords,
    /// The probes in flight, polled by the loop's own task: each waits on its door's flight
    /// (which runs as a task of its own), so a task of the loop's per probe would only add a
    /// wake-up of another thread per answer.
    probes: FuturesUnordered<ProbeInFlight>,
    /// When each door of a live process is asked again.
    recheck: RecheckSchedule,
    /// The kernel's word on pinned processes that exited; `None` without pidfds.
    exits: Option<ProcessExits>,
    watch: Option<DirectoryWatch>,
    changes: mpsc::Receiver<()>,
    changes_sender: mpsc::Sender<()>,
    /// How many periodic passes in a row failed to read the directory.
    failed_passes: u32,
    /// What the last read of the directory found, for the passes that do not read it.
    last_scan: Option<LastScan>,
    /// Whether the last pass that tried to read the directory could.
    last_read_succeeded: bool,
    rescans: Rescans,
}

/// The directory as the last read found it: its records shared with the registry's cache.
struct LastScan {
    records: Vec<Arc<RunningRecord>>,
    unreadable: Vec<UnreadableEntry>,
    /// A record of this read was pruned since. Until one is, every record it found is still
    /// the one on disk for its session (the pass that read it put them all there, and only
    /// prunes take any out), so none needs looking up.
    pruned_since: bool,
}

/// Whether a pass reads the directory or judges [`LastScan`] again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Directory,
    LastScan,
}

/// The loop of `generation`: a first picture, then passes until the last listener leaves, the
/// directory stays unreadable, or the registry shuts down.
async fn run(hub: Arc<Hub>, generation: u64) {
    let mut looper = Looper::new(Arc::clone(&hub), generation);
    let mut closing = hub.closing.subscribe();
    looper.rewatch();
    let first = tokio::select! {
        first = looper.pass(Pass::First, Source::Directory) => first.map_err(Some),
        // Its waiters see the registry closing and answer that; there is no failure to keep.
        () = closed(&mut closing) => Err(None),
    };
    {
        let mut state = hub.lock();
        match first {
            Ok(()) => state.ready = true,
            Err(failure) => {
                state.failure = failure.map(|error| (generation, Arc::new(error)));
                // Nobody subscribed to this loop's ring yet: stopping drops it unused.
                hub.stop(&mut state);
                return;
            }
        }
    }
    hub.bump_progress();
    looper.follow(&mut closing).await;
}

/// Resolves at `due`, or never when nothing is due.
async fn until(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due.into()).await,
        None => std::future::pending().await,
    }
}

/// The next exits the kernel reports, or never when there is no exit watch (no pidfds: the
/// periodic pass finds exits). Cancel-safe.
async fn next_exits(exits: &mut Option<ProcessExits>) -> Vec<ExitedProcess> {
    match exits {
        Some(exits) => exits.next().await,
        None => std::future::pending().await,
    }
}

impl Looper {
    /// The loop of `generation`, with the paces the hub holds now and nothing read yet.
    fn new(hub: Arc<Hub>, generation: u64) -> Self {
        let (changes_sender, changes) = mpsc::channel(1);
        let (interval, door_recheck, read_every) = {
            let state = hub.lock();
            (state.interval, state.door_recheck, state.read_every)
        };
        // Phases start at a random point, so registries started together do not probe in step.
        let phases_start = std::hash::RandomState::new().hash_one(generation);
        Self {
            // Taken before the first pass, so no exit of a process it pins goes unwatched.
            exits: hub.registry.process_exits(),
            hub,
            interval,
            on_disk: SessionRecords::default(),
            carried: HashSet::new(),
            probing: SessionRecords::default(),
            probes: FuturesUnordered::new(),
            recheck: RecheckSchedule::new(door_recheck, phases_start),
            watch: None,
            changes,
            changes_sender,
            failed_passes: 0,
            last_scan: None,
            last_read_succeeded: false,
            rescans: Rescans::every(read_every),
        }
    }

    /// After the first picture: a step for each tick, nudge, exit, recheck due and batch of
    /// probe answers, until the registry closes, the last listener leaves or the directory
    /// stays unreadable.
    async fn follow(mut self, closing: &mut tokio::sync::watch::Receiver<bool>) {
        let interval = self.interval;
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = closed(closing) => {
                    self.hub.stop(&mut self.hub.lock());
                    break;
                }
                _ = ticks.tick() => {
                    if self.stop_if_nobody_listens() || self.later_pass(true).await.is_break() {
                        break;
                    }
                }
                Some(()) = self.changes.recv() => {
                    if self.later_pass(false).await.is_break() {
                        break;
                    }
                }
                exited = next_exits(&mut self.exits) => self.apply_exits(exited).await,
                () = until(self.recheck.next_due()) => {
                    // Nobody to tell: no door is worth asking.
                    if self.stop_if_nobody_listens() {
                        break;
                    }
                    self.recheck_due();
                }
                Some(answer) = self.probes.next(), if !self.probes.is_empty() => {
                    // Every answer already in is one step, so doors that time out together
                    // make one batch of events (or one snapshot), not one each.
                    let mut answers = vec![answer];
                    while let Some(Some(answer)) = self.probes.next().now_or_never() {
                        answers.push(answer);
                    }
                    self.apply_answers(answers).await;
                }
            }
        }
        // Dropping a probe leaves its flight; the flight's task stops with its last waiter.
        self.probes.clear();
    }

    fn registry(&self) -> &Registry {
        &self.hub.registry
    }

    /// Stop when the last listener has left, under the lock a new listener takes: a newcomer
    /// either counts here or finds the loop stopped and starts another.
    fn stop_if_nobody_listens(&self) -> bool {
        let mut state = self.hub.lock();
        if state.listeners == 0 {
            self.hub.stop(&mut state);
            return true;
        }
        false
    }

    /// (Re)start the directory watch when there is none, it missed something, or the directory
    /// was replaced. `true` when the watch kept has seen every change since the last call.
    fn rewatch(&mut self) -> bool {
        let dir = self.registry().dir().to_path_buf();
        DirectoryWatch::renew(&mut self.watch, &dir, &self.changes_sender)
    }

    /// A pass after the first, periodic (every tick: it also renews the watch) or nudged by the
    /// watch. `Break` when this was the [`FAILED_PASSES_TO_END`]th periodic pass in a row that
    /// could not read the directory: the loop has ended every stream.
    async fn later_pass(&mut self, periodic: bool) -> ControlFlow<()> {
        // A nudge already waiting means the last read is stale: this pass reads, and answers it.
        let nudged = self.changes.try_recv().is_ok();
        let source = if periodic {
            let since = SinceLastRead {
                watch_unbroken: self.rewatch() && self.registry().watch_sees_every_change(),
                last_read_succeeded: self.last_read_succeeded,
            };
            if self.rescans.periodic_reads(since) || nudged {
                Source::Directory
            } else {
                Source::LastScan
            }
        } else {
            Source::Directory
        };
        let Err(error) = self.pass(Pass::Later, source).await else {
            self.failed_passes = 0;
            if periodic {
                self.hub.steps.send_modify(|n| *n += 1);
            }
            return ControlFlow::Continue(());
        };
        // Not evidence that any session ended: the picture is kept either way.
        self.watch = None;
        // A nudged pass that fails neither counts nor resets the count.
        if periodic {
            self.failed_passes += 1;
        }
        if self.failed_passes < FAILED_PASSES_TO_END {
            tracing::warn!(%error, "cannot scan the running directory; keeping the last picture");
            return ControlFlow::Continue(());
        }
        tracing::warn!(
            %error,
            passes = self.failed_passes,
            "the running directory stays unreadable; ending every event stream"
        );
        self.hub.end(&mut self.hub.lock(), error);
        ControlFlow::Break(())
    }

    /// One pass: read, judge, follow up. `Err` (the directory could not be read) leaves the
    /// picture exactly as it was.
    async fn pass(&mut self, pass: Pass, source: Source) -> Result<(), RegistryError> {
        self.hub.lock().feed.begin_step();
        let read = match (source, self.kept_scan()) {
            (Source::LastScan, Some(kept)) => {
                let read = self.read(pass, kept).await;
                if self.read_still_holds(&read).await {
                    read
                } else {
                    let scan = self.scan().await?;
                    self.read(pass, scan).await
                }
            }
            _ => {
                let scan = self.scan().await?;
                self.read(pass, scan).await
            }
        };
        let (on_disk, carried, to_probe, doors, gone) = {
            let mut state = self.hub.lock();
            let feed = &mut state.feed;
            feed.begin_batch();
            let PassJudgement {
                events,
                left,
                on_disk,
                to_probe,
                doors,
                gone,
                carried,
            } = judge::judge_pass(pass, read, &mut feed.picture, &self.on_disk, &self.probing);
            for event in events {
                feed.publish(event);
            }
            for departure in left {
                let note = self
                    .registry()
                    .take_removal(&departure.session_id)
                    .map(|note| (note.cause, note.evidence));
                feed.publish(departure.removed(note));
            }
            feed.flush();
            self.count_picture(&feed.picture);
            (on_disk, carried, to_probe, doors, gone)
        };
        self.on_disk = on_disk;
        self.carried = carried;
        let asked_now: HashSet<&str> = to_probe.iter().map(|r| r.session_id.as_str()).collect();
        self.recheck.follow(&doors, &asked_now, Instant::now());
        self.follow_up(to_probe, gone).await;
        Ok(())
    }

    /// Read the directory, and keep what it found for the passes that do not read it.
    async fn scan(&mut self) -> Result<Scan, RegistryError> {
        let scanned = self.registry().scan().await;
        self.last_read_succeeded = scanned.is_ok();
        self.last_scan = None;
        let scan = scanned?;
        self.rescans.read();
        self.last_scan = Some(LastScan {
            records: scan.records.clone(),
            unreadable: scan.unreadable.clone(),
            pruned_since: false,
        });
        Ok(scan)
    }

    /// The last read's findings, less the records pruned since (every other change since has
    /// nudged a pass that read the directory); `None` before any read.
    fn kept_scan(&self) -> Option<Scan> {
        let last = self.last_scan.as_ref()?;
        let records = if last.pruned_since {
            let still_on_disk = |record: &&Arc<RunningRecord>| {
                self.on_disk
                    .get(&record.session_id)
                    .is_some_and(|on_disk| Arc::ptr_eq(on_disk, record))
            };
            last.records.iter().filter(still_on_disk).cloned().collect()
        } else {
            last.records.clone()
        };
        Some(Scan {
            records,
            unreadable: last.unreadable.clone(),
        })
    }

    /// Whether a read of the last scan may be judged: every record it finds gone is still the
    /// file that scan read. A record replaced since (its inotify nudge not yet taken) must not
    /// be reported gone for its old process; the directory is read instead.
    async fn read_still_holds(&self, read: &PassRead) -> bool {
        let gone: Vec<Arc<RunningRecord>> = (read.readings.iter())
            .filter(|reading| matches!(reading.liveness, Some(Liveness::Gone { .. })))
            .map(|reading| Arc::clone(&reading.record))
            .collect();
        let count = gone.len();
        count == 0 || self.registry().still_the_files_read(gone).await.len() == count
    }

    /// Read layers 1–2 (and the doors, on the first pass) of every record `scan` found, and
    /// layers 1–2 again of the record last read for each file that failed to read.
    async fn read(&self, pass: Pass, scan: Scan) -> PassRead {
        let first = matches!(pass, Pass::First);
        let readings = self.registry().verify(scan.records, first).await;
        // A file nobody can read must not hide its process's death (nor a pid turned
        // unverified); the first pass has no record last read.
        let last_read: Vec<Arc<RunningRecord>> = scan
            .unreadable
            .iter()
            .filter(|entry| entry.why.is_read_failure())
            .filter_map(|entry| entry.file_name.strip_suffix(RECORD_SUFFIX))
            .filter_map(|id| self.on_disk.get(id).cloned())
            .collect();
        let last_read = self.registry().still_the_files_read(last_read).await;
        let carried = if first || last_read.is_empty() {
            Vec::new()
        } else {
            self.registry().verify(last_read, false).await
        };
        PassRead {
            readings,
            unreadable: scan.unreadable,
            carried,
        }
    }

    /// Probe what the judge left open, and prune what it found gone.
    async fn follow_up(&mut self, to_probe: Vec<Arc<RunningRecord>>, gone: Vec<String>) {
        self.start_probes(to_probe);
        self.prune(gone).await;
    }

    /// Ask again every door whose recheck is due, unless a probe of its record is in flight.
    fn recheck_due(&mut self) {
        let taken = self.recheck.take_due(Instant::now());
        let mut due = Vec::with_capacity(taken.len());
        for id in &taken {
            if let Some(record) = self.on_disk.get(id)
                && self.probing.get(id) != Some(record)
            {
                due.push(Arc::clone(record));
            }
        }
        self.start_probes(due);
    }

    /// Ask the doors of `records`, through the registry's one verification path (which reads
    /// layers 1–2 of them all at once).
    fn start_probes(&mut self, records: Vec<Arc<RunningRecord>>) {
        if records.is_empty() {
            return;
        }
        let readings = self.hub.registry.verify_each(&records);
        for (record, reading) in records.into_iter().zip(readings) {
            self.probing.insert(Arc::clone(&record));
            self.probes.push(Box::pin(async move {
                ProbeAnswer {
                    reading: reading.await,
                    probed: record,
                }
            }));
        }
    }

    /// Apply a batch of probe answers as one step, then prune what they found gone.
    async fn apply_answers(&mut self, answers: Vec<ProbeAnswer>) {
        for answer in &answers {
            let id = &answer.probed.session_id;
            if self.probing.get(id) == Some(&answer.probed) {
                self.probing.remove(id);
            }
        }
        self.apply_verdicts(answers).await;
    }

    /// Read again (layers 1–2) every record on disk that names a process the kernel says
    /// exited, and apply what they say as one step, as probe answers are.
    ///
    /// Only records whose file is still the one read: a file replaced since (or one that failed
    /// to read and was taken over by another writer) may name another process, and the old
    /// one's death says nothing of the session; the pass the change nudges judges it.
    async fn apply_exits(&mut self, exited: Vec<ExitedProcess>) {
        let named: Vec<Arc<RunningRecord>> = self
            .on_disk
            .records()
            .filter(|record| exited.iter().any(|process| process.names(record)))
            .cloned()
            .collect();
        let records = self.registry().still_the_files_read(named).await;
        if records.is_empty() {
            return;
        }
        let readings = self.registry().verify(records.clone(), false).await;
        let answers = records
            .into_iter()
            .zip(readings)
            .map(|(probed, reading)| ProbeAnswer { probed, reading })
            .collect();
        self.apply_verdicts(answers).await;
    }

    /// Judge verdicts on records read earlier as one step, then prune what they found gone.
    async fn apply_verdicts(&mut self, answers: Vec<ProbeAnswer>) {
        let gone = {
            let mut state = self.hub.lock();
            let feed = &mut state.feed;
            feed.begin_step();
            feed.begin_batch();
            let (events, gone) =
                judge::judge_answers(answers, &mut feed.picture, &self.on_disk, &self.carried);
            for event in events {
                feed.publish(event);
            }
            feed.flush();
            self.count_picture(&feed.picture);
            gone
        };
        self.prune(gone).await;
    }

    /// Hand `/metrics` the picture's counts, after every change to it: a death a pidfd reports
    /// shows there as soon as on `/events`, not a pass later.
    fn count_picture(&self, picture: &Picture) {
        (self.registry().tally()).pictured(picture.counts(), picture.unreadable());
    }

    /// Prune the records of `session_ids` on fresh evidence, and publish their removals as one
    /// batch of the step that found them gone. Until then the picture keeps them, as gone.
    async fn prune(&mut self, session_ids: Vec<String>) {
        let mut removed = Vec::new();
        for id in session_ids {
            match self.registry().prune_session(&id).await {
                Ok(PruneDecision::Removed { reason }) => {
                    let noted = self.registry().take_removal(&id).map(|note| note.cause);
                    self.on_disk.remove(&id);
                    if let Some(last) = &mut self.last_scan {
                        last.pruned_since = true;
                    }
                    self.recheck.leave(&id);
                    removed.push(judge::pruned(id, reason, noted));
                }
                // Rewritten for a live process since, or removed by someone else: the next
                // pass reports what is there.
                Ok(PruneDecision::Kept { .. }) | Err(RegistryError::NotFound(_)) => {}
                Err(error) => {
                    tracing::warn!(session_id = %id, %error, "cannot prune a gone session's record");
                }
            }
        }
        if removed.is_empty() {
            return;
        }
        let mut state = self.hub.lock();
        let feed = &mut state.feed;
        feed.begin_batch();
        for kind in removed {
            feed.picture.remove(kind.session_id());
            feed.publish(kind);
        }
        feed.flush();
        self.count_picture(&feed.picture);
    }
}

#[cfg(test)]
mod tests;
