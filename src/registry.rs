//! The registry's operations on one running directory, shared by the HTTP service and the CLI.
//!
//! Invariants kept here:
//! - Every blocking step (directory reads, `/proc` reads, signals) runs on tokio's blocking
//!   pool, with one exception: listing a directory on a local filesystem whose last scan
//!   found at most [`INLINE_SCAN_ENTRIES`] records and unreadable entries (some dozens of
//!   `lstat`s, `kill(pid, 0)`s and `/proc` reads, none of which waits on anything but the
//!   kernel) runs on the calling task, because the trip to the pool and back costs more than
//!   the work. A directory on a network or userspace filesystem (NFS, SMB, FUSE, 9P, …),
//!   where an `lstat` can wait on a server for as long as it likes, is always read on the
//!   pool, so a hung mount can stall requests but never the async workers.
//! - Reading changes nothing: [`Registry::sessions`] and [`Registry::session`] only scan.
//!   Records are removed only by the prune, signal and stop operations (which the live view
//!   in [`crate::monitor`] also calls, for records it finds gone).
//! - Removal happens on fresh evidence only. Pruning re-reads layers 1–2 right before it
//!   unlinks; a signal or stop prunes only when the kernel or layers 1–2 said the process is
//!   gone.
//! - Stops of one session are serialised, so two concurrent stops never race each other's
//!   escalation; the second finds the outcome of the first.
//! - A listing ([`Registry::sessions`]) is answered by a directory pass (scan and layers 1–2)
//!   that started after it was asked for. Listings that ask while a pass runs share the next
//!   pass, never the running one, so sharing saves work without making any answer older than
//!   a pass of its own would be (see `passes`).
//! - Every verification goes through one path ([`Registry::sessions`], [`Registry::session`],
//!   [`Registry::verify_records`], [`Registry::verify`]), where each record's door is probed
//!   single-flight: concurrent callers verifying the same record share the probe in flight,
//!   and nobody gets an answer from a probe that had already finished when they asked (see
//!   `flights`). Only [`Registry::card`] asks the door on its own, since it needs the card
//!   itself, not a verdict.

mod flights;
mod passes;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use std::time::{Duration, Instant};

use crate::private_fs::PrivateDirError;
use crate::running::{
    self, DoorProbe, Liveness, ProcessState, Pruned, RunningError, RunningRecord, SignalOutcome,
    UnreadableEntry, Verdict,
};
use flights::Flights;
use passes::SharedPasses;

/// A directory whose last scan found at most this many entries is read on the calling task
/// instead of the blocking pool (see the module's invariants).
pub const INLINE_SCAN_ENTRIES: usize = 32;

/// The longest a stop may wait between SIGTERM and SIGKILL.
pub const MAX_STOP_TIMEOUT: Duration = Duration::from_secs(300);
/// The wait between SIGTERM and SIGKILL when the caller names none (murmur's default).
pub const DEFAULT_STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a stop waits for the kernel to remove a process after SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(10);
/// How often a stop re-reads layers 1–2 while it waits for the process to go.
const STOP_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// What can go wrong in a registry operation.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// No record file exists for the session.
    #[error("no record for session {0}")]
    NotFound(String),
    /// The id cannot name a record file.
    #[error("invalid session id: expected 1 to 128 of A-Z a-z 0-9 _ -")]
    InvalidSessionId,
    /// The running module failed (the directory is unreadable, a file is not a record, …).
    #[error(transparent)]
    Running(#[from] RunningError),
    /// A blocking task panicked or was cancelled.
    #[error("an internal task failed: {0}")]
    Task(String),
}

/// What one directory pass gives every listing that waited for it: the `probe=false` listing,
/// or why the directory could not be read.
type PassResult = Result<Arc<Listing>, Arc<RegistryError>>;

/// A caller's own copy of an error a shared pass met, so each caller can own (and convert)
/// the error it is answered with. Every variant is copied as itself (an `io::Error` keeps its
/// errno, or its kind and message), so a copy maps to the same answer as the original.
pub(crate) fn copy_error(error: &RegistryError) -> RegistryError {
    let io = |cause: &std::io::Error| {
        cause.raw_os_error().map_or_else(
            || std::io::Error::new(cause.kind(), cause.to_string()),
            std::io::Error::from_raw_os_error,
        )
    };
    match error {
        RegistryError::NotFound(id) => RegistryError::NotFound(id.clone()),
        RegistryError::InvalidSessionId => RegistryError::InvalidSessionId,
        RegistryError::Task(what) => RegistryError::Task(what.clone()),
        RegistryError::Running(running) => RegistryError::Running(match running {
            RunningError::NoHome => RunningError::NoHome,
            RunningError::Dir(PrivateDirError::Insecure { path, problem }) => {
                RunningError::Dir(PrivateDirError::Insecure {
                    path: path.clone(),
                    problem: problem.clone(),
                })
            }
            RunningError::Dir(PrivateDirError::Io { path, cause }) => {
                RunningError::Dir(PrivateDirError::Io {
                    path: path.clone(),
                    cause: io(cause),
                })
            }
            RunningError::Io { path, cause } => RunningError::Io {
                path: path.clone(),
                cause: io(cause),
            },
            RunningError::DirUnavailable { path, why } => RunningError::DirUnavailable {
                path: path.clone(),
                why: why.clone(),
            },
            RunningError::InvalidSessionId(id) => RunningError::InvalidSessionId(id.clone()),
            RunningError::Unreadable(entry) => RunningError::Unreadable(entry.clone()),
            RunningError::NotGone(id) => RunningError::NotGone(id.clone()),
            RunningError::NotFromDisk(id) => RunningError::NotFromDisk(id.clone()),
        }),
    }
}

