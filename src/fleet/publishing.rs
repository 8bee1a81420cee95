//! The publishing driver: this registry's verified picture, kept in etcd for as long as its
//! verification loop makes progress.
//!
//! It holds a subscription to the monitor for life, so the loop runs (and prunes gone records)
//! whether or not anyone listens to `/events`; it keeps one [`SessionEntry`] per session,
//! encoded once when it changes, from the subscription's snapshot and events, and each time the
//! loop completes a periodic pass ([`Monitor::steps`]) it hands them to the [`Publisher`], which
//! writes what changed and renews the lease. So the lease proves progress: a loop that hangs
//! stops renewing, and the host drops out within one TTL.
//!
//! Invariants:
//! - A step reads only what the subscription delivered: it never waits on a door.
//! - Publishing runs on a runtime of one thread of its own ([`OwnRuntime`]), and its etcd
//!   client is made there, so the client's connection tasks run there too: request load on
//!   the server's workers cannot starve a renewal. Subscribing to the monitor is done on the
//!   caller's runtime, so that a loop it starts runs where the monitor's loops belong.
//! - `changed_at` moves only when a session's verdict (live, unreachable, gone, or none yet)
//!   does; a rewritten record with the same verdict keeps it, across resubscriptions too.
//! - A subscription that lags or ends is replaced (a new snapshot, a full difference); the
//!   monitor closing ends publishing with the lease revoked.
//! - This registry's own fleet view shows this host as the publisher last published it, and
//!   only while it holds its lease: handed over after each step that wrote or (re)took it,
//!   taken back when the lease is known lost, a TTL has passed since the last step that
//!   renewed it, or publishing ends.

use std::collections::BTreeMap;
use std::mem::Discriminant;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde_json::{Map, Value};
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::etcd::{self, EtcdSettings};
use super::own_host::{Own, until};
pub use super::publisher::PublishOptions;
use super::publisher::{PublishError, Publisher};
use super::view::FleetView;
use super::{DoorScope, HOST_LOAD_REFRESH, PublishFigures, SessionEntry};
use crate::monitor::{EventKind, Monitor, Next, SubscribeError, Subscription};
use crate::registry::Reading;
use crate::running::{Liveness, Skill};

/// How a reading is shown: the session object `GET /sessions` serves, and its card's skills.
/// Given by the caller, since the fleet cannot know the HTTP layer.
pub type Render = fn(&Reading) -> (Map<String, Value>, Vec<Skill>);

/// Refuse a lease that a few slow passes could let lapse: `--fleet-ttl` must be at least three
/// `--events-interval`s, since the lease is renewed once per pass.
pub fn check_ttl(ttl: Duration, interval: Duration) -> Result<(), String> {
    match interval.checked_mul(3) {
        Some(three_passes) if ttl >= three_passes => Ok(()),
        _ => Err(format!(
            "--fleet-ttl {} is under three --events-interval passes ({} each): the lease is \
             renewed once per pass, so raise --fleet-ttl or lower --events-interval",
            humantime::format_duration(ttl),
            humantime::format_duration(interval),
        )),
    }
}

/// Why publishing could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// etcd could not be reached, or refused the host id.
    #[error(transparent)]
    Publish(#[from] PublishError),
    /// The running directory could not be read for the first picture.
    #[error(transparent)]
    Subscribe(#[from] SubscribeError),
}

/// Publishing in progress. Dropping it stops publishing without revoking (the lease lapses
/// within one TTL, as after a crash); [`Publishing::leave`] revokes.
#[derive(Debug)]
pub struct Publishing {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), PublishError>>,
    /// Where the task runs; dropped after it, which ends the thread.
    _runtime: OwnRuntime,
}

impl Publishing {
    /// Stop publishing and revoke the lease: this host leaves the fleet at once (SIGTERM).
    pub async fn leave(mut self) -> Result<(), PublishError> {
        if let Some(stop) = self.stop.take() {
            // Gone only if the task already ended, and then it has left already.
            let _ = stop.send(());
        }
        match (&mut self.task).await {
            Ok(left) => left,
            Err(join) => Err(PublishError::Task(join.to_string())),
        }
    }
}

