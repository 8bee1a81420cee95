//! Scenario `chaos` (`--only chaos --secs N [--fleet]`; run only when named): a correctness
//! soak, not a measurement. Capsules start and end every way, decoys come and go, records are
//! crafted and rewritten ([`crate::chaos_world`]); clients list, stream `/events`, stop, signal
//! and prune all the while ([`crate::chaos_clients`]); and the registry itself is SIGKILLed and
//! started again over the same `HOME`, and with `--fleet` so is etcd (same data directory).
//!
//! Every so often a quiesce phase stops the churn and the requests that change anything (the
//! gate), then polls, under a generous deadline, until every listener's picture equals a fresh
//! listing, no quarantine entry is left in the running directory and, with the fleet,
//! `/fleet/sessions` for this host equals the listing too. The kernel-side invariants are
//! checked throughout by a monitor thread.
//!
//! Invariant: a broken invariant is a violation, and any violation fails the scenario (a
//! non-zero exit) after the summary; timings are printed, never asserted.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::capsules::Rng;
use crate::chaos_clients::{Listening, listener, lock_listening, worker};
use crate::chaos_picture::{Picture, difference, picture_of};
use crate::chaos_registry::ChaosRegistry;
use crate::chaos_tally::Shared;
use crate::chaos_world::{World, churn_step, lock};

/// Workers asking the registry at once.
const WORKERS: u64 = 4;
/// `/events` listeners at once.
const LISTENERS: usize = 3;
/// The longest a quiesce phase may take to settle before it is a violation. Generous: it is
/// how long a broken registry takes to fail, never how long a phase takes.
const SETTLE_DEADLINE: Duration = Duration::from_secs(120);
/// The host id the registry publishes as, with the fleet on.
const HOST_ID: &str = "chaos-host";

/// What the command line asks.
pub struct ChaosArgs {
    pub secs: u64,
    pub fleet: bool,
}

impl ChaosArgs {
    /// `--secs N` (default 60) and `--fleet`.
    pub fn from_args(args: &[String]) -> Self {
        let secs = args
            .iter()
            .position(|a| a == "--secs")
            .and_then(|at| args.get(at + 1))
            .and_then(|s| s.parse().ok())
            .unwrap_or(60);
        Self {
            secs,
            fleet: args.iter().any(|a| a == "--fleet"),
        }
    }
}

/// When the director does what next.
struct Schedule {
    quiesce: Instant,
    registry_kill: Instant,
    etcd_restart: Instant,
}

impl Schedule {
    fn after(rng: &mut Rng, base: u64, spread: usize) -> Instant {
        Instant::now() + Duration::from_secs(base + rng.below(spread) as u64)
    }
}

#[cfg(feature = "fleet")]
type Etcd = Option<crate::etcd::Etcd>;
#[cfg(not(feature = "fleet"))]
type Etcd = Option<()>;

/// The scenario: set up, run the monitor, the churn, the clients and the director for
/// `args.secs`, then tear down and report (a violation fails it there).
pub async fn chaos_soak(args: ChaosArgs) {
    let seed = Rng::from_clock().0;
    #[cfg(not(feature = "fleet"))]
    assert!(
        !args.fleet,
        "--fleet needs the `fleet` feature (cargo bench --features fleet)"
    );
    let (mut etcd, extra) = fleet_parts(args.fleet).await;
    let mut registry = ChaosRegistry::start(extra);
    let logs = crate::records::private_temp_dir();
    let shared = Arc::new(Shared::new(registry.base(), registry.token(), args.fleet));
    let world = Arc::new(Mutex::new(World::new(&registry.running_dir(), logs.path())));
    lock(&world).start_protected(&shared);
    let protected: Vec<String> = lock(&world).protected.iter().cloned().collect();
    println!(
        "chaos: {} s, seed {seed}, fleet {}, load average {}",
        args.secs,
        if args.fleet { "on" } else { "off" },
        crate::figures::load_average()
    );

    let monitor = spawn_monitor(&shared, &world);
    let churn = spawn_churn(&shared, &world, seed);
    let (tasks, listenings) = spawn_clients(&shared, &world, seed, &protected);
    let started = Instant::now();
    let timings = direct(&args, &mut registry, &mut etcd, &shared, &listenings, seed).await;

    shared.done.store(true, Ordering::Relaxed);
    let _ = monitor.join();
    let _ = churn.join();
    // `abort` only asks: a task's future, and its hold on the world, is dropped when the
    // runtime next reaches it. Awaiting each one is what makes the hold gone.
    for task in &tasks {
        task.abort();
    }
    for task in tasks {
        if let Err(ended) = task.await
            && ended.is_panic()
        {
            shared.violation(format!("a client task panicked: {ended}"));
        }
    }
    let world = Arc::try_unwrap(world)
        .ok()
        .expect("the monitor, the churn and the clients have ended")
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    world.finish(&shared);
    let stderr = registry.finish();
    shared.invariants.add("registry stderr read for panics");
    if stderr.contains("panicked") {
        shared.violation(format!("the registry panicked:\n{stderr}"));
    }
    // etcd (with the fleet) is killed and reaped here, its data directory removed.
    let _ = etcd.take();
    report(&shared, &args, started.elapsed(), &timings);
}

