//! The command line: `serve`, and the operator commands that work like `mur ps` / `mur stop`
//! without a server (they call the library directly).
//!
//! Invariants kept here:
//! - This is the only place that reads `HOME` or picks a port; everything below takes the
//!   running directory, the token file and the listener as parameters.
//! - A non-loopback bind is refused unless `--allow-remote` says otherwise.
//! - Errors are one line: what failed and what to do. The token is printed only on `--show`.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};

use crate::http::wire::{SessionState, SessionView};
use crate::http::{self, AppState};
use crate::private_fs::{WiderMode, hold_private_dir};
use crate::registry::{DEFAULT_STOP_TIMEOUT, MAX_STOP_TIMEOUT, Reading, Registry, StopOutcome};
use crate::running::{self, DoorProbe, RunningRecord};
use crate::token::{self, TokenStore};

/// The verified registry of running murmur capsules.
#[derive(Debug, Parser)]
#[command(name = "murmur-registry", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the registry's HTTP API on loopback.
    #[command(
        after_help = "Example:\n  murmur-registry serve --bind 127.0.0.1:7420\n\n\
        The first line on stdout is `listening on http://ADDR` with the real port."
    )]
    // Boxed: its many flags would otherwise make every other command's value as large.
    Serve(Box<ServeArgs>),
    /// List running capsules, like `mur ps`; prunes records of capsules that are gone.
    #[command(
        after_help = "Example:\n  murmur-registry ps\n  murmur-registry ps --json | jq '.[].session_id'"
    )]
    Ps(PsArgs),
    /// Stop a capsule: SIGTERM, then SIGKILL after the timeout if it is still running.
    #[command(after_help = "Examples:\n  murmur-registry stop @1\n  \
        murmur-registry stop ses_0193a4c2e1f07a3b9c5d2e4f6a8b0c1d --timeout 30")]
    Stop(StopArgs),
    /// Remove the records of capsules that are gone, and files that are not records.
    #[command(after_help = "Example:\n  murmur-registry prune")]
    Prune(DirArgs),
    /// Check that a registry answers on its address (for container health checks).
    #[command(after_help = "Example:\n  murmur-registry health --bind 127.0.0.1:7420")]
    Health(HealthArgs),
    /// Print the OpenAPI 3.1 document of the HTTP API.
    #[command(after_help = "Example:\n  murmur-registry openapi > openapi/openapi.json")]
    Openapi,
    /// Print the token file's path; `--show` prints the token, `--rotate` replaces it.
    #[command(after_help = "Examples:\n  murmur-registry token\n  \
        curl -H \"Authorization: Bearer $(murmur-registry token --show)\" http://127.0.0.1:7420/sessions\n  \
        murmur-registry token --rotate")]
    Token(TokenArgs),
}

