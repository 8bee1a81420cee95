//! The running directory: finding it, holding it private, reading records out of it, and
//! removing them.
//!
//! Invariants kept here:
//! - `~/.murmur` and `~/.murmur/running` are directories owned by the effective user, mode 0700.
//!   A wider mode is narrowed; a symlink, a non-directory or a foreign owner is refused with the
//!   path in the error. Checks and fixes go through one file descriptor opened with
//!   `O_NOFOLLOW`, so what is checked is what is fixed.
//! - Only `*.json` entries are records. A record is read through `O_NOFOLLOW | O_NONBLOCK`, only
//!   when it is a regular file we own, and never past [`MAX_RECORD_BYTES`]: a symlink, a FIFO or
//!   an endless file cannot redirect, block or exhaust the reader.
//! - [`scan`] changes nothing. [`list`] removes what can never become a record (not
//!   directories). [`prune`] removes a record only for a `Gone` reading, and only the very file
//!   the record was read from.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use super::record::{
    CONTROL_SUFFIX, Origin, OriginSlot, RECORD_SUFFIX, RunningRecord, is_valid_session_id,
};
use super::{Liveness, RunningError};

/// Records larger than this are not records: murmur's are well under 4 KiB.
pub const MAX_RECORD_BYTES: u64 = 64 * 1024;

/// Which file a directory entry is, to tell it from one that replaced it under its name.
///
/// Device and inode alone are not enough: a filesystem may hand a freed inode number straight
/// to the next new file. The change time (to the nanosecond) tells those apart; it also changes
/// on a chmod or rename, which then counts as "replaced", the safe side for a prune.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileIdentity {
    dev: u64,
    ino: u64,
    ctime: (i64, u64),
}

impl FileIdentity {
    pub(crate) fn of(stat: &Stat) -> Self {
        Self {
            dev: stat.st_dev,
            ino: stat.st_ino,
            ctime: (stat.st_ctime, stat.st_ctime_nsec),
        }
    }
}

/// Open a directory for `*at` calls, refusing to follow a symlink at its last component.
pub(crate) fn open_dir(path: &Path) -> std::io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
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
    hold_private_dir(&murmur)?;
    let running = murmur.join("running");
    hold_private_dir(&running)?;
    Ok(running)
}

/// Create `path` at 0700 if missing; refuse it unless it is a directory we own; narrow it to 0700.
///
/// Also used for the registry's own directory beside the records.
pub fn hold_private_dir(path: &Path) -> Result<(), RunningError> {
    let refuse = |problem: String| RunningError::InsecureDir {
        path: path.to_path_buf(),
        problem,
    };
    let io_err = |source: std::io::Error| RunningError::Io {
        path: path.to_path_buf(),
        source,
    };
    match rustix::fs::mkdir(path, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(io_err(e.into())),
    }
    let fd = match open_dir(path) {
        Ok(fd) => fd,
        // With O_DIRECTORY the kernel answers ENOTDIR for a symlink too (ELOOP on some
        // kernels); lstat tells the two refusals apart for the message.
        Err(e)
            if e.raw_os_error() == Some(Errno::LOOP.raw_os_error())
                || e.raw_os_error() == Some(Errno::NOTDIR.raw_os_error()) =>
        {
            let is_link = rustix::fs::lstat(path)
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink);
            return Err(refuse(if is_link {
                "it is a symlink; murmur's directories must be real".into()
            } else {
                "it is not a directory".into()
            }));
        }
        Err(e) => return Err(io_err(e)),
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| io_err(e.into()))?;
    let me = rustix::process::geteuid().as_raw();
    if stat.st_uid != me {
        return Err(refuse(format!(
            "it is owned by uid {}, not by this user (uid {me})",
            stat.st_uid
        )));
    }
    if stat.st_mode & 0o7777 != 0o700 {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700)).map_err(|e| io_err(e.into()))?;
    }
    Ok(())
}

/// Why a `*.json` entry is not a valid record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreadable {
    /// A symlink: never followed.
    Symlink,
    /// A directory: reported, never removed.
    Directory,
    /// A FIFO, socket or device.
    NotRegularFile,
    /// Owned by another uid.
    ForeignOwner(u32),
    /// Larger than [`MAX_RECORD_BYTES`].
    TooLarge,
    /// Not a record of any generation.
    Malformed(String),
    /// Its `session_id` is not the one its file name says.
    NameMismatch(String),
    /// Opening or reading it failed.
    Io(String),
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Symlink => f.write_str("is a symlink"),
            Self::Directory => f.write_str("is a directory"),
            Self::NotRegularFile => f.write_str("is not a regular file"),
            Self::ForeignOwner(uid) => write!(f, "is owned by uid {uid}"),
            Self::TooLarge => write!(f, "is larger than {MAX_RECORD_BYTES} bytes"),
            Self::Malformed(why) => write!(f, "is not a record: {why}"),
            Self::NameMismatch(id) => write!(f, "names session {id:?}, not its file name"),
            Self::Io(why) => write!(f, "could not be read: {why}"),
        }
    }
}

