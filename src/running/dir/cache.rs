//! The records already parsed, by file name, with the identity of the file each came from: a
//! scan through it skips the open, read and parse of a file `lstat` shows unchanged and settled.
//! It holds every record the latest scan read, settled or not, so that it also knows which
//! names a listing should show (see `scan`); a parse is reused only from a settled file.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::entry::{SeenFile, judge_entry, read_entry_retried};
use super::unreadable::EntryError;
use crate::running::RunningRecord;

/// Records already parsed, by file name, with the identity of the file each was read from.
///
/// Shared by concurrent scans of one directory; see [`super::scan()`] for what it may skip.
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

pub(super) type CacheMap = HashMap<Arc<str>, Arc<Cached>>;

/// One parsed record and the file it came from.
pub(super) struct Cached {
    seen: SeenFile,
    record: Arc<RunningRecord>,
    /// Whether the file had not changed for a second when it was read: only then may the
    /// parse be reused.
    settled: bool,
}

impl RecordCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, (PathBuf, Arc<CacheMap>)> {
        // Holds no invariant a panicking holder could break halfway.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn snapshot(&self, dir: &Path) -> Arc<CacheMap> {
        let entries = self.lock();
        if entries.0 == dir {
            Arc::clone(&entries.1)
        } else {
            Arc::default()
        }
    }

    pub(super) fn replace(&self, dir: &Path, seen: CacheMap) {
        *self.lock() = (dir.to_path_buf(), Arc::new(seen));
    }
}

/// [`read_entry`] through the cache: the entry is judged as always, and when it is still the
/// very file `cached` was read from, settled then, that reading is reused. Also answers what to
/// cache now (every record read).
pub(super) fn read_entry_cached(
    dir_fd: &OwnedFd,
    dir: &Path,
    file_name: &str,
    stem: &str,
    me: u32,
    cached: Option<&Arc<Cached>>,
) -> (Result<Arc<RunningRecord>, EntryError>, Option<Arc<Cached>>) {
    if let Some(cached) = cached
        && cached.settled
        && let Ok(before) = judge_entry(dir_fd, file_name, me)
        && SeenFile::of(&before) == cached.seen
    {
        return (Ok(Arc::clone(&cached.record)), Some(Arc::clone(cached)));
    }
    match read_entry_retried(dir_fd, dir, file_name, stem, me) {
        Ok((record, seen)) => {
            let record = Arc::new(record);
            let cached = Arc::new(Cached {
                settled: seen.is_settled(),
                seen,
                record: Arc::clone(&record),
            });
            (Ok(record), Some(cached))
        }
        Err(why) => (Err(why), None),
    }
}
