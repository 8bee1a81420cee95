//! Putting back what a failed or crashed removal left in quarantine, unless its remover may
//! still be judging it: this process's own while held, another's while its owner's pid is held
//! by the process that started at the recorded time (or that cannot be told).

use std::os::fd::OwnedFd;

use rustix::fs::FileType;
use rustix::io::Errno;

use super::put_back::put_back;
use super::quarantine::{QuarantinedName, held_quarantines};
use crate::process_identity::{ProcessState, checked_pid, state_of};

/// Put back every entry a failed or crashed [`super::unlink_checked`] left in quarantine in `dir_fd`.
///
/// An entry whose quarantining process may still be judging it is left to it: this process's
/// own while an [`super::unlink_checked`] holds it, another's while its owner's pid is held by the
/// process that started at the recorded time (or that cannot be told). Everything else goes
/// back under its name (or is dropped, if a newer file holds the name) to be judged afresh.
pub(crate) fn recover_quarantined(dir_fd: &OwnedFd) -> std::io::Result<usize> {
    let mut recovered = 0;
    for entry in rustix::fs::Dir::read_from(dir_fd)? {
        let entry = entry?;
        let Ok(quarantine) = entry.file_name().to_str() else {
            continue;
        };
        let Some(parsed) = QuarantinedName::parse(quarantine) else {
            continue;
        };
        if parsed.owner_may_be_at_work(quarantine) {
            continue;
        }
        let is_dir = entry.file_type() == FileType::Directory;
        if put_back(dir_fd, quarantine, parsed.name, is_dir)? {
            recovered += 1;
        }
    }
    Ok(recovered)
}

