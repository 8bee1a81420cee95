//! Where the running directory is, held private at setup, and opened for one pass only while it
//! is still ours and closed to group and others.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::io::Errno;

use super::super::RunningError;
use crate::private_fs::{WiderMode, hold_private_dir, open_dir};

pub(super) fn io_at(path: &Path) -> impl Fn(std::io::Error) -> RunningError + '_ {
    move |cause| RunningError::Io {
        path: path.to_path_buf(),
        cause,
    }
}

/// Open the running directory for one pass, without following a link.
///
/// A directory that is missing, not a directory, a link, another user's, open to group or
/// others, or closed to us (`EACCES`, `EPERM`) is [`RunningError::DirUnavailable`]: nothing is
/// judged or removed until it is back. Each pass opens it anew.
pub(super) fn open_running_dir(dir: &Path) -> Result<OwnedFd, RunningError> {
    let unavailable = |why: String| RunningError::DirUnavailable {
        path: dir.to_path_buf(),
        why,
    };
    let fd = match open_dir(dir) {
        Ok(fd) => fd,
        Err(cause) => {
            return Err(match cause.raw_os_error().map(Errno::from_raw_os_error) {
                Some(Errno::NOENT) => unavailable("it does not exist".to_owned()),
                Some(Errno::NOTDIR) => unavailable("it is not a directory".to_owned()),
                Some(Errno::LOOP) => unavailable("it is a symlink".to_owned()),
                // Our own directory that we may not open (its owner's read bit taken away, a
                // security module's refusal): as unusable as a missing one, and as temporary.
                Some(Errno::ACCESS | Errno::PERM) => {
                    unavailable(format!("it cannot be opened ({cause})"))
                }
                _ => RunningError::Io {
                    path: dir.to_path_buf(),
                    cause,
                },
            });
        }
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| RunningError::Io {
        path: dir.to_path_buf(),
        cause: e.into(),
    })?;
    if stat.st_uid != rustix::process::geteuid().as_raw() {
        return Err(unavailable(format!("it is owned by uid {}", stat.st_uid)));
    }
    // Held at 0700 when the registry started; a directory made wider since (recreated under
    // another umask, or chmodded) is a change nobody here asked for. Reading is no time to
    // repair it, so it is refused until someone does, with the fix in the message.
    let mode = stat.st_mode & 0o7777;
    if mode & 0o077 != 0 {
        return Err(unavailable(format!(
            "its mode {mode:04o} lets group or others in (chmod 700 it)"
        )));
    }
    Ok(fd)
}

/// `~/.murmur/running`, created if missing and held at 0700, inside a `~/.murmur` held at 0700.
///
/// Reads `HOME`, as murmur does. Everything below takes the directory as a parameter; use
/// [`running_dir_in`] to resolve it under another home.
pub fn running_dir() -> Result<PathBuf, RunningError> {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .ok_or(RunningError::NoHome)?;
    running_dir_in(Path::new(&home))
}

/// `<home>/.murmur/running`, created and held exactly as [`running_dir`] says.
pub fn running_dir_in(home: &Path) -> Result<PathBuf, RunningError> {
    let murmur = home.join(".murmur");
    hold_private_dir(&murmur, WiderMode::Narrow)?;
    let running = murmur.join("running");
    hold_private_dir(&running, WiderMode::Narrow)?;
    Ok(running)
}
