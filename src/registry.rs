//! The registry: the operations on one running directory that the HTTP service and the CLI
//! share, one file per job (listing, verify, card, prune, signal, stop).
//!
//! Invariants kept here:
//! - Blocking work (directory and `/proc` reads, signals) runs on tokio's blocking pool; the one
//!   exception is listing a small directory on a local filesystem (see `listing`).
//! - Reading changes nothing. Records are removed only by prune, signal and stop, on fresh
//!   evidence: layers 1–2 read again right before the unlink, or the kernel's ESRCH.
//! - Every verification goes through `verify`, whose door probes are single-flight; only
//!   [`Registry::card`] asks a door on its own, since it needs the card itself.
//! - A listing is answered by a directory pass that started after it was asked (`passes`).

mod card;
mod error;
mod flights;
mod listing;
mod passes;
mod prune;
mod signal;
mod stop;
mod verify;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::running::{self, DoorProbe, RunningRecord};
use flights::Flights;
use listing::{PassReader, PassResult};
use passes::SharedPasses;
use stop::StopsInProgress;

pub use card::CardRefusal;
pub use error::RegistryError;
pub(crate) use error::copy_error;
pub use listing::{INLINE_SCAN_ENTRIES, Listing};
pub use prune::{PruneOutcome, PruneReport, PrunedListing};
pub use signal::{RecordFate, SignalKind, SignalReport};
pub use stop::{DEFAULT_STOP_TIMEOUT, MAX_STOP_TIMEOUT, StopOutcome, StopReport};
pub use verify::{ProbesInFlight, Reading};

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

impl Registry {
    /// A registry over `dir` (normally [`running::running_dir`]'s answer), probing with `door`.
    pub fn new(dir: impl Into<PathBuf>, door: DoorProbe) -> Self {
        Self {
            door,
            flights: Flights::default(),
            reader: PassReader::new(dir.into()),
            passes: Arc::default(),
            stopping: StopsInProgress::default(),
            removals: RemovalNotes::default(),
        }
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
