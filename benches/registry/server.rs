//! The registry under test, the real binary, and one keep-alive HTTP/1.1 connection to it.
//!
//! Invariant: a [`Server`] is handed out only once it listens (its first line named the
//! address), with a token file and home of its own, and it is killed and reaped on drop.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, header};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

use crate::figures::{cpu_time, status_kib};
use crate::mcp_client::McpClient;
use crate::records::private_temp_dir;
use crate::served::ServedBinary;

/// The real binary serving a private running directory, with its own token file (its log on
/// the terminal, at `warn`).
pub struct Server {
    served: ServedBinary,
    addr: String,
    token: String,
    _home: tempfile::TempDir,
}

impl Server {
    /// This build's binary serving `running_dir`.
    pub fn start(running_dir: &Path) -> Self {
        Self::start_binary(
            Path::new(env!("CARGO_BIN_EXE_murmur-registry")),
            running_dir,
        )
    }

    /// `binary serve` on `running_dir`, with every other setting at its default.
    pub fn start_binary(binary: &Path, running_dir: &Path) -> Self {
        Self::start_with(binary, running_dir, &[])
    }

    /// `binary serve` on `running_dir` with `extra` flags (the fleet's, say).
    pub fn start_with(binary: &Path, running_dir: &Path, extra: &[String]) -> Self {
        let home = private_temp_dir();
        let token_file = home.path().join("token");
        let mut cmd = Command::new(binary);
        cmd.arg("serve")
            .args(["--bind", "127.0.0.1:0"])
            .arg("--running-dir")
            .arg(running_dir)
            .arg("--token-file")
            .arg(&token_file)
            .args(extra)
            .env("HOME", home.path())
            .env("RUST_LOG", "warn");
        // A thousand records are read before the first line; allow for a loaded machine.
        let served = ServedBinary::launch(cmd)
            .stderr_to_terminal()
            .startup_deadline(Duration::from_secs(120))
            .start();
        eprintln!("{} serve: pid {}", binary.display(), served.pid());
        let token = std::fs::read_to_string(&token_file)
            .expect("token file")
            .trim()
            .to_owned();
        Self {
            addr: served.addr.to_string(),
            served,
            token,
            _home: home,
        }
    }

    /// The address it listens on.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Its bearer token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// `kill -9` the registry and reap it.
    // Only the fleet scenario kills a registry.
    #[cfg_attr(not(feature = "fleet"), allow(dead_code))]
    pub fn kill(&mut self) {
        self.served.kill();
    }

    pub fn pid(&self) -> u32 {
        self.served.pid()
    }

    pub fn cpu(&self) -> Duration {
        cpu_time(self.served.pid())
    }

    pub fn rss_kib(&self) -> u64 {
        status_kib(self.served.pid(), "VmRSS:")
    }

    /// The most it has been resident at once (`VmHWM`).
    pub fn peak_rss_kib(&self) -> u64 {
        status_kib(self.served.pid(), "VmHWM:")
    }

    pub async fn client(&self) -> Client {
        Client::connect(&self.addr, &self.token).await
    }

    /// A new MCP session on `/mcp`, on a connection of its own.
    pub async fn mcp(&self) -> McpClient {
        McpClient::open(&self.addr, &self.token).await
    }
}

/// Start `binary` on `running_dir`, ask each of `paths` once and stop it: an uncounted first run.
/// The first registry run against freshly started processes and doors costs more than every
/// later one, whichever binary it is (see `Binaries::balanced`); this takes that on.
pub async fn warm_up(binary: &Path, running_dir: &Path, paths: &[&str]) {
    eprintln!("  warm-up, not counted:");
    let server = Server::start_binary(binary, running_dir);
    let mut client = server.client().await;
    for path in paths {
        client.get(path).await.expect("warm-up GET");
    }
}

/// One keep-alive HTTP/1.1 connection to the registry.
pub struct Client {
    sender: SendRequest<Empty<Bytes>>,
    host: String,
    authorization: String,
}

impl Client {
    pub(crate) async fn connect(addr: &str, token: &str) -> Self {
        let stream = TcpStream::connect(addr).await.expect("connect registry");
        let _ = stream.set_nodelay(true);
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        tokio::spawn(connection);
        Self {
            sender,
            host: addr.to_owned(),
            authorization: format!("Bearer {token}"),
        }
    }

    /// GET `path`: the status and body.
    pub async fn get(&mut self, path: &str) -> Result<Bytes, String> {
        self.sender.ready().await.map_err(|e| e.to_string())?;
        let request = Request::get(path)
            .header(header::HOST, &self.host)
            .header(header::AUTHORIZATION, &self.authorization)
            .body(Empty::new())
            .map_err(|e| e.to_string())?;
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        if status.is_success() {
            Ok(body)
        } else {
            Err(format!("HTTP {status}"))
        }
    }

    /// GET `path` and hand back the body unread, as it streams (for `/events`).
    pub async fn stream(&mut self, path: &str) -> Incoming {
        self.sender.ready().await.expect("connection ready");
        let request = Request::get(path)
            .header(header::HOST, &self.host)
            .header(header::AUTHORIZATION, &self.authorization)
            .header(header::ACCEPT, "text/event-stream")
            .body(Empty::new())
            .expect("request");
        let response = self.sender.send_request(request).await.expect("GET stream");
        assert!(
            response.status().is_success(),
            "GET {path}: {}",
            response.status()
        );
        response.into_body()
    }

    /// GET `path` and time it; panics on an error (single-client scenarios expect none).
    pub async fn timed_get(&mut self, path: &str) -> (Duration, Value) {
        let started = Instant::now();
        let body = self.get(path).await.expect("GET");
        let took = started.elapsed();
        (took, serde_json::from_slice(&body).expect("JSON body"))
    }
}

/// Each session of a `{"sessions": [...]}` body (a listing, a snapshot, `/fleet/sessions`) by
/// its `session_id`, as `read` sees it: the one walk every scenario's picture is made by.
pub fn by_session_id<T, C: FromIterator<(String, T)>>(
    body: &Value,
    read: impl Fn(&Value) -> T,
) -> C {
    (body["sessions"].as_array().into_iter().flatten())
        .map(|s| (s["session_id"].as_str().unwrap_or("").to_owned(), read(s)))
        .collect()
}

/// `session_id -> liveness.state` of a `GET /sessions` body.
pub fn states_of(body: &Value) -> HashMap<String, String> {
    by_session_id(body, |s| {
        s["liveness"]["state"].as_str().unwrap_or("-").to_owned()
    })
}

pub fn count_live(body: &Value) -> usize {
    states_of(body).values().filter(|s| *s == "live").count()
}
