//! The registry: the operations on one running directory that the HTTP service and the CLI
//! share, one file per job (listing, verify, card, prune, signal, stop, resources; pins and exits
//! for the pidfds it holds).
//!
//! Invariants kept here:
//! - Blocking work (directory and `/proc` reads, signals) runs on tokio's blocking pool; the one
//!   exception is listing a small directory on a local filesystem (see `listing`).
//! - Reading changes nothing. Records are removed only by prune, signal and stop, on fresh
//!   evidence: layers 1–2 read again right before the unlink, or the kernel's ESRCH.
//! - Every verification goes through `verify`, whose door probes are single-flight; only
//!   [`Registry::card`] asks a door on its own, since it needs the card itself, and
//!   [`Registry::stop`], whose ask to the door must follow a probe of its own.
//! - A listing is answered by a directory pass that started after it was asked (`passes`).
//! - Readings take layers 1–2 from the pidfd held for the process where there is one (`pins`);
//!   removals and signals do not: they read `/proc` again, or pin the process anew.

mod card;
mod error;
mod exits;
mod flights;
mod listing;
mod passes;
mod pins;
mod process_key;
mod prune;
mod removal;
mod resources;
mod signal;
mod stop;
mod stopping;
mod tally;
pub(crate) mod verify;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::running::{self, DoorProbe, RunningRecord};
use flights::Flights;
use listing::{PassReader, PassResult};
use passes::SharedPasses;
use removal::RemovalNotes;
use resources::ResourceSampler;
use stopping::StopsInProgress;

pub use card::CardRefusal;
pub use error::RegistryError;
pub(crate) use error::copy_error;
pub use exits::ProcessExits;
pub use listing::{INLINE_SCAN_ENTRIES, Listing, listing_key};
pub use process_key::ExitedProcess;
pub use prune::{PruneDecision, PruneReport, PrunedListing};
pub use removal::{Removal, RemovalCause};
pub use resources::{CPU_BASELINE_FRESH, CPU_SPAN_MIN, Resources};
pub use signal::{SignalKind, SignalReport};
pub use stop::{
    AskDoor, DEFAULT_STOP_TIMEOUT, LONGEST_STOP, MAX_STOP_TIMEOUT, StopOutcome, StopReport,
};
pub use tally::{
    ActionEnd, COUNTED_REMOVALS, DURATION_BUCKETS, DurationFigures, PictureFigures, ProbeEnd,
    StateCounts, Tally,
};
pub use verify::{Reading, ReadingCard};

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
    /// What it probed, removed, signalled and stopped, for `/metrics`.
    tally: Arc<Tally>,
    /// What confirmed processes cost, and each one's CPU baseline.
    resources: Arc<ResourceSampler>,
}

impl Registry {
    /// A registry over `dir` (normally [`running::running_dir`]'s answer), probing with `door`.
    pub fn new(dir: impl Into<PathBuf>, door: DoorProbe) -> Self {
        let tally = Arc::new(Tally::default());
        let counting = Arc::clone(&tally);
        Self {
            door: door.observed_by(move |confirmed, took| counting.visited(confirmed, took)),
            flights: Flights::default(),
            reader: PassReader::new(dir.into()),
            passes: Arc::default(),
            stopping: StopsInProgress::default(),
            removals: RemovalNotes::counting_by({
                let tally = Arc::clone(&tally);
                move |cause, n| tally.removed(cause, n)
            }),
            tally,
            resources: Arc::default(),
        }
    }

    /// Keep descriptors for `connections` (the server's connection cap) and for every door probe
    /// this registry may have in flight out of the pidfds it holds, under the open-files limit
    /// as it is now. Without it the default connection cap (1,024) is kept.
    pub fn keep_descriptors_for(&self, connections: usize) {
        let probes = self.door.max_in_flight();
        let reserve = u64::try_from(probes.saturating_add(connections)).unwrap_or(u64::MAX);
        self.reader.pins.reserve(reserve);
    }

    /// The registry's own counts (probes, removals, signals, stops, its last verified listing).
    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    /// The running directory this registry reads.
    pub fn dir(&self) -> &Path {
        &self.reader.dir
    }

    /// The note of why the registry removed `session_id`'s record, if it did so lately; taken,
    /// so each removal is named once.
    pub fn take_removal(&self, session_id: &str) -> Option<Removal> {
        self.removals.take(session_id)
    }

    /// The record of `session_id`, or why there is none.
    pub async fn record(&self, session_id: &str) -> Result<RunningRecord, RegistryError> {
        if !running::is_valid_session_id(session_id) {
            return Err(RegistryError::InvalidSessionId);
        }
        let dir = self.dir().to_path_buf();
        let id = session_id.to_owned();
        blocking(move || running::read_record(&dir, &id))
            .await??
            .ok_or_else(|| RegistryError::NotFound(session_id.to_owned()))
    }
}

/// Run blocking work on tokio's blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, RegistryError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| RegistryError::Task(e.to_string()))
}
