//! Single-flight door probes in the registry: concurrent verifications of one record share one
//! probe, a rewritten record gets its own, a caller that leaves takes nothing from the others,
//! no answer is reused once its probe has finished, and the prober's limit on probes in flight
//! holds.
//!
//! The doors here are gated: each accepts, reads the request, counts it, and answers only when
//! the test opens the gate, so "in flight at the same moment" is a fact the test arranges, not
//! a race it hopes to win. Records name the test process itself.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{DEADLINE, RecordJson, temp_dir};
use murmur_registry::registry::Registry;
use murmur_registry::running::{DoorProbe, Liveness};
use murmur_registry::test_support::{ProbesInFlight, probes_in_flight};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// What the gated doors saw, per session they answer for and in all.
#[derive(Debug, Default)]
struct Seen {
    /// Requests received, per session.
    requests: HashMap<String, usize>,
    /// Requests read but not yet answered, per session, and the most there ever were.
    open: HashMap<String, usize>,
    most_open: HashMap<String, usize>,
    /// The same over every door.
    open_total: usize,
    most_open_total: usize,
    /// Connections the prober closed before the door answered.
    abandoned: usize,
}

/// Doors that hold every answer until [`Gate::open`].
struct Gate {
    open: watch::Sender<bool>,
    seen: Arc<Mutex<Seen>>,
}

impl Gate {
    fn new() -> Self {
        Self {
            open: watch::channel(false).0,
            seen: Arc::default(),
        }
    }

    /// A door on `127.0.0.1:0` answering a spec card for `answers_for`; its requests are counted
    /// under `label`. Answers the door's `host:port`.
    async fn door(&self, label: &str, answers_for: &str) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = listener.local_addr().expect("addr").to_string();
        let body = format!(r#"{{"session_id":"{answers_for}"}}"#);
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        );
        let (label, gate, seen) = (label.to_owned(), self.open.subscribe(), self.seen.clone());
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (label, answer, mut gate, seen) =
                    (label.clone(), answer.clone(), gate.clone(), seen.clone());
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    begin(&seen, &label);
                    let hung_up = tokio::select! {
                        _ = gate.wait_for(|open| *open) => false,
                        read = stream.read(&mut buf) => matches!(read, Ok(0) | Err(_)),
                    };
                    // Counted as answered before the bytes go out, so a probe that follows this
                    // one can never be seen overlapping it.
                    end(&seen, &label, hung_up);
                    if !hung_up {
                        let _ = stream.write_all(answer.as_bytes()).await;
                        let _ = stream.shutdown().await;
                    }
                });
            }
        });
        url
    }

    /// A fresh record in `dir` whose door is one of this gate's, answering for the record's
    /// session and counted under its id. Answers the session id.
    async fn record_in(&self, dir: &std::path::Path) -> String {
        let record = RecordJson::fresh();
        let id = record.session_id();
        record.url(self.door(&id, &id).await).write_in(dir);
        id
    }

    fn release(&self) {
        self.open.send_replace(true);
    }

    fn seen<T>(&self, read: impl FnOnce(&Seen) -> T) -> T {
        read(&self.seen.lock().expect("seen"))
    }

    fn requests(&self, label: &str) -> usize {
        self.seen(|s| s.requests.get(label).copied().unwrap_or(0))
    }
}

fn begin(seen: &Mutex<Seen>, label: &str) {
    let mut seen = seen.lock().expect("seen");
    *seen.requests.entry(label.to_owned()).or_default() += 1;
    let open = {
        let open = seen.open.entry(label.to_owned()).or_default();
        *open += 1;
        *open
    };
    let most = seen.most_open.entry(label.to_owned()).or_default();
    *most = (*most).max(open);
    seen.open_total += 1;
    seen.most_open_total = seen.most_open_total.max(seen.open_total);
}

fn end(seen: &Mutex<Seen>, label: &str, hung_up: bool) {
    let mut seen = seen.lock().expect("seen");
    if let Some(open) = seen.open.get_mut(label) {
        *open -= 1;
    }
    seen.open_total -= 1;
    if hung_up {
        seen.abandoned += 1;
    }
}