/// One record with what the layers said about it.
#[derive(Debug, Clone)]
pub struct Reading {
    /// The record as read.
    pub record: RunningRecord,
    /// Layers 1–2.
    pub process: ProcessState,
    /// All three layers; `None` when the door was not probed and layers 1–2 cannot decide.
    pub liveness: Option<Liveness>,
}

/// Every record in the directory, read, plus how many entries are not records.
#[derive(Debug)]
pub struct Listing {
    /// Newest session first.
    pub readings: Vec<Reading>,
    /// Entries that are not valid records.
    pub unreadable: Vec<UnreadableEntry>,
    /// The listing as a client receives it, once encoded ([`Listing::encoded`]).
    encoded: OnceLock<Bytes>,
}

impl Listing {
    fn new(readings: Vec<Reading>, unreadable: Vec<UnreadableEntry>) -> Self {
        Self {
            readings,
            unreadable,
            encoded: OnceLock::new(),
        }
    }

    /// This listing as `encode` makes it, made once: a listing shared by many callers (the
    /// `probe=false` one of a shared pass) is encoded by the first of them and the bytes are
    /// handed to the rest. The bytes are always this listing's own: the slot is private, it
    /// is filled from `self` only, and the readings cannot change while the listing is shared.
    pub fn encoded<E>(&self, encode: impl FnOnce(&Self) -> Result<Bytes, E>) -> Result<Bytes, E> {
        if let Some(bytes) = self.encoded.get() {
            return Ok(bytes.clone());
        }
        let bytes = encode(self)?;
        Ok(self.encoded.get_or_init(|| bytes).clone())
    }
}

/// The door probes in flight at one moment ([`Registry::probes_in_flight`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbesInFlight {
    /// Probes whose door has not answered yet: at most one per distinct record.
    pub probes: usize,
    /// Verifications waiting on them, summed over the probes.
    pub waiters: usize,
}

/// What a prune of one session did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PruneOutcome {
    /// The record was unlinked on this evidence.
    Pruned {
        /// The evidence.
        reason: String,
    },
    /// The process is alive or unverified; the record stays.
    Kept {
        /// What layers 1–2 said.
        process: ProcessState,
    },
}

/// What a prune of the whole directory did.
#[derive(Debug, Default)]
pub struct PruneReport {
    /// `(session_id, evidence)` for each record removed.
    pub pruned: Vec<(String, String)>,
    /// The unreadable entries removed.
    pub removed_unreadable: Vec<UnreadableEntry>,
}

/// The sessions left after a pruning pass over a listing ([`Registry::sessions_pruned`]).
#[derive(Debug)]
pub struct PrunedListing {
    /// Newest session first; none the pass pruned.
    pub readings: Vec<Reading>,
    /// What the pass removed.
    pub report: PruneReport,
}

/// Which signal to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalKind {
    /// SIGTERM: ask the capsule to finish.
    Term,
    /// SIGKILL: end it now.
    Kill,
}

impl SignalKind {
    /// The signal's conventional name, `SIGTERM` or `SIGKILL`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Term => "SIGTERM",
            Self::Kill => "SIGKILL",
        }
    }

    /// Parse `SIGTERM`/`TERM`/`SIGKILL`/`KILL`, in any case.
    pub fn parse(text: &str) -> Option<Self> {
        let upper = text.to_ascii_uppercase();
        match upper.strip_prefix("SIG").unwrap_or(&upper) {
            "TERM" => Some(Self::Term),
            "KILL" => Some(Self::Kill),
            _ => None,
        }
    }
}

/// What a signal request did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignalReport {
    /// The outcome.
    pub outcome: SignalOutcome,
    /// The record the signal was meant for.
    pub record: RunningRecord,
    /// For `AlreadyGone`, what the prune that followed did to the record.
    pub pruned: Option<RecordFate>,
}

