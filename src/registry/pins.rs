//! Pinned processes: a pidfd held for every process that passed layers 1–2, so later readings of
//! any record naming it need no `/proc` read, and its exit is known as the kernel reports it
//! (see `exits`).
//!
//! Invariants kept here:
//! - A pidfd is opened before the start token is compared, as the signal path does: if the token
//!   read after opening matches, the recorded process held the pid throughout, so the pidfd names
//!   that very process. A held pidfd that is not readable is layers 1–2's `Alive` for every record
//!   naming that pid and token. Readable or not is asked of the kernel at each reading: every
//!   held pidfd is in a level-triggered epoll set whose ready list is the exited ones (a pidfd
//!   that could not join it is polled).
//! - A readable pidfd is the exit of the whole thread group (a zombie counts): `Gone`. The key then
//!   stays as exited, its descriptor closed, until no record names it. A reused pid has another
//!   start token, so another key: it is judged afresh and never inherits a verdict.
//! - Anything else reads `/proc` exactly as before: pidfds unavailable (before Linux 5.3, or
//!   refused by seccomp), no descriptor to spare, a token that cannot be compared, a failed poll.
//! - A pin that no record of a whole-directory scan names, and that no reading named since that
//!   pass began, is dropped as the scan ends: a removed record's pin goes within one pass.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use rustix::buffer::spare_capacity;
use rustix::event::{PollFd, PollFlags, Timespec, epoll};
use rustix::io::Errno;
use rustix::process::{PidfdFlags, Resource};
use tokio::sync::Notify;

use super::process_key::{ExitedProcess, ProcessKey};
use crate::running::{self, MAX_CONCURRENT_PROBES, ProcessState, RunningRecord};

/// How many pidfds one `poll` asks about at most: the table stays locked meanwhile, and `poll`
/// refuses more descriptors than the open-files limit (one pidfd may be asked for many records).
const POLLED_AT_ONCE: usize = 64;

/// Descriptors never spent on pins until told otherwise ([`Pins::reserve`]): one per door probe
/// in flight and the server's default connection cap.
const DEFAULT_RESERVE: u64 = MAX_CONCURRENT_PROBES as u64 + 1024;
/// Descriptors kept besides every reserve: files, the runtime, the watch.
const SPARE_DESCRIPTORS: u64 = 64;

/// How many exits one wake-up takes from the kernel at most; the rest come on the next.
pub(super) const EXITS_PER_READ: usize = 256;

#[derive(Debug)]
enum Pin {
    /// The pidfd, its id in the epoll sets, and whether it is in the set of exits readings
    /// take (else a reading polls it).
    Held {
        pidfd: OwnedFd,
        id: u64,
        in_exited_set: bool,
    },
    /// The process exited; its descriptor is closed.
    Exited,
}

#[derive(Debug)]
struct Entry {
    pin: Pin,
    /// The latest whole-directory pass in which a reading (or the pass's scan) named this
    /// process.
    named_in: u64,
}

#[derive(Debug, Default)]
struct Table {
    entries: HashMap<ProcessKey, Entry>,
    /// The key of each held pidfd, by its id in the epoll set.
    ids: HashMap<u64, ProcessKey>,
    next_id: u64,
    /// Whole-directory passes begun so far: the number of the latest.
    generation: u64,
    /// Exits a reading found (and closed the pidfd of) while an exit watch runs: closing it
    /// took the kernel's report out of the epoll set, so the watch takes them from here.
    closed_exits: Vec<ProcessKey>,
}

/// The table of pinned processes, shared by every reading the registry makes.
#[derive(Debug)]
pub(super) struct Pins {
    table: Mutex<Table>,
    /// Every held pidfd is in it (one-shot, readable), for the exit watch; `None` when it could
    /// not be made, and exits are then seen at the next reading.
    epoll: Option<Arc<OwnedFd>>,
    /// Every held pidfd is in it too (level-triggered, readable), for readings: what it reports
    /// ready are the exited processes, so a reading of thousands of pins asks the kernel once
    /// rather than once a pin. `None` when it could not be made: readings then poll each pin.
    exited_set: Option<OwnedFd>,
    /// Set once `pidfd_open` is found unavailable: every reading goes to `/proc` from then on.
    unavailable: OnceLock<Errno>,
    /// The most pidfds held at once, so probes and connections keep their descriptors.
    budget: AtomicUsize,
    /// Whether running out of descriptors for pins was logged already.
    out_of_descriptors: AtomicBool,
    /// Exit watches running ([`super::ProcessExits`]); exits closed by readings are kept for
    /// them only while there is one.
    watches: AtomicUsize,
    /// Woken when a reading keeps a closed exit for the watch.
    exit_closed: Notify,
}