#[derive(Debug, Args)]
struct DirArgs {
    /// The running directory [default: $HOME/.murmur/running]. It must be private (0700).
    #[arg(long, value_name = "DIR")]
    running_dir: Option<PathBuf>,
    /// Run even inside a nested pid namespace (only right when the capsules run in it too).
    #[arg(
        long,
        env = "MURMUR_REGISTRY_NESTED_PID_NAMESPACE",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    nested_pid_namespace: bool,
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Address to listen on; port 0 picks a free one.
    #[arg(long, env = "MURMUR_REGISTRY_BIND", default_value = "127.0.0.1:7420")]
    bind: SocketAddr,
    #[command(flatten)]
    dir: DirArgs,
    /// The bearer token file [default: $HOME/.murmur/registry/token].
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Permit a bind address that is not loopback.
    #[arg(long)]
    allow_remote: bool,
    /// Another Host name to answer (repeatable); loopback names are always accepted.
    #[arg(long, value_name = "NAME")]
    allow_host: Vec<String>,
    /// Another browser Origin to accept, with CORS (repeatable, exact match).
    #[arg(long, value_name = "ORIGIN")]
    allow_origin: Vec<String>,
    /// How often /events passes over the running directory: every record read, its process
    /// checked, gone ones pruned (e.g. 2s, 500ms; at least 50ms).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = humantime::parse_duration)]
    events_interval: Duration,
    /// How often /events asks each door of a live process again, each door at its own moment
    /// (at least 50ms); a door whose record changes is asked at once.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    door_recheck: Duration,
    /// How long a client may take to send a request head (and a keep-alive connection may
    /// sit idle) before it is closed.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    header_read_timeout: Duration,
    /// How long a request may wait for its answer before it gets 408 (a stop gets at least
    /// its longest wait plus 30 s).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    request_timeout: Duration,
    /// Sockets held open at once; past it the oldest connection still waiting for a request
    /// is closed to make room.
    #[arg(long, value_name = "N", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_connections: u64,
    /// Requests handled at once; the next gets 503 with Retry-After.
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    max_in_flight: u64,
    /// `/events` streams open at once, below --max-connections; the next gets 503 with
    /// Retry-After [default: 128, or one less than --max-connections if that is lower].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_event_streams: Option<u64>,
    /// How long shutdown waits for in-flight requests before dropping them.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    shutdown_grace: Duration,
    /// How long a client's full socket may take nothing more the registry writes to it (an
    /// `/events` stream nobody reads) before its connection is closed.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    write_stall_timeout: Duration,
    #[command(flatten)]
    probe: ProbeArgs,
}

/// How doors are probed: the deadlines of one probe and how many may run at once.
#[derive(Debug, Args)]
struct ProbeArgs {
    /// Most door probes in flight at once (each holds a socket); others wait their turn.
    #[arg(long, value_name = "N", default_value_t = running::MAX_CONCURRENT_PROBES,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    max_concurrent_probes: usize,
    /// How long a door may take to accept a connection (e.g. `2s`, `500ms`).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = probe_deadline)]
    probe_connect_timeout: Duration,
    /// How long a connected door may take to answer with its card.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = probe_deadline)]
    probe_answer_timeout: Duration,
}

impl ProbeArgs {
    fn door_probe(&self) -> DoorProbe {
        DoorProbe::with_limits(
            self.probe_connect_timeout,
            self.probe_answer_timeout,
            self.max_concurrent_probes,
        )
    }
}

/// A probe deadline: a humantime duration, above zero and at most a minute.
fn probe_deadline(text: &str) -> Result<Duration, String> {
    let deadline = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if deadline.is_zero() || deadline > Duration::from_secs(60) {
        return Err("must be above zero and at most 60s".to_owned());
    }
    Ok(deadline)
}

#[derive(Debug, Args)]
struct HealthArgs {
    /// The address the registry listens on; an unspecified IP (0.0.0.0) is asked on loopback.
    #[arg(long, env = "MURMUR_REGISTRY_BIND", default_value = "127.0.0.1:7420")]
    bind: SocketAddr,
}

#[derive(Debug, Args)]
struct PsArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Print the sessions as a JSON array instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct StopArgs {
    /// A full session id, or `@N` for the N-th newest running session (`@1` first).
    session: String,
    /// Seconds to wait after SIGTERM before SIGKILL; 0 sends SIGKILL at once.
    #[arg(long, default_value_t = DEFAULT_STOP_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(0..=MAX_STOP_TIMEOUT.as_secs()))]
    timeout: u64,
    #[command(flatten)]
    dir: DirArgs,
}

#[derive(Debug, Args)]
struct TokenArgs {
    /// The token file [default: $HOME/.murmur/registry/token].
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Print the token itself.
    #[arg(long)]
    show: bool,
    /// Replace the token with a fresh one; a running server accepts only the new one.
    #[arg(long)]
    rotate: bool,
}

