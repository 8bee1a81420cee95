//! Soak: list, liveness, prune, signal and stop hammered concurrently against the real server
//! while capsules start, exit, get SIGKILLed by the test and leave records naming pids that
//! are reused; then the two promises are checked against the kernel.
//!
//! - **No record of a live process is removed.** A monitor checks, over and over, that every
//!   capsule whose record is missing has exited (`waitpid` says so; a zombie is reaped and
//!   counts as exited, as it does for the registry). Capsules never asked to stop must still
//!   run, record in place, at the end.
//! - **No process other than the one a record named is signalled.** Every capsule
//!   ([`tests/fixtures/capsule.py`], started through `common::capsules`) logs each catchable signal it receives. Bystanders — live
//!   processes named by crafted records with the wrong start token, as after pid reuse — are
//!   asked to be signalled and stopped all the time: they must end with an empty log, still
//!   running (so no SIGKILL either). Protected capsules, never asked, likewise.
//!
//! Runs for `MURMUR_SOAK_SECS` seconds (default 15) and prints what it reached.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::capsules::{CapsuleSpec, Rng, SoakCapsule};
use common::server::TestServer;
use common::*;
use murmur_registry::running::{DoorProbe, process_start_token};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// May be signalled or stopped through the registry, or SIGKILLed by the test.
    Target,
    /// Never asked about; must survive untouched with its record in place.
    Protected,
    /// Named by a crafted record with the wrong start token; asked about all the time.
    Bystander,
}

struct Capsule {
    kind: Kind,
    process: SoakCapsule,
    exited: Option<std::process::ExitStatus>,
}

impl Capsule {
    /// Whether its own record is in place (a bystander has none of its own).
    fn record_exists(&self) -> bool {
        self.process.record.as_ref().is_some_and(|r| r.exists())
    }
}

#[derive(Default)]
struct World {
    capsules: Vec<Capsule>,
    /// Session ids the HTTP workers may ask about, by kind.
    ids: BTreeMap<String, Kind>,
    /// Pids of capsules that have exited while their record may remain.
    dead_pids: HashSet<u32>,
    violations: Vec<String>,
}

#[derive(Default)]
struct Counts {
    requests: AtomicU64,
    lists: AtomicU64,
    liveness: AtomicU64,
    prunes: AtomicU64,
    pruned_records: AtomicU64,
    signals_asked: AtomicU64,
    signals_sent: AtomicU64,
    signals_refused_or_gone: AtomicU64,
    stops_asked: AtomicU64,
    stops_done: AtomicU64,
    bystander_asks: AtomicU64,
    capsules_started: AtomicU64,
    sigkills_injected: AtomicU64,
    bystander_records: AtomicU64,
    pids_reused: AtomicU64,
    server_errors: AtomicU64,
    monitor_checks: AtomicU64,
}

fn spawn_capsule(running: &Path, logs: &Path, kind: Kind) -> Capsule {
    let mut spec = CapsuleSpec::new(&session_id(), logs);
    spec.exit_on_term = kind == Kind::Target;
    if kind != Kind::Bystander {
        spec.running_dir = Some(running.to_owned());
    }
    let process = SoakCapsule::spawn(&spec).expect("spawn a capsule");
    if kind == Kind::Bystander {
        // A record naming this live pid with a start token it never had: what a reused pid
        // looks like to the registry.
        RecordJson::new(&process.session_id)
            .process(process.pid, &wrong_start_token(process.pid))
            .no_door()
            .write_in(running);
    }
    Capsule {
        kind,
        process,
        exited: None,
    }
}

/// What the workers, the monitor and the churn share.
#[derive(Clone)]
struct Shared {
    world: Arc<Mutex<World>>,
    counts: Arc<Counts>,
    done: Arc<AtomicBool>,
}

