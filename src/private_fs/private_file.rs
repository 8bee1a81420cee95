//! Reading a small file only this user may see (a secret): judged on the descriptor it is read
//! from, so what is judged is what is read.

use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

/// Why a file that must be this user's alone was refused by [`read_private_file`].
#[derive(Debug)]
pub(crate) enum PrivateFileProblem {
    /// The name is a symlink (it is never followed).
    Symlink,
    /// A directory, a FIFO, a device…
    NotRegular,
    /// Another user owns it.
    ForeignOwner {
        /// Its owner.
        owner: u32,
        /// The effective uid of this process.
        me: u32,
    },
    /// Group or others have a bit on it: whatever it holds may already be known.
    OpenToOthers {
        /// Its permission bits.
        mode: u32,
    },
    /// Longer than the caller's limit.
    TooLarge,
    /// It could not be opened or read.
    Io(std::io::Error),
}

/// Read a small file only this user may see: opened without following a symlink, then judged
/// on that descriptor (a regular file, ours, no bit for group or others, at most `max_bytes`),
/// so what is judged is what is read. The secrets the registry keeps (the token, etcd's
/// password) are read through here; their callers word each problem for their own file.
pub(crate) fn read_private_file(
    path: &Path,
    max_bytes: u64,
) -> Result<(Vec<u8>, Stat), PrivateFileProblem> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY;
    let fd = match rustix::fs::open(path, flags | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::LOOP) => return Err(PrivateFileProblem::Symlink),
        Err(e) => return Err(PrivateFileProblem::Io(e.into())),
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| PrivateFileProblem::Io(e.into()))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(PrivateFileProblem::NotRegular);
    }
    let me = rustix::process::geteuid().as_raw();
    if stat.st_uid != me {
        return Err(PrivateFileProblem::ForeignOwner {
            owner: stat.st_uid,
            me,
        });
    }
    if stat.st_mode & 0o077 != 0 {
        return Err(PrivateFileProblem::OpenToOthers {
            mode: stat.st_mode & 0o7777,
        });
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(std::fs::File::from(fd), max_bytes + 1),
        &mut bytes,
    )
    .map_err(PrivateFileProblem::Io)?;
    if bytes.len() as u64 > max_bytes {
        return Err(PrivateFileProblem::TooLarge);
    }
    Ok((bytes, stat))
}
