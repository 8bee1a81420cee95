//! The running directory: finding it, holding it private, reading records out of it, and
//! removing them.
//!
//! Invariants kept here:
//! - `~/.murmur` and `~/.murmur/running` are directories of the effective user at 0700: a wider
//!   mode is narrowed at setup; a link, a non-directory or a foreign owner is refused with the
//!   path. Every pass checks the directory again through one `O_NOFOLLOW` descriptor and
//!   refuses it, untouched, while it is not ours or lets group or others in.
//! - Only `*.json` entries are records, read through `O_NOFOLLOW | O_NONBLOCK` only when they
//!   are regular files we own, and never past [`MAX_RECORD_BYTES`].
//! - [`scan`] and [`list`] change nothing. Pruning passes remove only files named like a murmur
//!   record that what was read proves can never be one ([`UnreadableEntry::is_removable`]);
//!   size is never such proof, so a file over the cap is counted and kept.
//!   [`prune`] removes a record only for a `Gone` reading, only the very file it was read from,
//!   and with it only the `.control` seen beside it then.
//! - An entry gone (`ENOENT`) by the time it is read is skipped, neither a record nor
//!   unreadable; any other failure to read is [`Unreadable::Io`].
//! - [`scan_cached`] and [`scan_shared`] reuse a parse only while `lstat` shows the very file
//!   read before, unchanged, and that file had not changed for a second before it was read; the
//!   records they hand out are shared with the cache, never changed after they are parsed.

use std::collections::HashMap;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::record::{
    CONTROL_SUFFIX, Origin, OriginSlot, RECORD_SUFFIX, RunningRecord, is_murmur_session_id,
    is_valid_session_id,
};
use super::{Liveness, RunningError};
use crate::private_fs::{
    FileFate, FileIdentity, WiderMode, hold_private_dir, open_dir, unlink_checked,
};

/// The most of a record file that is read. murmur sets no limit: a record is a few KiB, and one
/// carrying hundreds of credentials of a few KiB each still fits. A larger file is not read,
/// so nothing is known of it: it is counted unreadable and kept ([`Unreadable::TooLarge`]).
pub const MAX_RECORD_BYTES: u64 = 1024 * 1024;

fn io_at(path: &Path) -> impl Fn(std::io::Error) -> RunningError + '_ {
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
fn open_running_dir(dir: &Path) -> Result<OwnedFd, RunningError> {
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
    /// Larger than [`MAX_RECORD_BYTES`]: not read, so it may well be a record; never removed.
    TooLarge,
    /// Not a record of any generation.
    Malformed(String),
    /// Its `session_id` is not the one its file name says.
    NameMismatch(String),
    /// Its name is not `<session id>.json` for any id the registry can address.
    InvalidName,
    /// It kept being replaced while it was read (a writer rewriting it rapidly).
    Replaced,
    /// Opening or reading it failed: no evidence about what it is.
    Io(String),
}

impl Unreadable {
    /// Whether the entry merely failed to be read ([`Unreadable::Io`], [`Unreadable::Replaced`]):
    /// that says nothing about what the file holds, and may pass. Every other reason stays true
    /// of the entry until someone changes it.
    pub fn is_read_failure(&self) -> bool {
        matches!(self, Self::Io(_) | Self::Replaced)
    }

    /// Whether what was read of the entry proves it can never be a record: the one rule that
    /// lets any path remove an unreadable entry (see [`UnreadableEntry::is_removable`]).
    fn proves_no_record(&self) -> bool {
        match self {
            // Read whole, and not a record of this file's session.
            Self::Malformed(_) | Self::NameMismatch(_) => true,
            // murmur renames a regular file onto the name; removing a link removes only the link.
            Self::Symlink | Self::NotRegularFile => true,
            // Nothing of it was read. Size proves nothing (murmur sets no limit on a record), nor
            // does ownership (a record written by root, say), and a directory is never ours.
            Self::TooLarge | Self::ForeignOwner(_) | Self::Directory => false,
            // No name the registry can address: it may be someone else's file.
            Self::InvalidName => false,
            // A read that failed is no evidence at all.
            Self::Io(_) | Self::Replaced => false,
        }
    }
}

