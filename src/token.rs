//! The registry's bearer token: a private file, created once, checked on every request.
//!
//! Invariants kept here:
//! - The file is created whole and only if absent (staged, then hard-linked into place), mode
//!   0600, holding 256 bits from the OS as hex, in a directory only we (or root) can write.
//! - A file that is a symlink, not a regular file, not ours, readable or writable by group or
//!   others, or empty is refused with its path and the fix; it is never repaired silently,
//!   since a token others could read is already spent.
//! - Only a SHA-256 digest of the token is kept in memory, and presented tokens are compared by
//!   digest in constant time, so neither the token's bytes nor its length leak through timing.
//! - Rotation replaces the file atomically (staged, fsynced, renamed); a running server notices
//!   the new file on its next request and from then on accepts only the new token.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::private_fs::{
    FileIdentity, PrivateDirError, PrivateFileProblem, WiderMode, create_atomically, fill_random,
    hold_private_dir, open_dir, read_private_file, write_atomically,
};

/// How many random bytes a token holds (256 bits).
const TOKEN_BYTES: usize = 32;
/// Token files larger than this are not token files.
const MAX_TOKEN_FILE_BYTES: u64 = 4096;

/// What is wrong with a token file.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file exists but must not be trusted.
    #[error("refusing token file {path}: {problem}; {fix}")]
    Insecure {
        /// The token file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
        /// What to do about it.
        fix: String,
    },
    /// Reading, creating or replacing it failed.
    #[error("token file {path}: {cause}")]
    Io {
        /// The token file.
        path: PathBuf,
        /// The error.
        cause: std::io::Error,
    },
    /// Its directory could not be made private.
    #[error(transparent)]
    Dir(#[from] PrivateDirError),
}

/// A token's digest: what the server keeps instead of the token.
#[derive(Clone, PartialEq, Eq)]
struct TokenDigest([u8; 32]);

impl TokenDigest {
    fn of(token: &[u8]) -> Self {
        Self(Sha256::digest(token).into())
    }

    fn matches(&self, presented: &[u8]) -> bool {
        bool::from(Self::of(presented).0.ct_eq(&self.0))
    }
}

/// The default token file under a home directory: `<home>/.murmur/registry/token`.
pub fn default_token_path(home: &Path) -> PathBuf {
    home.join(".murmur").join("registry").join("token")
}

/// Read the token file at `path`, creating it (and a private parent) if it does not exist.
///
/// Returns the token text. Refuses an insecure or empty file.
pub fn load_or_create(path: &Path) -> Result<String, TokenError> {
    load_or_create_stamped(path).map(|(token, _)| token)
}

/// [`load_or_create`], also answering the stamp of the file the token was read from.
fn load_or_create_stamped(path: &Path) -> Result<(String, Stamp), TokenError> {
    match read_checked(path) {
        Ok(loaded) => Ok(loaded),
        Err(TokenError::Io { cause, .. }) if cause.kind() == std::io::ErrorKind::NotFound => {
            ensure_parent(path)?;
            // Judge the directory before a token exists in it, not after.
            check_parent(path)?;
            let (dir_fd, file_name) = open_parent(path)?;
            let token = new_token(path)?;
            match create_atomically(&dir_fd, file_name, format!("{token}\n").as_bytes()) {
                // Created; or someone created it first, and theirs stands if it passes the
                // checks. Either way the token and its stamp come from the file there now.
                Ok(()) => read_checked(path),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_checked(path),
                Err(e) => Err(io_error(path, e)),
            }
        }
        Err(e) => Err(e),
    }
}

/// Read the token file at `path`, which must exist (nothing is created), refused as at start.
pub fn read_existing(path: &Path) -> Result<String, TokenError> {
    read_checked(path).map(|(token, _)| token)
}

