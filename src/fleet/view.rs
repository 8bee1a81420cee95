//! The fleet as this registry serves it, and its listeners: not configured, unavailable (and
//! why), or current (a [`FleetCache`] at a revision). The watcher feeds it ([`FleetView::read`],
//! [`FleetView::apply`], [`FleetView::advance`], [`FleetView::unavailable`]; public so that a
//! benchmark can feed it without etcd); the fleet endpoints read it.
//!
//! Invariants:
//! - Only a current view is ever handed out: while etcd cannot be reached there is no picture,
//!   only the reason, so a stale fleet is never presented as current.
//! - This registry's own host is never taken from etcd: what etcd holds under its id (which
//!   anyone with write access could have put there) is left out, and in its place the view
//!   shows the picture its own publisher last published under its lease ([`FleetView::own`]),
//!   only while it holds it. So a session it serves as "this host", which a user may stop or
//!   kill through it, is one it verified itself.
//! - A listener gets the picture, then every change after it, without gap or repeat (both are
//!   taken under one lock); ids grow by one per event for the life of the view, and a snapshot
//!   carries the id of the last change it includes. More than [`SNAPSHOT_OVER`] changes at once
//!   go out as one snapshot in their place.
//! - The buffer is bounded ([`EVENT_BUFFER`]): a listener further behind is ended, never
//!   buffered for. The ring holds a mid-stream snapshot by a weak link only.
//! - Going unavailable ends every listener's stream with the reason; closing the view (the
//!   registry's shutdown) ends them too and refuses new ones.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

use tokio::sync::{broadcast, watch};

use super::cache::{CachedSession, FleetCache, FleetChange, WatchChange};
use super::history::History;
use super::{HostEntry, HostId};
use crate::monitor::{EVENT_BUFFER, SNAPSHOT_OVER};

/// Why the fleet cannot be served now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FleetUnavailable {
    /// This registry was started without `--fleet-etcd`.
    #[error("this registry is not part of a fleet: start it with --fleet-etcd")]
    NotConfigured,
    /// etcd cannot be reached, or the view is not read yet: why.
    #[error("the fleet is unavailable: {0}")]
    Unavailable(String),
    /// The registry is shutting down.
    #[error("the registry is shutting down")]
    Closing,
}

/// The fleet at one moment: what `GET /fleet/sessions` answers and a stream's `snapshot`.
#[derive(Debug)]
pub struct FleetSnapshot {
    /// The id of the last change it includes (0 before any).
    pub id: u64,
    /// The etcd revision it describes.
    pub revision: i64,
    /// This registry's own host id.
    pub host_id: HostId,
    /// Every host, by id.
    pub hosts: Vec<Arc<HostEntry>>,
    /// Every session, newest first (then by host and session id), shared with the cache.
    pub sessions: Vec<Arc<CachedSession>>,
    encoded: OnceLock<String>,
}

impl FleetSnapshot {
    /// Its wire form, made by `encode` once however many listeners send it.
    pub fn encoded(&self, encode: impl FnOnce(&Self) -> String) -> &str {
        self.encoded.get_or_init(|| encode(self))
    }

    /// Whether its wire form is made already.
    pub fn is_encoded(&self) -> bool {
        self.encoded.get().is_some()
    }
}

/// A picture of at least this many sessions is let go on the runtime's blocking pool, not
/// where its last holder drops it.
const LET_GO_APART_FROM: usize = 4_096;

