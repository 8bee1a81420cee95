//! What one publishing pass writes: the difference between what etcd holds of this registry's
//! writes and what it wants published now, cut into transactions etcd accepts.
//!
//! Invariants: a key is this registry's only while etcd's revision of it is the revision of the
//! transaction that wrote it ([`verify`]): values are never compared to tell whose a key is, so a
//! foreign value equal to ours is still put again under our lease. A key of ours whose value is
//! unchanged costs no operation; every other difference (a foreign key, wanted or not,
//! included) is exactly one put or one delete; every transaction holds at least one and at most
//! [`TxnLimits::max_ops`] operations and, unless one operation alone is larger, at most
//! [`TxnLimits::max_bytes`] bytes of keys and values. Operations come in key order.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

/// Keys and their values, as etcd holds them under this registry's lease. A value is shared,
/// not copied, between what is wanted, what is written and what is published.
pub type KeyValues = BTreeMap<String, Bytes>;

/// A key this registry wrote: its value, and the revision of the transaction that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The value put.
    pub value: Bytes,
    /// The store revision of the transaction that put it: its `mod_revision` in etcd for as
    /// long as nobody else writes the key.
    pub revision: i64,
}

/// What this registry believes etcd holds of its writes, by key.
pub type Published = BTreeMap<String, Written>;

/// Keep in `published` only the keys etcd still holds as this registry wrote them (`held`: each
/// key under this host, with its `mod_revision`); the keys etcd holds there that it did not
/// write (deleted and put again, overwritten, or never ours) are returned.
pub fn verify(published: &mut Published, held: &BTreeMap<String, i64>) -> BTreeSet<String> {
    published.retain(|key, written| held.get(key) == Some(&written.revision));
    held.keys()
        .filter(|key| !published.contains_key(*key))
        .cloned()
        .collect()
}

/// One write of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Set `key` to `value` (under the registry's lease).
    Put {
        /// The key.
        key: String,
        /// Its new value.
        value: Bytes,
    },
    /// Remove `key`.
    Delete {
        /// The key.
        key: String,
    },
}

impl Write {
    /// What the write costs against the request size limit: its key and value.
    fn bytes(&self) -> usize {
        match self {
            Self::Put { key, value } => key.len() + value.len(),
            Self::Delete { key } => key.len(),
        }
    }
}

/// What one etcd transaction may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnLimits {
    /// The most operations (etcd's `--max-txn-ops`, 128 unless the server says otherwise).
    pub max_ops: usize,
    /// The most bytes of keys and values: under etcd's `--max-request-bytes` (1.5 MiB by
    /// default), with room left for the request's own framing.
    pub max_bytes: usize,
}

impl Default for TxnLimits {
    fn default() -> Self {
        Self {
            max_ops: 128,
            max_bytes: 1024 * 1024,
        }
    }
}

/// The writes that turn `published` (and the `foreign` keys etcd holds under this host) into
/// `wanted`, batched into transactions within `limits`: a foreign key is put if wanted, whatever
/// its value, and deleted otherwise.
///
/// Empty when nothing changed. A `max_ops` of 0 is taken as 1.
pub fn plan(
    published: &Published,
    foreign: &BTreeSet<String>,
    wanted: &KeyValues,
    limits: TxnLimits,
) -> Vec<Vec<Write>> {
    let only_foreign = foreign.iter().filter(|key| !published.contains_key(*key));
    let deletes = (published.keys().chain(only_foreign))
        .filter(|key| !wanted.contains_key(*key))
        .map(|key| Write::Delete { key: key.clone() });
    let puts = wanted
        .iter()
        .filter(|(key, value)| {
            foreign.contains(*key) || published.get(*key).map(|w| &w.value) != Some(value)
        })
        .map(|(key, value)| Write::Put {
            key: key.clone(),
            value: value.clone(),
        });
    let mut writes: Vec<Write> = deletes.chain(puts).collect();
    writes.sort_by(|a, b| key_of(a).cmp(key_of(b)));
    batches(writes, limits)
}

/// The key a write is to.
pub(crate) fn key_of(write: &Write) -> &str {
    match write {
        Write::Put { key, .. } | Write::Delete { key } => key,
    }
}

/// `writes` in order, cut wherever the next one would break a limit.
fn batches(writes: Vec<Write>, limits: TxnLimits) -> Vec<Vec<Write>> {
    let max_ops = limits.max_ops.max(1);
    let mut batches: Vec<Vec<Write>> = Vec::new();
    let mut bytes = 0;
    for write in writes {
        let cost = write.bytes();
        match batches.last_mut() {
            Some(batch) if batch.len() < max_ops && bytes + cost <= limits.max_bytes => {
                bytes += cost;
                batch.push(write);
            }
            _ => {
                bytes = cost;
                batches.push(vec![write]);
            }
        }
    }
    batches
}

