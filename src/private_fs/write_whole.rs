//! Writing a file whole: staged under a hidden, random, exclusive name beside it (mode 0600
//! whatever the umask), fsynced, then renamed or linked into place and the directory fsynced.
//! Readers see the old file or the new one, never a part; a failure leaves no staged file.

use std::io::Write;
use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, Mode, OFlags};

use super::file_identity::FileIdentity;

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

/// 16 random hex digits, to make a hidden name unique.
pub(super) fn random_hex() -> std::io::Result<String> {
    let mut random = [0u8; 8];
    fill_random(&mut random)?;
    Ok(format!("{:016x}", u64::from_le_bytes(random)))
}

/// A hidden name beside `name`, unique to this call: `.<name>.<pid>.<random>.<purpose>`.
fn hidden_sibling(name: &str, purpose: &str) -> std::io::Result<String> {
    Ok(format!(
        ".{name}.{}.{}.{purpose}",
        std::process::id(),
        random_hex()?
    ))
}

/// Stage `bytes` in a hidden file beside `name`: exclusive, mode 0600 whatever the umask,
/// fsynced. Answers the staged name and the file's identity (which survives a rename).
fn stage(dir_fd: &OwnedFd, name: &str, bytes: &[u8]) -> std::io::Result<(String, FileIdentity)> {
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
        Ok(FileIdentity::of(&rustix::fs::fstat(&file)?))
    })();
    match written {
        Ok(identity) => Ok((staged, identity)),
        Err(error) => {
            // Best effort: the staged file is ours and useless now; the error that matters is
            // the one that stopped the write.
            let _ = rustix::fs::unlinkat(dir_fd, staged.as_str(), AtFlags::empty());
            Err(error)
        }
    }
}

/// Make a finished change durable. Failing here is reported, not returned: the change itself
/// has happened, and callers must not act as if it had not.
fn sync_dir(dir_fd: &OwnedFd) {
    if let Err(error) = rustix::fs::fsync(dir_fd) {
        tracing::warn!(error = %std::io::Error::from(error), "could not fsync a directory");
    }
}

/// Put `bytes` at `dir_fd`/`name` in one step, mode 0600; answers the new file's identity.
///
/// Readers see the old file or the new one, never a part. A failure leaves no staged file,
/// and an `Err` means the old file is still in place.
pub(crate) fn write_atomically(
    dir_fd: &OwnedFd,
    name: &str,
    bytes: &[u8],
) -> std::io::Result<FileIdentity> {
    let (staged, identity) = stage(dir_fd, name, bytes)?;
    if let Err(error) = rustix::fs::renameat(dir_fd, staged.as_str(), dir_fd, name) {
        let _ = rustix::fs::unlinkat(dir_fd, staged.as_str(), AtFlags::empty());
        return Err(error.into());
    }
    sync_dir(dir_fd);
    Ok(identity)
}

/// Create `dir_fd`/`name` holding `bytes`, mode 0600, only if nothing has that name yet.
///
/// The file appears whole or not at all (staged, then hard-linked into place, which fails with
/// `AlreadyExists` atomically on every filesystem).
pub(crate) fn create_atomically(dir_fd: &OwnedFd, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let (staged, _) = stage(dir_fd, name, bytes)?;
    let linked = rustix::fs::linkat(dir_fd, staged.as_str(), dir_fd, name, AtFlags::empty());
    let _ = rustix::fs::unlinkat(dir_fd, staged.as_str(), AtFlags::empty());
    linked?;
    sync_dir(dir_fd);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_siblings_are_hidden_unique_and_name_their_file_and_owner() {
        let staged = hidden_sibling("ses_1.json", "tmp").unwrap();
        let prefix = format!(".ses_1.json.{}.", std::process::id());
        assert!(
            staged.starts_with(&prefix) && staged.ends_with(".tmp"),
            "{staged}"
        );
        assert_ne!(staged, hidden_sibling("ses_1.json", "tmp").unwrap());
    }
}
