//! Feeds a [`FleetView`] from etcd: one read of the fleet prefix at a revision, then one watch
//! of the prefix from the next revision, with progress notices asked for so a quiet fleet
//! still proves etcd answers.
//!
//! Invariants:
//! - The view is current only while this watch is known to be following etcd: a refused
//!   connection, a failed or ended watch, or etcd silent for [`WatchDeadlines::silent_after`]
//!   makes it unavailable (saying why) at once, so a stale fleet is never served as current.
//! - After a failure a fresh read is tried every [`WatchDeadlines::retry_after`], on a new
//!   connection; a compaction, and a watch that broke while following (its member went away),
//!   are a fresh read at once on the same one (see [`read_again_at_once`]). A fresh read replaces the whole
//!   cache, so nothing that left meanwhile survives it.
//! - Every wait on etcd has a deadline; the task never panics and ends only when stopped. A
//!   read's deadline is each page's ([`ReadPaging`]), not the whole read's, so a fleet of any
//!   size is read while etcd answers; a read still going after
//!   [`WatchDeadlines::silent_after`] makes the view unavailable meanwhile (a picture it held
//!   is no longer known current), and only a whole read is ever handed to the view.

use std::pin::pin;
use std::time::Duration;

use etcd_client::{Client, EventType, WatchOptions, WatchStream};
use tokio::sync::oneshot;
use tokio::time::{Instant, timeout, timeout_at};

use super::cache::WatchChange;
use super::etcd::{
    EtcdSettings, READ_PAGE_KEYS, ReadFailed, ReadPaging, connect, read_fleet_paged,
};
use super::history::EtcdHistory;
use super::keys::FleetKeys;
use super::refusals;
use super::view::FleetView;
use super::watch_step::{
    Failure, ResponseFacts, WatchDeadlines, WatchStep, read_again_at_once, step_of,
};

/// The running watcher. Dropping it (or [`FleetWatcher::stop`]) stops the watch, and the view
/// it fed becomes unavailable: nothing follows etcd for it any more.
#[derive(Debug)]
pub struct FleetWatcher {
    /// Dropped to stop: the task ends at its next wait (never inside an update of the view),
    /// then marks the view unavailable.
    _stop: oneshot::Sender<()>,
}

impl FleetWatcher {
    /// Stop watching.
    pub fn stop(self) {
        drop(self);
    }
}

/// Start feeding `view` from the fleet under `keys` in the etcd `settings` name, with the
/// deadlines of a lease of `ttl` (`--fleet-ttl`). Returns at once (on a Tokio runtime): the
/// view stays unavailable until the first read succeeds, and says why meanwhile.
pub fn start(
    settings: EtcdSettings,
    keys: FleetKeys,
    ttl: Duration,
    view: FleetView,
) -> FleetWatcher {
    let paging = ReadPaging {
        keys: READ_PAGE_KEYS,
        // A page that takes this long is etcd gone silent, as a watch's would be.
        deadline: WatchDeadlines::for_ttl(ttl).silent_after,
    };
    start_paged(settings, keys, ttl, view, paging)
}

/// [`start`], reading the fleet in pages as `paging` says (the tests' way to a read of many
/// pages, each within a short deadline).
pub(crate) fn start_paged(
    settings: EtcdSettings,
    keys: FleetKeys,
    ttl: Duration,
    view: FleetView,
    paging: ReadPaging,
) -> FleetWatcher {
    let watcher = Watcher {
        settings,
        keys,
        ttl,
        deadlines: WatchDeadlines::for_ttl(ttl),
        paging,
        view: view.clone(),
    };
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        tokio::select! {
            _ = stopped => {}
            () = watcher.run() => {}
        }
        view.unavailable("the fleet watch was stopped".to_owned());
    });
    FleetWatcher { _stop: stop }
}

struct Watcher {
    settings: EtcdSettings,
    keys: FleetKeys,
    ttl: Duration,
    deadlines: WatchDeadlines,
    paging: ReadPaging,
    view: FleetView,
}

/// Why following the fleet stopped.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    /// Compacted away: read again on the same connection.
    Compacted,
    /// etcd failed us, this way, for this reason.
    Failed(Failure, String),
}

impl Watcher {
    async fn run(self) {
        let mut last_retry = None;
        // Which member the next connection asks: after any failure, the next one. A client
        // given every member spreads its requests over them, dead ones included.
        let mut turn = 0;
        loop {
            let why = match self.connect(turn).await {
                Ok(mut client) => self.follow_until_failed(&mut client, &mut last_retry).await,
                Err(why) => why,
            };
            turn = turn.wrapping_add(1);
            self.view.unavailable(why);
            tokio::time::sleep(self.deadlines.retry_after).await;
        }
    }

