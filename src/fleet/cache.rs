//! The fleet as one prefix of etcd describes it: hosts and sessions, fed by a read of the prefix
//! at a revision and then by the watch from the next revision.
//!
//! Invariant: the cache holds exactly the entries under the prefix that parse (a key the layout
//! could have made, a value of its shape whose `host_id` and `session_id` agree with the key),
//! as of `revision`; every difference a step makes to it is returned as one [`FleetChange`], in
//! the order etcd gave them. An entry that does not parse is skipped with a reason, and a key
//! overwritten with one leaves the cache (its old value is no longer what etcd holds); a value
//! over the caps of [`super::model`] is refused before it is parsed, so never held or served. A
//! session member that `GET /sessions` does not serve ([`SESSION_MEMBERS`](super::model::SESSION_MEMBERS)), a `door_token` or
//! `credentials` should a faulty host publish one, is dropped unread ([`held`]). Each
//! session is held with its JSON encoding, made once when it is read, so an answer of any subset
//! of the fleet is a concatenation, not a re-encoding; only that encoding and the fields the
//! endpoints filter by are kept ([`CachedSession`]), not the parsed tree. Pure: no I/O, no clock.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use super::keys::{FleetKey, FleetKeys};
use super::model::check_value_size;
pub use super::refusals::{Refusal, Skipped};
use super::{HostEntry, HostId, refusals};
pub(crate) use cold_read::{ColdRead, ParsedPage};
use held::HeldEntry;
pub use session::CachedSession;

/// One change the watch reports, as etcd gives it.
#[derive(Debug, Clone, Copy)]
pub enum WatchChange<'a> {
    /// `key` now holds `value`.
    Put {
        /// The key.
        key: &'a [u8],
        /// Its new value.
        value: &'a [u8],
    },
    /// `key` was deleted (by its owner, or with its lease).
    Delete {
        /// The key.
        key: &'a [u8],
    },
}

/// What changed in the fleet.
#[derive(Debug, Clone, PartialEq)]
pub enum FleetChange {
    /// A host entered the fleet.
    HostJoined(Arc<HostEntry>),
    /// A host's entry was rewritten (its load read again, say).
    HostChanged(Arc<HostEntry>),
    /// A host's entry left (its registry left, or its lease lapsed).
    HostLeft {
        /// The host.
        host_id: HostId,
    },
    /// A session appeared.
    SessionAdded(Arc<CachedSession>),
    /// A session's entry changed.
    SessionChanged {
        /// The entry before.
        old: Arc<CachedSession>,
        /// The entry now.
        now: Arc<CachedSession>,
    },
    /// A session left.
    SessionRemoved {
        /// Its host.
        host_id: HostId,
        /// The session.
        session_id: String,
    },
}

/// What one watch event did to a [`FleetCache`].
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// What a listener hears, if anything changed.
    pub change: Option<FleetChange>,
    /// The value put, when it was refused (what the key held before has then left).
    pub refused: Option<Skipped>,
}

/// The hosts and sessions under one prefix, as of one revision.
#[derive(Debug, Clone)]
pub struct FleetCache {
    keys: FleetKeys,
    revision: i64,
    hosts: BTreeMap<HostId, Arc<HostEntry>>,
    sessions: BTreeMap<(HostId, String), Arc<CachedSession>>,
}

/// A parsed entry, ready to store.
enum Parsed {
    Host(HostId, Arc<HostEntry>),
    Session(HostId, String, Arc<CachedSession>),
}

