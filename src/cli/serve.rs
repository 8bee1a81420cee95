//! `serve`: the flags, the checks that refuse contradictory ones, and the server's start and
//! graceful end.
//!
//! Invariant: a flag combination that would make the server fail every request is refused
//! at start with a message naming the flags, never discovered later.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};

use super::fleet_args::FleetArgs;
#[cfg(feature = "fleet")]
use super::fleet_serve::{FleetConfig, FleetMember};
use super::{DirArgs, resolve_running_dir, resolve_token_file, runtime};
use crate::discovery::{self, Claim, ServerInfo};
use crate::http::{self, AppState};
use crate::registry::Registry;
use crate::running::{self, DoorProbe};
use crate::token::TokenStore;

#[derive(Debug, Args)]
pub(super) struct ServeArgs {
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
    /// MCP sessions (`/mcp`, protocol 2025-11-25) kept at once; a new one past it closes the
    /// least recently used idle one.
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    max_mcp_sessions: u64,
    /// How long shutdown waits for in-flight requests before dropping them.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    shutdown_grace: Duration,
    /// How long a client's full socket may take nothing more the registry writes to it (an
    /// `/events` stream nobody reads) before its connection is closed.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    write_stall_timeout: Duration,
    /// How log lines are written to stderr: `text` for people, `json` (one object per line)
    /// for a log shipper. Neither ever holds a header, a token or a query string.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(flatten)]
    probe: ProbeArgs,
    #[command(flatten)]
    fleet: FleetArgs,
}

/// The form of the log on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    /// One line per event for people: time, level, target, message, fields.
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message` and the event's
    /// fields (for a request: `method`, `route`, `status`, `latency_ms`).
    Json,
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

pub(super) fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    // First, while this is the only thread (see `heap`).
    crate::heap::return_freed_memory();
    init_tracing(args.log_format);
    check_serve_args(&args)?;
    let limits = serve_limits(&args)?;
    #[cfg(feature = "fleet")]
    let fleet = FleetConfig::from_args(&args.fleet, args.events_interval)?;
    #[cfg(not(feature = "fleet"))]
    if args.fleet.enabled() {
        return Err(super::fleet_args::no_fleet_in_this_build("--fleet-etcd"));
    }
    raise_open_files_limit();
    let registry = Registry::new(resolve_running_dir(&args.dir)?, args.probe.door_probe());
    registry.keep_descriptors_for(limits.max_connections);
    let token_path = resolve_token_file(args.token_file.as_ref())?;
    let tokens = TokenStore::open(&token_path)?;
    // Before the bind: a second `serve` for this directory stops here, naming the first.
    let claim = Claim::take(&discovery::dir_of(&token_path))?;
    #[cfg(feature = "fleet")]
    let fleet_info = fleet.as_ref().map(FleetConfig::discovered);
    #[cfg(not(feature = "fleet"))]
    let fleet_info = None;
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
        let info = server_info(bound, registry.dir(), &token_path, fleet_info)?;
        let state = app_state(&args, registry, tokens, bound);
        // Listen for SIGINT/SIGTERM before announcing the address: a script that signals the
        // server as soon as it reads the line must get a graceful shutdown.
        let shutdown = shutdown_signal().context("cannot listen for SIGINT/SIGTERM")?;
        #[cfg(feature = "fleet")]
        let (state, shutdown) = match fleet {
            Some(fleet) => {
                let (member, state) = FleetMember::join(fleet, state).await?;
                let shutdown = async move {
                    shutdown.await;
                    member.leave().await;
                };
                (state, futures_util::future::Either::Left(shutdown))
            }
            None => (state, futures_util::future::Either::Right(shutdown)),
        };
        // Written before the address is announced: whoever reads the line finds the file.
        let published = claim.publish(&info)?;
        let mut stdout = std::io::stdout();
        writeln!(stdout, "listening on http://{bound}")?;
        stdout.flush()?;
        let after_shutdown = state.clone();
        http::serve_with(listener, state, limits, shutdown).await?;
        after_shutdown.registry().finish_stops().await;
        drop(published);
        tracing::info!("shut down");
        Ok(ExitCode::SUCCESS)
    })
}

/// The service's state as the flags set it: its registry, tokens, origins, MCP and live view.
fn app_state(
    args: &ServeArgs,
    registry: Registry,
    tokens: TokenStore,
    bound: SocketAddr,
) -> AppState {
    let state = AppState::new(
        registry,
        tokens,
        bound,
        &args.allow_host,
        &args.allow_origin,
    )
    .with_mcp(
        http::mcp::McpSettings::default()
            .with_max_sessions(usize::try_from(args.max_mcp_sessions).unwrap_or(usize::MAX)),
    );
    state.events().set_interval(args.events_interval);
    state.events().set_door_recheck(args.door_recheck);
    state
}

/// What the discovery file says of this process, serving at `bound`.
fn server_info(
    bound: SocketAddr,
    running_dir: &std::path::Path,
    token_file: &std::path::Path,
    fleet: Option<discovery::FleetInfo>,
) -> anyhow::Result<ServerInfo> {
    let pid = std::process::id();
    let process_start = crate::process_identity::process_start_token(pid)
        .context("cannot read this process's own start time from /proc")?;
    Ok(ServerInfo {
        url: ServerInfo::url_for(bound),
        pid,
        process_start,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        started_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        // Absolute: a reader in another directory must find the same files.
        running_dir: std::path::absolute(running_dir)?,
        token_file: std::path::absolute(token_file)?,
        fleet,
    })
}

/// Refuse what `serve` must not start with: a bind beyond loopback without
/// `--allow-remote`, an origin that is not one, intervals under the live view's minimum.
fn check_serve_args(args: &ServeArgs) -> anyhow::Result<()> {
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
    Ok(())
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
/// Reached by the benchmark and the tests (through `test_support`), which hold thousands of
/// sockets of their own.
pub(crate) fn raise_open_files_limit() {
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

/// Log to stderr in `format`, at `RUST_LOG`'s levels (default `info`; rmcp's `warn`, as its
/// `info` logs every MCP session's start with what its client sent).
fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rmcp=warn"));
    let log = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        // Every field escaped: a value from outside never breaks the one line of its event.
        LogFormat::Text => log
            .fmt_fields(super::log_fields::EscapedFields)
            .with_ansi(std::io::stderr().is_terminal())
            .init(),
        // Fields at the top level beside `message`, and no span: a shipper reads one flat
        // object, and a request's span would only repeat its access line.
        LogFormat::Json => log
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .init(),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

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
}