    /// Follow the fleet on `client`, reading again after a compaction or a broken watch (see
    /// [`read_again_at_once`]); why it failed.
    async fn follow_until_failed(
        &self,
        client: &mut Client,
        last_retry: &mut Option<Instant>,
    ) -> String {
        let mut stop = self.follow(client).await;
        loop {
            stop = match stop {
                Stop::Compacted => {
                    tracing::info!("fleet watch compacted: reading again");
                    self.follow(client).await
                }
                Stop::Failed(failure, why) => {
                    let since = last_retry.map(|at: Instant| at.elapsed());
                    if !read_again_at_once(failure, since, self.ttl) {
                        return why;
                    }
                    tracing::info!(%why, "fleet watch broke: reading again at once");
                    let now = Instant::now();
                    *last_retry = Some(now);
                    let grace = self.deadlines.reread_grace(self.settings.endpoints.len());
                    match self.read_from_any_member(now + grace).await {
                        Ok((member, revision)) => {
                            *client = member;
                            self.watch_from(client, revision + 1).await
                        }
                        Err(why) => return why,
                    }
                }
            };
        }
    }

    /// Read the fleet from the first member that answers, each on its own connection, trying
    /// them in turn until `until` (every one at least once, each within its read deadline): a
    /// member that went away is not asked again and again, and a cluster electing a leader
    /// gets the time to.
    async fn read_from_any_member(&self, until: Instant) -> Result<(Client, i64), String> {
        let members = self.settings.endpoints.len();
        // A lone member gets one read within its deadline; several, until `until` only.
        let cutoff = if members > 1 {
            until
        } else {
            until.max(Instant::now() + self.deadlines.silent_after)
        };
        let mut why = String::new();
        for (tried, endpoint) in self.settings.endpoints.iter().cycle().enumerate() {
            let now = Instant::now();
            if now >= cutoff || (tried >= members && now >= until) {
                break;
            }
            if tried >= members && tried % members == 0 {
                // Paces the rounds after the first, while the cluster elects a leader.
                let pause = self.deadlines.progress_every;
                tokio::time::sleep(pause.min(until.saturating_duration_since(now))).await;
            }
            let deadline = cutoff.min(Instant::now() + self.deadlines.silent_after);
            let mut settings = self.settings.clone();
            settings.endpoints = vec![endpoint.clone()];
            let mut member = match timeout_at(deadline, connect(&settings, self.ttl)).await {
                Ok(Ok(member)) => member,
                Ok(Err(error)) => {
                    why = format!("cannot connect to etcd at {endpoint}: {error}");
                    continue;
                }
                Err(_) => {
                    why = format!("etcd at {endpoint} did not answer");
                    continue;
                }
            };
            match self.read(&mut member, deadline).await {
                Ok(revision) => return Ok((member, revision)),
                Err((_, failed)) => why = failed,
            }
        }
        Err(why)
    }

