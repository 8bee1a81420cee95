//! `health`: does a registry answer on its address (for container health checks).
//!
//! Invariant: the exit code alone says it; nothing is written to the registry. The question
//! is the one the discovery file's trust check asks ([`crate::discovery::ask_healthz`]).

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::{Context, anyhow};
use clap::Args;

use super::runtime;
use crate::discovery::{ask_healthz, plain_client};

#[derive(Debug, Args)]
pub(super) struct HealthArgs {
    /// The address the registry listens on; an unspecified IP (0.0.0.0) is asked on loopback.
    #[arg(long, env = "MURMUR_REGISTRY_BIND", default_value = "127.0.0.1:7420")]
    bind: SocketAddr,
}

pub(super) fn health(args: HealthArgs) -> anyhow::Result<ExitCode> {
    let client = plain_client().context("cannot build an HTTP client")?;
    runtime()?
        .block_on(ask_healthz(&client, args.bind))
        .map_err(|why| anyhow!(why))?;
    writeln!(std::io::stdout(), "ok")?;
    Ok(ExitCode::SUCCESS)
}
