//! `ps`: the running sessions as a table or JSON, after pruning what is gone.
//!
//! Invariants: every record it removes is named on stderr with its evidence; every value shown
//! as text (table cells, those lines) goes through [`escaped`], so a record's fields cannot
//! steer the terminal or add a row; `--json` is JSON as it is.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use clap::Args;
use clap::builder::NonEmptyStringValueParser;

use super::fleet_args::EtcdArgs;
use super::table::{table, uptime};
use super::{DirArgs, registry_for};
use crate::control_chars::escaped;
use crate::http::ListFilter;
use crate::registry::{CPU_SPAN_MIN, Reading, Registry, Resources};
use crate::wire::{SessionState, SessionView};

/// How far apart `ps` takes its two readings of each process's CPU time: long enough for the
/// kernel's 10 ms ticks to make a share, short enough for a command that answers at once.
const CPU_READINGS_APART: Duration = Duration::from_millis(250);

#[derive(Debug, Args)]
pub(super) struct PsArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Print the sessions as a JSON array instead of a table.
    #[arg(long)]
    pub(super) json: bool,
    /// Only sessions of these capsules (comma-separated names, as `GET /sessions?capsule=`).
    #[arg(long, value_name = "NAMES", value_delimiter = ',',
        value_parser = NonEmptyStringValueParser::new())]
    capsule: Vec<String>,
    /// Only live sessions whose card lists one of these skills, by id or tag (comma-separated,
    /// as `GET /sessions?skill=`).
    #[arg(long, value_name = "SKILLS", value_delimiter = ',',
        value_parser = NonEmptyStringValueParser::new())]
    skill: Vec<String>,
    /// Every host's sessions, read from the fleet in etcd (no server needed, nothing pruned),
    /// with a HOST column; needs --fleet-etcd.
    #[arg(long)]
    fleet: bool,
    #[command(flatten)]
    pub(super) etcd: EtcdArgs,
}

/// The sessions `ps` shows, after pruning what is gone (each removal named on stderr).
pub(super) async fn running_sessions(registry: &Registry) -> anyhow::Result<Vec<Reading>> {
    let pass = registry.sessions_pruned().await.with_context(|| {
        format!(
            "cannot read the running directory {}",
            registry.dir().display()
        )
    })?;
    for (session_id, reason) in &pass.report.pruned {
        eprintln!("pruned: {} — {}", escaped(session_id), escaped(reason));
    }
    for entry in &pass.report.removed_unreadable {
        let why = entry.why.to_string();
        eprintln!("removed: {} — {}", escaped(&entry.file_name), escaped(&why));
    }
    Ok(pass.readings)
}

#[cfg(feature = "fleet")]
use super::ps_fleet::fleet_ps;

impl PsArgs {
    /// The `--capsule` and `--skill` filters, as the API's `capsule=` and `skill=`.
    pub(super) fn filter(&self) -> ListFilter {
        ListFilter::of_names(self.capsule.clone(), self.skill.clone())
    }
}

pub(super) async fn ps(args: PsArgs) -> anyhow::Result<ExitCode> {
    if args.fleet {
        return fleet_ps(&args.etcd, &args.filter(), args.json).await;
    }
    let registry = registry_for(&args.dir)?;
    let filter = args.filter();
    let mut sessions = running_sessions(&registry).await?;
    sessions.retain(|reading| filter.keeps(reading));
    let resources = two_readings(&registry, &sessions).await;
    let mut out = std::io::stdout().lock();
    if args.json {
        let views: Vec<SessionView> = sessions
            .iter()
            .zip(&resources)
            .map(|(reading, figure)| SessionView::of(reading).with_resources(figure.as_ref()))
            .collect();
        serde_json::to_writer_pretty(&mut out, &views)?;
        writeln!(out)?;
    } else if sessions.is_empty() {
        writeln!(out, "no running capsules")?;
    } else {
        write!(
            out,
            "{}",
            ps_table(&sessions, &resources, SystemTime::now())
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// What each session's process costs, from two readings [`CPU_READINGS_APART`] (the second
/// measures CPU since the first); `None` for a process the registry cannot confirm.
async fn two_readings(registry: &Registry, sessions: &[Reading]) -> Vec<Option<Resources>> {
    const _: () = assert!(CPU_READINGS_APART.as_millis() >= CPU_SPAN_MIN.as_millis());
    let first = registry.resources(sessions).await;
    if first.iter().all(Option::is_none) {
        return first;
    }
    tokio::time::sleep(CPU_READINGS_APART).await;
    registry.resources(sessions).await
}

/// The `ps` table: left-aligned columns, the full session id, a header line.
fn ps_table(sessions: &[Reading], resources: &[Option<Resources>], now: SystemTime) -> String {
    let rows: Vec<[String; 8]> = sessions
        .iter()
        .zip(resources)
        .map(|(reading, figure)| {
            let r = &reading.record;
            let status = match reading.liveness.as_ref().map(SessionState::from) {
                Some(SessionState::Live) => "running",
                _ => "unreachable",
            };
            [
                r.session_id.clone(),
                format!("{}@{}", r.capsule_name, r.capsule_version),
                status.to_owned(),
                cpu_cell(figure.as_ref()),
                figure.map_or_else(|| "-".to_owned(), |f| memory_cell(f.rss_bytes)),
                if r.outlives_launcher { "yes" } else { "no" }.to_owned(),
                uptime(&r.started_at, now),
                r.url.clone().unwrap_or_else(|| "-".to_owned()),
            ]
        })
        .collect();
    table(
        [
            "SESSION", "CAPSULE", "STATUS", "CPU%", "MEM", "DETACHED", "UPTIME", "URL",
        ],
        &rows,
    )
}

/// `ps --fleet` in a build without the fleet: refused, saying which feature to build with.
#[cfg(not(feature = "fleet"))]
async fn fleet_ps(_etcd: &EtcdArgs, _filter: &ListFilter, _json: bool) -> anyhow::Result<ExitCode> {
    Err(super::fleet_args::no_fleet_in_this_build("ps --fleet"))
}

/// CPU% as `ps` shows it: one decimal, `-` when there is no figure.
fn cpu_cell(figure: Option<&Resources>) -> String {
    match figure.and_then(|f| f.cpu_percent) {
        Some(percent) => format!("{percent:.1}"),
        None => "-".to_owned(),
    }
}

/// Resident memory in binary units, as `top` and `docker stats` show it: `812K`, `73.4M`,
/// `1.2G`.
fn memory_cell(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let bytes = bytes as f64;
    if bytes < KIB * KIB {
        format!("{:.0}K", bytes / KIB)
    } else if bytes < KIB * KIB * KIB {
        format!("{:.1}M", bytes / (KIB * KIB))
    } else {
        format!("{:.1}G", bytes / (KIB * KIB * KIB))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_in_binary_units_and_cpu_has_one_decimal() {
        assert_eq!(memory_cell(0), "0K");
        assert_eq!(memory_cell(812 * 1024), "812K");
        assert_eq!(memory_cell(73_400_320), "70.0M");
        assert_eq!(memory_cell(3 << 29), "1.5G");
        let figure = |cpu_percent| Resources {
            cpu_percent,
            cpu_time_ms: 1,
            rss_bytes: 1,
            threads: 1,
        };
        assert_eq!(cpu_cell(Some(&figure(Some(99.96)))), "100.0");
        assert_eq!(cpu_cell(Some(&figure(Some(0.0)))), "0.0");
        assert_eq!(cpu_cell(Some(&figure(None))), "-");
        assert_eq!(cpu_cell(None), "-");
    }
}
