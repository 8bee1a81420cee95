//! `status`: find the registry through its discovery file and say how it is: its URL,
//! version, uptime and its sessions counted by state.
//!
//! Invariant: the exit code says which of three it is: 0, a registry answers; 3, none runs (no
//! file, or a stale one, said so); 1, the file cannot be trusted (it is not followed, and no
//! token is sent anywhere it names).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use clap::Args;

use super::{discovery_dir, runtime, shown};
use crate::client::Client;
use crate::control_chars::escaped;
use crate::discovery::{Found, ServerInfo, find, plain_client};
use crate::token;
use crate::wire::{ListQuery, SessionList, SessionState};

/// The exit status of `status` when no registry runs.
pub(super) const NOT_RUNNING: u8 = 3;

#[derive(Debug, Args)]
pub(super) struct StatusArgs {
    /// The registry's token file; its discovery file is beside it
    /// [default: $HOME/.murmur/registry/token].
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Count sessions by a full verification (every door asked), not by layers 1–2 alone.
    #[arg(long)]
    probe: bool,
}

pub(super) fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let dir = discovery_dir(args.token_file.as_ref())?;
    let client = plain_client().context("cannot build an HTTP client")?;
    runtime()?.block_on(async {
        let info = match find(&dir, &client).await {
            Found::Running(info) => info,
            Found::NotRunning(why) => {
                writeln!(std::io::stdout(), "not running: {}", escaped(&why))?;
                return Ok(ExitCode::from(NOT_RUNNING));
            }
            Found::Untrusted(why) => bail!(why),
        };
        let mut out = std::io::stdout().lock();
        writeln!(out, "url:      {}", escaped(&info.url))?;
        writeln!(out, "version:  {}", escaped(&info.version))?;
        writeln!(out, "pid:      {}", info.pid)?;
        writeln!(out, "uptime:   {}", uptime(&info.started_at))?;
        writeln!(out, "running:  {}", shown(&info.running_dir))?;
        let counted = count_sessions(&info, args.probe).await;
        writeln!(
            out,
            "sessions: {}",
            counted.unwrap_or_else(|why| escaped(&why).into_owned())
        )?;
        Ok(ExitCode::SUCCESS)
    })
}

/// How long ago `started_at` was, in whole seconds; `unknown` when it does not parse.
fn uptime(started_at: &str) -> String {
    humantime::parse_rfc3339(started_at)
        .ok()
        .and_then(|started| SystemTime::now().duration_since(started).ok())
        .map_or_else(
            || "unknown".to_owned(),
            |up| humantime::format_duration(Duration::from_secs(up.as_secs())).to_string(),
        )
}

/// The registry's sessions counted by state, as one line: `3 (2 live, 1 door not asked)`.
async fn count_sessions(info: &ServerInfo, probe: bool) -> Result<String, String> {
    let token = token::read_existing(&info.token_file).map_err(|e| e.to_string())?;
    let client = Client::new(&info.url, token).map_err(|e| e.to_string())?;
    let query = ListQuery {
        probe: Some(probe),
        ..ListQuery::default()
    };
    let listing = (client.sessions(&query).await).map_err(|e| format!("cannot list them: {e}"))?;
    Ok(tally(&listing))
}

/// `N (a live, b unreachable, c gone, d door not asked)`, only the states present; and the
/// unreadable entries, when there are some.
fn tally(listing: &SessionList) -> String {
    let states = [
        SessionState::Live,
        SessionState::Unreachable,
        SessionState::Gone,
    ];
    let mut parts: Vec<String> = states
        .iter()
        .map(|state| {
            let n = listing
                .sessions
                .iter()
                .filter(|s| s.liveness.state.as_ref() == Some(state))
                .count();
            (n, word(*state))
        })
        .chain(std::iter::once((
            listing
                .sessions
                .iter()
                .filter(|s| s.liveness.state.is_none())
                .count(),
            "door not asked".to_owned(),
        )))
        .filter(|(n, _)| *n > 0)
        .map(|(n, word)| format!("{n} {word}"))
        .collect();
    if listing.unreadable > 0 {
        parts.push(format!("{} unreadable", listing.unreadable));
    }
    let total = listing.sessions.len();
    if parts.is_empty() {
        total.to_string()
    } else {
        format!("{total} ({})", parts.join(", "))
    }
}

/// A state's word on the wire.
fn word(state: SessionState) -> String {
    serde_json::to_value(state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_counted_by_their_wire_word_and_unasked_doors_apart() {
        let session = |liveness: serde_json::Value| {
            serde_json::json!({"session_id": "ses_1", "url": null, "pid": 1,
                "process_start": "1", "capsule_name": "c", "capsule_version": "1",
                "workdir": "/w", "outlives_launcher": false, "started_at": "x",
                "liveness": liveness})
        };
        let listing: SessionList = serde_json::from_value(serde_json::json!({
            "sessions": [
                session(serde_json::json!({"state": "live", "process": "alive", "reason": null})),
                session(serde_json::json!({"state": "gone", "process": "gone", "reason": "x"})),
                session(serde_json::json!({"process": "alive", "reason": null})),
                session(serde_json::json!({"state": "live", "process": "alive", "reason": null})),
            ],
            "unreadable": 2
        }))
        .unwrap();
        assert_eq!(
            tally(&listing),
            "4 (2 live, 1 gone, 1 door not asked, 2 unreadable)"
        );
        let empty: SessionList = serde_json::from_str(r#"{"sessions":[],"unreadable":0}"#).unwrap();
        assert_eq!(tally(&empty), "0");
    }
}
