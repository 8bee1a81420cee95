//! Publishing to the fleet, against a real etcd (`/usr/bin/etcd`, started per test on free
//! loopback ports), at library level.
//!
//! What a fleet relies on from one registry's publisher:
//! - the host id is one registry's: a second claim waits one TTL for the holder's lease, then
//!   is refused naming the id (by the publisher and by `publishing::start`); a holder that
//!   stopped renewing (as after `kill -9`) lapses and the claim succeeds;
//! - a host key no live lease holds is taken over at once; this host's keys are its publisher's:
//!   an entry deleted, overwritten (even with its own bytes, without its lease) or put by
//!   anyone else under its id is put back or deleted at the next step;
//! - every worker of the caller's runtime blocked for three TTLs: the lease holds, since the
//!   publishing and its client run on a thread of their own;
//! - writes happen only on change: a quiet pass moves etcd's revision not at all and renews
//!   the lease once; 1,000 new sessions take ceil(1000 / 128) transactions;
//! - at rest a step reads nothing (a watch keeps what etcd holds under this host): etcd serves
//!   it no `Range` and no `Txn`, and a key deleted meanwhile is still put back at the next
//!   step; a watch etcd ended (a restart) is not trusted, and the keys are read again;
//! - a lease lost behind the publisher's back (revoked, or lapsed) is replaced at the next
//!   step and everything is put again; leaving revokes it and every key goes in one revision;
//! - etcd killed or frozen: a step fails within the TTL (never hangs) and the next one after
//!   etcd is back catches up; a 3-member cluster whose leader is killed keeps publishing;
//! - real clusters: TLS with a client certificate (refused without one), and etcd's
//!   authentication through the credentials file (a wrong password refused);
//! - the driver over a real running directory (capsule processes, a Monitor over a Registry)
//!   publishes at start, renews at every pass, follows sessions as they come and go with nobody
//!   listening to `/events` (the killed capsule's record is pruned), and no key etcd holds
//!   carries a secret (a record's `door_token`); a loop that cannot pass (its directory taken
//!   away) lets the lease lapse, and the host rejoins once it can.
//!
//! Every test needs etcd, so each is ignored by plain `cargo test`; waiting is by polling etcd
//! (or the monitor's pass count) under a deadline, never by sleeping.

#![cfg(feature = "fleet")]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use common::etcd::{Etcd, EtcdCluster, TestCerts};
use common::{
    CapsuleProcess, DEADLINE, DoorMode, DoorServer, RecordJson, Rejection, session_id, temp_dir,
    wait_until, write_raw,
};
use etcd_client::{Client, GetOptions};
use murmur_registry::registry::{Reading, Registry};
use murmur_registry::running::{DoorProbe, Skill};
use murmur_registry::test_support::fleet::etcd::EtcdSettings;
use murmur_registry::test_support::fleet::publisher::{
    PublishError, PublishOptions, Publisher, StepReport,
};
use murmur_registry::test_support::fleet::{HostId, SessionEntry, keys::FleetKeys, publishing};
use murmur_registry::test_support::monitor::Monitor;
use murmur_registry::wire::SessionView;
use serde_json::{Map, Value, json};

/// A short lease, as the fleet tests use: etcd's own floor is about 2 s.
const TTL: Duration = Duration::from_secs(2);
/// Enough for any state these tests wait on, on a loaded machine.
const WAIT: Duration = Duration::from_secs(20);
const PREFIX: &str = "/test/fleet";

fn options(host: &str, ttl: Duration) -> PublishOptions {
    PublishOptions {
        keys: FleetKeys::new(PREFIX),
        host_id: host.parse::<HostId>().expect("a valid host id"),
        ttl,
        version: "0.1.0".to_owned(),
        advertise_url: None,
    }
}

async fn claim(etcd: &Etcd, host: &str, ttl: Duration) -> Result<Publisher, PublishError> {
    Publisher::claim(etcd.client().await, &options(host, ttl)).await
}

/// `n` sessions as a step hands them over: each entry encoded, keyed by session id.
fn sessions(host: &str, n: usize) -> BTreeMap<String, Bytes> {
    encoded(&entries(host, n))
}

fn encoded(entries: &BTreeMap<String, SessionEntry>) -> BTreeMap<String, Bytes> {
    entries
        .iter()
        .map(|(id, entry)| {
            let value = serde_json::to_vec(entry).expect("an entry encodes");
            (id.clone(), Bytes::from(value))
        })
        .collect()
}

/// `n` sessions' entries, keyed by session id.
fn entries(host: &str, n: usize) -> BTreeMap<String, SessionEntry> {
    (0..n)
        .map(|i| {
            let session_id = format!("ses_{i:032x}");
            let Value::Object(session) = json!({"session_id": session_id, "pid": i}) else {
                unreachable!("an object literal")
            };
            let entry = SessionEntry {
                host_id: host.to_owned(),
                changed_at: "2026-12-01T00:00:00Z".to_owned(),
                door_scope: None,
                skills: Vec::new(),
                skills_omitted: 0,
                session,
            };
            (session_id, entry)
        })
        .collect()
}

