//! Feeds a [`FleetView`] from etcd: one read of the fleet prefix at a revision, then one watch
//! of the prefix from the next revision, with progress notices asked for so a quiet fleet
//! still proves etcd answers.
//!
//! Invariants:
//! - The view is current only while this watch is known to be following etcd: a refused
//!   connection, a failed or ended watch, or etcd silent for [`WatchDeadlines::silent_after`]
//!   makes it unavailable (saying why) at once, so a stale fleet is never served as current.
//! - After a failure a fresh read is tried every [`WatchDeadlines::retry_after`], on a new
//!   connection to the next member; a compaction is a fresh read at once on the same one, and
//!   a watch that broke while following (its member went away) a fresh read at once on the
//!   next member (see [`read_again_at_once`]). A fresh read replaces the whole cache, so
//!   nothing that left meanwhile survives it.
//! - Each connection asks one member: a channel balanced over every member kept sending the
//!   fresh reads to a dead one, so one member's loss made the fleet unavailable for longer
//!   than a TTL.
//! - Every wait on etcd has a deadline; the task never panics and ends only when stopped.

use std::time::Duration;

use etcd_client::{Client, EventType, GetOptions, WatchOptions, WatchStream};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout, timeout_at};

use super::cache::{FleetCache, WatchChange};
use super::etcd::{EtcdSettings, connect};
use super::keys::FleetKeys;
use super::view::FleetView;
use super::watch_step::{
    Failure, ResponseFacts, WatchDeadlines, WatchStep, read_again_at_once, step_of,
};

/// The running watcher. Dropping it (or [`FleetWatcher::stop`]) stops the watch.
#[derive(Debug)]
pub struct FleetWatcher {
    task: JoinHandle<()>,
}

impl FleetWatcher {
    /// Stop watching. The view keeps what it had; close it apart if it must stop serving.
    pub fn stop(self) {
        self.task.abort();
    }
}

impl Drop for FleetWatcher {
    fn drop(&mut self) {
        self.task.abort();
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
    let task = tokio::spawn(async move {
        let watcher = Watcher {
            settings,
            keys,
            ttl,
            deadlines: WatchDeadlines::for_ttl(ttl),
            view,
        };
        watcher.run().await;
    });
    FleetWatcher { task }
}

struct Watcher {
    settings: EtcdSettings,
    keys: FleetKeys,
    ttl: Duration,
    deadlines: WatchDeadlines,
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
        // Which member the next connection asks: after any failure, the next one.
        let mut turn = 0;
        loop {
            let failed = match self.connect(turn).await {
                Ok(mut client) => self.follow_until_failed(&mut client, &mut last_retry).await,
                Err(why) => Some(why),
            };
            turn = turn.wrapping_add(1);
            if let Some(why) = failed {
                self.view.unavailable(why);
                tokio::time::sleep(self.deadlines.retry_after).await;
            }
        }
    }

    /// Follow the fleet on `client`, reading again after a compaction; why it failed, or
    /// `None` for a broken watch to read again at once on the next member (see
    /// [`read_again_at_once`]).
    async fn follow_until_failed(
        &self,
        client: &mut Client,
        last_retry: &mut Option<Instant>,
    ) -> Option<String> {
        loop {
            match self.follow(client).await {
                Stop::Compacted => tracing::info!("fleet watch compacted: reading again"),
                Stop::Failed(failure, why) => {
                    let since = last_retry.map(|at: Instant| at.elapsed());
                    if !read_again_at_once(failure, since, self.ttl) {
                        return Some(why);
                    }
                    tracing::info!(%why, "fleet watch broke: reading again at once");
                    *last_retry = Some(Instant::now());
                    return None;
                }
            }
        }
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
        match self.read(client).await {
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

    /// Read every fleet key; the revision read at.
    async fn read(&self, client: &mut Client) -> Result<i64, (Failure, String)> {
        let get = client.get(self.keys.all(), Some(GetOptions::new().with_prefix()));
        let mut response = match timeout(self.deadlines.silent_after, get).await {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => {
                let why = format!("cannot read the fleet from etcd: {error}");
                return Err((Failure::Refused, why));
            }
            Err(_) => return Err((Failure::Silent, self.silent())),
        };
        let revision = response.header().map_or(0, |h| h.revision());
        let kvs = response.take_kvs();
        let (cache, skipped) = FleetCache::read(
            self.keys.clone(),
            revision,
            kvs.iter().map(|kv| (kv.key(), kv.value())),
        );
        for skipped in skipped {
            tracing::warn!(key = %skipped.key, why = %skipped.why, "fleet entry skipped");
        }
        self.view.read(cache);
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
            let facts = ResponseFacts {
                created: response.created(),
                canceled: response.canceled(),
                compact_revision: response.compact_revision(),
                cancel_reason: response.cancel_reason(),
                events: response.events().len(),
                revision: response.header().map_or(0, |h| h.revision()),
            };
            match step_of(facts) {
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
