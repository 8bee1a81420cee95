//! The live view of the running directory: one filesystem watch and one verification loop that
//! keep a verified picture current and publish every change as an [`Event`], for any number of
//! listeners (the `/events` stream is its only client today).
//!
//! Invariants kept here:
//! - **One loop, however many listeners.** A listener costs a broadcast receiver, never a scan
//!   or a probe. The loop runs while at least one listener is subscribed and stops after the
//!   last one leaves, so an idle registry probes nothing.
//! - **A listener changes the disk.** While at least one listener is subscribed, the loop
//!   prunes the records of sessions it finds gone (below). So an open `/events` stream removes
//!   files, unlike the plain GETs, which only read; with nobody listening, the monitor prunes
//!   nothing.
//! - **A failure belongs to its loop.** Each loop started has a generation; a first picture
//!   that fails is reported only to the listeners that waited on that loop. A listener that
//!   arrives later starts a new loop rather than inheriting an old failure.
//! - **A directory that stays unreadable ends the loop, and every stream with it.** When
//!   [`FAILED_PASSES_TO_END`] periodic passes in a row (one interval apart) cannot read the running
//!   directory (it was removed, replaced by a file or a link, handed to another uid, or an I/O
//!   error such as `EMFILE` persists), the loop stops as it does when the last listener leaves, and
//!   every listener's event channel closes after the events already published (so no event is lost
//!   before the end). [`Subscription::ended_by`] then says why. Nothing is published for it: the
//!   picture is not changed, no session is `removed` or `changed`. A listener that comes back
//!   starts a new loop, whose first picture fails the same way `GET /sessions` does while the
//!   directory is unreadable ([`SubscribeError::Unavailable`] carries the registry's error), and is
//!   a fresh snapshot once it is back. Why two passes and not one: a single failed pass is often a
//!   blip (`EMFILE` during a burst of connections, a directory murmur is recreating), and ending
//!   every stream on it would turn a blip into a reconnect storm for every dashboard; a failure
//!   still there one interval later is the directory's state, not a blip. Only the periodic passes
//!   count, so two passes a moment apart (a nudge just after a tick) cannot make a blip look
//!   persistent: a nudged pass that fails neither counts nor resets the count, one that succeeds
//!   resets it. So the streams end one to two intervals after the directory goes (2–4 s by
//!   default), and until then the picture is kept as it was.
//! - **No gap, no repeat.** A listener's snapshot and its receiver are taken under the lock the
//!   loop publishes under, so it gets every event after the snapshot and none before it (or,
//!   where it skips to a later snapshot, see *Bounded memory*, that snapshot includes them).
//! - **Ids only grow.** Event ids increase by one per event for the life of the process; a
//!   snapshot carries the id of the last event it includes. A listener sees them one by one,
//!   except where it skips to a later snapshot (see *Bounded memory*), whose id covers the ones
//!   it skipped.
//! - **Verdicts are complete.** A session is announced (`added`) only with a three-layer verdict;
//!   a record still waiting for its first probe is not in the picture yet. A new record whose
//!   process is already gone is announced `added` (state `gone`), then pruned and `removed`.
//! - **Removal on evidence only.** A record whose process layers 1–2 find gone is reported
//!   `changed` to gone, then pruned through [`Registry::prune_session`] (which re-reads the
//!   evidence and the file itself) and reported `removed`. Records already gone when the first
//!   picture is taken are pruned (each a `removed` event) before any listener gets the picture,
//!   so no snapshot lists them. A directory that cannot be read is never evidence that its
//!   sessions ended: the picture is kept as it was. Nor is a record file that merely failed to
//!   read (an I/O error such as `EMFILE` or `EACCES`, or a file replaced throughout the read;
//!   [`Unreadable::is_read_failure`](crate::running::Unreadable::is_read_failure)): its session
//!   keeps its last reading, and the record it was read from, and the file is not counted
//!   unreadable. Its process is still checked: while the file under its name is still the
//!   one read (same device, inode and modification time), every pass asks layers 1–2 again
//!   about the record last read, so a session held this way never shows live past its
//!   process's death. A file replaced since is not checked this way: it may name another
//!   process (a new writer took the session over), so the last reading stands until it reads.
//!   If they find it gone, the session is `changed` to gone with that evidence, and stays in
//!   the picture, not pruned, while the file cannot be read (pruning re-reads the file, and a
//!   file nobody can read is never unlinked); once it reads again, it is pruned as any gone
//!   record. If they cannot verify it, it is `changed` to unreachable. Only a file that proves
//!   it is not a record (malformed, foreign, a symlink, too large, naming another session …)
//!   removes its session as `unreadable`. An entry gone
//!   between the listing and its reading is not in the scan at all (see
//!   [`crate::running::scan_cached`]), so its session leaves as `record_removed`.
//! - **One judgement.** The first picture and every later pass read the directory and judge it
//!   through the same step (`Looper::pass`); they differ only in probing every door and in
//!   publishing the first picture's sessions as the baseline rather than as `added` events.
//! - **Bounded memory.** Events go through a fixed-size ring; a listener that falls more than
//!   [`EVENT_BUFFER`] events behind is dropped (it reconnects and gets a fresh snapshot). The
//!   ring never holds a whole picture: a snapshot in it is a weak link ([`SnapshotLink`]), and
//!   only the latest one published is held, by the monitor, until the next one replaces it. A
//!   listener that never reads (a stalled client is never polled, so it never even lags) thus
//!   pins at most [`EVENT_BUFFER`] single changes, never one picture per big step. A listener
//!   that reaches a snapshot whose picture is gone skips it, and the events after it, up to the
//!   later snapshot that replaced it, which includes them all ([`Subscription::recv`]).
//! - **A big change is one snapshot.** A step of the loop is one pass, or one batch of the
//!   probe answers that are in, together with the prunes it leads to. Its events are held back
//!   and published in one or two flushes (the pass's or the answers', then the prunes'), each
//!   under the lock. A flush goes out event by event only while the step's total on the ring
//!   (what its earlier flush put there, plus this one) stays within [`SNAPSHOT_OVER`] (half the
//!   ring); otherwise one [`Published::Snapshot`] of the picture after them goes out in its
//!   place, with one id. So one step puts at most `SNAPSHOT_OVER + 1` entries on the ring, and
//!   a listener at most `EVENT_BUFFER - SNAPSHOT_OVER - 1` (511) entries behind when a step
//!   begins is not dropped by it: a thousand doors turning unreachable at once, or 512
//!   sessions found gone and then pruned, do not drop every listener at once (and bring them
//!   all back reconnecting). Nothing bounds what steps in a row add up to: a listener must
//!   keep reading between them. A listener replaces everything it knows with a snapshot. Ids
//!   still grow by one per event and nothing is lost or repeated: the snapshot includes every
//!   change it stands for, and the ones held back never had ids.
//! - **Stale answers are dropped.** A probe's verdict is applied only if the record it probed is
//!   still the one on disk and its process was not found gone in the meantime.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::Duration;

