//! Simulated hosts of a fleet (feature `fleet`): each publishes through the registry's own
//! [`Publisher`] (its own etcd connection, lease, claim, batched transactions, renewals),
//! driven directly rather than by a monitor: a step every pass, and at once when poked.
//! Used by `tests/fleet_scale.rs` and the bench's `fleet-scale` scenario.
//!
//! Invariant: a host dropped ([`SimFleet::kill`]) stops renewing without leaving, so its lease
//! lapses as a killed registry's would.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use murmur_registry::running::Skill;
use murmur_registry::test_support::fleet::etcd::{EtcdSettings, connect};
use murmur_registry::test_support::fleet::keys::FleetKeys;
use murmur_registry::test_support::fleet::publisher::{PublishOptions, Publisher};
use murmur_registry::test_support::fleet::{DoorScope, HOST_LOAD_REFRESH, HostId, SessionEntry};
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How often a host's first step is tried before the fleet gives up loading.
const FIRST_STEP_TRIES: usize = 5;

/// What a simulated fleet is made of.
#[derive(Debug, Clone)]
pub struct SimSettings {
    pub endpoint: String,
    pub prefix: String,
    pub hosts: usize,
    pub sessions: usize,
    pub ttl: Duration,
    /// How often each host steps (renews, writes what changed): `--events-interval`.
    pub pass: Duration,
    /// How many hosts claim and publish their first picture at once while the fleet loads:
    /// each is a connection and a burst of transactions, so a thousand at once would only
    /// queue at etcd and time out.
    pub load_concurrency: usize,
}

/// One host: its sessions (id → encoded entry) and the task that publishes them.
struct SimHost {
    id: HostId,
    sessions: Arc<Mutex<BTreeMap<String, Bytes>>>,
    poke: mpsc::UnboundedSender<()>,
    task: JoinHandle<()>,
}

/// The hosts, publishing.
pub struct SimFleet {
    hosts: Vec<SimHost>,
    settings: SimSettings,
}

/// A session id of host `host`, number `n`: `ses_` + 32 hex digits.
pub fn sim_session_id(host: usize, n: usize) -> String {
    format!("ses_{host:08x}{n:024x}")
}

/// Host `n`'s id.
pub fn sim_host_id(n: usize) -> String {
    format!("sim{n:04}")
}

/// The encoded entry of session `id` on `host`, marked `mark` (its `changed_at`).
pub fn sim_entry(host: &str, id: &str, mark: &str) -> Bytes {
    let session = json!({
        "session_id": id, "url": "10.1.2.3:41234", "pid": 4242,
        "process_start": "123456789", "capsule_name": "researcher",
        "capsule_version": "1.4.2", "workdir": format!("/home/agent/work/{id}"),
        "outlives_launcher": false, "started_at": "2026-12-01T09:00:00Z",
        "formation_id": "frm_0193a4c2e1f07a3b", "records_dir": "/home/agent/.murmur/records",
        "liveness": {"state": "live", "process": "alive", "reason": null}
    });
    let serde_json::Value::Object(session) = session else {
        unreachable!("an object literal")
    };
    let mut entry = SessionEntry {
        host_id: host.to_owned(),
        changed_at: mark.to_owned(),
        door_scope: Some(DoorScope::Network),
        skills: vec![Skill {
            id: "summarize".to_owned(),
            tags: vec!["nlp".to_owned(), "text".to_owned()],
        }],
        skills_omitted: 0,
        session,
    };
    Bytes::from(entry.encode().expect("a publishable entry"))
}

impl SimFleet {
    /// Claim every host and publish its sessions, `load_concurrency` hosts at a time; back
    /// once every one of them has published all of its sessions.
    pub async fn start(settings: SimSettings) -> Self {
        use futures_util::StreamExt;
        let claims = (0..settings.hosts).map(|n| start_host(&settings, n));
        let hosts = futures_util::stream::iter(claims)
            .buffered(settings.load_concurrency.max(1))
            .collect()
            .await;
        Self { hosts, settings }
    }

    pub fn hosts(&self) -> usize {
        self.hosts.len()
    }

    /// Host `n`'s id.
    pub fn host_id(&self, n: usize) -> &HostId {
        &self.hosts[n].id
    }