/// Parse the command line and run it.
pub fn run() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve(*args),
        Command::Ps(args) => runtime()?.block_on(ps(args)),
        Command::Stop(args) => runtime()?.block_on(stop(args)),
        Command::Prune(args) => runtime()?.block_on(prune(args)),
        Command::Health(args) => health(args),
        Command::Openapi => {
            let text = http::openapi_json_text().context("cannot render the OpenAPI document")?;
            std::io::stdout().lock().write_all(text.as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Token(args) => token_command(args),
    }
}

/// Blocking work (directory scans, `/proc` reads, signals) runs on at most this many threads;
/// more concurrent requests queue for them instead of each growing the pool.
const MAX_BLOCKING_THREADS: usize = 32;

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .build()
        .context("cannot start the async runtime")
}

fn home() -> anyhow::Result<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .context("HOME is not set; set it, or pass --running-dir / --token-file")
}

/// The running directory: `--running-dir` if given (created 0700 if missing, refused if others
/// may enter it: it might be any directory), else `$HOME/.murmur/running` (held at 0700).
fn resolve_running_dir(args: &DirArgs) -> anyhow::Result<PathBuf> {
    check_pid_namespace(args.nested_pid_namespace)?;
    match &args.running_dir {
        Some(dir) => {
            hold_private_dir(dir, WiderMode::Refuse)?;
            Ok(dir.clone())
        }
        None => Ok(running::running_dir_in(&home()?)?),
    }
}

/// Refuse to judge records from inside a nested pid namespace unless told the capsules share it.
///
/// Records carry the writer's pids. From a child namespace (a container without `pid: host`)
/// those pids name nothing, so every live capsule would read as gone and be pruned. The
/// kernel's initial pid namespace always has the same inode number (`PROC_PID_INIT_INO`),
/// whatever `/proc` is mounted; `NSpid` levels are a second sign where the host's `/proc` is.
fn check_pid_namespace(allowed: bool) -> anyhow::Result<()> {
    const INITIAL_PID_NAMESPACE: &str = "pid:[4026531836]";
    if allowed {
        return Ok(());
    }
    let namespace = std::fs::read_link("/proc/self/ns/pid")
        .context("cannot read /proc/self/ns/pid to check the pid namespace")?;
    let levels = std::fs::read_to_string("/proc/self/status")
        .context("cannot read /proc/self/status to check the pid namespace")?
        .lines()
        .find_map(|line| line.strip_prefix("NSpid:"))
        .map_or(1, |pids| pids.split_whitespace().count());
    if namespace.as_os_str() != INITIAL_PID_NAMESPACE || levels > 1 {
        bail!(
            "this process runs in a nested pid namespace, where the pids in records written \
             outside it name nothing and every capsule would read as gone; run it in the host's \
             pid namespace (docker: pid: host), or pass --nested-pid-namespace (env \
             MURMUR_REGISTRY_NESTED_PID_NAMESPACE=1) if the capsules run in this namespace too"
        );
    }
    Ok(())
}

fn resolve_token_file(given: Option<&PathBuf>) -> anyhow::Result<PathBuf> {
    match given {
        Some(path) => Ok(path.clone()),
        None => {
            let home = home()?;
            hold_private_dir(&home.join(".murmur"), WiderMode::Narrow)?;
            hold_private_dir(&home.join(".murmur").join("registry"), WiderMode::Narrow)?;
            Ok(token::default_token_path(&home))
        }
    }
}

fn registry_for(args: &DirArgs) -> anyhow::Result<Registry> {
    Ok(Registry::new(resolve_running_dir(args)?, DoorProbe::new()))
}

fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    // First, while this is the only thread (see `heap`).
    crate::heap::return_freed_memory();
    init_tracing();
    if !args.bind.ip().is_loopback() && !args.allow_remote {
        bail!(
            "refusing to listen on {}: it is not a loopback address; pass --allow-remote to expose the registry beyond this machine",
            args.bind
        );
    }
    for origin in &args.allow_origin {
        check_origin(origin)?;
    }
    if args.events_interval < crate::monitor::MIN_INTERVAL {
        bail!(
            "--events-interval {} is too short: at least {} (the running directory is read whole each interval)",
            humantime::format_duration(args.events_interval),
            humantime::format_duration(crate::monitor::MIN_INTERVAL)
        );
    }
    if args.door_recheck < crate::monitor::MIN_INTERVAL {
        bail!(
            "--door-recheck {} is too short: at least {} (each door of a live process is asked once a period)",
            humantime::format_duration(args.door_recheck),
            humantime::format_duration(crate::monitor::MIN_INTERVAL)
        );
    }
    let limits = serve_limits(&args)?;
    raise_open_files_limit();
    let registry = Registry::new(resolve_running_dir(&args.dir)?, args.probe.door_probe());
    let token_path = resolve_token_file(args.token_file.as_ref())?;
    let tokens = TokenStore::open(&token_path)?;
    runtime()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.bind)
            .await
            .with_context(|| format!("cannot listen on {}", args.bind))?;
        let bound = listener.local_addr()?;
        tracing::info!(
            running_dir = %registry.dir().display(),
            token_file = %token_path.display(),
            "serving"
        );
        let state = AppState::new(
            registry,
            tokens,
            bound,
            &args.allow_host,
            &args.allow_origin,
        );
        state.events().set_interval(args.events_interval);
        state.events().set_door_recheck(args.door_recheck);
        // Listen for SIGINT/SIGTERM before announcing the address: a script that signals the
        // server as soon as it reads the line must get a graceful shutdown.
        let shutdown = shutdown_signal().context("cannot listen for SIGINT/SIGTERM")?;
        let mut stdout = std::io::stdout();
        writeln!(stdout, "listening on http://{bound}")?;
        stdout.flush()?;
        let after_shutdown = state.clone();
        http::serve_with(listener, state, limits, shutdown).await?;
        after_shutdown.registry().finish_stops().await;
        tracing::info!("shut down");
        Ok(ExitCode::SUCCESS)
    })
}

/// Refuse timeouts that would make the server fail every request: a zero header or request
/// timeout, and a request timeout a single slow door could use up (a listing waits for the
/// slowest door's connect and answer deadlines, so it must be given longer than both).
fn check_serve_timeouts(args: &ServeArgs) -> anyhow::Result<()> {
    for (flag, value) in [
        ("--header-read-timeout", args.header_read_timeout),
        ("--request-timeout", args.request_timeout),
        ("--shutdown-grace", args.shutdown_grace),
        ("--write-stall-timeout", args.write_stall_timeout),
    ] {
        if value.is_zero() {
            bail!("{flag} must be above zero");
        }
    }
    let probe = args.probe.probe_connect_timeout + args.probe.probe_answer_timeout;
    let needed = probe + REQUEST_TIMEOUT_MARGIN;
    if args.request_timeout < needed {
        bail!(
            "--request-timeout {} is too short for the door probe: a listing may wait {} for one door (--probe-connect-timeout + --probe-answer-timeout), so give requests at least {}",
            humantime::format_duration(args.request_timeout),
            humantime::format_duration(probe),
            humantime::format_duration(needed)
        );
    }
    Ok(())
}

/// The accept loop's limits from the flags, refused when they contradict one another.
fn serve_limits(args: &ServeArgs) -> anyhow::Result<http::ServeLimits> {
    check_serve_timeouts(args)?;
    let max_event_streams = event_stream_cap(args)?;
    Ok(http::ServeLimits {
        header_read_timeout: args.header_read_timeout,
        request_timeout: args.request_timeout,
        max_connections: usize::try_from(args.max_connections).unwrap_or(usize::MAX),
        max_in_flight: usize::try_from(args.max_in_flight).unwrap_or(usize::MAX),
        max_event_streams: usize::try_from(max_event_streams).unwrap_or(usize::MAX),
        shutdown_grace: args.shutdown_grace,
        write_stall_timeout: args.write_stall_timeout,
    })
}

