//! Removing from the running directory, on evidence only: a record for a `Gone` reading (the
//! very file it was read from, and the `.control` seen beside it), junk that can never be a
//! record, and putting back what a failed removal left in quarantine.

use std::os::fd::OwnedFd;
use std::path::Path;

use super::directory::{io_at, open_running_dir};
use super::entry::read_entry;
use super::unreadable::{EntryError, UnreadableEntry};
use crate::private_fs::{FileFate, FileIdentity, unlink_checked};
use crate::running::record::{CONTROL_SUFFIX, RECORD_SUFFIX, RunningRecord};
use crate::running::{Liveness, RunningError};

/// Put back entries that a failed or crashed removal left hidden in `dir`'s quarantine; answers
/// how many. Part of every pruning pass, never of a read-only one.
pub(crate) fn recover_quarantined(dir: &Path) -> Result<usize, RunningError> {
    let dir_fd = open_running_dir(dir)?;
    crate::private_fs::recover_quarantined(&dir_fd).map_err(io_at(dir))
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
