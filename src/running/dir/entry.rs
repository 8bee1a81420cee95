//! Reading one entry of the running directory: judged by `lstat` (a regular file of ours),
//! opened without following a link or blocking, read within the cap, parsed, and named by the
//! identity of the very file read (a writer's rename mid-read is read again).

use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::directory::open_running_dir;
use super::unreadable::{EntryError, MAX_RECORD_BYTES, Unreadable, UnreadableEntry, entry_errno};
use crate::private_fs::FileIdentity;
use crate::running::RunningError;
use crate::running::record::{
    CONTROL_SUFFIX, Origin, OriginSlot, RunningRecord, is_valid_session_id,
};

/// Read the record of `session_id` from `dir`, if there is a file for it.
///
/// `Ok(None)` when no `<session_id>.json` exists; `Err` with the reason when the entry exists
/// but is not a valid record. An invalid session id is reported as absent: no file can have it.
pub fn read_record(dir: &Path, session_id: &str) -> Result<Option<RunningRecord>, RunningError> {
    if !is_valid_session_id(session_id) {
        return Ok(None);
    }
    let dir_fd = open_running_dir(dir)?;
    let file_name = RunningRecord::file_name_for(session_id);
    match read_entry(&dir_fd, dir, &file_name, session_id) {
        Ok(record) => Ok(Some(record)),
        Err(EntryError::Vanished) => Ok(None),
        Err(EntryError::Unreadable(why)) => {
            Err(RunningError::Unreadable(UnreadableEntry { file_name, why }))
        }
    }
}

/// Check, open and parse one entry without following links, blocking, opening anything but a
/// regular file of ours, or reading past the cap. `stem` is the session id the name promises.
///
/// A writer may rename a new version onto the name between the check and the open; the read
/// is then taken again, since the new version is whole.
pub(super) fn read_entry(
    dir_fd: &OwnedFd,
    dir: &Path,
    file_name: &str,
    stem: &str,
) -> Result<RunningRecord, EntryError> {
    let me = rustix::process::geteuid().as_raw();
    read_entry_retried(dir_fd, dir, file_name, stem, me).map(|(record, _)| record)
}

/// [`read_entry_seen`] again while a new version replaced the entry mid-read (it is whole).
pub(super) fn read_entry_retried(
    dir_fd: &OwnedFd,
    dir: &Path,
    file_name: &str,
    stem: &str,
    me: u32,
) -> Result<(RunningRecord, SeenFile), EntryError> {
    const ATTEMPTS: usize = 8;
    let mut attempt = 1;
    loop {
        match read_entry_seen(dir_fd, dir, file_name, stem, me) {
            Err(EntryError::Unreadable(Unreadable::Replaced)) if attempt < ATTEMPTS => attempt += 1,
            read => return read,
        }
    }
}

/// `lstat` the entry and refuse anything but a regular file of `me` (our effective uid).
/// Opening a device or FIFO can have effects, so this comes before any open.
pub(super) fn judge_entry(
    dir_fd: &OwnedFd,
    file_name: &str,
    me: u32,
) -> Result<rustix::fs::Stat, EntryError> {
    let before =
        rustix::fs::statat(dir_fd, file_name, AtFlags::SYMLINK_NOFOLLOW).map_err(entry_errno)?;
    match FileType::from_raw_mode(before.st_mode) {
        FileType::RegularFile => {}
        FileType::Directory => return Err(Unreadable::Directory.into()),
        FileType::Symlink => return Err(Unreadable::Symlink.into()),
        _ => return Err(Unreadable::NotRegularFile.into()),
    }
    if before.st_uid != me {
        return Err(Unreadable::ForeignOwner(before.st_uid).into());
    }
    Ok(before)
}

