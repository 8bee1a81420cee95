//! `token`: where the bearer token file is, the token itself on `--show`, a new one on
//! `--rotate`.
//!
//! Invariant: the token is printed only when `--show` asks for it.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::resolve_token_file;
use crate::control_chars::escaped;
use crate::token;

#[derive(Debug, Args)]
pub(super) struct TokenArgs {
    /// The token file [default: $HOME/.murmur/registry/token].
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Print the token itself.
    #[arg(long)]
    show: bool,
    /// Replace the token with a fresh one; a running server accepts only the new one.
    #[arg(long)]
    rotate: bool,
}

pub(super) fn token_command(args: TokenArgs) -> anyhow::Result<ExitCode> {
    let path = resolve_token_file(args.token_file.as_ref())?;
    let token = if args.rotate {
        token::rotate(&path).with_context(|| {
            format!(
                "cannot rotate {} (start `murmur-registry serve` once to create it)",
                path.display()
            )
        })?
    } else {
        token::load_or_create(&path)?
    };
    if args.show {
        writeln!(std::io::stdout(), "{}", escaped(&token))?;
    } else {
        writeln!(std::io::stdout(), "{}", super::shown(&path))?;
    }
    Ok(ExitCode::SUCCESS)
}
