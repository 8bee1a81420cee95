//! The registry's HTTP server run in-process for one test: a private home holding the token
//! file, a running directory, the real app bound to `127.0.0.1:0`, served by the same
//! `serve_with` that `main` uses, until the test shuts it down or drops it.
//!
//! Invariant: every [`TestServer`] is its own world. Its token file, its running directory
//! (unless the test hands it one with [`TestServerBuilder::running_dir`]) and its port belong
//! to it alone, so tests run in parallel without seeing each other, and the server stops when
//! the value is dropped (its shutdown future resolves; nothing outlives the test's runtime).
//!
//! What a test sets up beyond the defaults (a probe with short deadlines, a faster events
//! interval, limits, allowed hosts or origins) is named at the call through the builder, so it
//! stays visible in the test. Use it from a test file with `use common::server::*;` after
//! `mod common;`.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use murmur_registry::http::{AppState, ServeLimits, serve_with};
use murmur_registry::registry::Registry;
use murmur_registry::running::DoorProbe;
use murmur_registry::test_support::fleet::FleetView;
use murmur_registry::token::TokenStore;
use tempfile::TempDir;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::{DEADLINE, temp_dir};

/// The future a server is handed as its shutdown signal: it resolves when the test asks
/// ([`ServeTask::begin_shutdown`]) or when the [`ServeTask`] is dropped.
pub type ShutdownSignal = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A spawned serve loop and the means to stop it. Dropping it begins the shutdown, so a test
/// that fails half-way still lets its server end.
pub struct ServeTask {
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl ServeTask {
    /// Spawn `serve(signal)` on the current runtime; `signal` resolves on shutdown.
    pub fn spawn<F>(serve: impl FnOnce(ShutdownSignal) -> F) -> Self
    where
        F: Future<Output = std::io::Result<()>> + Send + 'static,
    {
        let (shutdown, stop) = oneshot::channel::<()>();
        let signal: ShutdownSignal = Box::pin(async move {
            // A dropped sender is a shutdown too.
            let _ = stop.await;
        });
        let task = tokio::spawn(serve(signal));
        Self {
            shutdown: Some(shutdown),
            task: Some(task),
        }
    }

    /// Resolve the shutdown future the server was given. Doing it again does nothing.
    pub fn begin_shutdown(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }

    /// Begin the shutdown and hand over the serve task, for a test that checks what happens
    /// between the two (streams ending, requests in flight) before it awaits the task.
    pub fn shut_down(&mut self) -> JoinHandle<std::io::Result<()>> {
        self.begin_shutdown();
        self.task.take().expect("the serve task was not taken yet")
    }

    /// The serve task without beginning the shutdown.
    pub fn take_task(&mut self) -> JoinHandle<std::io::Result<()>> {
        self.task.take().expect("the serve task was not taken yet")
    }

    /// Shut down and wait (at most [`DEADLINE`]) for the serve loop to return; its result.
    pub async fn shut_down_and_wait(mut self) -> std::io::Result<()> {
        let task = self.shut_down();
        tokio::time::timeout(DEADLINE, task)
            .await
            .unwrap_or_else(|_| panic!("the server did not shut down within {DEADLINE:?}"))
            .expect("the serve task")
    }
}

impl Drop for ServeTask {
    fn drop(&mut self) {
        self.begin_shutdown();
    }
}

/// Where the server's running directory lives: its own, or one the test laid out.
enum RunningDir {
    Own(TempDir),
    Given(PathBuf),
}

/// The registry's real app served in-process; see the module docs.
pub struct TestServer {
    addr: SocketAddr,
    base: String,
    token: String,
    state: AppState,
    running: RunningDir,
    _home: TempDir,
    serving: ServeTask,
}

/// How a [`TestServer`] is set up. Every option defaults to what `serve` uses, except the
/// running directory (a fresh temporary one) and the home (a fresh temporary one).
pub struct TestServerBuilder {
    probe: DoorProbe,
    events_interval: Option<Duration>,
    limits: ServeLimits,
    allow_hosts: Vec<String>,
    allow_origins: Vec<String>,
    running_dir: Option<PathBuf>,
    fleet: Option<FleetView>,
}

impl TestServerBuilder {
    /// The fleet view served on `/fleet/*` and by `/mcp`'s fleet tools (default: none).
    pub fn fleet(mut self, fleet: FleetView) -> Self {
        self.fleet = Some(fleet);
        self
    }

