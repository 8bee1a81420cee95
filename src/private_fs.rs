//! Files only their owner may see, written whole and removed only when still the same file.
//!
//! The running directory and the token file share these rules, so they live here once:
//! - Directories are opened with `O_NOFOLLOW` and checked and fixed through that descriptor,
//!   so what is checked is what is fixed.
//! - A file is replaced atomically: staged under a hidden, random, exclusive name in the same
//!   directory (mode 0600 whatever the umask), fsynced, renamed into place, directory fsynced.
//! - A file is removed only while it is provably the one the caller judged: it is first renamed
//!   to a hidden quarantine name (atomically taking whatever is under the name now), judged
//!   there, and unlinked, or put back if a writer had replaced it meanwhile.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, Stat};
use rustix::io::Errno;

/// Open a directory for `*at` calls, refusing to follow a symlink at its last component.
pub(crate) fn open_dir(path: &Path) -> std::io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Which file a directory entry is, to tell it from one that replaced it under its name.
///
/// Device and inode alone are not enough: a filesystem may hand a freed inode number straight
/// to the next new file. The modification time, to the nanosecond, tells those apart, and
/// unlike the change time it survives the renames this module makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileIdentity {
    dev: u64,
    ino: u64,
    mtime: (i64, u64),
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

/// `bytes.len()` bytes from the OS's random source.
pub(crate) fn fill_random(bytes: &mut [u8]) -> std::io::Result<()> {
    let filled = rustix::rand::getrandom(&mut *bytes, rustix::rand::GetRandomFlags::empty())?;
    if filled != bytes.len() {
        return Err(std::io::Error::other(
            "short read from the OS's random source",
        ));
    }
    Ok(())
}

/// A hidden name beside `name`, unique to this call: `.<name>.<pid>.<random>.<purpose>`.
fn hidden_sibling(name: &str, purpose: &str) -> std::io::Result<String> {
    let mut random = [0u8; 8];
    fill_random(&mut random)?;
    Ok(format!(
        ".{name}.{}.{:016x}.{purpose}",
        std::process::id(),
        u64::from_le_bytes(random)
    ))
}

/// Put `bytes` at `dir_fd`/`name` in one step, mode 0600; answers the new file's identity.
///
/// Readers see the old file or the new one, never a part. A failure leaves no staged file.
pub(crate) fn write_atomically(
    dir_fd: &OwnedFd,
    name: &str,
    bytes: &[u8],
) -> std::io::Result<FileIdentity> {
    let staged = hidden_sibling(name, "tmp")?;
    let fd = rustix::fs::openat(
        dir_fd,
        staged.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    let written = (|| {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600))?;
        let mut file = std::fs::File::from(fd);
        file.write_all(bytes)?;
        file.sync_all()?;
        rustix::fs::renameat(dir_fd, staged.as_str(), dir_fd, name)?;
        rustix::fs::fsync(dir_fd)?;
        Ok(FileIdentity::of(&rustix::fs::fstat(&file)?))
    })();
    if written.is_err() {
        // Best effort: the staged file is ours and useless now; the error that matters is the
        // one that stopped the write.
        let _ = rustix::fs::unlinkat(dir_fd, staged.as_str(), AtFlags::empty());
    }
    written
}

/// What [`unlink_checked`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unlinked {
    /// The entry was the one judged, and is gone.
    Removed,
    /// Nothing was under the name.
    Missing,
    /// Something else was under the name by then; it was left in place.
    Kept,
}