/// What the prune after a signal or stop found the process gone did to its record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordFate {
    /// The record read was unlinked.
    Removed,
    /// Nothing was unlinked: the file was already gone, or another had replaced it.
    AlreadyGone,
    /// Unlinking failed; the record stays for the next prune.
    Kept {
        /// Why it could not be removed.
        error: String,
    },
}

impl RecordFate {
    /// What happened, as the end of a sentence: `the record was removed`, ….
    pub fn sentence(&self) -> String {
        match self {
            Self::Removed => "the record was removed".to_owned(),
            Self::AlreadyGone => "the record had already been removed or replaced".to_owned(),
            Self::Kept { error } => format!("the record could not be removed: {error}"),
        }
    }
}

/// How a stop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopOutcome {
    /// The process was ended by the signal named.
    Stopped {
        /// The last signal sent: SIGTERM if that sufficed, else SIGKILL.
        signal_sent: SignalKind,
    },
    /// The process was already gone before any signal was sent.
    AlreadyGone,
    /// Not ended: the process could not be confirmed, the kernel refused (EPERM), or it
    /// outlived the grace period after SIGKILL (an uninterruptible sleep).
    Refused {
        /// Why.
        reason: String,
        /// The signal the stop could not get through (sent but outlived, for SIGKILL's grace).
        signal: SignalKind,
        /// The last signal that was delivered before the stop gave up, if any.
        sent: Option<SignalKind>,
    },
}

/// What a stop request did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopReport {
    /// How it ended.
    pub outcome: StopOutcome,
    /// The record of the session that was stopped.
    pub record: RunningRecord,
    /// How long the stop waited for the process to go.
    pub waited: Duration,
    /// Once the process was found gone, what the prune that followed did to the record.
    pub pruned: Option<RecordFate>,
}

/// The registry over one running directory.
#[derive(Debug)]
pub struct Registry {
    door: DoorProbe,
    flights: Flights,
    /// The directory and what listings read it with (its cache is the monitor's scans' too).
    reader: PassReader,
    /// The directory passes listings share.
    passes: Arc<SharedPasses<PassResult>>,
    stopping: StopsInProgress,
    removals: RemovalNotes,
}

/// The stops in progress, by session id: each stop holds its session's lock for its whole run.
/// Shared with blocking tasks, so a prune can tell at the moment it unlinks whether a stop of
/// that session is under way.
type StopsInProgress = Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>;

/// Whether a stop of `session_id` is under way (its lock is held beyond the map's own copy).
fn is_stopping(stops: &StopsInProgress, session_id: &str) -> bool {
    stops
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(session_id)
        .is_some_and(|lock| Arc::strong_count(lock) > 1)
}

/// Why the registry itself removed a record, kept for the event stream to name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemovalCause {
    /// Pruned on the evidence that its process is gone.
    Pruned,
    /// A stop ended the process and the record went with it.
    Stopped,
}

/// One removal the registry made: what, why, on what evidence, and when.
#[derive(Debug, Clone)]
pub struct Removal {
    /// Why.
    pub cause: RemovalCause,
    /// The evidence (layers 1–2's reason).
    pub evidence: String,
    at: Instant,
}

/// How long a removal note waits to be taken before it is forgotten: the event stream takes
/// its notes within one pass, and nobody else reads them.
const REMOVAL_NOTE_LIFETIME: Duration = Duration::from_secs(60);

/// The removals the registry made lately, by session id. Shared with blocking tasks.
#[derive(Debug, Clone, Default)]
struct RemovalNotes(Arc<Mutex<HashMap<String, Removal>>>);

impl RemovalNotes {
    fn note(&self, session_id: &str, cause: RemovalCause, evidence: &str) {
        let mut notes = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Forget notes nobody took, so the map cannot grow while no event stream runs.
        notes.retain(|_, note| note.at.elapsed() < REMOVAL_NOTE_LIFETIME);
        notes.insert(
            session_id.to_owned(),
            Removal {
                cause,
                evidence: evidence.to_owned(),
                at: Instant::now(),
            },
        );
    }

    fn take(&self, session_id: &str) -> Option<Removal> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(session_id)
    }
}

/// Why a session has no card to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CardRefusal {
    /// The process is confirmed but the record names no door (a script capsule).
    NoDoor,
    /// The session is not live: what the layers said.
    NotLive {
        /// All three layers.
        liveness: Liveness,
        /// Layers 1–2.
        process: ProcessState,
    },
}

impl Registry {
    /// A registry over `dir` (normally [`running::running_dir`]'s answer), probing with `door`.
    pub fn new(dir: impl Into<PathBuf>, door: DoorProbe) -> Self {
        let dir = dir.into();
        Self {
            door,
            flights: Flights::default(),
            reader: PassReader {
                inline_scans: on_local_filesystem(&dir),
                dir,
                cache: Arc::default(),
                last_scan_entries: Arc::new(AtomicUsize::new(usize::MAX)),
            },
            passes: Arc::default(),
            stopping: StopsInProgress::default(),
            removals: RemovalNotes::default(),
        }
    }

