//! `murmur-registry serve` as a real process: the binary built by cargo, started with its own
//! temporary `HOME` (mode 0700) and its own port (`--bind 127.0.0.1:0`), talked to over a real
//! TCP socket, stopped with a real signal.
//!
//! Covered here (what needs the binary, a separate process or another uid; the in-process HTTP
//! contract is tested elsewhere):
//! - the first stdout line is exactly `listening on http://127.0.0.1:<port>` with a port that
//!   answers; SIGTERM and SIGINT shut the server down with exit status 0, and a request in
//!   flight at SIGTERM is still answered;
//! - with `RUST_LOG=trace` the request is traced but its `Authorization` header never is, and
//!   no door token (not even one a careless door echoes back) reaches the log or the answer;
//! - the token file: created on first start (0600, 64 hex digits, in a 0700 directory), kept
//!   on restart; the start refused (exit 1, the path and the fix on stderr, the file untouched)
//!   when it is a symlink, owned by another uid, empty, or mode 0640 / 0604, or when its
//!   directory is one others can write (0777, 0775, 1777: the directory is named);
//! - `--bind` refusing a non-loopback address without `--allow-remote`, and
//!   `MURMUR_REGISTRY_BIND` honoured; `--running-dir` and `--token-file` honoured; an explicit
//!   `--running-dir` others can enter (0755, 1777) refused and left as it was; an
//!   `--allow-origin` that is not an origin as browsers send it (a trailing slash, no scheme)
//!   refused;
//! - EPERM: a server running as uid 65534 asked to signal or stop a root-owned process
//!   answers 409 `refused` with the kernel's reason, and the process and its record stay; a
//!   stop whose SIGTERM got through and whose SIGKILL did not says so (`signal_sent`);
//! - `murmur-registry token --rotate` seen by a running server without a restart.
//!
//! Synchronisation is by evidence only: the server's first stdout line, a child's exit status,
//! polling under a generous deadline. Every spawned process is killed and reaped on drop.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use common::binary::{Finished, Home, NOBODY, User, chown_nobody, is_hex64, registry, run};
use common::{
    DEADLINE, DoorMode, DoorServer, ExitedChild, RecordJson, Rejection, ServedBinary, TestProcess,
    dir_snapshot, mode_of, real_uid, session_id, wait_until, write_raw,
};
use rustix::process::Signal;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Fixtures: a running server, a tiny HTTP client
// ---------------------------------------------------------------------------------------------

/// `murmur-registry serve` as a separate process (`common::ServedBinary`: started by
/// `Server::start`, `::start_traced` or `::spawn`, killed and reaped on drop), asked over HTTP.
type Server = ServedBinary;

impl Server {
    fn get(&self, path: &str, token: Option<&str>) -> Reply {
        http(self.addr, "GET", path, token, None)
    }

    fn post(&self, path: &str, token: Option<&str>, body: Option<&Value>) -> Reply {
        http(self.addr, "POST", path, token, body)
    }
}

/// One HTTP response.
#[derive(Debug)]
struct Reply {
    status: u16,
    /// Header names lowercased.
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("the body is not JSON ({e}): {}", self.body))
    }
}

