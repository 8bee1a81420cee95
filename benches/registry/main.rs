//! The registry at scale: `cargo bench --bench registry` (add `-- --full-baseline` to run the
//! slow-door baseline over all 100 records instead of a sample; about five minutes more).
//!
//! Every figure comes from real things: record files in a private temporary directory, doors
//! served by a separate process (this same executable, re-run as `--door-host`) that holds many
//! listeners and answers on each for its own session, records naming a real process by its pid
//! and real start token (the door host itself, or one of many processes forked by this
//! executable re-run as `--pid-holders`), and the real `murmur-registry serve` binary asked over
//! loopback HTTP by a load generator in this process.
//!
//! Two kinds of baseline: the first scenarios compare against upstream's way of verifying (one
//! record at a time, in this process); the issue-15 scenarios run the same scenario against
//! the pre-issue binary named by `MURMUR_BENCH_BASELINE_BIN`, in the same run.
//!
//! Figures, not assertions: the bench never fails on a missed target; it says `MISSED`. The
//! machine is shared and noisy, so latencies are reported as min/median/max of several runs.
//! Each scenario, and each measurement in it, is a named step (`step!(name(…))`, one function
//! each), so a broken premise fails the run as `bench step `name` failed: …`.

use std::time::{Duration, Instant};

/// Run one step (`step!(name(args))`); a failure in it fails the bench naming the step.
macro_rules! step {
    ($step:ident($($arg:expr),*)) => {
        $crate::steps::run_step(
            concat!("bench step `", stringify!($step), "`"),
            $step($($arg),*),
        )
        .await
    };
}

mod binaries;
mod chaos;
mod chaos_clients;
mod chaos_picture;
mod chaos_registry;
mod chaos_tally;
mod chaos_world;
mod door_host;
mod event_listener;
mod figures;
mod fleet;
#[cfg(feature = "fleet")]
mod fleet_departure;
#[cfg(feature = "fleet")]
mod fleet_listing;
#[cfg(feature = "fleet")]
mod fleet_publishing;
#[cfg(feature = "fleet")]
mod fleet_scale;
#[cfg(feature = "fleet")]
#[allow(dead_code)]
#[path = "../../tests/common/fleet_sim.rs"]
mod fleet_sim;
mod idle_listener;
mod include_card;
mod kill_to_removed;
mod lean;
mod many;
mod mcp;
mod mcp_client;
mod perf_counts;
mod pid_holders;
mod pollers;
mod records;
mod resources;
mod sequential;
mod server;
mod slow;
mod ten_thousand;
mod threaded_process;
mod typed_client;

// The chaos scenario starts its capsules exactly as the soak test does.
#[path = "../../tests/common/capsules.rs"]
mod capsules;
// The served binary is started and read exactly as the tests do; the bench uses part of it.
#[allow(dead_code)]
#[path = "../../tests/common/served.rs"]
mod served;
#[path = "../../tests/common/steps.rs"]
mod steps;
// The fleet scenario's etcd is started exactly as the fleet tests start theirs.
/// The certificates `etcd` serves TLS with.
#[cfg(feature = "fleet")]
#[allow(dead_code)]
#[path = "../../tests/common/certs.rs"]
mod certs;
#[cfg(feature = "fleet")]
#[allow(dead_code)]
#[path = "../../tests/common/etcd.rs"]
mod etcd;
/// `fleet-scale` with the sizes `args` give.
#[cfg(feature = "fleet")]
async fn fleet_scale_figures(rows: &mut Vec<Row>, args: &[String]) {
    fleet_scale::fleet_scale(rows, fleet_scale::Scale::from_args(args)).await;
}
/// The private temporary directory `etcd` keeps its data in.
#[cfg(feature = "fleet")]
use records::private_temp_dir as temp_dir;

