//! `man`: the man page in roff, generated from the parser that reads the command line, so it
//! names every subcommand and flag as they are parsed.
//!
//! Invariant: without `--out-dir` it writes nothing but stdout.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, CommandFactory};

use super::Cli;

#[derive(Debug, Args)]
pub(super) struct ManArgs {
    /// Write one page per command (murmur-registry.1, murmur-registry-serve.1 and so on) into DIR,
    /// created if missing, instead of printing the main page.
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
}

pub(super) fn man(args: &ManArgs) -> anyhow::Result<ExitCode> {
    // `help` is no page of its own: every page has its `--help`.
    let command = Cli::command().disable_help_subcommand(true);
    match &args.out_dir {
        None => clap_mangen::Man::new(command)
            .render(&mut std::io::stdout().lock())
            .context("cannot print the man page")?,
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .and_then(|()| clap_mangen::generate_to(command, dir))
                .with_context(|| format!("cannot write the man pages into {}", dir.display()))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