/// Why reading one entry gave no record: it is not one, or it was not there any more.
enum EntryError {
    /// No file by that name when it was read: removed or renamed away after the listing.
    Vanished,
    /// There is a file, and it is not a valid record.
    Unreadable(Unreadable),
}

impl From<Unreadable> for EntryError {
    fn from(why: Unreadable) -> Self {
        Self::Unreadable(why)
    }
}

/// An error of `lstat` or `open` on an entry: `ENOENT` is the entry gone, anything else is no
/// evidence either way.
fn entry_errno(e: Errno) -> EntryError {
    match e {
        Errno::NOENT => EntryError::Vanished,
        e => EntryError::Unreadable(Unreadable::Io(std::io::Error::from(e).to_string())),
    }
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
            Self::InvalidName => f.write_str("is not named after a session id"),
            Self::Replaced => f.write_str("kept changing while it was read"),
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
    /// Whether this entry can be removed on what was read of it: it is named like a murmur
    /// record (`ses_` + 32 hex digits: any other name may be someone else's file) and what was
    /// read proves it can never be one. Not a directory, not a file of another owner or over
    /// the size cap (nothing of those was read), and not an entry that merely failed to read.
    /// Removing a symlink removes only the link.
    pub fn is_removable(&self) -> bool {
        self.file_name
            .strip_suffix(RECORD_SUFFIX)
            .is_some_and(is_murmur_session_id)
            && self.why.proves_no_record()
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

/// [`Scan`] with each record shared with the cache it came from, for callers that read the
/// directory over and over (the registry's passes): an unchanged record is never copied.
#[derive(Debug, Default)]
pub struct SharedScan {
    /// Every valid record, newest session first.
    pub records: Vec<Arc<RunningRecord>>,
    /// Every `*.json` entry that is not a valid record, by file name.
    pub unreadable: Vec<UnreadableEntry>,
}

/// Read every `*.json` entry of `dir`, changing nothing.
///
/// Records come back newest first (session ids are UUIDv7, so descending order is newest
/// first). Entries that are not valid records are reported in [`Scan::unreadable`]; entries
/// gone by the time they are read are in neither.
pub fn scan(dir: &Path) -> Result<Scan, RunningError> {
    scan_cached(dir, &RecordCache::default())
}

/// [`scan`], parsing again only the records whose file changed since `cache` saw them.
///
/// Every entry is still judged afresh on every call (an `lstat` without following links: a
/// regular file, ours, and the very file that was read before, by device, inode, size,
/// modification and change time). Only the open, read and parse of an unchanged file are
/// skipped. A file changed within the last second is not cached at all, so a rewrite inside
/// one tick of the filesystem's clock cannot hide behind an unchanged timestamp. The cache
/// keeps only entries the latest scan saw, so it never outgrows the directory.
pub fn scan_cached(dir: &Path, cache: &RecordCache) -> Result<Scan, RunningError> {
    let SharedScan {
        records,
        unreadable,
    } = scan_shared(dir, cache)?;
    Ok(Scan {
        records: records.into_iter().map(Arc::unwrap_or_clone).collect(),
        unreadable,
    })
}

/// Directories with at least this many candidate entries are judged by two threads, each
/// taking half: an `lstat` per entry is most of a large scan, and a listing waits for it.
const SPLIT_SCAN_ENTRIES: usize = 2_048;

/// [`scan_cached`], each record shared with the cache rather than copied out of it.
pub fn scan_shared(dir: &Path, cache: &RecordCache) -> Result<SharedScan, RunningError> {
    let io_err = io_at(dir);
    let dir_fd = open_running_dir(dir)?;
    let entries = rustix::fs::Dir::read_from(&dir_fd).map_err(|e| io_err(e.into()))?;
    let mut names = EntryNames::default();
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
        names.push(file_name);
    }
    let reader = EntryReader {
        dir_fd: &dir_fd,
        dir,
        me: rustix::process::geteuid().as_raw(),
        known: cache.snapshot(dir),
    };
    let all: Vec<&str> = names.iter().collect();
    let found = if all.len() >= SPLIT_SCAN_ENTRIES {
        let (first, second) = all.split_at(all.len() / 2);
        std::thread::scope(|scope| {
            let other = std::thread::Builder::new()
                .name("scan".to_owned())
                .spawn_scoped(scope, || reader.read(second));
            let mut found = reader.read(first);
            match other.map(|other| other.join()) {
                Ok(Ok(theirs)) => found.append(theirs),
                // No thread to spare (or it panicked): this one reads the other half too.
                Ok(Err(_)) | Err(_) => found.append(reader.read(second)),
            }
            found
        })
    } else {
        reader.read(&all)
    };
    let Found {
        mut scan,
        seen,
        changed,
    } = found;
    if changed || seen.len() != reader.known.len() {
        cache.replace(dir, seen.into_iter().collect());
    }
    one_entry_per_name(&mut scan);
    Ok(scan)
}

/// Sort `scan` (records newest first, unreadable entries by name) and keep one entry per file
/// name: a directory listing may name a file twice while a record is renamed over it, and every
/// reader of a scan counts on one record a session. A name read both as a record and as
/// unreadable is a record (one of its reads was whole).
fn one_entry_per_name(scan: &mut SharedScan) {
    // An id is its file's name, so once repeats are gone the unstable sort is deterministic.
    scan.records
        .sort_unstable_by(|a, b| b.session_id.cmp(&a.session_id));
    scan.records.dedup_by(|a, b| a.session_id == b.session_id);
    scan.unreadable
        .sort_by(|a, b| a.file_name.cmp(&b.file_name));
    scan.unreadable.dedup_by(|a, b| a.file_name == b.file_name);
    let records = &scan.records;
    scan.unreadable.retain(|entry| {
        let stem = entry.file_name.strip_suffix(RECORD_SUFFIX);
        !stem.is_some_and(|stem| {
            records
                .binary_search_by(|record| stem.cmp(record.session_id.as_str()))
                .is_ok()
        })
    });
}

/// The candidate names of one directory listing, in one buffer rather than one allocation each.
#[derive(Default)]
struct EntryNames {
    text: String,
    ends: Vec<usize>,
}

impl EntryNames {
    fn push(&mut self, name: &str) {
        self.text.push_str(name);
        self.ends.push(self.text.len());
    }

    fn iter(&self) -> impl Iterator<Item = &str> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(&self.ends)
            .map(|(start, end)| &self.text[start..*end])
    }
}

