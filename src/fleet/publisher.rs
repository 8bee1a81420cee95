//! This registry's keys in etcd: one lease, the host key and one key per session hanging off
//! it, kept equal to the picture each step hands over.
//!
//! Invariants:
//! - One lease at a time, and every key written hangs off it: when the lease goes (revoked,
//!   or lapsed because steps stopped), every key of this registry goes with it, at once.
//! - The host key is refused only while another live lease holds it (its lease asked of etcd),
//!   so two registries never share a host id; a holder's lease is waited on for at most one TTL
//!   (plus etcd's expiry tick) before the claim is refused naming the host id. A key no live
//!   lease holds (written by hand, or its lease gone) is taken over, in a transaction guarded
//!   by the revision it was seen at, so a key a live registry took meanwhile stays refused.
//! - This host's keys are its publisher's alone: each step takes what etcd holds under them
//!   and keeps as its own only the keys at the revisions of its own transactions
//!   ([`plan::verify`]); anything else there (deleted, overwritten, a key without its lease,
//!   a key it never wrote) is put again or deleted in that same step. What etcd holds is a
//!   read at the step, or, at rest, the map a watch of these keys keeps ([`KeysWatch`]),
//!   used only when it holds every write of this publisher's own transactions and etcd
//!   answered the step's progress request on its stream ([`HeldKeys::trusted`]); so a change
//!   by anyone else is undone at the first step its event reached first (on etcd 3.4 before
//!   3.4.24, possibly the step after). Otherwise the step reads, as each step did before,
//!   and starts a new watch from that read. If that read fails, the keys are checked at the
//!   next step that reads: a read failing never costs a renewal.
//! - A step writes only its difference with what is wanted (nothing at all when nothing
//!   changed and nobody else wrote); errors are returned, never panicked on, and the next
//!   step starts again from what etcd holds.

use bytes::Bytes;
use std::time::{Duration, Instant, SystemTime};

use std::collections::{BTreeMap, BTreeSet};

use etcd_client::{
    Client, Compare, CompareOp, GetOptions, LeaseKeepAliveStream, LeaseKeeper, PutOptions, Txn,
    TxnOp, TxnOpResponse,
};

use super::etcd::request_deadline;
#[cfg(doc)]
use super::held_keys::HeldKeys;
use super::keys::FleetKeys;
use super::keys_watch::KeysWatch;
use super::plan::{self, KeyValues, Published, TxnLimits, Write, Written};
use super::{HostEntry, HostId};
use crate::host_load::HostLoad;

/// How late etcd may be in revoking a lapsed lease: it looks for expired leases on a tick
/// (500 ms in etcd 3.4), so a holder killed just before a claim may outlive its TTL by that.
const EXPIRY_GRACE: Duration = Duration::from_secs(1);

/// Who publishes, where, and for how long a silence is tolerated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishOptions {
    /// The key layout (`--fleet-prefix`).
    pub keys: FleetKeys,
    /// This host (`--host-id`).
    pub host_id: HostId,
    /// The lease's time to live (`--fleet-ttl`): how long keys outlive the last step. etcd
    /// counts whole seconds; a fraction is rounded up.
    pub ttl: Duration,
    /// The registry's version, for the host entry.
    pub version: String,
    /// Where this registry serves its API (`--advertise-url`), for the host entry.
    pub advertise_url: Option<String>,
}

/// Why publishing failed.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// Another registry's live lease holds the host key: a second registry with this id.
    #[error(
        "host id {host_id} is taken: another registry's live lease holds it (waited {} for it \
         to lapse); is another registry running with --host-id {host_id}?",
        humantime::format_duration(*waited)
    )]
    HostIdTaken {
        /// The id claimed.
        host_id: HostId,
        /// How long the claim waited for the holder's lease to lapse.
        waited: Duration,
    },
    /// etcd no longer knows the lease (it lapsed or was revoked); the next step replaces it.
    #[error("the fleet lease {0:x} is gone (lapsed or revoked)")]
    LeaseLost(i64),
    /// etcd did not answer a keepalive in time.
    #[error("etcd did not answer the lease keepalive within {0:?}")]
    Silent(Duration),
    /// What etcd or the connection to it said.
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    /// The publishing task ended abnormally (it panicked or was cancelled).
    #[error("the fleet publishing task failed: {0}")]
    Task(String),
    /// A value could not be encoded.
    #[error("encoding a fleet value: {0}")]
    Encode(#[from] serde_json::Error),
}

