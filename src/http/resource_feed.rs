//! The `resources` event of `/events?include=resources`: once per step of the live view, what
//! every confirmed session's process costs, sampled once for all the streams that asked.
//!
//! Invariants kept here:
//! - Sampling runs only while a stream that asked is open: the first such stream starts one
//!   task, the last one to close stops it. A stream that did not ask costs nothing more.
//! - The task follows the live view's picture through a subscription of its own and samples
//!   after each completed periodic pass ([`Monitor::steps`]), with that pass's events applied:
//!   the figures are of the sessions the streams were just told about.
//! - Each event's data is encoded once and shared; a stream late to read one skips to the
//!   next (figures are momentary), never buffers them without bound.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures_util::FutureExt;
use tokio::sync::{Notify, broadcast};

use super::event_data::encode;
use crate::monitor::{EventKind, Monitor, Next, Subscription};
use crate::registry::{Reading, Registry};
use crate::running::ProcessState;
use crate::wire::{ResourcesEvent, ResourcesView, SessionResources};

/// How many `resources` events a stream may leave unread before it skips to the latest.
const UNREAD_EVENTS: usize = 4;

/// The sampling shared by the streams that asked for `resources`.
#[derive(Debug, Default)]
pub struct ResourceFeed {
    shared: Arc<FeedShared>,
}

#[derive(Debug, Default)]
struct FeedShared {
    state: Mutex<FeedState>,
    /// Woken when the last listener leaves, so the task stops without waiting for a step.
    idle: Notify,
}

#[derive(Debug, Default)]
struct FeedState {
    listeners: usize,
    /// The running task's channel; `None` when no task runs.
    sender: Option<broadcast::Sender<Arc<str>>>,
    /// Bumped for every task started, so an old task's end does not clear a newer one's slot.
    generation: u64,
}

/// One stream's share of the feed: the encoded data of each `resources` event.
#[derive(Debug)]
pub struct ResourceListener {
    events: broadcast::Receiver<Arc<str>>,
    _counted: Counted,
}