/// The cap on open event streams, always below `--max-connections`: streams are never evicted,
/// so a cap that let them hold every connection would leave every newcomer (`/healthz`
/// included) a 503. A value given that is not below is refused; the default shrinks under a
/// lowered `--max-connections` rather than refuse a command line that never named it.
fn event_stream_cap(args: &ServeArgs) -> anyhow::Result<u64> {
    let default = u64::try_from(http::server::DEFAULT_MAX_EVENT_STREAMS).unwrap_or(u64::MAX);
    match args.max_event_streams {
        Some(given) if given >= args.max_connections => bail!(
            "--max-event-streams {given} must be below --max-connections {}: open event streams are never closed to make room, so at least one connection must stay for other requests",
            args.max_connections
        ),
        Some(given) => Ok(given),
        None if args.max_connections < 2 => bail!(
            "--max-connections {} leaves no connection for other requests once an event stream is open (streams are never closed to make room); give at least 2 (--max-event-streams must be below it)",
            args.max_connections
        ),
        None => Ok(default.min(args.max_connections - 1)),
    }
}

/// What a request needs beyond one door's probe deadlines: reading records and layers 1–2.
const REQUEST_TIMEOUT_MARGIN: Duration = Duration::from_secs(3);

/// An `--allow-origin` value must be an origin exactly as browsers send it.
fn check_origin(origin: &str) -> anyhow::Result<()> {
    let rest = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    // Browsers send the scheme and host in lowercase.
    let well_formed = rest.is_some_and(|authority| {
        !authority.is_empty()
            && !authority.ends_with(':')
            && authority
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b".-:[]".contains(&b))
    });
    if !well_formed {
        bail!(
            "--allow-origin {origin:?} is not an origin; write it as a browser sends it, e.g. http://localhost:3000 (no path, no trailing slash)"
        );
    }
    Ok(())
}

/// Lift the soft open-files limit to the hard one: each door probe holds a socket, and a
/// request that runs out of descriptors must not be what decides a record's fate.
///
/// Public for the benchmark and the tests, which hold thousands of sockets of their own.
pub fn raise_open_files_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if let Err(error) = setrlimit(Resource::Nofile, raised) {
            tracing::warn!(%error, "could not raise the open-files limit");
        }
    }
    if let Some(open_files) = getrlimit(Resource::Nofile).current {
        // Pins take what probes and connections leave; running short is logged when it happens.
        tracing::info!(
            open_files,
            "open-files limit: a pidfd per live process, a socket per door probe and connection"
        );
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

/// A future that resolves on SIGINT or SIGTERM; both handlers are installed before it returns.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    })
}

/// The sessions `ps` shows, after pruning what is gone (each removal named on stderr).
async fn running_sessions(registry: &Registry) -> anyhow::Result<Vec<Reading>> {
    let pass = registry.sessions_pruned().await.with_context(|| {
        format!(
            "cannot read the running directory {}",
            registry.dir().display()
        )
    })?;
    for (session_id, reason) in &pass.report.pruned {
        eprintln!("pruned: {session_id} — {reason}");
    }
    for entry in &pass.report.removed_unreadable {
        eprintln!("removed: {} — {}", entry.file_name, entry.why);
    }
    Ok(pass.readings)
}