    /// The running directory this registry reads.
    pub fn dir(&self) -> &Path {
        &self.reader.dir
    }

    /// Every record, verified (three layers when `probe`, else layers 1–2), newest first.
    ///
    /// Changes nothing on disk. The directory and layers 1–2 are read by a pass that starts
    /// after this call: concurrent listings share one such pass (see `passes`), and the
    /// `probe=false` listing it makes is handed to all of them as is. Doors are probed
    /// concurrently, at most the prober's limit at once, and a door already being probed for
    /// an identical record (by any caller) is not asked again: its probe's answer is shared.
    pub async fn sessions(&self, probe: bool) -> Result<Arc<Listing>, RegistryError> {
        // The reader is copied only by the caller that starts a pass, not by every caller.
        let lean = self
            .passes
            .run(|| self.reader.clone().pass(), pass_panicked)
            .await
            .map_err(|shared| copy_error(&shared))?;
        if !probe {
            return Ok(lean);
        }
        let (records, states) = lean
            .readings
            .iter()
            .map(|reading| (reading.record.clone(), reading.process.clone()))
            .unzip();
        let readings = self.read_all(records, states, true).await;
        Ok(Arc::new(Listing::new(readings, lean.unreadable.clone())))
    }

    /// One record, verified like [`Registry::sessions`]. Changes nothing on disk.
    pub async fn session(&self, session_id: &str, probe: bool) -> Result<Reading, RegistryError> {
        let (record, process) = self.read_with_process(session_id).await?;
        Ok(self.read_one(record, process, probe).await)
    }

    /// The record of `session_id` and what layers 1–2 say of it, in one trip to the pool.
    async fn read_with_process(
        &self,
        session_id: &str,
    ) -> Result<(RunningRecord, ProcessState), RegistryError> {
        if !running::is_valid_session_id(session_id) {
            return Err(RegistryError::InvalidSessionId);
        }
        let dir = self.reader.dir.clone();
        let id = session_id.to_owned();
        blocking(move || {
            let record = running::read_record(&dir, &id)?;
            let process = record.as_ref().map(running::process_state);
            Ok::<_, RegistryError>(record.zip(process))
        })
        .await??
        .ok_or_else(|| RegistryError::NotFound(session_id.to_owned()))
    }

    /// Every entry of the directory, read but not verified. Changes nothing on disk.
    pub async fn scan(&self) -> Result<running::Scan, RegistryError> {
        let dir = self.reader.dir.clone();
        let cache = Arc::clone(&self.reader.cache);
        blocking(move || running::scan_cached(&dir, &cache))
            .await?
            .map_err(Into::into)
    }

    /// Verify records already read: three layers when `probe`, else layers 1–2. Readings come
    /// back in the records' order.
    ///
    /// Layers 1–2 are read afresh; door probes are shared with every other caller verifying
    /// an identical record at the same moment.
    pub async fn verify_records(&self, records: Vec<RunningRecord>, probe: bool) -> Vec<Reading> {
        let states = running::process_state_off_workers(records.clone()).await;
        self.read_all(records, states, probe).await
    }

    /// The records among `records` whose file is still the very one each was read from
    /// ([`running::still_the_file_read`]); none when that cannot be looked at. Changes nothing.
    pub async fn still_the_files_read(&self, records: Vec<RunningRecord>) -> Vec<RunningRecord> {
        if records.is_empty() {
            return records;
        }
        blocking(move || {
            records
                .into_iter()
                .filter(running::still_the_file_read)
                .collect()
        })
        .await
        .unwrap_or_default()
    }

    /// Fetch the agent card a session's live door serves, verified to name the session.
    ///
    /// The card is the one the probe read (the extended card for an authenticated door), with
    /// every string that holds one of the record's secrets redacted. `Err` with the reason
    /// when the session is not live: its process is not confirmed, it has no door, or the door
    /// did not confirm the session.
    pub async fn card(
        &self,
        session_id: &str,
    ) -> Result<Result<serde_json::Value, CardRefusal>, RegistryError> {
        let (record, process) = self.read_with_process(session_id).await?;
        match running::settled_without_door(&record, process) {
            // Layers 1–2 decided: gone, unverified, or live without a door to ask.
            Ok(Verdict {
                liveness: Liveness::Live,
                ..
            }) => Ok(Err(CardRefusal::NoDoor)),
            Ok(Verdict { process, liveness }) => {
                Ok(Err(CardRefusal::NotLive { liveness, process }))
            }
            Err(process) => {
                Ok(self
                    .door
                    .card(&record)
                    .await
                    .map_err(|reason| CardRefusal::NotLive {
                        liveness: Liveness::Unreachable { reason },
                        process,
                    }))
            }
        }
    }

