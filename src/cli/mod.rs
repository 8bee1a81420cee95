//! The command line: `serve`, and the operator commands that work like `mur ps` / `mur stop`
//! without a server (they call the library directly). One file per command; this one holds
//! the parser and what every command shares (HOME, the running directory, the runtime).
//!
//! Invariants kept here:
//! - This is the only place that reads `HOME` or picks a port; everything below takes the
//!   running directory, the token file and the listener as parameters.
//! - A non-loopback bind is refused unless `--allow-remote` says otherwise.
//! - Errors are one line: what failed and what to do. The token is printed only on `--show`,
//!   and inside `dashboard`'s login link.
//! - Text for a person (not `--json`) shows control characters escaped
//!   ([`crate::control_chars`]): a value from a record, etcd or a door cannot steer the terminal.

mod completions;
mod dashboard;
mod fleet_args;
#[cfg(feature = "fleet")]
mod fleet_serve;
mod health;
mod log_fields;
mod man;
mod prune;
mod ps;
#[cfg(feature = "fleet")]
mod ps_fleet;
mod serve;
mod service;
mod status;
mod stop;
mod table;
mod token_command;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};

use crate::http;
use crate::private_fs::{WiderMode, hold_private_dir};
use crate::registry::Registry;
use crate::running::{self, DoorProbe};
use crate::token;
pub(crate) use serve::raise_open_files_limit;

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
    Serve(Box<serve::ServeArgs>),
    /// List running capsules, like `mur ps`; prunes records of capsules that are gone.
    ///
    /// CPU% is each process's share of one core between two readings 0.25 s apart (a one-shot
    /// command has no earlier sample), MEM its resident memory; `-` for a process the registry
    /// cannot confirm. `--json` gives the same figures as each session's `resources`.
    #[command(
        after_help = "Example:\n  murmur-registry ps\n  murmur-registry ps --json | jq '.[].session_id'"
    )]
    Ps(ps::PsArgs),
    /// Stop a capsule: ask its door to cancel its tasks, SIGTERM, then SIGKILL after the timeout.
    #[command(after_help = "Examples:\n  murmur-registry stop @1\n  \
        murmur-registry stop ses_0193a4c2e1f07a3b9c5d2e4f6a8b0c1d --timeout 30")]
    Stop(stop::StopArgs),
    /// Remove the records of capsules that are gone, and files that are not records.
    #[command(after_help = "Example:\n  murmur-registry prune")]
    Prune(DirArgs),
    /// Find the running registry through its discovery file: URL, version, uptime, sessions.
    ///
    /// Exit status 0 when a registry answers, 3 when none runs (no discovery file, or a stale
    /// one), 1 when the discovery file cannot be trusted. Sessions are counted by layers 1–2
    /// (`probe=false`); `--probe` asks every door too.
    #[command(after_help = "Examples:\n  murmur-registry status\n  murmur-registry status --probe")]
    Status(status::StatusArgs),
    /// Print the running registry's login link, and open it in a browser when there is a display.
    ///
    /// The link carries the token in its fragment (`/#token=TOKEN`), which the browser never sends;
    /// the browser is given a private redirect page, so the token is on no command line.
    #[command(
        after_help = "Examples:\n  murmur-registry dashboard\n  murmur-registry dashboard --no-open"
    )]
    Dashboard(dashboard::DashboardArgs),
    /// Check that a registry answers on its address (for container health checks).
    #[command(after_help = "Example:\n  murmur-registry health --bind 127.0.0.1:7420")]
    Health(health::HealthArgs),
    /// Print the OpenAPI 3.1 document of the HTTP API.
    #[command(after_help = "Example:\n  murmur-registry openapi > openapi/openapi.json")]
    Openapi,
    /// Print the token file's path; `--show` prints the token, `--rotate` replaces it.
    #[command(after_help = "Examples:\n  murmur-registry token\n  \
        curl -H \"Authorization: Bearer $(murmur-registry token --show)\" http://127.0.0.1:7420/sessions\n  \
        murmur-registry token --rotate")]
    Token(token_command::TokenArgs),
    /// Install or remove the systemd user unit that runs `serve` at login.
    #[command(
        after_help = "Examples:\n  murmur-registry service install -- --bind 127.0.0.1:7420\n  \
        murmur-registry service uninstall"
    )]
    Service(service::ServiceArgs),
    /// Print the shell completion script for bash, zsh or fish.
    #[command(
        after_help = "Examples:\n  source <(murmur-registry completions bash)\n  \
        murmur-registry completions fish > ~/.config/fish/completions/murmur-registry.fish"
    )]
    Completions(completions::CompletionsArgs),
    /// Print the man page (roff), or write one page per command into a directory.
    #[command(after_help = "Examples:\n  murmur-registry man | man -l -\n  \
        murmur-registry man --out-dir ~/.local/share/man/man1")]
    Man(man::ManArgs),
    /// The session ids the running directory's record names give, for shell completion.
    #[command(name = "session-ids", hide = true)]
    SessionIds,
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

/// Parse the command line and run it.
pub fn run() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve::serve(*args),
        Command::Ps(args) => runtime()?.block_on(ps::ps(args)),
        Command::Stop(args) => runtime()?.block_on(stop::stop(args)),
        Command::Prune(args) => runtime()?.block_on(prune::prune(args)),
        Command::Health(args) => health::health(args),
        Command::Status(args) => status::status(args),
        Command::Dashboard(args) => dashboard::dashboard(args),
        Command::Openapi => {
            let text = http::openapi_json_text().context("cannot render the OpenAPI document")?;
            std::io::stdout().lock().write_all(text.as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Token(args) => token_command::token_command(args),
        Command::Service(args) => service::service(args),
        Command::Completions(args) => completions::completions(&args),
        Command::Man(args) => man::man(&args),
        Command::SessionIds => completions::session_ids(),
    }
}

/// Blocking work (directory scans, `/proc` reads, signals, a cold read's pages of the fleet) runs
/// on at most this many threads; more concurrent requests queue for them instead of each growing
/// the pool.
const MAX_BLOCKING_THREADS: usize = 32;

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .build()
        .context("cannot start the async runtime")
}

/// The user's home: `HOME`, as murmur reads it, so both name the same `~/.murmur`; only when
/// it is unset or empty, the password database's entry for this user (through `dirs`).
fn home() -> anyhow::Result<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(dirs::home_dir)
        .context(
            "HOME is not set and this user has no home in the password database; set HOME, or \
             pass --running-dir / --token-file",
        )
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

/// The directory of the discovery file for `--token-file` (its own directory), else
/// `$HOME/.murmur/registry`. Nothing is created: a reader finds, or finds nothing.
fn discovery_dir(token_file: Option<&PathBuf>) -> anyhow::Result<PathBuf> {
    match token_file {
        Some(path) => Ok(crate::discovery::dir_of(path)),
        None => Ok(crate::discovery::dir_of(&token::default_token_path(
            &home()?
        ))),
    }
}

/// A path as a person reads it on the terminal: lossily decoded, control characters escaped.
fn shown(path: &std::path::Path) -> String {
    crate::control_chars::escaped(&path.display().to_string()).into_owned()
}

fn registry_for(args: &DirArgs) -> anyhow::Result<Registry> {
    Ok(Registry::new(resolve_running_dir(args)?, DoorProbe::new()))
}
