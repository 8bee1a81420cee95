//! `stop`: SIGTERM, a wait, then SIGKILL, for one session named by id or by `@N`.
//!
//! Invariants: a process is signalled only through the registry's stop, which confirms it first;
//! what a record or a door said is shown [`escaped`], never as raw terminal input.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;

use super::ps::running_sessions;
use super::{DirArgs, registry_for};
use crate::control_chars::escaped;
use crate::registry::{
    AskDoor, DEFAULT_STOP_TIMEOUT, MAX_STOP_TIMEOUT, Registry, StopOutcome, StopReport,
};
use crate::running::{self, DoorStop};

#[derive(Debug, Args)]
pub(super) struct StopArgs {
    /// A full session id, or `@N` for the N-th newest running session (`@1` first).
    session: String,
    /// Seconds to wait after SIGTERM before SIGKILL; 0 sends SIGKILL at once (without asking
    /// the door).
    #[arg(long, default_value_t = DEFAULT_STOP_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(0..=MAX_STOP_TIMEOUT.as_secs()))]
    timeout: u64,
    /// Stop by signals alone: do not first ask the capsule's door to cancel its tasks
    /// (murmur.StopSession).
    #[arg(long)]
    no_door: bool,
    #[command(flatten)]
    dir: DirArgs,
}

pub(super) async fn stop(args: StopArgs) -> anyhow::Result<ExitCode> {
    let registry = registry_for(&args.dir)?;
    let Some(session_id) = addressed_session(&args.session, &registry).await? else {
        return Ok(ExitCode::FAILURE);
    };
    if !running::is_valid_session_id(&session_id) {
        bail!("{session_id:?} is not a session id: use a full id from `murmur-registry ps`, or @N");
    }
    let ask = if args.no_door {
        AskDoor::Never
    } else {
        AskDoor::First
    };
    let report = match registry
        .stop(&session_id, Duration::from_secs(args.timeout), ask)
        .await
    {
        Ok(report) => report,
        Err(crate::registry::RegistryError::NotFound(_)) => {
            eprintln!(
                "error: no running session {}; see `murmur-registry ps`",
                escaped(&session_id)
            );
            return Ok(ExitCode::FAILURE);
        }
        Err(error) => return Err(error.into()),
    };
    tell_outcome(&report)
}

/// The session `address` names: a session id as given, or `@N`, the Nth of `ps`'s list (read,
/// and so pruned, now). `None` when `@N` names no session; that was said on stderr.
async fn addressed_session(address: &str, registry: &Registry) -> anyhow::Result<Option<String>> {
    Ok(Some(match address.strip_prefix('@') {
        Some(n) => {
            let index: usize = n.parse().ok().filter(|n| *n >= 1).with_context(|| {
                format!(
                    "{:?} is not an address: use @1, @2, … or a full session id",
                    address
                )
            })?;
            let sessions = running_sessions(registry).await?;
            match sessions.get(index - 1) {
                Some(reading) => reading.record.session_id.clone(),
                None => {
                    eprintln!(
                        "error: @{index} names no running session ({} running); see `murmur-registry ps`",
                        sessions.len()
                    );
                    return Ok(None);
                }
            }
        }
        None => address.to_owned(),
    }))
}

/// What a stop came to, said on stdout when it ended the session, else on stderr; the exit
/// code says which.
fn tell_outcome(report: &StopReport) -> anyhow::Result<ExitCode> {
    let record = &report.record;
    match &report.outcome {
        StopOutcome::Stopped { signal_sent } => {
            write_stopped(report, signal_sent.name())?;
            note_door(&report.door);
            Ok(ExitCode::SUCCESS)
        }
        // Its door was asked while it ran (a fresh probe confirmed it), and it ended then.
        StopOutcome::AlreadyGone if matches!(report.door, DoorStop::Answered { .. }) => {
            write_stopped(report, "none (it ended when its door asked it to stop)")?;
            Ok(ExitCode::SUCCESS)
        }
        StopOutcome::AlreadyGone => {
            note_door(&report.door);
            let pruned = report
                .pruned
                .as_ref()
                .map_or_else(String::new, |fate| format!("; {}", fate.sentence()));
            eprintln!(
                "error: session {} was not running (pid {} is gone){}",
                escaped(&record.session_id),
                record.pid,
                escaped(&pruned)
            );
            Ok(ExitCode::FAILURE)
        }
        StopOutcome::Refused { reason, sent, .. } => {
            let sent = sent.map_or(String::new(), |s| format!(" ({} was sent)", s.name()));
            write_door_answer(&mut std::io::stderr().lock(), &report.door)?;
            note_door(&report.door);
            eprintln!(
                "error: could not stop {}{sent}: {}",
                escaped(&record.session_id),
                escaped(&reason.to_string())
            );
            Ok(ExitCode::FAILURE)
        }
    }
}

/// A stop that ended the session, on stdout: the session, its capsule, the signal that did it,
/// and what the capsule's door said.
fn write_stopped(report: &StopReport, signal: &str) -> std::io::Result<()> {
    let record = &report.record;
    let mut out = std::io::stdout().lock();
    writeln!(out, "stopped: {}", escaped(&record.session_id))?;
    writeln!(
        out,
        "capsule: {}@{}",
        escaped(&record.capsule_name),
        escaped(&record.capsule_version)
    )?;
    writeln!(out, "signal: {signal}")?;
    write_door_answer(&mut out, &report.door)
}

/// What the capsule said it canceled and leaves running, when its door answered: one
/// `canceled:` line, and a `left running:` line for each residue item.
fn write_door_answer(out: &mut impl Write, door: &DoorStop) -> std::io::Result<()> {
    let DoorStop::Answered { canceled, residue } = door else {
        return Ok(());
    };
    let canceled = if canceled.is_empty() {
        "nothing".to_owned()
    } else {
        canceled
            .iter()
            .map(item_text)
            .collect::<Vec<_>>()
            .join(", ")
    };
    writeln!(out, "canceled: {canceled}")?;
    for item in residue {
        writeln!(out, "left running: {}", item_text(item))?;
    }
    Ok(())
}

/// Why the door did not help, on stderr, when it was there to ask.
fn note_door(door: &DoorStop) {
    match door {
        DoorStop::Refused { reason }
        | DoorStop::NoAnswer { reason }
        | DoorStop::Mismatch { reason } => eprintln!("note: {}", escaped(reason)),
        DoorStop::NotLive { reason } => {
            eprintln!("note: the door was not asked to stop: {}", escaped(reason));
        }
        DoorStop::Answered { .. } | DoorStop::NoDoor | DoorStop::Skipped => {}
    }
}

/// One item a door listed: a string as it is, anything else as compact JSON, on one line
/// ([`escaped`]).
fn item_text(item: &serde_json::Value) -> String {
    match item {
        serde_json::Value::String(text) => escaped(text).into_owned(),
        other => escaped(&other.to_string()).into_owned(),
    }
}