/// `published` after `batch` was applied by the transaction of store revision `revision`.
pub fn apply(published: &mut Published, batch: &[Write], revision: i64) {
    for write in batch {
        match write {
            Write::Put { key, value } => {
                let value = value.clone();
                published.insert(key.clone(), Written { value, revision });
            }
            Write::Delete { key } => {
                published.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(pairs: &[(&str, &str)]) -> KeyValues {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Bytes::copy_from_slice(v.as_bytes())))
            .collect()
    }

    /// `pairs` as written by the transaction of revision 1.
    fn written(pairs: &[(&str, &str)]) -> Published {
        (kv(pairs).into_iter())
            .map(|(key, value)| (key, Written { value, revision: 1 }))
            .collect()
    }

    fn none() -> BTreeSet<String> {
        BTreeSet::new()
    }

    fn put(key: &str, value: &str) -> Write {
        Write::Put {
            key: key.to_owned(),
            value: Bytes::copy_from_slice(value.as_bytes()),
        }
    }

    fn delete(key: &str) -> Write {
        Write::Delete {
            key: key.to_owned(),
        }
    }

    #[test]
    fn nothing_changed_costs_nothing() {
        let both = [("a", "1"), ("b", "2")];
        assert!(plan(&written(&both), &none(), &kv(&both), TxnLimits::default()).is_empty());
        let nothing = (Published::new(), KeyValues::new());
        assert!(plan(&nothing.0, &none(), &nothing.1, TxnLimits::default()).is_empty());
    }

    #[test]
    fn new_changed_and_gone_keys_each_cost_one_write_in_key_order() {
        let published = written(&[("a", "1"), ("b", "2"), ("c", "3")]);
        let wanted = kv(&[("a", "1"), ("b", "two"), ("d", "4")]);
        assert_eq!(
            plan(&published, &none(), &wanted, TxnLimits::default()),
            vec![vec![put("b", "two"), delete("c"), put("d", "4")]]
        );
    }

    #[test]
    fn applying_the_plan_gives_what_was_wanted() {
        let mut published = written(&[("a", "1"), ("b", "2"), ("c", "3")]);
        let wanted = kv(&[("b", "x"), ("c", "3"), ("e", "5"), ("f", "6")]);
        let limits = TxnLimits {
            max_ops: 2,
            max_bytes: usize::MAX,
        };
        for (revision, batch) in (2..).zip(plan(&published, &none(), &wanted, limits)) {
            apply(&mut published, &batch, revision);
        }
        let values: KeyValues = (published.iter())
            .map(|(key, written)| (key.clone(), written.value.clone()))
            .collect();
        assert_eq!(values, wanted);
        assert_eq!(published["c"].revision, 1, "unchanged: not written again");
        assert_eq!(published["b"].revision, 2);
        assert_eq!(published["f"].revision, 3);
        assert!(plan(&published, &none(), &wanted, limits).is_empty());
    }

    #[test]
    fn a_thousand_new_keys_take_as_few_transactions_as_the_op_limit_allows() {
        let wanted: KeyValues = (0..1000)
            .map(|i| (format!("k{i:04}"), Bytes::from_static(b"v")))
            .collect();
        let batches = plan(&Published::new(), &none(), &wanted, TxnLimits::default());
        assert_eq!(batches.len(), 1000_usize.div_ceil(128));
        assert!(batches[..7].iter().all(|batch| batch.len() == 128));
        assert_eq!(batches[7].len(), 1000 - 7 * 128);
        let all: KeyValues = batches
            .iter()
            .flatten()
            .map(|w| match w {
                Write::Put { key, value } => (key.clone(), value.clone()),
                Write::Delete { .. } => panic!("nothing to delete"),
            })
            .collect();
        assert_eq!(all, wanted);
    }

    #[test]
    fn batches_stay_under_the_byte_limit_and_an_oversized_write_goes_alone() {
        let limits = TxnLimits {
            max_ops: 128,
            max_bytes: 10,
        };
        // Each put costs key (2) + value: 5, 5, 21, 5, 5; the first two fill a batch exactly.
        let wanted = kv(&[
            ("aa", "aaa"),
            ("bb", "bbb"),
            ("cc", &"c".repeat(19)),
            ("dd", "ddd"),
            ("ee", "eee"),
        ]);
        let batches = plan(&Published::new(), &none(), &wanted, limits);
        let keys: Vec<Vec<&str>> = batches
            .iter()
            .map(|batch| batch.iter().map(key_of).collect())
            .collect();
        assert_eq!(keys, vec![vec!["aa", "bb"], vec!["cc"], vec!["dd", "ee"]]);
    }

    #[test]
    fn a_zero_op_limit_still_makes_progress() {
        let limits = TxnLimits {
            max_ops: 0,
            max_bytes: usize::MAX,
        };
        let batches = plan(
            &Published::new(),
            &none(),
            &kv(&[("a", "1"), ("b", "2")]),
            limits,
        );
        assert_eq!(batches, vec![vec![put("a", "1")], vec![put("b", "2")]]);
    }

    #[test]
    fn a_key_is_ours_only_at_the_revision_we_wrote_it() {
        let mut published = written(&[("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")]);
        // a: as written; b: written again by someone (same value); c: deleted; d: as written;
        // e: never ours.
        let held: BTreeMap<String, i64> = [("a", 1), ("b", 9), ("d", 1), ("e", 1)]
            .into_iter()
            .map(|(key, revision)| (key.to_owned(), revision))
            .collect();
        let foreign = verify(&mut published, &held);
        assert_eq!(published, written(&[("a", "1"), ("d", "4")]));
        assert_eq!(foreign, ["b", "e"].into_iter().map(str::to_owned).collect());
    }

    #[test]
    fn a_foreign_key_is_put_if_wanted_whatever_its_value_and_deleted_otherwise() {
        let published = written(&[("a", "1"), ("d", "4")]);
        let foreign: BTreeSet<String> = ["b", "e"].into_iter().map(str::to_owned).collect();
        // b is wanted with the very value a stranger wrote: put again all the same.
        let wanted = kv(&[("a", "1"), ("b", "2")]);
        assert_eq!(
            plan(&published, &foreign, &wanted, TxnLimits::default()),
            vec![vec![put("b", "2"), delete("d"), delete("e")]]
        );
        // A key both ours and foreign (not as `verify` leaves them) is deleted once.
        let both: BTreeSet<String> = ["d"].into_iter().map(str::to_owned).collect();
        assert_eq!(
            plan(&published, &both, &kv(&[("a", "1")]), TxnLimits::default()),
            vec![vec![delete("d")]]
        );
    }
}