impl Drop for Publishing {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Claim the host id in etcd, publish the monitor's picture, and keep it published, renewed
/// at every periodic pass, until [`Publishing::leave`].
///
/// Waits up to one TTL if another lease holds the host id, then fails naming it.
pub async fn start(
    settings: &EtcdSettings,
    options: PublishOptions,
    monitor: Monitor,
    render: Render,
) -> Result<Publishing, StartError> {
    let view = FleetView::not_configured();
    start_counting(settings, options, monitor, render, Arc::default(), view).await
}

/// [`start`], keeping how the publishing stands (lease held, last publish) in `figures`, and
/// showing this host in `view` as it publishes it ([`FleetView::own`]).
pub async fn start_counting(
    settings: &EtcdSettings,
    options: PublishOptions,
    monitor: Monitor,
    render: Render,
    figures: Arc<PublishFigures>,
    view: FleetView,
) -> Result<Publishing, StartError> {
    let runtime = OwnRuntime::start().map_err(PublishError::Task)?;
    let home = Handle::current();
    let starting = Starting {
        settings: settings.clone(),
        options,
        monitor,
        render,
        figures,
        view,
        home,
    };
    let driver = match runtime.handle.spawn(starting.start()).await {
        Ok(started) => started?,
        Err(join) => return Err(PublishError::Task(join.to_string()).into()),
    };
    let (stop, stopped) = oneshot::channel();
    Ok(Publishing {
        stop: Some(stop),
        task: runtime.handle.spawn(driver.run(stopped)),
        _runtime: runtime,
    })
}

/// What starting takes, moved onto the publishing's own runtime.
struct Starting {
    settings: EtcdSettings,
    options: PublishOptions,
    monitor: Monitor,
    render: Render,
    figures: Arc<PublishFigures>,
    view: FleetView,
    home: Handle,
}

impl Starting {
    /// Connect, claim, subscribe and publish the first picture: the driver, ready to run.
    async fn start(self) -> Result<Driver, StartError> {
        let Self {
            settings,
            options,
            monitor,
            render,
            figures,
            view,
            home,
        } = self;
        let client = etcd::connect(&settings, options.ttl)
            .await
            .map_err(PublishError::from)?;
        let mut publisher = Publisher::claim(client, &options).await?;
        figures.set_lease_held(true);
        let subscription = match subscribe_at(&home, &monitor).await {
            Ok(subscription) => subscription,
            Err(error) => {
                figures.set_lease_held(false);
                if let Err(leaving) = publisher.leave().await {
                    tracing::debug!(error = %leaving, "revoking the fleet lease after a failed start");
                }
                return Err(error.into());
            }
        };
        let mut entries = Entries::new(options.host_id.to_string(), render);
        entries.replace(&subscription.snapshot.readings, &now());
        let mut own = Own::new(view, options.keys.clone(), options.ttl);
        // The picture is published at once, not a pass later; a failure is retried by the next.
        step(&mut publisher, &entries, &figures, &mut own).await;
        Ok(Driver {
            publisher,
            entries,
            monitor,
            subscription,
            retry: options.ttl / 3,
            figures,
            own,
            home,
        })
    }
}

/// Subscribe to `monitor` on the runtime `home` (the caller's): a verification loop the
/// subscription starts must run where the monitor's loops run, not on the publishing's thread.
async fn subscribe_at(home: &Handle, monitor: &Monitor) -> Result<Subscription, SubscribeError> {
    let monitor = monitor.clone();
    match home.spawn(async move { monitor.subscribe().await }).await {
        Ok(subscribed) => subscribed,
        // Only when that runtime is shutting down.
        Err(_) => Err(SubscribeError::Closing),
    }
}

/// A runtime of one thread, the publishing's own: alive until this is dropped, which ends the
/// thread and every task still on it.
#[derive(Debug)]
struct OwnRuntime {
    handle: Handle,
    /// Its thread runs until this sender goes.
    _alive: oneshot::Sender<()>,
}

impl OwnRuntime {
    fn start() -> Result<Self, String> {
        let (built, was_built) = std::sync::mpsc::sync_channel(1);
        let (alive, until_dropped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("fleet-publishing".to_owned())
            .spawn(move || {
                // Built here, not handed in: a runtime must not be dropped on an async worker.
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        let _ = built.send(Err(error.to_string()));
                        return;
                    }
                };
                let _ = built.send(Ok(runtime.handle().clone()));
                // The sender gone (or sent on): time to end.
                let _ = runtime.block_on(until_dropped);
            })
            .map_err(|e| format!("cannot start the fleet publishing thread: {e}"))?;
        // Waits for the runtime to be built only (well under a millisecond).
        match was_built.recv() {
            Ok(Ok(handle)) => Ok(Self {
                handle,
                _alive: alive,
            }),
            Ok(Err(error)) => Err(format!(
                "cannot start the fleet publishing runtime: {error}"
            )),
            Err(_) => Err("the fleet publishing thread ended before its runtime was built".into()),
        }
    }
}