    /// The note of why the registry removed `session_id`'s record, if it did so lately; taken,
    /// so each removal is named once.
    pub fn take_removal(&self, session_id: &str) -> Option<Removal> {
        self.removals.take(session_id)
    }

    /// Verify one record already read (all three layers), sharing any probe in flight for an
    /// identical record with every other caller, exactly as [`Registry::sessions`] does.
    ///
    /// For a caller that holds a record from an earlier scan (a monitor comparing readings, say):
    /// layers 1–2 are read afresh, and the door is asked unless a probe of this very record is
    /// already in the air.
    pub async fn verify(&self, record: RunningRecord) -> Reading {
        let process = running::process_state_off_worker(record.clone()).await;
        self.read_one(record, process, true).await
    }

    /// How many door probes are in flight right now, and how many verifications wait on them
    /// (several callers verifying one record wait on one probe).
    pub fn probes_in_flight(&self) -> ProbesInFlight {
        let (probes, waiters) = self.flights.in_flight();
        ProbesInFlight { probes, waiters }
    }

    /// The verdicts for `records`, given what layers 1–2 said of each; the door is probed (when
    /// `probe`) only where they leave the verdict open.
    async fn read_all(
        &self,
        records: Vec<RunningRecord>,
        states: Vec<ProcessState>,
        probe: bool,
    ) -> Vec<Reading> {
        if !probe {
            return records.into_iter().zip(states).map(lean_reading).collect();
        }
        // Every flight is joined (and so started) before any answer is awaited: the probes run
        // side by side, and awaiting them in order costs only the slowest one.
        let pending: Vec<_> = records
            .into_iter()
            .zip(states)
            .map(|(record, process)| self.start_reading(record, process))
            .collect();
        let mut readings = Vec::with_capacity(pending.len());
        for pending in pending {
            readings.push(pending.finish().await);
        }
        readings
    }

    /// [`Registry::read_all`] of one record.
    async fn read_one(&self, record: RunningRecord, process: ProcessState, probe: bool) -> Reading {
        if !probe {
            return lean_reading((record, process));
        }
        self.start_reading(record, process).finish().await
    }

    /// The verdict where layers 1–2 settle it, else the probe of the door joined.
    fn start_reading(&self, record: RunningRecord, process: ProcessState) -> PendingReading {
        match running::settled_without_door(&record, process) {
            Ok(verdict) => PendingReading {
                record,
                process: verdict.process,
                verdict: Err(verdict.liveness),
            },
            Err(process) => {
                let flight = self.flights.join(&record, &self.door);
                PendingReading {
                    record,
                    process,
                    verdict: Ok(flight),
                }
            }
        }
    }

    /// The record of `session_id`, or why there is none.
    pub async fn record(&self, session_id: &str) -> Result<RunningRecord, RegistryError> {
        if !running::is_valid_session_id(session_id) {
            return Err(RegistryError::InvalidSessionId);
        }
        let dir = self.reader.dir.clone();
        let id = session_id.to_owned();
        blocking(move || running::read_record(&dir, &id))
            .await??
            .ok_or_else(|| RegistryError::NotFound(session_id.to_owned()))
    }

    /// Prune one session on fresh evidence: re-read layers 1–2 and unlink only if gone.
    ///
    /// A prune that finds the process gone while a stop of the session is under way is the
    /// stop's doing (the stop's SIGTERM or SIGKILL ended it; the stop merely had not polled
    /// yet), so its removal note says [`RemovalCause::Stopped`].
    pub async fn prune_session(&self, session_id: &str) -> Result<PruneOutcome, RegistryError> {
        let record = self.record(session_id).await?;
        let (notes, stops) = (self.removals.clone(), Arc::clone(&self.stopping));
        // `None`: someone else removed or replaced it since it was read; nothing of ours went.
        blocking(move || prune_if_gone(&record, &notes, &stops))
            .await??
            .ok_or_else(|| RegistryError::NotFound(session_id.to_owned()))
    }

    /// Prune every record whose process is gone, and every removable unreadable entry.
    pub async fn prune_all(&self) -> Result<PruneReport, RegistryError> {
        let dir = self.reader.dir.clone();
        let (notes, stops) = (self.removals.clone(), Arc::clone(&self.stopping));
        blocking(move || {
            running::recover_quarantined(&dir)?;
            let scan = running::scan(&dir)?;
            let mut report = PruneReport::default();
            for record in &scan.records {
                if let Some(PruneOutcome::Pruned { reason }) =
                    prune_if_gone(record, &notes, &stops)?
                {
                    report.pruned.push((record.session_id.clone(), reason));
                }
            }
            report.removed_unreadable = running::remove_unreadable(&dir, &scan.unreadable)?;
            Ok(report)
        })
        .await?
    }