/// One attempt at reading the entry; also answers the identity of the file that was read.
fn read_entry_seen(
    dir_fd: &OwnedFd,
    dir: &Path,
    file_name: &str,
    stem: &str,
    me: u32,
) -> Result<(RunningRecord, SeenFile), EntryError> {
    let io = |e: Errno| Unreadable::Io(std::io::Error::from(e).to_string());
    let before = judge_entry(dir_fd, file_name, me)?;
    let fd = rustix::fs::openat(
        dir_fd,
        file_name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        Errno::LOOP => Unreadable::Symlink.into(),
        Errno::NXIO => Unreadable::NotRegularFile.into(),
        e => entry_errno(e),
    })?;
    let stat = rustix::fs::fstat(&fd).map_err(io)?;
    if FileIdentity::of(&stat) != FileIdentity::of(&before) {
        return Err(Unreadable::Replaced.into());
    }
    // Judged on the open file before a byte is read; the capped read below still holds if
    // the file grows meanwhile.
    if u64::try_from(stat.st_size).unwrap_or(u64::MAX) > MAX_RECORD_BYTES {
        return Err(Unreadable::TooLarge.into());
    }
    // Sized to the file as it is now, never to the cap: most records are a few KiB.
    let size = usize::try_from(stat.st_size).unwrap_or_default();
    let mut bytes = Vec::with_capacity(size.saturating_add(1));
    std::fs::File::from(fd)
        .take(MAX_RECORD_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Unreadable::Io(e.to_string()))?;
    if bytes.len() as u64 > MAX_RECORD_BYTES {
        return Err(Unreadable::TooLarge.into());
    }
    let mut record = RunningRecord::parse(&bytes)
        .map_err(|e| Unreadable::Malformed(describe_parse_error(&e)))?;
    if record.session_id != stem {
        return Err(Unreadable::NameMismatch(record.session_id).into());
    }
    record.origin = OriginSlot(Some(Origin {
        dir: dir.to_path_buf(),
        file_name: file_name.to_owned(),
        identity: FileIdentity::of(&stat),
        control: control_identity(dir_fd, stem),
    }));
    Ok((record, SeenFile::of(&stat)))
}

/// The identity of `<stem>.control` as it is now; `None` when there is none, it is a
/// directory (never removed), or another user's (whose file it is, ownership cannot tell).
fn control_identity(dir_fd: &OwnedFd, stem: &str) -> Option<FileIdentity> {
    let stat = rustix::fs::statat(
        dir_fd,
        format!("{stem}{CONTROL_SUFFIX}").as_str(),
        AtFlags::SYMLINK_NOFOLLOW,
    )
    .ok()?;
    let ours = stat.st_uid == rustix::process::geteuid().as_raw();
    (ours && FileType::from_raw_mode(stat.st_mode) != FileType::Directory)
        .then(|| FileIdentity::of(&stat))
}

/// What is wrong with a record's bytes, in words that never quote them: serde's own message
/// can repeat a value, and a value may be a secret.
fn describe_parse_error(error: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let place = format!("line {}, column {}", error.line(), error.column());
    match error.classify() {
        Category::Eof => format!("the JSON ends early ({place})"),
        Category::Syntax => format!("it is not valid JSON ({place})"),
        Category::Io => "it could not be read".to_owned(),
        Category::Data => {
            let message = error.to_string();
            // `missing field `pid`` names a key, never a value.
            match message.split(" at line ").next() {
                Some(missing) if missing.starts_with("missing field `") => missing.to_owned(),
                _ => format!("a field has the wrong type or value ({place})"),
            }
        }
    }
}

/// Whether the file `record` was read from is still the entry under its name: the same device,
/// inode and modification time. Only then does a check of its process speak for the session
/// when the file cannot be read again; a file replaced since may name another process.
///
/// `false` for a record not read from disk, or when the entry cannot be looked at. Blocking
/// (an `lstat` in the directory); call it off async workers.
pub fn still_the_file_read(record: &RunningRecord) -> bool {
    let Some(origin) = &record.origin.0 else {
        return false;
    };
    let Ok(dir_fd) = open_running_dir(&origin.dir) else {
        return false;
    };
    FileIdentity::at(&dir_fd, &origin.file_name).is_ok_and(|now| now == origin.identity)
}

/// Everything `lstat` says that changes when a file is replaced or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SeenFile {
    dev: u64,
    ino: u64,
    size: i64,
    mode: u32,
    uid: u32,
    mtime: (i64, u64),
    ctime: (i64, u64),
}

impl SeenFile {
    pub(super) fn of(stat: &rustix::fs::Stat) -> Self {
        Self {
            dev: stat.st_dev,
            ino: stat.st_ino,
            size: stat.st_size,
            mode: stat.st_mode,
            uid: stat.st_uid,
            mtime: (stat.st_mtime, stat.st_mtime_nsec),
            ctime: (stat.st_ctime, stat.st_ctime_nsec),
        }
    }

    /// Whether both timestamps are over a second old, so any later write must stamp a later
    /// second, at nanosecond or one-second resolution alike. Trusts that the filesystem stamps
    /// with this machine's clock (a network filesystem need not; see the README).
    pub(super) fn is_settled(&self) -> bool {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        self.ctime.0.max(self.mtime.0) < now.saturating_sub(1)
    }
}
