//! Test fixtures of this module's tests: a live process to name as an owner, stranded and
//! dated files, and what a directory holds.

use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::AtFlags;

use super::file_identity::FileIdentity;
use super::private_dir::open_dir;
use super::put_back::Mtime;
use super::quarantine::quarantine_name;

/// A live `sleep`, killed and reaped on drop, also when an assertion fails before.
pub(super) struct Sleeper(pub(super) std::process::Child);

impl Sleeper {
    pub(super) fn spawn() -> Self {
        Self(
            std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .expect("spawn sleep"),
        )
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Moves `name` aside exactly as a removal in this process does, and leaves it there.
pub(super) fn strand(dir_fd: &OwnedFd, name: &str) -> String {
    let quarantine = quarantine_name(name).expect("a quarantine name");
    rustix::fs::renameat(dir_fd, name, dir_fd, quarantine.as_str()).expect("quarantine");
    quarantine
}

/// A private scratch directory holding one file `a` and one directory `d`, opened.
pub(super) fn dir_with_a_file_and_a_dir() -> (tempfile::TempDir, OwnedFd) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a"), b"judged").unwrap();
    std::fs::create_dir(dir.path().join("d")).unwrap();
    let fd = open_dir(dir.path()).unwrap();
    (dir, fd)
}

pub(super) fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// Writes `bytes` to `dir`/`name` and sets its modification time to `mtime`.
pub(super) fn write_dated(dir: &Path, name: &str, bytes: &[u8], mtime: Mtime) {
    std::fs::write(dir.join(name), bytes).unwrap();
    let at = |(tv_sec, tv_nsec): Mtime| rustix::fs::Timespec {
        tv_sec,
        tv_nsec: tv_nsec as _,
    };
    let times = rustix::fs::Timestamps {
        last_access: at(mtime),
        last_modification: at(mtime),
    };
    let dir_fd = open_dir(dir).unwrap();
    rustix::fs::utimensat(&dir_fd, name, &times, AtFlags::SYMLINK_NOFOLLOW).unwrap();
}

/// Device, inode and modification time of `dir`/`name`.
pub(super) fn identity(dir: &Path, name: &str) -> FileIdentity {
    FileIdentity::at(&open_dir(dir).unwrap(), name).unwrap()
}

pub(super) const OLDER: Mtime = (1_700_000_000, 5);
pub(super) const NEWER: Mtime = (1_700_000_000, 6);