    /// Every session verified by all three layers, after pruning on fresh evidence what the
    /// listing found gone and removing the unreadable entries that can never be records (the
    /// CLI's `ps`). Entries stranded in quarantine are put back first, so they are listed.
    pub async fn sessions_pruned(&self) -> Result<PrunedListing, RegistryError> {
        let dir = self.reader.dir.clone();
        blocking(move || running::recover_quarantined(&dir)).await??;
        let listing = self.sessions(true).await?;
        let is_gone = |reading: &Reading| matches!(reading.liveness, Some(Liveness::Gone { .. }));
        let gone: Vec<String> = listing
            .readings
            .iter()
            .filter(|reading| is_gone(reading))
            .map(|reading| reading.record.session_id.clone())
            .collect();
        let (dir, unreadable) = (self.reader.dir.clone(), listing.unreadable.clone());
        let (notes, stops) = (self.removals.clone(), Arc::clone(&self.stopping));
        let (report, revived) = blocking(move || {
            let mut report = PruneReport::default();
            let mut revived = HashSet::new();
            for id in gone {
                // Read again: the listing may hold a reading of an unchanged file from earlier.
                let Some(record) = running::read_record(&dir, &id)? else {
                    continue;
                };
                match prune_if_gone(&record, &notes, &stops)? {
                    Some(PruneOutcome::Pruned { reason }) => report.pruned.push((id, reason)),
                    Some(PruneOutcome::Kept { .. }) => _ = revived.insert(id),
                    None => {}
                }
            }
            report.removed_unreadable = running::remove_unreadable(&dir, &unreadable)?;
            Ok::<_, RegistryError>((report, revived))
        })
        .await??;
        let readings = listing
            .readings
            .iter()
            .filter(|reading| !is_gone(reading) || revived.contains(&reading.record.session_id))
            .cloned()
            .collect();
        Ok(PrunedListing { readings, report })
    }

    /// Send one signal to a session's process, through the module's pidfd path.
    ///
    /// An `AlreadyGone` outcome is evidence, so the record is pruned before this returns.
    pub async fn signal(
        &self,
        session_id: &str,
        kind: SignalKind,
    ) -> Result<SignalReport, RegistryError> {
        let record = self.record(session_id).await?;
        let (outcome, pruned) = self
            .signal_record(&record, kind, RemovalCause::Pruned)
            .await?;
        Ok(SignalReport {
            outcome,
            record,
            pruned,
        })
    }

    /// Stop a session: SIGTERM, wait up to `timeout` for the process to go, then SIGKILL if it
    /// is still the same process. A zero timeout sends SIGKILL at once.
    ///
    /// The wait re-reads layers 1–2 every few milliseconds and ends as soon as the process is
    /// gone. The record is pruned once it is. Stops of one session run one at a time; a later
    /// one finds the record already pruned and answers [`RegistryError::NotFound`].
    pub async fn stop(
        &self,
        session_id: &str,
        timeout: Duration,
    ) -> Result<StopReport, RegistryError> {
        let timeout = timeout.min(MAX_STOP_TIMEOUT);
        let lock = self.stop_lock(session_id);
        let _serialised = lock.lock().await;
        let record = self.record(session_id).await?;
        let started = Instant::now();
        let first = if timeout.is_zero() {
            SignalKind::Kill
        } else {
            SignalKind::Term
        };
        let report = |outcome, pruned| StopReport {
            outcome,
            record: record.clone(),
            waited: started.elapsed(),
            pruned,
        };
        match self
            .signal_record(&record, first, RemovalCause::Pruned)
            .await?
        {
            (SignalOutcome::Sent, _) => {}
            (SignalOutcome::AlreadyGone { .. }, pruned) => {
                return Ok(report(StopOutcome::AlreadyGone, pruned));
            }
            (SignalOutcome::Refused { reason }, _) => {
                let refused = StopOutcome::Refused {
                    reason,
                    signal: first,
                    sent: None,
                };
                return Ok(report(refused, None));
            }
        }
        if first == SignalKind::Term
            && let Some(pruned) = self.wait_until_gone(&record, timeout).await?
        {
            let stopped = StopOutcome::Stopped {
                signal_sent: SignalKind::Term,
            };
            return Ok(report(stopped, Some(pruned)));
        }
        if first == SignalKind::Term {
            match self
                .signal_record(&record, SignalKind::Kill, RemovalCause::Stopped)
                .await?
            {
                // Gone between the last poll and the SIGKILL: SIGTERM did it.
                (SignalOutcome::AlreadyGone { .. }, pruned) => {
                    let stopped = StopOutcome::Stopped {
                        signal_sent: SignalKind::Term,
                    };
                    return Ok(report(stopped, pruned));
                }
                (SignalOutcome::Refused { reason }, _) => {
                    let refused = StopOutcome::Refused {
                        reason,
                        signal: SignalKind::Kill,
                        sent: Some(SignalKind::Term),
                    };
                    return Ok(report(refused, None));
                }
                (SignalOutcome::Sent, _) => {}
            }
        }
        // SIGKILL cannot be ignored; the wait is only for the kernel to tear the process down.
        // A process stuck in an uninterruptible sleep can outlast it, and is not called stopped.
        match self.wait_until_gone(&record, KILL_GRACE).await? {
            Some(pruned) => {
                let stopped = StopOutcome::Stopped {
                    signal_sent: SignalKind::Kill,
                };
                Ok(report(stopped, Some(pruned)))
            }
            None => {
                let refused = StopOutcome::Refused {
                    reason: format!(
                        "SIGKILL was delivered but pid {} has not exited after {} s",
                        record.pid,
                        KILL_GRACE.as_secs()
                    ),
                    signal: SignalKind::Kill,
                    sent: Some(SignalKind::Kill),
                };
                Ok(report(refused, None))
            }
        }
    }

