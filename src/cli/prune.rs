//! `prune`: remove the records of sessions that are gone, and files that are not records.
//!
//! Invariant: a record is removed only on fresh evidence, each removal named (shown
//! [`escaped`]: a file name or a reason cannot steer the terminal).

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;

use super::{DirArgs, registry_for};
use crate::control_chars::escaped;

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
        writeln!(out, "pruned: {} — {}", escaped(session_id), escaped(reason))?;
    }
    for entry in &report.removed_unreadable {
        let why = entry.why.to_string();
        writeln!(
            out,
            "removed: {} — {}",
            escaped(&entry.file_name),
            escaped(&why)
        )?;
    }
    if report.pruned.is_empty() && report.removed_unreadable.is_empty() {
        writeln!(out, "nothing to prune")?;
    }
    Ok(ExitCode::SUCCESS)
}