/// Replace the token at `path` with a fresh one, atomically; returns the new token.
///
/// The old file must pass the same checks as at start (a file someone else planted is not
/// replaced). A server reading this file accepts the new token from its next request on.
pub fn rotate(path: &Path) -> Result<String, TokenError> {
    read_checked(path)?;
    let token = new_token(path)?;
    let (dir_fd, file_name) = open_parent(path)?;
    write_atomically(&dir_fd, file_name, format!("{token}\n").as_bytes())
        .map_err(|e| io_error(path, e))?;
    Ok(token)
}

/// The token file as a running server sees it: re-read whenever the file changes.
///
/// Keeps the digest of the current token and the stamp of the file it came from (identity plus
/// change time, so a `chmod` or `chown` counts as a change); each check costs one `lstat`.
#[derive(Debug)]
pub struct TokenStore {
    path: PathBuf,
    current: Mutex<Loaded>,
}

struct Loaded {
    stamp: Stamp,
    digest: TokenDigest,
}

/// What tells a token file from its earlier self: which file it is, and when its inode last
/// changed (content, mode or owner).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    identity: FileIdentity,
    ctime: (i64, u64),
}

impl Stamp {
    fn of(stat: &rustix::fs::Stat) -> Self {
        Self {
            identity: FileIdentity::of(stat),
            ctime: (stat.st_ctime, stat.st_ctime_nsec),
        }
    }
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Loaded([redacted])")
    }
}

impl TokenStore {
    /// Load (or create) the token file at `path` and watch it for rotation.
    pub fn open(path: &Path) -> Result<Self, TokenError> {
        let (token, stamp) = load_or_create_stamped(path)?;
        Ok(Self {
            path: path.to_path_buf(),
            current: Mutex::new(Loaded {
                stamp,
                digest: TokenDigest::of(token.as_bytes()),
            }),
        })
    }

    /// The token file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// [`TokenStore::check`]'s answer when the file is unchanged since the last check: one
    /// `lstat` and no read, cheap enough to run on an async worker.
    ///
    /// `None` when the file changed or could not be examined: then [`TokenStore::check`] (off
    /// the async workers) must decide, re-reading the file or failing closed.
    pub fn check_unchanged(&self, presented: &str) -> Option<bool> {
        let stat = rustix::fs::lstat(&self.path).ok()?;
        let current = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (Stamp::of(&stat) == current.stamp).then(|| current.digest.matches(presented.as_bytes()))
    }

    /// Whether `presented` is the current token, compared in constant time.
    ///
    /// Re-reads the file first if it changed since the last check (a new inode after a
    /// rotation, a new modification time after an edit in place, a new change time after a
    /// `chmod` or `chown`). Fails, and so rejects
    /// every token, while the file is missing or insecure: the server fails closed.
    ///
    /// Blocking (an `lstat`, and a read after a change); call it off async workers.
    pub fn check(&self, presented: &str) -> Result<bool, TokenError> {
        let stat = rustix::fs::lstat(&self.path).map_err(|e| io_error(&self.path, e.into()))?;
        let mut current = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if Stamp::of(&stat) != current.stamp {
            let (token, stamp) = read_checked(&self.path)?;
            *current = Loaded {
                stamp,
                digest: TokenDigest::of(token.as_bytes()),
            };
        }
        Ok(current.digest.matches(presented.as_bytes()))
    }
}

fn io_error(path: &Path, cause: std::io::Error) -> TokenError {
    TokenError::Io {
        path: path.to_path_buf(),
        cause,
    }
}

fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Create the token's directory at 0700 when it is missing (and its parent, when that is
/// missing too); an existing one is left as it is, and [`read_checked`] judges it.
fn ensure_parent(path: &Path) -> Result<(), TokenError> {
    let parent = parent_of(path);
    if rustix::fs::lstat(&parent).is_err() {
        if let Some(grandparent) = parent.parent().filter(|g| !g.as_os_str().is_empty())
            && rustix::fs::lstat(grandparent).is_err()
        {
            hold_private_dir(grandparent, WiderMode::Narrow)?;
        }
        hold_private_dir(&parent, WiderMode::Narrow)?;
    }
    Ok(())
}