    /// Wait until every stop in progress has ended (for a graceful shutdown: a stop abandoned
    /// between SIGTERM and SIGKILL would leave its capsule half-stopped).
    pub async fn finish_stops(&self) {
        let in_progress: Vec<_> = self
            .stopping
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        for stop in in_progress {
            let _ = stop.lock().await;
        }
    }

    fn stop_lock(&self, session_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self
            .stopping
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Forget locks nobody holds, so the map stays as small as the stops in flight.
        locks.retain(|_, lock| Arc::strong_count(lock) > 1);
        Arc::clone(locks.entry(session_id.to_owned()).or_default())
    }

    /// Signal and, on `AlreadyGone`, prune (noting `cause`): the kernel's ESRCH is evidence.
    /// Answers what the prune did, when there was one.
    async fn signal_record(
        &self,
        record: &RunningRecord,
        kind: SignalKind,
        cause: RemovalCause,
    ) -> Result<(SignalOutcome, Option<RecordFate>), RegistryError> {
        let record = record.clone();
        let notes = self.removals.clone();
        blocking(move || {
            let outcome = send_signal(&record, kind);
            let pruned = match &outcome {
                SignalOutcome::AlreadyGone { reason } => {
                    Some(prune_after_the_fact(&record, reason, &notes, cause))
                }
                _ => None,
            };
            (outcome, pruned)
        })
        .await
    }

    /// Poll layers 1–2 until the process is gone (then prune) or `limit` passes. Answers what
    /// the prune did once gone, `None` if it never went.
    async fn wait_until_gone(
        &self,
        record: &RunningRecord,
        limit: Duration,
    ) -> Result<Option<RecordFate>, RegistryError> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let probe = record.clone();
            let notes = self.removals.clone();
            let gone = blocking(move || match running::process_state(&probe) {
                ProcessState::Gone { reason } => Some(prune_after_the_fact(
                    &probe,
                    &reason,
                    &notes,
                    RemovalCause::Stopped,
                )),
                _ => None,
            })
            .await?;
            if gone.is_some() {
                return Ok(gone);
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep_until(
                deadline.min(tokio::time::Instant::now() + STOP_POLL_INTERVAL),
            )
            .await;
        }
    }
}

fn send_signal(record: &RunningRecord, kind: SignalKind) -> SignalOutcome {
    match kind {
        SignalKind::Term => running::signal_term(record),
        SignalKind::Kill => running::signal_kill(record),
    }
}

/// Prune a record whose process a signal or stop has just found gone. What the signal or stop
/// did stands whether or not the file could be removed, so a failure is logged and answered,
/// not returned as an error; the record stays and the next prune finds the same evidence.
fn prune_after_the_fact(
    record: &RunningRecord,
    reason: &str,
    notes: &RemovalNotes,
    cause: RemovalCause,
) -> RecordFate {
    match unlink_gone(record, reason, notes, cause) {
        Ok(Pruned::Removed) => RecordFate::Removed,
        Ok(Pruned::AlreadyGone) => RecordFate::AlreadyGone,
        Err(error) => {
            tracing::warn!(
                session_id = %record.session_id,
                %error,
                "could not prune a gone session's record"
            );
            RecordFate::Kept {
                error: error.to_string(),
            }
        }
    }
}

/// Read layers 1–2 afresh on `record` and unlink it if they say gone. `None` when the file was
/// already gone or replaced, so nothing was unlinked. A removal while a stop of the session
/// runs is the stop's doing: its SIGTERM or SIGKILL ended the process before the stop polled.
fn prune_if_gone(
    record: &RunningRecord,
    notes: &RemovalNotes,
    stops: &StopsInProgress,
) -> Result<Option<PruneOutcome>, RunningError> {
    match running::process_state(record) {
        ProcessState::Gone { reason } => {
            let cause = if is_stopping(stops, &record.session_id) {
                RemovalCause::Stopped
            } else {
                RemovalCause::Pruned
            };
            Ok(match unlink_gone(record, &reason, notes, cause)? {
                Pruned::Removed => Some(PruneOutcome::Pruned { reason }),
                Pruned::AlreadyGone => None,
            })
        }
        process => Ok(Some(PruneOutcome::Kept { process })),
    }
}