impl Drop for FleetSnapshot {
    /// A large picture is let go on the blocking pool, when there is a runtime: at 100,000
    /// sessions, returning its 57 MB text to the kernel and letting go of every session took a
    /// runtime worker (the view's lock held, or a stream's connection) for up to 41 ms while
    /// changes waited. Off a runtime it goes where it is dropped, as any value.
    fn drop(&mut self) {
        if self.sessions.len() < LET_GO_APART_FROM {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let held = (
            std::mem::take(&mut self.sessions),
            std::mem::take(&mut self.hosts),
            std::mem::take(&mut self.encoded),
        );
        // A runtime shutting down drops the task, and with it `held`, where it is.
        drop(runtime.spawn_blocking(move || drop(held)));
    }
}

/// One change, with its id.
#[derive(Debug)]
pub struct FleetEvent {
    /// Grows by one per event, for the life of the view.
    pub id: u64,
    /// What changed.
    pub change: FleetChange,
    encoded: OnceLock<String>,
}

impl FleetEvent {
    /// Its wire form, made by `encode` once however many listeners send it.
    pub fn encoded(&self, encode: impl FnOnce(&FleetChange) -> String) -> &str {
        self.encoded.get_or_init(|| encode(&self.change))
    }
}

/// What a listener receives next.
#[derive(Debug)]
pub enum FleetNext {
    /// One change.
    Event(Arc<FleetEvent>),
    /// Many changes at once: the whole fleet after them; replace everything with it.
    Snapshot(Arc<FleetSnapshot>),
}

/// What the ring carries.
#[derive(Debug, Clone)]
enum Published {
    Event(Arc<FleetEvent>),
    /// Weak: a stalled listener must not pin one picture per snapshot. The view holds the
    /// latest strongly, so a dead link always has a later snapshot behind it.
    Snapshot(Weak<FleetSnapshot>),
}

/// Why a ring's listeners were ended, set before the ring is dropped.
type StreamEnd = Arc<OnceLock<String>>;

/// The fleet's hosts at one revision, as [`FleetView::hosts`] answers.
#[derive(Debug, Clone)]
pub struct FleetHostsNow {
    /// The revision they describe.
    pub revision: i64,
    /// This registry's own host.
    pub own: HostId,
    /// Every host, by id.
    pub hosts: Vec<Arc<HostEntry>>,
}

/// The fleet view. Cheap to clone; clones share everything.
#[derive(Debug, Clone, Default)]
pub struct FleetView {
    /// `None`: not configured.
    shared: Option<Arc<Shared>>,
}

#[derive(Debug)]
struct Shared {
    own: HostId,
    state: Mutex<ViewState>,
    closing: watch::Sender<bool>,
    /// Asks etcd whether it holds a revision (for paging cursors), once a watcher connected.
    history: Mutex<Option<Arc<dyn History>>>,
}

#[derive(Debug)]
struct ViewState {
    /// The fleet, or why there is none to serve.
    cache: Result<FleetCache, String>,
    next_id: u64,
    /// Present while current: dropped (after `ended` is set) when the view goes unavailable.
    ring: Option<broadcast::Sender<Published>>,
    ended: StreamEnd,
    /// The picture at the latest change, built on first read after it.
    picture: Option<Arc<FleetSnapshot>>,
    /// The latest mid-stream snapshot: the only strong hold on it (never read: held).
    _published: Option<Arc<FleetSnapshot>>,
    /// This host as its publisher last published it, while it holds its lease.
    own: Option<FleetCache>,
}

impl FleetView {
    /// The view of a registry started without `--fleet-etcd`: every read answers
    /// [`FleetUnavailable::NotConfigured`].
    pub fn not_configured() -> Self {
        Self::default()
    }

    /// The view of the fleet this registry, host `own`, belongs to: unavailable until a watcher
    /// ([`super::watcher::start`], feature `fleet`) has read it.
    pub fn new(own: HostId) -> Self {
        Self {
            shared: Some(Arc::new(Shared {
                own,
                state: Mutex::new(ViewState {
                    cache: Err("it has not been read from etcd yet".to_owned()),
                    next_id: 1,
                    ring: None,
                    ended: StreamEnd::default(),
                    picture: None,
                    _published: None,
                    own: None,
                }),
                closing: watch::Sender::new(false),
                history: Mutex::new(None),
            })),
        }
    }

    /// This registry's own host id, when it is part of a fleet.
    pub fn own_host(&self) -> Option<&HostId> {
        self.shared.as_ref().map(|shared| &shared.own)
    }

    /// This host as its publisher just published it under its lease (`Some`), or `None` once
    /// it holds no lease: what the view shows as this host from now on, in place of anything
    /// etcd holds under its id. Listeners get the difference.
    pub fn own(&self, published: Option<FleetCache>) {
        let Some(shared) = &self.shared else { return };
        let mut state = shared.lock();
        let changes = own_changes(&shared.own, state.own.as_mut(), published.as_ref());
        state.own = published;
        if state.cache.is_ok() {
            state.publish(&shared.own, changes);
        }
    }

    /// The fleet now, or why it cannot be served.
    pub fn current(&self) -> Result<Arc<FleetSnapshot>, FleetUnavailable> {
        let shared = self.shared()?;
        let mut state = shared.lock();
        state.picture(&shared.own)
    }

    /// Whether the fleet can be served now, and if not why: what [`current`](Self::current)
    /// would answer, without making the picture (tens of milliseconds of the view's lock at
    /// 100,000 sessions) for a caller that only asks.
    pub fn available(&self) -> Result<(), FleetUnavailable> {
        self.shared()?.lock().cache().map(drop)
    }

