//! Removing a file only while it is provably the one the caller judged: judged under its name,
//! renamed to a quarantine name, judged again there, then unlinked or put back.

use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, FileType};
use rustix::io::Errno;

use super::fate::FileFate;
use super::put_back::put_back;
use super::quarantine::HeldQuarantine;

/// Unlink `dir_fd`/`name` only if `judge` says so of it, and still says so of the entry taken
/// from under the name.
///
/// `judge` gets the directory and a name to look at: first the entry's own (a miss leaves
/// everything untouched, so a record that merely replaced the judged file is never disturbed),
/// then the hidden quarantine name the entry has been moved to. A `false` verdict there puts
/// the entry back by [`put_back`]'s rule: of it and any file under the name by then, the newer
/// keeps the name. A directory is never unlinked. Only plain `rename`, `link` and `unlink` are
/// used, so this works on NFS too; an entry stranded in quarantine by a crash is recovered by
/// [`super::recover_quarantined`].
pub(crate) fn unlink_checked(
    dir_fd: &OwnedFd,
    name: &str,
    judge: impl Fn(&OwnedFd, &str) -> bool,
) -> std::io::Result<FileFate> {
    match rustix::fs::statat(dir_fd, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(_) => {}
        Err(Errno::NOENT) => return Ok(FileFate::AlreadyGone),
        Err(e) => return Err(e.into()),
    }
    if !judge(dir_fd, name) {
        return Ok(FileFate::Replaced);
    }
    // The quarantine name is random and new: a plain rename cannot replace anything. It is
    // held before the rename, so recovery in this process never takes it while it is judged.
    let held = HeldQuarantine::hold(name)?;
    let quarantine = held.0.as_str();
    match rustix::fs::renameat(dir_fd, name, dir_fd, quarantine) {
        Ok(()) => {}
        Err(Errno::NOENT) => return Ok(FileFate::AlreadyGone),
        Err(e) => return Err(e.into()),
    }
    let is_dir = rustix::fs::statat(dir_fd, quarantine, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory);
    if !is_dir && judge(dir_fd, quarantine) {
        rustix::fs::unlinkat(dir_fd, quarantine, AtFlags::empty())?;
        return Ok(FileFate::Removed);
    }
    put_back(dir_fd, quarantine, name, is_dir)?;
    Ok(FileFate::Replaced)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::private_fs::fixtures::{
        NEWER, OLDER, dir_with_a_file_and_a_dir, identity, names_in, write_dated,
    };
    use crate::private_fs::{open_dir, recover_quarantined};

    #[test]
    fn an_entry_is_unlinked_only_when_judged_removable_under_both_names() {
        let (dir, fd) = dir_with_a_file_and_a_dir();
        // Judged removable under its name, but not once taken aside (a writer replaced it in
        // between, say): it goes back, whole.
        let first_look_only = |_: &OwnedFd, name: &str| name == "a";
        assert_eq!(
            unlink_checked(&fd, "a", first_look_only).unwrap(),
            FileFate::Replaced
        );
        assert_eq!(names_in(dir.path()), ["a", "d"]);
        assert_eq!(std::fs::read(dir.path().join("a")).unwrap(), b"judged");
        // A directory is never unlinked, whatever the judge says.
        assert_eq!(
            unlink_checked(&fd, "d", |_, _| true).unwrap(),
            FileFate::Replaced
        );
        assert_eq!(names_in(dir.path()), ["a", "d"]);
        assert_eq!(
            unlink_checked(&fd, "a", |_, _| true).unwrap(),
            FileFate::Removed
        );
        assert_eq!(names_in(dir.path()), ["d"]);
        assert_eq!(
            unlink_checked(&fd, "a", |_, _| true).unwrap(),
            FileFate::AlreadyGone
        );
    }

    /// The same race end to end: the second judgement of the removal runs while a recovery
    /// (of a copy a dead remover stranded) puts a stale copy under the name.
    #[test]
    fn a_removal_that_keeps_a_live_record_puts_it_back_over_a_stale_copy_recovered_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let fd = open_dir(dir.path()).unwrap();
        let mut exited = std::process::Command::new("true").spawn().unwrap();
        exited.wait().unwrap();
        let stranded = format!(".ses_r.json.{}.0123456789abcdef.unlinking", exited.id());
        write_dated(dir.path(), &stranded, b"stale", OLDER);
        write_dated(dir.path(), "ses_r.json", b"live", NEWER);
        let live = identity(dir.path(), "ses_r.json");
        let recovered = std::cell::Cell::new(0);
        let judge = |dir_fd: &OwnedFd, name: &str| {
            if name == "ses_r.json" {
                return true;
            }
            recovered.set(recover_quarantined(dir_fd).unwrap());
            false
        };

        assert_eq!(
            unlink_checked(&fd, "ses_r.json", judge).unwrap(),
            FileFate::Replaced
        );
        assert_eq!(recovered.get(), 1, "the stale copy went under the name");
        assert_eq!(names_in(dir.path()), ["ses_r.json"]);
        assert_eq!(identity(dir.path(), "ses_r.json"), live);
        assert_eq!(
            std::fs::read(dir.path().join("ses_r.json")).unwrap(),
            b"live"
        );
    }
}
