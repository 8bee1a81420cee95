//! The `murmur-registry` binary: a thin shell over [`murmur_registry::cli::run`].
//!
//! Keeps one rule: every error leaves as one line on stderr and exit status 1. Before anything
//! else it sets the heap policy ([`heap`]), which belongs to the process, not to the library.

use std::process::ExitCode;

mod heap;

fn main() -> ExitCode {
    heap::return_freed_memory();
    match murmur_registry::cli::run() {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