impl FleetCache {
    /// The cache of `entries` (key, value), as a range read of `keys.all()` returned them at
    /// `revision`, and the entries it skipped.
    pub fn read<'a>(
        keys: FleetKeys,
        revision: i64,
        entries: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    ) -> (Self, Vec<Skipped>) {
        let page = ParsedPage::of(&keys, entries);
        let mut read = ColdRead::new(keys, revision);
        read.take(page);
        read.finish()
    }

    /// The revision the cache describes.
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// Every host, by id.
    pub fn hosts(&self) -> impl ExactSizeIterator<Item = &Arc<HostEntry>> {
        self.hosts.values()
    }

    /// Every session, by host and session id.
    pub fn sessions(&self) -> impl ExactSizeIterator<Item = &Arc<CachedSession>> {
        self.sessions.values()
    }

    /// Every session after `after` (a host and a session id; from the first without one), by
    /// host and session id, each with its key: where a page of the fleet starts, whether or not
    /// `after` is still held.
    pub fn sessions_after(
        &self,
        after: Option<&(HostId, String)>,
    ) -> impl Iterator<Item = (&(HostId, String), &Arc<CachedSession>)> {
        let start = match after {
            Some(after) => Bound::Excluded(after),
            None => Bound::Unbounded,
        };
        self.sessions
            .range::<(HostId, String), _>((start, Bound::Unbounded))
    }

    /// The host `id`, if held.
    pub fn host(&self, id: &HostId) -> Option<&Arc<HostEntry>> {
        self.hosts.get(id)
    }

    /// The watch says nothing changed up to `revision` (a progress notice): the cache is
    /// current as of it. A revision older than the cache's is ignored.
    pub fn advance(&mut self, revision: i64) {
        self.revision = self.revision.max(revision);
    }

    /// Apply one watch event that happened at `revision`: what it changed (nothing for a put
    /// of the value already held, or a delete of a key not held), and the value it refused.
    pub fn apply(&mut self, revision: i64, change: WatchChange<'_>) -> Applied {
        self.advance(revision);
        match change {
            WatchChange::Put { key, value } => match parse(&self.keys, key, value) {
                Ok(parsed) => {
                    refusals::forget(&String::from_utf8_lossy(key));
                    let change = match parsed {
                        Parsed::Host(id, entry) => self.put_host(id, entry),
                        Parsed::Session(host, id, entry) => self.put_session(host, id, entry),
                    };
                    Applied {
                        change,
                        refused: None,
                    }
                }
                // What etcd holds under this key is no longer the entry we had: it leaves,
                // and a listener hears so.
                Err(refused) => Applied {
                    change: self.delete(key),
                    refused: Some(refused),
                },
            },
            WatchChange::Delete { key } => {
                refusals::forget(&String::from_utf8_lossy(key));
                Applied {
                    change: self.delete(key),
                    refused: None,
                }
            }
        }
    }

    /// Become `newer` (a fresh read after a compaction or an outage): the changes that turn
    /// this cache into it, removals first, so a listener's table never holds a session whose
    /// host has left.
    pub fn replace(&mut self, newer: FleetCache) -> Vec<FleetChange> {
        let mut changes = Vec::new();
        for ((host, id), _) in self.sessions.iter() {
            if !newer.sessions.contains_key(&(host.clone(), id.clone())) {
                changes.push(FleetChange::SessionRemoved {
                    host_id: host.clone(),
                    session_id: id.clone(),
                });
            }
        }
        for host in self.hosts.keys() {
            if !newer.hosts.contains_key(host) {
                changes.push(FleetChange::HostLeft {
                    host_id: host.clone(),
                });
            }
        }
        for (host, entry) in &newer.hosts {
            match self.hosts.get(host) {
                None => changes.push(FleetChange::HostJoined(Arc::clone(entry))),
                Some(old) if old != entry => {
                    changes.push(FleetChange::HostChanged(Arc::clone(entry)));
                }
                Some(_) => {}
            }
        }
        for (key, entry) in &newer.sessions {
            match self.sessions.get(key) {
                None => changes.push(FleetChange::SessionAdded(Arc::clone(entry))),
                Some(old) if old != entry => changes.push(FleetChange::SessionChanged {
                    old: Arc::clone(old),
                    now: Arc::clone(entry),
                }),
                Some(_) => {}
            }
        }
        *self = newer;
        changes
    }

    fn put_host(&mut self, id: HostId, entry: Arc<HostEntry>) -> Option<FleetChange> {
        match self.hosts.insert(id, Arc::clone(&entry)) {
            Some(old) if old == entry => None,
            Some(_) => Some(FleetChange::HostChanged(entry)),
            None => Some(FleetChange::HostJoined(entry)),
        }
    }

    fn put_session(
        &mut self,
        host: HostId,
        id: String,
        entry: Arc<CachedSession>,
    ) -> Option<FleetChange> {
        match self.sessions.insert((host, id), Arc::clone(&entry)) {
            None => Some(FleetChange::SessionAdded(entry)),
            Some(old) if old == entry => None,
            Some(old) => Some(FleetChange::SessionChanged { old, now: entry }),
        }
    }

    fn delete(&mut self, key: &[u8]) -> Option<FleetChange> {
        match self.keys.parse(key)? {
            FleetKey::Host(host_id) => self
                .hosts
                .remove(&host_id)
                .map(|_| FleetChange::HostLeft { host_id }),
            FleetKey::Session { host, session_id } => self
                .sessions
                .remove(&(host.clone(), session_id.clone()))
                .map(|_| FleetChange::SessionRemoved {
                    host_id: host,
                    session_id,
                }),
        }
    }
}

