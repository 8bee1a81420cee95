//! The `murmur-registry` binary: a thin shell over [`murmur_registry::cli::run`].
//!
//! Keeps one rule: every error leaves as one line on stderr (control characters in it shown
//! escaped: an error may quote a file name or a peer's answer) and exit status 1.

use std::process::ExitCode;

fn main() -> ExitCode {
    match murmur_registry::cli::run() {
        Ok(code) => code,
        Err(error) => {
            let line = format!("{error:#}");
            eprintln!("error: {}", murmur_registry::control_chars::escaped(&line));
            ExitCode::FAILURE
        }
    }
}
