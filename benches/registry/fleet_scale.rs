//! Scenario `fleet-scale` (feature `fleet`, etcd at `/usr/bin/etcd`; run only when named:
//! `--only fleet-scale`): one etcd, `--hosts` simulated hosts (default 100) publishing
//! `--sessions` sessions each (default 1,000) through the registry's own `Publisher`
//! (`tests/common/fleet_sim.rs`), `--readers` real reading registries (default 3) with a
//! `/fleet/events` listener each, churn at `--churn` changes a second (default 100).
//!
//! Figures: load time; etcd writes and renewals a second at rest and under churn; bytes per
//! entry (etcd's database size over the entries); a reader's cold start to the whole view;
//! `/fleet/sessions` whole and the reader's RSS after; `/fleet/sessions?status=live&limit=1000`
//! p50; `/fleet/events` p99 over 5,000 changes at 1,000 a second, and how many were lost; a host
//! killed (its publisher dropped without leaving) to gone from every reader.
//!
//! Invariant: figures are printed, never asserted; a broken premise (a reader that never sees
//! the whole fleet, a change never delivered) fails its named step.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use etcd_client::Client as EtcdClient;
use serde_json::Value;

use crate::etcd::Etcd;
use crate::event_listener::EventListener;
use crate::figures::{Row, add, mib, ms, percentile};
use crate::fleet::{Deadline, fleet_flags};
use crate::fleet_sim::{SimFleet, SimSettings, sim_session_id};
use crate::records::private_temp_dir;
use crate::server::Server;

const PREFIX: &str = "/bench/scale";
/// The changes the event figure sends, and how many a second.
const CHANGES: usize = 5_000;
const CHANGE_RATE: f64 = 1_000.0;
/// The windows at rest and under churn.
const WINDOW: Duration = Duration::from_secs(10);

/// The scenario's sizes, from the command line.
#[derive(Debug, Clone, Copy)]
pub struct Scale {
    pub hosts: usize,
    pub sessions: usize,
    pub readers: usize,
    pub churn: usize,
    pub ttl: Duration,
}

impl Scale {
    /// `--hosts N --sessions M --readers K --churn C --ttl SECONDS` from `args`.
    pub fn from_args(args: &[String]) -> Self {
        let number = |flag: &str, default: usize| {
            (args.iter().position(|a| a == flag))
                .and_then(|at| args.get(at + 1))
                .and_then(|n| n.replace([',', '_'], "").parse().ok())
                .unwrap_or(default)
        };
        Self {
            hosts: number("--hosts", 100),
            sessions: number("--sessions", 1_000),
            readers: number("--readers", 3).max(1),
            churn: number("--churn", 100),
            ttl: Duration::from_secs(number("--ttl", 15) as u64),
        }
    }
}

fn row(rows: &mut Vec<Row>, scenario: String, measured: String, target: &str, met: bool) {
    add(
        rows,
        Row {
            scenario: format!("fleet-scale: {scenario}"),
            measured,
            target: target.to_owned(),
            baseline: "-".to_owned(),
            ratio: "-".to_owned(),
            met,
        },
    );
}

pub async fn fleet_scale(rows: &mut Vec<Row>, scale: Scale) {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    let entries = scale.hosts * scale.sessions;
    println!("fleet-scale: {scale:?}, {entries} entries");
    let settings = SimSettings {
        endpoint: etcd.endpoint(),
        prefix: PREFIX.to_owned(),
        hosts: scale.hosts,
        sessions: scale.sessions,
        ttl: scale.ttl,
        pass: Duration::from_secs(2),
    };
    let loading = Instant::now();
    let mut fleet = SimFleet::start(settings).await;
    let load = loading.elapsed();
    row(
        rows,
        format!("load {} hosts × {} sessions", scale.hosts, scale.sessions),
        ms(load),
        "-",
        true,
    );
    let readers = step!(start_readers(rows, &etcd, scale));
    step!(at_rest(rows, &mut client, &etcd, &readers, "at rest", None));
    // After the window: etcd's backend commits its batches every 100 ms.
    step!(bytes_per_entry(rows, &mut client, entries));
    step!(whole_and_pages(rows, &readers[0], entries));
    let churning = Some((&fleet, scale.churn));
    step!(at_rest(
        rows,
        &mut client,
        &etcd,
        &readers,
        "under churn",
        churning
    ));
    step!(events(rows, &fleet, &readers, &etcd));
    step!(killed(rows, &mut fleet, &readers, scale.ttl));
}

