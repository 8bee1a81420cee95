//! What etcd holds under this host's keys (its host key and its sessions' prefix), as a read
//! at one revision and then the watches of those two ranges told it, and whether a publishing
//! step may take it for what etcd holds instead of reading again.
//!
//! Pure: the stream that feeds it is [`super::keys_watch`].
//!
//! Invariants:
//! - The map starts as a full read at revision R, and both watches start at R + 1, so every
//!   change after the read reaches it, in etcd's order per watch: a put sets its key to its
//!   mod revision, a delete (by anyone, or the lease's expiry) removes it.
//! - It is trusted ([`HeldKeys::trusted`]) only when both watches are set up, etcd answered
//!   the progress request of this step, and each watch has delivered the changes of the last
//!   transaction of this publisher that wrote in its range. A watch delivers in revision
//!   order, so the map then holds every one of our own writes as etcd took it: a key of ours
//!   is never taken for foreign, or put again, because its event was still on its way.
//! - A change made by anyone else reaches the map when its event arrives: with the progress
//!   answer, that is before the first step that starts after the change, except on an etcd
//!   that sends the answer ahead of queued events (3.4 before 3.4.24: etcd-io/etcd#15220),
//!   where it may be one step later.

use std::collections::BTreeMap;

/// The two watched ranges: one key, and one prefix.
const HOST: usize = 0;
const SESSIONS: usize = 1;

/// What etcd holds under this host, as far as the watches have told.
#[derive(Debug)]
pub(crate) struct HeldKeys {
    /// The host key: the one key of the host watch; every other key is the sessions watch's.
    host_key: String,
    /// Each key etcd holds, with its mod revision.
    held: BTreeMap<String, i64>,
    /// Per watch: the revision through which it has delivered every change.
    delivered: [i64; 2],
    /// Per watch: the revision of this publisher's last transaction that wrote in its range.
    written: [i64; 2],
    /// How many of the two watches etcd has set up.
    created: u8,
    /// Whether etcd answered this step's progress request.
    answered: bool,
}

impl HeldKeys {
    /// What a read at `revision` found (`held`: each key with its mod revision), before any
    /// watch is set up.
    pub(crate) fn read_at(host_key: String, held: BTreeMap<String, i64>, revision: i64) -> Self {
        Self {
            host_key,
            held,
            delivered: [revision; 2],
            written: [0; 2],
            created: 0,
            answered: false,
        }
    }

    fn watch_of(&self, key: &str) -> usize {
        if key == self.host_key { HOST } else { SESSIONS }
    }

    /// One of the two watches is set up.
    pub(crate) fn created(&mut self) {
        self.created = self.created.saturating_add(1);
    }

    /// `key` was put at `revision`.
    pub(crate) fn put(&mut self, key: &str, revision: i64) {
        self.delivered_through(key, revision);
        self.held.insert(key.to_owned(), revision);
    }

    /// `key` was deleted at `revision`.
    pub(crate) fn deleted(&mut self, key: &str, revision: i64) {
        self.delivered_through(key, revision);
        self.held.remove(key);
    }

    fn delivered_through(&mut self, key: &str, revision: i64) {
        let watch = self.watch_of(key);
        self.delivered[watch] = self.delivered[watch].max(revision);
    }

    /// This publisher's transaction at `revision` wrote `keys`: the map is not trusted again
    /// until their watch has delivered that revision.
    pub(crate) fn wrote<'a>(&mut self, keys: impl IntoIterator<Item = &'a str>, revision: i64) {
        for key in keys {
            let watch = self.watch_of(key);
            self.written[watch] = self.written[watch].max(revision);
        }
    }

    /// A step begins: its progress request is not answered yet.
    pub(crate) fn asked(&mut self) {
        self.answered = false;
    }

    /// etcd answered this step's progress request.
    pub(crate) fn answered(&mut self) {
        self.answered = true;
    }

    /// Every key etcd holds under this host with its mod revision, if this step may take the
    /// map for it (see the header); `None`: read etcd instead.
    pub(crate) fn trusted(&self) -> Option<&BTreeMap<String, i64>> {
        let caught_up = (self.delivered.iter().zip(&self.written)).all(|(d, w)| d >= w);
        (self.created >= 2 && self.answered && caught_up).then_some(&self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST_KEY: &str = "/p/hosts/a";
    const S1: &str = "/p/sessions/a/s1";
    const S2: &str = "/p/sessions/a/s2";

    /// Read at revision 10 (the host key at 4, one session at 9), both watches set up, and
    /// this step's progress request answered.
    fn following() -> HeldKeys {
        let read = BTreeMap::from([(HOST_KEY.to_owned(), 4), (S1.to_owned(), 9)]);
        let mut held = HeldKeys::read_at(HOST_KEY.to_owned(), read, 10);
        held.created();
        held.created();
        held.asked();
        held.answered();
        held
    }

    #[test]
    fn a_read_followed_by_both_watches_and_answered_is_trusted_as_read() {
        let held = following();
        let trusted = held.trusted().expect("trusted");
        assert_eq!(trusted.get(HOST_KEY), Some(&4));
        assert_eq!(trusted.get(S1), Some(&9));
        assert_eq!(trusted.len(), 2);
    }

    #[test]
    fn not_trusted_until_both_watches_are_set_up_and_the_step_is_answered() {
        let mut held = HeldKeys::read_at(HOST_KEY.to_owned(), BTreeMap::new(), 10);
        held.answered();
        assert!(held.trusted().is_none(), "no watch set up");
        held.created();
        assert!(held.trusted().is_none(), "one watch set up");
        held.created();
        assert!(held.trusted().is_some());
        // The next step asks again: the last answer does not count for it.
        held.asked();
        assert!(held.trusted().is_none(), "this step not answered");
        held.answered();
        assert!(held.trusted().is_some());
    }

    #[test]
    fn events_put_and_remove_keys_at_their_revisions() {
        let mut held = following();
        held.put(S2, 11);
        held.put(S1, 12);
        held.deleted(HOST_KEY, 13);
        let trusted = held.trusted().expect("trusted");
        assert_eq!(
            trusted,
            &BTreeMap::from([(S1.to_owned(), 12), (S2.to_owned(), 11)])
        );
    }

    #[test]
    fn our_own_write_must_have_come_back_on_its_own_watch_first() {
        let mut held = following();
        held.wrote([S1, S2], 11);
        assert!(held.trusted().is_none(), "our write at 11 not delivered");
        // A later change on the other watch says nothing of this one's.
        held.put(HOST_KEY, 12);
        assert!(
            held.trusted().is_none(),
            "the sessions watch is still before 11"
        );
        held.put(S1, 11);
        assert!(held.trusted().is_some());
        held.wrote([HOST_KEY], 14);
        assert!(held.trusted().is_none(), "the host watch is before 14");
        held.deleted(HOST_KEY, 14);
        assert!(held.trusted().is_some());
    }

    #[test]
    fn a_write_at_or_before_the_read_needs_no_event() {
        let mut held = following();
        held.wrote([S1], 10);
        held.wrote([HOST_KEY], 3);
        assert!(held.trusted().is_some());
        held.wrote([S1], 11);
        assert!(held.trusted().is_none());
        // An event of an older revision (delivered late) does not move the watch back.
        held.put(S1, 11);
        held.put(S2, 5);
        assert!(held.trusted().is_some());
    }
}