use binaries::Binaries;
use figures::{Row, load_average, print_header};
use fleet::fleet_figures;
use idle_listener::idle_with_one_listener;
use include_card::listing_with_cards;
use kill_to_removed::sigkill_to_removed;
use lean::lean_path_throughput_and_memory;
use many::many_live_records;
use mcp::mcp_figures;
use pollers::pollers_at_once;
use resources::resources_over_a_thousand_processes;
use slow::slow_doors;
use ten_thousand::ten_thousand_records;
use threaded_process::probe_false_over_threaded_process;
use typed_client::typed_client_overhead;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--door-host") {
        let number = |n: usize| args.get(at + n).and_then(|a| a.parse::<usize>().ok());
        let tag = args.get(at + 3).cloned().unwrap_or_default();
        door_host::serve_doors(door_host::DoorHostArgs {
            count: number(1).unwrap_or(1),
            delay: Duration::from_millis(number(2).unwrap_or(0) as u64),
            tag,
            threads: number(4).unwrap_or(0),
        });
        return;
    }
    if let Some(at) = args.iter().position(|a| a == "--pid-holders") {
        let count = args.get(at + 1).and_then(|a| a.parse().ok()).unwrap_or(1);
        pid_holders::hold_pids(count);
        return;
    }
    let full_baseline = args.iter().any(|a| a == "--full-baseline");
    // `--only many,slow,poll,lean,kill,idle,threads,decade,fleet,card,resources,mcp,client`
    // runs some scenarios; `--only fleet-scale [--hosts N --sessions M --readers K --churn C --ttl S
    // --pass S --quota-gib G --load-concurrency L --no-events]` the fleet at scale (never run
    // unless named); `--only chaos [--secs N] [--fleet]` the chaos soak (never run unless
    // named; fails on a violated invariant).
    let only: Vec<String> = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|at| args.get(at + 1))
        .map(|list| list.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    murmur_registry::test_support::raise_open_files_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    if only.iter().any(|o| o == "chaos") {
        runtime.block_on(chaos::chaos_soak(chaos::ChaosArgs::from_args(&args)));
        return;
    }
    let wanted = |name: &str| only.is_empty() || only.iter().any(|o| o == name);
    // `fleet-scale` is long (a fleet of 100,000 sessions): run only when named.
    let scale = only.iter().any(|o| o == "fleet-scale").then_some(&args[..]);
    runtime.block_on(bench(full_baseline, &wanted, scale));
}

async fn bench(full_baseline: bool, wanted: &dyn Fn(&str) -> bool, scale: Option<&[String]>) {
    let started = Instant::now();
    let binaries = Binaries::from_env();
    println!(
        "murmur-registry bench: {} CPUs, load average {}; {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average(),
        binaries.describe()
    );
    let mut rows: Vec<Row> = Vec::new();
    if wanted("many") {
        step!(many_live_records(&mut rows, &binaries));
    }
    if wanted("slow") {
        step!(slow_doors(&mut rows, full_baseline));
    }
    if wanted("poll") {
        step!(pollers_at_once(&mut rows));
    }
    if wanted("lean") {
        step!(lean_path_throughput_and_memory(&mut rows));
    }
    if wanted("kill") {
        step!(sigkill_to_removed(&mut rows, &binaries));
    }
    if wanted("idle") {
        step!(idle_with_one_listener(&mut rows, &binaries));
    }
    if wanted("threads") {
        step!(probe_false_over_threaded_process(&mut rows, &binaries));
    }
    if wanted("decade") {
        step!(ten_thousand_records(&mut rows, &binaries));
    }
    if wanted("fleet") {
        step!(fleet_figures(&mut rows));
    }
    if wanted("card") {
        step!(listing_with_cards(&mut rows));
    }
    if wanted("resources") {
        step!(resources_over_a_thousand_processes(&mut rows));
    }
    if wanted("mcp") {
        step!(mcp_figures(&mut rows));
    }
    if wanted("client") {
        step!(typed_client_overhead(&mut rows));
    }
    if let Some(args) = scale {
        #[cfg(feature = "fleet")]
        step!(fleet_scale_figures(&mut rows, args));
        #[cfg(not(feature = "fleet"))]
        eprintln!(
            "fleet-scale: SKIPPED: built without the `fleet` feature ({} args)",
            args.len()
        );
    }

    println!();
    println!(
        "summary (load average {}, {:.0} s):",
        load_average(),
        started.elapsed().as_secs_f64()
    );
    print_header();
    for row in &rows {
        row.print();
    }
}