impl PublishError {
    /// Whether the error says the lease is gone, so the keys under it are too.
    pub(crate) fn is_lease_lost(&self) -> bool {
        match self {
            Self::LeaseLost(_) => true,
            // A put under a lease etcd no longer knows, or a keepalive stream opened for one.
            Self::Etcd(etcd_client::Error::GRpcStatus(status)) => {
                says_lease_not_found(status.message())
            }
            Self::Etcd(etcd_client::Error::LeaseKeepAliveError(message)) => {
                says_lease_not_found(message)
            }
            _ => false,
        }
    }
}

/// Whether etcd's message (`etcdserver: requested lease not found`, or the client's `lease not
/// found` for a keepalive answered with TTL 0) says the lease is unknown.
fn says_lease_not_found(message: &str) -> bool {
    message.contains("lease not found")
}

/// What one step did, for logs and for the figures (a quiet pass: 0 puts, 1 keepalive).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepReport {
    /// Transactions sent.
    pub txns: usize,
    /// Keys put.
    pub puts: usize,
    /// Keys deleted.
    pub deletes: usize,
    /// Keepalives sent.
    pub keepalives: usize,
    /// Whether the lease was found gone and replaced (everything put again).
    pub lease_replaced: bool,
}

/// The current lease and its open keepalive stream (reopened after any failure).
#[derive(Debug)]
struct Lease {
    id: i64,
    keeper: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    /// When the last grant or keepalive etcd acknowledged was sent: etcd counts the TTL from
    /// its own reading, which is later, so the lease holds at least a TTL from here.
    renewed_at: Instant,
}

/// This registry's publisher: claims its host id, then keeps its keys equal to each picture.
pub struct Publisher {
    client: Client,
    keys: FleetKeys,
    host_id: HostId,
    ttl: Duration,
    /// The host entry as published, and its encoding.
    host: HostEntry,
    host_value: Bytes,
    limits: TxnLimits,
    /// `None` once the lease is known gone, until a step replaces it.
    lease: Option<Lease>,
    /// What this registry wrote and etcd acknowledged, checked against etcd at each step.
    published: Published,
    /// The watch of this host's keys, from the last read; `None` until a step reads, and after
    /// any failure of it.
    watch: Option<KeysWatch>,
}

/// What a claim does with the host key, as etcd holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    /// No key: create it.
    Create,
    /// A key no live lease of another registry holds: take it over, if it is still at this
    /// mod revision.
    TakeOver(i64),
    /// Another registry's live lease holds it.
    Refuse,
}

/// What to do with the host key held at `mod_revision` under `lease` (`None`: no key), when
/// our lease is `own` and `alive` says whether the key's lease is live.
fn claim_of(held: Option<(i64, i64)>, own: i64, alive: impl FnOnce(i64) -> bool) -> Claim {
    match held {
        None => Claim::Create,
        Some((lease, _)) if lease != 0 && lease != own && alive(lease) => Claim::Refuse,
        Some((_, mod_revision)) => Claim::TakeOver(mod_revision),
    }
}

