//! Scenario `client`: what the typed client (`murmur_registry::client`) costs on
//! `GET /sessions?probe=false` over 1,000 records, against raw reqwest reading the same body
//! into a `serde_json::Value`. Rounds are interleaved (typed then raw, raw then typed, …) and
//! the figure is the median of the paired ratios, so a load that shifts between rounds shifts
//! both sides of a pair alike.

use std::time::{Duration, Instant};

use murmur_registry::client::Client;
use murmur_registry::running::process_start_token;
use murmur_registry::wire::ListQuery;

use crate::figures::{Row, add, ms};
use crate::records::{private_temp_dir, write_record};
use crate::server::Server;

const RECORDS: usize = 1_000;
const ROUNDS: usize = 31;
const REQUESTS_A_ROUND: u32 = 20;

pub async fn typed_client_overhead(rows: &mut Vec<Row>) {
    let dir = private_temp_dir();
    let pid = std::process::id();
    let start = process_start_token(pid).expect("the bench's own start token");
    for n in 0..RECORDS {
        let id = format!("ses_{n:032x}");
        write_record(dir.path(), &id, "127.0.0.1:1", pid, &start);
    }
    let server = Server::start(dir.path());
    let base = format!("http://{}", server.addr());
    let typed = Client::new(&base, server.token()).expect("a client");
    let raw = murmur_registry::discovery::client_builder()
        .build()
        .expect("a reqwest client");
    let url = format!("{base}/sessions?probe=false");
    let query = ListQuery {
        probe: Some(false),
        ..ListQuery::default()
    };
    let typed_round = || async {
        let began = Instant::now();
        for _ in 0..REQUESTS_A_ROUND {
            let list = typed.sessions(&query).await.expect("a listing");
            assert_eq!(list.sessions.len(), RECORDS);
        }
        began.elapsed() / REQUESTS_A_ROUND
    };
    let raw_round = || async {
        let began = Instant::now();
        for _ in 0..REQUESTS_A_ROUND {
            let answer = raw.get(&url).bearer_auth(server.token()).send().await;
            let body = answer.expect("an answer").bytes().await.expect("a body");
            let value: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
            assert_eq!(value["sessions"].as_array().map(Vec::len), Some(RECORDS));
        }
        began.elapsed() / REQUESTS_A_ROUND
    };
    typed_round().await;
    raw_round().await;
    let mut ratios = Vec::new();
    let (mut typed_times, mut raw_times) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let (t, r) = if round % 2 == 0 {
            let t = typed_round().await;
            (t, raw_round().await)
        } else {
            let r = raw_round().await;
            (typed_round().await, r)
        };
        ratios.push(t.as_secs_f64() / r.as_secs_f64());
        typed_times.push(t);
        raw_times.push(r);
    }
    overhead_row(rows, ratios, typed_times, raw_times);
}

fn overhead_row(
    rows: &mut Vec<Row>,
    mut ratios: Vec<f64>,
    typed: Vec<Duration>,
    raw: Vec<Duration>,
) {
    ratios.sort_by(f64::total_cmp);
    let ratio = ratios[ratios.len() / 2];
    let median = |mut times: Vec<Duration>| {
        times.sort();
        times[times.len() / 2]
    };
    add(
        rows,
        Row {
            scenario: format!(
                "client: GET /sessions?probe=false, {RECORDS} records, typed vs raw reqwest+Value"
            ),
            measured: format!("{} (typed)", ms(median(typed))),
            target: "<= 1.05x raw".to_owned(),
            baseline: format!("{} (raw)", ms(median(raw))),
            ratio: format!("{ratio:.3}x (median of {ROUNDS} paired)"),
            met: ratio <= 1.05,
        },
    );
}
