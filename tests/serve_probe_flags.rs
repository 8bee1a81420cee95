//! `serve`'s probe and limit flags: out-of-range or inconsistent values are refused before
//! anything starts, with the flags named, so an operator never runs a registry that cannot
//! probe or that event streams could fill; values given are the ones the probes keep.

mod common;

use common::binary::{Home, User, registry, run};
use common::{DEADLINE, DoorMode, DoorServer, RecordJson, ServedBinary};

#[test]
fn out_of_range_probe_settings_are_refused_before_serving() {
    for (flag, value) in [
        ("--max-concurrent-probes", "0"),
        ("--max-concurrent-probes", "many"),
        ("--probe-connect-timeout", "0s"),
        ("--probe-answer-timeout", "2min"),
        ("--probe-answer-timeout", "soon"),
        ("--door-recheck", "soon"),
        ("--events-interval", "often"),
    ] {
        let home = Home::new();
        let mut cmd = registry(home.path(), User::Me);
        cmd.args(["serve", "--bind", "127.0.0.1:0", flag, value]);
        let done = run(cmd);
        // clap's usage error.
        assert_eq!(done.status.code(), Some(2), "{flag} {value}: {done:#?}");
        assert!(done.stdout.is_empty(), "{flag} {value}: {done:#?}");
        assert!(done.stderr.contains(flag), "{flag} {value}: {done:#?}");
    }
}

/// Timeouts that would fail every request are refused with the flag named: zero, and a
/// request timeout one slow door could use up; so are live-view paces short enough to make its
/// loop a busy wait.
#[test]
fn timeouts_that_would_fail_every_request_are_refused_before_serving() {
    for (args, named) in [
        (&["--request-timeout", "0s"][..], "--request-timeout"),
        (
            &["--header-read-timeout", "0s"][..],
            "--header-read-timeout",
        ),
        (&["--shutdown-grace", "0s"][..], "--shutdown-grace"),
        (
            &["--write-stall-timeout", "0s"][..],
            "--write-stall-timeout",
        ),
        (&["--request-timeout", "5s"][..], "--request-timeout"),
        // Below the live view's shortest pace: its loop would turn into a busy wait.
        (&["--door-recheck", "10ms"][..], "--door-recheck"),
        (&["--events-interval", "0s"][..], "--events-interval"),
        (
            &["--probe-answer-timeout", "40s", "--request-timeout", "30s"][..],
            "--probe-answer-timeout",
        ),
    ] {
        let home = Home::new();
        let mut cmd = registry(home.path(), User::Me);
        cmd.args(["serve", "--bind", "127.0.0.1:0"]).args(args);
        let done = run(cmd);
        assert_eq!(done.status.code(), Some(1), "{args:?}: {done:#?}");
        assert!(done.stdout.is_empty(), "{args:?}: {done:#?}");
        assert!(done.stderr.contains(named), "{args:?}: {done:#?}");
    }
}

/// A stream cap that would let event streams (never evicted) hold every connection is refused
/// with both flags named, and so is a connection cap no stream cap fits below; so is a stream
/// cap of zero, which would refuse every stream. (A lowered `--max-connections` alone is
/// accepted: `serve_binary`'s limit flags test serves with `--max-connections 8`.)
#[test]
fn an_event_stream_cap_not_below_the_connection_cap_is_refused_before_serving() {
    for (args, code, named) in [
        (
            &["--max-event-streams", "1024"][..],
            1,
            &["--max-event-streams", "--max-connections"][..],
        ),
        (
            &["--max-connections", "16", "--max-event-streams", "17"][..],
            1,
            &["--max-event-streams", "--max-connections"][..],
        ),
        // The default shrinks under a lowered --max-connections, but below 2 no cap fits.
        (
            &["--max-connections", "1"][..],
            1,
            &["--max-event-streams", "--max-connections"][..],
        ),
        (
            &["--max-event-streams", "0"][..],
            2,
            &["--max-event-streams"][..],
        ),
    ] {
        let home = Home::new();
        let mut cmd = registry(home.path(), User::Me);
        cmd.args(["serve", "--bind", "127.0.0.1:0"]).args(args);
        let done = run(cmd);
        assert_eq!(done.status.code(), Some(code), "{args:?}: {done:#?}");
        assert!(done.stdout.is_empty(), "{args:?}: {done:#?}");
        for flag in named {
            assert!(done.stderr.contains(flag), "{args:?}: {done:#?}");
        }
    }
}

#[test]
fn the_answer_deadline_given_to_serve_is_the_one_probes_keep() {
    use std::io::{Read, Write};

    let home = Home::new();
    let door = DoorServer::start(DoorMode::Silent);
    let record = RecordJson::fresh().url(door.url());
    home.write(&record);
    let mut cmd = registry(home.path(), User::Me);
    cmd.args([
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--max-concurrent-probes",
        "3",
        "--probe-connect-timeout",
        "400ms",
        "--probe-answer-timeout",
        "300ms",
    ]);
    let server = ServedBinary::spawn(cmd);
    let addr = server.addr;
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(DEADLINE)).expect("timeout");
    write!(
        stream,
        "GET /sessions/{}/liveness HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\
         Connection: close\r\n\r\n",
        record.session_id(),
        home.token()
    )
    .expect("request");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("answer");
    drop(server);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"state\":\"unreachable\""), "{answer}");
    assert!(answer.contains("did not answer within 300ms"), "{answer}");
}
