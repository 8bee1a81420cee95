//! `serve`'s side of the discovery file: the directory's lock, held for the server's life;
//! the file, written once the listener is bound; its removal at exit, only while it is still
//! the file this process wrote.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, Mode, OFlags};
use rustix::io::Errno;

use super::info::read_info;
use super::{FILE_NAME, LOCK_NAME, ServerInfo};
use crate::private_fs::{FileFate, FileIdentity, open_dir, unlink_checked, write_atomically};

/// Why `serve` may not publish in a directory.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// Another `serve` holds the directory's lock.
    #[error(
        "another `murmur-registry serve` runs for {dir} ({running}); stop it first, or give this one another --token-file"
    )]
    Taken {
        /// The directory.
        dir: PathBuf,
        /// What its discovery file says of it (its URL and pid), or why it says nothing.
        running: String,
    },
    /// The lock or the file could not be opened, taken or written.
    #[error("discovery file in {dir}: {cause}")]
    Io {
        /// The directory.
        dir: PathBuf,
        /// The error.
        cause: std::io::Error,
    },
}

/// The directory's lock, held: no other `serve` can take it until this process exits.
#[derive(Debug)]
pub struct Claim {
    dir: PathBuf,
    dir_fd: OwnedFd,
    /// Held for the lock it carries; closing it (or the process ending) lets go.
    _lock: OwnedFd,
}

impl Claim {
    /// Take `dir`'s lock without waiting; [`ClaimError::Taken`] while another `serve` holds it.
    pub fn take(dir: &Path) -> Result<Self, ClaimError> {
        let io = |cause: std::io::Error| ClaimError::Io {
            dir: dir.to_path_buf(),
            cause,
        };
        let dir_fd = open_dir(dir).map_err(io)?;
        let lock = rustix::fs::openat(
            &dir_fd,
            LOCK_NAME,
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| io(e.into()))?;
        match rustix::fs::flock(&lock, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Self {
                dir: dir.to_path_buf(),
                dir_fd,
                _lock: lock,
            }),
            Err(Errno::WOULDBLOCK) => Err(ClaimError::Taken {
                dir: dir.to_path_buf(),
                running: holder(dir),
            }),
            Err(e) => Err(io(e.into())),
        }
    }

    /// Write the discovery file whole (0600, renamed into place over a stale one); it stays
    /// until the answered [`Published`] is dropped.
    pub fn publish(self, info: &ServerInfo) -> Result<Published, ClaimError> {
        let io = |cause: std::io::Error| ClaimError::Io {
            dir: self.dir.clone(),
            cause,
        };
        if let Ok(stale) = read_info(&self.dir.join(FILE_NAME)) {
            // Its writer no longer holds the lock: it has exited.
            tracing::info!(pid = stale.pid, url = %stale.url, "replacing a stale discovery file");
        }
        let mut bytes = serde_json::to_vec_pretty(info).map_err(|e| io(e.into()))?;
        bytes.push(b'\n');
        let identity = write_atomically(&self.dir_fd, FILE_NAME, &bytes).map_err(io)?;
        Ok(Published {
            claim: self,
            identity,
        })
    }
}

/// What a lock's holder published, for the refusal: its URL and pid, or why it says nothing.
fn holder(dir: &Path) -> String {
    match read_info(&dir.join(FILE_NAME)) {
        Ok(info) => format!("at {}, pid {}", info.url, info.pid),
        Err(_) => "it is starting, or its discovery file cannot be read".to_owned(),
    }
}

/// The discovery file as this process wrote it; dropping it removes the file if it is still
/// that very file, then lets go of the lock.
#[derive(Debug)]
pub struct Published {
    claim: Claim,
    identity: FileIdentity,
}

impl Drop for Published {
    fn drop(&mut self) {
        let path = self.claim.dir.join(FILE_NAME);
        let ours = |dir_fd: &OwnedFd, name: &str| {
            FileIdentity::at(dir_fd, name).is_ok_and(|now| now == self.identity)
        };
        match unlink_checked(&self.claim.dir_fd, FILE_NAME, ours) {
            Ok(FileFate::Removed | FileFate::AlreadyGone) => {}
            Ok(fate) => tracing::warn!(
                ?fate,
                path = %path.display(),
                "the discovery file is no longer the one this registry wrote; left in place"
            ),
            Err(error) => tracing::warn!(
                %error,
                path = %path.display(),
                "could not remove the discovery file"
            ),
        }
    }
}