impl QuarantinedName<'_> {
    /// Whether the process that moved the entry aside may still be judging it.
    fn owner_may_be_at_work(&self, quarantine: &str) -> bool {
        if self.pid == std::process::id() {
            // Ours while an `unlink_checked` holds it; else stranded by a removal of ours that
            // failed halfway, or left by an earlier holder of our pid.
            return held_quarantines().contains(quarantine);
        }
        match self.start {
            Some(start) => !matches!(state_of(self.pid, start), ProcessState::Gone { .. }),
            None => checked_pid(self.pid).is_some_and(|pid| {
                matches!(
                    rustix::process::test_kill_process(pid),
                    Ok(()) | Err(Errno::PERM)
                )
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::private_fs::fixtures::{
        NEWER, OLDER, Sleeper, identity, names_in, strand, write_dated,
    };
    use crate::private_fs::open_dir;
    use crate::private_fs::quarantine::HeldQuarantine;
    use crate::private_fs::write_whole::random_hex;

    #[test]
    fn an_entry_this_process_stranded_is_put_back_by_this_process() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::write(dir.path().join("ses_a.json"), "kept").expect("write");
        let dir_fd = open_dir(dir.path()).expect("open");
        let quarantine = strand(&dir_fd, "ses_a.json");

        assert_eq!(recover_quarantined(&dir_fd).expect("recover"), 1);
        assert_eq!(
            std::fs::read(dir.path().join("ses_a.json")).expect("put back"),
            b"kept"
        );
        assert!(!dir.path().join(quarantine).exists());
    }

    #[test]
    fn an_entry_an_unlink_in_this_process_holds_is_left_to_it() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::write(dir.path().join("ses_b.json"), "judged").expect("write");
        let dir_fd = open_dir(dir.path()).expect("open");
        let held = HeldQuarantine::hold("ses_b.json").expect("hold");
        rustix::fs::renameat(&dir_fd, "ses_b.json", &dir_fd, held.0.as_str()).expect("quarantine");

        assert_eq!(recover_quarantined(&dir_fd).expect("recover"), 0);
        assert!(dir.path().join(&held.0).exists(), "taken from its remover");
        drop(held);
        assert_eq!(recover_quarantined(&dir_fd).expect("recover"), 1);
        assert!(dir.path().join("ses_b.json").exists());
    }

    #[test]
    fn another_process_keeps_its_entry_only_while_it_is_the_process_named() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let dir_fd = open_dir(dir.path()).expect("open");
        let child = Sleeper::spawn();
        let pid = child.0.id();
        let token =
            crate::process_identity::process_start_token(pid).expect("the child's start token");
        let mut reaped = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let dead = reaped.id();
        reaped.wait().expect("reap");
        let random = "0123456789abcdef";
        let names = [
            (
                format!(".ses_live.json.{pid}-{token}.{random}.unlinking"),
                true,
            ),
            (
                format!(".ses_reused.json.{pid}-{token}9.{random}.unlinking"),
                false,
            ),
            (format!(".ses_old.json.{pid}.{random}.unlinking"), true),
            (format!(".ses_dead.json.{dead}.{random}.unlinking"), false),
            (
                format!(".ses_dead2.json.{dead}-{token}.{random}.unlinking"),
                false,
            ),
        ];
        for (name, _) in &names {
            std::fs::write(dir.path().join(name), "x").expect("write");
        }

        assert_eq!(recover_quarantined(&dir_fd).expect("recover"), 3);
        for (name, kept) in &names {
            assert_eq!(dir.path().join(name).exists(), *kept, "{name}");
            let own = QuarantinedName::parse(name).expect("parses").name;
            assert_eq!(dir.path().join(own).exists(), !*kept, "{own}");
        }
        drop(child);
    }

    #[test]
    fn quarantined_entries_of_gone_owners_go_back_unless_a_newer_file_holds_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name);
        let mut exited = std::process::Command::new("true").spawn().unwrap();
        exited.wait().unwrap();
        // Another process, alive: an old-style (pid-only) name of ours would be taken as left
        // by an earlier process that held our pid.
        let owner = Sleeper::spawn();
        let (gone, live) = (exited.id(), owner.0.id());
        let quarantine = |name: &str, pid: u32| format!(".{name}.{pid}.0123456789abcdef.unlinking");
        std::fs::create_dir(path(&quarantine("d", gone))).unwrap();
        // Dated apart: written within one clock tick, the two would tie and both stay.
        write_dated(dir.path(), &quarantine("f", gone), b"old", OLDER);
        write_dated(dir.path(), "f", b"new", NEWER);
        std::fs::write(path(&quarantine("h", gone)), b"h").unwrap();
        std::fs::write(path(&quarantine("l", live)), b"l").unwrap();

        let fd = open_dir(dir.path()).unwrap();
        assert_eq!(recover_quarantined(&fd).unwrap(), 3);
        assert!(path("d").is_dir());
        assert_eq!(
            std::fs::read(path("f")).unwrap(),
            b"new",
            "the newer file stays"
        );
        assert_eq!(std::fs::read(path("h")).unwrap(), b"h");
        // Its owner is alive and may still be judging it.
        let still_quarantined = quarantine("l", live);
        assert_eq!(
            names_in(dir.path()),
            [still_quarantined.as_str(), "d", "f", "h"]
        );
        drop(owner);
    }

    #[test]
    fn recovery_puts_the_newer_of_two_stranded_copies_at_the_name_whichever_it_reads_first() {
        let mut exited = std::process::Command::new("true").spawn().unwrap();
        exited.wait().unwrap();
        let stranded = |random: &str| format!(".ses_r.json.{}.{random}.unlinking", exited.id());
        let (first, second) = (stranded("0123456789abcdef"), stranded("fedcba9876543210"));
        let mut older_read_first = Vec::new();
        for (older, newer) in [(&first, &second), (&second, &first)] {
            let dir = tempfile::tempdir().unwrap();
            write_dated(
                dir.path(),
                &first,
                b"1",
                if older == &first { OLDER } else { NEWER },
            );
            write_dated(
                dir.path(),
                &second,
                b"2",
                if older == &second { OLDER } else { NEWER },
            );
            let kept = identity(dir.path(), newer);
            let read_order: Vec<String> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            older_read_first.push(&read_order[0] == older);

            let fd = open_dir(dir.path()).unwrap();
            assert_eq!(recover_quarantined(&fd).unwrap(), 2);
            assert_eq!(names_in(dir.path()), ["ses_r.json"]);
            assert_eq!(identity(dir.path(), "ses_r.json"), kept);
        }
        assert!(older_read_first.contains(&true), "{older_read_first:?}");
    }

    /// Recoveries racing over one name's stranded copies (each put back by several threads at
    /// once, as by several pruning passes) end with the newest copy at the name and nothing
    /// else: no copy is dropped except for a newer one, and the newest never meets a newer.
    #[test]
    fn concurrent_recoveries_of_one_names_stranded_copies_leave_the_newest_at_the_name() {
        const COPIES: i64 = 6;
        const RECOVERIES: usize = 4;
        let mut exited = std::process::Command::new("true").spawn().unwrap();
        exited.wait().unwrap();
        for _ in 0..40 {
            let dir = tempfile::tempdir().unwrap();
            let mut newest = None;
            for age in 0..COPIES {
                let stranded = format!(".r.{}.{}.unlinking", exited.id(), random_hex().unwrap());
                let mtime = (1_700_000_000 + age, 0);
                write_dated(dir.path(), &stranded, format!("{age}").as_bytes(), mtime);
                newest = Some(identity(dir.path(), &stranded));
            }
            let start = std::sync::Barrier::new(RECOVERIES);
            std::thread::scope(|scope| {
                for _ in 0..RECOVERIES {
                    scope.spawn(|| {
                        let fd = open_dir(dir.path()).unwrap();
                        start.wait();
                        recover_quarantined(&fd).unwrap();
                    });
                }
            });
            recover_quarantined(&open_dir(dir.path()).unwrap()).unwrap();
            assert_eq!(names_in(dir.path()), ["r"]);
            assert_eq!(Some(identity(dir.path(), "r")), newest);
        }
    }

    #[test]
    fn a_quarantined_directory_never_replaces_an_empty_directory_at_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let mut exited = std::process::Command::new("true").spawn().unwrap();
        exited.wait().unwrap();
        let quarantine = format!(".d.{}.0123456789abcdef.unlinking", exited.id());
        std::fs::create_dir(dir.path().join(&quarantine)).unwrap();
        std::fs::write(dir.path().join(&quarantine).join("inside"), b"kept").unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();

        let fd = open_dir(dir.path()).unwrap();
        assert_eq!(recover_quarantined(&fd).unwrap(), 0, "nothing put back");
        assert!(dir.path().join("d").is_dir(), "the empty directory stays");
        assert!(!dir.path().join("d").join("inside").exists());
        assert!(dir.path().join(&quarantine).join("inside").exists());
        assert_eq!(
            recover_quarantined(&fd).unwrap(),
            0,
            "and the next pass runs too"
        );
    }
}
