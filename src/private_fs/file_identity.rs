//! Which file a directory entry is: device, inode and modification time, to tell a file from
//! one that replaced it under its name.

use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, Stat};

/// Which file a directory entry is, to tell it from one that replaced it under its name.
///
/// Device and inode alone are not enough: a filesystem may hand a freed inode number straight
/// to the next new file. The modification time (at the filesystem's timestamp resolution)
/// tells those apart, and unlike the change time it survives the renames this module makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileIdentity {
    dev: u64,
    ino: u64,
    pub(super) mtime: (i64, u64),
}

impl FileIdentity {
    pub(crate) fn of(stat: &Stat) -> Self {
        Self {
            dev: stat.st_dev,
            ino: stat.st_ino,
            mtime: (stat.st_mtime, stat.st_mtime_nsec),
        }
    }

    /// The identity of the entry `name` in `dir_fd`, not following a link.
    pub(crate) fn at(dir_fd: &OwnedFd, name: &str) -> std::io::Result<Self> {
        Ok(Self::of(&rustix::fs::statat(
            dir_fd,
            name,
            AtFlags::SYMLINK_NOFOLLOW,
        )?))
    }
}
