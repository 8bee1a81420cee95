//! What each capsule costs, end to end: `include=resources` on `GET /sessions` and
//! `GET /sessions/{id}`, and the `resources` event of `/events?include=resources`, against the
//! real server on `127.0.0.1:0` and real processes: one that spins on a CPU, one with threads,
//! one that holds memory.
//!
//! Why these tests exist: a figure is only worth showing if it belongs to the process the
//! record names. So besides plausible figures (resident memory above what the child touched,
//! the thread count it has, CPU above zero for a spinner once there is an earlier sample, and
//! `null` CPU on the first), they check that gone records, records whose process cannot be
//! confirmed, and a record naming a live pid with a wrong start token (a reused pid) get no
//! numbers at all; that a listing without `include` is what it always was (no `resources`
//! member); that `include` refuses words it does not know; and that a stream gets `resources`
//! events each step only when it asked for them.
//!
//! Nothing sleeps to synchronise: children are polled until `/proc` shows their shape, figures
//! until they show what is expected, under [`DEADLINE`].

mod common;

use std::time::{Duration, Instant};

use common::server::TestServer;
use common::*;
use serde_json::Value;

/// How often the server under test passes over the directory (one `resources` event each).
const INTERVAL: Duration = Duration::from_millis(200);
/// What the memory-holding child writes to, so every page of it is resident.
const HELD_BYTES: u64 = 64 << 20;
/// The threads the threaded child runs besides its main one.
const EXTRA_THREADS: usize = 4;

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

struct Client {
    server: TestServer,
    http: reqwest::Client,
}

impl Client {
    async fn start() -> Self {
        let server = TestServer::builder()
            .events_interval(INTERVAL)
            .start()
            .await;
        Self {
            server,
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.base())
    }

    /// `GET path` with the token: status and body text.
    async fn get_text(&self, path: &str) -> (u16, String) {
        let response = self
            .http
            .get(self.url(path))
            .bearer_auth(self.server.token())
            .send()
            .await
            .expect("the registry answers");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    }

    /// `GET path` with the token, which must answer 200 with JSON.
    async fn get(&self, path: &str) -> Value {
        let (status, text) = self.get_text(path).await;
        assert_eq!(status, 200, "GET {path}: {text}");
        serde_json::from_str(&text).expect("a JSON body")
    }

    /// Open `/events` (with `query`, e.g. `?include=resources`); fails unless it is a 200.
    async fn events(&self, query: &str) -> EventStream {
        let response = self
            .http
            .get(self.url(&format!("/events{query}")))
            .bearer_auth(self.server.token())
            .send()
            .await
            .expect("the registry answers /events");
        EventStream::new(response, EVENT_DEADLINE)
    }

    fn write(&self, record: &RecordJson) {
        record.write_in(self.server.dir());
    }
}

fn session_in<'a>(listing: &'a Value, session_id: &str) -> &'a Value {
    listing["sessions"]
        .as_array()
        .expect("a sessions array")
        .iter()
        .find(|s| s["session_id"] == session_id)
        .unwrap_or_else(|| panic!("{session_id} in {listing}"))
}

/// A child that keeps one CPU busy.
fn spinner() -> TestProcess {
    TestProcess::python("while True: pass")
}

/// A child with [`EXTRA_THREADS`] threads beside its main one, returned once `/proc` shows them.
fn threaded() -> TestProcess {
    let child = TestProcess::python(&format!(
        "import threading\n\
         for _ in range({EXTRA_THREADS}): threading.Thread(target=threading.Event().wait).start()\n\
         threading.Event().wait()\n"
    ));
    let pid = child.pid();
    wait_until("the threaded child runs its threads", DEADLINE, || {
        task_count(pid) == EXTRA_THREADS + 1
    });
    child
}

/// A child holding [`HELD_BYTES`] it wrote to, returned once they are resident.
fn holding_memory() -> TestProcess {
    let child = TestProcess::python(&format!(
        "import threading\nheld = b'x' * {HELD_BYTES}\nthreading.Event().wait()\n"
    ));
    let pid = child.pid();
    wait_until("the child's memory is resident", DEADLINE, || {
        resident_bytes(pid) >= HELD_BYTES
    });
    child
}

fn task_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |tasks| tasks.count())
}

