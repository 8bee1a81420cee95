//! Where the verification loop and its listeners meet: the registry, one lock over the feed and
//! the loop's lifecycle, and the signals that wake subscribers and end streams.
//!
//! Invariant: whether a loop runs, how many listen, and what the feed holds change under one
//! lock, so a newcomer either counts for a running loop or finds it stopped and starts another.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

use super::feed::Feed;
use super::loop_thread::LoopThread;
use super::rescan::READ_AT_LEAST_EVERY;
use crate::registry::{Registry, RegistryError};

/// Why one loop ended its streams, set (once) before its ring closes, so a listener that finds
/// the ring closed can read it.
pub(super) type LoopEnd = Arc<OnceLock<Arc<RegistryError>>>;

/// What the monitor's clones, its loop and its listeners share.
#[derive(Debug)]
pub(super) struct Hub {
    pub(super) registry: Arc<Registry>,
    state: Mutex<HubState>,
    /// Bumped whenever the loop starts, finishes its first pass, or stops, so subscribers
    /// waiting for a first picture wake up.
    progress: watch::Sender<u64>,
    pub(super) closing: watch::Sender<bool>,
    /// Counts the periodic passes that completed (read the directory and judged it), for those
    /// that must prove the loop makes progress (the fleet's lease).
    pub(super) steps: watch::Sender<u64>,
}

/// Everything under the hub's lock.
#[derive(Debug)]
pub(super) struct HubState {
    pub(super) feed: Feed,
    /// How often the loop passes over the directory; read when a loop starts.
    pub(super) interval: Duration,
    /// How often the loop asks each door of a live process again; read when a loop starts.
    pub(super) door_recheck: Duration,
    /// A periodic pass reads the directory at least once in this many; read when a loop
    /// starts (see `rescan`).
    pub(super) read_every: u32,
    /// Listeners subscribed or waiting for their first picture.
    pub(super) listeners: usize,
    pub(super) running: bool,
    /// The running loop has its first picture.
    pub(super) ready: bool,
    /// The generation of the latest loop started (0: none yet).
    pub(super) generation: u64,
    /// Why the first picture of the loop of that generation failed, for its waiters only.
    pub(super) failure: Option<(u64, Arc<RegistryError>)>,
    pub(super) ended: LoopEnd,
    /// Where the loops run.
    pub(super) loop_thread: LoopThread,
}

impl Hub {
    pub(super) fn new(registry: Arc<Registry>, interval: Duration, door_recheck: Duration) -> Self {
        Self {
            registry,
            state: Mutex::new(HubState {
                feed: Feed::default(),
                interval,
                door_recheck,
                read_every: READ_AT_LEAST_EVERY,
                listeners: 0,
                running: false,
                ready: false,
                generation: 0,
                failure: None,
                ended: LoopEnd::default(),
                loop_thread: LoopThread::default(),
            }),
            progress: watch::Sender::new(0),
            closing: watch::Sender::new(false),
            steps: watch::Sender::new(0),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn progress(&self) -> watch::Receiver<u64> {
        self.progress.subscribe()
    }

    pub(super) fn bump_progress(&self) {
        self.progress.send_modify(|n| *n += 1);
    }

    /// Mark the loop stopped and close its feed: every listener's stream ends after the events
    /// already sent.
    pub(super) fn stop(&self, state: &mut HubState) {
        state.running = false;
        state.ready = false;
        state.feed.close();
        self.bump_progress();
    }

    /// Stop the loop because the running directory stayed unreadable, telling its listeners why.
    /// Publishes nothing: an unreadable directory is no evidence about sessions.
    pub(super) fn end(&self, state: &mut HubState, error: RegistryError) {
        // Set before the ring is dropped, so a listener that finds it closed can read it.
        let _ = state.ended.set(Arc::new(error));
        self.stop(state);
    }
}

/// Resolves once the registry shuts down (or the monitor is gone).
pub async fn closed(closing: &mut watch::Receiver<bool>) {
    let _ = closing.wait_for(|closing| *closing).await;
}