impl Pins {
    /// An empty table, its budget taken from the open-files limit as it is now (so raise the
    /// limit first).
    pub(super) fn new() -> Self {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)
            .inspect_err(|errno| {
                tracing::warn!(%errno, "cannot make an epoll set: exits are seen at the next pass");
            })
            .ok()
            .map(Arc::new);
        let exited_set = epoll::create(epoll::CreateFlags::CLOEXEC).ok();
        Self {
            table: Mutex::default(),
            epoll,
            exited_set,
            unavailable: OnceLock::new(),
            budget: AtomicUsize::new(pin_budget(DEFAULT_RESERVE)),
            out_of_descriptors: AtomicBool::new(false),
            watches: AtomicUsize::new(0),
            exit_closed: Notify::new(),
        }
    }

    /// Layers 1–2 for `record` from its process's pin alone: `None` when it has none (or its
    /// poll failed), and [`Pins::state`] must read `/proc`.
    ///
    /// Never blocks (one `poll` with no wait), so async workers may call it.
    pub(super) fn pinned_state(&self, record: &RunningRecord) -> Option<ProcessState> {
        self.known(self.pinnable(record)?)
    }

    /// [`Pins::pinned_state`] of every record in `records`, in order: the table is locked and
    /// the pidfds polled once per [`POLLED_AT_ONCE`] records, not once per record.
    pub(super) fn pinned_states(
        &self,
        records: &[Arc<RunningRecord>],
    ) -> Vec<Option<ProcessState>> {
        let mut states = Vec::with_capacity(records.len());
        for chunk in records.chunks(POLLED_AT_ONCE) {
            let keys: Vec<Option<ProcessKey>> = chunk.iter().map(|r| self.pinnable(r)).collect();
            states.extend(self.known_all(&keys));
        }
        states
    }

    /// [`Pins::state`] of every record in `records`, in order: the pins first, all at once,
    /// then `/proc` for each record they cannot answer for.
    ///
    /// Blocking (syscalls and perhaps `/proc` reads); call it off async workers.
    pub(super) fn states(&self, records: &[Arc<RunningRecord>]) -> Vec<ProcessState> {
        self.pinned_states(records)
            .into_iter()
            .zip(records)
            .map(|(pinned, record)| pinned.unwrap_or_else(|| self.state(record)))
            .collect()
    }

    /// Layers 1–2 for `record`: from its process's pin when there is one, else read from `/proc`
    /// with the process pinned first, and kept pinned if it reads `Alive`.
    ///
    /// Blocking (syscalls and perhaps a `/proc` read); call it off async workers.
    pub(super) fn state(&self, record: &RunningRecord) -> ProcessState {
        let Some(key) = self.pinnable(record) else {
            return running::process_state(record);
        };
        if let Some(known) = self.known(key) {
            return known;
        }
        let pidfd = self.open(record.pid);
        let state = running::process_state(record);
        if let (Some(pidfd), ProcessState::Alive) = (pidfd, &state) {
            self.hold(key, pidfd);
        }
        state
    }

    /// The key `record`'s process would be pinned under; `None` when it cannot be pinned (pidfds
    /// unavailable, or a record no process could match).
    fn pinnable(&self, record: &RunningRecord) -> Option<ProcessKey> {
        if self.unavailable.get().is_some() {
            return None;
        }
        ProcessKey::of(record)
    }

    /// Begin a whole-directory pass: readings from now on name pins as this pass's. Answers
    /// the pass's number, for [`Pins::sweep`] once its scan is read.
    pub(super) fn begin_pass(&self) -> u64 {
        let mut table = self.lock();
        table.generation += 1;
        table.generation
    }

    /// End the scan of pass `began`, which found `records`: drop every pin that none of them
    /// names and no reading named since the pass began. A removed record's pin goes within the
    /// pass that finds the record gone; a pin a concurrent reading (of a record written since
    /// this scan) named stays.
    pub(super) fn sweep(&self, began: u64, records: &[Arc<RunningRecord>]) {
        let named: Vec<ProcessKey> = records.iter().filter_map(|r| self.pinnable(r)).collect();
        let watched = self.watches.load(Ordering::Acquire) > 0;
        let mut table = self.lock();
        let Table {
            entries,
            ids,
            closed_exits,
            ..
        } = &mut *table;
        for key in &named {
            if let Some(entry) = entries.get_mut(key) {
                entry.named_in = entry.named_in.max(began);
            }
        }
        entries.retain(|key, entry| {
            let keep = entry.named_in >= began;
            if let (false, Pin::Held { pidfd, id, .. }) = (keep, &entry.pin) {
                ids.remove(id);
                // Passes begun back to back can drop a pin still named: an exit it holds
                // unread must not go with its descriptor.
                if watched && has_exited(pidfd) == Some(true) {
                    closed_exits.push(*key);
                }
            }
            keep
        });
        let closed = !table.closed_exits.is_empty();
        drop(table);
        if closed {
            self.exit_closed.notify_one();
        }
    }

    /// The epoll set of held pidfds, unless pidfds or the set are unavailable.
    pub(super) fn epoll(&self) -> Option<&OwnedFd> {
        if self.unavailable.get().is_some() {
            return None;
        }
        self.epoll.as_deref()
    }

    /// The processes whose pidfds have these ids in the epoll set (ids of pins dropped since
    /// are skipped).
    pub(super) fn exited(&self, ids: impl Iterator<Item = u64>) -> Vec<ExitedProcess> {
        let table = self.lock();
        ids.filter_map(|id| table.ids.get(&id))
            .map(|key| ExitedProcess::new(*key))
            .collect()
    }

    /// How many pidfds are held now.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.lock().ids.len()
    }

    /// What the pin of `key` says, marking it named; `None` when there is no pin or its poll
    /// failed (then `/proc` decides).
    fn known(&self, key: ProcessKey) -> Option<ProcessState> {
        self.known_all(&[Some(key)]).pop().flatten()
    }

    /// What the pin of each of `keys` says (`None` for no key, no pin, or a failed poll), each
    /// marked named. Every pin whose process exited is found first, all at once (see
    /// [`Pins::close_exited`]); a held pin outside that set is polled, all of them in one call.
    fn known_all(&self, keys: &[Option<ProcessKey>]) -> Vec<Option<ProcessState>> {
        let watched = self.watches.load(Ordering::Acquire) > 0;
        let mut table = self.lock();
        let mut closed = self.close_exited(&mut table, watched);
        // Whether each key's process has exited, by its pin: `None` for no pin or no answer.
        let exited: Vec<Option<bool>> = {
            // Each key's held pidfd, looked up once, and whether it is in the exited set.
            let held: Vec<Option<(&OwnedFd, bool)>> = keys
                .iter()
                .map(|key| match table.entries.get(key.as_ref()?)?.pin {
                    Pin::Held {
                        ref pidfd,
                        in_exited_set,
                        ..
                    } => Some((pidfd, in_exited_set)),
                    Pin::Exited => None,
                })
                .collect();
            let mut polled: Vec<PollFd<'_>> = held
                .iter()
                .flatten()
                .filter(|(_, in_exited_set)| !in_exited_set)
                .map(|(pidfd, _)| PollFd::new(*pidfd, PollFlags::IN))
                .collect();
            let mut answers = have_exited(&mut polled).into_iter();
            held.iter()
                .map(|held| match (*held)? {
                    // Still held after the exited were closed: not exited when the set was read.
                    (_, true) => Some(false),
                    (_, false) => answers.next().flatten(),
                })
                .collect()
        };
        let generation = table.generation;
        let Table {
            entries,
            ids,
            closed_exits,
            ..
        } = &mut *table;
        let states = keys
            .iter()
            .zip(exited)
            .map(|(key, exited)| {
                let key = (*key)?;
                let entry = entries.get_mut(&key)?;
                entry.named_in = generation;
                let Pin::Held { id, .. } = &entry.pin else {
                    return Some(gone(key));
                };
                if !exited? {
                    return Some(ProcessState::Alive);
                }
                ids.remove(id);
                entry.pin = Pin::Exited;
                if watched {
                    closed_exits.push(key);
                    closed = true;
                }
                Some(gone(key))
            })
            .collect();
        drop(table);
        if closed {
            self.exit_closed.notify_one();
        }
        states
    }

    /// Turn every held pin the exited set reports readable into an exited one; answers whether
    /// any exit was kept for the watch.
    ///
    /// Closing a pidfd takes it out of both epoll sets (it is never duplicated, so this is the
    /// last descriptor of its open file), and with it any report the watch has not read yet:
    /// the watch is told here instead. Closing is also what lets the next read of the set (which
    /// keeps reporting a readable pidfd until then) get to the others.
    fn close_exited(&self, table: &mut Table, watched: bool) -> bool {
        let Some(set) = &self.exited_set else {
            return false;
        };
        // Nothing exited, the usual answer, is known from one poll of the set: no buffer is
        // made for its events.
        if have_exited(&mut [PollFd::new(set, PollFlags::IN)]) == [Some(false)] {
            return false;
        }
        let mut closed = false;
        loop {
            let Ok(ready) = take_ready(set) else {
                return closed;
            };
            let mut progressed = false;
            for id in &ready {
                let Some(key) = table.ids.remove(id) else {
                    continue;
                };
                progressed = true;
                if let Some(entry) = table.entries.get_mut(&key) {
                    entry.pin = Pin::Exited;
                }
                if watched {
                    table.closed_exits.push(key);
                    closed = true;
                }
            }
            // A set that keeps reporting what is no pin any more would never run dry.
            if ready.len() < EXITS_PER_READ || !progressed {
                return closed;
            }
        }
    }

    /// Count an exit watch in (`true`) or out, so readings keep the exits they close for it.
    pub(super) fn watching(&self, started: bool) {
        if started {
            self.watches.fetch_add(1, Ordering::AcqRel);
        } else if self.watches.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The last watch left; under the lock readings push under, and only if no watch
            // started meanwhile (it would be owed what is kept).
            let mut table = self.lock();
            if self.watches.load(Ordering::Acquire) == 0 {
                table.closed_exits.clear();
            }
        }
    }

    /// The exits readings closed since the last call, taken.
    pub(super) fn take_closed_exits(&self) -> Vec<ExitedProcess> {
        let mut table = self.lock();
        table
            .closed_exits
            .drain(..)
            .map(ExitedProcess::new)
            .collect()
    }

    /// Resolves once a reading has kept a closed exit for the watch (at once if one did since
    /// the last wait). Cancel-safe.
    pub(super) async fn exit_closed(&self) {
        self.exit_closed.notified().await;
    }

    /// A pidfd for `pid`, or `None` (reading `/proc` will decide), noting why once in the log.
    fn open(&self, pid: u32) -> Option<OwnedFd> {
        let checked = running::checked_pid(pid)?;
        match rustix::process::pidfd_open(checked, PidfdFlags::empty()) {
            Ok(pidfd) => Some(pidfd),
            // Not on this kernel, or refused by a seccomp filter (pidfd_open itself checks no
            // permission): no pidfd will ever be had.
            Err(errno @ (Errno::NOSYS | Errno::PERM | Errno::ACCESS)) => {
                if self.unavailable.set(errno).is_ok() {
                    tracing::warn!(
                        %errno,
                        "pidfds are unavailable (pidfd_open failed): layers 1–2 read /proc on every pass, and exits are seen at the next pass"
                    );
                }
                None
            }
            Err(errno @ (Errno::MFILE | Errno::NFILE)) => {
                self.out_of_descriptors(&format!("pidfd_open failed: {errno}"));
                None
            }
            // No such process (ESRCH), or a thread's id (EINVAL, ENOENT): `/proc` tells.
            Err(_) => None,
        }
    }

    /// Keep `descriptors` (door probes in flight and the server's connections) out of the pins'
    /// budget, in place of the default reserve, under the open-files limit as it is now.
    /// Processes pinned already stay pinned.
    pub(super) fn reserve(&self, descriptors: u64) {
        self.budget
            .store(pin_budget(descriptors), Ordering::Relaxed);
    }

    /// Keep `pidfd` as the pin of `key`, unless another reading pinned it first or the budget
    /// is spent (then it is closed, and `/proc` is read for this process next time).
    fn hold(&self, key: ProcessKey, pidfd: OwnedFd) {
        let mut table = self.lock();
        if matches!(
            table.entries.get(&key),
            Some(Entry {
                pin: Pin::Held { .. },
                ..
            })
        ) {
            return;
        }
        let budget = self.budget.load(Ordering::Relaxed);
        if table.ids.len() >= budget {
            drop(table);
            self.out_of_descriptors(&format!("{budget} processes are pinned already"));
            return;
        }
        let id = table.next_id;
        table.next_id += 1;
        if let Some(epoll) = &self.epoll {
            let watched = epoll::EventFlags::IN | epoll::EventFlags::ONESHOT;
            if let Err(errno) = epoll::add(epoll, &pidfd, epoll::EventData::new_u64(id), watched) {
                tracing::debug!(%errno, pid = key.pid, "cannot watch a pidfd: its exit is seen at the next pass");
            }
        }
        let in_exited_set = self.exited_set.as_ref().is_some_and(|set| {
            epoll::add(
                set,
                &pidfd,
                epoll::EventData::new_u64(id),
                epoll::EventFlags::IN,
            )
            .is_ok()
        });
        table.ids.insert(id, key);
        let named_in = table.generation;
        table.entries.insert(
            key,
            Entry {
                pin: Pin::Held {
                    pidfd,
                    id,
                    in_exited_set,
                },
                named_in,
            },
        );
    }

    fn out_of_descriptors(&self, why: &str) {
        if !self.out_of_descriptors.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "cannot pin every live process ({why}; pins may hold {} descriptors, the rest of the open-files limit is kept for door probes and connections): the others are read through /proc on every pass; raise the limit (ulimit -n, LimitNOFILE=) to pin them all",
                self.budget.load(Ordering::Relaxed)
            );
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // The table stays consistent at every point a panic could interrupt it.
        self.table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The evidence of a pinned process's exit. Not "no process holds the pid": by the time it is