fn new_token(path: &Path) -> Result<String, TokenError> {
    let mut bytes = [0u8; TOKEN_BYTES];
    fill_random(&mut bytes).map_err(|e| io_error(path, e))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The token file's directory, opened without following a link, and the file's name in it.
fn open_parent(path: &Path) -> Result<(std::os::fd::OwnedFd, &str), TokenError> {
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| io_error(path, std::io::Error::other("the path has no file name")))?;
    let dir_fd = open_dir(&parent_of(path)).map_err(|e| io_error(path, e))?;
    Ok((dir_fd, file_name))
}

/// Refuse a token file whose directory others may write: they could swap the file.
fn check_parent(path: &Path) -> Result<(), TokenError> {
    let parent = parent_of(path);
    let stat = rustix::fs::stat(&parent).map_err(|e| io_error(path, e.into()))?;
    let me = rustix::process::geteuid().as_raw();
    if (stat.st_uid != me && stat.st_uid != 0) || stat.st_mode & 0o022 != 0 {
        return Err(TokenError::Insecure {
            path: path.to_path_buf(),
            problem: format!(
                "its directory {} can be written by others, who could replace the token",
                parent.display()
            ),
            fix: format!(
                "make it private (chmod go-w {}) or point --token-file elsewhere",
                parent.display()
            ),
        });
    }
    Ok(())
}

/// Open without following links, check it is a private regular file of ours in a directory
/// only we (or root) can write, and read the token.
fn read_checked(path: &Path) -> Result<(String, Stamp), TokenError> {
    let insecure = |problem: &str, fix: &str| TokenError::Insecure {
        path: path.to_path_buf(),
        problem: problem.to_owned(),
        fix: fix.to_owned(),
    };
    let remove_it = format!(
        "remove it (rm {}) so a fresh one is created, or point --token-file elsewhere",
        path.display()
    );
    let (bytes, stat) = read_private_file(path, MAX_TOKEN_FILE_BYTES).map_err(|problem| {
        let problem = match problem {
            PrivateFileProblem::Io(e) => return io_error(path, e),
            PrivateFileProblem::Symlink => "it is a symlink".to_owned(),
            PrivateFileProblem::NotRegular => "it is not a regular file".to_owned(),
            PrivateFileProblem::ForeignOwner { owner, me } => {
                format!("it is owned by uid {owner}, not by this user (uid {me})")
            }
            PrivateFileProblem::OpenToOthers { mode } => {
                format!("its mode {mode:04o} lets group or others at it, so the token may be known")
            }
            PrivateFileProblem::TooLarge => "it is too large to be a token file".to_owned(),
        };
        insecure(&problem, &remove_it)
    })?;
    let token = String::from_utf8(bytes)
        .map_err(|_| insecure("it is not text", &remove_it))?
        .trim()
        .to_owned();
    if token.is_empty() {
        return Err(insecure("it is empty", &remove_it));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(insecure(
            "it holds characters that cannot travel in an Authorization header",
            &remove_it,
        ));
    }
    check_parent(path)?;
    Ok((token, Stamp::of(&stat)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_running_store_fails_closed_when_the_file_turns_insecure() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        let store = TokenStore::open(&path).unwrap();
        let token = std::fs::read_to_string(&path).unwrap().trim().to_owned();
        assert!(store.check(&token).unwrap());
        assert!(!store.check("not-the-token").unwrap());
        // A chmod changes no content and no mtime; it must still be noticed.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            store.check(&token),
            Err(TokenError::Insecure { .. })
        ));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(store.check(&token).unwrap());
    }

    #[test]
    fn rotation_is_seen_on_the_next_check() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        let store = TokenStore::open(&path).unwrap();
        let old = std::fs::read_to_string(&path).unwrap().trim().to_owned();
        let new = rotate(&path).unwrap();
        assert_ne!(old, new);
        assert!(store.check(&new).unwrap());
        assert!(!store.check(&old).unwrap());
    }
}