/// The monitor thread: checks the kernel-side invariants until done, the protected
/// capsules' signal logs every hundredth round.
fn spawn_monitor(shared: &Arc<Shared>, world: &Arc<Mutex<World>>) -> std::thread::JoinHandle<()> {
    let (shared, world) = (shared.clone(), world.clone());
    std::thread::spawn(move || {
        for round in 0u64.. {
            if shared.is_done() {
                break;
            }
            let mut w = lock(&world);
            w.check(&shared);
            if round % 100 == 0 {
                w.check_protected_logs(&shared);
            }
            drop(w);
            // The monitor's pace.
            std::thread::sleep(Duration::from_millis(5));
        }
    })
}

/// The churn thread: one churn step at a time under the gate's read side, until done.
fn spawn_churn(
    shared: &Arc<Shared>,
    world: &Arc<Mutex<World>>,
    seed: u64,
) -> std::thread::JoinHandle<()> {
    let (shared, world) = (shared.clone(), world.clone());
    std::thread::spawn(move || {
        let mut rng = Rng(seed);
        while !shared.is_done() {
            {
                let _held = shared.gate.blocking_read();
                churn_step(&shared, &world, &mut rng);
            }
            // The churn's pace.
            std::thread::sleep(Duration::from_millis(50 + rng.below(100) as u64));
        }
    })
}

/// The clients: [`WORKERS`] workers and [`LISTENERS`] `/events` listeners, with what each
/// listener has pictured.
fn spawn_clients(
    shared: &Arc<Shared>,
    world: &Arc<Mutex<World>>,
    seed: u64,
    protected: &[String],
) -> (Vec<tokio::task::JoinHandle<()>>, Vec<Arc<Mutex<Listening>>>) {
    let mut tasks = Vec::new();
    for n in 0..WORKERS {
        let seed = seed.wrapping_mul(n + 7);
        tasks.push(tokio::spawn(worker(shared.clone(), world.clone(), seed)));
    }
    let mut listenings = Vec::new();
    for _ in 0..LISTENERS {
        let state = Arc::new(Mutex::new(Listening::default()));
        listenings.push(state.clone());
        tasks.push(tokio::spawn(listener(
            shared.clone(),
            protected.to_vec(),
            state,
        )));
    }
    (tasks, listenings)
}

