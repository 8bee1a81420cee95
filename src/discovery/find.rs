//! Finding the registry through its discovery file: read it as a reader must, check its
//! process with layers 1–2 and ask its `/healthz`, then [`super::trust::trust`] decides.

use std::path::Path;

use super::info::{Unread, read_info};
use super::trust::{Healthz, Verdict, needs_healthz, trust};
use super::{FILE_NAME, ServerInfo, ask_healthz};
use crate::process_identity::state_of;

/// What a directory's discovery file says.
#[derive(Debug)]
pub enum Found {
    /// A registry runs and answers there.
    Running(ServerInfo),
    /// None runs: there is no file, or a stale one (the next `serve` replaces it). Why, for a
    /// person, naming the file.
    NotRunning(String),
    /// The file must not be trusted (a symlink, a FIFO, another user's, open to others, too
    /// large, not JSON): it was not followed and nothing was sent. Why, naming the file.
    Untrusted(String),
}

/// Read `dir`'s discovery file and judge it. Blocking reads of a small file and of `/proc`,
/// then at most one `/healthz` request through `client`.
pub async fn find(dir: &Path, client: &reqwest::Client) -> Found {
    let path = dir.join(FILE_NAME);
    let info = match read_info(&path) {
        Ok(info) => info,
        Err(Unread::Missing) => {
            return Found::NotRunning(format!(
                "no registry runs here: there is no {}",
                path.display()
            ));
        }
        Err(Unread::Untrusted(why)) => {
            return Found::Untrusted(format!("refusing {}: {why}", path.display()));
        }
    };
    let process = state_of(info.pid, &info.process_start);
    let healthz = match info.address() {
        Some(addr) if needs_healthz(&process) => match ask_healthz(client, addr).await {
            Ok(()) => Healthz::Answered,
            Err(why) => Healthz::Failed(why),
        },
        _ => Healthz::NotAsked,
    };
    match trust(&process, &healthz) {
        Verdict::Running => Found::Running(info),
        Verdict::Stale(why) => Found::NotRunning(format!(
            "no registry runs here: {} is stale ({why}; it named {}); the next `serve` replaces it",
            path.display(),
            info.url
        )),
    }
}