    /// The door probe the registry verifies with (default [`DoorProbe::new`]).
    pub fn probe(mut self, probe: DoorProbe) -> Self {
        self.probe = probe;
        self
    }

    /// How often `/events` re-verifies every session while someone listens.
    pub fn events_interval(mut self, interval: Duration) -> Self {
        self.events_interval = Some(interval);
        self
    }

    /// The accept loop's limits (default [`ServeLimits::default`], what `serve` uses).
    pub fn limits(mut self, limits: ServeLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Hosts admitted besides the loopback defaults (`--allow-host`).
    pub fn allow_hosts(mut self, hosts: &[&str]) -> Self {
        self.allow_hosts = hosts.iter().map(|h| h.to_string()).collect();
        self
    }

    /// Origins admitted and granted CORS (`--allow-origin`).
    pub fn allow_origins(mut self, origins: &[&str]) -> Self {
        self.allow_origins = origins.iter().map(|o| o.to_string()).collect();
        self
    }

    /// Serve this running directory (which the test made and keeps) instead of a fresh one,
    /// for tests that lay files beside it.
    pub fn running_dir(mut self, dir: &Path) -> Self {
        self.running_dir = Some(dir.to_owned());
        self
    }

    /// Open the token store, bind `127.0.0.1:0` and spawn the serve loop on the current
    /// runtime. The server answers as soon as this returns (the socket already listens).
    pub async fn start(self) -> TestServer {
        let home = temp_dir();
        let token_path = home.path().join(".murmur/registry/token");
        let tokens = TokenStore::open(&token_path).expect("open the token store");
        let token = std::fs::read_to_string(&token_path)
            .expect("read the token")
            .trim()
            .to_owned();
        let running = match self.running_dir {
            Some(dir) => RunningDir::Given(dir),
            None => RunningDir::Own(temp_dir()),
        };
        let running_path = match &running {
            RunningDir::Own(dir) => dir.path().to_owned(),
            RunningDir::Given(dir) => dir.clone(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("the bound address");
        let state = AppState::new(
            Registry::new(running_path, self.probe),
            tokens,
            addr,
            &self.allow_hosts,
            &self.allow_origins,
        );
        let state = match self.fleet {
            Some(fleet) => state.with_fleet(fleet),
            None => state,
        };
        if let Some(interval) = self.events_interval {
            state.events().set_interval(interval);
        }
        let limits = self.limits;
        let served = state.clone();
        let serving = ServeTask::spawn(move |signal| serve_with(listener, served, limits, signal));
        TestServer {
            addr,
            base: format!("http://{addr}"),
            token,
            state,
            running,
            _home: home,
            serving,
        }
    }
}

impl TestServer {
    /// A server with every option at its default.
    pub async fn start() -> Self {
        Self::builder().start().await
    }

    pub fn builder() -> TestServerBuilder {
        TestServerBuilder {
            probe: DoorProbe::new(),
            events_interval: None,
            limits: ServeLimits::default(),
            allow_hosts: Vec::new(),
            allow_origins: Vec::new(),
            running_dir: None,
            fleet: None,
        }
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`, without a trailing slash.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The bearer token the server accepts.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// `GET path` with the token: the status and the body as text.
    pub async fn get_text(&self, path: &str) -> (u16, String) {
        let client = reqwest::Client::builder().no_proxy().build();
        let response = (client
            .expect("a client")
            .get(format!("{}{path}", self.base)))
        .bearer_auth(&self.token)
        .send()
        .await
        .expect("the registry answers");
        let status = response.status().as_u16();
        (status, response.text().await.expect("a body"))
    }

    /// `GET path` with the token: the status and the body as JSON (`Null` when it is none).
    pub async fn get_json(&self, path: &str) -> (u16, serde_json::Value) {
        let (status, text) = self.get_text(path).await;
        (status, serde_json::from_str(&text).unwrap_or_default())
    }

    /// The running directory the registry reads.
    pub fn dir(&self) -> &Path {
        match &self.running {
            RunningDir::Own(dir) => dir.path(),
            RunningDir::Given(dir) => dir,
        }
    }

    /// The app's state, shared with the running server (for `state().events()`).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// The serve loop, to shut it down (see [`ServeTask`]).
    pub fn serving(&mut self) -> &mut ServeTask {
        &mut self.serving
    }

    /// Shut down and wait for the serve loop to return; its result.
    pub async fn shut_down_and_wait(self) -> std::io::Result<()> {
        self.serving.shut_down_and_wait().await
    }
}