/// What judges entries of one scan: the directory, our uid, and what the cache knew.
struct EntryReader<'a> {
    dir_fd: &'a OwnedFd,
    dir: &'a Path,
    me: u32,
    known: Arc<CacheMap>,
}

/// What reading some entries found, and what the cache should hold for them.
struct Found {
    scan: SharedScan,
    /// Every entry now cacheable, by name.
    seen: Vec<(Arc<str>, Arc<Cached>)>,
    /// Whether any of them differs from what the cache held (the cache map is built anew only
    /// then: most passes find nothing new).
    changed: bool,
}

impl Found {
    fn append(&mut self, mut other: Found) {
        self.scan.records.append(&mut other.scan.records);
        self.scan.unreadable.append(&mut other.scan.unreadable);
        self.seen.append(&mut other.seen);
        self.changed |= other.changed;
    }
}

impl EntryReader<'_> {
    /// Judge and read every entry named in `names`.
    fn read(&self, names: &[&str]) -> Found {
        let mut found = Found {
            scan: SharedScan {
                records: Vec::with_capacity(names.len()),
                unreadable: Vec::new(),
            },
            seen: Vec::with_capacity(names.len()),
            changed: false,
        };
        for &file_name in names {
            let Some(stem) = file_name.strip_suffix(RECORD_SUFFIX) else {
                continue;
            };
            let read = if is_valid_session_id(stem) {
                self.read_valid(file_name, stem, &mut found)
            } else {
                Err(Unreadable::InvalidName.into())
            };
            match read {
                Ok(record) => found.scan.records.push(record),
                // Gone since the listing: there is nothing to report (a rename onto the name
                // never leaves it missing, so this is not a record being rewritten).
                Err(EntryError::Vanished) => {}
                Err(EntryError::Unreadable(why)) => found.scan.unreadable.push(UnreadableEntry {
                    file_name: file_name.to_owned(),
                    why,
                }),
            }
        }
        found
    }

    /// Read an entry named after a valid session id through the cache, noting what to cache.
    fn read_valid(
        &self,
        file_name: &str,
        stem: &str,
        found: &mut Found,
    ) -> Result<Arc<RunningRecord>, EntryError> {
        let before = self.known.get_key_value(file_name);
        let (read, cached) = read_entry_cached(
            self.dir_fd,
            self.dir,
            file_name,
            stem,
            self.me,
            before.map(|(_, cached)| cached),
        );
        match (cached, before) {
            (Some(now), Some((name, before))) if Arc::ptr_eq(&now, before) => {
                found.seen.push((Arc::clone(name), now));
            }
            (None, None) => {}
            (Some(now), _) => {
                found.changed = true;
                found.seen.push((Arc::from(file_name), now));
            }
            (None, Some(_)) => found.changed = true,
        }
        read
    }
}