    /// The fleet's hosts now, or why they cannot be served: without the whole picture, whose
    /// making (every session, sorted) would hold the view, and so every change, for tens of
    /// milliseconds at 100,000 sessions.
    pub fn hosts(&self) -> Result<FleetHostsNow, FleetUnavailable> {
        let shared = self.shared()?;
        let state = shared.lock();
        let cache = state.cache()?;
        Ok(FleetHostsNow {
            revision: cache.revision(),
            own: shared.own.clone(),
            hosts: hosts_of(cache, state.own.as_ref(), &shared.own),
        })
    }

    /// Start listening: the fleet now, then every change after it. The snapshot is handed
    /// apart, so a stream can let go of it once it is sent.
    pub fn subscribe(&self) -> Result<(Arc<FleetSnapshot>, FleetSubscription), FleetUnavailable> {
        let shared = self.shared()?;
        let mut state = shared.lock();
        let snapshot = state.picture(&shared.own)?;
        let events = match &state.ring {
            Some(ring) => ring.subscribe(),
            // A current view always has a ring.
            None => return Err(FleetUnavailable::Closing),
        };
        let subscription = FleetSubscription {
            events,
            closing: shared.closing.subscribe(),
            ended: Arc::clone(&state.ended),
            skipping: false,
        };
        Ok((snapshot, subscription))
    }

    /// Ask `history` whether etcd holds a revision, from now on (the watcher's, on each
    /// connection).
    pub fn set_history(&self, history: Arc<dyn History>) {
        if let Some(shared) = &self.shared {
            *shared
                .history
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(history);
        }
    }

    /// Whether etcd still holds `revision` (has not compacted it away): on etcd's word, asked
    /// now; every revision while no watcher has connected (a view fed otherwise) and any
    /// revision not older than the view's. `Unavailable` when etcd could not say.
    pub async fn holds(&self, revision: i64) -> Result<bool, FleetUnavailable> {
        let shared = self.shared()?;
        let history = shared
            .history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let current = shared.lock().cache.as_ref().ok().map(FleetCache::revision);
        match (history, current) {
            (_, Some(now)) if revision >= now => Ok(true),
            (None, _) => Ok(true),
            (Some(history), _) => history
                .holds(revision)
                .await
                .map_err(FleetUnavailable::Unavailable),
        }
    }

    /// How many listeners are subscribed.
    pub fn listeners(&self) -> usize {
        let Some(shared) = &self.shared else { return 0 };
        let state = shared.lock();
        state
            .ring
            .as_ref()
            .map_or(0, broadcast::Sender::receiver_count)
    }

    /// End every listener's stream and give out no more (the registry's shutdown).
    pub fn close(&self) {
        if let Some(shared) = &self.shared {
            shared.closing.send_replace(true);
        }
    }

    /// The fleet as a fresh read found it: current from now on. After an outage listeners
    /// start anew; while current (a re-read after a compaction) they get the differences.
    pub fn read(&self, fresh: FleetCache) {
        let Some(shared) = &self.shared else { return };
        let mut state = shared.lock();
        match &mut state.cache {
            Ok(cache) => {
                let mut changes = cache.replace(fresh);
                changes.retain(|change| !is_about(change, &shared.own));
                // The revision moved even if nothing else did.
                state.picture = None;
                state.publish(&shared.own, changes);
            }
            Err(_) => {
                state.cache = Ok(fresh);
                state.ring = Some(broadcast::channel(EVENT_BUFFER).0);
                state.ended = StreamEnd::default();
                state.picture = None;
            }
        }
    }