impl Publisher {
    /// Take the host key under a new lease, waiting up to one TTL for another holder's lease
    /// to lapse (a restart after `kill -9`), then refusing with [`PublishError::HostIdTaken`].
    pub async fn claim(client: Client, options: &PublishOptions) -> Result<Self, PublishError> {
        let host = HostEntry {
            host_id: options.host_id.to_string(),
            version: options.version.clone(),
            started_at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            registry_url: options.advertise_url.clone(),
            load: HostLoad::read(),
        };
        let mut publisher = Self {
            client,
            keys: options.keys.clone(),
            host_id: options.host_id.clone(),
            ttl: options.ttl,
            host_value: serde_json::to_vec(&host)?.into(),
            host,
            limits: TxnLimits::default(),
            lease: None,
            published: Published::new(),
            watch: None,
        };
        let start = Instant::now();
        let waited = options.ttl + EXPIRY_GRACE;
        let id = publisher.grant().await?;
        loop {
            match publisher.take_host_key(id).await {
                Ok(true) => return Ok(publisher),
                Ok(false) if start.elapsed() < waited => {}
                Ok(false) => {
                    publisher.revoke_quietly(id).await;
                    return Err(PublishError::HostIdTaken {
                        host_id: publisher.host_id,
                        waited,
                    });
                }
                Err(error) => {
                    publisher.revoke_quietly(id).await;
                    return Err(error);
                }
            }
            // Paces the retries; what ends the wait is etcd deleting the holder's key.
            tokio::time::sleep(claim_retry(options.ttl)).await;
            // Our own lease must outlive the wait, which is longer than its TTL.
            if let Err(error) = publisher.renew().await {
                publisher.revoke_quietly(id).await;
                return Err(error);
            }
        }
    }

    /// Read the host's load afresh into the host entry, which the next step writes.
    pub fn refresh_load(&mut self) -> Result<(), PublishError> {
        self.host.load = HostLoad::read();
        self.host_value = serde_json::to_vec(&self.host)?.into();
        Ok(())
    }

    /// Every key this registry wrote and etcd holds as it wrote it, with its value: after a
    /// step that succeeded, exactly what it wanted.
    pub(crate) fn published(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        (self.published.iter()).map(|(key, written)| (key.as_bytes(), &written.value[..]))
    }

    /// The lease this publisher holds, while it holds one.
    pub fn lease_id(&self) -> Option<i64> {
        self.lease.as_ref().map(|lease| lease.id)
    }

    /// When the lease was last granted or renewed, as sent: it holds for at least a TTL from
    /// then. `None` while no lease is held.
    pub(crate) fn renewed_at(&self) -> Option<Instant> {
        self.lease.as_ref().map(|lease| lease.renewed_at)
    }

