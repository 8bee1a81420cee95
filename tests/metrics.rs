//! `GET /metrics`, end to end: the real server, real capsule processes, real files. The text is
//! read by a strict parser of the exposition format (any line it does not know fails the test,
//! types are kept), checked by Prometheus's own `promtool check metrics`, and its figures are
//! watched moving as the test acts: a capsule killed, a record pruned, a signal, a stop, an
//! unreadable entry removed, streams and 503s given for load.
//!
//! Never in the text: a session id, a raw path or a query string.

mod common;

use std::time::Duration;

use common::server::TestServer;
use common::*;
use murmur_registry::http::ServeLimits;
use murmur_registry::running::DoorProbe;
use reqwest::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A strict reader of the Prometheus text exposition format (version 0.0.4).
mod exposition {
    use std::collections::BTreeMap;

    /// One sample line.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Sample {
        pub name: String,
        pub labels: BTreeMap<String, String>,
        pub value: f64,
    }

    /// A whole exposition: each family's type, and every sample in order.
    #[derive(Debug, Default)]
    pub struct Exposition {
        pub types: BTreeMap<String, String>,
        pub samples: Vec<Sample>,
    }

    const TYPES: [&str; 5] = ["counter", "gauge", "histogram", "summary", "untyped"];

    fn is_name(name: &str) -> bool {
        let mut chars = name.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    }

    fn value(text: &str) -> Result<f64, String> {
        match text {
            "+Inf" => Ok(f64::INFINITY),
            "-Inf" => Ok(f64::NEG_INFINITY),
            "NaN" => Ok(f64::NAN),
            _ => text.parse().map_err(|_| format!("not a value: {text:?}")),
        }
    }

    /// `key="value",…}` after the opening brace; answers the labels and the rest of the line.
    fn labels(mut rest: &str) -> Result<(BTreeMap<String, String>, &str), String> {
        let mut labels = BTreeMap::new();
        loop {
            if let Some(after) = rest.strip_prefix('}') {
                return Ok((labels, after));
            }
            let (key, after) = rest.split_once("=\"").ok_or("a label without =\"")?;
            if !is_name(key) || key.starts_with("__") {
                return Err(format!("bad label name {key:?}"));
            }
            let mut label = String::new();
            let mut chars = after.char_indices();
            let end = loop {
                match chars.next() {
                    Some((i, '"')) => break i,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, '\\')) => label.push('\\'),
                        Some((_, '"')) => label.push('"'),
                        Some((_, 'n')) => label.push('\n'),
                        other => return Err(format!("bad escape {other:?}")),
                    },
                    Some((_, c)) => label.push(c),
                    None => return Err("an unterminated label value".into()),
                }
            };
            if labels.insert(key.to_owned(), label).is_some() {
                return Err(format!("label {key} twice"));
            }
            rest = &after[end + 1..];
            rest = rest.strip_prefix(',').unwrap_or(rest);
        }
    }

    /// The family a sample belongs to, given the families typed so far.
    fn family_of<'a>(name: &'a str, types: &BTreeMap<String, String>) -> Option<&'a str> {
        if types.contains_key(name) {
            return Some(name);
        }
        ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
            let family = name.strip_suffix(suffix)?;
            matches!(
                types.get(family).map(String::as_str),
                Some("histogram" | "summary")
            )
            .then_some(family)
        })
    }

    /// Parse `text`, failing on the first line that is not HELP, TYPE or a sample of a family
    /// typed before it.
    pub fn parse(text: &str) -> Result<Exposition, String> {
        let mut exposition = Exposition::default();
        let body = text.strip_suffix('\n').ok_or("no final newline")?;
        for (n, line) in body.split('\n').enumerate() {
            let fail = |why: String| format!("line {}: {why}: {line:?}", n + 1);
            if let Some(help) = line.strip_prefix("# HELP ") {
                let (name, _) = help.split_once(' ').ok_or_else(|| fail("no help".into()))?;
                if !is_name(name) {
                    return Err(fail("bad name".into()));
                }
            } else if let Some(typed) = line.strip_prefix("# TYPE ") {
                let (name, kind) = typed
                    .split_once(' ')
                    .ok_or_else(|| fail("no type".into()))?;
                if !is_name(name) || !TYPES.contains(&kind) {
                    return Err(fail("bad TYPE".into()));
                }
                if exposition.types.insert(name.into(), kind.into()).is_some() {
                    return Err(fail("a family typed twice".into()));
                }
            } else {
                let end = line
                    .find(['{', ' '])
                    .ok_or_else(|| fail("not a sample".into()))?;
                let name = &line[..end];
                if !is_name(name) || family_of(name, &exposition.types).is_none() {
                    return Err(fail(format!("sample {name} of no family typed before it")));
                }
                let (labels, rest) = match line[end..].strip_prefix('{') {
                    Some(after) => labels(after).map_err(fail)?,
                    None => (BTreeMap::new(), &line[end..]),
                };
                let rest = rest
                    .strip_prefix(' ')
                    .ok_or_else(|| fail("no value".into()))?;
                let mut words = rest.split(' ');
                let value = value(words.next().unwrap_or_default()).map_err(fail)?;
                if let Some(stamp) = words.next() {
                    stamp
                        .parse::<i64>()
                        .map_err(|_| fail("bad timestamp".into()))?;
                }
                if words.next().is_some() {
                    return Err(fail("trailing words".into()));
                }
                exposition.samples.push(Sample {
                    name: name.into(),
                    labels,
                    value,
                });
            }
        }
        Ok(exposition)
    }

    impl Exposition {
        /// The type of family `name`.
        pub fn type_of(&self, name: &str) -> Option<&str> {
            self.types.get(name).map(String::as_str)
        }

        /// The value of the sample `name` with exactly `labels`; fails if there is none.
        pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
            let want: BTreeMap<String, String> = labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            self.samples
                .iter()
                .find(|s| s.name == name && s.labels == want)
                .unwrap_or_else(|| panic!("no sample {name} {labels:?}"))
                .value
        }

        /// Every histogram's buckets rise with `le` and end at `+Inf` equal to its count.
        pub fn check_histograms(&self) {
            for (family, _) in self.types.iter().filter(|(_, t)| *t == "histogram") {
                let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
                for sample in self
                    .samples
                    .iter()
                    .filter(|s| s.name == format!("{family}_bucket"))
                {
                    let mut labels = sample.labels.clone();
                    let le = super::exposition_le(&labels.remove("le").expect("le"));
                    series
                        .entry(format!("{labels:?}"))
                        .or_default()
                        .push((le, sample.value));
                }
                assert!(!series.is_empty(), "{family} has no buckets");
                for (labels, buckets) in series {
                    assert!(
                        buckets
                            .windows(2)
                            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
                        "{family}{labels}: buckets do not rise: {buckets:?}"
                    );
                    assert_eq!(buckets.last().map(|b| b.0), Some(f64::INFINITY));
                    let count = self
                        .samples
                        .iter()
                        .find(|s| {
                            s.name == format!("{family}_count")
                                && format!("{:?}", s.labels) == labels
                        })
                        .expect("a count")
                        .value;
                    assert_eq!(buckets.last().map(|b| b.1), Some(count), "{family}{labels}");
                }
            }
        }
    }
}