/// etcd's database size over the entries it holds.
async fn bytes_per_entry(rows: &mut Vec<Row>, client: &mut EtcdClient, entries: usize) {
    let status = client.status().await.expect("etcd's status");
    let per_entry = status.db_size() as f64 / entries as f64;
    let in_use = status.raft_used_db_size() as f64 / entries as f64;
    row(
        rows,
        "etcd bytes per entry (db size / entries)".to_owned(),
        format!(
            "{per_entry:.0} B ({in_use:.0} B in use; db {})",
            mib(status.db_size() as u64 / 1024)
        ),
        "-",
        true,
    );
}

/// Start the readers one after another; the first one's cold start is the figure.
async fn start_readers(rows: &mut Vec<Row>, etcd: &Etcd, scale: Scale) -> Vec<Server> {
    let binary = Path::new(env!("CARGO_BIN_EXE_murmur-registry"));
    let mut readers = Vec::new();
    for n in 0..scale.readers {
        let running = private_temp_dir();
        let flags = fleet_flags(etcd, PREFIX, &format!("reader{n}"), &[]);
        let started = Instant::now();
        let reader = Server::start_with(binary, running.path(), &flags);
        std::mem::forget(running);
        let mut http = reader.client().await;
        let deadline = Deadline::new("a reader sees the whole fleet", Duration::from_secs(300));
        loop {
            if let Ok(body) = http.get("/fleet/hosts").await {
                let hosts: Value = serde_json::from_slice(&body).unwrap_or_default();
                let count = hosts["hosts"].as_array().map_or(0, Vec::len);
                if count > scale.hosts {
                    break;
                }
            }
            deadline.tick().await;
        }
        if n == 0 {
            row(
                rows,
                "a reader's cold start to the whole view".to_owned(),
                format!("{} (RSS {})", ms(started.elapsed()), mib(reader.rss_kib())),
                "<= 0.91 s (issue 27's now)",
                started.elapsed() <= Duration::from_millis(910),
            );
        }
        readers.push(reader);
    }
    readers
}

/// etcd's writes (revisions) and lease renewals a second over [`WINDOW`], and the first
/// reader's CPU and RSS meanwhile.
async fn at_rest(
    rows: &mut Vec<Row>,
    client: &mut EtcdClient,
    etcd: &Etcd,
    readers: &[Server],
    what: &str,
    churn: Option<(&SimFleet, usize)>,
) {
    let (revision0, renewed0) = (revision(client).await, renewals(etcd).await);
    let keys0 = etcd_counter(etcd, "etcd_mvcc_put_total").await
        + etcd_counter(etcd, "etcd_mvcc_delete_total").await;
    let cpu0 = readers[0].cpu();
    let opened = Instant::now();
    match churn {
        // A window of time is what is measured here, not something awaited.
        None => tokio::time::sleep(WINDOW).await,
        Some((fleet, rate)) => {
            let mut ticks =
                tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(1) as f64));
            for n in 0.. {
                ticks.tick().await;
                if opened.elapsed() >= WINDOW {
                    break;
                }
                churn_one(fleet, n);
            }
        }
    }
    let seconds = opened.elapsed().as_secs_f64();
    let writes = (revision(client).await - revision0) as f64 / seconds;
    let renewed = (renewals(etcd).await - renewed0) as f64 / seconds;
    let keys = (etcd_counter(etcd, "etcd_mvcc_put_total").await
        + etcd_counter(etcd, "etcd_mvcc_delete_total").await
        - keys0) as f64
        / seconds;
    let cpu = (readers[0].cpu() - cpu0).as_secs_f64() / seconds * 100.0;
    row(
        rows,
        format!("{what}: etcd txns/s (keys/s), renewals/s; a reader's CPU, RSS"),
        format!(
            "{writes:.1} txns/s ({keys:.0} keys/s), {renewed:.1} renewals/s; {cpu:.1} %, {}",
            mib(readers[0].rss_kib())
        ),
        "-",
        true,
    );
}

