//! `serve --log-format json|text`, through the binary: requests with a token, a query string
//! and a session id in the path, then every stderr line read. In `json` each line is one JSON
//! object with `timestamp`, `level`, `target` and `message`, and a request's line adds `method`,
//! `route` (the template), `status` and `latency_ms`; `text` names the same template. Neither
//! ever holds the token, the query or the session id. A hostile value (a running directory whose
//! name holds a line break and an escape sequence) stays escaped on its event's one line.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::binary::{Home, User, registry, run};
use common::{CapsuleProcess, ServedBinary};
use rustix::process::Signal;
use serde_json::Value;

/// `method path` over a fresh connection, with `token` as bearer when given; the status.
fn request(server: &ServedBinary, method: &str, path: &str, token: Option<&str>) -> u16 {
    let mut socket = TcpStream::connect(server.addr).expect("connect");
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        socket,
        "{method} {path} HTTP/1.1\r\nHost: {}\r\n{auth}Connection: close\r\n\r\n",
        server.addr
    )
    .expect("write");
    let mut answer = String::new();
    socket.read_to_string(&mut answer).expect("read");
    answer[9..12].parse().expect("a status")
}

/// The requests every format is tried with; answers what must never be logged.
fn make_requests(home: &Home, server: &ServedBinary, capsule: &CapsuleProcess) -> Vec<String> {
    let token = home.token();
    let id = capsule.session_id();
    let query_secret = "q_0f3c9a1b";
    let one = format!("/sessions/{id}?token={token}&note={query_secret}");
    assert_eq!(request(server, "GET", &one, Some(&token)), 200);
    assert_eq!(
        request(server, "GET", "/sessions?status=live", Some(&token)),
        200
    );
    assert_eq!(
        request(server, "DELETE", &format!("/sessions/{id}"), Some(&token)),
        409
    );
    assert_eq!(
        request(server, "GET", &format!("/nowhere/{id}"), Some(&token)),
        404
    );
    assert_eq!(request(server, "GET", "/metrics", None), 401);
    vec![token, id, query_secret.to_owned(), "?".to_owned()]
}

/// Start `serve` with `args` in a home holding one live capsule's record, make the requests,
/// stop it; its stderr and what must not be in it.
fn serve_and_log(args: &[&str]) -> (String, Vec<String>) {
    let home = Home::new();
    let capsule = CapsuleProcess::single();
    home.write(&capsule.record());
    let mut cmd = registry(home.path(), User::Me);
    cmd.args(["serve", "--bind", "127.0.0.1:0"]).args(args);
    let server = ServedBinary::spawn(cmd);
    let secrets = make_requests(&home, &server, &capsule);
    let (status, stderr) = server.stop_with(Signal::TERM);
    assert!(status.success(), "{status}: {stderr}");
    (stderr, secrets)
}

fn assert_nothing_secret(log: &str, secrets: &[String]) {
    for secret in secrets {
        assert!(!log.contains(secret.as_str()), "{secret:?} logged:\n{log}");
    }
}

#[test]
fn json_logs_one_object_per_line_with_the_route_template_and_no_secret() {
    let (log, secrets) = serve_and_log(&["--log-format", "json"]);
    let lines: Vec<Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}")))
        .collect();
    for line in &lines {
        for field in ["timestamp", "level", "target", "message"] {
            assert!(line[field].is_string(), "no {field}: {line}");
        }
    }
    let requests: Vec<&Value> = lines
        .iter()
        .filter(|line| line["target"] == "murmur_registry::http::access")
        .collect();
    let seen: Vec<(String, String, u64)> = requests
        .iter()
        .map(|line| {
            assert!(
                line["latency_ms"].as_f64().is_some_and(|ms| ms >= 0.0),
                "{line}"
            );
            assert_eq!(line["level"], "INFO", "{line}");
            (
                line["method"].as_str().expect("method").to_owned(),
                line["route"].as_str().expect("route").to_owned(),
                line["status"].as_u64().expect("status"),
            )
        })
        .collect();
    let want = [
        ("GET", "/sessions/{id}", 200),
        ("GET", "/sessions", 200),
        ("DELETE", "/sessions/{id}", 409),
        ("GET", "unmatched", 404),
        ("GET", "/metrics", 401),
    ]
    .map(|(m, r, s)| (m.to_owned(), r.to_owned(), s));
    assert_eq!(seen, want, "{log}");
    assert_nothing_secret(&log, &secrets);
}

#[test]
fn text_logs_name_the_same_route_template_and_no_secret() {
    let (log, secrets) = serve_and_log(&[]);
    let requests: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("murmur_registry::http::access"))
        .collect();
    assert_eq!(requests.len(), 5, "{log}");
    assert!(
        requests[0].contains("method=GET")
            && requests[0].contains("route=/sessions/{id}")
            && requests[0].contains("status=200")
            && requests[0].contains("latency_ms="),
        "{log}"
    );
    assert!(requests[3].contains("route=unmatched status=404"), "{log}");
    assert_nothing_secret(&log, &secrets);
}

#[test]
fn an_unknown_log_format_is_refused_with_the_ones_there_are() {
    let home = Home::new();
    let mut cmd = registry(home.path(), User::Me);
    cmd.args(["serve", "--bind", "127.0.0.1:0", "--log-format", "xml"]);
    let done = run(cmd);
    // clap's usage error: exit 2, before anything starts.
    assert_eq!(done.status.code(), Some(2), "{done:#?}");
    assert!(done.stdout.is_empty(), "{done:#?}");
    assert!(
        done.stderr.contains("--log-format") && done.stderr.contains("json"),
        "{}",
        done.stderr
    );
}

/// A running directory whose name would forge a log line: when it goes missing, the text log
/// names it in one line, its line break and escape sequence shown escaped.
#[test]
fn text_logs_a_hostile_path_on_its_one_line_escaped() {
    let home = Home::new();
    let forged = "2026-01-01T00:00:00.000000Z  WARN murmur_registry: forged";
    let dir = home.path().join(format!("run\n{forged}\x1b[2J"));
    let mut cmd = registry(home.path(), User::Me);
    cmd.args(["serve", "--bind", "127.0.0.1:0", "--running-dir"])
        .arg(&dir);
    let server = ServedBinary::spawn(cmd);
    std::fs::remove_dir(&dir).expect("remove the running directory");
    let token = home.token();
    assert_eq!(request(&server, "GET", "/sessions", Some(&token)), 503);
    let (status, log) = server.stop_with(Signal::TERM);
    assert!(status.success(), "{status}: {log}");

    assert!(!log.contains('\x1b'), "{log:?}");
    assert!(
        log.lines().all(|line| !line.starts_with(forged)),
        "a forged line:\n{log}"
    );
    let escaped = format!("run\\n{forged}\\u{{1b}}[2J");
    let naming: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("running directory unavailable"))
        .collect();
    assert_eq!(naming.len(), 1, "{log}");
    assert!(naming[0].contains(&escaped), "{log}");
}