/// What `key` holding `value` is to a cache under `keys`: an entry to hold, or why not.
fn parse(keys: &FleetKeys, key: &[u8], value: &[u8]) -> Result<Parsed, Skipped> {
    let skip = |refusal: Refusal, why: String| Skipped {
        key: String::from_utf8_lossy(key).into_owned(),
        why,
        refusal,
    };
    let invalid = |why: String| skip(Refusal::Invalid, why);
    let Some(named) = keys.parse(key) else {
        return Err(invalid("not a key of the fleet layout".to_owned()));
    };
    // Before a byte of it is parsed: a value over the cap costs nothing more than its read.
    check_value_size(value.len()).map_err(|why| skip(Refusal::TooLarge, why))?;
    // JSON is UTF-8, and serde skips a member it ignores without checking its bytes.
    let value =
        std::str::from_utf8(value).map_err(|_| invalid("not UTF-8, so not JSON".to_owned()))?;
    match named {
        FleetKey::Host(id) => {
            let entry: HostEntry = serde_json::from_str(value)
                .map_err(|e| invalid(format!("not a host entry: {e}")))?;
            if entry.host_id != id.as_str() {
                return Err(invalid(format!("names host {:?}", entry.host_id)));
            }
            Ok(Parsed::Host(id, Arc::new(entry)))
        }
        FleetKey::Session { host, session_id } => {
            // Only the members a session is served with are read: a faulty or hostile
            // host adds nothing (a `door_token` or `credentials` least of all).
            let held: HeldEntry = serde_json::from_str(value)
                .map_err(|e| invalid(format!("not a session entry: {e}")))?;
            held.entry
                .check()
                .map_err(|why| skip(Refusal::TooLarge, why))?;
            if held.entry.host_id != host.as_str() {
                return Err(invalid(format!("names host {:?}", held.entry.host_id)));
            }
            if held.members.get("session_id").and_then(|v| v.as_str()) != Some(&session_id) {
                return Err(invalid("its session_id is not its key's".to_owned()));
            }
            // Infallible for this shape (string keys, JSON values), but never assumed.
            let json = serde_json::value::to_raw_value(&held)
                .map_err(|e| invalid(format!("cannot be encoded: {e}")))?;
            let cached = CachedSession::new(host.clone(), session_id.clone(), held, json);
            Ok(Parsed::Session(host, session_id, Arc::new(cached)))
        }
    }
}

mod cold_read;
mod held;
mod session;
#[cfg(test)]
mod tests;