/// Every key under the test prefix, with its lease.
async fn keys_in(client: &mut Client) -> BTreeMap<String, i64> {
    let answer = client
        .get(PREFIX, Some(GetOptions::new().with_prefix()))
        .await
        .expect("read the prefix");
    answer
        .kvs()
        .iter()
        .map(|kv| (kv.key_str().expect("UTF-8 key").to_owned(), kv.lease()))
        .collect()
}

/// etcd's store revision now.
async fn revision(client: &mut Client) -> i64 {
    let answer = client.get("/", None).await.expect("read the revision");
    answer.header().expect("a header").revision()
}

/// Poll etcd until `done` holds of the keys under the prefix.
async fn until_keys(
    client: &mut Client,
    what: &str,
    done: impl Fn(&BTreeMap<String, i64>) -> bool,
) {
    let start = Instant::now();
    loop {
        if done(&keys_in(client).await) {
            return;
        }
        assert!(start.elapsed() < WAIT, "gave up waiting until {what}");
        // Paces the polling only.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn a_host_id_held_by_a_live_lease_is_refused_after_waiting_one_ttl() {
    let etcd = Etcd::start().await;
    // The holder's lease outlives the whole wait without renewing.
    let _holder = claim(&etcd, "a", Duration::from_secs(60))
        .await
        .expect("the first claim");
    let start = Instant::now();
    let refused = claim(&etcd, "a", TTL)
        .await
        .err()
        .expect("a second claim fails");
    assert!(
        start.elapsed() >= TTL,
        "refused after {:?}, before one TTL",
        start.elapsed()
    );
    assert!(
        matches!(refused, PublishError::HostIdTaken { .. }),
        "{refused:?}"
    );
    assert!(
        refused.to_string().contains("host id a is taken"),
        "the error names the host id: {refused}"
    );
    // Another id is free all along.
    claim(&etcd, "b", TTL).await.expect("another host id");
}

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn a_claim_succeeds_once_a_holder_that_stopped_renewing_lapses() {
    let etcd = Etcd::start().await;
    let holder = claim(&etcd, "a", TTL).await.expect("the first claim");
    let old_lease = holder.lease_id().expect("a lease");
    // Dropped without leaving: no keepalive and no revoke, as after `kill -9`.
    drop(holder);
    let start = Instant::now();
    let successor = claim(&etcd, "a", TTL)
        .await
        .expect("the claim after the lapse");
    assert!(
        start.elapsed() < TTL + Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    let mut client = etcd.client().await;
    // It waited for the lapse, not took the key over while the old lease lived.
    let old = client
        .lease_time_to_live(old_lease, None)
        .await
        .expect("ask for the old lease");
    assert!(old.ttl() <= 0, "the old lease still lives: {}", old.ttl());
    let keys = keys_in(&mut client).await;
    let lease = successor.lease_id().expect("a lease");
    assert_ne!(lease, old_lease);
    assert_eq!(keys.get(&format!("{PREFIX}/hosts/a")), Some(&lease));
}

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn a_pass_with_nothing_changed_writes_nothing_and_renews_once() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    let mut publisher = claim(&etcd, "a", TTL).await.expect("claim");
    let three_entries = entries("a", 3);
    let three = encoded(&three_entries);
    let first = publisher.step(&three).await.expect("first step");
    assert_eq!((first.txns, first.puts, first.keepalives), (1, 3, 1));
    let before = revision(&mut client).await;
    let quiet = publisher.step(&three).await.expect("quiet step");
    assert_eq!(
        quiet,
        StepReport {
            keepalives: 1,
            ..StepReport::default()
        }
    );
    assert_eq!(
        revision(&mut client).await,
        before,
        "a quiet pass wrote nothing"
    );
    // One session changes, one goes: one transaction of two writes.
    let mut changed = three_entries.clone();
    let first_id = changed.keys().next().cloned().expect("a session");
    changed.remove(&first_id);
    if let Some(entry) = changed.values_mut().next() {
        entry.changed_at = "2026-12-01T00:00:01Z".to_owned();
    }
    let report = publisher
        .step(&encoded(&changed))
        .await
        .expect("changed step");
    assert_eq!((report.txns, report.puts, report.deletes), (1, 1, 1));
    assert_eq!(revision(&mut client).await, before + 1);
    assert_eq!(keys_in(&mut client).await.len(), 1 + 2);
}

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn a_thousand_new_sessions_take_as_few_transactions_as_etcd_allows() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    let mut publisher = claim(&etcd, "a", TTL).await.expect("claim");
    let before = revision(&mut client).await;
    let report = publisher.step(&sessions("a", 1000)).await.expect("step");
    let txns = 1000_usize.div_ceil(128);
    assert_eq!((report.txns, report.puts), (txns, 1000));
    // Each transaction is one revision, whatever it holds.
    assert_eq!(revision(&mut client).await, before + txns as i64);
    assert_eq!(keys_in(&mut client).await.len(), 1 + 1000);
}

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn a_lease_revoked_behind_its_back_is_replaced_and_everything_put_again() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    let mut publisher = claim(&etcd, "a", TTL).await.expect("claim");
    let five = sessions("a", 5);
    publisher.step(&five).await.expect("first step");
    let old = publisher.lease_id().expect("a lease");
    client
        .lease_revoke(old)
        .await
        .expect("revoke behind its back");
    assert!(keys_in(&mut client).await.is_empty());
    let report = publisher.step(&five).await.expect("the step after");
    assert!(report.lease_replaced, "{report:?}");
    assert_eq!(report.puts, 5);
    let new = publisher.lease_id().expect("a lease");
    assert_ne!(new, old);
    let keys = keys_in(&mut client).await;
    assert_eq!(keys.len(), 1 + 5);
    assert!(keys.values().all(|lease| *lease == new), "{keys:?}");
}

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn a_lease_that_lapsed_is_replaced_and_everything_put_again() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    let mut publisher = claim(&etcd, "a", TTL).await.expect("claim");
    let two = sessions("a", 2);
    publisher.step(&two).await.expect("first step");
    // No step for longer than the TTL: etcd lets the lease go with its keys.
    until_keys(
        &mut client,
        "the lapsed lease's keys are gone",
        BTreeMap::is_empty,
    )
    .await;
    let report = publisher.step(&two).await.expect("the step after");
    assert!(report.lease_replaced, "{report:?}");
    assert_eq!(report.puts, 2);
    assert_eq!(keys_in(&mut client).await.len(), 1 + 2);
}

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn leaving_removes_every_key_in_one_revision() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    let mut publisher = claim(&etcd, "a", TTL).await.expect("claim");
    publisher.step(&sessions("a", 300)).await.expect("step");
    assert_eq!(keys_in(&mut client).await.len(), 301);
    let before = revision(&mut client).await;
    publisher.leave().await.expect("leave");
    assert!(keys_in(&mut client).await.is_empty());
    assert_eq!(revision(&mut client).await, before + 1, "all at once");
}

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn a_step_while_etcd_is_down_fails_and_the_next_one_after_it_is_back_catches_up() {
    let mut etcd = Etcd::start().await;
    let mut publisher = claim(&etcd, "a", Duration::from_secs(6))
        .await
        .expect("claim");
    publisher.step(&sessions("a", 1)).await.expect("first step");
    etcd.kill();
    let failed = publisher.step(&sessions("a", 2)).await;
    assert!(failed.is_err(), "{failed:?}");
    etcd.restart().await;
    let mut client = etcd.client().await;
    let start = Instant::now();
    // The client reconnects on its own; a step may still meet the old connection's end.
    loop {
        if publisher.step(&sessions("a", 2)).await.is_ok() {
            break;
        }
        assert!(
            start.elapsed() < WAIT,
            "no step succeeded after etcd came back"
        );
        // Paces the retries only.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(keys_in(&mut client).await.len(), 1 + 2);
}

// ---------------------------------------------------------------------------------------------
// The driver over a real running directory
// ---------------------------------------------------------------------------------------------

/// How often the monitor under test passes over the directory and asks each door again.
const INTERVAL: Duration = Duration::from_millis(200);
/// A door token no key in etcd may ever hold.
const DOOR_SECRET: &str = "door-secret-0f9e8d7c6b5a";

/// What `serve` publishes for a reading: the session object `GET /sessions` serves.
fn render(reading: &Reading) -> (Map<String, Value>, Vec<Skill>) {
    match serde_json::to_value(SessionView::of(reading)) {
        Ok(Value::Object(session)) => (session, Vec::new()),
        other => panic!("a session view is a JSON object: {other:?}"),
    }
}

/// Every value etcd holds under the prefix, by key, as text.
async fn values_in(client: &mut Client) -> BTreeMap<String, String> {
    let answer = client
        .get(PREFIX, Some(GetOptions::new().with_prefix()))
        .await
        .expect("read the prefix");
    answer
        .kvs()
        .iter()
        .map(|kv| {
            let key = kv.key_str().expect("UTF-8 key").to_owned();
            (key, kv.value_str().expect("UTF-8 value").to_owned())
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn the_driver_publishes_a_running_directory_as_it_changes_with_nobody_listening() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    let dir = temp_dir();
    let probe = DoorProbe::with_deadlines(Duration::from_millis(300), Duration::from_millis(700));
    let monitor = Monitor::new(Arc::new(Registry::new(dir.path(), probe)));
    monitor.set_interval(INTERVAL);
    monitor.set_door_recheck(INTERVAL);
    let mut first = FirstRecords::write_in(dir.path());
    let settings = EtcdSettings {
        endpoints: vec![etcd.endpoint()],
        ..EtcdSettings::default()
    };
    let publishing = publishing::start(&settings, options("h1", TTL), monitor.clone(), render)
        .await
        .expect("start publishing");
    let capsule_key = format!("{PREFIX}/sessions/h1/{}", first.capsule.session_id());
    // Published when start returns: the first picture is not a pass late.
    let values = values_in(&mut client).await;
    the_first_picture_holds_each_session(&values, &first);
    the_host_entry_carries_its_load(&values);
    // The driver is the only listener, and the loop runs for it.
    assert_eq!(monitor.listeners(), 1);
    the_passes_renew_the_lease(&mut client, &monitor, &capsule_key).await;
    let _second = a_new_capsule_is_published_and_a_killed_one_pruned(
        &mut client,
        dir.path(),
        &mut first,
        &capsule_key,
    )
    .await;
    nothing_secret_is_in_etcd(&mut client).await;

    // Leaving revokes: every key at once.
    let before = revision(&mut client).await;
    publishing.leave().await.expect("leave");
    assert!(keys_in(&mut client).await.is_empty());
    assert_eq!(revision(&mut client).await, before + 1);
    assert_eq!(monitor.listeners(), 0, "the subscription went with it");
}

/// What the driver finds when it starts: a capsule, a door that wants a token (and gets it
/// from its record), a record without a door. Held for the test's length.
struct FirstRecords {
    capsule: CapsuleProcess,
    record: RecordJson,
    guarded_id: String,
    _guarded: DoorServer,
    doorless: RecordJson,
}

impl FirstRecords {
    /// Writes the three records in `dir`.
    fn write_in(dir: &std::path::Path) -> Self {
        let capsule = CapsuleProcess::single();
        let record = capsule.record();
        write_raw(dir, &record.file_name(), record.to_bytes());
        // A door that wants a token, and gets it from its record.
        let guarded_id = session_id();
        let guarded = DoorServer::start(DoorMode::Authenticated {
            session_id: guarded_id.clone(),
            token: DOOR_SECRET.to_owned(),
            rejection: Rejection::Http401,
        });
        RecordJson::new(&guarded_id)
            .url(guarded.url())
            .door_token(DOOR_SECRET)
            .write_in(dir);
        let doorless = RecordJson::fresh().no_door();
        write_raw(dir, &doorless.file_name(), doorless.to_bytes());
        Self {
            capsule,
            record,
            guarded_id,
            _guarded: guarded,
            doorless,
        }
    }
}

/// The first picture: four keys; the capsule live with its host and scope, the guarded
/// door live (it got its token), the doorless record without a scope.
fn the_first_picture_holds_each_session(values: &BTreeMap<String, String>, first: &FirstRecords) {
    let capsule_key = format!("{PREFIX}/sessions/h1/{}", first.capsule.session_id());
    let doorless_key = format!("{PREFIX}/sessions/h1/{}", first.doorless.session_id());
    assert_eq!(values.len(), 4, "{values:?}");
    let entry: Value = serde_json::from_str(&values[&capsule_key]).expect("JSON");
    assert_eq!(entry["host_id"], "h1");
    assert_eq!(entry["door_scope"], "host");
    assert_eq!(entry["session_id"], first.capsule.session_id());
    assert_eq!(entry["liveness"]["state"], "live");
    assert!(
        entry["changed_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    let guarded_key = format!("{PREFIX}/sessions/h1/{}", first.guarded_id);
    let entry: Value = serde_json::from_str(&values[&guarded_key]).expect("JSON");
    assert_eq!(entry["liveness"]["state"], "live", "the door got its token");
    let entry: Value = serde_json::from_str(&values[&doorless_key]).expect("JSON");
    assert_eq!(entry["door_scope"], Value::Null);
}

/// The host's entry: its id, no registry URL, and a plausible load and memory.
fn the_host_entry_carries_its_load(values: &BTreeMap<String, String>) {
    let host: Value = serde_json::from_str(&values[&format!("{PREFIX}/hosts/h1")]).expect("JSON");
    assert_eq!(host["host_id"], "h1");
    assert_eq!(host["registry_url"], Value::Null);
    let load = &host["load"];
    let number = |name: &str| {
        load[name]
            .as_f64()
            .unwrap_or_else(|| panic!("{name}: {load}"))
    };
    assert!(number("cpus") >= 1.0, "{load}");
    for name in ["load_1m", "load_5m", "load_15m"] {
        assert!(number(name) >= 0.0, "{load}");
    }
    assert!(number("memory_available_bytes") <= number("memory_total_bytes"));
    assert!(number("memory_total_bytes") > 0.0, "{load}");
}

/// The lease is renewed by the passes: it outlives many TTLs' worth of passes.
async fn the_passes_renew_the_lease(client: &mut Client, monitor: &Monitor, capsule_key: &str) {
    let lease = keys_in(client).await[capsule_key];
    let mut steps = monitor.steps();
    let from = *steps.borrow_and_update();
    let passes = (3 * TTL.as_millis() / INTERVAL.as_millis()) as u64;
    let start = Instant::now();
    while *steps.borrow_and_update() < from + passes {
        assert!(start.elapsed() < WAIT, "the loop stopped passing");
        tokio::time::timeout(WAIT, steps.changed())
            .await
            .expect("a pass within the deadline")
            .expect("the monitor is alive");
    }
    assert_eq!(keys_in(client).await.get(capsule_key), Some(&lease));
}

/// A new capsule appears; a killed one is pruned from disk and from etcd, with nobody
/// listening to `/events`. Answers the new capsule, to be held to the end.
async fn a_new_capsule_is_published_and_a_killed_one_pruned(
    client: &mut Client,
    dir: &std::path::Path,
    first: &mut FirstRecords,
    capsule_key: &str,
) -> CapsuleProcess {
    let second = CapsuleProcess::single();
    write_raw(
        dir,
        &second.record().file_name(),
        second.record().to_bytes(),
    );
    let second_key = format!("{PREFIX}/sessions/h1/{}", second.session_id());
    until_keys(client, "the new capsule is published", |keys| {
        keys.contains_key(&second_key)
    })
    .await;
    first.capsule.send_signal(9);
    first.capsule.wait_exit(DEADLINE);
    until_keys(client, "the killed capsule is unpublished", |keys| {
        !keys.contains_key(capsule_key)
    })
    .await;
    let record_path = dir.join(first.record.file_name());
    wait_until("the killed capsule's record is pruned", DEADLINE, || {
        !record_path.exists()
    });
    second
}

/// Nothing secret in any key etcd holds.
async fn nothing_secret_is_in_etcd(client: &mut Client) {
    for (key, value) in values_in(client).await {
        for secret in [DOOR_SECRET, "door_token", "token", "password", "credential"] {
            assert!(!value.contains(secret), "{key} holds {secret:?}: {value}");
        }
    }
}

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn the_driver_refuses_to_start_on_a_host_id_taken_naming_it() {
    let etcd = Etcd::start().await;
    let _holder = claim(&etcd, "dup", Duration::from_secs(60))
        .await
        .expect("the first claim");
    let dir = temp_dir();
    let monitor = Monitor::new(Arc::new(Registry::new(dir.path(), DoorProbe::new())));
    let settings = EtcdSettings {
        endpoints: vec![etcd.endpoint()],
        ..EtcdSettings::default()
    };
    let refused = publishing::start(&settings, options("dup", TTL), monitor.clone(), render)
        .await
        .expect_err("refused");
    assert!(refused.to_string().contains("host id dup"), "{refused}");
    assert!(
        !monitor.is_running(),
        "nothing subscribed for a refused start"
    );
}

// ---------------------------------------------------------------------------------------------
// etcd frozen, etcd with authentication, a cluster losing its leader
// ---------------------------------------------------------------------------------------------

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn a_step_against_a_frozen_etcd_fails_within_the_ttl_and_resumes_after_it_thaws() {
    let etcd = Etcd::start().await;
    let ttl = Duration::from_secs(3);
    let mut publisher = claim(&etcd, "a", ttl).await.expect("claim");
    publisher.step(&sessions("a", 1)).await.expect("first step");
    etcd.freeze();
    let start = Instant::now();
    let failed = publisher.step(&sessions("a", 2)).await;
    let took = start.elapsed();
    etcd.thaw();
    assert!(failed.is_err(), "{failed:?}");
    assert!(took < ttl, "a silent etcd held the step for {took:?}");
    let mut client = etcd.client().await;
    let start = Instant::now();
    while publisher.step(&sessions("a", 2)).await.is_err() {
        assert!(
            start.elapsed() < WAIT,
            "no step succeeded after etcd thawed"
        );
        // Paces the retries only.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(keys_in(&mut client).await.len(), 1 + 2);
}

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn with_etcd_authentication_the_credentials_file_is_used_and_a_wrong_password_refused() {
    let etcd = Etcd::start().await;
    let mut admin = etcd.client().await;
    admin
        .user_add("root", "root-pw", None)
        .await
        .expect("add root");
    admin
        .user_grant_role("root", "root")
        .await
        .expect("grant root");
    admin.auth_enable().await.expect("enable auth");
    let home = temp_dir();
    let with_password = |name: &str, line: &str| {
        let path = write_raw(home.path(), name, line);
        EtcdSettings {
            endpoints: vec![etcd.endpoint()],
            credentials_file: Some(path),
            ..EtcdSettings::default()
        }
    };
    let dir = temp_dir();
    let monitor = Monitor::new(Arc::new(Registry::new(dir.path(), DoorProbe::new())));
    let wrong = with_password("wrong", "root:not-the-password\n");
    publishing::start(&wrong, options("h1", TTL), monitor.clone(), render)
        .await
        .expect_err("a wrong password is refused");
    let right = with_password("right", "root:root-pw\n");
    let publishing = publishing::start(&right, options("h1", TTL), monitor, render)
        .await
        .expect("start with the right password");
    let mut reader = common::etcd::connect(&[etcd.endpoint()])
        .await
        .expect("connect");
    let answer = reader
        .get(PREFIX, Some(GetOptions::new().with_prefix()))
        .await;
    assert!(answer.is_err(), "etcd refuses a reader without credentials");
    publishing.leave().await.expect("leave");
}

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn publishing_goes_on_when_a_three_member_clusters_leader_is_killed() {
    let mut cluster = EtcdCluster::start(3).await;
    let client = common::etcd::connect(&cluster.endpoints())
        .await
        .expect("connect");
    let mut publisher = Publisher::claim(client, &options("a", Duration::from_secs(3)))
        .await
        .expect("claim");
    publisher.step(&sessions("a", 5)).await.expect("first step");
    let leader = cluster.leader().await;
    cluster.members[leader].kill();
    let start = Instant::now();
    // The client moves to a live member; a step may meet the dead one first.
    while publisher.step(&sessions("a", 7)).await.is_err() {
        assert!(
            start.elapsed() < WAIT,
            "no step succeeded after the leader died"
        );
        // Paces the retries only.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let survivor = (0..3).find(|i| *i != leader).expect("a survivor");
    let mut reader = cluster.members[survivor].client().await;
    until_keys(&mut reader, "all seven sessions are published", |keys| {
        keys.len() == 1 + 7
    })
    .await;
    let quiet = publisher
        .step(&sessions("a", 7))
        .await
        .expect("a quiet step");
    assert_eq!((quiet.puts, quiet.keepalives), (0, 1), "{quiet:?}");
}

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server) and openssl, run with --features fleet"]
async fn over_tls_a_client_certificate_is_presented_and_without_one_start_is_refused() {
    let certs = TestCerts::generate();
    let etcd = Etcd::start_tls(certs.clone()).await;
    let settings = EtcdSettings {
        endpoints: vec![etcd.endpoint()],
        ca_file: Some(certs.ca.clone()),
        client_cert_file: Some(certs.client_cert.clone()),
        client_key_file: Some(certs.client_key.clone()),
        credentials_file: None,
    };
    let dir = temp_dir();
    let monitor = Monitor::new(Arc::new(Registry::new(dir.path(), DoorProbe::new())));
    let publishing = publishing::start(&settings, options("h1", TTL), monitor.clone(), render)
        .await
        .expect("start over TLS");
    let mut client = etcd.client().await;
    assert!(
        keys_in(&mut client)
            .await
            .contains_key(&format!("{PREFIX}/hosts/h1"))
    );
    publishing.leave().await.expect("leave");
    let without_certificate = EtcdSettings {
        client_cert_file: None,
        client_key_file: None,
        ..settings
    };
    publishing::start(&without_certificate, options("h1", TTL), monitor, render)
        .await
        .expect_err("etcd asks for a client certificate");
}

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn a_loop_that_cannot_pass_lets_the_lease_lapse_and_the_host_rejoins_once_it_can() {
    use std::os::unix::fs::DirBuilderExt;
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    let home = temp_dir();
    let running = home.path().join("running");
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&running)
        .expect("a running directory");
    let monitor = Monitor::new(Arc::new(Registry::new(&running, DoorProbe::new())));
    monitor.set_interval(INTERVAL);
    let doorless = RecordJson::fresh().no_door();
    doorless.write_in(&running);
    let settings = EtcdSettings {
        endpoints: vec![etcd.endpoint()],
        ..EtcdSettings::default()
    };
    let publishing = publishing::start(&settings, options("h1", TTL), monitor, render)
        .await
        .expect("start");
    let old_lease = keys_in(&mut client).await[&format!("{PREFIX}/hosts/h1")];

    // The directory taken away: no pass completes, nothing renews the lease.
    let aside = home.path().join("aside");
    std::fs::rename(&running, &aside).expect("take the directory away");
    let start = Instant::now();
    until_keys(&mut client, "the host drops out", BTreeMap::is_empty).await;
    let took = start.elapsed();
    // One TTL, etcd's expiry tick, and what a loaded machine adds.
    assert!(
        took < TTL + Duration::from_secs(3),
        "dropped out after {took:?}"
    );

    std::fs::rename(&aside, &running).expect("put the directory back");
    until_keys(&mut client, "the host rejoins with its session", |keys| {
        keys.len() == 2 && keys.values().all(|lease| *lease != old_lease)
    })
    .await;
    publishing.leave().await.expect("leave");
}

/// A host key written by hand, with no lease (or under a lease gone), locks nobody out: the
/// claim takes it over at once, under its own lease. One another registry's live lease holds
/// is still refused (`a_host_id_held_by_a_live_lease_is_refused_after_waiting_one_ttl`).
#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn a_host_key_without_a_live_lease_is_taken_over_at_once() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    let forged = r#"{"host_id":"a","version":"0","started_at":"2026-01-01T00:00:00Z"}"#;
    client
        .put(format!("{PREFIX}/hosts/a"), forged, None)
        .await
        .expect("a lease-less host key");
    let ttl = Duration::from_secs(6);
    let start = Instant::now();
    let publisher = claim(&etcd, "a", ttl).await.expect("taken over");
    assert!(start.elapsed() < ttl, "waited {:?}", start.elapsed());
    let lease = publisher.lease_id().expect("a lease");
    assert_eq!(
        keys_in(&mut client).await[&format!("{PREFIX}/hosts/a")],
        lease
    );

    // Under another live lease: refused after the wait; once that lease is revoked, taken.
    let stale = client.lease_grant(60, None).await.expect("grant").id();
    client
        .put(
            format!("{PREFIX}/hosts/b"),
            forged.replace("\"a\"", "\"b\""),
            Some(etcd_client::PutOptions::new().with_lease(stale)),
        )
        .await
        .expect("a host key under a live lease");
    let refused = tokio::time::timeout(WAIT, claim(&etcd, "b", TTL))
        .await
        .expect("refused within the wait");
    assert!(matches!(refused, Err(PublishError::HostIdTaken { .. })));
    client.lease_revoke(stale).await.expect("revoke");
    claim(&etcd, "b", ttl)
        .await
        .expect("taken once the lease is gone");
}

/// The publisher owns its host's keys: an entry deleted, overwritten (even with the very bytes
/// it wrote, but without its lease), a host key rewritten without a lease, or a key under its
/// sessions' prefix it never wrote: the next step puts back or deletes each, and a step after
/// that writes nothing.
#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn keys_of_this_host_it_did_not_write_are_put_back_or_deleted_at_the_next_step() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    let mut publisher = claim(&etcd, "a", TTL).await.expect("claim");
    let three = sessions("a", 3);
    publisher.step(&three).await.expect("first step");
    let lease = publisher.lease_id().expect("a lease");
    let published = values_in(&mut client).await;
    let ids: Vec<&String> = three.keys().collect();
    let key = |id: &str| format!("{PREFIX}/sessions/a/{id}");
    client.delete(key(ids[0]), None).await.expect("delete");
    client
        .put(key(ids[1]), three[ids[1]].to_vec(), None)
        .await
        .expect("the same bytes, no lease");
    client
        .put(key(ids[2]), r#"{"forged":true}"#, None)
        .await
        .expect("a foreign value");
    let stray = key("ses_0190a5c0f4d17c3e8b2a4d6f8e0c1b3f");
    client.put(stray.as_str(), "{}", None).await.expect("stray");
    let host = format!("{PREFIX}/hosts/a");
    let host_value = published[&host].clone();
    client
        .put(host.as_str(), host_value, None)
        .await
        .expect("host");

    let report = publisher.step(&three).await.expect("the step after");
    assert_eq!((report.txns, report.puts, report.deletes), (1, 4, 1));
    let keys = keys_in(&mut client).await;
    assert_eq!(keys.len(), 1 + 3, "{keys:?}");
    assert!(keys.values().all(|l| *l == lease), "{keys:?}");
    assert_eq!(values_in(&mut client).await, published);
    let before = revision(&mut client).await;
    let quiet = publisher.step(&three).await.expect("a quiet step");
    assert_eq!((quiet.txns, quiet.keepalives), (0, 1));
    assert_eq!(revision(&mut client).await, before);
}

/// etcd's count of reads and transactions served (`grpc_server_handled_total` of `Range` and
/// of `Txn`, whatever their code), from its own `/metrics`: the publisher's read of its keys is
/// a `Txn`.
async fn reads_and_txns(etcd: &Etcd) -> (u64, u64) {
    let metrics = etcd.metrics().await;
    let calls = |method: &str| -> u64 {
        let label = format!("grpc_method=\"{method}\"");
        (metrics.lines())
            .filter(|line| line.starts_with("grpc_server_handled_total{") && line.contains(&label))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    (calls("Range"), calls("Txn"))
}

/// At rest a step asks etcd nothing but its renewal (and a progress notice on the watch of its
/// keys, which is no request etcd counts): five quiet steps are served no `Range` and no `Txn`.
/// A key deleted behind its back meanwhile is still put back at the next step, by one `Txn`
/// and no read; another host's keys are left alone.
#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn at_rest_a_step_reads_nothing_and_a_key_deleted_meanwhile_is_put_back_at_the_next() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    // Another host's keys, which no step of this one may touch.
    let others = [
        format!("{PREFIX}/hosts/b"),
        format!("{PREFIX}/sessions/b/s"),
    ];
    for key in &others {
        client.put(key.as_str(), "{}", None).await.expect("b's key");
    }
    let mut publisher = claim(&etcd, "a", TTL).await.expect("claim");
    let three = sessions("a", 3);
    publisher.step(&three).await.expect("first step");
    publisher.step(&three).await.expect("a quiet step");
    let before = reads_and_txns(&etcd).await;
    assert!(
        before.1 > 0,
        "etcd counts the claim's and the first step's Txn: {before:?}"
    );
    for _ in 0..5 {
        let quiet = publisher.step(&three).await.expect("a quiet step");
        assert_eq!((quiet.txns, quiet.keepalives), (0, 1), "{quiet:?}");
    }
    assert_eq!(reads_and_txns(&etcd).await, before, "five steps at rest");

    let id = three.keys().next().expect("a session");
    let key = format!("{PREFIX}/sessions/a/{id}");
    client.delete(key.as_str(), None).await.expect("delete");
    let report = publisher.step(&three).await.expect("the step after");
    assert_eq!((report.txns, report.puts, report.deletes), (1, 1, 0));
    assert_eq!(
        reads_and_txns(&etcd).await,
        (before.0, before.1 + 1),
        "the put, and no read"
    );
    let lease = publisher.lease_id().expect("a lease");
    let keys = keys_in(&mut client).await;
    assert_eq!(keys.get(&key), Some(&lease));
    assert!(others.iter().all(|k| keys.get(k) == Some(&0)), "{keys:?}");
}

/// A watch that etcd ended (here by restarting) is not trusted: a key deleted after the
/// restart is put back once steps succeed again, which only a fresh read can tell.
#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn a_watch_ended_by_an_etcd_restart_is_not_trusted_and_the_keys_are_read_again() {
    let mut etcd = Etcd::start().await;
    let mut publisher = claim(&etcd, "a", Duration::from_secs(6))
        .await
        .expect("claim");
    let two = sessions("a", 2);
    publisher.step(&two).await.expect("first step");
    publisher.step(&two).await.expect("a quiet step, watching");
    etcd.kill();
    etcd.restart().await;
    let mut client = etcd.client().await;
    let id = two.keys().next().expect("a session");
    let key = format!("{PREFIX}/sessions/a/{id}");
    client.delete(key.as_str(), None).await.expect("delete");
    let start = Instant::now();
    // The client reconnects on its own; a step may still meet the old connection's end, or a
    // read refused, which leaves the check to the step after.
    while !keys_in(&mut client).await.contains_key(&key) {
        assert!(start.elapsed() < WAIT, "the deleted key was never put back");
        if publisher.step(&two).await.is_err() {
            // Paces the retries only.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert_eq!(keys_in(&mut client).await.len(), 1 + 2);
}

/// Request load cannot starve the lease: with every worker of the runtime that started the
/// publishing held by blocking work for three TTLs (as CPU-bound requests hold the server's),
/// the lease is renewed all along, since the publishing and its etcd client run on a thread of
/// their own; the monitor's passes go on on theirs. (Before, the lease lapsed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn a_runtime_whose_workers_are_all_blocked_does_not_starve_the_lease() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    let dir = temp_dir();
    let probe = DoorProbe::with_deadlines(Duration::from_millis(300), Duration::from_millis(700));
    let monitor = Monitor::new(Arc::new(Registry::new(dir.path(), probe)));
    monitor.set_interval(INTERVAL);
    let capsule = CapsuleProcess::single();
    let record = capsule.record();
    write_raw(dir.path(), &record.file_name(), record.to_bytes());
    let settings = EtcdSettings {
        endpoints: vec![etcd.endpoint()],
        ..EtcdSettings::default()
    };
    let publishing = publishing::start(&settings, options("h1", TTL), monitor.clone(), render)
        .await
        .expect("start publishing");
    let host_key = format!("{PREFIX}/hosts/h1");
    let lease = keys_in(&mut client).await[&host_key];
    let passes = *monitor.steps().borrow();

    // Both workers held at once (the barrier lets neither go before both hold one), for three
    // TTLs: the scenario's length, not a synchronisation.
    let both = Arc::new(std::sync::Barrier::new(2));
    let held: Vec<_> = (0..2)
        .map(|_| {
            let both = Arc::clone(&both);
            tokio::spawn(async move {
                both.wait();
                std::thread::sleep(3 * TTL);
            })
        })
        .collect();
    for worker in held {
        worker.await.expect("a blocked worker");
    }
    assert!(
        *monitor.steps().borrow() >= passes + 3,
        "the monitor passed meanwhile"
    );
    let ttl = client
        .lease_time_to_live(lease, None)
        .await
        .expect("ask about the lease")
        .ttl();
    assert!(ttl > 0, "the lease lapsed while the workers were held");
    assert_eq!(
        keys_in(&mut client).await[&host_key],
        lease,
        "the same lease"
    );
    publishing.leave().await.expect("leave");
}