#[test]
fn soak_list_liveness_prune_signal_and_stop_under_churn() {
    let secs = soak_secs();
    let duration = Duration::from_secs(secs);
    let seed = Rng::from_clock().0;
    let home = temp_dir();
    let (running, logs) = make_dirs(home.path());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut server = runtime.block_on(start_server(&running));
    let (base, token) = (server.base().to_owned(), server.token().to_owned());
    let shared = Shared {
        world: Arc::new(Mutex::new(World::default())),
        counts: Arc::new(Counts::default()),
        done: Arc::new(AtomicBool::new(false)),
    };
    spawn_first_capsules(&shared, &running, &logs);
    let workers = spawn_http_workers(&runtime, &shared, seed, &base, &token);
    let monitor = spawn_monitor(&shared);
    churn(&shared, &running, &logs, seed, duration);
    shared.done.store(true, Ordering::Relaxed);
    monitor.join().expect("monitor");
    runtime.block_on(async {
        for worker in workers {
            let _ = tokio::time::timeout(Duration::from_secs(30), worker).await;
        }
    });

    let counts = &shared.counts;
    let mut w = shared.world.lock().expect("world");
    check_records(&mut w, counts);
    let violations = verdict(&mut w);
    let serving = server.serving().shut_down();
    runtime.block_on(async {
        let _ = tokio::time::timeout(Duration::from_secs(30), serving).await;
    });
    print_reached(secs, seed, counts, violations.len());
    for capsule in &mut w.capsules {
        let _ = capsule.process.child.kill();
        let _ = capsule.process.child.wait();
    }
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
    assert!(violations.is_empty(), "violations: {violations:#?}");
    assert!(n(&counts.requests) > 50, "the soak barely ran");
    assert!(
        n(&counts.bystander_asks) > 0,
        "no bystander was ever asked about"
    );
}