/// Records already parsed, by file name, with the identity of the file each was read from.
///
/// Shared by concurrent scans of one directory; see [`scan_cached`] for what it may skip.
/// A cache built for one directory is never used for another: scanning another directory
/// starts it afresh.
#[derive(Default)]
pub struct RecordCache {
    entries: Mutex<(PathBuf, Arc<CacheMap>)>,
}

impl std::fmt::Debug for RecordCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordCache")
            .field("records", &self.lock().1.len())
            .finish()
    }
}

type CacheMap = HashMap<Arc<str>, Arc<Cached>>;

/// One parsed record and the file it came from.
struct Cached {
    seen: SeenFile,
    record: Arc<RunningRecord>,
}

/// Everything `lstat` says that changes when a file is replaced or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SeenFile {
    dev: u64,
    ino: u64,
    size: i64,
    mode: u32,
    uid: u32,
    mtime: (i64, u64),
    ctime: (i64, u64),
}

impl SeenFile {
    fn of(stat: &rustix::fs::Stat) -> Self {
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
    fn is_settled(&self) -> bool {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        self.ctime.0.max(self.mtime.0) < now.saturating_sub(1)
    }
}

impl RecordCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, (PathBuf, Arc<CacheMap>)> {
        // Holds no invariant a panicking holder could break halfway.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn snapshot(&self, dir: &Path) -> Arc<CacheMap> {
        let entries = self.lock();
        if entries.0 == dir {
            Arc::clone(&entries.1)
        } else {
            Arc::default()
        }
    }

    fn replace(&self, dir: &Path, seen: CacheMap) {
        *self.lock() = (dir.to_path_buf(), Arc::new(seen));
    }
}

/// Put back entries that a failed or crashed removal left hidden in `dir`'s quarantine; answers
/// how many. Part of every pruning pass, never of a read-only one.
pub(crate) fn recover_quarantined(dir: &Path) -> Result<usize, RunningError> {
    let dir_fd = open_running_dir(dir)?;
    crate::private_fs::recover_quarantined(&dir_fd).map_err(io_at(dir))
}

/// Every record that parses, most recent session first. Changes nothing: [`scan`] also
/// reports the entries that are not records.
pub fn list(dir: &Path) -> Result<Vec<RunningRecord>, RunningError> {
    Ok(scan(dir)?.records)
}

