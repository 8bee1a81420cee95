//! `prune`: remove the records of sessions that are gone, and files that are not records.
//!
//! Invariant: a record is removed only on fresh evidence, each removal named.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;

use super::{DirArgs, registry_for};

pub(super) async fn prune(args: DirArgs) -> anyhow::Result<ExitCode> {
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
