//! A [`FleetCache`] read whole at one revision, page after page: each page parsed on its own
//! ([`ParsedPage`], several at once), taken in in order, the maps built once at the end.
//!
//! Why: a read of 100,000 sessions inserted into the cache's `BTreeMap`s one by one spent a
//! tenth of its time comparing keys with a long common prefix (issue 27's profile); a map built
//! from a sorted list is built in one pass.
//!
//! Invariant: the cache [`ColdRead::finish`] makes, and the entries it skipped (in the order
//! given), are those inserting each entry in turn into an empty cache would have made: the
//! same parse ([`parse`](super::parse)), and of two entries of one key the later kept, when
//! the pages are taken in the order read.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{CachedSession, FleetCache, FleetKeys, Parsed, Skipped, parse, refusals};
use crate::fleet::{HostEntry, HostId};

/// A read under way: what its pages held so far.
#[derive(Debug)]
pub(crate) struct ColdRead {
    keys: FleetKeys,
    revision: i64,
    taken: ParsedPage,
}

/// One page of a read, its entries parsed in the order given.
///
/// Why apart from [`ColdRead`]: parsing is most of a cold read's work (issue 27's profile: 70 %
/// of the reader's), and a page's parse needs nothing of the pages before it, so pages are
/// parsed on as many cores as there are and taken in, in order, by one [`ColdRead`].
#[derive(Debug, Default)]
pub(crate) struct ParsedPage {
    hosts: Vec<(HostId, Arc<HostEntry>)>,
    sessions: Vec<((HostId, String), Arc<CachedSession>)>,
    skipped: Vec<Skipped>,
}

impl ParsedPage {
    /// `entries` (key, value) of a read of `keys`' prefix, parsed.
    pub(crate) fn of<'a>(
        keys: &FleetKeys,
        entries: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Self {
        let mut page = Self::default();
        let mut accepted = Vec::new();
        for (key, value) in entries {
            match parse(keys, key, value) {
                Ok(parsed) => {
                    accepted.push(key);
                    match parsed {
                        Parsed::Host(id, entry) => page.hosts.push((id, entry)),
                        Parsed::Session(host, id, entry) => page.sessions.push(((host, id), entry)),
                    }
                }
                Err(skip) => page.skipped.push(skip),
            }
        }
        refusals::forget_each(accepted);
        page
    }
}

impl ColdRead {
    /// A read of the prefix of `keys` at `revision`, nothing taken in yet.
    pub(crate) fn new(keys: FleetKeys, revision: i64) -> Self {
        Self {
            keys,
            revision,
            taken: ParsedPage::default(),
        }
    }

    /// Take in `page`, the next page of the read: pages must come in the order read, as the
    /// later of two entries of one key is the one kept.
    pub(crate) fn take(&mut self, page: ParsedPage) {
        let taken = &mut self.taken;
        taken.hosts.extend(page.hosts);
        taken.sessions.extend(page.sessions);
        taken.skipped.extend(page.skipped);
    }

    /// The cache the pages make, and the entries they skipped.
    pub(crate) fn finish(self) -> (FleetCache, Vec<Skipped>) {
        let cache = FleetCache {
            keys: self.keys,
            revision: self.revision,
            hosts: built(self.taken.hosts),
            sessions: built(self.taken.sessions),
        };
        (cache, self.taken.skipped)
    }
}

/// The map of `entries`, of two of one key the later kept, as inserting each in turn makes it.
///
/// The sort is needed: etcd's byte order of keys is not the maps' (`a-b/x` comes before `a/x`
/// in etcd, after it as a pair of host and session), yet it finds a read already in order in
/// one pass. Stable, so equal keys stay in the order given, and the last of each is kept here
/// rather than left to `from_iter`, whose documentation does not say which of equal keys it keeps.
fn built<K: Ord, V>(mut entries: Vec<(K, V)>) -> BTreeMap<K, V> {
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    // `dedup_by` keeps the first of a run (`kept`): the later value is moved into it.
    entries.dedup_by(|later, kept| {
        let equal = later.0 == kept.0;
        if equal {
            std::mem::swap(&mut later.1, &mut kept.1);
        }
        equal
    });
    // Sorted, no key twice: `from_iter` finds it so in one pass, then builds the tree.
    BTreeMap::from_iter(entries)
}

#[cfg(test)]
mod tests;
