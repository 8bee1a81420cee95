//! `health`: does a registry answer on its address (for container health checks).
//!
//! Invariant: the exit code alone says it; nothing is written to the registry.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;

#[derive(Debug, Args)]
pub(super) struct HealthArgs {
    /// The address the registry listens on; an unspecified IP (0.0.0.0) is asked on loopback.
    #[arg(long, env = "MURMUR_REGISTRY_BIND", default_value = "127.0.0.1:7420")]
    bind: SocketAddr,
}

pub(super) fn health(args: HealthArgs) -> anyhow::Result<ExitCode> {
    use std::io::Read;
    let mut addr = args.bind;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let deadline = Duration::from_secs(3);
    let mut stream = std::net::TcpStream::connect_timeout(&addr, deadline)
        .with_context(|| format!("no registry answers at http://{addr}"))?;
    stream.set_read_timeout(Some(deadline))?;
    stream.set_write_timeout(Some(deadline))?;
    write!(
        stream,
        "GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    // The status line is all that matters; /healthz answers a few bytes.
    let mut head = Vec::new();
    stream
        .take(256)
        .read_to_end(&mut head)
        .with_context(|| format!("the registry at http://{addr} did not answer"))?;
    let status_line = String::from_utf8_lossy(&head);
    match status_line.split_whitespace().nth(1) {
        Some("200") => {
            writeln!(std::io::stdout(), "ok")?;
            Ok(ExitCode::SUCCESS)
        }
        other => bail!(
            "the registry at http://{addr} answered {}",
            other.map_or("something that is not HTTP".to_owned(), |code| format!(
                "HTTP {code}"
            ))
        ),
    }
}
