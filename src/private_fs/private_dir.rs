//! Holding a directory private: created at 0700 if missing, refused unless it is a real
//! directory of ours, then narrowed to 0700 or refused when wider, as the caller says. Checked
//! and fixed through one `O_NOFOLLOW` descriptor, so what is checked is what is fixed.

use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;

/// Open a directory for `*at` calls, refusing to follow a symlink at its last component.
pub(crate) fn open_dir(path: &Path) -> std::io::Result<OwnedFd> {
    Ok(open_dir_errno(path)?)
}

fn open_dir_errno(path: &Path) -> rustix::io::Result<OwnedFd> {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
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
    let fd = match open_dir_errno(path) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operator_named_directory_is_refused_only_when_group_or_others_may_enter() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let set_mode = |mode: u32| {
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).unwrap()
        };
        let mode = || std::fs::metadata(dir.path()).unwrap().permissions().mode() & 0o7777;
        for private in [0o700, 0o1700, 0o500] {
            set_mode(private);
            hold_private_dir(dir.path(), WiderMode::Refuse).unwrap();
            assert_eq!(mode(), private, "a private mode is left as it is");
        }
        for open in [0o750, 0o701, 0o1777] {
            set_mode(open);
            let refused = hold_private_dir(dir.path(), WiderMode::Refuse).unwrap_err();
            assert!(
                matches!(refused, PrivateDirError::Insecure { .. }),
                "{refused:?}"
            );
            assert_eq!(mode(), open, "a refused directory is left as it is");
        }
        hold_private_dir(dir.path(), WiderMode::Narrow).unwrap();
        assert_eq!(mode(), 0o700);
    }
}