fn exposition_le(text: &str) -> f64 {
    if text == "+Inf" {
        f64::INFINITY
    } else {
        text.parse().expect("a bucket bound")
    }
}

#[test]
fn the_parser_refuses_what_is_not_the_format() {
    let good = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 2\n";
    let parsed = exposition::parse(good).expect("good text");
    assert_eq!(parsed.type_of("a_total"), Some("counter"));
    assert_eq!(parsed.value("a_total", &[("x", "1")]), 2.0);
    for bad in [
        "a_total 1\n",                                 // no TYPE before it
        "# TYPE a counter\na 1",                       // no final newline
        "# TYPE a counter\na{x=\"1} 1\n",              // unterminated label
        "# TYPE a counter\na{x=\"1\"} one\n",          // not a value
        "# TYPE a counter\n\na 1\n",                   // a blank line
        "# TYPE a counter\n# TYPE a gauge\na 1\n",     // typed twice
        "# TYPE a kilo\na 1\n",                        // no such type
        "# TYPE a counter\na_bucket{le=\"1\"} 1\n",    // a bucket of a counter
        "# TYPE a counter\na 1 2 3\n",                 // trailing words
        "# TYPE a counter\na{x=\"1\",x=\"2\"} 1\n",    // a label twice
        "# TYPE a counter\nGET /sessions/ses_1 200\n", // a log line
        "# TYPE a counter\n# EOF\n",                   // OpenMetrics, not this
    ] {
        assert!(exposition::parse(bad).is_err(), "accepted {bad:?}");
    }
}

