//! The publisher's watch of its own keys: one etcd watch stream carrying a watch of the host
//! key and one of its sessions' prefix, started just after a full read of both, feeding
//! [`HeldKeys`] so that a step at rest asks etcd nothing but a progress notice on a stream
//! that is already open, instead of reading every key of this host.
//!
//! Invariants:
//! - Each step asks etcd for progress on the stream and applies everything the stream
//!   delivered up to the answer; the map is then used only if [`HeldKeys::trusted`] says so.
//! - Any failure of the stream (an error, its end, a watch canceled or compacted, no answer
//!   within the deadline) is returned, and the publisher drops the watch: nothing a broken
//!   stream delivered is used, and the next read starts a new one.

use std::collections::BTreeMap;
use std::time::Duration;

use etcd_client::{Client, EventType, WatchOptions, WatchResponse, WatchStream};
use tokio::time::{Instant, timeout, timeout_at};

use super::held_keys::HeldKeys;
use super::watch_step::{ResponseFacts, WatchStep, step_of};

/// A watch of this host's keys, and what it has told.
#[derive(Debug)]
pub(crate) struct KeysWatch {
    stream: WatchStream,
    held: HeldKeys,
}

impl KeysWatch {
    /// Watch `host_key` and the prefix `sessions` from the revision after `revision`, at
    /// which a read found `held`. Waits at most `deadline` for etcd to open the stream.
    pub(crate) async fn start(
        client: &mut Client,
        host_key: &str,
        sessions: &str,
        (held, revision): (BTreeMap<String, i64>, i64),
        deadline: Duration,
    ) -> Result<Self, String> {
        let from = WatchOptions::new().with_start_revision(revision + 1);
        let opening = timeout(deadline, client.watch(host_key, Some(from.clone())));
        let mut stream = match opening.await {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => return Err(format!("etcd refused the watch: {error}")),
            Err(_) => return Err(format!("etcd did not open the watch within {deadline:?}")),
        };
        let second = stream.watch(sessions, Some(from.with_prefix()));
        if let Err(error) = second.await {
            return Err(format!("the watch of this host's sessions failed: {error}"));
        }
        let held = HeldKeys::read_at(host_key.to_owned(), held, revision);
        Ok(Self { stream, held })
    }

    /// This publisher's transaction at `revision` wrote `keys`.
    pub(crate) fn wrote<'a>(&mut self, keys: impl IntoIterator<Item = &'a str>, revision: i64) {
        self.held.wrote(keys, revision);
    }

    /// Ask etcd for progress and apply what the stream delivers until it answers, within
    /// `deadline`; then what etcd holds under this host, if the map may be trusted for it.
    pub(crate) async fn catch_up(
        &mut self,
        deadline: Duration,
    ) -> Result<Option<&BTreeMap<String, i64>>, String> {
        let until = Instant::now() + deadline;
        self.held.asked();
        let asking = timeout_at(until, self.stream.request_progress());
        match asking.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(format!("the watch failed: {error}")),
            Err(_) => return Err(format!("the watch took no request within {deadline:?}")),
        }
        loop {
            let response = match timeout_at(until, self.stream.message()).await {
                Ok(Ok(Some(response))) => response,
                Ok(Ok(None)) => return Err("etcd ended the watch".to_owned()),
                Ok(Err(error)) => return Err(format!("the watch failed: {error}")),
                Err(_) => return Err(format!("etcd did not answer within {deadline:?}")),
            };
            if self.apply(&response)? {
                return Ok(self.held.trusted());
            }
        }
    }

    /// Apply one response; whether it was the answer to the progress request.
    fn apply(&mut self, response: &WatchResponse) -> Result<bool, String> {
        match step_of(ResponseFacts::of(response)) {
            WatchStep::Started => self.held.created(),
            WatchStep::Progress(_) => {
                self.held.answered();
                return Ok(true);
            }
            WatchStep::Changes => {
                for event in response.events() {
                    let Some(kv) = event.kv() else { continue };
                    // A key that is not UTF-8 is no entry a reader takes; left alone, as a
                    // read leaves it.
                    let Ok(key) = kv.key_str() else { continue };
                    match event.event_type() {
                        EventType::Put => self.held.put(key, kv.mod_revision()),
                        EventType::Delete => self.held.deleted(key, kv.mod_revision()),
                    }
                }
            }
            WatchStep::Compacted => return Err("the watch was compacted".to_owned()),
            WatchStep::Canceled(why) => return Err(format!("etcd canceled the watch: {why}")),
        }
        Ok(false)
    }
}
