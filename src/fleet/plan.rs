//! What one publishing pass writes: the difference between what this registry last published
//! and what it wants published now, cut into transactions etcd accepts.
//!
//! Invariants: a key whose value is unchanged costs no operation; every other difference is
//! exactly one put or one delete; every transaction holds at least one and at most
//! [`TxnLimits::max_ops`] operations and, unless one operation alone is larger, at most
//! [`TxnLimits::max_bytes`] bytes of keys and values. Operations come in key order.

use std::collections::BTreeMap;

use bytes::Bytes;

/// Keys and their values, as etcd holds them under this registry's lease. A value is shared,
/// not copied, between what is wanted, what is written and what is published.
pub type KeyValues = BTreeMap<String, Bytes>;

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

/// The writes that turn `published` into `wanted`, batched into transactions within `limits`.
///
/// Empty when nothing changed. A `max_ops` of 0 is taken as 1.
pub fn plan(published: &KeyValues, wanted: &KeyValues, limits: TxnLimits) -> Vec<Vec<Write>> {
    let deletes = published
        .keys()
        .filter(|key| !wanted.contains_key(*key))
        .map(|key| Write::Delete { key: key.clone() });
    let puts = wanted
        .iter()
        .filter(|(key, value)| published.get(*key) != Some(value))
        .map(|(key, value)| Write::Put {
            key: key.clone(),
            value: value.clone(),
        });
    let mut writes: Vec<Write> = deletes.chain(puts).collect();
    writes.sort_by(|a, b| key_of(a).cmp(key_of(b)));
    batches(writes, limits)
}

fn key_of(write: &Write) -> &str {
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

/// `published` after `batch` was applied.
pub fn apply(published: &mut KeyValues, batch: &[Write]) {
    for write in batch {
        match write {
            Write::Put { key, value } => {
                published.insert(key.clone(), value.clone());
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
        let both = kv(&[("a", "1"), ("b", "2")]);
        assert!(plan(&both, &both, TxnLimits::default()).is_empty());
        assert!(plan(&KeyValues::new(), &KeyValues::new(), TxnLimits::default()).is_empty());
    }

    #[test]
    fn new_changed_and_gone_keys_each_cost_one_write_in_key_order() {
        let published = kv(&[("a", "1"), ("b", "2"), ("c", "3")]);
        let wanted = kv(&[("a", "1"), ("b", "two"), ("d", "4")]);
        assert_eq!(
            plan(&published, &wanted, TxnLimits::default()),
            vec![vec![put("b", "two"), delete("c"), put("d", "4")]]
        );
    }

    #[test]
    fn applying_the_plan_gives_what_was_wanted() {
        let mut published = kv(&[("a", "1"), ("b", "2"), ("c", "3")]);
        let wanted = kv(&[("b", "x"), ("c", "3"), ("e", "5"), ("f", "6")]);
        let limits = TxnLimits {
            max_ops: 2,
            max_bytes: usize::MAX,
        };
        for batch in plan(&published, &wanted, limits) {
            apply(&mut published, &batch);
        }
        assert_eq!(published, wanted);
        assert!(plan(&published, &wanted, limits).is_empty());
    }

    #[test]
    fn a_thousand_new_keys_take_as_few_transactions_as_the_op_limit_allows() {
        let wanted: KeyValues = (0..1000)
            .map(|i| (format!("k{i:04}"), Bytes::from_static(b"v")))
            .collect();
        let batches = plan(&KeyValues::new(), &wanted, TxnLimits::default());
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
        let batches = plan(&KeyValues::new(), &wanted, limits);
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
        let batches = plan(&KeyValues::new(), &kv(&[("a", "1"), ("b", "2")]), limits);
        assert_eq!(batches, vec![vec![put("a", "1")], vec![put("b", "2")]]);
    }
}
