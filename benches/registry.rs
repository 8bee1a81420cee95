//! Prints how long the registry's hot paths take and how much memory they hold, on a running
//! directory of many records: `cargo bench --bench registry` (optionally `-- RECORDS DOORS`).
//!
//! Figures, not assertions: run it before and after a change and compare. Everything is real:
//! record files in a temporary directory, `/proc` reads for this process's own pid, and doors
//! served on `127.0.0.1:0` by this process.

use std::path::Path;
use std::time::{Duration, Instant};

use murmur_registry::registry::Registry;
use murmur_registry::running::{self, DoorProbe, Liveness, process_start_token};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with('-'));
    let records: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let doors: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(300);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(bench(records, doors));
}

async fn bench(records: usize, doors: usize) {
    let dir = tempfile::tempdir().expect("temp dir");
    let pid = std::process::id();
    let token = process_start_token(pid).expect("own start token");
    for n in 0..records {
        write_record(dir.path(), &format!("ses_{n:032x}"), pid, &token, None);
    }
    let mut door_tasks = Vec::new();
    for n in 0..doors {
        let id = format!("ses_d{n:031x}");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        write_record(dir.path(), &id, pid, &token, Some(&addr.to_string()));
        door_tasks.push(tokio::spawn(serve_card(listener, id)));
    }
    let total = records + doors;
    println!("running directory: {records} records without a door, {doors} behind a door");
    println!("peak RSS before: {} KiB", peak_rss_kib());

    let (scan, took) = timed(|| running::scan(dir.path()).expect("scan"));
    println!("scan ({total} files):                {}", per(took, total));
    let records_read = scan.records;

    let (_, took) = timed(|| records_read.iter().map(running::process_state).count());
    println!("layers 1-2 ({total} records):        {}", per(took, total));

    let probe = DoorProbe::new();
    let started = Instant::now();
    let verdicts = running::verify_many(&records_read, &probe).await;
    let took = started.elapsed();
    let live = verdicts
        .iter()
        .filter(|v| v.liveness == Liveness::Live)
        .count();
    println!(
        "verify_many, 3 layers ({total}):     {} ({live} live)",
        per(took, total)
    );

    let registry = Registry::new(dir.path(), probe);
    let started = Instant::now();
    let rounds = 5;
    for _ in 0..rounds {
        let listing = registry.sessions(true).await.expect("sessions");
        assert_eq!(listing.readings.len(), total);
    }
    println!(
        "Registry::sessions (a GET /sessions without HTTP), mean of {rounds}: {:?}",
        started.elapsed() / rounds
    );
    println!("peak RSS after: {} KiB", peak_rss_kib());
    for task in door_tasks {
        task.abort();
    }
}

fn write_record(dir: &Path, id: &str, pid: u32, token: &str, url: Option<&str>) {
    let url = url.map_or("null".to_owned(), |u| format!("\"{u}\""));
    let json = format!(
        r#"{{"session_id":"{id}","url":{url},"pid":{pid},"process_start":"{token}",
            "capsule_name":"bench","capsule_version":"1.0.0","workdir":"/tmp/bench",
            "outlives_launcher":true,"started_at":"2026-11-30T00:00:00Z",
            "records_dir":"/tmp/bench/records","formation_id":"frm_{id}"}}"#
    );
    std::fs::write(dir.join(format!("{id}.json")), json).expect("write record");
}

/// A door that answers every connection with a spec-generation card for `id`.
async fn serve_card(listener: TcpListener, id: String) {
    let body = format!(r#"{{"session_id":"{id}"}}"#);
    let answer = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    while let Ok((mut stream, _)) = listener.accept().await {
        let answer = answer.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 2048];
            let _ = stream.read(&mut buf).await;
            let _ = stream.write_all(answer.as_bytes()).await;
        });
    }
}

fn timed<T>(work: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    let value = work();
    (value, started.elapsed())
}

fn per(took: Duration, count: usize) -> String {
    format!(
        "{took:?} total, {:?} per record",
        took / count.max(1) as u32
    )
}

fn peak_rss_kib() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .map(|v| v.trim().trim_end_matches(" kB").to_owned())
        })
        .unwrap_or_else(|| "?".to_owned())
}