/// A server and a client that speaks to it with or without its token.
struct Scraper {
    server: TestServer,
    client: reqwest::Client,
}

impl Scraper {
    async fn start(builder: common::server::TestServerBuilder) -> Self {
        Self {
            server: builder.start().await,
            client: reqwest::Client::builder().no_proxy().build().unwrap(),
        }
    }

    /// `method path` with the token; a POST carries `{"signal":"SIGTERM"}`.
    async fn send(&self, method: Method, path: &str) -> (u16, String) {
        let mut request = self
            .client
            .request(method.clone(), format!("{}{path}", self.server.base()))
            .bearer_auth(self.server.token());
        if method == Method::POST {
            request = request
                .header("content-type", "application/json")
                .body(r#"{"signal":"SIGTERM"}"#);
        }
        let response = request.send().await.expect("the registry answers");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    }

    /// Scrape, parse strictly, check the histograms; the text too.
    async fn scrape(&self) -> (exposition::Exposition, String) {
        let response = self
            .client
            .get(format!("{}/metrics", self.server.base()))
            .bearer_auth(self.server.token())
            .send()
            .await
            .expect("the registry answers");
        assert_eq!(response.status().as_u16(), 200);
        assert_eq!(
            response.headers()["content-type"],
            "text/plain; version=0.0.4; charset=utf-8"
        );
        let text = response.text().await.expect("the text");
        let parsed = exposition::parse(&text).unwrap_or_else(|why| panic!("{why}\n{text}"));
        parsed.check_histograms();
        (parsed, text)
    }
}

const SESSIONS: &str = "murmur_registry_sessions";
const PRUNES: &str = "murmur_registry_prunes_total";
const REQUESTS: &str = "murmur_registry_http_requests_total";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn figures_move_as_capsules_come_and_go_and_no_session_id_shows() {
    let probe = DoorProbe::with_deadlines(Duration::from_millis(500), Duration::from_millis(1500));
    let api = Scraper::start(TestServer::builder().probe(probe)).await;
    let mut doomed = CapsuleProcess::single();
    let stopped = CapsuleProcess::single();
    let signalled = CapsuleProcess::single();
    let capsules = [&doomed, &stopped, &signalled];
    for capsule in capsules {
        capsule.record().write_in(api.server.dir());
    }
    let ids: Vec<String> = capsules.iter().map(|c| c.session_id()).collect();
    let unreadable = session_id();
    write_raw(
        api.server.dir(),
        &format!("{unreadable}.json"),
        "{ not json",
    );

    unauthenticated_gets_401(&api).await;
    before_any_listing(&api).await;
    a_listing_counts_live_unreadable_and_probes(&api).await;
    let killed = a_killed_capsule_is_counted_gone(&api, &mut doomed).await;
    a_prune_and_an_unreadable_removal_are_counted(&api, &killed, &ids[0]).await;
    let text = a_signal_and_a_stop_are_counted(&api, &ids[2], &ids[1]).await;
    // Route templates only: no session id, no query string, anywhere.
    for id in ids.iter().chain([&unreadable]) {
        assert!(!text.contains(id.as_str()), "{id} in:\n{text}");
    }
    assert!(!text.contains("ses_") && !text.contains('?'), "{text}");
}

/// Unauthenticated: 401, and nothing else.
async fn unauthenticated_gets_401(api: &Scraper) {
    let refused = api
        .client
        .get(format!("{}/metrics", api.server.base()))
        .send()
        .await
        .expect("answers");
    assert_eq!(refused.status().as_u16(), 401);
}

/// Before any listing: each family typed, no live session counted, the 401 counted.
async fn before_any_listing(api: &Scraper) {
    let (before, _) = api.scrape().await;
    assert_eq!(before.type_of(SESSIONS), Some("gauge"));
    assert_eq!(before.type_of(PRUNES), Some("counter"));
    assert_eq!(
        before.type_of("murmur_registry_http_request_duration_seconds"),
        Some("histogram")
    );
    assert_eq!(
        before.type_of("murmur_registry_door_probe_duration_seconds"),
        Some("histogram")
    );
    assert_eq!(
        before.value(SESSIONS, &[("state", "live")]),
        0.0,
        "no listing yet"
    );
    assert_eq!(
        before.value(
            REQUESTS,
            &[("method", "GET"), ("route", "/metrics"), ("status", "401")]
        ),
        1.0
    );
}

/// A listing: three live, one unreadable, three doors probed.
async fn a_listing_counts_live_unreadable_and_probes(api: &Scraper) {
    let (status, _) = api.send(Method::GET, "/sessions?status=live,gone").await;
    assert_eq!(status, 200);
    let (listed, _) = api.scrape().await;
    assert_eq!(listed.value(SESSIONS, &[("state", "live")]), 3.0);
    assert_eq!(listed.value(SESSIONS, &[("state", "gone")]), 0.0);
    assert_eq!(listed.value("murmur_registry_unreadable_entries", &[]), 1.0);
    assert!(listed.value("murmur_registry_last_listing_timestamp_seconds", &[]) > 0.0);
    let probed = |e: &exposition::Exposition| {
        e.value("murmur_registry_door_probes_total", &[("outcome", "live")])
    };
    assert_eq!(probed(&listed), 3.0);
    assert_eq!(
        listed.value("murmur_registry_door_probe_duration_seconds_count", &[]),
        3.0
    );
    assert_eq!(
        listed.value(
            REQUESTS,
            &[("method", "GET"), ("route", "/sessions"), ("status", "200")]
        ),
        1.0
    );
}

/// A capsule killed: the next listing finds it gone. The scrape after it.
async fn a_killed_capsule_is_counted_gone(
    api: &Scraper,
    doomed: &mut CapsuleProcess,
) -> exposition::Exposition {
    doomed.send_signal(9);
    doomed.wait_exit(DEADLINE);
    let (status, _) = api.send(Method::GET, "/sessions").await;
    assert_eq!(status, 200);
    let (killed, _) = api.scrape().await;
    assert_eq!(killed.value(SESSIONS, &[("state", "gone")]), 1.0);
    assert_eq!(killed.value(SESSIONS, &[("state", "live")]), 2.0);
    killed
}

/// The killed capsule's prune (`gone_id`), then the unreadable entry's removal, counted
/// from the scrape `killed` made after the kill.
async fn a_prune_and_an_unreadable_removal_are_counted(
    api: &Scraper,
    killed: &exposition::Exposition,
    gone_id: &str,
) {
    let pruned_before = killed.value(PRUNES, &[("reason", "pruned")]);
    let (status, _) = api
        .send(Method::DELETE, &format!("/sessions/{gone_id}"))
        .await;
    assert_eq!(status, 200);
    let (status, _) = api.send(Method::DELETE, "/sessions").await;
    assert_eq!(status, 200);
    let (pruned, _) = api.scrape().await;
    assert_eq!(
        pruned.value(PRUNES, &[("reason", "pruned")]),
        pruned_before + 1.0
    );
    assert_eq!(pruned.value(PRUNES, &[("reason", "unreadable")]), 1.0);
    assert_eq!(
        pruned.value(
            REQUESTS,
            &[
                ("method", "DELETE"),
                ("route", "/sessions/{id}"),
                ("status", "200")
            ]
        ),
        1.0
    );
}

/// A signal to `signalled` and a stop of `stopped`, each counted by its outcome; the
/// exposition's text after them.
async fn a_signal_and_a_stop_are_counted(api: &Scraper, signalled: &str, stopped: &str) -> String {
    let (status, _) = api
        .send(Method::POST, &format!("/sessions/{signalled}/signal"))
        .await;
    assert_eq!(status, 200);
    let (status, body) = api
        .send(
            Method::POST,
            &format!("/sessions/{stopped}/stop?timeout=10"),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (acted, text) = api.scrape().await;
    let signals = "murmur_registry_signals_total";
    // The signal's SIGTERM and the stop's.
    assert_eq!(
        acted.value(signals, &[("signal", "SIGTERM"), ("outcome", "sent")]),
        2.0
    );
    assert_eq!(
        acted.value("murmur_registry_stops_total", &[("outcome", "stopped")]),
        1.0
    );
    assert_eq!(
        acted.value(
            REQUESTS,
            &[
                ("method", "POST"),
                ("route", "/sessions/{id}/stop"),
                ("status", "200")
            ]
        ),
        1.0
    );
    text
}

/// A verified page of `/sessions` is a listing of its own: the picture `/metrics` shows becomes
/// the sessions that page verified (with the directory's unreadable entries), at its time; a
/// page without probes leaves the picture as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_sessions_is_the_picture_of_the_sessions_it_verified() {
    let api = Scraper::start(TestServer::builder()).await;
    let capsules = [(); 3].map(|()| CapsuleProcess::single());
    for capsule in &capsules {
        capsule.record().write_in(api.server.dir());
    }
    write_raw(api.server.dir(), &format!("{}.json", session_id()), "{");
    let live = |e: &exposition::Exposition| e.value(SESSIONS, &[("state", "live")]);
    let at =
        |e: &exposition::Exposition| e.value("murmur_registry_last_listing_timestamp_seconds", &[]);

    let (status, body) = api.send(Method::GET, "/sessions?limit=2").await;
    assert_eq!(status, 200, "{body}");
    let first: serde_json::Value = serde_json::from_str(&body).expect("a page");
    let (paged, _) = api.scrape().await;
    assert_eq!(live(&paged), 2.0, "the first page verified two sessions");
    assert_eq!(paged.value("murmur_registry_unreadable_entries", &[]), 1.0);
    assert!(at(&paged) > 0.0);

    let cursor = first["next_cursor"].as_str().expect("a second page");
    let (status, body) = api
        .send(Method::GET, &format!("/sessions?limit=2&cursor={cursor}"))
        .await;
    assert_eq!(status, 200, "{body}");
    let (last, _) = api.scrape().await;
    assert_eq!(live(&last), 1.0, "the last page verified one session");
    assert!(at(&last) >= at(&paged));

    let (status, _) = api.send(Method::GET, "/sessions?limit=2&probe=false").await;
    assert_eq!(status, 200);
    let (unprobed, _) = api.scrape().await;
    assert_eq!(live(&unprobed), 1.0, "a page without probes is no picture");
    assert_eq!(at(&unprobed), at(&last));
}

/// Hold one request inside the registry: a listing that waits for a door that never answers.
async fn hold_a_listing(api: &Scraper) -> tokio::task::JoinHandle<(u16, String)> {
    let door = DoorServer::start(DoorMode::Silent);
    RecordJson::fresh()
        .url(door.url())
        .write_in(api.server.dir());
    let client = api.client.clone();
    let url = format!("{}/sessions", api.server.base());
    let token = api.server.token().to_owned();
    let held = tokio::spawn(async move {
        let _door = door;
        let response = client
            .get(url)
            .bearer_auth(token)
            .send()
            .await
            .expect("answers");
        (
            response.status().as_u16(),
            response.text().await.unwrap_or_default(),
        )
    });
    let registry = api.server.state().registry();
    let deadline = std::time::Instant::now() + DEADLINE;
    while murmur_registry::test_support::probes_in_flight(registry).probes == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the listing never probed"
        );
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    held
}