use notify::Watcher;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinSet;

use crate::registry::{PruneOutcome, Reading, Registry, RegistryError, RemovalCause, copy_error};
use crate::running::{Liveness, ProcessState, RECORD_SUFFIX, RunningRecord, UnreadableEntry};

/// How often every session is re-verified when nothing else asks for it (the default).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(2);
/// The shortest interval accepted: a shorter one would turn the loop into a busy wait.
pub const MIN_INTERVAL: Duration = Duration::from_millis(50);
/// How many events a listener may fall behind before it is dropped.
pub const EVENT_BUFFER: usize = 1024;
/// A step of the loop (a pass, or the probe answers in, with the prunes after either) puts at
/// most this many single events on the ring; a flush that would take it past this publishes
/// one snapshot instead (half the ring: a listener that is a little behind still has room).
pub const SNAPSHOT_OVER: usize = EVENT_BUFFER / 2;
/// How many periodic passes in a row (one interval apart) must fail to read the running
/// directory before the loop ends every stream (one failed pass is kept as a blip; see the
/// module docs).
pub const FAILED_PASSES_TO_END: u32 = 2;

/// One change in the picture.
#[derive(Debug)]
pub struct Event {
    /// Increases by one per event, for the life of the process.
    pub id: u64,
    /// What changed.
    pub kind: EventKind,
    encoded: OnceLock<String>,
}

impl Event {
    /// The event's wire form, made by `encode` on first use and shared by every listener after,
    /// so a hundred listeners cost one encoding.
    pub fn encoded(&self, encode: impl FnOnce(&EventKind) -> String) -> &str {
        self.encoded.get_or_init(|| encode(&self.kind))
    }
}

/// What an [`Event`] says.
#[derive(Debug, Clone)]
pub enum EventKind {
    /// A session entered the picture, with its first complete verdict.
    Added(Reading),
    /// A session's verdict moved (its state, or what layers 1–2 say).
    Changed {
        /// The verdict before.
        old: Liveness,
        /// The session as it is now.
        now: Reading,
    },
    /// A session left the picture.
    Removed {
        /// The session.
        session_id: String,
        /// Why.
        because: RemovedBecause,
        /// The evidence, when there is some (e.g. "no process holds pid 4242").
        detail: Option<String>,
    },
}

impl EventKind {
    /// The session the event is about.
    pub fn session_id(&self) -> &str {
        match self {
            Self::Added(reading) | Self::Changed { now: reading, .. } => &reading.record.session_id,
            Self::Removed { session_id, .. } => session_id,
        }
    }
}

/// What the event ring carries: a change, or a snapshot in place of many.
#[derive(Debug, Clone)]
pub enum Published {
    /// One change.
    Event(Arc<Event>),
    /// Too many changes at once (more than [`SNAPSHOT_OVER`] in one step): the whole picture
    /// after them, to replace everything the listener knows, as a weak link (see
    /// [`SnapshotLink`]).
    Snapshot(SnapshotLink),
}

/// A mid-stream snapshot as the ring carries it: its id and a weak link to its picture.
///
/// Weak because the ring keeps every value until every receiver has read it, and a stalled
/// listener (a client whose socket stopped draining, so its stream is never polled) never
/// reads nor lags: a strong picture per snapshot would let it pin up to [`EVENT_BUFFER`] whole
/// pictures. The monitor holds the latest one it published strongly, until it publishes the
/// next one or its loop stops; so a link that is dead has a later snapshot behind it in the
/// same ring (which includes everything the dead one did), or the ring is closing.
#[derive(Debug, Clone)]
pub struct SnapshotLink {
    /// The snapshot's id: that of the last event it includes.
    pub id: u64,
    picture: Weak<Snapshot>,
}

impl SnapshotLink {
    /// The picture, while it is the latest snapshot this loop published.
    pub fn upgrade(&self) -> Option<Snapshot> {
        self.picture.upgrade().map(|snapshot| (*snapshot).clone())
    }
}

