//! Fleet part 3: a host killed (`kill -9` of a registry with `--fleet-ttl 3s --events-interval
//! 500ms`): how long until it is gone from another registry's `GET /fleet/hosts`, polled every
//! 10 ms, [`KILLS`] times.
//!
//! Invariant: the clock starts when the victim has been reaped, and only once the reader has
//! seen it join, so each figure is the lease's lapse plus the watch's delivery, nothing else.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::etcd::Etcd;
use crate::figures::{Row, add, median, ms};
use crate::fleet::{Deadline, fleet_flags};
use crate::records::private_temp_dir;
use crate::server::{Client, Server};

const PREFIX: &str = "/bench/departure";
const KILLS: usize = 5;
const TTL: Duration = Duration::from_secs(3);

pub async fn killed_host_departure(rows: &mut Vec<Row>, etcd: &Etcd) {
    let binary = Path::new(env!("CARGO_BIN_EXE_murmur-registry"));
    let running = private_temp_dir();
    let reader = Server::start_with(
        binary,
        running.path(),
        &fleet_flags(etcd, PREFIX, "reader", &[]),
    );
    let mut http = reader.client().await;
    let mut gone_after = Vec::new();
    for kill in 0..KILLS {
        let host_id = format!("victim{kill}");
        let victim_dir = private_temp_dir();
        let flags = fleet_flags(
            etcd,
            PREFIX,
            &host_id,
            &["--fleet-ttl", "3s", "--events-interval", "500ms"],
        );
        let mut victim = Server::start_with(binary, victim_dir.path(), &flags);
        let deadline = Deadline::new("the reader sees the victim join", Duration::from_secs(30));
        while !has_host(&mut http, &host_id).await {
            deadline.tick().await;
        }
        victim.kill();
        let killed = Instant::now();
        let deadline = Deadline::new("the victim leaves", TTL * 5);
        while !has_host_not(&mut http, &host_id).await {
            deadline.tick().await;
        }
        gone_after.push(killed.elapsed());
    }
    let most = gone_after.iter().max().copied().unwrap_or_default();
    let middle = median(gone_after).unwrap_or_default();
    let target = TTL + Duration::from_secs(1);
    add(
        rows,
        Row {
            scenario: format!("fleet: kill -9 to gone from /fleet/hosts (TTL 3 s, {KILLS} kills)"),
            measured: format!("median {} / max {}", ms(middle), ms(most)),
            target: format!("<= {}", ms(target)),
            baseline: "-".to_owned(),
            ratio: "-".to_owned(),
            met: most <= target,
        },
    );
}

async fn has_host(http: &mut Client, host_id: &str) -> bool {
    hosts(http)
        .await
        .is_some_and(|hosts| hosts.iter().any(|h| h == host_id))
}

async fn has_host_not(http: &mut Client, host_id: &str) -> bool {
    hosts(http)
        .await
        .is_some_and(|hosts| hosts.iter().all(|h| h != host_id))
}

/// The host ids `/fleet/hosts` names, when it answers.
async fn hosts(http: &mut Client) -> Option<Vec<String>> {
    let body = http.get("/fleet/hosts").await.ok()?;
    let body: Value = serde_json::from_slice(&body).ok()?;
    let hosts = body["hosts"].as_array()?;
    Some(
        hosts
            .iter()
            .filter_map(|h| h["host_id"].as_str().map(str::to_owned))
            .collect(),
    )
}