/// `/fleet/sessions` whole (three times), then every page of `status=live&limit=1000`.
async fn whole_and_pages(rows: &mut Vec<Row>, reader: &Server, entries: usize) {
    let mut http = reader.client().await;
    let mut whole = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let body = http.get("/fleet/sessions").await.expect("the whole fleet");
        whole.push(started.elapsed());
        let parsed: Value = serde_json::from_slice(&body).expect("JSON");
        let count = parsed["sessions"].as_array().map_or(0, Vec::len);
        assert_eq!(count, entries, "the whole fleet");
    }
    whole.sort();
    row(
        rows,
        format!("/fleet/sessions whole ({entries}), median of 3; RSS after, peak"),
        format!(
            "{}; RSS {}, peak {}",
            ms(whole[1]),
            mib(reader.rss_kib()),
            mib(reader.peak_rss_kib())
        ),
        "<= 0.12 s, peak <= 250 MiB",
        whole[1] <= Duration::from_millis(120) && reader.peak_rss_kib() <= 250 * 1024,
    );
    let (mut pages, mut seen, mut cursor) = (Vec::new(), 0, None::<String>);
    loop {
        let path = match &cursor {
            Some(c) => format!("/fleet/sessions?status=live&limit=1000&cursor={c}"),
            None => "/fleet/sessions?status=live&limit=1000".to_owned(),
        };
        let started = Instant::now();
        let body = http.get(&path).await.expect("a page");
        pages.push(started.elapsed());
        let page: Value = serde_json::from_slice(&body).expect("JSON");
        seen += page["sessions"].as_array().map_or(0, Vec::len);
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, entries, "the walk saw every live session");
    pages.sort();
    let p50 = percentile(&pages, 0.5);
    row(
        rows,
        format!(
            "/fleet/sessions?status=live&limit=1000, p50 of {} pages",
            pages.len()
        ),
        format!("{} (max {})", ms(p50), ms(pages[pages.len() - 1])),
        "<= 10 ms",
        p50 <= Duration::from_millis(10),
    );
}

/// One change of the churn, number `n`: a session added, changed or removed, in turn, round
/// the hosts; published at its host's next pass.
fn churn_one(fleet: &SimFleet, n: usize) {
    let (hosts, sessions) = (fleet.hosts(), fleet.settings().sessions);
    let host = n % hosts;
    let round = n / hosts;
    match n % 3 {
        0 => fleet.put(
            host,
            &sim_session_id(host, sessions + round),
            "churn",
            false,
        ),
        1 => fleet.put(
            host,
            &sim_session_id(host, round % sessions),
            &format!("churn-{n}"),
            false,
        ),
        _ => fleet.remove(
            host,
            &sim_session_id(host, sessions + round.saturating_sub(3)),
        ),
    }
}

/// 5,000 changes at 1,000 a second, each published at once by its host's publisher, followed by
/// every reader's `/fleet/events` listener and by a watch of etcd's own in this process: how
/// long from etcd's commit (the watch's arrival) to each reader's event (p99 over every
/// reader), how long from the change made to the event (the publisher's transaction and
/// renewal included), and how many never came.
async fn events(rows: &mut Vec<Row>, fleet: &SimFleet, readers: &[Server], etcd: &Etcd) {
    let mut listeners = Vec::new();
    for reader in readers {
        let mut listener = EventListener::open_at(reader, "/fleet/events").await;
        listener.snapshot().await;
        listeners.push(listener);
    }
    let committed = watch_marks(etcd).await;
    let hosts = fleet.hosts();
    let mut sent: HashMap<String, Instant> = HashMap::new();
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / CHANGE_RATE));
    for n in 0..CHANGES {
        ticks.tick().await;
        // Each change its own session, so none is overwritten before it is published.
        let (host, session) = (n % hosts, n / hosts);
        let mark = format!("ev-{n}");
        sent.insert(mark.clone(), Instant::now());
        fleet.put(host, &sim_session_id(host, session), &mark, true);
    }
    let (mut from_commit, mut from_change, mut lost) = (Vec::new(), Vec::new(), 0);
    for listener in &mut listeners {
        let mut pending: HashMap<&str, Instant> =
            sent.iter().map(|(mark, at)| (mark.as_str(), *at)).collect();
        let until = Instant::now() + Duration::from_secs(30);
        while !pending.is_empty() {
            let Some(event) = listener.next_before(until).await else {
                break;
            };
            for mark in marks_of(&event.name, &event.data) {
                let Some(at) = pending.remove(mark) else {
                    continue;
                };
                if event.name == "snapshot" {
                    continue;
                }
                from_change.push(event.at.saturating_duration_since(at));
                if let Some(commit) = lock(&committed).get(mark) {
                    from_commit.push(event.at.saturating_duration_since(*commit));
                }
            }
        }
        lost += pending.len();
    }
    from_commit.sort();
    from_change.sort();
    let p99 = percentile(&from_commit, 0.99);
    row(
        rows,
        format!(
            "{CHANGES} changes at 1,000/s → /fleet/events of {} readers, p99 from etcd's commit (from the change)",
            readers.len()
        ),
        format!(
            "{} (p50 {}; from the change p99 {}), {lost} lost",
            ms(p99),
            ms(percentile(&from_commit, 0.5)),
            ms(percentile(&from_change, 0.99))
        ),
        "<= 12 ms, none lost",
        p99 <= Duration::from_millis(12) && lost == 0,
    );
}

