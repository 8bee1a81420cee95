//! The verified picture the live view keeps: each session with its latest complete verdict, and
//! how many entries of the directory are not records.
//!
//! Invariants:
//! - The snapshot built from the picture is cached until the picture changes (or the id it
//!   carries moves on), so listeners arriving between changes share one snapshot and its
//!   encoding.
//! - Its counts by state are those of its sessions at every moment: kept up to date by every
//!   change, so `/metrics` follows the picture after every step without recounting it.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::event::Snapshot;
use crate::registry::{Reading, StateCounts};

/// Every session in the picture, by id, and the count of unreadable entries.
#[derive(Debug, Default)]
pub(super) struct Picture {
    sessions: BTreeMap<String, Reading>,
    /// The sessions' readings, counted by state.
    counts: StateCounts,
    unreadable: usize,
    cached: Option<Arc<Snapshot>>,
}

impl Picture {
    pub(super) fn get(&self, session_id: &str) -> Option<&Reading> {
        self.sessions.get(session_id)
    }

    pub(super) fn contains(&self, session_id: &str) -> bool {
        self.sessions.contains_key(session_id)
    }

    /// How many sessions the picture holds.
    pub(super) fn len(&self) -> usize {
        self.sessions.len()
    }

    /// How many sessions are in each state.
    pub(super) fn counts(&self) -> StateCounts {
        self.counts
    }

    /// How many entries of the directory are not records.
    pub(super) fn unreadable(&self) -> usize {
        self.unreadable
    }

    pub(super) fn session_ids(&self) -> impl Iterator<Item = &String> {
        self.sessions.keys()
    }

    /// Put `reading` in, replacing its session's reading if there was one.
    pub(super) fn insert(&mut self, reading: Reading) {
        self.counts.add(&reading);
        let replaced = self
            .sessions
            .insert(reading.record.session_id.clone(), reading);
        if let Some(replaced) = replaced {
            self.counts.remove(&replaced);
        }
        self.cached = None;
    }

    pub(super) fn remove(&mut self, session_id: &str) {
        if let Some(removed) = self.sessions.remove(session_id) {
            self.counts.remove(&removed);
        }
        self.cached = None;
    }

    pub(super) fn set_unreadable(&mut self, count: usize) {
        if self.unreadable != count {
            self.unreadable = count;
            self.cached = None;
        }
    }

    /// Forget every session (the count of unreadable entries is the next pass's to set).
    pub(super) fn clear(&mut self) {
        self.sessions.clear();
        self.counts = StateCounts::default();
        self.cached = None;
    }

    /// Drop the cached snapshot: the id it carries is no longer the last event's.
    pub(super) fn forget_snapshot(&mut self) {
        self.cached = None;
    }

    /// The picture as a snapshot carrying `id`, built once and shared until it changes.
    pub(super) fn snapshot(&mut self, id: u64) -> Arc<Snapshot> {
        if let Some(snapshot) = &self.cached {
            return Arc::clone(snapshot);
        }
        let readings = self.sessions.values().rev().cloned().collect();
        let snapshot = Arc::new(Snapshot::new(id, readings, self.unreadable));
        self.cached = Some(Arc::clone(&snapshot));
        snapshot
    }
}

#[cfg(test)]
mod tests;
