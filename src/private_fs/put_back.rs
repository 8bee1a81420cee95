//! Putting a quarantined file back under its name: of it and any file met under the name, the
//! newer keeps the name; a copy is dropped only for a newer one or the same bytes, and doubt
//! deletes nothing. Only `link`, `rename` and `unlink` are used.

use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, Stat};
use rustix::io::Errno;

use super::file_identity::FileIdentity;
use super::quarantine::HeldQuarantine;

/// How many other files one [`put_back`] may meet under the name before it leaves what it still
/// holds in quarantine for the next recovery pass. The race it settles (a stale copy put back
/// over a live record taken aside) takes two meetings, four if a writer joins in; more means
/// files keep arriving, and doubt never deletes.
const PUT_BACK_MEETINGS: u32 = 8;

/// Return a quarantined entry to `name`, unless a newer file already holds the name (see
/// [`meeting`]); `true` when it left quarantine, back under its name or dropped for a newer copy
/// there. `false` when the entry was no longer there (another recovery took it first), or stays
/// in quarantine: a directory whose name is taken, or a file that cannot be ranked against the
/// one under its name.
pub(super) fn put_back(
    dir_fd: &OwnedFd,
    quarantine: &str,
    name: &str,
    is_dir: bool,
) -> std::io::Result<bool> {
    if !is_dir {
        return put_back_file(dir_fd, quarantine, name, PUT_BACK_MEETINGS);
    }
    // Directories cannot be hard-linked. NOREPLACE, since a plain rename would replace an empty
    // directory; a directory whose name is taken stays where it is, still not removed.
    match rustix::fs::renameat_with(dir_fd, quarantine, dir_fd, name, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(true),
        Err(Errno::EXIST | Errno::NOENT) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// [`put_back`] for a file, meeting at most `meetings` other files under its name. Each file it
/// takes from under the name is settled in turn by the same rule before it returns.
fn put_back_file(
    dir_fd: &OwnedFd,
    quarantine: &str,
    name: &str,
    mut meetings: u32,
) -> std::io::Result<bool> {
    let mut taken_aside = Vec::new();
    let left = settle_file(dir_fd, quarantine, name, &mut meetings, &mut taken_aside)?;
    // An error stops here: what is still aside is under this process's quarantine names, and
    // its holds end with this call, so the next recovery pass settles it.
    while let Some(aside) = taken_aside.pop() {
        settle_file(dir_fd, &aside.0, name, &mut meetings, &mut taken_aside)?;
    }
    Ok(left)
}

/// Link the quarantined file to `name`, or settle with the file already there: drop ours for a
/// newer copy, leave both for one that cannot be ranked, or take an older one aside (pushed,
/// held, to `taken_aside`) and link ours in its place. `true` when ours left quarantine.
///
/// Only `link`, `rename` and `unlink` are used: `link` never replaces, and a name taken aside is
/// new and random, so no step can destroy a file that arrived after it was looked at.
fn settle_file(
    dir_fd: &OwnedFd,
    quarantine: &str,
    name: &str,
    meetings: &mut u32,
    taken_aside: &mut Vec<HeldQuarantine>,
) -> std::io::Result<bool> {
    loop {
        match rustix::fs::linkat(dir_fd, quarantine, dir_fd, name, AtFlags::empty()) {
            Ok(()) => return leave_quarantine(dir_fd, quarantine),
            Err(Errno::EXIST) => {}
            // Another recovery took it first.
            Err(Errno::NOENT) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
        if *meetings == 0 {
            tracing::warn!(
                file = name,
                quarantine,
                "other files kept arriving under the name; this copy stays in quarantine for \
                 the next pruning pass"
            );
            return Ok(false);
        }
        *meetings -= 1;
        let Some(met) = met_or_gone(meet(dir_fd, quarantine, name))? else {
            continue;
        };
        match met {
            Meeting::DropOurs => return leave_quarantine(dir_fd, quarantine),
            Meeting::KeepBoth => {
                tracing::warn!(
                    file = name,
                    quarantine,
                    "a quarantined copy cannot be ranked against the file under its name (the \
                     same modification time with other bytes, or not a regular file); both are \
                     kept, the copy in quarantine"
                );
                return Ok(false);
            }
            Meeting::OursTakesName => {
                // Whatever is under the name by now goes aside, held so that recovery leaves it
                // to us, and meets ours in turn: a writer's file newer still wins the name back.
                let aside = HeldQuarantine::hold(name)?;
                match rustix::fs::renameat(dir_fd, name, dir_fd, aside.0.as_str()) {
                    Ok(()) => taken_aside.push(aside),
                    // The name was freed meanwhile: the next link takes it.
                    Err(Errno::NOENT) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
}

/// What a meeting came to: `None` when one of the two files went meanwhile (the next link
/// attempt tells which), else the meeting; any other error is the put-back's.
fn met_or_gone(met: std::io::Result<Meeting>) -> std::io::Result<Option<Meeting>> {
    match met {
        Ok(met) => Ok(Some(met)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Unlink a quarantine name whose file is at its own name or superseded there; `false` when
/// another recovery took it first.
fn leave_quarantine(dir_fd: &OwnedFd, quarantine: &str) -> std::io::Result<bool> {
    match rustix::fs::unlinkat(dir_fd, quarantine, AtFlags::empty()) {
        Ok(()) => Ok(true),
        Err(Errno::NOENT) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// A file's modification time, `(seconds, nanoseconds)`: which of two copies was written later.
/// Not the change time, which `link` and `rename` reset.
pub(super) type Mtime = (i64, u64);

/// What becomes of a quarantined file that finds its name held by another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Meeting {
    /// Ours was written later: the other is taken aside and ours takes the name.
    OursTakesName,
    /// The other was written later, or holds the same bytes from the same moment: ours goes.
    DropOurs,
    /// Neither is known to be newer: ours stays in quarantine, nothing is deleted.
    KeepBoth,
}

/// The rule for two copies of one name: the later modification time wins; on a tie ours goes
/// only if the bytes are the same. `same_bytes` matters only on a tie.
///
/// The modification time decides, not the order the copies reached the disk: it is the one
/// order both copies carry. A copy whose time was set back (`touch -d`, a restored backup, a
/// clock stepped back when it was written) counts as the older, though written last.
fn meeting(ours: Mtime, occupant: Mtime, same_bytes: bool) -> Meeting {
    match ours.cmp(&occupant) {
        std::cmp::Ordering::Greater => Meeting::OursTakesName,
        std::cmp::Ordering::Less => Meeting::DropOurs,
        std::cmp::Ordering::Equal if same_bytes => Meeting::DropOurs,
        std::cmp::Ordering::Equal => Meeting::KeepBoth,
    }
}

/// How the quarantined file meets the one under `name`, by [`meeting`]. Only regular files are
/// ranked; anything else under either name and both stay. `NotFound` if either went meanwhile.
fn meet(dir_fd: &OwnedFd, quarantine: &str, name: &str) -> std::io::Result<Meeting> {
    let ours = rustix::fs::statat(dir_fd, quarantine, AtFlags::SYMLINK_NOFOLLOW)?;
    let occupant = rustix::fs::statat(dir_fd, name, AtFlags::SYMLINK_NOFOLLOW)?;
    let regular = |stat: &Stat| FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile;
    if !regular(&ours) || !regular(&occupant) {
        return Ok(Meeting::KeepBoth);
    }
    let (ours, occupant) = (
        FileIdentity::of(&ours).mtime,
        FileIdentity::of(&occupant).mtime,
    );
    let same_bytes = ours == occupant && same_contents(dir_fd, quarantine, name)?;
    Ok(meeting(ours, occupant, same_bytes))
}

/// Whether two files in `dir_fd` hold the same bytes. The files compared are a record's copies
/// (small), in a directory only this user can write.
fn same_contents(dir_fd: &OwnedFd, a: &str, b: &str) -> std::io::Result<bool> {
    let read = |name: &str| -> std::io::Result<Vec<u8>> {
        // Both were regular files when ranked; should one be swapped since, a symlink is not
        // followed and a FIFO does not block the pruning pass.
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(dir_fd, name, flags, Mode::empty())?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::fs::File::from(fd), &mut bytes)?;
        Ok(bytes)
    };
    Ok(read(a)? == read(b)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::private_fs::fixtures::{NEWER, OLDER, identity, names_in, write_dated};
    use crate::private_fs::open_dir;
    use crate::private_fs::quarantine::{QuarantinedName, quarantine_name};
    use crate::private_fs::recover_quarantined;

    #[test]
    fn the_later_copy_wins_and_a_tie_drops_ours_only_for_the_same_bytes() {
        let (earlier, later) = ((1_700_000_000, 999_999_999), (1_700_000_001, 0));
        for same_bytes in [false, true] {
            assert_eq!(meeting(later, earlier, same_bytes), Meeting::OursTakesName);
            assert_eq!(meeting(earlier, later, same_bytes), Meeting::DropOurs);
        }
        assert_eq!(meeting(NEWER, OLDER, true), Meeting::OursTakesName);
        assert_eq!(meeting(OLDER, NEWER, true), Meeting::DropOurs);
        assert_eq!(meeting(later, later, true), Meeting::DropOurs);
        assert_eq!(meeting(later, later, false), Meeting::KeepBoth);
    }

    #[test]
    fn a_meeting_one_of_whose_files_went_is_tried_again_and_any_other_error_fails() {
        assert_eq!(
            met_or_gone(Ok(Meeting::KeepBoth)).unwrap(),
            Some(Meeting::KeepBoth)
        );
        let gone = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(met_or_gone(Err(gone)).unwrap(), None);
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let failed = met_or_gone(Err(denied)).expect_err("not a file gone");
        assert_eq!(failed.kind(), std::io::ErrorKind::PermissionDenied);
    }

    /// Copies written in one order with modification times in the other: the times decide.
    #[test]
    fn the_modification_time_decides_whatever_order_the_copies_were_written_in() {
        let dir = tempfile::tempdir().unwrap();
        let fd = open_dir(dir.path()).unwrap();
        // The name's file is written first, dated later; the quarantined copy written after
        // it is dated earlier (set with utimensat; the machine's clock is never stepped).
        write_dated(dir.path(), "a", b"written first", NEWER);
        let quarantine = quarantine_name("a").unwrap();
        write_dated(dir.path(), &quarantine, b"written last", OLDER);
        let theirs = identity(dir.path(), "a");
        assert!(put_back(&fd, &quarantine, "a", false).unwrap());
        assert_eq!(names_in(dir.path()), ["a"]);
        assert_eq!(identity(dir.path(), "a"), theirs);

        // And the other way round: the copy written first but dated later takes the name.
        let quarantine = quarantine_name("b").unwrap();
        write_dated(dir.path(), &quarantine, b"written first", NEWER);
        write_dated(dir.path(), "b", b"written last", OLDER);
        let ours = identity(dir.path(), &quarantine);
        assert!(put_back(&fd, &quarantine, "b", false).unwrap());
        assert_eq!(identity(dir.path(), "b"), ours);
        assert_eq!(names_in(dir.path()), ["a", "b"]);
    }

    #[test]
    fn contents_are_compared_without_following_a_symlink_or_waiting_on_a_fifo() {
        let dir = tempfile::tempdir().unwrap();
        let fd = open_dir(dir.path()).unwrap();
        write_dated(dir.path(), "a", b"same", NEWER);
        write_dated(dir.path(), "b", b"same", NEWER);
        assert!(same_contents(&fd, "a", "b").unwrap());
        std::os::unix::fs::symlink("a", dir.path().join("link")).unwrap();
        let followed = same_contents(&fd, "a", "link");
        assert!(followed.is_err(), "a symlink was followed: {followed:?}");
        // No writer holds the FIFO: a blocking open would wait for one for ever. The comparison
        // runs apart so that such a wait fails here at a deadline, not as a hung test.
        rustix::fs::mknodat(&fd, "fifo", FileType::Fifo, Mode::RUSR | Mode::WUSR, 0).unwrap();
        let (told, compared) = std::sync::mpsc::channel();
        let apart = fd.try_clone().unwrap();
        std::thread::spawn(move || told.send(same_contents(&apart, "a", "fifo").ok()));
        match compared.recv_timeout(std::time::Duration::from_secs(10)) {
            Ok(same) => assert_eq!(same, Some(false)),
            Err(_) => {
                // A writer's open frees the waiting reader, so the thread ends with the test.
                let flags = OFlags::WRONLY | OFlags::NONBLOCK | OFlags::CLOEXEC;
                let _writer = rustix::fs::openat(&fd, "fifo", flags, Mode::empty());
                panic!("comparing with a FIFO waited for a writer");
            }
        }
    }

    #[test]
    fn a_newer_quarantined_file_takes_its_name_and_the_older_one_there_goes() {
        let dir = tempfile::tempdir().unwrap();
        let quarantine = quarantine_name("a").unwrap();
        write_dated(dir.path(), &quarantine, b"newer", NEWER);
        write_dated(dir.path(), "a", b"older", OLDER);
        let ours = identity(dir.path(), &quarantine);

        let fd = open_dir(dir.path()).unwrap();
        assert!(put_back(&fd, &quarantine, "a", false).unwrap());
        assert_eq!(names_in(dir.path()), ["a"]);
        assert_eq!(identity(dir.path(), "a"), ours);
        assert_eq!(std::fs::read(dir.path().join("a")).unwrap(), b"newer");
    }

    #[test]
    fn an_older_quarantined_file_is_dropped_and_the_newer_one_at_its_name_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let quarantine = quarantine_name("a").unwrap();
        write_dated(dir.path(), &quarantine, b"older", OLDER);
        write_dated(dir.path(), "a", b"newer", NEWER);
        let theirs = identity(dir.path(), "a");

        let fd = open_dir(dir.path()).unwrap();
        assert!(put_back(&fd, &quarantine, "a", false).unwrap());
        assert_eq!(names_in(dir.path()), ["a"]);
        assert_eq!(identity(dir.path(), "a"), theirs);
        assert_eq!(std::fs::read(dir.path().join("a")).unwrap(), b"newer");
    }

    #[test]
    fn a_tie_drops_the_quarantined_copy_only_when_the_bytes_are_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let fd = open_dir(dir.path()).unwrap();
        let quarantine = quarantine_name("a").unwrap();
        write_dated(dir.path(), &quarantine, b"same", NEWER);
        write_dated(dir.path(), "a", b"same", NEWER);
        let theirs = identity(dir.path(), "a");
        assert!(put_back(&fd, &quarantine, "a", false).unwrap());
        assert_eq!(names_in(dir.path()), ["a"]);
        assert_eq!(identity(dir.path(), "a"), theirs);

        // Same moment, other bytes: neither is known to be newer, so nothing is deleted.
        write_dated(dir.path(), &quarantine, b"other", NEWER);
        assert!(!put_back(&fd, &quarantine, "a", false).unwrap());
        let mut both = [quarantine.as_str(), "a"];
        both.sort();
        assert_eq!(names_in(dir.path()), both);
        assert_eq!(identity(dir.path(), "a"), theirs);
        assert_eq!(std::fs::read(dir.path().join("a")).unwrap(), b"same");
        assert_eq!(
            std::fs::read(dir.path().join(&quarantine)).unwrap(),
            b"other"
        );
    }

    #[test]
    fn a_quarantined_file_is_not_ranked_against_a_directory_at_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let quarantine = quarantine_name("d").unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        write_dated(dir.path(), &quarantine, b"newer", (i64::from(i32::MAX), 0));

        let fd = open_dir(dir.path()).unwrap();
        assert!(!put_back(&fd, &quarantine, "d", false).unwrap());
        assert!(dir.path().join("d").is_dir());
        assert_eq!(
            std::fs::read(dir.path().join(&quarantine)).unwrap(),
            b"newer"
        );
        assert_eq!(names_in(dir.path()).len(), 2);
    }

    #[test]
    fn a_quarantined_file_that_is_gone_is_not_put_back() {
        let dir = tempfile::tempdir().unwrap();
        let fd = open_dir(dir.path()).unwrap();
        let quarantine = quarantine_name("a").unwrap();
        assert!(!put_back(&fd, &quarantine, "a", false).unwrap());
        assert!(names_in(dir.path()).is_empty());
    }

    /// The race that used to lose a live record: its removal took it aside (a writer had
    /// replaced the file judged gone), and before its second judgement kept it, a recovery put
    /// back a stale copy of the same name, so the put-back found the name taken.
    #[test]
    fn a_live_record_taken_aside_wins_its_name_back_from_a_stale_copy_put_back_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let fd = open_dir(dir.path()).unwrap();
        let live = quarantine_name("ses_r.json").unwrap();
        write_dated(dir.path(), &live, b"live", NEWER);
        let stale = quarantine_name("ses_r.json").unwrap();
        write_dated(dir.path(), &stale, b"stale", OLDER);
        rustix::fs::linkat(&fd, stale.as_str(), &fd, "ses_r.json", AtFlags::empty()).unwrap();
        rustix::fs::unlinkat(&fd, stale.as_str(), AtFlags::empty()).unwrap();
        let live_identity = identity(dir.path(), &live);

        assert!(put_back(&fd, &live, "ses_r.json", false).unwrap());
        assert_eq!(names_in(dir.path()), ["ses_r.json"]);
        assert_eq!(identity(dir.path(), "ses_r.json"), live_identity);
        assert_eq!(
            std::fs::read(dir.path().join("ses_r.json")).unwrap(),
            b"live"
        );
    }

    #[test]
    fn a_put_back_out_of_meetings_leaves_what_it_holds_in_quarantine() {
        let dir = tempfile::tempdir().unwrap();
        let fd = open_dir(dir.path()).unwrap();
        let quarantine = quarantine_name("a").unwrap();
        write_dated(dir.path(), &quarantine, b"newer", NEWER);
        write_dated(dir.path(), "a", b"older", OLDER);
        let (ours, theirs) = (identity(dir.path(), &quarantine), identity(dir.path(), "a"));

        assert!(!put_back_file(&fd, &quarantine, "a", 0).unwrap());
        assert_eq!(identity(dir.path(), &quarantine), ours);
        assert_eq!(identity(dir.path(), "a"), theirs);

        // One meeting: ours takes the name; the older copy it took aside meets ours with none
        // left, so it stays in quarantine, as this process's, for the next recovery pass.
        assert!(put_back_file(&fd, &quarantine, "a", 1).unwrap());
        assert_eq!(identity(dir.path(), "a"), ours);
        let names = names_in(dir.path());
        assert_eq!(names.len(), 2, "{names:?}");
        let aside = QuarantinedName::parse(&names[0]).expect("a quarantine name");
        assert_eq!((aside.name, aside.pid), ("a", std::process::id()));
        assert_eq!(identity(dir.path(), &names[0]), theirs);

        assert_eq!(recover_quarantined(&fd).unwrap(), 1);
        assert_eq!(names_in(dir.path()), ["a"]);
        assert_eq!(identity(dir.path(), "a"), ours);
    }
}