    /// Change (or add) session `id` of host `n` to carry `mark`; with `now`, its host steps
    /// at once instead of at its next pass.
    pub fn put(&self, n: usize, id: &str, mark: &str, now: bool) {
        let host = &self.hosts[n];
        let entry = sim_entry(host.id.as_str(), id, mark);
        lock(&host.sessions).insert(id.to_owned(), entry);
        if now {
            let _ = host.poke.send(());
        }
    }

    /// Remove session `id` of host `n` (published at its next pass).
    pub fn remove(&self, n: usize, id: &str) {
        lock(&self.hosts[n].sessions).remove(id);
    }

    /// Host `n`'s session ids now.
    pub fn session_ids(&self, n: usize) -> Vec<String> {
        lock(&self.hosts[n].sessions).keys().cloned().collect()
    }

    /// Stop host `n`'s publisher without leaving: its lease lapses one TTL after its last
    /// renewal. Its id.
    pub fn kill(&mut self, n: usize) -> HostId {
        let host = self.hosts.remove(n);
        host.task.abort();
        host.id
    }

    pub fn settings(&self) -> &SimSettings {
        &self.settings
    }
}

impl Drop for SimFleet {
    fn drop(&mut self) {
        for host in &self.hosts {
            host.task.abort();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Host `n`, claimed, its sessions published once, then stepping every pass.
async fn start_host(settings: &SimSettings, n: usize) -> SimHost {
    let id: HostId = sim_host_id(n).parse().expect("a host id");
    #[allow(clippy::needless_update)]
    let etcd = EtcdSettings {
        endpoints: vec![settings.endpoint.clone()],
        ..Default::default()
    };
    let client = connect(&etcd, settings.ttl).await.expect("connect to etcd");
    let options = PublishOptions {
        keys: FleetKeys::new(&settings.prefix),
        host_id: id.clone(),
        ttl: settings.ttl,
        version: "sim".to_owned(),
        advertise_url: None,
    };
    let mut publisher = Publisher::claim(client, &options).await.expect("claim");
    let mark = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let sessions: BTreeMap<String, Bytes> = (0..settings.sessions)
        .map(|s| {
            let session = sim_session_id(n, s);
            let entry = sim_entry(id.as_str(), &session, &mark);
            (session, entry)
        })
        .collect();
    first_step(&mut publisher, &sessions, settings.pass).await;
    let sessions = Arc::new(Mutex::new(sessions));
    let (poke, poked) = mpsc::unbounded_channel();
    let task = tokio::spawn(publish(
        publisher,
        Arc::clone(&sessions),
        poked,
        settings.pass,
    ));
    SimHost {
        id,
        sessions,
        poke,
        task,
    }
}

/// The host's first picture published, tried again a pass later while it fails (as `serve`
/// does): a fleet loading into a busy etcd may see a step time out, or its lease lapse before
/// the step's last transaction. Panics after [`FIRST_STEP_TRIES`].
async fn first_step(publisher: &mut Publisher, sessions: &BTreeMap<String, Bytes>, pass: Duration) {
    for tried in 1.. {
        match publisher.step(sessions).await {
            Ok(_) => return,
            Err(error) if tried < FIRST_STEP_TRIES => {
                eprintln!("a simulated host's first step failed (tried again): {error}");
            }
            Err(error) => panic!("the first step, {tried} tries: {error}"),
        }
        // Paces the retries as `serve`'s passes would.
        tokio::time::sleep(pass).await;
    }
}

/// Step every `pass`, and when poked; the host's load read again every 30 s, as `serve` does.
async fn publish(
    mut publisher: Publisher,
    sessions: Arc<Mutex<BTreeMap<String, Bytes>>>,
    mut poked: mpsc::UnboundedReceiver<()>,
    pass: Duration,
) {
    let mut passes = tokio::time::interval(pass);
    // A host held up (a busy etcd, a busy machine) steps once and goes on, as a pass would,
    // rather than stepping again at once for every pass it missed.
    passes.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut load_read = Instant::now();
    loop {
        tokio::select! {
            _ = passes.tick() => {}
            Some(()) = poked.recv() => {}
        }
        if load_read.elapsed() >= HOST_LOAD_REFRESH {
            let _ = publisher.refresh_load();
            load_read = Instant::now();
        }
        let now = lock(&sessions).clone();
        if let Err(error) = publisher.step(&now).await {
            eprintln!("a simulated host's step failed: {error}");
        }
    }
}
