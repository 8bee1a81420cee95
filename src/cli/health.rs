//! `health`: does a registry answer on its address (for container health checks).
//!
//! Invariant: the exit code alone says it; nothing is written to the registry, and no token is
//! sent (`/healthz` is public). Asked through the typed client ([`Client::healthz`]).

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::anyhow;
use clap::Args;

use super::runtime;
use crate::client::Client;
use crate::discovery::ServerInfo;

#[derive(Debug, Args)]
pub(super) struct HealthArgs {
    /// The address the registry listens on; an unspecified IP (0.0.0.0) is asked on loopback.
    #[arg(long, env = "MURMUR_REGISTRY_BIND", default_value = "127.0.0.1:7420")]
    bind: SocketAddr,
}

pub(super) fn health(args: HealthArgs) -> anyhow::Result<ExitCode> {
    let client = Client::new(&ServerInfo::url_for(args.bind), String::new())?;
    runtime()?
        .block_on(client.healthz())
        .map_err(|why| anyhow!(why.to_string()))?;
    writeln!(std::io::stdout(), "ok")?;
    Ok(ExitCode::SUCCESS)
}
