//! A listener's view of the live view: the picture when it subscribed, then every change after.
//!
//! Invariant: a listener counts (and keeps the loop running) from the moment it asks until its
//! subscription is dropped; it reads the ring without gap or repeat, and ids only grow.

use std::sync::Arc;

use tokio::sync::{broadcast, watch};

use super::event::{Next, Published, Snapshot};
use super::hub::{Hub, LoopEnd};
use crate::registry::RegistryError;

/// Why a listener could not be given a picture.
#[derive(Debug, thiserror::Error)]
pub enum SubscribeError {
    /// The running directory could not be read for the first picture of the loop this
    /// listener waited on: the registry's own error, so that it is answered as `GET /sessions`
    /// answers it.
    #[error("the running directory cannot be read: {0}")]
    Unavailable(RegistryError),
    /// The monitor is shutting down.
    #[error("the registry is shutting down")]
    Closing,
}

/// A listener's view: the picture now, then every change after it.
#[derive(Debug)]
pub struct Subscription {
    /// The picture at the moment of subscribing.
    pub snapshot: Snapshot,
    /// Every event after the snapshot, as the ring carries them: read it through
    /// [`Subscription::recv`], which follows a snapshot's weak link.
    pub events: broadcast::Receiver<Published>,
    /// Becomes `true` when the registry shuts down: the listener must end.
    pub closing: watch::Receiver<bool>,
    /// Set while skipping to the next snapshot, past one whose picture is gone; kept here so
    /// that a cancelled [`Subscription::recv`] resumes where it was.
    skipping: bool,
    ended: LoopEnd,
    _listener: ListenerGuard,
}

impl Subscription {
    pub(super) fn new(
        (snapshot, events): (Snapshot, broadcast::Receiver<Published>),
        closing: watch::Receiver<bool>,
        ended: LoopEnd,
        listener: ListenerGuard,
    ) -> Self {
        Self {
            snapshot,
            events,
            closing,
            skipping: false,
            ended,
            _listener: listener,
        }
    }

    /// The next change, or the next snapshot in place of many.
    ///
    /// A snapshot whose picture is gone (a later one replaced it while this listener was
    /// behind) is skipped, with every event after it, up to the later snapshot, which includes
    /// them all. `Lagged` means the listener fell more than [`super::EVENT_BUFFER`] behind and
    /// must be dropped; `Closed` (after every event already published) means the loop stopped:
    /// see [`Subscription::ended_by`]. Cancel-safe.
    pub async fn recv(&mut self) -> Result<Next, broadcast::error::RecvError> {
        loop {
            match self.events.recv().await? {
                Published::Snapshot(link) => match link.upgrade() {
                    Some(snapshot) => {
                        self.skipping = false;
                        return Ok(Next::Snapshot(snapshot));
                    }
                    None => self.skipping = true,
                },
                Published::Event(event) if !self.skipping => return Ok(Next::Event(event)),
                Published::Event(_) => {}
            }
        }
    }

    /// Why the loop ended this listener's stream, once `events` is `Closed`: the error of the
    /// passes that could not read the running directory. `None` when the loop stopped for the
    /// registry's shutdown (or has not stopped).
    pub fn ended_by(&self) -> Option<&RegistryError> {
        self.ended.get().map(|error| &**error)
    }
}

/// Counts a listener from the moment it asks until its subscription is dropped.
#[derive(Debug)]
pub(super) struct ListenerGuard {
    hub: Arc<Hub>,
}

impl ListenerGuard {
    pub(super) fn new(hub: &Arc<Hub>) -> Self {
        hub.lock().listeners += 1;
        Self {
            hub: Arc::clone(hub),
        }
    }
}

impl Drop for ListenerGuard {
    fn drop(&mut self) {
        self.hub.lock().listeners -= 1;
    }
}
