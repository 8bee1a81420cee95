//! `ps --fleet`: every host's sessions as the fleet's etcd holds them, read directly (no
//! server needed) in pages of a few MB all at one revision ([`read_fleet`]), with a HOST
//! column.
//!
//! [`read_fleet`]: crate::fleet::etcd::read_fleet
//!
//! Invariants: it only reads etcd: nothing is pruned, probed or written anywhere; what etcd
//! holds is shown [`escaped`] (the table's cells, the `skipped:` lines), `--json` as JSON.

use std::io::Write;
use std::process::ExitCode;
use std::time::SystemTime;

use anyhow::{Context, bail};
use serde_json::Value;

use super::fleet_args::EtcdArgs;
use super::table::{table, uptime};
use crate::control_chars::escaped;
use crate::fleet::SessionEntry;
use crate::fleet::keys::FleetKeys;
use crate::http::ListFilter;

/// `ps --fleet`: every host's sessions as etcd holds them.
/// `filter` is `ps`'s `--capsule` and `--skill`; `json` its `--json`.
pub(super) async fn fleet_ps(
    etcd: &EtcdArgs,
    filter: &ListFilter,
    json: bool,
) -> anyhow::Result<ExitCode> {
    if !etcd.enabled() {
        bail!("ps --fleet needs --fleet-etcd URL (or MURMUR_REGISTRY_FLEET_ETCD)");
    }
    let endpoints = etcd.endpoints()?;
    let keys = FleetKeys::new(etcd.prefix()?);
    let settings = etcd.settings(endpoints.clone());
    let read = async {
        let client = crate::fleet::etcd::connect(&settings, crate::fleet::DEFAULT_TTL).await?;
        crate::fleet::etcd::read_fleet(&client, &keys).await
    };
    let (cache, skipped) = read
        .await
        .with_context(|| format!("cannot read the fleet from etcd at {}", endpoints.join(",")))?;
    for skipped in skipped {
        let why = skipped.why.to_string();
        eprintln!("skipped: {} — {}", escaped(&skipped.key), escaped(&why));
    }
    let sessions = (cache.sessions())
        .filter(|session| crate::http::fleet::admitted(filter, session))
        .map(|session| session.entry())
        .collect::<Result<Vec<SessionEntry>, _>>()
        .context("a cached fleet entry no longer parses")?;
    let sessions: Vec<&SessionEntry> = sessions.iter().collect();
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &sessions)?;
        writeln!(out)?;
    } else if sessions.is_empty() {
        writeln!(
            out,
            "no running capsules in the fleet ({} hosts)",
            cache.hosts().len()
        )?;
    } else {
        write!(out, "{}", fleet_table(&sessions, SystemTime::now()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The `ps --fleet` table: the `ps` columns after the host's.
fn fleet_table(sessions: &[&SessionEntry], now: SystemTime) -> String {
    let text = |entry: &SessionEntry, field: &str| {
        entry
            .session
            .get(field)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let rows: Vec<[String; 7]> = sessions
        .iter()
        .map(|entry| {
            let state = entry
                .session
                .get("liveness")
                .and_then(|liveness| liveness.get("state"))
                .and_then(Value::as_str)
                .unwrap_or("-");
            let status = if state == "live" { "running" } else { state };
            let detached = entry
                .session
                .get("outlives_launcher")
                .and_then(Value::as_bool);
            [
                entry.host_id.clone(),
                text(entry, "session_id").unwrap_or_else(|| "-".to_owned()),
                format!(
                    "{}@{}",
                    text(entry, "capsule_name").unwrap_or_default(),
                    text(entry, "capsule_version").unwrap_or_default()
                ),
                status.to_owned(),
                match detached {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "-",
                }
                .to_owned(),
                text(entry, "started_at").map_or_else(|| "-".to_owned(), |at| uptime(&at, now)),
                text(entry, "url").unwrap_or_else(|| "-".to_owned()),
            ]
        })
        .collect();
    table(
        [
            "HOST", "SESSION", "CAPSULE", "STATUS", "DETACHED", "UPTIME", "URL",
        ],
        &rows,
    )
}