/// A blocking HTTP/1.1 request over a fresh connection (`Connection: close`), with
/// `Host: 127.0.0.1:<port>`, an optional bearer token and an optional JSON body.
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Reply {
    let mut stream = TcpStream::connect(addr).expect("connect to the server");
    stream
        .set_read_timeout(Some(DEADLINE))
        .expect("read timeout");
    stream
        .set_write_timeout(Some(DEADLINE))
        .expect("write timeout");
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(token) = token {
        request.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    if !body.is_empty() {
        request.push_str("Content-Type: application/json\r\n");
    }
    if !body.is_empty() || method == "POST" {
        request.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    request.push_str(&body);
    stream
        .write_all(request.as_bytes())
        .expect("send the request");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read the response");
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of head in {:?}", String::from_utf8_lossy(&raw)));
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {head:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut payload = raw[head_end + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    if chunked {
        payload = dechunk(&payload);
    }
    Reply {
        status,
        headers,
        body: String::from_utf8_lossy(&payload).into_owned(),
    }
}

/// Decode a `Transfer-Encoding: chunked` body.
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(line_end) = raw.windows(2).position(|w| w == b"\r\n") else {
            panic!("a chunk size line without an end");
        };
        let size_text = String::from_utf8_lossy(&raw[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .unwrap_or_else(|e| panic!("bad chunk size {size_text:?}: {e}"));
        if size == 0 {
            return out;
        }
        let start = line_end + 2;
        out.extend_from_slice(&raw[start..start + size]);
        raw = &raw[start + size + 2..];
    }
}

// ---------------------------------------------------------------------------------------------
// Start, first line, shutdown
// ---------------------------------------------------------------------------------------------

#[test]
fn first_line_names_the_real_port_and_sigterm_exits_zero() {
    let home = Home::new();
    let server = Server::start(home.path(), User::Me);
    assert_eq!(server.addr.ip().to_string(), "127.0.0.1");
    assert_ne!(
        server.addr.port(),
        0,
        "the first line must carry the real port"
    );
    assert_eq!(
        server.first_line,
        format!("listening on http://127.0.0.1:{}", server.addr.port())
    );
    // The port in the line is the one that answers.
    let health = server.get("/healthz", None);
    assert_eq!(health.status, 200, "{health:?}");
    assert_eq!(health.json(), json!({"status": "ok"}));

    let (status, stderr) = server.stop_with(Signal::TERM);
    assert_eq!(
        status.code(),
        Some(0),
        "SIGTERM must shut down gracefully: {status}; {stderr}"
    );
}

#[test]
fn health_answers_ok_for_a_running_registry_and_fails_for_none() {
    let home = Home::new();
    let server = Server::start(home.path(), User::Me);
    let mut cmd = registry(home.path(), User::Me);
    cmd.args(["health", "--bind", &server.addr.to_string()]);
    let done = run(cmd);
    done.assert_success();
    assert_eq!(done.stdout, "ok\n", "{done:#?}");

    let mut cmd = registry(home.path(), User::Me);
    cmd.args(["health", "--bind", &common::refused_url()]);
    let done = run(cmd);
    done.assert_failure();
    assert!(done.stderr.contains("no registry answers"), "{done:#?}");
}

#[test]
fn sigint_also_shuts_down_with_exit_zero() {
    let home = Home::new();
    let server = Server::start(home.path(), User::Me);
    assert_eq!(server.get("/healthz", None).status, 200);
    let (status, stderr) = server.stop_with(Signal::INT);
    assert_eq!(status.code(), Some(0), "SIGINT: {status}; {stderr}");
}

#[test]
fn the_authorization_header_is_never_logged() {
    let home = Home::new();
    let server = Server::start_traced(home.path());
    let token = home.token();
    let wrong = "0123456789abcdef-not-the-token-but-no-less-secret";

    let ok = server.get("/sessions?probe=false", Some(&token));
    assert_eq!(ok.status, 200, "{ok:?}");
    let refused = server.get("/sessions?probe=false", Some(wrong));
    assert_eq!(refused.status, 401, "{refused:?}");
    // A token put where it is never accepted is never logged either.
    let in_query = server.get(&format!("/sessions?access_token={token}"), None);
    assert_eq!(in_query.status, 401, "{in_query:?}");

    let (status, log) = server.stop_with(Signal::TERM);
    assert_eq!(status.code(), Some(0), "{status}");
    assert!(
        !log.contains(&token),
        "the registry token appears in the log:\n{log}"
    );
    assert!(
        !log.contains(wrong),
        "a presented (wrong) token appears in the log:\n{log}"
    );
    // The requests were traced by method and route template; neither headers nor queries are
    // logged.
    assert!(
        log.contains("route=/sessions"),
        "the request was not traced at all:\n{log}"
    );
    assert!(
        !log.contains("access_token") && !log.contains("probe=false"),
        "a query string was logged:\n{log}"
    );
}

#[test]
fn door_tokens_never_reach_the_log_or_the_answer() {
    let home = Home::new();
    let server = Server::start_traced(home.path());
    let token = home.token();

    // An authenticated door that accepts the record's token: live.
    let good_id = session_id();
    let good_secret = "door-token-accepted-5e1d0c9b8a7f6e5d4c3b";
    let good_door = DoorServer::start(DoorMode::Authenticated {
        session_id: good_id.clone(),
        token: good_secret.to_owned(),
        rejection: Rejection::Http401,
    });
    RecordJson::new(&good_id)
        .url(good_door.url())
        .door_token(good_secret)
        .write_in(&home.running_dir());
    // A careless door that quotes the (wrong) token it was sent in its error message.
    let bad_id = session_id();
    let bad_secret = "door-token-rejected-0a1b2c3d4e5f60718293";
    let bad_door = DoorServer::start(DoorMode::Authenticated {
        session_id: bad_id.clone(),
        token: "the-door-wants-another-token".to_owned(),
        rejection: Rejection::EchoingJsonRpcError,
    });
    RecordJson::new(&bad_id)
        .url(bad_door.url())
        .door_token(bad_secret)
        .write_in(&home.running_dir());

    let list = server.get("/sessions", Some(&token));
    assert_eq!(list.status, 200, "{list:?}");
    let states: Vec<(Value, Value)> = list.json()["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| (s["session_id"].clone(), s["liveness"]["state"].clone()))
        .collect();
    assert_eq!(
        states,
        [
            (json!(bad_id), json!("unreachable")),
            (json!(good_id), json!("live")),
        ],
        "{}",
        list.body
    );
    // The doors really were asked with the secrets, so there was something to leak.
    assert!(
        bad_door
            .requests()
            .iter()
            .any(|r| r.header("authorization") == Some(&format!("Bearer {bad_secret}"))),
        "the registry never presented the door token"
    );

    let (status, log) = server.stop_with(Signal::TERM);
    assert_eq!(status.code(), Some(0), "{status}");
    for secret in [good_secret, bad_secret, token.as_str()] {
        assert!(
            !list.body.contains(secret),
            "{secret} in the answer: {}",
            list.body
        );
        assert!(!log.contains(secret), "{secret} in the log:\n{log}");
    }
}

#[test]
fn sigterm_lets_an_inflight_request_finish() {
    let home = Home::new();
    let server = Server::start(home.path(), User::Me);
    let token = home.token();
    // A door that takes a moment to answer keeps `GET /sessions` in flight.
    let id = session_id();
    let door = DoorServer::start_slow(
        DoorMode::SpecCard(id.clone()),
        std::time::Duration::from_millis(1500),
    );
    RecordJson::new(&id)
        .url(door.url())
        .write_in(&home.running_dir());

    let addr = server.addr;
    let client = std::thread::spawn(move || http(addr, "GET", "/sessions", Some(&token), None));
    wait_until("the registry is probing the door", DEADLINE, || {
        !door.requests().is_empty()
    });
    let (status, stderr) = server.stop_with(Signal::TERM);
    assert_eq!(status.code(), Some(0), "{status}: {stderr}");

    let reply = client.join().expect("the client thread");
    assert_eq!(
        reply.status, 200,
        "the in-flight request must be answered: {reply:?}"
    );
    assert_eq!(reply.json()["sessions"][0]["liveness"]["state"], "live");
}

// ---------------------------------------------------------------------------------------------
// The token file
// ---------------------------------------------------------------------------------------------

#[test]
fn the_token_file_is_created_private_on_first_start_and_kept_after() {
    let home = Home::new();
    assert!(!home.token_path().exists());
    let server = Server::start(home.path(), User::Me);

    let path = home.token_path();
    let meta = std::fs::symlink_metadata(&path).expect("the token file exists");
    assert!(meta.file_type().is_file());
    assert_eq!(mode_of(&path), 0o600, "token file mode");
    assert_eq!(mode_of(&home.registry_dir()), 0o700, "token directory mode");
    assert_eq!(
        mode_of(&home.path().join(".murmur")),
        0o700,
        "~/.murmur mode"
    );
    assert_eq!(meta.uid(), rustix::process::geteuid().as_raw());
    let token = home.token();
    assert!(is_hex64(&token), "256 bits as hex: {token:?}");

    // It is the token the server accepts.
    assert_eq!(
        server.get("/sessions?probe=false", Some(&token)).status,
        200
    );
    let (status, _) = server.stop_with(Signal::TERM);
    assert_eq!(status.code(), Some(0));

    // A second start keeps it.
    let again = Server::start(home.path(), User::Me);
    assert_eq!(home.token(), token, "a restart must not replace the token");
    assert_eq!(again.get("/sessions?probe=false", Some(&token)).status, 200);
}

/// Start the server on a planted token file and expect a refusal naming the file and the fix.
fn assert_start_refused(home: &Home, problem: &str) -> Finished {
    let mut cmd = registry(home.path(), User::Me);
    cmd.args(["serve", "--bind", "127.0.0.1:0"]);
    let done = run(cmd);
    assert_eq!(
        done.status.code(),
        Some(1),
        "the start must be refused: {done:?}"
    );
    assert!(
        !done.stdout.contains("listening"),
        "a refused start must not listen: {done:?}"
    );
    let path = home.token_path().display().to_string();
    assert!(
        done.stderr.contains(&path),
        "stderr must name the token file {path}: {}",
        done.stderr
    );
    assert!(
        done.stderr.contains(problem),
        "stderr must say {problem:?}: {}",
        done.stderr
    );
    assert!(
        done.stderr.contains(&format!("rm {path}")),
        "stderr must say what to do: {}",
        done.stderr
    );
    done
}

fn write_token_file(path: &Path, content: &str, mode: u32) {
    std::fs::write(path, content).expect("write a token file");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

const PLANTED: &str = "4f1c0de5a1b2c3d4e5f60718293a4b5c6d7e8f9011223344556677889900aabb\n";

#[test]
fn start_is_refused_when_the_token_file_is_a_symlink() {
    let home = Home::new();
    home.make_registry_dir();
    let target = home.path().join("elsewhere-token");
    write_token_file(&target, PLANTED, 0o600);
    std::os::unix::fs::symlink(&target, home.token_path()).expect("symlink");

    assert_start_refused(&home, "symlink");
    assert_eq!(
        std::fs::read_link(home.token_path()).expect("still a link"),
        target
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), PLANTED);
}

#[test]
#[ignore = "needs root: chowns the token file to uid 65534"]
fn start_is_refused_when_the_token_file_belongs_to_another_uid() {
    let home = Home::new();
    home.make_registry_dir();
    write_token_file(&home.token_path(), PLANTED, 0o600);
    chown_nobody(&home.token_path());

    assert_start_refused(&home, &format!("uid {NOBODY}"));
    let meta = std::fs::symlink_metadata(home.token_path()).unwrap();
    assert_eq!(meta.uid(), NOBODY, "the file must be left as it was");
    assert_eq!(home.token(), PLANTED.trim());
}

#[test]
fn start_is_refused_when_the_token_file_is_empty() {
    let home = Home::new();
    home.make_registry_dir();
    write_token_file(&home.token_path(), "", 0o600);

    assert_start_refused(&home, "empty");
    assert_eq!(std::fs::read(home.token_path()).unwrap(), b"");
}

/// Plant a token file with `mode`, expect the start refused naming the mode (`0640`), and the
/// file left as it was.
fn assert_start_refused_for_mode(mode: u32) {
    let home = Home::new();
    home.make_registry_dir();
    write_token_file(&home.token_path(), PLANTED, mode);

    assert_start_refused(&home, &format!("{mode:04o}"));
    assert_eq!(mode_of(&home.token_path()), mode, "never repaired silently");
    assert_eq!(home.token(), PLANTED.trim());
}

#[test]
fn start_is_refused_when_the_group_can_read_the_token_file() {
    assert_start_refused_for_mode(0o640);
}

#[test]
fn start_is_refused_when_others_can_read_the_token_file() {
    assert_start_refused_for_mode(0o604);
}

/// Start the server with `--token-file <dir>/token` and expect a refusal naming `dir`.
fn assert_start_refused_for_token_dir(home: &Home, dir: &Path) -> Finished {
    let mut cmd = registry(home.path(), User::Me);
    cmd.args(["serve", "--bind", "127.0.0.1:0", "--token-file"])
        .arg(dir.join("token"));
    let done = run(cmd);
    assert_eq!(
        done.status.code(),
        Some(1),
        "the start must be refused: {done:?}"
    );
    assert!(!done.stdout.contains("listening"), "{done:?}");
    let named = dir.display().to_string();
    assert!(
        done.stderr.contains(&format!("its directory {named} ")),
        "stderr must name the directory {named}: {}",
        done.stderr
    );
    done
}

#[test]
fn start_is_refused_when_others_can_write_the_token_files_directory() {
    let home = Home::new();
    for mode in [0o777, 0o775, 0o1777, 0o757] {
        let dir = home.path().join(format!("open-{mode:o}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
        // A token file that would pass every other check.
        write_token_file(&dir.join("token"), PLANTED, 0o600);
        let done = assert_start_refused_for_token_dir(&home, &dir);
        assert!(!done.stderr.contains(PLANTED.trim()), "the token leaked");
        assert_eq!(std::fs::read_to_string(dir.join("token")).unwrap(), PLANTED);
        assert_eq!(mode_of(&dir), mode, "never repaired silently");

        // `token --show` refuses it too, without printing it.
        let mut show = registry(home.path(), User::Me);
        show.args(["token", "--show", "--token-file"])
            .arg(dir.join("token"));
        let shown = run(show);
        shown.assert_failure();
        assert!(!shown.stderr.contains(PLANTED.trim()), "{shown:?}");
    }
    // A private directory is accepted: the refusals above are about the directory alone.
    let private = home.path().join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    write_token_file(&private.join("token"), PLANTED, 0o600);
    let mut cmd = registry(home.path(), User::Me);
    cmd.args(["serve", "--bind", "127.0.0.1:0", "--token-file"])
        .arg(private.join("token"));
    let server = Server::spawn(cmd);
    assert_eq!(
        server
            .get("/sessions?probe=false", Some(PLANTED.trim()))
            .status,
        200
    );
}

#[test]
fn start_is_refused_when_a_new_token_files_directory_is_open_to_others() {
    let home = Home::new();
    let dir = home.path().join("open");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_start_refused_for_token_dir(&home, &dir);
    assert_eq!(mode_of(&dir), 0o777);
}

#[test]
fn a_refused_start_leaves_no_token_in_a_directory_open_to_others() {
    let home = Home::new();
    let dir = home.path().join("open");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_start_refused_for_token_dir(&home, &dir);
    assert_eq!(
        dir_snapshot(&dir).into_keys().collect::<Vec<_>>(),
        Vec::<String>::new()
    );
}

// ---------------------------------------------------------------------------------------------
// Where it listens, and where it reads
// ---------------------------------------------------------------------------------------------

fn assert_remote_bind_refused(done: &Finished, addr: &str) {
    assert_eq!(done.status.code(), Some(1), "{done:?}");
    assert!(!done.stdout.contains("listening"), "{done:?}");
    assert!(
        done.stderr.contains(addr) && done.stderr.contains("--allow-remote"),
        "the refusal must name the address and the flag: {}",
        done.stderr
    );
    assert_eq!(
        done.stderr.trim().lines().count(),
        1,
        "one clear line: {}",
        done.stderr
    );
}

#[test]
fn a_non_loopback_bind_is_refused_without_allow_remote() {
    let home = Home::new();
    let mut cmd = registry(home.path(), User::Me);
    cmd.args(["serve", "--bind", "0.0.0.0:0"]);
    assert_remote_bind_refused(&run(cmd), "0.0.0.0:0");

    // The same address from the environment is refused the same way.
    let mut cmd = registry(home.path(), User::Me);
    cmd.env("MURMUR_REGISTRY_BIND", "0.0.0.0:0").arg("serve");
    assert_remote_bind_refused(&run(cmd), "0.0.0.0:0");
}

#[test]
fn murmur_registry_bind_is_honoured() {
    let home = Home::new();
    let mut cmd = registry(home.path(), User::Me);
    cmd.env("MURMUR_REGISTRY_BIND", "127.0.0.1:0").arg("serve");
    let server = Server::spawn(cmd);
    // Not the default 7420: the environment's port 0 was used.
    assert_eq!(server.addr.ip().to_string(), "127.0.0.1");
    assert_ne!(server.addr.port(), 0);
    assert_ne!(server.addr.port(), 7420);
    assert_eq!(server.get("/healthz", None).status, 200);
}

#[test]
fn running_dir_and_token_file_flags_are_honoured() {
    let home = Home::new();
    let running = home.path().join("elsewhere-running");
    let token_file = home.path().join("elsewhere-token");
    let record = RecordJson::fresh().no_door();
    let mut cmd = registry(home.path(), User::Me);
    cmd.args(["serve", "--bind", "127.0.0.1:0", "--running-dir"])
        .arg(&running)
        .arg("--token-file")
        .arg(&token_file);
    // The running directory is created (0700) before the first line.
    let server = Server::spawn(cmd);
    assert_eq!(mode_of(&running), 0o700);
    record.write_in(&running);

    let token = std::fs::read_to_string(&token_file).expect("the token file given");
    assert_eq!(mode_of(&token_file), 0o600);
    assert!(
        !home.path().join(".murmur").exists(),
        "nothing under ~/.murmur when both paths are given"
    );
    let list = server.get("/sessions?probe=false", Some(token.trim()));
    assert_eq!(list.status, 200, "{list:?}");
    let ids: Vec<Value> = list.json()["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| s["session_id"].clone())
        .collect();
    assert_eq!(ids, vec![json!(record.session_id())]);
}

#[test]
fn an_explicit_running_dir_others_can_enter_refuses_the_start() {
    let home = Home::new();
    for mode in [0o755, 0o1777] {
        let dir = home.path().join(format!("shared-{mode:o}"));
        std::fs::create_dir(&dir).unwrap();
        let package = write_raw(&dir, "package.json", r#"{"name": "not-murmur"}"#);
        ExitedChild::spawn().record().no_door().write_in(&dir);
        write_raw(&dir, "junk.json", "{ not a record");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
        let before = dir_snapshot(&dir);

        let mut cmd = registry(home.path(), User::Me);
        cmd.args(["serve", "--bind", "127.0.0.1:0", "--running-dir"])
            .arg(&dir);
        let done = run(cmd);
        assert_eq!(done.status.code(), Some(1), "{done:?}");
        assert!(!done.stdout.contains("listening"), "{done:?}");
        let named = dir.display().to_string();
        assert!(
            done.stderr.contains(&named) && done.stderr.contains(&format!("{mode:04o}")),
            "stderr must name the directory and its mode: {}",
            done.stderr
        );
        assert_eq!(mode_of(&dir), mode, "the mode must be left as it was");
        assert_eq!(dir_snapshot(&dir), before, "nothing in it may change");
        assert_eq!(
            std::fs::read_to_string(&package).unwrap(),
            r#"{"name": "not-murmur"}"#
        );
    }
}

#[test]
fn an_allow_origin_that_is_not_an_origin_refuses_the_start() {
    let home = Home::new();
    for origin in [
        "http://localhost:3000/",
        "localhost:3000",
        "http://localhost:3000/app",
        "http://",
        "http://localhost:",
        "ftp://localhost:3000",
        "http://user@localhost:3000",
        "http://localhost:3000?x=1",
    ] {
        let mut cmd = registry(home.path(), User::Me);
        cmd.args(["serve", "--bind", "127.0.0.1:0", "--allow-origin", origin]);
        let done = run(cmd);
        assert_eq!(done.status.code(), Some(1), "{origin}: {done:?}");
        assert!(!done.stdout.contains("listening"), "{origin}: {done:?}");
        assert!(
            done.stderr.contains(&format!("{origin:?}")) && done.stderr.contains("not an origin"),
            "{origin}: {}",
            done.stderr
        );
        assert!(
            !home.path().join(".murmur").exists(),
            "{origin}: refused before anything was created"
        );
    }
    // Origins as browsers send them start, and are answered.
    let mut cmd = registry(home.path(), User::Me);
    cmd.args(["serve", "--bind", "127.0.0.1:0"])
        .args(["--allow-origin", "http://localhost:3000"])
        .args(["--allow-origin", "https://[::1]:8443"]);
    let server = Server::spawn(cmd);
    assert_eq!(server.get("/healthz", None).status, 200);
}

// ---------------------------------------------------------------------------------------------
// The kernel's refusal: EPERM
// ---------------------------------------------------------------------------------------------

#[test]
#[ignore = "needs root: serves as uid 65534 (setpriv) beside a root-owned process"]
fn an_unprivileged_server_reports_eperm_and_leaves_the_process_and_record() {
    let home = Home::for_nobody();
    let server = Server::start(home.path(), User::Nobody);
    let token = home.token();

    // A root-owned process, named with its correct start token, in a record nobody owns.
    let mut child = TestProcess::sleeping();
    let record = child.record().no_door();
    let id = record.session_id();
    let file = record.write_in(&home.running_dir());
    chown_nobody(&file);

    // Layers 1-2 confirm it (so any refusal below is the kernel's, not a verification's).
    let seen = server.get(&format!("/sessions/{id}?probe=false"), Some(&token));
    assert_eq!(seen.status, 200, "{seen:?}");
    assert_eq!(seen.json()["liveness"]["process"], "alive", "{seen:?}");

    let signal = server.post(
        &format!("/sessions/{id}/signal"),
        Some(&token),
        Some(&json!({"signal": "SIGTERM"})),
    );
    assert_eq!(signal.status, 409, "{signal:?}");
    assert_eq!(
        signal.header("content-type"),
        Some("application/problem+json")
    );
    let problem = signal.json();
    assert_eq!(problem["status"], 409);
    assert_eq!(problem["outcome"], "refused", "{problem}");
    assert_eq!(problem["session_id"], id.as_str());
    assert_eq!(problem["signal"], "SIGTERM");
    let reason = problem["reason"].as_str().expect("a reason");
    assert!(
        reason.contains("Operation not permitted"),
        "the kernel's EPERM must be the reason: {reason}"
    );

    // A stop that would SIGKILL at once is refused the same way.
    let stop = server.post(
        &format!("/sessions/{id}/stop?timeout=0"),
        Some(&token),
        None,
    );
    assert_eq!(stop.status, 409, "{stop:?}");
    let problem = stop.json();
    assert_eq!(problem["outcome"], "refused", "{problem}");
    assert!(
        problem["reason"]
            .as_str()
            .is_some_and(|r| r.contains("Operation not permitted")),
        "{problem}"
    );

    assert!(child.is_running(), "the process must be untouched");
    assert!(
        file.exists(),
        "the record must stay: a refusal is no evidence"
    );
    let again = server.get(&format!("/sessions/{id}?probe=false"), Some(&token));
    assert_eq!(again.json()["liveness"]["process"], "alive");
}

#[test]
#[ignore = "needs root: serves as uid 65534 (setpriv) from a directory the test chowns"]
fn a_running_dir_its_owner_may_not_open_is_a_503_saying_so_until_it_may_again() {
    // Root opens anything: only an unprivileged server meets EACCES on its own directory.
    let home = Home::for_nobody();
    let server = Server::start(home.path(), User::Nobody);
    let token = home.token();
    let running = home.running_dir();
    let record = RecordJson::fresh().no_door();
    chown_nobody(&record.write_in(&running));
    assert_eq!(
        server.get("/sessions?probe=false", Some(&token)).status,
        200
    );

    // Write and search, but not read: private still, and unlistable.
    std::fs::set_permissions(&running, std::fs::Permissions::from_mode(0o300)).unwrap();
    for path in ["/sessions", "/sessions?probe=false"] {
        let answer = server.get(path, Some(&token));
        assert_eq!(answer.status, 503, "{path}: {answer:?}");
        let problem = answer.json();
        assert_eq!(
            problem["type"], "urn:murmur-registry:problem:running-dir-unavailable",
            "{problem}"
        );
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains("it cannot be opened") && d.contains("denied")),
            "{problem}"
        );
    }
    let prune = http(server.addr, "DELETE", "/sessions", Some(&token), None);
    assert_eq!(prune.status, 503, "{prune:?}");

    std::fs::set_permissions(&running, std::fs::Permissions::from_mode(0o700)).unwrap();
    let listing = server.get("/sessions?probe=false", Some(&token));
    assert_eq!(listing.status, 200, "{listing:?}");
    assert_eq!(
        listing.json()["sessions"][0]["session_id"],
        record.session_id().as_str()
    );
}

#[test]
#[ignore = "needs root: a process whose real uid flips, stopped by a server run as uid 65534 (setpriv)"]
fn a_stop_whose_sigkill_is_refused_after_sigterm_got_through_says_what_was_sent() {
    let home = Home::for_nobody();
    let server = Server::start(home.path(), User::Nobody);
    let token = home.token();
    let mut flipping = TestProcess::uid_flipping();
    let record = flipping.record().no_door();
    let id = record.session_id();
    let file = record.write_in(&home.running_dir());
    chown_nobody(&file);

    let stop = server.post(
        &format!("/sessions/{id}/stop?timeout=1"),
        Some(&token),
        None,
    );
    assert_eq!(stop.status, 409, "{stop:?}");
    assert_eq!(
        stop.header("content-type"),
        Some("application/problem+json")
    );
    let problem = stop.json();
    assert_eq!(problem["type"], "urn:murmur-registry:problem:stop-refused");
    assert_eq!(problem["session_id"], id.as_str());
    assert_eq!(problem["signal"], "SIGKILL", "{problem}");
    assert_eq!(problem["outcome"], "refused", "{problem}");
    assert_eq!(problem["signal_sent"], "SIGTERM", "{problem}");
    assert!(
        problem["reason"]
            .as_str()
            .is_some_and(|r| r.contains("Operation not permitted")),
        "{problem}"
    );
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("SIGTERM was sent")),
        "{problem}"
    );
    // SIGTERM really arrived (the handler took uid 0 back), and SIGKILL never did.
    assert_eq!(real_uid(flipping.pid()), Some(0));
    assert!(flipping.is_running());
    assert!(
        file.exists(),
        "a refused stop is no evidence: the record stays"
    );
}

#[test]
fn shutdown_waits_for_a_stop_in_progress_to_finish_its_escalation() {
    let home = Home::new();
    let server = Server::start(home.path(), User::Me);
    let token = home.token();
    // A capsule that survives SIGTERM and says so by leaving a mark: evidence that the stop is
    // inside its wait, with SIGKILL still to come.
    let marks = tempfile::tempdir().unwrap();
    let mark = marks.path().join("got-term");
    let script = format!(
        "trap 'touch {}' TERM; while :; do sleep 0.05; done",
        mark.display()
    );
    let mut capsule = TestProcess::shell(&script);
    let record = capsule.record().no_door();
    let file = home.write(&record);

    // The client asks for the stop and hangs up once it is under way, so nothing but the
    // registry itself keeps the stop going.
    let mut client = TcpStream::connect(server.addr).unwrap();
    write!(
        client,
        "POST /sessions/{}/stop?timeout=2 HTTP/1.1\r\nHost: {}\r\n\
         Authorization: Bearer {token}\r\nContent-Length: 0\r\n\r\n",
        record.session_id(),
        server.addr
    )
    .unwrap();
    wait_until("the capsule got SIGTERM", DEADLINE, || mark.exists());
    drop(client);

    // Shut the registry down while the stop waits out its timeout.
    let (status, stderr) = server.stop_with(Signal::TERM);
    assert_eq!(status.code(), Some(0), "{status}; {stderr}");
    let died = capsule.wait_exit(DEADLINE);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(died.signal(), Some(9), "{died}");
    assert!(!file.exists(), "the stopped session's record is pruned");
}

// ---------------------------------------------------------------------------------------------
// Rotation seen by a running server
// ---------------------------------------------------------------------------------------------

#[test]
fn a_rotated_token_is_accepted_by_the_running_server_and_the_old_one_rejected() {
    let home = Home::new();
    let server = Server::start(home.path(), User::Me);
    let old = home.token();
    assert_eq!(server.get("/sessions?probe=false", Some(&old)).status, 200);

    let mut rotate = registry(home.path(), User::Me);
    rotate.args(["token", "--rotate"]);
    let done = run(rotate);
    assert_eq!(done.status.code(), Some(0), "{done:?}");
    let new = home.token();
    assert!(is_hex64(&new), "{new:?}");
    assert_ne!(new, old, "rotation must replace the token");
    assert_eq!(done.stdout.trim(), home.token_path().display().to_string());
    assert!(
        !done.stdout.contains(&new) && !done.stdout.contains(&old),
        "rotation prints no token without --show: {}",
        done.stdout
    );
    assert_eq!(mode_of(&home.token_path()), 0o600);

    // Same server process, no restart.
    let rejected = server.get("/sessions?probe=false", Some(&old));
    assert_eq!(
        rejected.status, 401,
        "the old token must stop working: {rejected:?}"
    );
    assert_eq!(
        rejected.header("www-authenticate"),
        Some(r#"Bearer realm="murmur-registry""#)
    );
    let accepted = server.get("/sessions?probe=false", Some(&new));
    assert_eq!(
        accepted.status, 200,
        "the new token must work: {accepted:?}"
    );

    let (status, _) = server.stop_with(Signal::TERM);
    assert_eq!(status.code(), Some(0));
}

#[test]
fn the_serve_limit_flags_reach_the_server() {
    let home = Home::new();
    let mut cmd = registry(home.path(), User::Me);
    cmd.args([
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--header-read-timeout",
        "300ms",
        "--max-in-flight",
        "1",
        "--max-connections",
        "8",
        "--request-timeout",
        "12s",
        "--shutdown-grace",
        "2s",
    ]);
    let server = Server::spawn(cmd);
    // A socket that never finishes its head is closed after 300 ms, not the default 10 s.
    let mut stalled = std::net::TcpStream::connect(server.addr).expect("connect");
    stalled
        .write_all(b"GET /healthz HTTP/1.1\r\n")
        .expect("half a head");
    stalled
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .expect("read timeout");
    let started = std::time::Instant::now();
    let mut rest = Vec::new();
    let closed = stalled.read_to_end(&mut rest).is_ok();
    assert!(closed, "the stalled socket was not closed within 5 s");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert_eq!(server.get("/healthz", None).status, 200);
    // A flag out of range is refused before anything starts.
    let mut refused = registry(home.path(), User::Me);
    refused.args(["serve", "--bind", "127.0.0.1:0", "--max-connections", "0"]);
    let done = run(refused);
    assert!(!done.status.success(), "{done:#?}");
    assert!(done.stderr.contains("--max-connections"), "{done:#?}");
    let (status, _) = server.stop_with(Signal::TERM);
    assert!(status.success(), "{status}");
}