/// read, another process may.
/// The ids of the pidfds the epoll set reports readable now, at most [`EXITS_PER_READ`];
/// never waits.
pub(super) fn take_ready(epoll: &OwnedFd) -> Result<Vec<u64>, Errno> {
    let no_wait = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // Made for each read and turned into plain ids: an epoll event holds a pointer-sized union,
    // which would keep the watch from moving between threads.
    let mut events = Vec::with_capacity(EXITS_PER_READ);
    epoll::wait(epoll, spare_capacity(&mut events), Some(&no_wait))?;
    Ok(events
        .iter()
        .map(|event| {
            // Copied out: the event is a packed struct.
            let data = event.data;
            data.u64()
        })
        .collect())
}

fn gone(key: ProcessKey) -> ProcessState {
    ProcessState::Gone {
        reason: running::reason_exited(key.pid),
    }
}

/// Whether the process `pidfd` names has exited; `None` when the poll could not tell.
fn has_exited(pidfd: &OwnedFd) -> Option<bool> {
    have_exited(&mut [PollFd::new(pidfd, PollFlags::IN)])
        .pop()
        .flatten()
}

/// [`has_exited`] of each pidfd in `polled`, in one `poll` with no wait; all `None` when it
/// failed.
fn have_exited(polled: &mut [PollFd<'_>]) -> Vec<Option<bool>> {
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    if polled.is_empty() || rustix::event::poll(polled, Some(&now)).is_err() {
        return vec![None; polled.len()];
    }
    polled
        .iter()
        .map(|pidfd| {
            let revents = pidfd.revents();
            if revents.is_empty() {
                Some(false)
            // Readable once the thread group has exited; newer kernels add POLLHUP once reaped.
            } else if revents.intersects(PollFlags::IN | PollFlags::HUP) {
                Some(true)
            } else {
                None
            }
        })
        .collect()
}

/// How many pidfds may be held: the open-files limit less `reserve` (probes and connections)
/// and [`SPARE_DESCRIPTORS`]. Under a low limit a quarter of it still pins (a test harness's
/// 1,024 pins 256), and the rest keeps the sockets.
fn pin_budget(reserve: u64) -> usize {
    let soft = rustix::process::getrlimit(Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    budget_under(soft, reserve)
}

/// [`pin_budget`] under a soft open-files limit of `soft`.
fn budget_under(soft: u64, reserve: u64) -> usize {
    let reserved = reserve
        .saturating_add(SPARE_DESCRIPTORS)
        .min(soft - soft / 4);
    usize::try_from(soft - reserved).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests;