/// A `*.json` entry of the running directory that is not a valid record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadableEntry {
    /// The entry's file name within the running directory.
    pub file_name: String,
    /// What is wrong with it.
    pub why: Unreadable,
}

impl UnreadableEntry {
    /// Whether removing this entry is safe and useful: everything but a directory, whose
    /// contents are not ours to judge. Removing a symlink removes the link, never its target.
    pub fn is_removable(&self) -> bool {
        self.why != Unreadable::Directory
    }
}

/// What one pass over the running directory found, without changing it.
#[derive(Debug, Default)]
pub struct Scan {
    /// Every valid record, newest session first.
    pub records: Vec<RunningRecord>,
    /// Every `*.json` entry that is not a valid record, by file name.
    pub unreadable: Vec<UnreadableEntry>,
}

/// Read every `*.json` entry of `dir`, changing nothing.
///
/// Records come back newest first (session ids are UUIDv7, so descending order is newest
/// first). Entries that are not valid records are reported in [`Scan::unreadable`].
pub fn scan(dir: &Path) -> Result<Scan, RunningError> {
    let io_err = |source: std::io::Error| RunningError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let dir_fd = open_dir(dir).map_err(io_err)?;
    let entries = rustix::fs::Dir::read_from(&dir_fd).map_err(|e| io_err(e.into()))?;
    let mut found = Scan::default();
    for entry in entries {
        let entry = entry.map_err(|e| io_err(e.into()))?;
        let Ok(file_name) = entry.file_name().to_str() else {
            continue;
        };
        let Some(stem) = file_name.strip_suffix(RECORD_SUFFIX) else {
            continue;
        };
        // Hidden names are a writer's staging files (and `.json` alone has no stem).
        if stem.is_empty() || file_name.starts_with('.') {
            continue;
        }
        match read_entry(&dir_fd, dir, file_name, stem) {
            Ok(record) => found.records.push(record),
            Err(why) => found.unreadable.push(UnreadableEntry {
                file_name: file_name.to_owned(),
                why,
            }),
        }
    }
    found
        .records
        .sort_by(|a, b| b.session_id.cmp(&a.session_id));
    found
        .unreadable
        .sort_by(|a, b| a.file_name.cmp(&b.file_name));
    Ok(found)
}

/// Every record that parses, most recent session first; removes entries that never will.
///
/// Like [`scan`], then unlinks each unreadable entry except directories (a symlink is removed
/// as a link, its target untouched). Removal is skipped for an entry that was replaced since it
/// was read. Use [`scan`] where nothing may change.
pub fn list(dir: &Path) -> Result<Vec<RunningRecord>, RunningError> {
    let found = scan(dir)?;
    remove_unreadable(dir, &found.unreadable)?;
    Ok(found.records)
}

/// Unlink the removable entries of `unreadable` from `dir`; answers how many went.
///
/// An entry that is already gone, or that has turned into a valid record since the scan, is
/// left alone and not counted.
pub fn remove_unreadable(
    dir: &Path,
    unreadable: &[UnreadableEntry],
) -> Result<usize, RunningError> {
    let io_err = |source: std::io::Error| RunningError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let dir_fd = open_dir(dir).map_err(io_err)?;
    let mut removed = 0;
    for entry in unreadable.iter().filter(|e| e.is_removable()) {
        let Some(stem) = entry.file_name.strip_suffix(RECORD_SUFFIX) else {
            continue;
        };
        // Re-read right before unlinking: a writer may have renamed a good record onto the name.
        if read_entry(&dir_fd, dir, &entry.file_name, stem).is_ok() {
            continue;
        }
        match rustix::fs::unlinkat(&dir_fd, entry.file_name.as_str(), AtFlags::empty()) {
            Ok(()) => removed += 1,
            Err(Errno::NOENT) => {}
            Err(e) => return Err(io_err(e.into())),
        }
    }
    Ok(removed)
}