    /// Apply a watch response's events (each with the revision it happened at) and publish
    /// what they changed; an event that does not parse is logged and skipped. Ignored while
    /// unavailable (a fresh read must come first).
    pub fn apply<'a>(&self, events: impl IntoIterator<Item = (i64, WatchChange<'a>)>) {
        let Some(shared) = &self.shared else { return };
        let mut state = shared.lock();
        let Ok(cache) = &mut state.cache else { return };
        let mut changes = Vec::new();
        for (revision, event) in events {
            let applied = cache.apply(revision, event);
            if let Some(refused) = &applied.refused {
                super::refusals::report(refused);
            }
            changes.extend(
                (applied
                    .change
                    .filter(|change| !is_about(change, &shared.own)))
                .map(|change| (revision, change)),
            );
        }
        // A lease's keys go in one revision, in key order (`hosts/` before `sessions/`): a
        // host leaves after its sessions, so no listener holds a session of a host gone.
        changes.sort_by_key(|(revision, change)| {
            (*revision, matches!(change, FleetChange::HostLeft { .. }))
        });
        state.picture = None;
        state.publish(&shared.own, changes.into_iter().map(|(_, c)| c).collect());
    }

    /// The watch says the fleet is unchanged up to `revision`.
    pub fn advance(&self, revision: i64) {
        let Some(shared) = &self.shared else { return };
        let mut state = shared.lock();
        if let Ok(cache) = &mut state.cache
            && revision > cache.revision()
        {
            cache.advance(revision);
            state.picture = None;
        }
    }

    /// etcd cannot be reached (`why`): serve nothing until a fresh read, and end every stream.
    pub fn unavailable(&self, why: String) {
        let Some(shared) = &self.shared else { return };
        let mut state = shared.lock();
        if state.cache.is_ok() {
            tracing::warn!(%why, "the fleet is unavailable");
        }
        let _ = state
            .ended
            .set(format!("the fleet became unavailable: {why}"));
        state.cache = Err(why);
        state.ring = None;
        state.picture = None;
        state._published = None;
    }

    fn shared(&self) -> Result<&Arc<Shared>, FleetUnavailable> {
        let shared = self
            .shared
            .as_ref()
            .ok_or(FleetUnavailable::NotConfigured)?;
        if *shared.closing.borrow() {
            return Err(FleetUnavailable::Closing);
        }
        Ok(shared)
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, ViewState> {
        // Every update leaves the state whole before it can panic: a poisoned lock's state is
        // still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ViewState {
    /// The cache, or why the fleet cannot be served.
    fn cache(&self) -> Result<&FleetCache, FleetUnavailable> {
        (self.cache.as_ref()).map_err(|why| FleetUnavailable::Unavailable(why.clone()))
    }

    fn picture(&mut self, own: &HostId) -> Result<Arc<FleetSnapshot>, FleetUnavailable> {
        let cache = match &self.cache {
            Ok(cache) => cache,
            Err(why) => return Err(FleetUnavailable::Unavailable(why.clone())),
        };
        let id = self.next_id - 1;
        let mine = self.own.as_ref();
        let picture = self
            .picture
            .get_or_insert_with(|| Arc::new(snapshot_of(cache, mine, id, own)));
        Ok(Arc::clone(picture))
    }

    /// Send `changes` to every listener, one by one, or as one snapshot when they are many.
    fn publish(&mut self, own: &HostId, changes: Vec<FleetChange>) {
        if changes.is_empty() {
            return;
        }
        self.picture = None;
        if changes.len() > SNAPSHOT_OVER {
            tracing::info!(
                changes = changes.len(),
                "many fleet changes at once: one snapshot in their place"
            );
            self.next_id += 1;
            let Ok(cache) = &self.cache else { return };
            let mine = self.own.as_ref();
            let snapshot = Arc::new(snapshot_of(cache, mine, self.next_id - 1, own));
            let link = Arc::downgrade(&snapshot);
            self.picture = Some(Arc::clone(&snapshot));
            self._published = Some(snapshot);
            if let Some(ring) = &self.ring {
                let _ = ring.send(Published::Snapshot(link));
            }
            return;
        }
        for change in changes {
            let id = self.next_id;
            self.next_id += 1;
            // No listener is not an error.
            if let Some(ring) = &self.ring {
                let _ = ring.send(Published::Event(Arc::new(FleetEvent {
                    id,
                    change,
                    encoded: OnceLock::new(),
                })));
            }
        }
    }
}

/// The picture of `cache` including change `id`: every host but `own` as etcd holds it, and
/// `own` as its publisher published it (`mine`), if it holds its lease.
fn snapshot_of(
    cache: &FleetCache,
    mine: Option<&FleetCache>,
    id: u64,
    own: &HostId,
) -> FleetSnapshot {
    let others = (cache.sessions()).filter(|c| c.host_id() != own);
    let mut sessions: Vec<_> = others
        .chain(mine.into_iter().flat_map(FleetCache::sessions))
        .cloned()
        .collect();
    // Newest first; equal start times by host, then session id, as the cache orders them.
    sessions.sort_by(|a, b| {
        (b.started_at().cmp(a.started_at()))
            .then_with(|| a.host_id().cmp(b.host_id()))
            .then_with(|| a.session_id().cmp(b.session_id()))
    });
    FleetSnapshot {
        id,
        revision: cache.revision(),
        host_id: own.clone(),
        hosts: hosts_of(cache, mine, own),
        sessions,
        encoded: OnceLock::new(),
    }
}

/// The hosts of `cache` but `own`, and `own` as `mine` holds it, by id.
fn hosts_of(cache: &FleetCache, mine: Option<&FleetCache>, own: &HostId) -> Vec<Arc<HostEntry>> {
    let mut hosts: Vec<_> = (cache.hosts())
        .filter(|host| host.host_id != own.as_str())
        .chain(mine.into_iter().flat_map(FleetCache::hosts))
        .cloned()
        .collect();
    hosts.sort_by(|a, b| a.host_id.cmp(&b.host_id));
    hosts
}

/// Whether `change` is about host `host`.
fn is_about(change: &FleetChange, host: &HostId) -> bool {
    let about = match change {
        FleetChange::HostJoined(entry) | FleetChange::HostChanged(entry) => entry.host_id.as_str(),
        FleetChange::SessionAdded(entry) | FleetChange::SessionChanged { now: entry, .. } => {
            entry.host_id().as_str()
        }
        FleetChange::HostLeft { host_id } | FleetChange::SessionRemoved { host_id, .. } => {
            host_id.as_str()
        }
    };
    about == host.as_str()
}

/// The changes from this host `own` as shown (`shown`, `None`: not at all) to `published`.
fn own_changes(
    own: &HostId,
    shown: Option<&mut FleetCache>,
    published: Option<&FleetCache>,
) -> Vec<FleetChange> {
    match (shown, published) {
        (Some(shown), Some(published)) => shown.replace(published.clone()),
        (None, Some(published)) => (published.hosts())
            .map(|host| FleetChange::HostJoined(Arc::clone(host)))
            .chain((published.sessions()).map(|s| FleetChange::SessionAdded(Arc::clone(s))))
            .collect(),
        // Sessions first, as a lease's keys leave: no listener holds a session of a host gone.
        (Some(shown), None) => (shown.sessions())
            .map(|s| FleetChange::SessionRemoved {
                host_id: own.clone(),
                session_id: s.session_id().to_owned(),
            })
            .chain((shown.hosts()).map(|_| FleetChange::HostLeft {
                host_id: own.clone(),
            }))
            .collect(),
        (None, None) => Vec::new(),
    }
}

/// A listener: every change after the snapshot it subscribed with.
#[derive(Debug)]
pub struct FleetSubscription {
    events: broadcast::Receiver<Published>,
    closing: watch::Receiver<bool>,
    ended: StreamEnd,
    /// Skipping to the next snapshot past one whose picture is gone; kept here so that a
    /// cancelled [`FleetSubscription::next`] resumes where it was.
    skipping: bool,
}

impl FleetSubscription {
    /// The next change, or a snapshot in place of many; or why the stream ends: the listener
    /// fell more than [`EVENT_BUFFER`] behind, the fleet became unavailable, or the registry
    /// shuts down. Cancel-safe.
    pub async fn next(&mut self) -> Result<FleetNext, String> {
        let mut closing = self.closing.clone();
        tokio::select! {
            _ = closing.wait_for(|closing| *closing) => {
                Err(FleetUnavailable::Closing.to_string())
            }
            next = self.recv() => next,
        }
    }

    async fn recv(&mut self) -> Result<FleetNext, String> {
        loop {
            match self.events.recv().await {
                Ok(Published::Snapshot(link)) => match link.upgrade() {
                    Some(snapshot) => {
                        self.skipping = false;
                        return Ok(FleetNext::Snapshot(snapshot));
                    }
                    None => self.skipping = true,
                },
                Ok(Published::Event(event)) if !self.skipping => {
                    return Ok(FleetNext::Event(event));
                }
                Ok(Published::Event(_)) => {}
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::info!(missed, "dropping a fleet listener that fell behind");
                    return Err(format!(
                        "this listener fell more than {EVENT_BUFFER} events behind"
                    ));
                }
                Err(broadcast::error::RecvError::Closed) => {
                    return Err(self
                        .ended
                        .get()
                        .cloned()
                        .unwrap_or_else(|| FleetUnavailable::Closing.to_string()));
                }
            }
        }
    }
}

mod page;
#[cfg(test)]
mod tests;

pub use page::FleetPage;