/// The task behind [`Publishing`].
struct Driver {
    publisher: Publisher,
    entries: Entries,
    monitor: Monitor,
    subscription: Subscription,
    /// How long to wait before subscribing again after the directory could not be read.
    retry: Duration,
    figures: Arc<PublishFigures>,
    own: Own,
    /// The caller's runtime, where subscribing is done.
    home: Handle,
}

impl Driver {
    async fn run(mut self, mut stopped: oneshot::Receiver<()>) -> Result<(), PublishError> {
        let mut steps = self.monitor.steps();
        steps.borrow_and_update();
        // The claim read the load; the first refresh is a period later.
        let first = tokio::time::Instant::now() + HOST_LOAD_REFRESH;
        let mut load_refresh = tokio::time::interval_at(first, HOST_LOAD_REFRESH);
        load_refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut stopped => break,
                next = self.subscription.recv() => match next {
                    Ok(Next::Event(event)) => self.entries.apply(&event.kind, &now()),
                    Ok(Next::Snapshot(snapshot)) => {
                        self.entries.replace(&snapshot.readings, &now());
                    }
                    // Lagged, or the loop ended: a new subscription, a new snapshot.
                    Err(_) => {
                        if !self.resubscribe(&mut stopped).await {
                            break;
                        }
                    }
                },
                passed = steps.changed() => {
                    if passed.is_err() {
                        break;
                    }
                    let own = &mut self.own;
                    step(&mut self.publisher, &self.entries, &self.figures, own).await;
                }
                // A loop that stops completing passes takes no step, so nothing renews the
                // lease: the view stops showing this host when etcd may drop it.
                () = until(self.own.lapses_at()) => self.own.hide(),
                // Written by the next step, so a loop that hangs publishes no fresh load.
                _ = load_refresh.tick() => {
                    if let Err(error) = self.publisher.refresh_load() {
                        tracing::warn!(%error, "fleet: the host's load could not be encoded");
                    }
                }
            }
        }
        self.figures.set_lease_held(false);
        self.own.hide();
        self.publisher.leave().await
    }

    /// Subscribe again, retrying while the directory cannot be read; `false` when the monitor
    /// is closing or publishing was stopped meanwhile.
    async fn resubscribe(&mut self, stopped: &mut oneshot::Receiver<()>) -> bool {
        loop {
            let subscribed = tokio::select! {
                _ = &mut *stopped => return false,
                subscribed = subscribe_at(&self.home, &self.monitor) => subscribed,
            };
            match subscribed {
                Ok(subscription) => {
                    self.entries
                        .replace(&subscription.snapshot.readings, &now());
                    self.subscription = subscription;
                    return true;
                }
                Err(SubscribeError::Closing) => return false,
                Err(error) => {
                    tracing::warn!(%error, "fleet: no picture to publish; the lease lapses");
                    tokio::select! {
                        _ = &mut *stopped => return false,
                        // Paces the retries: nothing renews the lease meanwhile, on purpose.
                        () = tokio::time::sleep(self.retry) => {}
                        () = until(self.own.lapses_at()) => self.own.hide(),
                    }
                }
            }
        }
    }
}

/// One publishing step, its failure logged: the next pass tries again.
async fn step(
    publisher: &mut Publisher,
    entries: &Entries,
    figures: &PublishFigures,
    own: &mut Own,
) {
    match publisher.step(entries.encoded()).await {
        Ok(report) => {
            figures.published();
            own.renewed(publisher, report.txns > 0 || report.lease_replaced);
            tracing::debug!(?report, "fleet: published");
        }
        Err(error) => {
            // Not renewed: etcd may drop the lease before the next step, so it is not counted
            // on.
            figures.set_lease_held(false);
            own.failed(error.is_lease_lost());
            tracing::warn!(%error, "fleet: publishing failed; retrying at the next pass");
        }
    }
}

fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// A session's verdict, as far as `changed_at` is concerned: its kind, not its reason.
type Verdict = Option<Discriminant<Liveness>>;

fn verdict_of(reading: &Reading) -> Verdict {
    reading.liveness.as_ref().map(std::mem::discriminant)
}