/// How long to soak: `MURMUR_SOAK_SECS`, 15 s by default.
fn soak_secs() -> u64 {
    std::env::var("MURMUR_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15)
}

/// The running directory (0700) and the capsules' log directory under `home`.
fn make_dirs(home: &Path) -> (PathBuf, PathBuf) {
    let running = home.join("running");
    let logs = home.join("logs");
    std::fs::create_dir(&running).expect("running");
    std::fs::create_dir(&logs).expect("logs");
    std::fs::set_permissions(
        &running,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .expect("0700");
    (running, logs)
}

/// The real server on `running`, with door deadlines long enough for a loaded machine.
async fn start_server(running: &Path) -> TestServer {
    TestServer::builder()
        .probe(DoorProbe::with_deadlines(
            Duration::from_secs(2),
            Duration::from_secs(3),
        ))
        .running_dir(running)
        .start()
        .await
}

/// Three protected capsules, four bystanders (crafted wrong-start records) and six targets.
fn spawn_first_capsules(shared: &Shared, running: &Path, logs: &Path) {
    let counts = &shared.counts;
    let mut w = shared.world.lock().expect("world");
    for kind in [Kind::Protected, Kind::Protected, Kind::Protected]
        .into_iter()
        .chain([Kind::Bystander; 4])
        .chain([Kind::Target; 6])
    {
        let capsule = spawn_capsule(running, logs, kind);
        w.ids.insert(capsule.process.session_id.clone(), kind);
        counts.capsules_started.fetch_add(1, Ordering::Relaxed);
        if kind == Kind::Bystander {
            counts.bystander_records.fetch_add(1, Ordering::Relaxed);
        }
        w.capsules.push(capsule);
    }
}

/// Six HTTP workers asking list, liveness, prune, signal and stop at random until `done`;
/// a 5xx answer is a violation.
fn spawn_http_workers(
    runtime: &tokio::runtime::Runtime,
    shared: &Shared,
    seed: u64,
    base: &str,
    token: &str,
) -> Vec<tokio::task::JoinHandle<()>> {
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let mut workers = Vec::new();
    for worker in 0..6u64 {
        let (client, base, token) = (client.clone(), base.to_owned(), token.to_owned());
        let shared = shared.clone();
        workers.push(runtime.spawn(async move {
            let mut rng = Rng(seed.wrapping_mul(worker + 7) | 1);
            while !shared.done.load(Ordering::Relaxed) {
                tokio::task::yield_now().await;
                let Some((id, kind)) = pick_session(&shared.world, &mut rng) else {
                    continue;
                };
                let action = rng.below(10);
                let Some((method, path)) = pick_request(action, &id, kind, &mut rng) else {
                    continue;
                };
                let request = build_request(&client, &base, &token, method, &path, &mut rng);
                let Ok(response) = request.send().await else {
                    continue;
                };
                let status = response.status().as_u16();
                let body: serde_json::Value =
                    serde_json::from_str(&response.text().await.unwrap_or_default())
                        .unwrap_or_default();
                let counts = &shared.counts;
                counts.requests.fetch_add(1, Ordering::Relaxed);
                if status >= 500 {
                    counts.server_errors.fetch_add(1, Ordering::Relaxed);
                    shared
                        .world
                        .lock()
                        .expect("world")
                        .violations
                        .push(format!("{method} {path} answered {status}: {body}"));
                }
                if kind == Kind::Bystander && method == "POST" {
                    counts.bystander_asks.fetch_add(1, Ordering::Relaxed);
                }
                count_answer(counts, method, action, &path, status, &body);
            }
        }));
    }
    workers
}

/// A session id the workers may ask about, at random; none while there are none.
fn pick_session(world: &Mutex<World>, rng: &mut Rng) -> Option<(String, Kind)> {
    let w = world.lock().expect("world");
    if w.ids.is_empty() {
        return None;
    }
    let pick = rng.below(w.ids.len());
    let (id, kind) = w.ids.iter().nth(pick).expect("picked");
    Some((id.clone(), *kind))
}

/// The method and path `action` (0..10) names; none for a stop or signal of a protected
/// capsule, which is never asked about.
fn pick_request(
    action: usize,
    id: &str,
    kind: Kind,
    rng: &mut Rng,
) -> Option<(&'static str, String)> {
    Some(match action {
        0 | 1 => ("GET", "/sessions".to_owned()),
        2 => ("GET", "/sessions?probe=false".to_owned()),
        3 | 4 => ("GET", format!("/sessions/{id}/liveness")),
        5 => ("DELETE", "/sessions".to_owned()),
        6 => ("DELETE", format!("/sessions/{id}")),
        _ => {
            // Never ask about a protected capsule; ask about the others, the
            // bystanders above all.
            if kind == Kind::Protected {
                return None;
            }
            if rng.below(2) == 0 {
                ("POST", format!("/sessions/{id}/stop?timeout=0"))
            } else {
                ("POST", format!("/sessions/{id}/signal"))
            }
        }
    })
}

/// The authorised request; a signal request carries SIGTERM or SIGKILL at random.
fn build_request(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    method: &str,
    path: &str,
    rng: &mut Rng,
) -> reqwest::RequestBuilder {
    let mut request = client
        .request(method.parse().expect("method"), format!("{base}{path}"))
        .bearer_auth(token);
    if path.ends_with("/signal") {
        let signal = if rng.below(2) == 0 {
            "SIGTERM"
        } else {
            "SIGKILL"
        };
        request = request
            .header("content-type", "application/json")
            .body(format!(r#"{{"signal":"{signal}"}}"#));
    }
    request
}

/// Counts one answer under what was asked and what it did.
fn count_answer(
    c: &Counts,
    method: &str,
    action: usize,
    path: &str,
    status: u16,
    body: &serde_json::Value,
) {
    match (method, action) {
        ("GET", 0..=2) => c.lists.fetch_add(1, Ordering::Relaxed),
        ("GET", _) => c.liveness.fetch_add(1, Ordering::Relaxed),
        ("DELETE", 5) => {
            let n = body["pruned"].as_array().map_or(0, Vec::len) as u64;
            c.pruned_records.fetch_add(n, Ordering::Relaxed);
            c.prunes.fetch_add(1, Ordering::Relaxed)
        }
        ("DELETE", _) => {
            if status == 200 && body["outcome"] == "pruned" {
                c.pruned_records.fetch_add(1, Ordering::Relaxed);
            }
            c.prunes.fetch_add(1, Ordering::Relaxed)
        }
        _ if path.ends_with("/stop?timeout=0") => {
            if status == 200 && body["outcome"] == "stopped" {
                c.stops_done.fetch_add(1, Ordering::Relaxed);
            }
            c.stops_asked.fetch_add(1, Ordering::Relaxed)
        }
        _ => {
            if status == 200 {
                c.signals_sent.fetch_add(1, Ordering::Relaxed);
            } else {
                c.signals_refused_or_gone.fetch_add(1, Ordering::Relaxed);
            }
            c.signals_asked.fetch_add(1, Ordering::Relaxed)
        }
    };
}

/// The monitor, on its own thread: `check_records` over and over until `done`.
fn spawn_monitor(shared: &Shared) -> std::thread::JoinHandle<()> {
    let shared = shared.clone();
    std::thread::spawn(move || {
        while !shared.done.load(Ordering::Relaxed) {
            check_records(&mut shared.world.lock().expect("world"), &shared.counts);
            // Pacing, not synchronisation: the check itself is what matters.
            std::thread::sleep(Duration::from_millis(2));
        }
    })
}

/// The churn, on this thread for `duration`: keeps six targets running, SIGKILLs one now
/// and then, and crafts wrong-start records naming protected pids.
fn churn(shared: &Shared, running: &Path, logs: &Path, seed: u64, duration: Duration) {
    let mut rng = Rng(seed);
    let started = Instant::now();
    let pace = Duration::from_millis(20);
    while started.elapsed() < duration {
        replace_exited_targets(shared, running, logs);
        if rng.below(3) == 0 {
            kill_a_target(shared, &mut rng);
        }
        if rng.below(3) == 0 && !craft_bystander_record(shared, running, &mut rng) {
            continue;
        }
        std::thread::sleep(pace);
    }
}

/// Checks the records, then starts a target if fewer than six run; counts a pid reused.
fn replace_exited_targets(shared: &Shared, running: &Path, logs: &Path) {
    let counts = &shared.counts;
    let mut w = shared.world.lock().expect("world");
    check_records(&mut w, counts);
    let targets_running = w
        .capsules
        .iter()
        .filter(|c| c.kind == Kind::Target && c.exited.is_none())
        .count();
    drop(w);
    if targets_running < 6 {
        let capsule = spawn_capsule(running, logs, Kind::Target);
        counts.capsules_started.fetch_add(1, Ordering::Relaxed);
        let mut w = shared.world.lock().expect("world");
        if w.dead_pids.contains(&capsule.process.pid) {
            counts.pids_reused.fetch_add(1, Ordering::Relaxed);
        }
        w.ids
            .insert(capsule.process.session_id.clone(), Kind::Target);
        w.capsules.push(capsule);
    }
}

/// A crash: SIGKILL from the test itself to a running target, record left behind.
fn kill_a_target(shared: &Shared, rng: &mut Rng) {
    let mut w = shared.world.lock().expect("world");
    let running_targets: Vec<usize> = w
        .capsules
        .iter()
        .enumerate()
        .filter(|(_, c)| c.kind == Kind::Target && c.exited.is_none())
        .map(|(i, _)| i)
        .collect();
    if !running_targets.is_empty() {
        let i = running_targets[rng.below(running_targets.len())];
        if w.capsules[i].process.child.kill().is_ok() {
            shared
                .counts
                .sigkills_injected
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A fresh bystander record naming a live protected pid, wrong start token; false (and
/// nothing written) when no protected pid is still held.
fn craft_bystander_record(shared: &Shared, running: &Path, rng: &mut Rng) -> bool {
    let mut w = shared.world.lock().expect("world");
    // Only a pid still held: a protected capsule that died is a violation the verdict
    // reports, not a reason to stop the churn.
    let protected: Vec<u32> = w
        .capsules
        .iter()
        .filter(|c| c.kind == Kind::Protected && c.exited.is_none())
        .map(|c| c.process.pid)
        .filter(|&pid| process_start_token(pid).is_some())
        .collect();
    if protected.is_empty() {
        return false;
    }
    let pid = protected[rng.below(protected.len())];
    let record = RecordJson::fresh()
        .process(pid, &wrong_start_token(pid))
        .no_door();
    record.write_in(running);
    w.ids.insert(record.session_id(), Kind::Bystander);
    shared
        .counts
        .bystander_records
        .fetch_add(1, Ordering::Relaxed);
    true
}

/// The two promises, checked against the kernel: the monitor's violations and each
/// capsule's own (see [`capsule_violations`]).
fn verdict(w: &mut World) -> Vec<String> {
    let mut violations = std::mem::take(&mut w.violations);
    for capsule in &mut w.capsules {
        capsule_violations(capsule, &mut violations);
    }
    violations
}

/// A protected capsule or bystander must still run, unsignalled (a protected one with its
/// record in place); a target may only have had SIGTERM, and ended by no signal but SIGKILL.
fn capsule_violations(capsule: &mut Capsule, violations: &mut Vec<String>) {
    let signals = capsule.process.signals();
    match capsule.kind {
        Kind::Protected | Kind::Bystander => {
            if capsule.exited.is_some() || capsule.process.child.try_wait().ok().flatten().is_some()
            {
                violations.push(format!(
                    "{:?} pid {} is no longer running",
                    capsule.kind, capsule.process.pid
                ));
            }
            if !signals.is_empty() {
                violations.push(format!(
                    "{:?} pid {} received signals {signals:?}",
                    capsule.kind, capsule.process.pid
                ));
            }
            if capsule.kind == Kind::Protected && !capsule.record_exists() {
                violations.push(format!(
                    "protected record {} removed",
                    capsule.process.session_id
                ));
            }
        }
        Kind::Target => {
            if signals.iter().any(|&s| s != libc_sigterm()) {
                violations.push(format!(
                    "target pid {} got {signals:?}",
                    capsule.process.pid
                ));
            }
            if let Some(status) = capsule.exited
                && status.signal().is_some_and(|s| s != 9)
            {
                violations.push(format!(
                    "target pid {} ended by {status:?}",
                    capsule.process.pid
                ));
            }
        }
    }
}

/// Prints what the soak reached (the figures a reader of the CI log looks for).
fn print_reached(secs: u64, seed: u64, c: &Counts, violations: usize) {
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
    eprintln!(
        "soak ({secs} s, seed {seed}): {} requests ({} lists, {} liveness, {} prunes removing {} records, \
         {} signals asked / {} sent / {} refused or already gone, {} stops asked / {} stopped, \
         {} asks naming bystanders); {} capsules started, {} SIGKILLs injected by the test, \
         {} crafted wrong-start records, {} pids reused by a later capsule, {} monitor checks; \
         {} 5xx; {} violations",
        n(&c.requests),
        n(&c.lists),
        n(&c.liveness),
        n(&c.prunes),
        n(&c.pruned_records),
        n(&c.signals_asked),
        n(&c.signals_sent),
        n(&c.signals_refused_or_gone),
        n(&c.stops_asked),
        n(&c.stops_done),
        n(&c.bystander_asks),
        n(&c.capsules_started),
        n(&c.sigkills_injected),
        n(&c.bystander_records),
        n(&c.pids_reused),
        n(&c.monitor_checks),
        n(&c.server_errors),
        violations,
    );
}

fn libc_sigterm() -> i32 {
    15
}

/// The monitor: a capsule whose record is missing must have exited. Reaps what has exited.
fn check_records(w: &mut World, counts: &Counts) {
    let mut newly_dead = Vec::new();
    let mut violations = Vec::new();
    for capsule in &mut w.capsules {
        if capsule.exited.is_some() || capsule.kind == Kind::Bystander {
            continue;
        }
        // The record is looked at first: if it is gone and the process has not exited
        // (`try_wait` reaps a zombie and reports it exited), a live record was removed.
        let missing = !capsule.record_exists();
        match capsule.process.child.try_wait() {
            Ok(Some(status)) => {
                capsule.exited = Some(status);
                newly_dead.push(capsule.process.pid);
            }
            Ok(None) if missing => violations.push(format!(
                "the record of live {:?} pid {} ({}) was removed",
                capsule.kind, capsule.process.pid, capsule.process.session_id
            )),
            _ => {}
        }
        counts.monitor_checks.fetch_add(1, Ordering::Relaxed);
    }
    w.dead_pids.extend(newly_dead);
    w.violations.extend(violations);
    // Keep start tokens honest: a capsule still running must still have the token it wrote.
    for capsule in &w.capsules {
        if capsule.exited.is_none() && capsule.kind != Kind::Bystander {
            debug_assert!(process_start_token(capsule.process.pid).is_some());
        }
    }
}