/// `GET path` on a fresh connection; the status line's code.
async fn raw_status(api: &Scraper, path: &str) -> u16 {
    let addr = api.server.addr();
    let mut socket = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
        api.server.token()
    );
    // A connection shed unread may be closed before the request is all written.
    let _ = socket.write_all(request.as_bytes()).await;
    let mut head = [0u8; 12];
    socket.read_exact(&mut head).await.expect("a status line");
    std::str::from_utf8(&head[9..12])
        .expect("ascii")
        .parse()
        .expect("a status")
}

impl Scraper {
    /// `GET /events` with the token: the stream, open until dropped.
    async fn open_events(&self) -> reqwest::Response {
        (self.client.get(format!("{}/events", self.server.base())))
            .bearer_auth(self.server.token())
            .send()
            .await
            .expect("a stream")
    }

    /// A server under `limits` whose door probes wait up to 3 s for an answer, so a listing of
    /// a silent door (see [`hold_a_listing`]) holds its request that long.
    async fn behind_a_silent_door(limits: ServeLimits) -> Self {
        let probe = DoorProbe::with_deadlines(Duration::from_millis(500), Duration::from_secs(3));
        Self::start(TestServer::builder().probe(probe).limits(limits)).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_from_the_accept_loop_is_counted_though_no_router_saw_it() {
    let api = Scraper::behind_a_silent_door(ServeLimits {
        max_connections: 1,
        ..ServeLimits::default()
    })
    .await;
    let held = hold_a_listing(&api).await;
    // The only connection is inside a request: the newcomer is answered unread.
    assert_eq!(raw_status(&api, "/healthz").await, 503);
    assert_eq!(held.await.expect("the listing").0, 200);
    let (figures, _) = api.scrape().await;
    let shed = |cause| figures.value("murmur_registry_load_shed_total", &[("cause", cause)]);
    assert_eq!(shed("max_connections"), 1.0);
    assert_eq!(shed("max_in_flight"), 0.0);
    // The router never saw it.
    assert!(
        !figures.samples.iter().any(
            |s| s.name == REQUESTS && s.labels.get("status").map(String::as_str) == Some("503")
        ),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_open_and_503s_for_in_flight_and_stream_caps_are_counted() {
    let api = Scraper::behind_a_silent_door(ServeLimits {
        max_in_flight: 1,
        max_event_streams: 1,
        ..ServeLimits::default()
    })
    .await;
    let held = hold_a_listing(&api).await;
    assert_eq!(raw_status(&api, "/healthz").await, 503);
    assert_eq!(held.await.expect("the listing").0, 200);

    let stream = api.open_events().await;
    assert_eq!(stream.status().as_u16(), 200);
    assert_eq!(raw_status(&api, "/events").await, 503);
    let (open, _) = api.scrape().await;
    let shed = |e: &exposition::Exposition, cause| {
        e.value("murmur_registry_load_shed_total", &[("cause", cause)])
    };
    assert_eq!(shed(&open, "max_in_flight"), 1.0);
    assert_eq!(shed(&open, "max_event_streams"), 1.0);
    assert_eq!(shed(&open, "max_connections"), 0.0);
    assert_eq!(open.value("murmur_registry_event_streams_open", &[]), 1.0);

    drop(stream);
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let (closed, _) = api.scrape().await;
        if closed.value("murmur_registry_event_streams_open", &[]) == 0.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the stream never closed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// With a listener and no listing at all, the sessions gauge follows the live view's passes:
/// a capsule shows live, then, killed, leaves the live count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sessions_gauge_follows_the_live_view_without_a_listing() {
    let api =
        Scraper::start(TestServer::builder().events_interval(Duration::from_millis(200))).await;
    let mut capsule = CapsuleProcess::single();
    capsule.record().write_in(api.server.dir());
    let stream = api.open_events().await;
    assert_eq!(stream.status().as_u16(), 200);
    let live = |e: &exposition::Exposition| e.value(SESSIONS, &[("state", "live")]);
    scrape_until_local(&api, "the live view's pass counted the capsule live", |e| {
        live(e) == 1.0
    })
    .await;
    capsule.send_signal(9);
    capsule.wait_exit(DEADLINE);
    scrape_until_local(&api, "the killed capsule left the live count", |e| {
        live(e) == 0.0
    })
    .await;
    let (_, text) = api.scrape().await;
    let listed =
        (text.lines()).any(|l| l.starts_with(REQUESTS) && l.contains("route=\"/sessions\""));
    assert!(!listed, "no listing was asked for:\n{text}");
    drop(stream);
}

/// This host's own figures are gauges, sane, and agree with the kernel's own files.
#[tokio::test]
async fn the_hosts_load_and_memory_are_gauges_read_at_the_scrape() {
    let api = Scraper::start(TestServer::builder()).await;
    let (figures, _) = api.scrape().await;
    let gauge = |name: &str| {
        let name = format!("murmur_registry_{name}");
        assert_eq!(figures.type_of(&name), Some("gauge"), "{name}");
        figures.value(&name, &[])
    };
    let cpus = gauge("host_cpus");
    let online = std::thread::available_parallelism().map_or(1, usize::from);
    assert!(
        cpus >= online as f64,
        "{cpus} CPUs, fewer than this process may use"
    );
    for load in ["host_load1", "host_load5", "host_load15"] {
        let value = gauge(load);
        assert!(value.is_finite() && value >= 0.0, "{load} {value}");
    }
    let total = gauge("host_memory_total_bytes");
    let available = gauge("host_memory_available_bytes");
    assert!(available <= total && total > 0.0, "{available} of {total}");
    let meminfo = std::fs::read_to_string("/proc/meminfo").expect("/proc/meminfo");
    let kib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|l| l.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .expect("MemTotal");
    assert_eq!(total, kib * 1024.0, "the kernel's MemTotal");
}

/// Scrape `api` until `done` holds of its exposition, failing after [`DEADLINE`].
async fn scrape_until_local(
    api: &Scraper,
    what: &str,
    done: impl Fn(&exposition::Exposition) -> bool,
) {
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let (parsed, text) = api.scrape().await;
        if done(&parsed) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{what}:\n{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs promtool (Debian prometheus)"]
async fn promtool_accepts_the_exposition() {
    let api = Scraper::start(TestServer::builder()).await;
    let capsule = CapsuleProcess::single();
    capsule.record().write_in(api.server.dir());
    assert_eq!(api.send(Method::GET, "/sessions").await.0, 200);
    assert_eq!(api.send(Method::GET, "/sessions/ses_x").await.0, 404);
    let (_, text) = api.scrape().await;
    let mut promtool = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run promtool (Debian package prometheus)");
    use std::io::Write;
    promtool
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write the exposition");
    let done = promtool.wait_with_output().expect("promtool ends");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&done.stdout),
        String::from_utf8_lossy(&done.stderr)
    );
    // It exits 0 even for some lint findings: a clean exposition makes it say nothing.
    assert!(
        done.status.success() && said.trim().is_empty(),
        "{said}\n{text}"
    );
}

/// Scrape a served binary until `done` holds of its exposition, failing after [`DEADLINE`].
#[cfg(feature = "fleet")]
async fn scrape_until(
    base: &str,
    token: &str,
    what: &str,
    done: impl Fn(&exposition::Exposition) -> bool,
) -> exposition::Exposition {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let text = client
            .get(format!("{base}/metrics"))
            .bearer_auth(token)
            .send()
            .await
            .expect("the registry answers")
            .text()
            .await
            .expect("the text");
        let parsed = exposition::parse(&text).unwrap_or_else(|why| panic!("{why}\n{text}"));
        if done(&parsed) {
            return parsed;
        }
        assert!(std::time::Instant::now() < deadline, "{what}:\n{text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(feature = "fleet")]
#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn the_fleet_figures_follow_the_lease() {
    use common::binary::{Home, User, registry};
    use common::etcd::Etcd;
    let mut etcd = Etcd::start().await;
    let home = Home::new();
    let mut command = registry(home.path(), User::Me);
    command.args(["serve", "--bind", "127.0.0.1:0", "--fleet-etcd"]);
    command.arg(etcd.endpoint());
    command.args([
        "--host-id",
        "m1",
        "--fleet-ttl",
        "3s",
        "--events-interval",
        "200ms",
    ]);
    let server = ServedBinary::spawn(command);
    let base = format!("http://{}", server.addr);
    let token = home.token();
    let joined = scrape_until(&base, &token, "the lease held and the host seen", |e| {
        e.type_of("murmur_registry_fleet_hosts").is_some()
            && e.value("murmur_registry_fleet_hosts", &[]) == 1.0
            && e.value("murmur_registry_fleet_lease_held", &[]) == 1.0
    })
    .await;
    let published = joined.value("murmur_registry_fleet_last_publish_timestamp_seconds", &[]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64();
    assert!(
        published > now - 60.0 && published <= now + 1.0,
        "{published} vs {now}"
    );
    assert_eq!(
        joined.type_of("murmur_registry_fleet_lease_held"),
        Some("gauge")
    );
    // Passes go on publishing.
    scrape_until(&base, &token, "a later publish", |e| {
        e.value("murmur_registry_fleet_last_publish_timestamp_seconds", &[]) > published
    })
    .await;
    // etcd gone: the next step cannot renew, and the lease is no longer counted on.
    etcd.kill();
    scrape_until(&base, &token, "the lease no longer held", |e| {
        e.value("murmur_registry_fleet_lease_held", &[]) == 0.0
    })
    .await;
}