/// The entries to publish, by session id.
struct Entries {
    host_id: String,
    render: Render,
    sessions: BTreeMap<String, Published>,
}

/// One session as published: its [`SessionEntry`] encoded once, when it was put, so a pass
/// that changes nothing encodes nothing; and what its `changed_at` follows.
struct Published {
    value: Bytes,
    changed_at: String,
    verdict: Verdict,
}

impl Entries {
    fn new(host_id: String, render: Render) -> Self {
        Self {
            host_id,
            render,
            sessions: BTreeMap::new(),
        }
    }

    /// Each session's encoded entry, by session id: what a step hands the publisher.
    fn encoded(&self) -> impl Iterator<Item = (&String, &Bytes)> {
        self.sessions
            .iter()
            .map(|(id, published)| (id, &published.value))
    }

    /// Replace everything with `readings`, keeping the `changed_at` of unchanged verdicts.
    fn replace(&mut self, readings: &[Reading], now: &str) {
        let mut old = std::mem::take(&mut self.sessions);
        for reading in readings {
            let changed_at = match old.remove(&reading.record.session_id) {
                Some(kept) if kept.verdict == verdict_of(reading) => kept.changed_at,
                _ => now.to_owned(),
            };
            self.put(reading, changed_at);
        }
    }

    /// Follow one change of the picture.
    fn apply(&mut self, change: &EventKind, now: &str) {
        match change {
            EventKind::Added(reading) => self.put(reading, now.to_owned()),
            EventKind::Changed { now: reading, .. } => {
                let changed_at = match self.sessions.get(&reading.record.session_id) {
                    Some(kept) if kept.verdict == verdict_of(reading) => kept.changed_at.clone(),
                    _ => now.to_owned(),
                };
                self.put(reading, changed_at);
            }
            EventKind::Removed { session_id, .. } => {
                self.sessions.remove(session_id);
            }
        }
    }