impl ResourceListener {
    /// The data of the next `resources` event; `None` once the feed's task has ended (the live
    /// view stopped: the stream ends too). Skips events the stream was too late to read.
    /// Cancel-safe.
    pub async fn next(&mut self) -> Option<Arc<str>> {
        loop {
            match self.events.recv().await {
                Ok(data) => return Some(data),
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

/// Counts a listener until dropped; the last one out wakes the task to stop.
#[derive(Debug)]
struct Counted(Arc<FeedShared>);

impl Drop for Counted {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.listeners -= 1;
        if state.listeners == 0 {
            state.sender = None;
            self.0.idle.notify_one();
        }
    }
}

impl FeedShared {
    fn lock(&self) -> MutexGuard<'_, FeedState> {
        // Each write leaves the state whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ResourceFeed {
    /// Listen to the `resources` events of `monitor`'s steps, starting the sampling task if
    /// none runs.
    pub fn listen(&self, registry: &Arc<Registry>, monitor: &Monitor) -> ResourceListener {
        let mut state = self.shared.lock();
        state.listeners += 1;
        let counted = Counted(Arc::clone(&self.shared));
        let events = match &state.sender {
            Some(sender) => sender.subscribe(),
            None => {
                let (sender, events) = broadcast::channel(UNREAD_EVENTS);
                state.generation += 1;
                state.sender = Some(sender.clone());
                let task = FeedTask {
                    shared: Arc::clone(&self.shared),
                    generation: state.generation,
                    registry: Arc::clone(registry),
                    monitor: monitor.clone(),
                    sender,
                };
                tokio::spawn(task.run());
                events
            }
        };
        ResourceListener {
            events,
            _counted: counted,
        }
    }
}

/// The sampling task of one generation.
struct FeedTask {
    shared: Arc<FeedShared>,
    generation: u64,
    registry: Arc<Registry>,
    monitor: Monitor,
    sender: broadcast::Sender<Arc<str>>,
}

impl FeedTask {
    async fn run(self) {
        let mut steps = self.monitor.steps();
        steps.mark_unchanged();
        let mut picture = BTreeMap::new();
        let mut subscription = None;
        while self.wanted() {
            let Some(followed) = follow(&mut subscription, &self.monitor, &mut picture).await
            else {
                break;
            };
            let turn = tokio::select! {
                () = self.shared.idle.notified() => Turn::Woken,
                received = followed.recv() => Turn::Received(received),
                changed = steps.changed() => Turn::Stepped(changed.is_ok()),
            };
            match turn {
                Turn::Woken => {}
                Turn::Received(Ok(next)) => apply(&mut picture, next),
                // Behind: a fresh subscription and snapshot.
                Turn::Received(Err(broadcast::error::RecvError::Lagged(_))) => subscription = None,
                Turn::Received(Err(broadcast::error::RecvError::Closed)) | Turn::Stepped(false) => {
                    break;
                }
                Turn::Stepped(true) => {
                    // The step's events are on the ring already: apply them first. Behind on
                    // them, the picture is not this step's: a fresh subscription, no sample.
                    let mut behind = false;
                    loop {
                        match followed.recv().now_or_never() {
                            Some(Ok(next)) => apply(&mut picture, next),
                            Some(Err(broadcast::error::RecvError::Lagged(_))) => {
                                behind = true;
                                break;
                            }
                            Some(Err(broadcast::error::RecvError::Closed)) | None => break,
                        }
                    }
                    if behind {
                        subscription = None;
                        continue;
                    }
                    self.sample(&picture).await;
                }
            }
        }
        let mut state = self.shared.lock();
        if state.generation == self.generation {
            state.sender = None;
        }
    }

    /// Whether this task still has listeners: some are counted, and no newer task took over.
    fn wanted(&self) -> bool {
        let state = self.shared.lock();
        state.listeners > 0 && state.generation == self.generation
    }

    /// Sample every confirmed session in `picture` and send the event. Nobody to send it to is
    /// not the end: a listener that just left may still be counted, and one arriving now joins
    /// this channel; whether the task goes on is [`FeedTask::wanted`]'s to say.
    async fn sample(&self, picture: &BTreeMap<String, Reading>) {
        // Newest first, as every listing is: the picture is ordered by id, oldest first.
        let readings: Vec<Reading> = picture
            .values()
            .rev()
            .filter(|reading| matches!(reading.process, ProcessState::Alive))
            .cloned()
            .collect();
        let figures = self.registry.resources(&readings).await;
        let event = ResourcesEvent {
            sessions: readings
                .iter()
                .zip(figures)
                .map(|(reading, figure)| SessionResources {
                    session_id: reading.record.session_id.clone(),
                    resources: figure.as_ref().map(ResourcesView::from),
                })
                .collect(),
        };
        let _ = self.sender.send(Arc::from(encode(&event)));
    }
}

/// What woke the task.
enum Turn {
    /// The last listener left (or a stale wake-up): check again.
    Woken,
    /// The next change of the picture, or why there is none.
    Received(Result<Next, broadcast::error::RecvError>),
    /// A periodic pass completed (`false`: the live view is gone).
    Stepped(bool),
}

/// The subscription the task follows, made (and the picture taken from its snapshot) if there
/// is none; `None` when the live view cannot give one (it is closing or unreadable).
async fn follow<'a>(
    subscription: &'a mut Option<Subscription>,
    monitor: &Monitor,
    picture: &mut BTreeMap<String, Reading>,
) -> Option<&'a mut Subscription> {
    if subscription.is_none() {
        let fresh = monitor.subscribe().await.ok()?;
        picture.clear();
        for reading in fresh.snapshot.readings.iter() {
            picture.insert(reading.record.session_id.clone(), reading.clone());
        }
        *subscription = Some(fresh);
    }
    subscription.as_mut()
}

/// Follow one change of the live view's picture.
fn apply(picture: &mut BTreeMap<String, Reading>, next: Next) {
    match next {
        Next::Snapshot(snapshot) => {
            picture.clear();
            for reading in snapshot.readings.iter() {
                picture.insert(reading.record.session_id.clone(), reading.clone());
            }
        }
        Next::Event(event) => match &event.kind {
            EventKind::Added(reading) | EventKind::Changed { now: reading, .. } => {
                picture.insert(reading.record.session_id.clone(), reading.clone());
            }
            EventKind::Removed { session_id, .. } => {
                picture.remove(session_id);
            }
        },
    }
}
