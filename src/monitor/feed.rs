//! The event feed: ids, the ring every listener reads, batching a step's events until flush, and
//! the snapshot that replaces a batch too big for the ring.
//!
//! Invariants:
//! - Ids grow by one per event for the life of the process; a snapshot carries the id of the
//!   last event it includes. Batched events have no id until they are flushed.
//! - One step of the loop puts at most `SNAPSHOT_OVER + 1` entries on the ring, so a listener up
//!   to `EVENT_BUFFER - SNAPSHOT_OVER - 1` entries behind when the step begins survives it.
//! - The ring never holds a whole picture: only the latest mid-stream snapshot is held strongly,
//!   here, and the ring carries weak links to it.

use std::sync::Arc;

use tokio::sync::broadcast;

use super::event::{Event, EventKind, Published, Snapshot, SnapshotLink};
use super::picture::Picture;

/// How many events a listener may fall behind before it is dropped.
pub const EVENT_BUFFER: usize = 1024;
/// A step of the loop (a pass, or the probe answers in, with the prunes after either) puts at
/// most this many single events on the ring; a flush that would take it past this publishes
/// one snapshot instead. Half the ring: a listener that is a little behind still has room.
pub const SNAPSHOT_OVER: usize = EVENT_BUFFER / 2;

/// The picture and the stream of its changes, kept under the monitor's one lock.
#[derive(Debug)]
pub(super) struct Feed {
    pub(super) picture: Picture,
    next_id: u64,
    /// The latest mid-stream snapshot: the only strong hold on it. Replacing it lets listeners
    /// still behind it skip to its successor.
    published: Option<Arc<Snapshot>>,
    /// The running loop's ring. Each loop has its own, dropped when it stops, so its listeners'
    /// receivers close (after the events already sent) whenever the loop ends.
    ring: Option<broadcast::Sender<Published>>,
    /// Events kept back until [`Feed::flush`] (no ids yet), while a batch is open.
    batch: Option<Vec<EventKind>>,
    /// What the current step put on the ring so far, so that its flushes together, not each
    /// one, stay within [`SNAPSHOT_OVER`].
    step_sent: usize,
}

impl Default for Feed {
    fn default() -> Self {
        Self {
            picture: Picture::default(),
            next_id: 1,
            published: None,
            ring: None,
            batch: None,
            step_sent: 0,
        }
    }
}

impl Feed {
    /// Give a starting loop a ring of its own.
    pub(super) fn open(&mut self) {
        self.ring = Some(new_ring());
    }

    /// The picture now and a receiver of every change after it: taken under the lock the loop
    /// publishes under, so no gap and no repeat.
    pub(super) fn subscribe(&mut self) -> (Snapshot, broadcast::Receiver<Published>) {
        let events = self.ring.get_or_insert_with(new_ring).subscribe();
        (Snapshot::clone(&self.snapshot()), events)
    }

    /// Forget the picture and drop the ring: every listener's stream ends after the events
    /// already sent, and the next loop builds a fresh picture.
    pub(super) fn close(&mut self) {
        self.picture.clear();
        self.published = None;
        self.ring = None;
    }

    /// Start one step of the loop: nothing of it is on the ring yet.
    pub(super) fn begin_step(&mut self) {
        self.step_sent = 0;
    }

    /// Keep what is published from now until [`Feed::flush`] back, under the same lock.
    pub(super) fn begin_batch(&mut self) {
        self.batch.get_or_insert_with(Vec::new);
    }

    /// Send `kind` to every listener with the next id (or add it to the open batch).
    pub(super) fn publish(&mut self, kind: EventKind) {
        self.picture.forget_snapshot();
        if let Some(batch) = &mut self.batch {
            batch.push(kind);
            return;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.step_sent += 1;
        tracing::debug!(id, session_id = kind.session_id(), "event");
        // No receiver (or no ring, the loop just stopped) is not an error: the loop runs for
        // listeners that may all just have left.
        if let Some(ring) = &self.ring {
            let _ = ring.send(Published::Event(Arc::new(Event::new(id, kind))));
        }
    }

    /// Publish the batch: each event, or one snapshot of the picture in their place when they
    /// would take this step past [`SNAPSHOT_OVER`]. Counted over the step, not the flush: a pass
    /// that sent 500 changes and prunes after it that would send 500 more make one snapshot.
    pub(super) fn flush(&mut self) {
        let Some(batch) = self.batch.take() else {
            return;
        };
        if batch.is_empty() {
            return;
        }
        if self.step_sent + batch.len() <= SNAPSHOT_OVER {
            for kind in batch {
                self.publish(kind);
            }
            return;
        }
        tracing::info!(
            events = batch.len(),
            already = self.step_sent,
            "many changes in one step: publishing one snapshot in their place"
        );
        self.step_sent += 1;
        // The id is taken first, so the snapshot carries it (the last event it includes), and
        // listeners arriving later share its encoding.
        self.next_id += 1;
        self.picture.forget_snapshot();
        let snapshot = self.snapshot();
        let link = SnapshotLink::to(&snapshot);
        self.published = Some(snapshot);
        if let Some(ring) = &self.ring {
            let _ = ring.send(Published::Snapshot(link));
        }
    }

    fn snapshot(&mut self) -> Arc<Snapshot> {
        self.picture.snapshot(self.next_id - 1)
    }
}

fn new_ring() -> broadcast::Sender<Published> {
    broadcast::channel(EVENT_BUFFER).0
}

#[cfg(test)]
mod tests;
