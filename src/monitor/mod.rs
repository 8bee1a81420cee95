//! The live view of the running directory: one verification loop keeps a verified picture
//! current and publishes every change as an [`Event`], for any number of listeners (the
//! `/events` stream is its only client today).
//!
//! This module is the facade: it starts the loop (`looper`) when a listener subscribes and
//! hands out subscriptions to the feed (`feed`) the loop publishes through. Neither of those
//! knows the facade, so subscribing can start the loop without a circle.
//!
//! Two paces, set apart (`serve`'s flags):
//! - The interval ([`Monitor::set_interval`], `--events-interval`, default 2 s) paces the
//!   directory passes: layers 1–2 of every record, judge, prune. It is also the fallback path:
//!   whatever the exit watch misses (or all exits, where the registry has no pidfds), a pass
//!   finds within one interval. A pass reads the directory itself only when the directory
//!   watch has something to say, or cannot vouch for it, and at least every
//!   `rescan::READ_AT_LEAST_EVERY` intervals; every change the watch reports nudges a pass
//!   that reads it at once.
//! - The door recheck ([`Monitor::set_door_recheck`], `--door-recheck`, default 10 s) is each
//!   door's own period: every door of a live process (live, or unreachable with its process
//!   confirmed) is asked again once per period, at a phase of its own, so N doors cost a steady
//!   N / period probes a second. A door whose record is new or rewritten is asked at once.
//!
//! Neither paces a death: the registry pins every live process with a pidfd, and the loop
//! hears of its exit from the kernel (`Registry::process_exits`), reports it and prunes at once.
//!
//! Invariants:
//! - One loop, however many listeners: a listener costs a receiver, never a scan or a probe.
//!   The loop runs while anyone listens and stops after the last one leaves.
//! - A listener changes the disk: while anyone listens, records of sessions found gone are
//!   pruned (on fresh evidence, through the registry). With nobody listening, nothing is.
//! - A failure belongs to its loop: a first picture that fails is reported only to the
//!   listeners that waited on that loop; a later listener starts a new loop.
//! - A directory that stays unreadable ([`looper::FAILED_PASSES_TO_END`] periodic passes) ends the
//!   loop, and every stream after the events already published; [`Subscription::ended_by`]
//!   says why. It is never evidence about sessions: nothing is published for it.
//! - No gap, no repeat, ids only grow: a listener's snapshot and receiver are taken under the
//!   lock the loop publishes under; a mid-stream snapshot stands for the events it replaces.
//! - Bounded memory: a listener more than [`EVENT_BUFFER`] behind is dropped, and the ring
//!   never holds a whole picture.

mod event;
mod feed;
mod hub;
mod judge;
mod loop_thread;
mod looper;
mod picture;
mod recheck;
mod rescan;
mod session_records;
mod subscription;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use crate::registry::{Registry, copy_error};
pub use event::{Event, EventKind, Next, Published, Snapshot};
pub use feed::{EVENT_BUFFER, SNAPSHOT_OVER};
use hub::Hub;
pub use hub::closed;
use subscription::ListenerGuard;
pub use subscription::{SubscribeError, Subscription};

/// How often the directory is passed over when nothing nudges the loop.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(2);
/// How often each door of a live process is asked again.
pub const DEFAULT_DOOR_RECHECK: Duration = Duration::from_secs(10);
/// The shortest interval or door recheck accepted: a shorter one would turn the loop into a
/// busy wait.
pub const MIN_INTERVAL: Duration = Duration::from_millis(50);

/// The live view over one registry. Cheap to clone; clones share the loop.
#[derive(Debug, Clone)]
pub struct Monitor {
    hub: Arc<Hub>,
}

impl Monitor {
    /// A monitor over `registry`, not running until someone subscribes.
    pub fn new(registry: Arc<Registry>) -> Self {
        Self {
            hub: Arc::new(Hub::new(registry, DEFAULT_INTERVAL, DEFAULT_DOOR_RECHECK)),
        }
    }

    /// Set how often the directory is passed over: every record read and its layers 1–2
    /// checked, gone records pruned (at least [`MIN_INTERVAL`]). Applies from the next time
    /// the loop starts.
    pub fn set_interval(&self, interval: Duration) {
        self.hub.lock().interval = interval.max(MIN_INTERVAL);
    }

    /// Make a periodic pass read the directory at least once in `passes` (1: every pass),
    /// from the next time the loop starts. Tests set it out of reach, so that only the watch
    /// can explain a change seen.
    #[cfg(test)]
    pub(crate) fn set_read_at_least_every(&self, passes: u32) {
        self.hub.lock().read_every = passes;
    }

    /// Set how often each door of a live process is asked again, each at its own phase (at
    /// least [`MIN_INTERVAL`]). Applies from the next time the loop starts.
    pub fn set_door_recheck(&self, period: Duration) {
        self.hub.lock().door_recheck = period.max(MIN_INTERVAL);
    }

    /// Start listening: the picture now and every change after it.
    ///
    /// Starts the loop if it is not running, and waits for its first complete picture (at most
    /// as long as the slowest door's deadlines). Fails with the first picture's failure only
    /// if it came from a loop this call waited on.
    pub async fn subscribe(&self) -> Result<Subscription, SubscribeError> {
        let guard = ListenerGuard::new(&self.hub);
        let mut progress = self.hub.progress();
        // The generation of the loop this call waits on, once it waits on one.
        let mut waited_on = None;
        loop {
            if *self.hub.closing.borrow() {
                return Err(SubscribeError::Closing);
            }
            {
                let mut state = self.hub.lock();
                if state.running && state.ready {
                    return Ok(Subscription::new(
                        state.feed.subscribe(),
                        self.hub.closing.subscribe(),
                        Arc::clone(&state.ended),
                        guard,
                    ));
                }
                if state.running {
                    waited_on = Some(state.generation);
                } else {
                    if let Some((generation, failure)) = &state.failure
                        && waited_on == Some(*generation)
                    {
                        // Left in place: every listener that waited on this loop gets it.
                        return Err(SubscribeError::Unavailable(copy_error(failure)));
                    }
                    // Any failure on record is from a loop nobody here waited on, perhaps long
                    // ago: it says nothing about the directory now. Try again.
                    state.generation += 1;
                    state.failure = None;
                    state.running = true;
                    state.ready = false;
                    state.feed.open();
                    state.ended = Default::default();
                    waited_on = Some(state.generation);
                    looper::spawn(Arc::clone(&self.hub), &mut state);
                }
            }
            if progress.changed().await.is_err() {
                return Err(SubscribeError::Closing);
            }
        }
    }

    /// Stop the loop and end every listener's stream (for a graceful shutdown: an open event
    /// stream would otherwise keep its connection, and the server, alive).
    pub fn close(&self) {
        self.hub.closing.send_replace(true);
    }

    /// Whether [`Monitor::close`] was called: no stream is given out any more.
    pub fn is_closing(&self) -> bool {
        *self.hub.closing.borrow()
    }

    /// How many listeners are subscribed (or waiting for their first picture).
    pub fn listeners(&self) -> usize {
        self.hub.lock().listeners
    }

    /// The count of periodic passes completed by any loop of this monitor, bumped as each one
    /// completes. A loop that hangs (or cannot read the directory) stops bumping it: the fleet
    /// renews its lease on this, so the lease proves progress, not just a live process.
    pub fn steps(&self) -> tokio::sync::watch::Receiver<u64> {
        self.hub.steps.subscribe()
    }

    /// Whether the verification loop is running.
    pub fn is_running(&self) -> bool {
        self.hub.lock().running
    }
}
