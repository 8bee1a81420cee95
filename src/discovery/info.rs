//! What the discovery file holds, and reading it as a reader must: never following a link,
//! never blocking on a FIFO, refusing a file of another user's, one others may read, one too
//! large or one not of this shape, each with a reason a person can act on.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::private_fs::{PrivateFileProblem, read_private_file};

/// A discovery file is at most this long (a real one is a few hundred bytes).
const MAX_BYTES: u64 = 64 * 1024;

/// The running registry, as `serve` describes itself in `server.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerInfo {
    /// Where it serves: `http://IP:PORT` (loopback when it listens on every address).
    pub url: String,
    /// Its process.
    pub pid: u32,
    /// Its process's start token (layer 2's reading of itself).
    pub process_start: String,
    /// Its version.
    pub version: String,
    /// When it started (RFC 3339, UTC).
    pub started_at: String,
    /// The running directory it serves.
    pub running_dir: PathBuf,
    /// Its bearer token file.
    pub token_file: PathBuf,
    /// Its fleet, `null` without `--fleet-etcd`.
    pub fleet: Option<FleetInfo>,
}

/// The fleet a registry publishes to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetInfo {
    /// Its host id.
    pub host_id: String,
    /// Its etcd key prefix.
    pub prefix: String,
}

impl ServerInfo {
    /// The `url` for a listener bound at `bound`: an unspecified IP (`0.0.0.0`, `::`) is asked
    /// on loopback, as `health` asks it.
    pub fn url_for(bound: SocketAddr) -> String {
        let mut addr = bound;
        if addr.ip().is_unspecified() {
            addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        format!("http://{addr}")
    }

    /// The address `url` names, when it is `http://IP:PORT` (no name to resolve, no path).
    pub fn address(&self) -> Option<SocketAddr> {
        self.url.strip_prefix("http://")?.parse().ok()
    }
}

/// Why the discovery file could not be read.
#[derive(Debug)]
pub(super) enum Unread {
    /// There is none.
    Missing,
    /// There is one, and it must not be trusted: why, for a person.
    Untrusted(String),
}

/// Read the discovery file at `path`, judged on the descriptor it is read from.
pub(super) fn read_info(path: &Path) -> Result<ServerInfo, Unread> {
    let (bytes, _) = read_private_file(path, MAX_BYTES).map_err(|problem| {
        Unread::Untrusted(match problem {
            PrivateFileProblem::Io(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Unread::Missing;
            }
            PrivateFileProblem::Io(e) => format!("it cannot be read: {e}"),
            PrivateFileProblem::Symlink => "it is a symlink (never followed)".to_owned(),
            PrivateFileProblem::NotRegular => "it is not a regular file".to_owned(),
            PrivateFileProblem::ForeignOwner { owner, me } => {
                format!("it is owned by uid {owner}, not by this user (uid {me})")
            }
            PrivateFileProblem::OpenToOthers { mode } => {
                format!("its mode {mode:04o} lets group or others at it")
            }
            PrivateFileProblem::TooLarge => {
                format!("it is larger than {MAX_BYTES} bytes, too large to be one")
            }
        })
    })?;
    let info: ServerInfo = serde_json::from_slice(&bytes)
        .map_err(|e| Unread::Untrusted(format!("it is not a discovery file's JSON: {e}")))?;
    if info.address().is_none() {
        return Err(Unread::Untrusted(format!(
            "its url {:?} is not http://IP:PORT",
            info.url
        )));
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unspecified_bind_is_found_on_loopback_and_only_ip_urls_are_addresses() {
        let any: SocketAddr = "0.0.0.0:7420".parse().unwrap();
        assert_eq!(ServerInfo::url_for(any), "http://127.0.0.1:7420");
        let v6: SocketAddr = "[::1]:9".parse().unwrap();
        assert_eq!(ServerInfo::url_for(v6), "http://[::1]:9");
        let mut info = ServerInfo {
            url: "http://127.0.0.1:7420".into(),
            pid: 1,
            process_start: "1".into(),
            version: "0".into(),
            started_at: "2026-01-01T00:00:00Z".into(),
            running_dir: "/r".into(),
            token_file: "/t".into(),
            fleet: None,
        };
        assert_eq!(info.address(), Some("127.0.0.1:7420".parse().unwrap()));
        for url in [
            "https://127.0.0.1:1",
            "http://localhost:1",
            "http://127.0.0.1:1/x",
        ] {
            info.url = url.into();
            assert_eq!(info.address(), None, "{url}");
        }
    }
}