async fn ps(args: PsArgs) -> anyhow::Result<ExitCode> {
    let registry = registry_for(&args.dir)?;
    let sessions = running_sessions(&registry).await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let views: Vec<SessionView> = sessions.iter().map(SessionView::of).collect();
        serde_json::to_writer_pretty(&mut out, &views)?;
        writeln!(out)?;
    } else if sessions.is_empty() {
        writeln!(out, "no running capsules")?;
    } else {
        write!(out, "{}", ps_table(&sessions, SystemTime::now()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The `ps` table: left-aligned columns, the full session id, a header line.
fn ps_table(sessions: &[Reading], now: SystemTime) -> String {
    let header = ["SESSION", "CAPSULE", "STATUS", "DETACHED", "UPTIME", "URL"];
    let rows: Vec<[String; 6]> = sessions
        .iter()
        .map(|reading| {
            let r = &reading.record;
            let status = match reading.liveness.as_ref().map(SessionState::from) {
                Some(SessionState::Live) => "running",
                _ => "unreachable",
            };
            [
                r.session_id.clone(),
                format!("{}@{}", r.capsule_name, r.capsule_version),
                status.to_owned(),
                if r.outlives_launcher { "yes" } else { "no" }.to_owned(),
                uptime(r, now),
                r.url.clone().unwrap_or_else(|| "-".to_owned()),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut table = String::new();
    let mut push_row = |cells: &[&str]| {
        let line: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        table.push_str(line.join("  ").trim_end());
        table.push('\n');
    };
    push_row(&header);
    for row in &rows {
        push_row(&row.each_ref().map(String::as_str));
    }
    table
}

/// `HH:MM:SS` since `started_at`, with `Nd ` in front past a day; `-` when unknown.
fn uptime(record: &RunningRecord, now: SystemTime) -> String {
    let started = record.started_at.trim();
    let normalised = started
        .strip_suffix("+00:00")
        .map(|s| format!("{s}Z"))
        .unwrap_or_else(|| started.to_owned());
    let Ok(start) = humantime::parse_rfc3339_weak(&normalised) else {
        return "-".to_owned();
    };
    let secs = now
        .duration_since(start)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    format_uptime(secs)
}

fn format_uptime(secs: u64) -> String {
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let clock = format!(
        "{:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    );
    if days > 0 {
        format!("{days}d {clock}")
    } else {
        clock
    }
}

async fn stop(args: StopArgs) -> anyhow::Result<ExitCode> {
    let registry = registry_for(&args.dir)?;
    let session_id = match args.session.strip_prefix('@') {
        Some(n) => {
            let index: usize = n.parse().ok().filter(|n| *n >= 1).with_context(|| {
                format!(
                    "{:?} is not an address: use @1, @2, … or a full session id",
                    args.session
                )
            })?;
            let sessions = running_sessions(&registry).await?;
            match sessions.get(index - 1) {
                Some(reading) => reading.record.session_id.clone(),
                None => {
                    eprintln!(
                        "error: @{index} names no running session ({} running); see `murmur-registry ps`",
                        sessions.len()
                    );
                    return Ok(ExitCode::FAILURE);
                }
            }
        }
        None => args.session.clone(),
    };
    if !running::is_valid_session_id(&session_id) {
        bail!("{session_id:?} is not a session id: use a full id from `murmur-registry ps`, or @N");
    }
    let report = match registry
        .stop(&session_id, Duration::from_secs(args.timeout))
        .await
    {
        Ok(report) => report,
        Err(crate::registry::RegistryError::NotFound(_)) => {
            eprintln!("error: no running session {session_id}; see `murmur-registry ps`");
            return Ok(ExitCode::FAILURE);
        }
        Err(error) => return Err(error.into()),
    };
    let record = &report.record;
    match report.outcome {
        StopOutcome::Stopped { signal_sent } => {
            let mut out = std::io::stdout().lock();
            writeln!(out, "stopped: {}", record.session_id)?;
            writeln!(
                out,
                "capsule: {}@{}",
                record.capsule_name, record.capsule_version
            )?;
            writeln!(out, "signal: {}", signal_sent.name())?;
            Ok(ExitCode::SUCCESS)
        }
        StopOutcome::AlreadyGone => {
            let pruned = report
                .pruned
                .as_ref()
                .map_or_else(String::new, |fate| format!("; {}", fate.sentence()));
            eprintln!(
                "error: session {} was not running (pid {} is gone){pruned}",
                record.session_id, record.pid
            );
            Ok(ExitCode::FAILURE)
        }
        StopOutcome::Refused { reason, sent, .. } => {
            let sent = sent.map_or(String::new(), |s| format!(" ({} was sent)", s.name()));
            eprintln!(
                "error: could not stop {}{sent}: {reason}",
                record.session_id
            );
            Ok(ExitCode::FAILURE)
        }
    }
}

fn health(args: HealthArgs) -> anyhow::Result<ExitCode> {
    use std::io::Read;
    let mut addr = args.bind;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let deadline = Duration::from_secs(3);
    let mut stream = std::net::TcpStream::connect_timeout(&addr, deadline)
        .with_context(|| format!("no registry answers at http://{addr}"))?;
    stream.set_read_timeout(Some(deadline))?;
    stream.set_write_timeout(Some(deadline))?;
    write!(
        stream,
        "GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    // The status line is all that matters; /healthz answers a few bytes.
    let mut head = Vec::new();
    stream
        .take(256)
        .read_to_end(&mut head)
        .with_context(|| format!("the registry at http://{addr} did not answer"))?;
    let status_line = String::from_utf8_lossy(&head);
    match status_line.split_whitespace().nth(1) {
        Some("200") => {
            writeln!(std::io::stdout(), "ok")?;
            Ok(ExitCode::SUCCESS)
        }
        other => bail!(
            "the registry at http://{addr} answered {}",
            other.map_or("something that is not HTTP".to_owned(), |code| format!(
                "HTTP {code}"
            ))
        ),
    }
}

async fn prune(args: DirArgs) -> anyhow::Result<ExitCode> {
    let registry = registry_for(&args)?;
    let report = registry.prune_all().await.with_context(|| {
        format!(
            "cannot prune the running directory {}",
            registry.dir().display()
        )
    })?;
    let mut out = std::io::stdout().lock();
    for (session_id, reason) in &report.pruned {
        writeln!(out, "pruned: {session_id} — {reason}")?;
    }
    for entry in &report.removed_unreadable {
        writeln!(out, "removed: {} — {}", entry.file_name, entry.why)?;
    }
    if report.pruned.is_empty() && report.removed_unreadable.is_empty() {
        writeln!(out, "nothing to prune")?;
    }
    Ok(ExitCode::SUCCESS)
}

fn token_command(args: TokenArgs) -> anyhow::Result<ExitCode> {
    let path = resolve_token_file(args.token_file.as_ref())?;
    let token = if args.rotate {
        token::rotate(&path).with_context(|| {
            format!(
                "cannot rotate {} (start `murmur-registry serve` once to create it)",
                path.display()
            )
        })?
    } else {
        token::load_or_create(&path)?
    };
    if args.show {
        writeln!(std::io::stdout(), "{token}")?;
    } else {
        writeln!(std::io::stdout(), "{}", path.display())?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags' defaults are written as clap literals; they must be the library's own.
    #[test]
    fn serve_defaults_are_the_librarys_defaults() {
        let Command::Serve(args) = Cli::try_parse_from(["murmur-registry", "serve"])
            .expect("serve parses without flags")
            .command
        else {
            panic!("not the serve command");
        };
        assert_eq!(
            serve_limits(&args).expect("the defaults agree with one another"),
            http::ServeLimits::default()
        );
        assert_eq!(args.events_interval, crate::monitor::DEFAULT_INTERVAL);
        assert_eq!(args.door_recheck, crate::monitor::DEFAULT_DOOR_RECHECK);
        assert_eq!(args.probe.probe_connect_timeout, running::CONNECT_DEADLINE);
        assert_eq!(args.probe.probe_answer_timeout, running::ANSWER_DEADLINE);
        assert_eq!(
            args.probe.max_concurrent_probes,
            running::MAX_CONCURRENT_PROBES
        );
    }

    #[test]
    fn uptime_is_clock_then_days() {
        assert_eq!(format_uptime(0), "00:00:00");
        assert_eq!(format_uptime(3_661), "01:01:01");
        assert_eq!(format_uptime(86_399), "23:59:59");
        assert_eq!(format_uptime(86_400 + 5), "1d 00:00:05");
        assert_eq!(format_uptime(3 * 86_400 + 7_200), "3d 02:00:00");
    }
}