/// Unlink `dir_fd`/`name` only if `judge` says so of it, and still says so of the entry taken
/// from under the name.
///
/// `judge` gets the directory and a name to look at: first the entry's own (a miss leaves
/// everything untouched, so a record that merely replaced the judged file is never disturbed),
/// then the hidden quarantine name the entry has been moved to. A `false` verdict there puts
/// the entry back (unless a writer has put yet another file under the name, which supersedes it
/// as the writer's own rename would have). A directory is never unlinked.
pub(crate) fn unlink_checked(
    dir_fd: &OwnedFd,
    name: &str,
    judge: impl Fn(&OwnedFd, &str) -> bool,
) -> std::io::Result<Unlinked> {
    match rustix::fs::statat(dir_fd, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(_) => {}
        Err(Errno::NOENT) => return Ok(Unlinked::Missing),
        Err(e) => return Err(e.into()),
    }
    if !judge(dir_fd, name) {
        return Ok(Unlinked::Kept);
    }
    let quarantine = hidden_sibling(name, "unlinking")?;
    match rustix::fs::renameat_with(
        dir_fd,
        name,
        dir_fd,
        quarantine.as_str(),
        RenameFlags::NOREPLACE,
    ) {
        Ok(()) => {}
        Err(Errno::NOENT) => return Ok(Unlinked::Missing),
        Err(e) => return Err(e.into()),
    }
    let is_dir = rustix::fs::statat(dir_fd, quarantine.as_str(), AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory);
    if !is_dir && judge(dir_fd, &quarantine) {
        rustix::fs::unlinkat(dir_fd, quarantine.as_str(), AtFlags::empty())?;
        return Ok(Unlinked::Removed);
    }
    match rustix::fs::renameat_with(
        dir_fd,
        quarantine.as_str(),
        dir_fd,
        name,
        RenameFlags::NOREPLACE,
    ) {
        Ok(()) => Ok(Unlinked::Kept),
        Err(Errno::EXIST) if !is_dir => {
            rustix::fs::unlinkat(dir_fd, quarantine.as_str(), AtFlags::empty())?;
            Ok(Unlinked::Kept)
        }
        Err(e) => Err(e.into()),
    }
}

/// How [`hold_private_dir`] treats a directory that others may enter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WiderMode {
    /// Narrow it to 0700: the directory is murmur's own (`~/.murmur`, `~/.murmur/running`).
    Narrow,
    /// Refuse it: the directory was named by an operator and may be shared with other uses.
    Refuse,
}

/// Why [`hold_private_dir`] would not use a directory.
#[derive(Debug, thiserror::Error)]
pub enum PrivateDirError {
    /// The directory is unsafe to use; nothing was changed in it.
    #[error("refusing {path}: {problem}")]
    Insecure {
        /// The directory.
        path: std::path::PathBuf,
        /// What is wrong with it, and what to do.
        problem: String,
    },
    /// Creating, opening or fixing it failed.
    #[error("{path}: {cause}")]
    Io {
        /// The directory.
        path: std::path::PathBuf,
        /// The error.
        cause: std::io::Error,
    },
}

/// Create `path` at 0700 if missing; refuse it unless it is a real directory we own; then hold
/// it at 0700 as `wider` says.
pub fn hold_private_dir(path: &Path, wider: WiderMode) -> Result<(), PrivateDirError> {
    let refuse = |problem: String| PrivateDirError::Insecure {
        path: path.to_path_buf(),
        problem,
    };
    let io_err = |cause: std::io::Error| PrivateDirError::Io {
        path: path.to_path_buf(),
        cause,
    };
    match rustix::fs::mkdir(path, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(io_err(e.into())),
    }
    let fd = match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        // With O_DIRECTORY the kernel answers ENOTDIR for a symlink too (ELOOP on some
        // kernels); lstat tells the two refusals apart for the message.
        Err(Errno::LOOP | Errno::NOTDIR) => {
            let is_link = rustix::fs::lstat(path)
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink);
            return Err(refuse(if is_link {
                "it is a symlink; murmur's directories must be real".into()
            } else {
                "it is not a directory".into()
            }));
        }
        Err(e) => return Err(io_err(e.into())),
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| io_err(e.into()))?;
    let me = rustix::process::geteuid().as_raw();
    if stat.st_uid != me {
        return Err(refuse(format!(
            "it is owned by uid {}, not by this user (uid {me})",
            stat.st_uid
        )));
    }
    let mode = stat.st_mode & 0o7777;
    if mode != 0o700 {
        match wider {
            WiderMode::Narrow => {
                rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700))
                    .map_err(|e| io_err(e.into()))?;
            }
            WiderMode::Refuse if mode & 0o077 != 0 => {
                return Err(refuse(format!(
                    "its mode {mode:04o} lets group or others in; a running directory is \
                     private (chmod 700 it if it really is one)"
                )));
            }
            WiderMode::Refuse => {}
        }
    }
    Ok(())
}
