//! Whether etcd still holds a revision, for a fleet paging cursor: a walk begun at a revision
//! etcd has compacted away is told to start again (410).
//!
//! Invariant: a revision is said held only on etcd's word (a read at that revision answered);
//! a compaction is said only on etcd's word too (its "required revision has been compacted");
//! anything else is an error, so a page is neither refused nor served on a guess.

use std::fmt::Debug;

use futures_util::future::BoxFuture;

/// Asks etcd whether it holds a revision. Set on the view by the watcher (feature `fleet`)
/// each time it connects; a view fed without etcd has none, and holds every revision.
pub trait History: Send + Sync + Debug {
    /// Whether etcd still holds `revision` (`false`: compacted), or why it could not be told.
    fn holds(&self, revision: i64) -> BoxFuture<'_, Result<bool, String>>;
}

#[cfg(feature = "fleet")]
pub use on_etcd::EtcdHistory;

#[cfg(feature = "fleet")]
mod on_etcd {
    use etcd_client::{Client, GetOptions};
    use futures_util::future::BoxFuture;

    use super::History;
    use crate::fleet::keys::FleetKeys;

    /// [`History`] asked of etcd: one keys-only read of a single key at the revision (the
    /// fleet prefix itself, which holds no value), so it costs one round trip whatever the
    /// fleet's size.
    #[derive(Clone)]
    pub struct EtcdHistory {
        client: Client,
        keys: FleetKeys,
    }

    impl std::fmt::Debug for EtcdHistory {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("EtcdHistory")
                .field("keys", &self.keys)
                .finish_non_exhaustive()
        }
    }

    impl EtcdHistory {
        /// The history of the etcd `client` talks to, asked about the fleet under `keys`.
        pub fn new(client: Client, keys: FleetKeys) -> Self {
            Self { client, keys }
        }
    }

    impl History for EtcdHistory {
        fn holds(&self, revision: i64) -> BoxFuture<'_, Result<bool, String>> {
            Box::pin(async move {
                let options = GetOptions::new().with_revision(revision).with_keys_only();
                let mut kv = self.client.kv_client();
                match kv.get(self.keys.all(), Some(options)).await {
                    Ok(_) => Ok(true),
                    Err(e) => match told(&e.to_string()) {
                        Some(held) => Ok(held),
                        None => Err(format!(
                            "etcd did not say whether it holds revision {revision}: {e}"
                        )),
                    },
                }
            })
        }
    }

    /// What etcd's refusal of a read at a revision says of it: compacted (`false`), or not
    /// yet written (`true`: a cursor from a reader further ahead; it is not compacted).
    fn told(error: &str) -> Option<bool> {
        if error.contains("required revision has been compacted") {
            Some(false)
        } else if error.contains("required revision is a future revision") {
            Some(true)
        } else {
            None
        }
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn only_etcd_own_words_say_compacted() {
            let compacted = "grpc status: etcdserver: mvcc: required revision has been compacted";
            assert_eq!(super::told(compacted), Some(false));
            assert_eq!(
                super::told("mvcc: required revision is a future revision"),
                Some(true)
            );
            assert_eq!(super::told("deadline exceeded"), None);
        }
    }
}