/// `VmRSS` of `pid`, in bytes (0 when unreadable).
fn resident_bytes(pid: u32) -> u64 {
    status_line(pid, "VmRSS")
        .and_then(|line| line.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// Checks the figures' shape and answers them as numbers: (cpu_percent, cpu_time_ms,
/// rss_bytes, threads).
fn figures(resources: &Value) -> (Option<f64>, u64, u64, u64) {
    let object = resources.as_object().expect("a resources object");
    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["cpu_percent", "cpu_time_ms", "rss_bytes", "threads"],
        "{resources}"
    );
    let number = |key: &str| {
        resources[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key} is a whole number: {resources}"))
    };
    (
        resources["cpu_percent"].as_f64(),
        number("cpu_time_ms"),
        number("rss_bytes"),
        number("threads"),
    )
}

// ---------------------------------------------------------------------------------------------
// GET /sessions and /sessions/{id}
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_figures_are_the_processes_own_and_cpu_needs_an_earlier_sample() {
    let client = Client::start().await;
    let spinning = spinner();
    let threads = threaded();
    let memory = holding_memory();
    let (s, t, m) = (spinning.record(), threads.record(), memory.record());
    for record in [&s, &t, &m] {
        client.write(&record.clone().no_door());
    }

    let listing = client.get("/sessions?probe=false&include=resources").await;
    for record in [&s, &t, &m] {
        let (cpu_percent, _, rss, threads) =
            figures(&session_in(&listing, &record.session_id())["resources"]);
        assert_eq!(cpu_percent, None, "no earlier sample: no CPU share yet");
        assert!(rss > 0, "resident memory of {}", record.session_id());
        assert!(threads >= 1);
    }
    let (_, _, _, counted) = figures(&session_in(&listing, &t.session_id())["resources"]);
    assert_eq!(
        counted as usize,
        EXTRA_THREADS + 1,
        "the main thread and its four"
    );
    let (_, _, rss, _) = figures(&session_in(&listing, &m.session_id())["resources"]);
    assert!(
        rss >= HELD_BYTES,
        "{rss} bytes resident, {HELD_BYTES} written"
    );

    // The next sample far enough from the first measures the spinner busy, and the idle
    // threaded child at (about) nothing.
    let begun = Instant::now();
    let (spin_share, idle_share) = loop {
        assert!(begun.elapsed() < DEADLINE, "no CPU share for the spinner");
        let listing = client.get("/sessions?probe=false&include=resources").await;
        let (spin, spin_time, _, _) = figures(&session_in(&listing, &s.session_id())["resources"]);
        let (idle, _, _, _) = figures(&session_in(&listing, &t.session_id())["resources"]);
        if let (Some(spin), Some(idle)) = (spin, idle)
            && spin > 0.0
        {
            assert!(spin_time > 0, "a spinner has used CPU time");
            break (spin, idle);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // One thread uses at most one core; counted in 10 ms ticks over a span of 100 ms or more,
    // a figure may read up to about twice that.
    assert!(
        spin_share <= 100.0 * 2.0,
        "one spinning thread, {spin_share} % of a core"
    );
    assert!(
        idle_share < spin_share,
        "idle {idle_share} below spinning {spin_share}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_session_carries_its_figures_only_when_asked() {
    let client = Client::start().await;
    let threads = threaded();
    let record = threads.record().no_door();
    client.write(&record);
    let id = record.session_id();

    let plain = client.get(&format!("/sessions/{id}")).await;
    assert!(
        plain.get("resources").is_none(),
        "no member unless asked: {plain}"
    );
    let asked = client
        .get(&format!("/sessions/{id}?include=resources"))
        .await;
    let (cpu_percent, _, rss, counted) = figures(&asked["resources"]);
    assert_eq!(cpu_percent, None);
    assert!(rss > 0);
    assert_eq!(counted as usize, EXTRA_THREADS + 1);
    let unprobed = client
        .get(&format!("/sessions/{id}?probe=false&include=resources"))
        .await;
    figures(&unprobed["resources"]);

    // A session whose process is gone: the member is there, and null.
    let gone = ExitedChild::spawn();
    let g = gone.record().no_door();
    client.write(&g);
    let answer = client
        .get(&format!("/sessions/{}?include=resources", g.session_id()))
        .await;
    assert_eq!(answer["liveness"]["process"], "gone");
    assert!(answer["resources"].is_null(), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_unconfirmed_and_reused_pids_get_no_numbers() {
    let client = Client::start().await;
    let live = TestProcess::sleeping();
    let l = live.record().no_door();
    let gone = ExitedChild::spawn();
    let g = gone.record().no_door();
    // A live pid (this very test) with a start token that is not its own: a reused pid.
    let me = std::process::id();
    let reused = RecordJson::fresh()
        .process(me, &wrong_start_token(me))
        .no_door();
    // A start token that cannot be compared: the process is alive but unverified.
    let unverified = RecordJson::fresh()
        .process(me, "not-a-start-time")
        .no_door();
    for record in [&l, &g, &reused, &unverified] {
        client.write(record);
    }

    let listing = client.get("/sessions?probe=false&include=resources").await;
    figures(&session_in(&listing, &l.session_id())["resources"]);
    for (record, process) in [(&g, "gone"), (&reused, "gone"), (&unverified, "unverified")] {
        let session = session_in(&listing, &record.session_id());
        assert_eq!(session["liveness"]["process"], process, "{session}");
        assert!(
            session["resources"].is_null(),
            "no numbers for a process that is not confirmed: {session}"
        );
    }
    // Probed, and filtered: the same.
    let probed = client.get("/sessions?include=resources&status=gone").await;
    for session in probed["sessions"].as_array().expect("sessions") {
        assert!(session["resources"].is_null(), "{session}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_include_a_listing_has_no_resources_member() {
    let client = Client::start().await;
    let live = TestProcess::sleeping();
    client.write(&live.record().no_door());
    for query in ["", "?probe=false", "?status=live"] {
        let (status, text) = client.get_text(&format!("/sessions{query}")).await;
        assert_eq!(status, 200);
        assert!(!text.contains("\"resources\""), "{query}: {text}");
    }
    // With it, the listing is the plain one plus the member on every session.
    let (_, plain) = client.get_text("/sessions?probe=false").await;
    let mut with: Value = client.get("/sessions?probe=false&include=resources").await;
    for session in with["sessions"].as_array_mut().expect("sessions") {
        assert!(
            session
                .as_object_mut()
                .expect("an object")
                .remove("resources")
                .is_some()
        );
    }
    assert_eq!(with, serde_json::from_str::<Value>(&plain).expect("JSON"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn include_refuses_words_it_does_not_know() {
    let client = Client::start().await;
    let live = TestProcess::sleeping();
    let record = live.record().no_door();
    client.write(&record);
    let id = record.session_id();
    for path in [
        "/sessions?include=cpu".to_owned(),
        "/sessions?include=".to_owned(),
        "/sessions?include=Resources".to_owned(),
        "/sessions?include=resources,threads".to_owned(),
        format!("/sessions/{id}?include=memory"),
        "/events?include=card".to_owned(),
        "/events?include=cpu".to_owned(),
    ] {
        let (status, text) = client.get_text(&path).await;
        assert_eq!(status, 400, "{path}: {text}");
        let problem: Value = serde_json::from_str(&text).expect("a problem");
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains("include")),
            "{path}: {problem}"
        );
    }
    // A word twice, and spaces after commas, are the same as once.
    let listing = client
        .get("/sessions?probe=false&include=resources,%20resources")
        .await;
    figures(&session_in(&listing, &id)["resources"]);
    // The record is untouched by all of it.
    assert!(client.server.dir().join(record.file_name()).exists());
}

// ---------------------------------------------------------------------------------------------
// /events?include=resources
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_asks_gets_resources_each_step_and_one_that_does_not_gets_none() {
    let client = Client::start().await;
    let spinning = spinner();
    let s = spinning.record().no_door();
    client.write(&s);
    let gone = ExitedChild::spawn();
    let g = gone.record().no_door();
    client.write(&g);

    let mut plain = client.events("").await;
    plain.snapshot().await;
    let mut asking = client.events("?include=resources").await;
    let snapshot = asking.snapshot().await;

    // An event each step, each naming the spinner with figures, in order, never the gone
    // record; the first has no CPU share (no earlier sample), a later one shows the spinner
    // busy (on a loaded machine not every step need give it a slice).
    let mut last_id = snapshot.id;
    let mut shares = Vec::new();
    while shares.len() < 3
        || !shares
            .iter()
            .any(|s: &Option<f64>| s.is_some_and(|s| s > 0.0))
    {
        assert!(
            shares.len() < 50,
            "the spinner never showed busy: {shares:?}"
        );
        let event = asking
            .until(
                "resources",
                |e| e.name.starts_with("session."),
                |e| e.name == "resources",
            )
            .await;
        assert!(
            event.id >= last_id,
            "ids never go back: {} after {last_id}",
            event.id
        );
        last_id = event.id;
        let sessions = event.data["sessions"].as_array().expect("sessions");
        assert!(
            sessions.iter().all(|e| e["session_id"] != g.session_id()),
            "a gone process has no figures: {}",
            event.data
        );
        let mine = sessions
            .iter()
            .find(|e| e["session_id"] == s.session_id())
            .unwrap_or_else(|| panic!("the spinner in {}", event.data));
        let (share, _, rss, threads) = figures(&mine["resources"]);
        assert!(rss > 0 && threads >= 1);
        shares.push(share);
    }
    assert_eq!(
        shares[0], None,
        "the first sample has nothing to compare with"
    );

    // Three steps went by: a stream that did not ask has none queued before this change.
    let marker = TestProcess::sleeping();
    let m = marker.record().no_door();
    client.write(&m);
    loop {
        let added = plain
            .until(
                "session.added",
                |e| e.name != "resources",
                |e| e.name == "session.added",
            )
            .await;
        if added.data["session_id"] == m.session_id() {
            break;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// murmur-registry ps
// ---------------------------------------------------------------------------------------------

#[test]
fn ps_shows_cpu_and_memory_from_two_readings_of_its_own() {
    use common::binary::{Home, User, registry, run};
    let home = Home::new();
    let spinning = spinner();
    let s = spinning.record().no_door();
    home.write(&s);
    let ps = |args: &[&str]| {
        let mut cmd = registry(home.path(), User::Me);
        cmd.args(args);
        let done = run(cmd);
        done.assert_success();
        done
    };

    // Each run is one-shot: its CPU share comes from its own two readings, so it is never
    // null for a confirmed process; the spinner shows busy (on a loaded machine, perhaps not
    // in the first run's quarter second).
    let begun = Instant::now();
    loop {
        assert!(
            begun.elapsed() < DEADLINE,
            "ps never showed the spinner busy"
        );
        let listed = ps(&["ps", "--json"]).json();
        let session = &listed[0];
        assert_eq!(session["session_id"], s.session_id());
        let (share, _, rss, threads) = figures(&session["resources"]);
        assert!(rss > 0 && threads == 1, "{session}");
        if share.expect("two readings give a share") > 0.0 {
            break;
        }
    }
    let table = ps(&["ps"]);
    let mut lines = table.stdout.lines();
    let header: Vec<&str> = lines.next().expect("a header").split_whitespace().collect();
    let row: Vec<&str> = lines.next().expect("a row").split_whitespace().collect();
    assert_eq!(header[3..5], ["CPU%", "MEM"], "{}", table.stdout);
    assert!(row[3].parse::<f64>().is_ok(), "{}", table.stdout);
    assert!(row[4].ends_with(['K', 'M', 'G']), "{}", table.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_runs_only_while_a_stream_that_asked_is_open() {
    let client = Client::start().await;
    let live = TestProcess::sleeping();
    let l = live.record().no_door();
    client.write(&l);
    let monitor = client.server.state().events().clone();

    // A stream that does not ask: the live view has that one listener, and no sampler.
    let mut plain = client.events("").await;
    plain.snapshot().await;
    assert_eq!(
        monitor.listeners(),
        1,
        "nothing follows the picture to sample it"
    );

    // One that asks: its resources come, and the sampler follows the live view beside it.
    let mut asking = client.events("?include=resources").await;
    asking.snapshot().await;
    let event = asking
        .until("resources", |_| true, |e| e.name == "resources")
        .await;
    assert!(
        event.data["sessions"][0]["resources"].is_object(),
        "{:?}",
        event.data
    );
    assert_eq!(monitor.listeners(), 3, "the two streams and the sampler");

    // It leaves: the sampler lets go, and with the last stream the live view stops.
    drop(asking);
    wait_until(
        "the sampler stops with the stream that asked",
        DEADLINE,
        || monitor.listeners() == 1,
    );
    drop(plain);
    wait_until(
        "the live view stops with its last listener",
        DEADLINE,
        || !monitor.is_running(),
    );
}