/// Unlink a record whose process is gone and, if this call removed it, note why.
fn unlink_gone(
    record: &RunningRecord,
    reason: &str,
    notes: &RemovalNotes,
    cause: RemovalCause,
) -> Result<Pruned, RunningError> {
    let pruned = running::prune(
        record,
        &Liveness::Gone {
            reason: reason.to_owned(),
        },
    )?;
    if pruned == Pruned::Removed {
        notes.note(&record.session_id, cause, reason);
    }
    Ok(pruned)
}

/// Whether `dir` is on a filesystem whose metadata calls answer from this kernel alone.
///
/// `false` for network and userspace filesystems, whose calls may wait on a server or a
/// daemon, and when it cannot be told (the directory does not exist yet, say): the pool is
/// always safe, only slower.
fn on_local_filesystem(dir: &Path) -> bool {
    // Magic numbers from statfs(2): NFS, SMB, CIFS, SMB2, FUSE, 9P, Ceph, AFS, Coda, GFS2,
    // Lustre.
    const REMOTE: [u32; 11] = [
        0x6969,
        0x517B,
        0xFF53_4D42,
        0xFE53_4D42,
        0x6573_5546,
        0x0102_1997,
        0x00C3_6400,
        0x5346_414F,
        0x7375_7245,
        0x0116_1970,
        0x0BD0_0BD0,
    ];
    rustix::fs::statfs(dir).is_ok_and(|stat| {
        // `f_type` is a signed word of the platform's size; the magic numbers fit 32 bits.
        let kind = stat.f_type as u32;
        !REMOTE.contains(&kind)
    })
}

/// A reading from layers 1–2 alone: a verdict only where they decide it.
fn lean_reading((record, process): (RunningRecord, ProcessState)) -> Reading {
    let liveness = running::decided_by_process(&record, &process);
    Reading {
        record,
        process,
        liveness,
    }
}

/// A record whose verdict is settled (`Err`) or awaits its door's probe (`Ok`).
struct PendingReading {
    record: RunningRecord,
    process: ProcessState,
    verdict: Result<Arc<flights::Flight>, Liveness>,
}

impl PendingReading {
    /// The reading, once the probe (if any) has answered; its reason redacted for this record.
    async fn finish(self) -> Reading {
        let liveness = match self.verdict {
            Err(settled) => settled,
            Ok(flight) => match flight.answer().await {
                Ok(()) => Liveness::Live,
                Err(reason) => Liveness::Unreachable {
                    reason: running::redact_secrets(reason, &self.record),
                },
            },
        };
        Reading {
            record: self.record,
            process: self.process,
            liveness: Some(liveness),
        }
    }
}

/// What a directory pass reads with, owned, so that a pass runs as a task of its own and to
/// its end whoever started it (see `passes`).
#[derive(Debug, Clone)]
struct PassReader {
    dir: PathBuf,
    cache: Arc<running::RecordCache>,
    /// Entries the latest scan found; `usize::MAX` before the first.
    last_scan_entries: Arc<AtomicUsize>,
    /// Whether a small directory may be listed on the calling task (it is on a local
    /// filesystem; decided once, when the registry is made).
    inline_scans: bool,
}

impl PassReader {
    /// One pass: scan the directory and read layers 1–2 for every record, in one trip to the
    /// blocking pool if it takes one; the `probe=false` listing of what it read.
    async fn pass(self) -> PassResult {
        let inline = self.inline_scans
            && self.last_scan_entries.load(Ordering::Relaxed) <= INLINE_SCAN_ENTRIES;
        let (dir, cache) = (self.dir, self.cache);
        let read = move || {
            let scan = running::scan_cached(&dir, &cache)?;
            let states: Vec<ProcessState> =
                scan.records.iter().map(running::process_state).collect();
            Ok::<_, RegistryError>((scan, states))
        };
        let read = if inline {
            read()
        } else {
            blocking(read).await.and_then(|read| read)
        };
        let (scan, states) = read.map_err(Arc::new)?;
        self.last_scan_entries.store(
            scan.records.len() + scan.unreadable.len(),
            Ordering::Relaxed,
        );
        let readings = scan.records.into_iter().zip(states).map(lean_reading);
        Ok(Arc::new(Listing::new(readings.collect(), scan.unreadable)))
    }
}

/// The result of a pass that panicked: its waiters are told, as for a blocking task that did.
fn pass_panicked(why: String) -> PassResult {
    Err(Arc::new(RegistryError::Task(format!(
        "the directory pass panicked: {why}"
    ))))
}

/// Run blocking work on tokio's blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, RegistryError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| RegistryError::Task(e.to_string()))
}