/// What [`Subscription::recv`] hands over.
#[derive(Debug)]
pub enum Next {
    /// One change.
    Event(Arc<Event>),
    /// Many changes at once: the whole picture after them. Replace everything with it.
    Snapshot(Snapshot),
}

/// Why a session left the picture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemovedBecause {
    /// The registry pruned its record: the process is gone.
    Pruned,
    /// The registry stopped it, and its record went with it.
    Stopped,
    /// Its record file disappeared, removed by someone else (murmur itself on a clean exit).
    RecordRemoved,
    /// Its record file is still there and proves it is no longer a valid record.
    Unreadable,
}

impl From<RemovalCause> for RemovedBecause {
    fn from(cause: RemovalCause) -> Self {
        match cause {
            RemovalCause::Pruned => Self::Pruned,
            RemovalCause::Stopped => Self::Stopped,
        }
    }
}

impl RemovedBecause {
    /// The word on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pruned => "pruned",
            Self::Stopped => "stopped",
            Self::RecordRemoved => "record_removed",
            Self::Unreadable => "unreadable",
        }
    }
}

/// The whole picture at one moment, for a listener that just arrived.
///
/// The default is an empty picture (id 0), for a listener that has sent its snapshot and need
/// not keep it.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The id of the last event the snapshot includes (0 before any event).
    pub id: u64,
    /// Every verified session, newest first.
    pub readings: Arc<[Reading]>,
    /// How many entries of the directory are not valid records (an entry that merely failed
    /// to read while its session is in the picture is not counted: its session stands for it).
    pub unreadable: usize,
    encoded: Arc<OnceLock<String>>,
}

impl Snapshot {
    /// The snapshot's wire form, made once per picture however many listeners receive it.
    pub fn encoded(&self, encode: impl FnOnce(&Snapshot) -> String) -> &str {
        self.encoded.get_or_init(|| encode(self))
    }
}

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
    /// [`Subscription::recv`], which follows a snapshot's weak link (see [`SnapshotLink`]).
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
    /// The next change, or the next snapshot in place of many.
    ///
    /// A snapshot whose picture is gone (a later snapshot replaced it while this listener was
    /// behind) is skipped, and so is every event after it, up to the later snapshot, which
    /// includes all of them: no gap, no repeat, and ids still only grow. `Lagged` means the
    /// listener fell more than [`EVENT_BUFFER`] behind and must be dropped; `Closed` (after
    /// every event already published) means the loop stopped: see [`Subscription::ended_by`].
    /// Cancel-safe.
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

/// Why one loop stopped, set (once) before its event channel closes, so a listener that finds
/// the channel closed reads it.
type LoopEnd = Arc<OnceLock<Arc<RegistryError>>>;

/// The live view over one registry. Cheap to clone; clones share the loop.
#[derive(Debug, Clone)]
pub struct Monitor {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    registry: Arc<Registry>,
    state: Mutex<Picture>,
    /// Bumped whenever the loop starts, finishes its first pass, or stops, so subscribers
    /// waiting for a first picture wake up.
    progress: watch::Sender<u64>,
    closing: watch::Sender<bool>,
}

#[derive(Debug, Default)]
struct Picture {
    interval: Option<Duration>,
    next_id: u64,
    sessions: BTreeMap<String, Reading>,
    unreadable: usize,
    listeners: usize,
    running: bool,
    ready: bool,
    /// The generation of the latest loop started (0: none yet).
    generation: u64,
    /// Why the first picture of the loop of that generation failed, for its waiters only.
    failure: Option<(u64, Arc<RegistryError>)>,
    /// The picture as it is now, built for the first listener that asks and kept until it
    /// changes.
    snapshot: Option<Arc<Snapshot>>,
    /// The latest mid-stream snapshot published, the only strong hold on it: the ring carries
    /// weak links (see [`SnapshotLink`]). Replaced by the next one; dropped when the loop stops.
    published: Option<Arc<Snapshot>>,
    /// The running loop's event channel. Each loop has its own, dropped when it stops, so its
    /// listeners' receivers close (after the events already sent) whenever the loop ends.
    events: Option<broadcast::Sender<Published>>,
    /// Why the running loop ended, for its listeners.
    ended: LoopEnd,
    /// Events held back by [`Shared::hold`] until [`Shared::flush`] (no ids yet).
    held: Option<Vec<EventKind>>,
    /// What the current step of the loop put on the ring so far (events and snapshots), so
    /// that its flushes together, not each one, stay within [`SNAPSHOT_OVER`]. Zeroed by
    /// [`Shared::begin_step`].
    step_sent: usize,
}

impl Monitor {
    /// A monitor over `registry`, not running until someone subscribes.
    pub fn new(registry: Arc<Registry>) -> Self {
        Self {
            shared: Arc::new(Shared {
                registry,
                state: Mutex::new(Picture {
                    next_id: 1,
                    ..Picture::default()
                }),
                progress: watch::Sender::new(0),
                closing: watch::Sender::new(false),
            }),
        }
    }

    /// Set how often every session is re-verified (at least [`MIN_INTERVAL`]); applies from
    /// the next time the loop starts.
    pub fn set_interval(&self, interval: Duration) {
        self.shared.lock().interval = Some(interval.max(MIN_INTERVAL));
    }