/// Unlink the removable entries of `unreadable` from `dir`; answers which went.
///
/// Each entry is judged again at the moment of removal, under a quarantine name: one that is
/// already gone, or that a writer has since replaced with a valid record, is left alone and
/// not reported.
pub(crate) fn remove_unreadable(
    dir: &Path,
    unreadable: &[UnreadableEntry],
) -> Result<Vec<UnreadableEntry>, RunningError> {
    let io_err = io_at(dir);
    let dir_fd = open_running_dir(dir)?;
    let mut removed = Vec::new();
    for entry in unreadable.iter().filter(|e| e.is_removable()) {
        let Some(stem) = entry.file_name.strip_suffix(RECORD_SUFFIX) else {
            continue;
        };
        let still_unreadable = |dir_fd: &OwnedFd, quarantined: &str| {
            matches!(
                read_entry(dir_fd, dir, quarantined, stem),
                Err(EntryError::Unreadable(why)) if why.proves_no_record()
            )
        };
        if unlink_checked(&dir_fd, &entry.file_name, still_unreadable).map_err(&io_err)?
            == FileFate::Removed
        {
            removed.push(entry.clone());
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
fn read_entry(
    dir_fd: &OwnedFd,
    dir: &Path,
    file_name: &str,
    stem: &str,
) -> Result<RunningRecord, EntryError> {
    let me = rustix::process::geteuid().as_raw();
    read_entry_retried(dir_fd, dir, file_name, stem, me).map(|(record, _)| record)
}

/// [`read_entry_seen`] again while a new version replaced the entry mid-read (it is whole).
fn read_entry_retried(
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

/// [`read_entry`] through the cache: the entry is judged as always, and when it is still the
/// very file `cached` was read from, that reading is reused. Also answers what to cache now.
fn read_entry_cached(
    dir_fd: &OwnedFd,
    dir: &Path,
    file_name: &str,
    stem: &str,
    me: u32,
    cached: Option<&Arc<Cached>>,
) -> (Result<Arc<RunningRecord>, EntryError>, Option<Arc<Cached>>) {
    if let Some(cached) = cached
        && let Ok(before) = judge_entry(dir_fd, file_name, me)
        && SeenFile::of(&before) == cached.seen
    {
        return (Ok(Arc::clone(&cached.record)), Some(Arc::clone(cached)));
    }
    match read_entry_retried(dir_fd, dir, file_name, stem, me) {
        Ok((record, seen)) => {
            let record = Arc::new(record);
            let cached = seen.is_settled().then(|| {
                Arc::new(Cached {
                    seen,
                    record: Arc::clone(&record),
                })
            });
            (Ok(record), cached)
        }
        Err(why) => (Err(why), None),
    }
}

/// `lstat` the entry and refuse anything but a regular file of `me` (our effective uid).
/// Opening a device or FIFO can have effects, so this comes before any open.
fn judge_entry(dir_fd: &OwnedFd, file_name: &str, me: u32) -> Result<rustix::fs::Stat, EntryError> {
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

/// Unlink one record. For a [`Liveness::Gone`] reading only.
///
/// Unlinks exactly the file `record` was read from (checked by identity at the moment of
/// removal, never through a link) and the `<session_id>.control` seen beside it then, if that
/// is still the same file. Any other reading is
/// refused with [`RunningError::NotGone`] and nothing is touched; so is a record that was not
/// read from disk.
///
/// [`FileFate::Removed`] when the record's file was unlinked (and its `.control`, if still the
/// one read beside it); [`FileFate::AlreadyGone`] when no file was under its name, and
/// [`FileFate::Replaced`] when another had replaced it since it was read: nothing was unlinked.
pub fn prune(record: &RunningRecord, reading: &Liveness) -> Result<FileFate, RunningError> {
    if !matches!(reading, Liveness::Gone { .. }) {
        return Err(RunningError::NotGone(record.session_id.clone()));
    }
    let Some(origin) = &record.origin.0 else {
        return Err(RunningError::NotFromDisk(record.session_id.clone()));
    };
    let path = origin.dir.join(&origin.file_name);
    let dir_fd = open_running_dir(&origin.dir)?;
    let same_file = |dir_fd: &OwnedFd, quarantined: &str| {
        FileIdentity::at(dir_fd, quarantined).is_ok_and(|now| now == origin.identity)
    };
    match unlink_checked(&dir_fd, &origin.file_name, same_file).map_err(io_at(&path))? {
        FileFate::Removed => {}
        // Already gone or replaced; a failed unlink is the `Err` above.
        fate => return Ok(fate),
    }
    // The control token goes too, but only the very file seen beside the record when it was
    // read: one created since belongs to a writer re-creating the session. Failing is worth a
    // warning, not an error: the record is gone, and a stray `.control` is never read.
    if let Some(seen) = origin.control {
        let control = format!("{}{CONTROL_SUFFIX}", record.session_id);
        let same_control = |dir_fd: &OwnedFd, quarantined: &str| {
            FileIdentity::at(dir_fd, quarantined).is_ok_and(|now| now == seen)
        };
        if let Err(error) = unlink_checked(&dir_fd, &control, same_control) {
            tracing::warn!(
                path = %origin.dir.join(&control).display(),
                %error,
                "could not remove a pruned session's control file"
            );
        }
    }
    Ok(FileFate::Removed)
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn write_record(dir: &Path, session_id: &str) {
        let json = format!(
            r#"{{"session_id":"{session_id}","url":"127.0.0.1:1","pid":1,"process_start":"1",
            "capsule_name":"c","capsule_version":"1","workdir":"/w","outlives_launcher":true,
            "started_at":"2026-11-30T00:00:00Z"}}"#
        );
        std::fs::write(dir.join(RunningRecord::file_name_for(session_id)), json).expect("write");
    }

    #[test]
    fn a_scan_keeps_one_entry_per_file_name() {
        let record = |id: &str| {
            let json = format!(
                r#"{{"session_id":"{id}","url":"127.0.0.1:1","pid":1,"process_start":"1",
                "capsule_name":"c","capsule_version":"1","workdir":"/w","outlives_launcher":true,
                "started_at":"2026-11-30T00:00:00Z"}}"#
            );
            Arc::new(serde_json::from_str::<RunningRecord>(&json).expect("a record"))
        };
        let unreadable = |id: &str| UnreadableEntry {
            file_name: RunningRecord::file_name_for(id),
            why: Unreadable::Malformed("cut short".to_owned()),
        };
        let (a, b, c) = ("ses_a", "ses_b", "ses_c");
        let mut scan = SharedScan {
            records: vec![record(a), record(c), record(a), record(b), record(a)],
            unreadable: vec![unreadable(c), unreadable("ses_d"), unreadable("ses_d")],
        };
        one_entry_per_name(&mut scan);
        let ids: Vec<&str> = scan.records.iter().map(|r| r.session_id.as_str()).collect();
        assert_eq!(ids, [c, b, a]);
        let names: Vec<&str> = scan
            .unreadable
            .iter()
            .map(|u| u.file_name.as_str())
            .collect();
        assert_eq!(names, ["ses_d.json"]);
    }

    #[test]
    fn a_directory_judged_by_two_threads_reads_every_entry_once_newest_first() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
            .expect("chmod 700");
        let count = SPLIT_SCAN_ENTRIES + 11;
        let ids: Vec<String> = (0..count).map(|n| format!("ses_{n:032x}")).collect();
        for id in &ids {
            write_record(dir.path(), id);
        }
        std::fs::write(dir.path().join("ses_bad.json"), "{").expect("write");
        std::fs::write(dir.path().join("not a name.json"), "{}").expect("write");
        std::fs::create_dir(dir.path().join("ses_dir.json")).expect("mkdir");

        let cache = RecordCache::default();
        for _ in 0..2 {
            let found = scan_shared(dir.path(), &cache).expect("scan");
            let read: Vec<&str> = found
                .records
                .iter()
                .map(|r| r.session_id.as_str())
                .collect();
            let newest_first: Vec<&str> = ids.iter().rev().map(String::as_str).collect();
            assert_eq!(read, newest_first);
            let unreadable: Vec<(&str, &Unreadable)> = found
                .unreadable
                .iter()
                .map(|entry| (entry.file_name.as_str(), &entry.why))
                .collect();
            assert!(matches!(
                unreadable[..],
                [
                    ("not a name.json", Unreadable::InvalidName),
                    ("ses_bad.json", Unreadable::Malformed(_)),
                    ("ses_dir.json", Unreadable::Directory),
                ]
            ));
        }
    }
}
