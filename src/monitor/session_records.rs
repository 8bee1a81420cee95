//! Records by session id, keyed by the record itself: the loop rebuilds such sets for every
//! record on every pass, and keying them by the shared record copies no session id.
//!
//! Invariant: a set holds at most one record per session id, and finds it by that id alone.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::running::RunningRecord;

/// A record that hashes and compares as its session id, so a set of them is found by `&str`.
#[derive(Debug, Clone)]
struct BySessionId(Arc<RunningRecord>);

impl BySessionId {
    fn id(&self) -> &str {
        &self.0.session_id
    }
}

impl PartialEq for BySessionId {
    fn eq(&self, other: &Self) -> bool {
        self.id() == other.id()
    }
}

impl Eq for BySessionId {}

impl Hash for BySessionId {
    // As `str` hashes: `Borrow<str>` requires it, so that a lookup by id finds the record.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.id().hash(state);
    }
}

impl Borrow<str> for BySessionId {
    fn borrow(&self) -> &str {
        self.id()
    }
}

/// One record per session id, found by the id.
#[derive(Debug, Default)]
pub(super) struct SessionRecords(HashSet<BySessionId>);

impl SessionRecords {
    /// Empty, with room for `capacity` sessions.
    pub(super) fn with_capacity(capacity: usize) -> Self {
        Self(HashSet::with_capacity(capacity))
    }

    /// The record of `session_id`, if there is one.
    pub(super) fn get(&self, session_id: &str) -> Option<&Arc<RunningRecord>> {
        self.0.get(session_id).map(|entry| &entry.0)
    }

    /// Whether `session_id` has a record here.
    pub(super) fn contains(&self, session_id: &str) -> bool {
        self.0.contains(session_id)
    }

    /// Put `record` in, in place of any record of its session; `true` when there was none.
    pub(super) fn insert(&mut self, record: Arc<RunningRecord>) -> bool {
        self.0.replace(BySessionId(record)).is_none()
    }

    /// Take the record of `session_id` out, if there is one.
    pub(super) fn remove(&mut self, session_id: &str) -> Option<Arc<RunningRecord>> {
        self.0.take(session_id).map(|entry| entry.0)
    }

    /// Every record, in no particular order.
    pub(super) fn records(&self) -> impl Iterator<Item = &Arc<RunningRecord>> {
        self.0.iter().map(|entry| &entry.0)
    }
}

#[cfg(test)]
impl FromIterator<Arc<RunningRecord>> for SessionRecords {
    fn from_iter<I: IntoIterator<Item = Arc<RunningRecord>>>(records: I) -> Self {
        let mut set = Self::default();
        for record in records {
            set.insert(record);
        }
        set
    }
}

#[cfg(test)]
mod tests;