    /// A client of the `turn`-th member (round the list).
    async fn connect(&self, turn: usize) -> Result<Client, String> {
        let all = &self.settings.endpoints;
        let one = all.get(turn % all.len().max(1)).cloned();
        let settings = EtcdSettings {
            endpoints: one.into_iter().collect(),
            ..self.settings.clone()
        };
        let endpoints = settings.endpoints.join(",");
        // `connect` bounds its own wait; this bounds it again should a resolver hang.
        match timeout(self.ttl, connect(&settings, self.ttl)).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(error)) => Err(format!("cannot connect to etcd at {endpoints}: {error}")),
            Err(_) => Err(format!(
                "etcd at {endpoints} did not answer within {:?}",
                self.ttl
            )),
        }
    }

    /// Read the prefix, hand it to the view, then follow the watch until it fails or is
    /// compacted.
    async fn follow(&self, client: &mut Client) -> Stop {
        let deadline = Instant::now() + self.deadlines.silent_after;
        match self.read(client, deadline).await {
            Ok(revision) => self.watch_from(client, revision + 1).await,
            Err((failure, why)) => Stop::Failed(failure, why),
        }
    }

    /// Follow the watch of the prefix from `start` until it fails or is compacted.
    async fn watch_from(&self, client: &mut Client, start: i64) -> Stop {
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(start)
            .with_progress_notify();
        let watching = timeout(
            self.deadlines.silent_after,
            client.watch(self.keys.all(), Some(options)),
        );
        match watching.await {
            Ok(Ok(stream)) => self.watch(stream).await,
            Ok(Err(error)) => Stop::Failed(
                Failure::Refused,
                format!("etcd refused the fleet watch: {error}"),
            ),
            Err(_) => Stop::Failed(Failure::Silent, self.silent()),
        }
    }

    /// Read every fleet key, the first page answered by `first_by` and each within the
    /// paging's deadline, and hand the whole read to the view; the revision read at.
    async fn read(&self, client: &mut Client, first_by: Instant) -> Result<i64, (Failure, String)> {
        let reading = read_fleet_paged(client, &self.keys, self.paging, Some(first_by));
        let (cache, skipped) = match self.unavailable_while_long(reading).await {
            Ok(read) => read,
            Err(ReadFailed::Etcd(error)) => {
                let why = format!("cannot read the fleet from etcd: {error}");
                return Err((Failure::Refused, why));
            }
            Err(ReadFailed::Silent { page }) => {
                let why = format!(
                    "etcd at {} did not answer page {} of the fleet within {:?}",
                    self.settings.endpoints.join(","),
                    page + 1,
                    self.paging.deadline
                );
                return Err((Failure::Silent, why));
            }
            Err(ReadFailed::Stopped) => {
                let why = "the read of the fleet was stopped".to_owned();
                return Err((Failure::Broken, why));
            }
        };
        let revision = cache.revision();
        for skipped in &skipped {
            refusals::report(skipped);
        }
        self.view.read(cache);
        // Paging cursors are checked against the member the fleet was read from.
        let history = EtcdHistory::new(client.clone(), self.keys.clone());
        self.view.set_history(std::sync::Arc::new(history));
        Ok(revision)
    }

    /// Follow `stream`, asking for progress so that silence is noticed.
    async fn watch(&self, mut stream: WatchStream) -> Stop {
        let mut heard = Instant::now();
        let mut ask = tokio::time::interval(self.deadlines.progress_every);
        loop {
            let response = tokio::select! {
                _ = ask.tick() => {
                    if let Err(error) = stream.request_progress().await {
                        return broken(format!("the fleet watch failed: {error}"));
                    }
                    continue;
                }
                response = timeout_at(heard + self.deadlines.silent_after, stream.message()) => {
                    response
                }
            };
            let response = match response {
                Ok(Ok(Some(response))) => response,
                Ok(Ok(None)) => return broken("etcd ended the fleet watch".to_owned()),
                Ok(Err(error)) => return broken(format!("the fleet watch failed: {error}")),
                Err(_) => return Stop::Failed(Failure::Silent, self.silent()),
            };
            heard = Instant::now();
            match step_of(ResponseFacts::of(&response)) {
                WatchStep::Started => {}
                WatchStep::Progress(revision) => self.view.advance(revision),
                WatchStep::Changes => {
                    self.view
                        .apply(response.events().iter().filter_map(|event| {
                            let kv = event.kv()?;
                            let change = match event.event_type() {
                                EventType::Put => WatchChange::Put {
                                    key: kv.key(),
                                    value: kv.value(),
                                },
                                EventType::Delete => WatchChange::Delete { key: kv.key() },
                            };
                            Some((kv.mod_revision(), change))
                        }))
                }
                WatchStep::Compacted => return Stop::Compacted,
                WatchStep::Canceled(why) => {
                    let why = format!("etcd canceled the fleet watch: {why}");
                    return Stop::Failed(Failure::Canceled, why);
                }
            }
        }
    }

    /// `read` awaited; should it outlast [`WatchDeadlines::silent_after`], the view is made
    /// unavailable meanwhile: the picture it holds (after a compaction, say) is no longer
    /// known current, and a reader starting cold says it is still reading.
    async fn unavailable_while_long<T>(&self, read: impl Future<Output = T>) -> T {
        let mut read = pin!(read);
        tokio::select! {
            done = &mut read => return done,
            () = tokio::time::sleep(self.deadlines.silent_after) => {}
        }
        let why = format!(
            "still reading the fleet from etcd at {} after {:?}",
            self.settings.endpoints.join(","),
            self.deadlines.silent_after
        );
        self.view.unavailable(why);
        read.await
    }

    fn silent(&self) -> String {
        format!(
            "etcd at {} has not answered for {:?}",
            self.settings.endpoints.join(","),
            self.deadlines.silent_after
        )
    }
}

fn broken(why: String) -> Stop {
    Stop::Failed(Failure::Broken, why)
}

#[cfg(test)]
mod tests;