/// The director, for `args.secs`: kills and restarts the registry (and etcd, with the
/// fleet) and quiesces on its schedule, then quiesces once more; answers the timings.
async fn direct(
    args: &ChaosArgs,
    registry: &mut ChaosRegistry,
    etcd: &mut Etcd,
    shared: &Shared,
    listenings: &[Arc<Mutex<Listening>>],
    seed: u64,
) -> [(&'static str, Vec<Duration>); 3] {
    let started = Instant::now();
    let mut rng = Rng(seed.rotate_left(17) | 1);
    let mut next = Schedule {
        quiesce: Schedule::after(&mut rng, 12, 10),
        registry_kill: Schedule::after(&mut rng, 6, 12),
        etcd_restart: Schedule::after(&mut rng, 10, 15),
    };
    let (mut settle_times, mut restart_times, mut etcd_times) =
        (Vec::new(), Vec::new(), Vec::new());
    while started.elapsed() < Duration::from_secs(args.secs) {
        // The director's pace.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = Instant::now();
        if now >= next.registry_kill {
            tokio::task::block_in_place(|| registry.restart());
            restart_times.push(now.elapsed());
            shared.set_base(registry.base());
            shared
                .operations
                .add("registry SIGKILLed and started again");
            next.registry_kill = Schedule::after(&mut rng, 6, 12);
        }
        if now >= next.etcd_restart && etcd.is_some() {
            restart_etcd(etcd, shared, &mut rng).await;
            etcd_times.push(now.elapsed());
            next.etcd_restart = Schedule::after(&mut rng, 10, 15);
        }
        if now >= next.quiesce {
            settle_times.push(quiesce(shared, listenings, &registry.running_dir()).await);
            next.quiesce = Schedule::after(&mut rng, 12, 10);
        }
    }
    settle_times.push(quiesce(shared, listenings, &registry.running_dir()).await);
    [
        ("quiesce phases settled in", settle_times),
        ("registry killed and listening again in", restart_times),
        ("etcd killed, away and answering again in", etcd_times),
    ]
}

/// With the fleet: a one-member etcd, and the flags that put the registry in it.
#[cfg(feature = "fleet")]
async fn fleet_parts(fleet: bool) -> (Etcd, Vec<String>) {
    if !fleet {
        return (None, Vec::new());
    }
    let etcd = crate::etcd::Etcd::start().await;
    let flags = crate::fleet::fleet_flags(&etcd, "/chaos", HOST_ID, &["--fleet-ttl", "5s"]);
    (Some(etcd), flags)
}

#[cfg(not(feature = "fleet"))]
async fn fleet_parts(_fleet: bool) -> (Etcd, Vec<String>) {
    (None, Vec::new())
}

/// Kill etcd, leave it away a moment (the churn's pace), start it on the same data directory.
#[cfg(feature = "fleet")]
async fn restart_etcd(etcd: &mut Etcd, shared: &Shared, rng: &mut Rng) {
    let Some(etcd) = etcd else { return };
    etcd.kill();
    tokio::time::sleep(Duration::from_millis(rng.below(3000) as u64)).await;
    etcd.restart().await;
    shared.operations.add("etcd SIGKILLed and started again");
}

#[cfg(not(feature = "fleet"))]
async fn restart_etcd(_etcd: &mut Etcd, _shared: &Shared, _rng: &mut Rng) {}

/// Hold the gate, then poll until every picture agrees; answers how long it took.
async fn quiesce(
    shared: &Shared,
    listenings: &[Arc<Mutex<Listening>>],
    running: &Path,
) -> Duration {
    let _quiet = shared.gate.write().await;
    shared.operations.add("quiesce phases");
    let started = Instant::now();
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client");
    let mut why = String::new();
    while started.elapsed() < SETTLE_DEADLINE {
        match unsettled(shared, &client, listenings, running).await {
            None => {
                count_settled(shared, listenings.len());
                return started.elapsed();
            }
            Some(reason) => why = reason,
        }
        // Polling pace.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    shared.violation(format!("not settled within {SETTLE_DEADLINE:?}: {why}"));
    started.elapsed()
}

fn count_settled(shared: &Shared, listeners: usize) {
    let checks = &shared.invariants;
    checks.add_n(
        "/events pictures equal to a fresh listing",
        listeners as u64,
    );
    checks.add("running directory without quarantine entries");
    if shared.fleet {
        checks.add("/fleet/sessions for this host equal to the listing");
    }
}

/// Why the world has not settled yet (`None` once it has).
async fn unsettled(
    shared: &Shared,
    client: &reqwest::Client,
    listenings: &[Arc<Mutex<Listening>>],
    running: &Path,
) -> Option<String> {
    let listed = match get_picture(shared, client, "/sessions").await {
        Ok(picture) => picture,
        Err(e) => return Some(format!("GET /sessions: {e}")),
    };
    for (n, listening) in listenings.iter().enumerate() {
        let listening = lock_listening(listening);
        if !listening.connected || listening.base != shared.base() {
            return Some(format!(
                "listener {n} is not connected to the registry running now"
            ));
        }
        let diff = difference(&listening.picture, &listed);
        if !diff.is_empty() {
            return Some(format!("listener {n}: {diff}"));
        }
    }
    let quarantined = quarantine_entries(running);
    if !quarantined.is_empty() {
        return Some(format!("quarantine entries left: {quarantined:?}"));
    }
    if shared.fleet {
        let path = format!("/fleet/sessions?host={HOST_ID}&limit=10000");
        let fleet = match get_picture(shared, client, &path).await {
            Ok(picture) => picture,
            Err(e) => return Some(format!("GET /fleet/sessions: {e}")),
        };
        let diff = difference(&fleet, &listed);
        if !diff.is_empty() {
            return Some(format!("fleet: {diff}"));
        }
    }
    None
}

async fn get_picture(
    shared: &Shared,
    client: &reqwest::Client,
    path: &str,
) -> Result<Picture, String> {
    let response = client
        .get(format!("{}{path}", shared.base()))
        .bearer_auth(&shared.token)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let text = response.text().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{status}: {text}"));
    }
    let body = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    Ok(picture_of(&body))
}

/// Names in the running directory that are quarantines (`….unlinking`).
fn quarantine_entries(running: &Path) -> Vec<String> {
    std::fs::read_dir(running)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| name.ends_with(".unlinking"))
                .collect()
        })
        .unwrap_or_default()
}

/// `what min / median / max` of `times`, in milliseconds.
fn timing_line(what: &str, times: &[Duration]) -> String {
    let mut sorted = times.to_vec();
    sorted.sort();
    let ms = |d: Option<&Duration>| d.map_or(0, Duration::as_millis);
    format!(
        "{what} min {} ms / median {} ms / max {} ms ({} times)\n",
        ms(sorted.first()),
        ms(sorted.get(sorted.len() / 2)),
        ms(sorted.last()),
        sorted.len()
    )
}

fn report(shared: &Shared, args: &ChaosArgs, took: Duration, timings: &[(&str, Vec<Duration>)]) {
    let violations = shared.violations();
    let timings: String = timings
        .iter()
        .map(|(what, t)| timing_line(what, t))
        .collect();
    println!(
        "chaos: done in {:.0} s (asked {} s, fleet {}), load average {}\n\
         {timings}operations:\n{}invariants checked:\n{}violations: {}",
        took.as_secs_f64(),
        args.secs,
        if args.fleet { "on" } else { "off" },
        crate::figures::load_average(),
        shared.operations.lines(),
        shared.invariants.lines(),
        violations.len()
    );
    assert!(
        violations.is_empty(),
        "{} violations:\n{}",
        violations.len(),
        violations.join("\n")
    );
}