    /// Start listening: the picture now and every change after it.
    ///
    /// Starts the loop if it is not running, and waits for its first complete picture (at most
    /// as long as the slowest door's deadlines). Fails with the first picture's failure only
    /// if it came from a loop this call waited on.
    pub async fn subscribe(&self) -> Result<Subscription, SubscribeError> {
        let guard = ListenerGuard::new(&self.shared);
        let mut progress = self.shared.progress.subscribe();
        // The generation of the loop this call waits on, once it waits on one.
        let mut waited_on = None;
        loop {
            if *self.shared.closing.borrow() {
                return Err(SubscribeError::Closing);
            }
            {
                let mut picture = self.shared.lock();
                if picture.running && picture.ready {
                    let events = picture.events.get_or_insert_with(channel).subscribe();
                    let snapshot = Snapshot::clone(&picture.snapshot());
                    return Ok(Subscription {
                        snapshot,
                        events,
                        closing: self.shared.closing.subscribe(),
                        skipping: false,
                        ended: Arc::clone(&picture.ended),
                        _listener: guard,
                    });
                }
                if picture.running {
                    waited_on = Some(picture.generation);
                } else {
                    if let Some((generation, failure)) = &picture.failure
                        && waited_on == Some(*generation)
                    {
                        // Left in place: every listener that waited on this loop gets it.
                        return Err(SubscribeError::Unavailable(copy_error(failure)));
                    }
                    // Any failure on record is from a loop nobody here waited on, perhaps long
                    // ago: it says nothing about the directory now. Try again.
                    picture.generation += 1;
                    picture.failure = None;
                    picture.running = true;
                    picture.ready = false;
                    picture.events = Some(channel());
                    picture.ended = LoopEnd::default();
                    waited_on = Some(picture.generation);
                    let shared = Arc::clone(&self.shared);
                    tokio::spawn(run(shared, picture.generation));
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
        self.shared.closing.send_replace(true);
    }

    /// Whether [`Monitor::close`] was called: no stream is given out any more.
    pub fn is_closing(&self) -> bool {
        *self.shared.closing.borrow()
    }

    /// How many listeners are subscribed (or waiting for their first picture).
    pub fn listeners(&self) -> usize {
        self.shared.lock().listeners
    }

    /// Whether the verification loop is running.
    pub fn is_running(&self) -> bool {
        self.shared.lock().running
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Picture> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Record `kind` under the lock and send it to every listener (or hold it back, between
    /// [`Shared::hold`] and [`Shared::flush`]).
    fn publish(&self, picture: &mut Picture, kind: EventKind) {
        picture.snapshot = None;
        if let Some(held) = &mut picture.held {
            held.push(kind);
            return;
        }
        let id = picture.next_id;
        picture.next_id += 1;
        picture.step_sent += 1;
        tracing::debug!(id, session_id = kind.session_id(), "event");
        // No receiver (or no channel, the loop just stopped) is not an error: the loop runs for
        // listeners that may all just have left.
        if let Some(events) = &picture.events {
            let _ = events.send(Published::Event(Arc::new(Event {
                id,
                kind,
                encoded: OnceLock::new(),
            })));
        }
    }

    /// Hold back what is published from now until [`Shared::flush`], under the same lock.
    fn hold(picture: &mut Picture) {
        picture.held.get_or_insert_with(Vec::new);
    }

    /// Start one step of the loop (a pass, or the probe answers in, with the prunes after
    /// either): nothing of it is on the ring yet.
    fn begin_step(&self) {
        self.lock().step_sent = 0;
    }

    /// Publish what was held back: each event, or, when they would take what this step put
    /// on the ring past [`SNAPSHOT_OVER`], one snapshot of the picture as it is now, in their
    /// place. Counted over the step, not the flush: a pass that sent 500 changes and the
    /// prunes after it that would send 500 more must not send 1,000 back to back.
    fn flush(&self, picture: &mut Picture) {
        let Some(held) = picture.held.take() else {
            return;
        };
        if held.is_empty() {
            return;
        }
        if picture.step_sent + held.len() <= SNAPSHOT_OVER {
            for kind in held {
                self.publish(picture, kind);
            }
            return;
        }
        tracing::info!(
            events = held.len(),
            already = picture.step_sent,
            "many changes in one step: publishing one snapshot in their place"
        );
        picture.step_sent += 1;
        // The id is taken first, so the snapshot carries it (the last event it includes), and
        // listeners arriving later share its encoding.
        picture.next_id += 1;
        picture.snapshot = None;
        let snapshot = picture.snapshot();
        let link = SnapshotLink {
            id: snapshot.id,
            picture: Arc::downgrade(&snapshot),
        };
        // Replacing the one before lets it go: listeners still behind it skip to this one.
        picture.published = Some(snapshot);
        if let Some(events) = &picture.events {
            let _ = events.send(Published::Snapshot(link));
        }
    }

    fn bump_progress(&self) {
        self.progress.send_modify(|n| *n += 1);
    }

    /// Mark the loop stopped and forget its picture; the next loop builds a fresh one. Its
    /// event channel is dropped, so every listener's stream ends after the events already sent.
    fn stop(&self, picture: &mut Picture) {
        picture.running = false;
        picture.ready = false;
        picture.sessions.clear();
        picture.snapshot = None;
        picture.published = None;
        picture.events = None;
        self.bump_progress();
    }

    /// Stop the loop because the running directory stayed unreadable, telling its listeners
    /// why before their channels close. Publishes nothing: it is no evidence about sessions.
    fn end(&self, picture: &mut Picture, error: RegistryError) {
        // Set before the channel is dropped, so a listener that finds it closed can read it.
        let _ = picture.ended.set(Arc::new(error));
        self.stop(picture);
    }
}

impl Picture {
    fn snapshot(&mut self) -> Arc<Snapshot> {
        if let Some(snapshot) = &self.snapshot {
            return Arc::clone(snapshot);
        }
        let snapshot = Arc::new(Snapshot {
            id: self.next_id - 1,
            readings: self.sessions.values().rev().cloned().collect(),
            unreadable: self.unreadable,
            encoded: Arc::default(),
        });
        self.snapshot = Some(Arc::clone(&snapshot));
        snapshot
    }
}

/// A loop's event channel (its receiver is made per listener).
fn channel() -> broadcast::Sender<Published> {
    broadcast::channel(EVENT_BUFFER).0
}

/// Counts a listener from the moment it asks until its subscription is dropped.
#[derive(Debug)]
struct ListenerGuard {
    shared: Arc<Shared>,
}

impl ListenerGuard {
    fn new(shared: &Arc<Shared>) -> Self {
        shared.lock().listeners += 1;
        Self {
            shared: Arc::clone(shared),
        }
    }
}

impl Drop for ListenerGuard {
    fn drop(&mut self) {
        self.shared.lock().listeners -= 1;
    }
}

/// Which pass [`Looper::pass`] makes.
#[derive(Debug, Clone, Copy)]
enum Pass {
    /// The loop's first picture: every door probed, the result published as the baseline
    /// (listeners get it as their snapshot; only prunes are events).
    First,
    /// A later pass: `full` re-probes every door, otherwise only records not probed as they
    /// are.
    Later { full: bool },
}

/// A probe's answer: the record that was probed and what the three layers said of it.
type ProbeAnswer = (RunningRecord, Reading);

/// The loop's own bookkeeping, beside the shared picture.
struct Looper {
    shared: Arc<Shared>,
    /// The record on disk for every session seen by the last scan (probed or not).
    on_disk: HashMap<String, RunningRecord>,
    /// The record each in-flight probe is probing, by session.
    probing: HashMap<String, RunningRecord>,
    probes: JoinSet<ProbeAnswer>,
    watch: Option<DirectoryWatch>,
    changes: mpsc::Receiver<()>,
    changes_sender: mpsc::Sender<()>,
    /// How many periodic passes in a row failed to read the directory (see
    /// [`FAILED_PASSES_TO_END`]).
    failed_passes: u32,
}

/// The verification loop of `generation`: a first picture, then a pass on every tick and every
/// change the watch reports, until the last listener leaves or the registry shuts down.
async fn run(shared: Arc<Shared>, generation: u64) {
    let (changes_sender, changes) = mpsc::channel(1);
    let mut looper = Looper {
        shared: Arc::clone(&shared),
        on_disk: HashMap::new(),
        probing: HashMap::new(),
        probes: JoinSet::new(),
        watch: None,
        changes,
        changes_sender,
        failed_passes: 0,
    };
    let interval = shared.lock().interval.unwrap_or(DEFAULT_INTERVAL);
    let mut closing = shared.closing.subscribe();
    looper.rewatch();
    let first = tokio::select! {
        first = looper.pass(Pass::First) => first.map_err(Some),
        // Its waiters see the registry closing and answer that; there is no failure to keep.
        () = closed(&mut closing) => Err(None),
    };
    {
        let mut picture = shared.lock();
        match first {
            Ok(()) => picture.ready = true,
            Err(failure) => {
                picture.failure = failure.map(|error| (generation, Arc::new(error)));
                // Nobody subscribed to this loop's channel yet: stopping drops it unused.
                shared.stop(&mut picture);
                return;
            }
        }
    }
    shared.bump_progress();
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = closed(&mut closing) => {
                shared.stop(&mut shared.lock());
                break;
            }
            _ = ticks.tick() => {
                if looper.stop_if_nobody_listens() || looper.later_pass(true).await.is_break() {
                    break;
                }
            }
            Some(()) = looper.changes.recv() => {
                if looper.later_pass(false).await.is_break() {
                    break;
                }
            }
            Some(joined) = looper.probes.join_next(), if !looper.probes.is_empty() => {
                // Every answer already in is applied as one step, so doors that time out
                // together make one batch of events (or one snapshot), not one each.
                let mut answers: Vec<ProbeAnswer> = joined.into_iter().collect();
                while let Some(joined) = looper.probes.try_join_next() {
                    answers.extend(joined);
                }
                looper.apply_probes(answers).await;
            }
        }
    }
    looper.probes.abort_all();
}

/// Resolves once the registry shuts down (or the monitor is gone).
pub async fn closed(closing: &mut watch::Receiver<bool>) {
    let _ = closing.wait_for(|closing| *closing).await;
}

impl Looper {
    fn registry(&self) -> &Registry {
        &self.shared.registry
    }

    /// Stop when the last listener has left. Decided and done under the lock a new listener
    /// takes, so a newcomer either counts here or finds the loop stopped and starts another
    /// (which this one, returning at once, cannot disturb).
    fn stop_if_nobody_listens(&self) -> bool {
        let mut picture = self.shared.lock();
        if picture.listeners == 0 {
            self.shared.stop(&mut picture);
            return true;
        }
        false
    }

    /// (Re)start the directory watch when there is none or the directory was replaced.
    fn rewatch(&mut self) {
        let dir = self.registry().dir().to_path_buf();
        let identity = directory_identity(&dir);
        if let Some(watch) = &self.watch
            && identity.is_some()
            && watch.identity == identity
        {
            return;
        }
        self.watch = DirectoryWatch::start(&dir, identity, self.changes_sender.clone());
    }

    /// A pass after the first: a full one (`full`, on every tick) re-probes every door and
    /// renews the watch; a nudged one probes only records not yet probed as they are.
    ///
    /// `Break` when the loop has stopped: this pass was the [`FAILED_PASSES_TO_END`]th
    /// periodic pass in a row that could not read the directory.
    async fn later_pass(&mut self, full: bool) -> ControlFlow<()> {
        if full {
            self.rewatch();
        }
        let Err(error) = self.pass(Pass::Later { full }).await else {
            self.failed_passes = 0;
            return ControlFlow::Continue(());
        };
        // Not evidence that any session ended: the picture is kept either way.
        self.watch = None;
        if full {
            self.failed_passes += 1;
        }
        if self.failed_passes < FAILED_PASSES_TO_END {
            tracing::warn!(%error, "cannot scan the running directory; keeping the last picture");
            return ControlFlow::Continue(());
        }
        tracing::warn!(
            %error,
            passes = self.failed_passes,
            "the running directory stays unreadable; ending every event stream"
        );
        self.shared.end(&mut self.shared.lock(), error);
        ControlFlow::Break(())
    }

    /// Scan the directory, judge every record (layers 1–2, and 3 for the first picture), and
    /// bring the picture in line: verdicts for what is decided, probes for the rest, removals
    /// for what left, prunes for what is gone. `Err` (the directory could not be read) leaves
    /// the picture exactly as it was.
    async fn pass(&mut self, pass: Pass) -> Result<(), RegistryError> {
        let first = matches!(pass, Pass::First);
        let full = matches!(pass, Pass::First | Pass::Later { full: true });
        // A step of its own, with the prunes it leads to.
        self.shared.begin_step();
        let scan = self.registry().scan().await?;
        let readings = self.registry().verify_records(scan.records, first).await;
        // A session whose file failed to read keeps its last reading (below), but its process
        // can still end: layers 1–2 are asked again about the record last read, so that a
        // death is not hidden behind a file nobody can read (nor a pid that turns unverified).
        // Only while that file is still the one read: a file replaced since (a new writer took
        // the session over) may name another process, and the old one's death proves nothing.
        let held_records: Vec<RunningRecord> = scan
            .unreadable
            .iter()
            .filter(|entry| entry.why.is_read_failure())
            .filter_map(|entry| entry.file_name.strip_suffix(RECORD_SUFFIX))
            .filter_map(|id| self.on_disk.get(id).cloned())
            .collect();
        let held_records = self.registry().still_the_files_read(held_records).await;
        let held_readings = if first || held_records.is_empty() {
            Vec::new()
        } else {
            self.registry().verify_records(held_records, false).await
        };
        let mut on_disk = HashMap::with_capacity(readings.len());
        let mut gone = Vec::new();
        let mut to_probe = Vec::new();
        {
            let mut picture = self.shared.lock();
            Shared::hold(&mut picture);
            if first {
                // A fresh baseline: nothing from an earlier loop carries over.
                picture.sessions.clear();
                picture.snapshot = None;
                self.on_disk.clear();
            }
            let (held, unreadable) = sort_unreadable(&picture.sessions, scan.unreadable);
            for id in &held {
                // Its file failed to read, which proves nothing about the record: the last
                // reading stands (but for what layers 1–2 say of its process, below), and so
                // does the record it was taken from (a probe of it may still apply).
                if let Some(record) = self.on_disk.get(id) {
                    on_disk.insert(id.clone(), record.clone());
                }
            }
            for mut reading in held_readings {
                if !held.contains(&reading.record.session_id) {
                    continue;
                }
                settle_unverified(&mut reading);
                // Gone is reported, never pruned on: pruning re-reads the file, and one that
                // cannot be read is never unlinked. It is pruned once it reads again (and
                // still names a process that is gone). Alive with a door to ask: the last
                // verdict stands.
                if reading.liveness.is_some() {
                    self.shared.apply(&mut picture, reading);
                }
            }
            if picture.unreadable != unreadable.len() {
                picture.unreadable = unreadable.len();
                picture.snapshot = None;
            }
            for mut reading in readings {
                let id = reading.record.session_id.clone();
                on_disk.insert(id.clone(), reading.record.clone());
                settle_unverified(&mut reading);
                match reading.liveness.as_ref() {
                    Some(liveness) => {
                        if matches!(liveness, Liveness::Gone { .. }) {
                            gone.push(id.clone());
                        }
                        if first {
                            // The baseline: listeners get it as their snapshot, not as events.
                            picture.sessions.insert(id, reading);
                        } else {
                            self.shared.apply(&mut picture, reading);
                        }
                    }
                    None => {
                        let known = picture
                            .sessions
                            .get(&id)
                            .is_some_and(|known| known.record == reading.record);
                        let in_flight = self.probing.get(&id) == Some(&reading.record);
                        if !in_flight && (full || !known) {
                            to_probe.push(reading.record);
                        }
                    }
                }
            }
            let left: Vec<String> = picture
                .sessions
                .keys()
                .filter(|id| !on_disk.contains_key(*id) && !held.contains(*id))
                .cloned()
                .collect();
            for id in left {
                let because = match self.shared.registry.take_removal(&id) {
                    Some(removal) => (removal.cause.into(), Some(removal.evidence)),
                    None if unreadable.iter().any(|u| is_file_of(&u.file_name, &id)) => {
                        (RemovedBecause::Unreadable, None)
                    }
                    None => (RemovedBecause::RecordRemoved, None),
                };
                picture.sessions.remove(&id);
                self.shared.publish(
                    &mut picture,
                    EventKind::Removed {
                        session_id: id,
                        because: because.0,
                        detail: because.1,
                    },
                );
            }
            self.shared.flush(&mut picture);
        }
        self.on_disk = on_disk;
        for record in to_probe {
            self.start_probe(record);
        }
        self.prune(gone).await;
        Ok(())
    }

    fn start_probe(&mut self, record: RunningRecord) {
        self.probing
            .insert(record.session_id.clone(), record.clone());
        let shared = Arc::clone(&self.shared);
        self.probes.spawn(async move {
            let reading = shared
                .registry
                .verify_records(vec![record.clone()], true)
                .await
                .pop()
                .unwrap_or_else(|| Reading {
                    record: record.clone(),
                    process: ProcessState::Unverified {
                        reason: "the verification did not run".to_owned(),
                    },
                    liveness: None,
                });
            (record, reading)
        });
    }

    /// Apply probes' verdicts as one step, each unless its record changed or its process went
    /// since.
    async fn apply_probes(&mut self, answers: Vec<ProbeAnswer>) {
        // A step of its own, with the prunes it leads to.
        self.shared.begin_step();
        let mut gone = Vec::new();
        {
            let mut picture = self.shared.lock();
            Shared::hold(&mut picture);
            for (record, reading) in answers {
                if self.probing.get(&record.session_id) == Some(&record) {
                    self.probing.remove(&record.session_id);
                }
                if self.on_disk.get(&record.session_id) != Some(&record)
                    || reading.liveness.is_none()
                {
                    continue;
                }
                let known_gone = picture
                    .sessions
                    .get(&record.session_id)
                    .is_some_and(|known| {
                        known.record == record
                            && matches!(known.liveness, Some(Liveness::Gone { .. }))
                    });
                if known_gone {
                    continue;
                }
                if matches!(reading.liveness, Some(Liveness::Gone { .. })) {
                    gone.push(record.session_id.clone());
                }
                self.shared.apply(&mut picture, reading);
            }
            self.shared.flush(&mut picture);
        }
        self.prune(gone).await;
    }

    /// Prune the records of `session_ids` on fresh evidence, and report each one removed: all
    /// at once at the end, as one flush of the step that found them gone, so that many prunes
    /// (or a few after many changes) make one snapshot. Until then the picture keeps them (as
    /// gone), so no listener sees a removal before its event.
    async fn prune(&mut self, session_ids: Vec<String>) {
        let mut removed = Vec::new();
        for id in session_ids {
            match self.registry().prune_session(&id).await {
                Ok(PruneOutcome::Pruned { reason }) => {
                    // Ours: the note the registry left is for this very event, and names a
                    // stop in progress whose process this prune found gone before it did.
                    let because = self
                        .registry()
                        .take_removal(&id)
                        .map_or(RemovedBecause::Pruned, |note| note.cause.into());
                    self.on_disk.remove(&id);
                    removed.push(EventKind::Removed {
                        session_id: id,
                        because,
                        detail: Some(reason),
                    });
                }
                // Rewritten for a live process since, or removed by someone else: the next
                // pass reports what is there.
                Ok(PruneOutcome::Kept { .. }) | Err(RegistryError::NotFound(_)) => {}
                Err(error) => {
                    tracing::warn!(session_id = %id, %error, "cannot prune a gone session's record");
                }
            }
        }
        if removed.is_empty() {
            return;
        }
        let mut picture = self.shared.lock();
        Shared::hold(&mut picture);
        for kind in removed {
            picture.sessions.remove(kind.session_id());
            self.shared.publish(&mut picture, kind);
        }
        self.shared.flush(&mut picture);
    }
}

impl Shared {
    /// Put `reading` in the picture: `added` when new, `changed` when its state or process
    /// moved or its record was rewritten, silently when only a reason was reworded (stored,
    /// but not a change), and not at all when nothing differs, so the cached snapshot (and
    /// its encoding) survives a pass that found everything as it was.
    fn apply(&self, picture: &mut Picture, reading: Reading) {
        let id = reading.record.session_id.clone();
        let Some(liveness) = reading.liveness.clone() else {
            return;
        };
        let Some(known) = picture.sessions.get(&id) else {
            picture.sessions.insert(id, reading.clone());
            self.publish(picture, EventKind::Added(reading));
            return;
        };
        if known.record == reading.record
            && known.liveness == reading.liveness
            && known.process == reading.process
        {
            return;
        }
        let old = known.liveness.clone().unwrap_or(Liveness::Unreachable {
            reason: "not verified".to_owned(),
        });
        let moved = std::mem::discriminant(&old) != std::mem::discriminant(&liveness)
            || std::mem::discriminant(&known.process) != std::mem::discriminant(&reading.process);
        let rewritten = known.record != reading.record;
        picture.sessions.insert(id, reading.clone());
        picture.snapshot = None;
        if moved || rewritten {
            self.publish(picture, EventKind::Changed { old, now: reading });
        }
    }
}

/// A reading whose writer layers 1–2 could not confirm is unreachable: no door can make it
/// live, so it is not left waiting for a probe.
fn settle_unverified(reading: &mut Reading) {
    if let (None, ProcessState::Unverified { reason }) = (&reading.liveness, &reading.process) {
        reading.liveness = Some(Liveness::Unreachable {
            reason: reason.clone(),
        });
    }
}

/// Split a scan's unreadable entries into the sessions to hold and the entries to count.
///
/// An entry that merely failed to read ([`crate::running::Unreadable::is_read_failure`]) whose
/// session is in the picture is held: its last reading stands (its process still checked by
/// the pass), and it is not counted. Every
/// other entry counts as unreadable (and removes its session, if it had one in the picture).
fn sort_unreadable(
    sessions: &BTreeMap<String, Reading>,
    unreadable: Vec<UnreadableEntry>,
) -> (HashSet<String>, Vec<UnreadableEntry>) {
    let mut held = HashSet::new();
    let mut counted = Vec::with_capacity(unreadable.len());
    for entry in unreadable {
        let session = entry
            .file_name
            .strip_suffix(RECORD_SUFFIX)
            .filter(|id| entry.why.is_read_failure() && sessions.contains_key(*id));
        match session {
            Some(id) => {
                held.insert(id.to_owned());
            }
            None => counted.push(entry),
        }
    }
    (held, counted)
}

/// Whether `file_name` is the record file of `session_id`.
fn is_file_of(file_name: &str, session_id: &str) -> bool {
    file_name
        .strip_suffix(RECORD_SUFFIX)
        .is_some_and(|stem| stem == session_id)
}

/// The directory's device and inode, to notice it being replaced.
fn directory_identity(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(dir)
        .ok()
        .filter(|m| m.is_dir())
        .map(|m| (m.dev(), m.ino()))
}

/// An inotify watch on the running directory that nudges the loop when a record may have
/// changed.
struct DirectoryWatch {
    identity: Option<(u64, u64)>,
    _watcher: notify::RecommendedWatcher,
}

impl DirectoryWatch {
    fn start(
        dir: &Path,
        identity: Option<(u64, u64)>,
        nudge: mpsc::Sender<()>,
    ) -> Option<DirectoryWatch> {
        let handler = move |event: notify::Result<notify::Event>| {
            let relevant = match &event {
                Ok(event) => event.paths.iter().any(|p| names_a_record(p)) || event.need_rescan(),
                Err(_) => true,
            };
            if relevant {
                // Full means a pass is already due: one nudge covers any number of changes.
                let _ = nudge.try_send(());
            }
        };
        let started = notify::recommended_watcher(handler).and_then(|mut watcher| {
            watcher.watch(dir, notify::RecursiveMode::NonRecursive)?;
            Ok(watcher)
        });
        match started {
            Ok(watcher) => Some(DirectoryWatch {
                identity,
                _watcher: watcher,
            }),
            Err(error) => {
                // The periodic pass still sees every change, one interval later.
                tracing::warn!(dir = %dir.display(), %error, "cannot watch the running directory");
                None
            }
        }
    }
}

fn names_a_record(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext == "json")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::running::Unreadable;

    const HELD: &str = "ses_0190a5c0f4d17c3e8b2a4d6f8e0c1b3a";
    const ABSENT: &str = "ses_0190a5c0f4d17c3e8b2a4d6f8e0c1b3b";

    fn picture_with(session_id: &str) -> BTreeMap<String, Reading> {
        let record = RunningRecord::parse(
            serde_json::json!({
                "session_id": session_id,
                "url": null,
                "pid": 1,
                "process_start": "1",
                "capsule_name": "test-capsule",
                "capsule_version": "0.1.0",
                "workdir": "/tmp/murmur-test",
                "outlives_launcher": false,
                "started_at": "2026-11-30T04:52:00Z",
            })
            .to_string()
            .as_bytes(),
        )
        .expect("a nine-field record parses");
        let reading = Reading {
            record,
            process: ProcessState::Alive,
            liveness: Some(Liveness::Live),
        };
        BTreeMap::from([(session_id.to_owned(), reading)])
    }

    fn entry(session_id: &str, why: Unreadable) -> UnreadableEntry {
        UnreadableEntry {
            file_name: format!("{session_id}{RECORD_SUFFIX}"),
            why,
        }
    }

    #[test]
    fn a_read_failure_of_a_session_in_the_picture_holds_it_and_is_not_counted() {
        for why in [
            Unreadable::Io("Too many open files (os error 24)".to_owned()),
            Unreadable::Io("Permission denied (os error 13)".to_owned()),
            Unreadable::Replaced,
        ] {
            let (held, counted) = sort_unreadable(&picture_with(HELD), vec![entry(HELD, why)]);
            assert_eq!(held, HashSet::from([HELD.to_owned()]));
            assert!(counted.is_empty(), "{counted:?}");
        }
    }

    #[test]
    fn a_file_that_proves_it_is_no_record_is_counted_and_holds_nothing() {
        for why in [
            Unreadable::Symlink,
            Unreadable::Directory,
            Unreadable::NotRegularFile,
            Unreadable::ForeignOwner(4242),
            Unreadable::TooLarge,
            Unreadable::Malformed("it is not valid JSON (line 1, column 3)".to_owned()),
            Unreadable::NameMismatch(ABSENT.to_owned()),
        ] {
            let unreadable = vec![entry(HELD, why)];
            let (held, counted) = sort_unreadable(&picture_with(HELD), unreadable.clone());
            assert!(held.is_empty(), "{held:?}");
            assert_eq!(counted, unreadable);
        }
    }

    #[test]
    fn a_read_failure_of_a_session_not_in_the_picture_is_counted() {
        let unreadable = vec![
            entry(
                ABSENT,
                Unreadable::Io("Input/output error (os error 5)".to_owned()),
            ),
            entry(ABSENT, Unreadable::Replaced),
        ];
        let (held, counted) = sort_unreadable(&picture_with(HELD), unreadable.clone());
        assert!(held.is_empty(), "{held:?}");
        assert_eq!(counted, unreadable);
    }
}