/// Read the record of `session_id` from `dir`, if there is a file for it.
///
/// `Ok(None)` when no `<session_id>.json` exists; `Err` with the reason when the entry exists
/// but is not a valid record. An invalid session id is reported as absent: no file can have it.
pub fn read_record(dir: &Path, session_id: &str) -> Result<Option<RunningRecord>, RunningError> {
    if !is_valid_session_id(session_id) {
        return Ok(None);
    }
    let dir_fd = open_dir(dir).map_err(|source| RunningError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let file_name = RunningRecord::file_name_for(session_id);
    match read_entry(&dir_fd, dir, &file_name, session_id) {
        Ok(record) => Ok(Some(record)),
        Err(Unreadable::Io(_)) if !exists(&dir_fd, &file_name) => Ok(None),
        Err(why) => Err(RunningError::Unreadable(UnreadableEntry { file_name, why })),
    }
}

fn exists(dir_fd: &OwnedFd, file_name: &str) -> bool {
    rustix::fs::statat(dir_fd, file_name, AtFlags::SYMLINK_NOFOLLOW).is_ok()
}

/// Open, check and parse one entry without following links, blocking, or reading past the cap.
fn read_entry(
    dir_fd: &OwnedFd,
    dir: &Path,
    file_name: &str,
    stem: &str,
) -> Result<RunningRecord, Unreadable> {
    let fd = rustix::fs::openat(
        dir_fd,
        file_name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        Errno::LOOP => Unreadable::Symlink,
        Errno::NXIO => Unreadable::NotRegularFile, // a socket
        e => Unreadable::Io(std::io::Error::from(e).to_string()),
    })?;
    let stat =
        rustix::fs::fstat(&fd).map_err(|e| Unreadable::Io(std::io::Error::from(e).to_string()))?;
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => {}
        FileType::Directory => return Err(Unreadable::Directory),
        FileType::Symlink => return Err(Unreadable::Symlink),
        _ => return Err(Unreadable::NotRegularFile),
    }
    let me = rustix::process::geteuid().as_raw();
    if stat.st_uid != me {
        return Err(Unreadable::ForeignOwner(stat.st_uid));
    }
    let mut bytes = Vec::with_capacity(4096);
    std::fs::File::from(fd)
        .take(MAX_RECORD_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Unreadable::Io(e.to_string()))?;
    if bytes.len() as u64 > MAX_RECORD_BYTES {
        return Err(Unreadable::TooLarge);
    }
    let mut record =
        RunningRecord::parse(&bytes).map_err(|e| Unreadable::Malformed(e.to_string()))?;
    if record.session_id != stem {
        return Err(Unreadable::NameMismatch(record.session_id));
    }
    record.origin = OriginSlot(Some(Origin {
        dir: dir.to_path_buf(),
        file_name: file_name.to_owned(),
        identity: FileIdentity::of(&stat),
    }));
    Ok(record)
}

/// What [`prune`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pruned {
    /// The record's file (and its `.control`, if any) was unlinked.
    Removed,
    /// The file was already gone, or had been replaced by another since it was read; nothing
    /// was unlinked.
    AlreadyGone,
}

/// Unlink one record. For a [`Liveness::Gone`] reading only.
///
/// Unlinks exactly the file `record` was read from (checked by inode, never through a link)
/// and `<session_id>.control` beside it. Any other reading is refused with
/// [`RunningError::NotGone`] and nothing is touched; so is a record that was not read from disk.
pub fn prune(record: &RunningRecord, reading: &Liveness) -> Result<Pruned, RunningError> {
    if !matches!(reading, Liveness::Gone { .. }) {
        return Err(RunningError::NotGone(record.session_id.clone()));
    }
    let Some(origin) = &record.origin.0 else {
        return Err(RunningError::NotFromDisk(record.session_id.clone()));
    };
    let io_err = |source: std::io::Error| RunningError::Io {
        path: origin.dir.join(&origin.file_name),
        source,
    };
    let dir_fd = open_dir(&origin.dir).map_err(io_err)?;
    let current = match rustix::fs::statat(
        &dir_fd,
        origin.file_name.as_str(),
        AtFlags::SYMLINK_NOFOLLOW,
    ) {
        Ok(stat) => FileIdentity::of(&stat),
        Err(Errno::NOENT) => return Ok(Pruned::AlreadyGone),
        Err(e) => return Err(io_err(e.into())),
    };
    if current != origin.identity {
        return Ok(Pruned::AlreadyGone);
    }
    match rustix::fs::unlinkat(&dir_fd, origin.file_name.as_str(), AtFlags::empty()) {
        Ok(()) => {}
        Err(Errno::NOENT) => return Ok(Pruned::AlreadyGone),
        Err(e) => return Err(io_err(e.into())),
    }
    let control = format!("{}{CONTROL_SUFFIX}", record.session_id);
    match rustix::fs::unlinkat(&dir_fd, control.as_str(), AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => Ok(Pruned::Removed),
        Err(e) => Err(io_err(e.into())),
    }
}