    /// Make etcd hold `sessions` (session id → its [`SessionEntry`](super::SessionEntry) as JSON) and the host key,
    /// then renew the lease.
    ///
    /// Writes only what changed, in as few transactions as etcd's limits allow; a lost lease
    /// is replaced (claimed again, without waiting) and everything put again. The values are
    /// taken encoded so that a pass encodes only the entries that changed.
    pub async fn step<'a>(
        &mut self,
        sessions: impl IntoIterator<Item = (&'a String, &'a Bytes)>,
    ) -> Result<StepReport, PublishError> {
        let wanted = self.wanted(sessions);
        let mut report = StepReport::default();
        match self.publish_and_renew(&wanted, &mut report).await {
            Err(error) if error.is_lease_lost() => {
                self.lease = None;
                self.replace_lease(&mut report).await?;
                // A fresh lease needs no keepalive yet.
                self.publish(&wanted, &mut report).await?;
                Ok(report)
            }
            outcome => outcome.map(|()| report),
        }
    }

    /// Revoke the lease: every key of this registry leaves etcd at once.
    pub async fn leave(mut self) -> Result<(), PublishError> {
        let Some(lease) = self.lease.take() else {
            return Ok(());
        };
        match self.client.lease_revoke(lease.id).await {
            Ok(_) => Ok(()),
            Err(error) => {
                let error = PublishError::from(error);
                if error.is_lease_lost() {
                    Ok(())
                } else {
                    Err(error)
                }
            }
        }
    }

    /// Every key this registry wants in etcd, with its value.
    fn wanted<'a>(&self, sessions: impl IntoIterator<Item = (&'a String, &'a Bytes)>) -> KeyValues {
        let mut wanted = KeyValues::new();
        wanted.insert(self.keys.host(&self.host_id), self.host_value.clone());
        for (session_id, value) in sessions {
            let key = self.keys.session(&self.host_id, session_id);
            wanted.insert(key, value.clone());
        }
        wanted
    }

    async fn publish_and_renew(
        &mut self,
        wanted: &KeyValues,
        report: &mut StepReport,
    ) -> Result<(), PublishError> {
        if self.lease.is_none() {
            self.replace_lease(report).await?;
        }
        self.publish(wanted, report).await?;
        report.keepalives += 1;
        self.renew().await
    }

    /// Apply the plan from what etcd holds of ours to `wanted`, batch by batch.
    async fn publish(
        &mut self,
        wanted: &KeyValues,
        report: &mut StepReport,
    ) -> Result<(), PublishError> {
        let id = self.lease_id().ok_or(PublishError::LeaseLost(0))?;
        let foreign = self.foreign().await?;
        for batch in plan::plan(&self.published, &foreign, wanted, self.limits) {
            let operations: Vec<TxnOp> = batch
                .iter()
                .map(|write| match write {
                    Write::Put { key, value } => TxnOp::put(
                        key.as_str(),
                        &value[..],
                        Some(PutOptions::new().with_lease(id)),
                    ),
                    Write::Delete { key } => TxnOp::delete(key.as_str(), None),
                })
                .collect();
            let done = self.client.txn(Txn::new().and_then(operations)).await?;
            report.txns += 1;
            for write in &batch {
                match write {
                    Write::Put { .. } => report.puts += 1,
                    Write::Delete { .. } => report.deletes += 1,
                }
            }
            let revision = revision_of(done.header());
            if let Some(watch) = self.watch.as_mut() {
                watch.wrote(batch.iter().map(plan::key_of), revision);
            }
            plan::apply(&mut self.published, &batch, revision);
        }
        Ok(())
    }

    /// The keys etcd holds under this host that this registry did not write as they are (see
    /// [`plan::verify`]), `published` cut down to what etcd still holds as written: from the
    /// watched map if it may be trusted this step, else from a read, after which a new watch
    /// starts.
    async fn foreign(&mut self) -> Result<BTreeSet<String>, PublishError> {
        let deadline = catch_up_deadline(self.ttl);
        if let Some(watch) = self.watch.as_mut() {
            match watch.catch_up(deadline).await {
                Ok(Some(held)) => return Ok(plan::verify(&mut self.published, held)),
                Ok(None) => tracing::debug!("fleet: the watch of this host's keys is behind"),
                Err(why) => tracing::debug!(%why, "fleet: the watch of this host's keys ended"),
            }
        }
        self.watch = None;
        let (held, revision) = match self.held().await {
            Ok(read) => read,
            // Checked at the next step: a read sent to a member that just died (refused at
            // once) must not cost a renewal, which goes over its own stream. A read that timed
            // out fails the step: etcd is silent, and a write would wait as long again.
            Err(error) if is_unreachable(&error) => {
                tracing::debug!(%error, "fleet: this host's keys could not be read this step");
                return Ok(BTreeSet::new());
            }
            Err(error) => return Err(error),
        };
        let foreign = plan::verify(&mut self.published, &held);
        let (host_key, sessions) = (self.keys.host(&self.host_id), self.sessions_prefix());
        let read = (held, revision);
        let client = &mut self.client;
        match KeysWatch::start(client, &host_key, &sessions, read, deadline).await {
            Ok(watch) => self.watch = Some(watch),
            Err(why) => tracing::debug!(%why, "fleet: this host's keys are read again next step"),
        }
        Ok(foreign)
    }

    fn sessions_prefix(&self) -> String {
        self.keys.sessions_of(&self.host_id)
    }

    /// Every key etcd holds under this host (its host key and its sessions' prefix), with its
    /// mod revision, and the revision they were read at. A key that is not UTF-8 is not one a
    /// reader takes for an entry, and is left alone.
    async fn held(&mut self) -> Result<(BTreeMap<String, i64>, i64), PublishError> {
        let keys_only = || GetOptions::new().with_keys_only();
        let read = Txn::new().and_then([
            TxnOp::get(self.keys.host(&self.host_id), Some(keys_only())),
            TxnOp::get(self.sessions_prefix(), Some(keys_only().with_prefix())),
        ]);
        let answer = self.client.txn(read).await?;
        let revision = revision_of(answer.header());
        let mut held = BTreeMap::new();
        for response in answer.op_responses() {
            let TxnOpResponse::Get(got) = response else {
                continue;
            };
            for kv in got.kvs() {
                if let Ok(key) = kv.key_str() {
                    held.insert(key.to_owned(), kv.mod_revision());
                }
            }
        }
        Ok((held, revision))
    }

    /// A new lease holding the host key, and nothing else published yet. Refused, without
    /// waiting, if another lease holds the host key.
    async fn replace_lease(&mut self, report: &mut StepReport) -> Result<(), PublishError> {
        self.published.clear();
        // A new lease starts from a read, as the first one did.
        self.watch = None;
        let id = self.grant().await?;
        match self.take_host_key(id).await {
            Ok(true) => {
                report.lease_replaced = true;
                Ok(())
            }
            Ok(false) => {
                self.revoke_quietly(id).await;
                Err(PublishError::HostIdTaken {
                    host_id: self.host_id.clone(),
                    waited: Duration::ZERO,
                })
            }
            Err(error) => {
                self.revoke_quietly(id).await;
                Err(error)
            }
        }
    }

    /// Grant a lease of the TTL and make it the current one.
    async fn grant(&mut self) -> Result<i64, PublishError> {
        let seconds = i64::try_from(self.ttl.as_secs()).unwrap_or(i64::MAX);
        let seconds = if self.ttl.subsec_nanos() > 0 {
            seconds.saturating_add(1)
        } else {
            seconds
        };
        let sent = Instant::now();
        let granted = self.client.lease_grant(seconds.max(1), None).await?;
        self.lease = Some(Lease {
            id: granted.id(),
            keeper: None,
            renewed_at: sent,
        });
        Ok(granted.id())
    }

    /// Put the host key under lease `id` unless another live lease holds it; whether it was
    /// put. A key seen with no live lease is taken only if it is still at the revision seen.
    async fn take_host_key(&mut self, id: i64) -> Result<bool, PublishError> {
        let key = self.keys.host(&self.host_id);
        let seen = self.client.get(key.as_str(), None).await?;
        let held = (seen.kvs().first()).map(|kv| (kv.lease(), kv.mod_revision()));
        let holder_alive = match held {
            Some((lease, _)) if lease != 0 && lease != id => self.lease_alive(lease).await?,
            _ => false,
        };
        let guard = match claim_of(held, id, |_| holder_alive) {
            Claim::Refuse => return Ok(false),
            Claim::Create => Compare::create_revision(key.as_str(), CompareOp::Equal, 0),
            Claim::TakeOver(seen) => Compare::mod_revision(key.as_str(), CompareOp::Equal, seen),
        };
        let txn = Txn::new().when([guard]).and_then([TxnOp::put(
            key.as_str(),
            &self.host_value[..],
            Some(PutOptions::new().with_lease(id)),
        )]);
        let answer = self.client.txn(txn).await?;
        if answer.succeeded() {
            let revision = revision_of(answer.header());
            let value = self.host_value.clone();
            self.published.insert(key, Written { value, revision });
        }
        Ok(answer.succeeded())
    }

    /// Whether etcd still knows lease `id`. Its TTL left is in whole seconds, rounded down, so
    /// a live lease in its last second answers 0; only one etcd no longer knows answers -1.
    async fn lease_alive(&mut self, id: i64) -> Result<bool, PublishError> {
        match self.client.lease_time_to_live(id, None).await {
            Ok(answer) => Ok(answer.ttl() >= 0),
            Err(error) => {
                let error = PublishError::from(error);
                if error.is_lease_lost() {
                    Ok(false)
                } else {
                    Err(error)
                }
            }
        }
    }

    /// Renew the lease once, over its keepalive stream (opened again after any failure).
    async fn renew(&mut self) -> Result<(), PublishError> {
        let deadline = request_deadline(self.ttl);
        let lease = self.lease.as_mut().ok_or(PublishError::LeaseLost(0))?;
        let id = lease.id;
        let sent = Instant::now();
        let Some((mut keeper, mut responses)) = lease.keeper.take() else {
            // Opening the stream sends the first keepalive and reads its answer.
            let opened = tokio::time::timeout(deadline, self.client.lease_keep_alive(id))
                .await
                .map_err(|_| PublishError::Silent(deadline))??;
            lease.keeper = Some(opened);
            lease.renewed_at = sent;
            return Ok(());
        };
        keeper.keep_alive().await?;
        match tokio::time::timeout(deadline, responses.message()).await {
            Err(_) => Err(PublishError::Silent(deadline)),
            Ok(Err(error)) => Err(error.into()),
            Ok(Ok(None)) => Err(etcd_client::Error::LeaseKeepAliveError(
                "the keepalive stream ended".to_owned(),
            )
            .into()),
            Ok(Ok(Some(answer))) if answer.ttl() <= 0 => Err(PublishError::LeaseLost(id)),
            Ok(Ok(Some(_))) => {
                lease.keeper = Some((keeper, responses));
                lease.renewed_at = sent;
                Ok(())
            }
        }
    }

    /// Revoke lease `id` on a path that is already failing: its own error would hide the
    /// cause, and an unrevoked lease lapses within one TTL anyway.
    async fn revoke_quietly(&mut self, id: i64) {
        if self.lease_id() == Some(id) {
            self.lease = None;
        }
        if let Err(error) = self.client.lease_revoke(id).await {
            tracing::debug!(lease = id, %error, "revoking an unused fleet lease failed");
        }
    }
}

