//! What can go wrong in a registry operation, and the copies of an error that a shared pass
//! hands to each of its waiters.

use crate::private_fs::PrivateDirError;
use crate::running::RunningError;

/// What can go wrong in a registry operation.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// No record file exists for the session.
    #[error("no record for session {0}")]
    NotFound(String),
    /// The id cannot name a record file.
    #[error("invalid session id: expected 1 to 128 of A-Z a-z 0-9 _ -")]
    InvalidSessionId,
    /// The running module failed (the directory is unreadable, a file is not a record, …).
    #[error(transparent)]
    Running(#[from] RunningError),
    /// A blocking task panicked or was cancelled.
    #[error("an internal task failed: {0}")]
    Task(String),
}

/// A caller's own copy of an error a shared pass met, so each caller can own (and convert)
/// the error it is answered with. Every variant is copied as itself (an `io::Error` keeps its
/// errno, or its kind and message), so a copy maps to the same answer as the original.
pub(crate) fn copy_error(error: &RegistryError) -> RegistryError {
    let io = |cause: &std::io::Error| {
        cause.raw_os_error().map_or_else(
            || std::io::Error::new(cause.kind(), cause.to_string()),
            std::io::Error::from_raw_os_error,
        )
    };
    match error {
        RegistryError::NotFound(id) => RegistryError::NotFound(id.clone()),
        RegistryError::InvalidSessionId => RegistryError::InvalidSessionId,
        RegistryError::Task(what) => RegistryError::Task(what.clone()),
        RegistryError::Running(running) => RegistryError::Running(match running {
            RunningError::NoHome => RunningError::NoHome,
            RunningError::Dir(PrivateDirError::Insecure { path, problem }) => {
                RunningError::Dir(PrivateDirError::Insecure {
                    path: path.clone(),
                    problem: problem.clone(),
                })
            }
            RunningError::Dir(PrivateDirError::Io { path, cause }) => {
                RunningError::Dir(PrivateDirError::Io {
                    path: path.clone(),
                    cause: io(cause),
                })
            }
            RunningError::Io { path, cause } => RunningError::Io {
                path: path.clone(),
                cause: io(cause),
            },
            RunningError::DirUnavailable { path, why } => RunningError::DirUnavailable {
                path: path.clone(),
                why: why.clone(),
            },
            RunningError::InvalidSessionId(id) => RunningError::InvalidSessionId(id.clone()),
            RunningError::Unreadable(entry) => RunningError::Unreadable(entry.clone()),
            RunningError::NotGone(id) => RunningError::NotGone(id.clone()),
            RunningError::NotFromDisk(id) => RunningError::NotFromDisk(id.clone()),
        }),
    }
}