/// Poll `done` until it holds; the pause only paces the loop.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn registry_in(dir: &std::path::Path) -> Arc<Registry> {
    Arc::new(Registry::new(dir, DoorProbe::new()))
}

fn states(listing: &murmur_registry::registry::Listing) -> HashMap<String, Liveness> {
    listing
        .readings
        .iter()
        .map(|r| {
            (
                r.record.session_id.clone(),
                r.liveness.clone().expect("probed"),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_listings_share_one_probe_per_session_and_nothing_is_kept_after() {
    let dir = temp_dir();
    let gate = Gate::new();
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(gate.record_in(dir.path()).await);
    }
    let registry = registry_in(dir.path());
    let callers = 20;
    let listings: Vec<_> = (0..callers)
        .map(|_| {
            let registry = registry.clone();
            tokio::spawn(async move { registry.sessions(true).await.expect("listing") })
        })
        .collect();
    // A flight exists before its probe reaches the door: wait for both, then count.
    until(
        "every caller to wait on the three probes, each at its door",
        || {
            probes_in_flight(&registry)
                == ProbesInFlight {
                    probes: 3,
                    waiters: 3 * callers,
                }
                && ids.iter().all(|id| gate.requests(id) >= 1)
        },
    )
    .await;
    for id in &ids {
        assert_eq!(
            gate.requests(id),
            1,
            "one probe of {id} for {callers} callers"
        );
    }
    gate.release();
    for listing in listings {
        let states = states(&listing.await.expect("caller"));
        for id in &ids {
            assert_eq!(states[id], Liveness::Live, "{id}");
        }
    }
    assert_eq!(probes_in_flight(&registry).probes, 0);
    gate.seen(|s| {
        for id in &ids {
            assert_eq!(s.most_open[id], 1, "{id} was probed twice at once");
        }
    });
    // A finished probe's answer is never handed out again: the next listing asks afresh.
    let again = registry.sessions(true).await.expect("listing");
    assert!(states(&again).values().all(|l| *l == Liveness::Live));
    for id in &ids {
        assert_eq!(
            gate.requests(id),
            2,
            "{id} probed again after the flight ended"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_rewritten_mid_flight_gets_its_own_probe_and_answer() {
    let dir = temp_dir();
    let gate = Gate::new();
    let record = RecordJson::fresh();
    let id = record.session_id();
    // The first door answers for another session; the record's rewrite moves to a door that
    // answers for this one. Neither answer may reach the other reading.
    let wrong_door = gate.door("old", "ses_someone_else").await;
    record.clone().url(wrong_door).write_in(dir.path());
    let registry = registry_in(dir.path());
    let first = {
        let registry = registry.clone();
        tokio::spawn(async move { registry.sessions(true).await.expect("listing") })
    };
    until("the first probe to reach its door", || {
        gate.requests("old") == 1
    })
    .await;

    let right_door = gate.door("new", &id).await;
    record.clone().url(right_door.clone()).write_in(dir.path());
    let second = {
        let registry = registry.clone();
        tokio::spawn(async move { registry.sessions(true).await.expect("listing") })
    };
    until("the rewritten record's own probe", || {
        gate.requests("new") == 1
    })
    .await;
    assert_eq!(probes_in_flight(&registry).probes, 2);

    // Same door, new door token: a different probe again (the token is part of what is asked).
    record
        .clone()
        .url(right_door)
        .door_token("a-new-token")
        .write_in(dir.path());
    let third = {
        let registry = registry.clone();
        tokio::spawn(async move { registry.sessions(true).await.expect("listing") })
    };
    until("the probe with the new token", || gate.requests("new") == 2).await;

    gate.release();
    let first = states(&first.await.expect("first"));
    assert!(
        matches!(&first[&id], Liveness::Unreachable { reason } if reason.contains("ses_someone_else")),
        "{first:?}"
    );
    assert_eq!(states(&second.await.expect("second"))[&id], Liveness::Live);
    // The gated door serves the public card only; a token-bearing probe asks for the extended
    // one, which this door does not answer, so the third reading is its own (unreachable) one.
    assert!(matches!(
        states(&third.await.expect("third"))[&id],
        Liveness::Unreachable { .. }
    ));
    assert_eq!(gate.requests("old"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_leaves_does_not_cancel_the_probe_others_wait_on() {
    let dir = temp_dir();
    let gate = Gate::new();
    let id = gate.record_in(dir.path()).await;
    let registry = registry_in(dir.path());
    let spawn_reader = || {
        let (registry, id) = (registry.clone(), id.clone());
        tokio::spawn(async move { registry.session(&id, true).await.expect("reading") })
    };
    let leaving = spawn_reader();
    let staying = spawn_reader();
    until("both callers to wait on one probe", || {
        probes_in_flight(&registry)
            == ProbesInFlight {
                probes: 1,
                waiters: 2,
            }
    })
    .await;
    leaving.abort();
    until("the leaving caller to be gone", || {
        probes_in_flight(&registry).waiters == 1
    })
    .await;
    gate.release();
    let reading = staying.await.expect("staying caller");
    assert_eq!(reading.liveness, Some(Liveness::Live));
    assert_eq!(gate.requests(&reading.record.session_id), 1);
    assert_eq!(gate.seen(|s| s.abandoned), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_caller_leaving_stops_the_probe() {
    let dir = temp_dir();
    let gate = Gate::new();
    let id = gate.record_in(dir.path()).await;
    let registry = registry_in(dir.path());
    let caller = {
        let registry = registry.clone();
        tokio::spawn(async move { registry.sessions(true).await })
    };
    until("the probe to reach the door", || gate.requests(&id) == 1).await;
    caller.abort();
    until("the door to see the probe hang up", || {
        gate.seen(|s| s.abandoned) == 1
    })
    .await;
    assert_eq!(probes_in_flight(&registry).probes, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_limit_bounds_the_doors_asked_at_once() {
    let dir = temp_dir();
    let gate = Gate::new();
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(gate.record_in(dir.path()).await);
    }
    let probe = DoorProbe::with_limits(Duration::from_secs(2), Duration::from_secs(5), 2);
    assert_eq!(probe.max_in_flight(), 2);
    let registry = Arc::new(Registry::new(dir.path(), probe));
    let listing = {
        let registry = registry.clone();
        tokio::spawn(async move { registry.sessions(true).await.expect("listing") })
    };
    until("two doors to be asked", || gate.seen(|s| s.open_total) == 2).await;
    // Six probes are in flight in the registry, but only two of them hold a socket.
    until("all six probes to be in flight", || {
        probes_in_flight(&registry).probes == 6
    })
    .await;
    assert_eq!(gate.seen(|s| s.requests.values().sum::<usize>()), 2);
    gate.release();
    let states = states(&listing.await.expect("listing"));
    assert!(ids.iter().all(|id| states[id] == Liveness::Live));
    assert_eq!(gate.seen(|s| s.most_open_total), 2);
    assert_eq!(
        DoorProbe::with_limits(Duration::ZERO, Duration::ZERO, 0).max_in_flight(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verifying_one_record_joins_the_listing_probe_in_flight() {
    let dir = temp_dir();
    let gate = Gate::new();
    let id = gate.record_in(dir.path()).await;
    let registry = registry_in(dir.path());
    let listing = {
        let registry = registry.clone();
        tokio::spawn(async move { registry.sessions(true).await.expect("listing") })
    };
    until("the listing's probe to reach the door", || {
        gate.requests(&id) == 1
    })
    .await;
    let scanned = murmur_registry::running::scan(dir.path(), None)
        .expect("scan")
        .records
        .remove(0);
    let single = {
        let registry = registry.clone();
        tokio::spawn(async move { registry.verify(vec![scanned], true).await.remove(0) })
    };
    until("the single verification to wait on the same probe", || {
        probes_in_flight(&registry)
            == ProbesInFlight {
                probes: 1,
                waiters: 2,
            }
    })
    .await;
    gate.release();
    assert_eq!(single.await.expect("verify").liveness, Some(Liveness::Live));
    assert_eq!(
        states(&listing.await.expect("listing"))[&id],
        Liveness::Live
    );
    assert_eq!(gate.requests(&id), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_is_never_handed_to_a_caller_who_came_after_it() {
    let dir = temp_dir();
    let (held, open) = (Gate::new(), Gate::new());
    open.release();
    // The listing awaits the newer record first, so it still holds the older record's finished
    // probe while it waits for the held door.
    let older = RecordJson::fresh();
    let older_id = older.session_id();
    older
        .url(open.door(&older_id, &older_id).await)
        .write_in(dir.path());
    let newer = RecordJson::fresh();
    let newer_id = newer.session_id();
    newer
        .url(held.door(&newer_id, &newer_id).await)
        .write_in(dir.path());
    let registry = registry_in(dir.path());
    let listing = {
        let registry = registry.clone();
        tokio::spawn(async move { registry.sessions(true).await.expect("listing") })
    };
    until(
        "the open door to have answered and the held one to wait",
        || {
            open.requests(&older_id) == 1
                && held.requests(&newer_id) == 1
                && probes_in_flight(&registry).probes == 1
        },
    )
    .await;
    let scanned = murmur_registry::running::scan(dir.path(), None)
        .expect("scan")
        .records
        .into_iter()
        .find(|r| r.session_id == older_id)
        .expect("older record");
    let reading = registry.verify(vec![scanned], true).await.remove(0);
    assert_eq!(reading.liveness, Some(Liveness::Live));
    assert_eq!(
        open.requests(&older_id),
        2,
        "a caller after the answer gets a probe of its own"
    );
    held.release();
    assert!(
        states(&listing.await.expect("listing"))
            .values()
            .all(|l| *l == Liveness::Live)
    );
}

/// Listings share directory passes only forward in time: while other callers list without
/// pause, a record written (or removed) before a listing is asked for is always in it (or out
/// of it). A listing that joined a pass already under way would miss some of these.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_pass_never_answers_a_listing_with_a_reading_older_than_its_question() {
    let dir = temp_dir();
    // More entries than are read inline, so passes go through the pool and overlap the calls.
    for _ in 0..40 {
        RecordJson::fresh().no_door().write_in(dir.path());
    }
    let registry = registry_in(dir.path());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let listers: Vec<_> = (0..8)
        .map(|_| {
            let (registry, stop) = (Arc::clone(&registry), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut listings = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    registry.sessions(false).await.expect("listing");
                    listings += 1;
                }
                listings
            })
        })
        .collect();
    // Bounded, so a sharing that spins instead of answering fails here rather than hanging.
    tokio::time::timeout(Duration::from_secs(120), rounds(&registry, dir.path()))
        .await
        .expect("300 rounds of listings answered within two minutes");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for lister in listers {
        assert!(lister.await.expect("lister") > 0, "every lister listed");
    }
}

/// Write a record and list, remove it and list, 300 times: each listing must show exactly
/// what was on disk when it was asked for.
async fn rounds(registry: &Registry, dir: &std::path::Path) {
    for round in 0..300 {
        let record = RecordJson::fresh().no_door();
        let id = record.session_id();
        let path = record.write_in(dir);
        let listing = registry.sessions(false).await.expect("listing");
        assert!(
            listing.readings.iter().any(|r| r.record.session_id == id),
            "round {round}: a record written before the listing was asked for is missing"
        );
        std::fs::remove_file(&path).expect("remove the record");
        let listing = registry.sessions(false).await.expect("listing");
        assert!(
            listing.readings.iter().all(|r| r.record.session_id != id),
            "round {round}: a record removed before the listing was asked for is listed"
        );
    }
}