/// The marks (`changed_at`) an event carries: its session's, or every session's of a snapshot.
fn marks_of<'a>(name: &str, data: &'a Value) -> Vec<&'a str> {
    match name {
        "session.added" | "session.changed" => {
            data["session"]["changed_at"].as_str().into_iter().collect()
        }
        "snapshot" => (data["sessions"].as_array().into_iter().flatten())
            .filter_map(|s| s["changed_at"].as_str())
            .collect(),
        _ => Vec::new(),
    }
}

type Marks = std::sync::Arc<std::sync::Mutex<HashMap<String, Instant>>>;

fn lock(marks: &Marks) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
    marks
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// When each mark was committed, as a watch of etcd's own (in this process) sees it arrive.
async fn watch_marks(etcd: &Etcd) -> Marks {
    let mut client = etcd.client().await;
    let options = etcd_client::WatchOptions::new().with_prefix();
    let mut stream = client
        .watch(format!("{PREFIX}/sessions/"), Some(options))
        .await
        .expect("a watch");
    let marks = Marks::default();
    let kept = std::sync::Arc::clone(&marks);
    tokio::spawn(async move {
        let _client = client;
        while let Ok(Some(response)) = stream.message().await {
            let at = Instant::now();
            for event in response.events() {
                let Some(kv) = event.kv() else { continue };
                let value: Value = serde_json::from_slice(kv.value()).unwrap_or_default();
                if let Some(mark) = value["changed_at"].as_str() {
                    lock(&kept).insert(mark.to_owned(), at);
                }
            }
        }
    });
    marks
}

/// Host 0's publisher dropped without leaving: how long until no reader shows it.
async fn killed(rows: &mut Vec<Row>, fleet: &mut SimFleet, readers: &[Server], ttl: Duration) {
    let killed = Instant::now();
    let host = fleet.kill(0);
    let until = killed + ttl * 4;
    let mut left = Vec::new();
    for reader in readers {
        loop {
            let last = match shows(reader, host.as_str()).await {
                Ok(false) => break,
                Ok(true) => "still shown".to_owned(),
                Err(why) => why,
            };
            if Instant::now() > until {
                eprintln!("fleet-scale: a reader still shows {host} or cannot say: {last}");
                break;
            }
            // Paces the polling only.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        left.push(killed.elapsed());
    }
    let took = left.iter().max().copied().unwrap_or_default();
    let target = ttl + Duration::from_secs(1);
    row(
        rows,
        format!(
            "a host killed ({} sessions) to gone from every reader (TTL {} s)",
            fleet.settings().sessions,
            ttl.as_secs()
        ),
        format!(
            "{} (each: {})",
            ms(took),
            left.iter().map(|d| ms(*d)).collect::<Vec<_>>().join(", ")
        ),
        &format!("<= {}", ms(target)),
        took <= target,
    );
}

/// Whether `reader` shows `host` (its entry, or a session of it), asked on a fresh connection.
async fn shows(reader: &Server, host: &str) -> Result<bool, String> {
    let mut http = reader.client().await;
    let hosts: Value =
        serde_json::from_slice(&http.get("/fleet/hosts").await?).map_err(|e| e.to_string())?;
    let path = format!("/fleet/sessions?host={host}&limit=1");
    let sessions: Value =
        serde_json::from_slice(&http.get(&path).await?).map_err(|e| e.to_string())?;
    let listed = (hosts["hosts"].as_array().into_iter().flatten()).any(|h| h["host_id"] == host);
    Ok(listed
        || sessions["sessions"]
            .as_array()
            .is_none_or(|s| !s.is_empty()))
}

async fn revision(client: &mut EtcdClient) -> i64 {
    let response = client.get("/", None).await.expect("an etcd read");
    response.header().expect("a response header").revision()
}

/// How many lease renewals etcd has served so far.
async fn renewals(etcd: &Etcd) -> u64 {
    etcd_counter(etcd, "etcd_debugging_lease_renewed_total").await
}

/// One counter of etcd's `/metrics`.
async fn etcd_counter(etcd: &Etcd, name: &str) -> u64 {
    let metrics = reqwest::get(format!("{}/metrics", etcd.endpoint()))
        .await
        .expect("etcd's /metrics")
        .text()
        .await
        .expect("etcd's metrics");
    (metrics.lines())
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|n| n.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("etcd counts {name}")) as u64
}
