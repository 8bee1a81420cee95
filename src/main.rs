//! The `murmur-registry` binary: a thin shell over [`murmur_registry::cli::run`].
//!
//! Keeps one rule: every error leaves as one line on stderr and exit status 1.

use std::process::ExitCode;

fn main() -> ExitCode {
    match murmur_registry::cli::run() {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
