//! Scenario `resources`: what `include=resources` adds to a `probe=false` listing of 1,000 live
//! records, each naming a distinct process (forked by `--pid-holders`), so every figure is a
//! read of its own process.
//!
//! Invariant: both listings are asked alternately over one connection to one server, so load
//! on the shared machine falls on both alike; the figure is the difference of their medians.
//! The server's CPU time per listing of each kind is reported beside it: on a loaded machine
//! it says what the wall time cannot (it counts the work, not the wait for a core).

use std::time::Duration;

use crate::figures::{Row, add, median, ms};
use crate::pid_holders::PidHolders;
use crate::records::{private_temp_dir, write_record};
use crate::server::Server;

/// Live records, each of its own process.
const RECORDS: usize = 1_000;
/// Listings of each kind measured, after [`WARM_UP`] of each.
const ROUNDS: usize = 21;
const WARM_UP: usize = 3;
/// The most `include=resources` may add to the median listing.
const TARGET_EXTRA: Duration = Duration::from_millis(15);
const PLAIN: &str = "/sessions?probe=false";
const WITH_RESOURCES: &str = "/sessions?probe=false&include=resources";

pub async fn resources_over_a_thousand_processes(rows: &mut Vec<Row>) {
    let holders = PidHolders::start(RECORDS);
    let dir = private_temp_dir();
    for (n, (pid, token)) in holders.processes().iter().enumerate() {
        write_record(
            dir.path(),
            &format!("ses_{n:032x}"),
            "127.0.0.1:1",
            *pid,
            token,
        );
    }
    let server = Server::start(dir.path());
    let (plain, with, cpu) = step!(alternate_listings(&server));
    let (plain, with) = (
        median(plain).expect("plain listings"),
        median(with).expect("listings with resources"),
    );
    let extra = with.saturating_sub(plain);
    add(
        rows,
        Row {
            scenario: format!("  + include=resources, {RECORDS} live (distinct), p50 ({ROUNDS})"),
            measured: format!("+{} ({} vs {})", ms(extra), ms(with), ms(plain)),
            target: format!("<= +{}", ms(TARGET_EXTRA)),
            baseline: format!(
                "server CPU {} vs {} a listing",
                ms(cpu.with / ROUNDS as u32),
                ms(cpu.plain / ROUNDS as u32)
            ),
            ratio: "-".to_owned(),
            met: extra <= TARGET_EXTRA,
        },
    );
    drop(holders);
}

/// The server's CPU time over the measured listings of each kind.
#[derive(Default)]
struct ServerCpu {
    plain: Duration,
    with: Duration,
}

/// [`ROUNDS`] of each listing, alternately, after [`WARM_UP`] of each; every listing with
/// resources must give figures for every record.
async fn alternate_listings(server: &Server) -> (Vec<Duration>, Vec<Duration>, ServerCpu) {
    let mut client = server.client().await;
    let (mut plain, mut with, mut cpu) = (Vec::new(), Vec::new(), ServerCpu::default());
    for round in 0..WARM_UP + ROUNDS {
        let before = server.cpu();
        let (took_plain, _) = client.timed_get(PLAIN).await;
        let between = server.cpu();
        let (took_with, body) = client.timed_get(WITH_RESOURCES).await;
        let after = server.cpu();
        let sessions = body["sessions"].as_array().expect("sessions");
        let figured = sessions
            .iter()
            .filter(|s| s["resources"].is_object())
            .count();
        assert_eq!(figured, RECORDS, "every live record has its figures");
        if round >= WARM_UP {
            plain.push(took_plain);
            with.push(took_with);
            cpu.plain += between.saturating_sub(before);
            cpu.with += after.saturating_sub(between);
        }
    }
    (plain, with, cpu)
}