    fn put(&mut self, reading: &Reading, changed_at: String) {
        let (session, skills) = (self.render)(reading);
        let session_id = reading.record.session_id.clone();
        let mut entry = SessionEntry {
            host_id: self.host_id.clone(),
            changed_at,
            door_scope: reading.record.url.as_deref().map(DoorScope::of),
            skills,
            skills_omitted: 0,
            session,
        };
        match entry.encode() {
            Ok(value) => {
                let published = Published {
                    value: value.into(),
                    changed_at: entry.changed_at,
                    verdict: verdict_of(reading),
                };
                self.sessions.insert(session_id, published);
            }
            // Too large even without its skills (a record no murmur writes), or not encodable:
            // the session is left out rather than published stale or over the cap.
            Err(error) => {
                tracing::warn!(%error, session_id, "fleet: a session entry cannot be published");
                self.sessions.remove(&session_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::RemovalCause;
    use crate::running::{ProcessState, RunningRecord};

    const A: &str = "ses_0190a5c0f4d17c3e8b2a4d6f8e0c1b3a";
    const B: &str = "ses_0190a5c0f4d17c3e8b2a4d6f8e0c1b3b";

    fn reading(session_id: &str, url: Option<&str>, liveness: Option<Liveness>) -> Reading {
        let record = RunningRecord::parse(
            serde_json::json!({
                "session_id": session_id,
                "url": url,
                "pid": 1,
                "process_start": "1",
                "capsule_name": "test-capsule",
                "capsule_version": "0.1.0",
                "workdir": "/tmp/w",
                "outlives_launcher": false,
                "started_at": "2026-11-30T04:52:00Z",
                "door_token": "secret",
            })
            .to_string()
            .as_bytes(),
        )
        .expect("a record parses");
        Reading {
            record: record.into(),
            process: ProcessState::Alive,
            liveness,
            skills: Default::default(),
        }
    }

    fn render(reading: &Reading) -> (Map<String, Value>, Vec<Skill>) {
        let mut session = Map::new();
        session.insert(
            "session_id".into(),
            reading.record.session_id.clone().into(),
        );
        session.insert("pid".into(), reading.record.pid.into());
        let skills = vec![Skill {
            id: "plan".into(),
            tags: Vec::new(),
        }];
        (session, skills)
    }

    fn entries() -> Entries {
        Entries::new("h1".into(), render)
    }

    /// The entry as etcd will hold it.
    fn entry(entries: &Entries, session_id: &str) -> SessionEntry {
        serde_json::from_slice(&entries.sessions[session_id].value).expect("an entry decodes")
    }

    fn unreachable() -> Option<Liveness> {
        Some(Liveness::Unreachable {
            reason: "door timed out".into(),
        })
    }

    #[test]
    fn an_entry_carries_the_host_the_door_scope_the_rendered_session_and_skills() {
        let mut entries = entries();
        entries.replace(
            &[
                reading(A, Some("127.0.0.1:9"), Some(Liveness::Live)),
                reading(B, None, None),
            ],
            "t0",
        );
        let a = &entry(&entries, A);
        assert_eq!(a.host_id, "h1");
        assert_eq!(a.changed_at, "t0");
        assert_eq!(a.door_scope, Some(DoorScope::Host));
        assert_eq!(a.session["session_id"], A);
        assert_eq!(a.skills[0].id, "plan");
        assert_eq!(entry(&entries, B).door_scope, None);
    }

    #[test]
    fn changed_at_moves_with_the_verdict_only() {
        let mut entries = entries();
        entries.apply(
            &EventKind::Added(reading(A, Some("10.0.0.1:9"), Some(Liveness::Live))),
            "t0",
        );
        assert_eq!(entry(&entries, A).door_scope, Some(DoorScope::Network));
        // Rewritten, still live: the date stays.
        let rewritten = EventKind::Changed {
            old: Liveness::Live,
            now: reading(A, Some("127.0.0.1:9"), Some(Liveness::Live)),
        };
        entries.apply(&rewritten, "t1");
        assert_eq!(entry(&entries, A).changed_at, "t0");
        assert_eq!(entry(&entries, A).door_scope, Some(DoorScope::Host));
        // Unreachable: the date moves; another reason for the same verdict does not move it.
        let frozen = EventKind::Changed {
            old: Liveness::Live,
            now: reading(A, Some("127.0.0.1:9"), unreachable()),
        };
        entries.apply(&frozen, "t2");
        assert_eq!(entry(&entries, A).changed_at, "t2");
        let other_reason = reading(
            A,
            Some("127.0.0.1:9"),
            Some(Liveness::Unreachable {
                reason: "refused".into(),
            }),
        );
        entries.apply(
            &EventKind::Changed {
                old: Liveness::Live,
                now: other_reason,
            },
            "t3",
        );
        assert_eq!(entry(&entries, A).changed_at, "t2");
        entries.apply(
            &EventKind::Removed {
                session_id: A.into(),
                cause: RemovalCause::Pruned,
                detail: None,
            },
            "t4",
        );
        assert!(entries.sessions.is_empty());
    }

    #[test]
    fn a_new_snapshot_keeps_the_dates_of_unchanged_verdicts_and_drops_the_missing() {
        let mut entries = entries();
        entries.replace(
            &[
                reading(A, Some("127.0.0.1:9"), Some(Liveness::Live)),
                reading(B, Some("127.0.0.1:8"), Some(Liveness::Live)),
            ],
            "t0",
        );
        entries.replace(&[reading(A, Some("127.0.0.1:9"), unreachable())], "t1");
        assert_eq!(entries.sessions.len(), 1);
        assert_eq!(entry(&entries, A).changed_at, "t1");
        entries.replace(&[reading(A, Some("127.0.0.1:9"), unreachable())], "t2");
        assert_eq!(entry(&entries, A).changed_at, "t1");
    }

    #[test]
    fn nothing_of_the_record_but_what_render_gives_is_published() {
        let mut entries = entries();
        entries.replace(
            &[reading(A, Some("127.0.0.1:9"), Some(Liveness::Live))],
            "t0",
        );
        let text = String::from_utf8_lossy(&entries.sessions[A].value);
        assert!(!text.contains("secret"), "{text}");
    }

    #[test]
    fn a_ttl_under_three_passes_is_refused_naming_both_flags() {
        let second = Duration::from_secs(1);
        assert_eq!(check_ttl(3 * second, second), Ok(()));
        assert_eq!(check_ttl(15 * second, 2 * second), Ok(()));
        let refused = check_ttl(Duration::from_millis(2999), second).expect_err("too short");
        assert!(refused.contains("--fleet-ttl") && refused.contains("--events-interval"));
        assert!(
            refused.contains("2s 999ms") && refused.contains("1s"),
            "{refused}"
        );
        assert!(check_ttl(Duration::MAX, Duration::MAX).is_err());
    }
}
