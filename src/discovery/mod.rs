//! The discovery file: how a command finds the registry that serves, without knowing its port.
//!
//! `serve` writes `server.json` in its token file's directory once its listener is bound, and
//! removes it at a clean exit; `status`, `dashboard` (and any client) read it there.
//!
//! Invariants kept here:
//! - One `serve` per directory: it holds an exclusive `flock` on `server.lock` beside the file
//!   for its whole life (taken before it binds), so two started at the same instant never both
//!   run, and a second one is refused naming the first's URL ([`Claim`]).
//! - The file is written whole (staged 0600, renamed into place) only after the bind, and
//!   removed at exit only while it is still the very file this process wrote.
//! - A reader trusts the file only when it is a regular file of this user's, mode 0600, small,
//!   of the registry's shape, naming an `http://IP:PORT`, and when layers 1 and 2 hold for its
//!   pid and start token (the registry's own rule, through `process_identity`) and `/healthz`
//!   answers there ([`trust`], a pure decision). Anything else is said: stale (replaced by the
//!   next `serve`) or untrusted (never followed, never sent a token).

mod asking;
mod claim;
mod find;
mod info;
#[cfg(feature = "client-tls")]
mod tls;
mod trust;

use std::path::{Path, PathBuf};

pub(crate) use asking::unanswered;
pub use asking::{ask_healthz, client_builder, plain_client};
pub use claim::{Claim, ClaimError, Published};
pub use find::{Found, find};
pub use info::{FleetInfo, ServerInfo};
#[cfg(feature = "client-tls")]
pub use tls::with_tls;

/// The discovery file's name.
pub const FILE_NAME: &str = "server.json";
/// The lock file's name: `serve` holds it locked for its life; it is never removed.
pub const LOCK_NAME: &str = "server.lock";

/// The directory of the discovery file for a registry using `token_file`: the token's own.
pub fn dir_of(token_file: &Path) -> PathBuf {
    match token_file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}