/// Whether `error` says a member could not be reached (refused at once), rather than that one
/// was reached and did not answer in time.
fn is_unreachable(error: &PublishError) -> bool {
    // gRPC's UNAVAILABLE, fixed by the gRPC specification (a timeout is CANCELLED, 1).
    const UNAVAILABLE: i32 = 14;
    matches!(error, PublishError::Etcd(etcd_client::Error::GRpcStatus(status))
        if i32::from(status.code()) == UNAVAILABLE)
}

/// The store revision a response was answered at (0 if etcd sent no header, which makes the
/// next step take the keys for foreign and put them again: harmless).
fn revision_of(header: Option<&etcd_client::ResponseHeader>) -> i64 {
    header.map_or(0, etcd_client::ResponseHeader::revision)
}

/// How long a step waits for the watch of its keys to answer before reading them instead: a
/// share of a request's deadline, so that a silent etcd fails the step (the read after it
/// times out) well within the TTL.
fn catch_up_deadline(ttl: Duration) -> Duration {
    request_deadline(ttl) / 2
}

/// How often a claim asks again while another lease holds the host key.
fn claim_retry(ttl: Duration) -> Duration {
    (ttl / 15).clamp(Duration::from_millis(100), Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_leases_are_told_apart_from_other_failures() {
        assert!(says_lease_not_found(
            "etcdserver: requested lease not found"
        ));
        assert!(!says_lease_not_found("etcdserver: request timed out"));
        let keepalive = etcd_client::Error::LeaseKeepAliveError("lease not found".to_owned());
        assert!(PublishError::from(keepalive).is_lease_lost());
        assert!(PublishError::LeaseLost(7).is_lease_lost());
        let ended = etcd_client::Error::LeaseKeepAliveError("the stream ended".to_owned());
        assert!(!PublishError::from(ended).is_lease_lost());
        assert!(!PublishError::Silent(Duration::from_secs(1)).is_lease_lost());
    }

    #[test]
    fn a_claim_refuses_only_a_key_another_live_lease_holds() {
        let own = 7;
        assert_eq!(claim_of(None, own, |_| true), Claim::Create);
        // Another registry's live lease.
        assert_eq!(claim_of(Some((5, 40)), own, |l| l == 5), Claim::Refuse);
        // A lease gone, no lease at all, or our own: taken over at the revision seen.
        assert_eq!(claim_of(Some((5, 40)), own, |_| false), Claim::TakeOver(40));
        assert_eq!(claim_of(Some((0, 41)), own, |_| true), Claim::TakeOver(41));
        assert_eq!(claim_of(Some((7, 42)), own, |_| true), Claim::TakeOver(42));
    }

    #[test]
    fn claims_are_retried_often_enough_to_notice_a_lapse_and_no_busier() {
        assert_eq!(
            claim_retry(Duration::from_secs(3)),
            Duration::from_millis(200)
        );
        assert_eq!(
            claim_retry(Duration::from_millis(500)),
            Duration::from_millis(100)
        );
        assert_eq!(claim_retry(Duration::from_secs(60)), Duration::from_secs(1));
    }
}
