//! Files only their owner may see, written whole and removed only when still the same file.
//!
//! The running directory, the token file and etcd's credentials share these rules, so they live
//! here once:
//! - Directories are opened with `O_NOFOLLOW` and checked and fixed through that descriptor,
//!   so what is checked is what is fixed.
//! - A secret is read only from a regular file of ours with no bit for group or others, judged
//!   on the descriptor it is then read from.
//! - A file is replaced atomically: staged under a hidden, random, exclusive name in the same
//!   directory (mode 0600 whatever the umask), fsynced, renamed into place, directory fsynced.
//! - A file is removed only while it is provably the one the caller judged: it is first renamed
//!   to a hidden quarantine name (atomically taking whatever is under the name now), judged
//!   there, and unlinked or put back. A file put back that finds another under its name keeps
//!   the name only if it is the newer (later mtime); it is dropped only for a newer copy or the
//!   same bytes. The quarantine name carries its owner's pid and start token; an entry stranded
//!   there (a crash, or a removal that failed halfway, this process's own included) is put back
//!   by the next pruning pass.

use std::collections::BTreeSet;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, Stat};
use rustix::io::Errno;

/// Open a directory for `*at` calls, refusing to follow a symlink at its last component.
pub(crate) fn open_dir(path: &Path) -> std::io::Result<OwnedFd> {
    Ok(open_dir_errno(path)?)
}

fn open_dir_errno(path: &Path) -> rustix::io::Result<OwnedFd> {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Why a file that must be this user's alone was refused by [`read_private_file`].
#[derive(Debug)]
pub(crate) enum PrivateFileProblem {
    /// The name is a symlink (it is never followed).
    Symlink,
    /// A directory, a FIFO, a device…
    NotRegular,
    /// Another user owns it.
    ForeignOwner {
        /// Its owner.
        owner: u32,
        /// The effective uid of this process.
        me: u32,
    },
    /// Group or others have a bit on it: whatever it holds may already be known.
    OpenToOthers {
        /// Its permission bits.
        mode: u32,
    },
    /// Longer than the caller's limit.
    TooLarge,
    /// It could not be opened or read.
    Io(std::io::Error),
}

/// Read a small file only this user may see: opened without following a symlink, then judged
/// on that descriptor (a regular file, ours, no bit for group or others, at most `max_bytes`),
/// so what is judged is what is read. The secrets the registry keeps (the token, etcd's
/// password) are read through here; their callers word each problem for their own file.
pub(crate) fn read_private_file(
    path: &Path,
    max_bytes: u64,
) -> Result<(Vec<u8>, Stat), PrivateFileProblem> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY;
    let fd = match rustix::fs::open(path, flags | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::LOOP) => return Err(PrivateFileProblem::Symlink),
        Err(e) => return Err(PrivateFileProblem::Io(e.into())),
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| PrivateFileProblem::Io(e.into()))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(PrivateFileProblem::NotRegular);
    }
    let me = rustix::process::geteuid().as_raw();
    if stat.st_uid != me {
        return Err(PrivateFileProblem::ForeignOwner {
            owner: stat.st_uid,
            me,
        });
    }
    if stat.st_mode & 0o077 != 0 {
        return Err(PrivateFileProblem::OpenToOthers {
            mode: stat.st_mode & 0o7777,
        });
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(std::fs::File::from(fd), max_bytes + 1),
        &mut bytes,
    )
    .map_err(PrivateFileProblem::Io)?;
    if bytes.len() as u64 > max_bytes {
        return Err(PrivateFileProblem::TooLarge);
    }
    Ok((bytes, stat))
}

/// Which file a directory entry is, to tell it from one that replaced it under its name.
///
/// Device and inode alone are not enough: a filesystem may hand a freed inode number straight
/// to the next new file. The modification time (at the filesystem's timestamp resolution)
/// tells those apart, and unlike the change time it survives the renames this module makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileIdentity {
    dev: u64,
    ino: u64,
    mtime: (i64, u64),
}

impl FileIdentity {
    pub(crate) fn of(stat: &Stat) -> Self {
        Self {
            dev: stat.st_dev,
            ino: stat.st_ino,
            mtime: (stat.st_mtime, stat.st_mtime_nsec),
        }
    }

    /// The identity of the entry `name` in `dir_fd`, not following a link.
    pub(crate) fn at(dir_fd: &OwnedFd, name: &str) -> std::io::Result<Self> {
        Ok(Self::of(&rustix::fs::statat(
            dir_fd,
            name,
            AtFlags::SYMLINK_NOFOLLOW,
        )?))
    }
}

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
fn random_hex() -> std::io::Result<String> {
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

/// What [`unlink_checked`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unlinked {
    /// The entry was the one judged, and is gone.
    Removed,
    /// Nothing was under the name.
    Missing,
    /// Something else was under the name by then; it was left in place.
    Kept,
}

/// The suffix of an entry moved aside by [`unlink_checked`] while it is judged.
const QUARANTINE: &str = "unlinking";

/// This process as a quarantine names its owner: `<pid>-<start token>`, so that a later holder
/// of the pid is not taken for it. The token is `""` if it cannot be read.
fn quarantine_owner() -> &'static str {
    static OWNER: OnceLock<String> = OnceLock::new();
    OWNER.get_or_init(|| {
        let pid = std::process::id();
        let start = crate::process_identity::process_start_token(pid).unwrap_or_default();
        format!("{pid}-{start}")
    })
}

/// A quarantine name for `name`, unique to this call: `.<name>.<pid>-<start>.<random>.unlinking`.
fn quarantine_name(name: &str) -> std::io::Result<String> {
    Ok(format!(
        ".{name}.{}.{}.{QUARANTINE}",
        quarantine_owner(),
        random_hex()?
    ))
}

/// The quarantine names this process holds right now: an entry of ours not among them was
/// stranded (its removal failed halfway) and is put back like a dead process's.
static HELD_QUARANTINES: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// One quarantine name held for the span of an [`unlink_checked`] call.
struct HeldQuarantine(String);

impl HeldQuarantine {
    fn hold(name: &str) -> std::io::Result<Self> {
        let quarantine = quarantine_name(name)?;
        held_quarantines().insert(quarantine.clone());
        Ok(Self(quarantine))
    }
}

impl Drop for HeldQuarantine {
    fn drop(&mut self) {
        held_quarantines().remove(&self.0);
    }
}

fn held_quarantines() -> std::sync::MutexGuard<'static, BTreeSet<String>> {
    // A set of names: no invariant a panicking holder could break halfway.
    HELD_QUARANTINES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Unlink `dir_fd`/`name` only if `judge` says so of it, and still says so of the entry taken
/// from under the name.
///
/// `judge` gets the directory and a name to look at: first the entry's own (a miss leaves
/// everything untouched, so a record that merely replaced the judged file is never disturbed),
/// then the hidden quarantine name the entry has been moved to. A `false` verdict there puts
/// the entry back by [`put_back`]'s rule: of it and any file under the name by then, the newer
/// keeps the name. A directory is never unlinked. Only plain `rename`, `link` and `unlink` are
/// used, so this works on NFS too; an entry stranded in quarantine by a crash is recovered by
/// [`recover_quarantined`].
pub(crate) fn unlink_checked(
    dir_fd: &OwnedFd,
    name: &str,
    judge: impl Fn(&OwnedFd, &str) -> bool,
) -> std::io::Result<Unlinked> {
    match rustix::fs::statat(dir_fd, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(_) => {}
        Err(Errno::NOENT) => return Ok(Unlinked::Missing),
        Err(e) => return Err(e.into()),
    }
    if !judge(dir_fd, name) {
        return Ok(Unlinked::Kept);
    }
    // The quarantine name is random and new: a plain rename cannot replace anything. It is
    // held before the rename, so recovery in this process never takes it while it is judged.
    let held = HeldQuarantine::hold(name)?;
    let quarantine = held.0.as_str();
    match rustix::fs::renameat(dir_fd, name, dir_fd, quarantine) {
        Ok(()) => {}
        Err(Errno::NOENT) => return Ok(Unlinked::Missing),
        Err(e) => return Err(e.into()),
    }
    let is_dir = rustix::fs::statat(dir_fd, quarantine, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory);
    if !is_dir && judge(dir_fd, quarantine) {
        rustix::fs::unlinkat(dir_fd, quarantine, AtFlags::empty())?;
        return Ok(Unlinked::Removed);
    }
    put_back(dir_fd, quarantine, name, is_dir)?;
    Ok(Unlinked::Kept)
}

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
fn put_back(dir_fd: &OwnedFd, quarantine: &str, name: &str, is_dir: bool) -> std::io::Result<bool> {
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
        let met = match meet(dir_fd, quarantine, name) {
            Ok(met) => met,
            // One of the two went meanwhile: the next link attempt tells which.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
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
type Mtime = (i64, u64);

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

/// Put back every entry a failed or crashed [`unlink_checked`] left in quarantine in `dir_fd`.
///
/// An entry whose quarantining process may still be judging it is left to it: this process's
/// own while an [`unlink_checked`] holds it, another's while its owner's pid is held by the
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

/// A quarantine name taken apart: the entry's own name and who moved it aside.
#[derive(Debug, PartialEq, Eq)]
struct QuarantinedName<'a> {
    name: &'a str,
    pid: u32,
    /// The owner's start token; `None` in names written before tokens were (pid only).
    start: Option<&'a str>,
}

impl<'a> QuarantinedName<'a> {
    /// `.<name>.<pid>[-<start>].<random>.unlinking`, or `None` for any other name.
    fn parse(file_name: &'a str) -> Option<Self> {
        let inner = file_name
            .strip_prefix('.')?
            .strip_suffix(QUARANTINE)?
            .strip_suffix('.')?;
        let (rest, random) = inner.rsplit_once('.')?;
        let (name, owner) = rest.rsplit_once('.')?;
        // `.` and `..` name the directory itself: never an entry to put back.
        let names_an_entry = !matches!(name, "" | "." | "..");
        if !names_an_entry || random.len() != 16 || !random.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let (pid, start) = match owner.split_once('-') {
            Some((pid, start)) => (pid, Some(start)),
            None => (owner, None),
        };
        Some(Self {
            name,
            pid: pid.parse().ok()?,
            start,
        })
    }

    /// Whether the process that moved the entry aside may still be judging it.
    fn owner_may_be_at_work(&self, quarantine: &str) -> bool {
        if self.pid == std::process::id() {
            // Ours while an `unlink_checked` holds it; else stranded by a removal of ours that
            // failed halfway, or left by an earlier holder of our pid.
            return held_quarantines().contains(quarantine);
        }
        match self.start {
            Some(start) => !matches!(
                crate::process_identity::state_of(self.pid, start),
                crate::process_identity::ProcessState::Gone { .. }
            ),
            None => crate::process_identity::checked_pid(self.pid).is_some_and(|pid| {
                matches!(
                    rustix::process::test_kill_process(pid),
                    Ok(()) | Err(Errno::PERM)
                )
            }),
        }
    }
}

/// How [`hold_private_dir`] treats a directory that others may enter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WiderMode {
    /// Narrow it to 0700: the directory is murmur's own (`~/.murmur`, `~/.murmur/running`).
    Narrow,
    /// Refuse it: the directory was named by an operator and may be shared with other uses.
    Refuse,
}

/// Why [`hold_private_dir`] would not use a directory.
#[derive(Debug, thiserror::Error)]
pub enum PrivateDirError {
    /// The directory is unsafe to use; nothing was changed in it.
    #[error("refusing {path}: {problem}")]
    Insecure {
        /// The directory.
        path: std::path::PathBuf,
        /// What is wrong with it, and what to do.
        problem: String,
    },
    /// Creating, opening or fixing it failed.
    #[error("{path}: {cause}")]
    Io {
        /// The directory.
        path: std::path::PathBuf,
        /// The error.
        cause: std::io::Error,
    },
}

/// Create `path` at 0700 if missing; refuse it unless it is a real directory we own; then hold
/// it at 0700 as `wider` says.
pub fn hold_private_dir(path: &Path, wider: WiderMode) -> Result<(), PrivateDirError> {
    let refuse = |problem: String| PrivateDirError::Insecure {
        path: path.to_path_buf(),
        problem,
    };
    let io_err = |cause: std::io::Error| PrivateDirError::Io {
        path: path.to_path_buf(),
        cause,
    };
    match rustix::fs::mkdir(path, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(io_err(e.into())),
    }
    let fd = match open_dir_errno(path) {
        Ok(fd) => fd,
        // With O_DIRECTORY the kernel answers ENOTDIR for a symlink too (ELOOP on some
        // kernels); lstat tells the two refusals apart for the message.
        Err(Errno::LOOP | Errno::NOTDIR) => {
            let is_link = rustix::fs::lstat(path)
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink);
            return Err(refuse(if is_link {
                "it is a symlink; murmur's directories must be real".into()
            } else {
                "it is not a directory".into()
            }));
        }
        Err(e) => return Err(io_err(e.into())),
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| io_err(e.into()))?;
    let me = rustix::process::geteuid().as_raw();
    if stat.st_uid != me {
        return Err(refuse(format!(
            "it is owned by uid {}, not by this user (uid {me})",
            stat.st_uid
        )));
    }
    let mode = stat.st_mode & 0o7777;
    if mode != 0o700 {
        match wider {
            WiderMode::Narrow => {
                rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700))
                    .map_err(|e| io_err(e.into()))?;
            }
            WiderMode::Refuse if mode & 0o077 != 0 => {
                return Err(refuse(format!(
                    "its mode {mode:04o} lets group or others in; a running directory is \
                     private (chmod 700 it if it really is one)"
                )));
            }
            WiderMode::Refuse => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A live `sleep`, killed and reaped on drop, also when an assertion fails before.
    struct Sleeper(std::process::Child);

    impl Sleeper {
        fn spawn() -> Self {
            Self(
                std::process::Command::new("sleep")
                    .arg("30")
                    .spawn()
                    .expect("spawn sleep"),
            )
        }
    }

    impl Drop for Sleeper {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// Moves `name` aside exactly as a removal in this process does, and leaves it there.
    fn strand(dir_fd: &OwnedFd, name: &str) -> String {
        let quarantine = quarantine_name(name).expect("a quarantine name");
        rustix::fs::renameat(dir_fd, name, dir_fd, quarantine.as_str()).expect("quarantine");
        quarantine
    }

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
    fn hidden_siblings_are_hidden_unique_and_name_their_file_and_owner() {
        let staged = hidden_sibling("ses_1.json", "tmp").unwrap();
        let prefix = format!(".ses_1.json.{}.", std::process::id());
        assert!(
            staged.starts_with(&prefix) && staged.ends_with(".tmp"),
            "{staged}"
        );
        assert_ne!(staged, hidden_sibling("ses_1.json", "tmp").unwrap());
    }

    /// A private scratch directory holding one file `a` and one directory `d`, opened.
    fn dir_with_a_file_and_a_dir() -> (tempfile::TempDir, OwnedFd) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"judged").unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let fd = open_dir(dir.path()).unwrap();
        (dir, fd)
    }

    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn an_entry_is_unlinked_only_when_judged_removable_under_both_names() {
        let (dir, fd) = dir_with_a_file_and_a_dir();
        // Judged removable under its name, but not once taken aside (a writer replaced it in
        // between, say): it goes back, whole.
        let first_look_only = |_: &OwnedFd, name: &str| name == "a";
        assert_eq!(
            unlink_checked(&fd, "a", first_look_only).unwrap(),
            Unlinked::Kept
        );
        assert_eq!(names_in(dir.path()), ["a", "d"]);
        assert_eq!(std::fs::read(dir.path().join("a")).unwrap(), b"judged");
        // A directory is never unlinked, whatever the judge says.
        assert_eq!(
            unlink_checked(&fd, "d", |_, _| true).unwrap(),
            Unlinked::Kept
        );
        assert_eq!(names_in(dir.path()), ["a", "d"]);
        assert_eq!(
            unlink_checked(&fd, "a", |_, _| true).unwrap(),
            Unlinked::Removed
        );
        assert_eq!(names_in(dir.path()), ["d"]);
        assert_eq!(
            unlink_checked(&fd, "a", |_, _| true).unwrap(),
            Unlinked::Missing
        );
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

    /// Writes `bytes` to `dir`/`name` and sets its modification time to `mtime`.
    fn write_dated(dir: &Path, name: &str, bytes: &[u8], mtime: Mtime) {
        std::fs::write(dir.join(name), bytes).unwrap();
        let at = |(tv_sec, tv_nsec): Mtime| rustix::fs::Timespec {
            tv_sec,
            tv_nsec: tv_nsec as _,
        };
        let times = rustix::fs::Timestamps {
            last_access: at(mtime),
            last_modification: at(mtime),
        };
        let dir_fd = open_dir(dir).unwrap();
        rustix::fs::utimensat(&dir_fd, name, &times, AtFlags::SYMLINK_NOFOLLOW).unwrap();
    }

    /// Device, inode and modification time of `dir`/`name`.
    fn identity(dir: &Path, name: &str) -> FileIdentity {
        FileIdentity::at(&open_dir(dir).unwrap(), name).unwrap()
    }

    const OLDER: Mtime = (1_700_000_000, 5);
    const NEWER: Mtime = (1_700_000_000, 6);

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
            Unlinked::Kept
        );
        assert_eq!(recovered.get(), 1, "the stale copy went under the name");
        assert_eq!(names_in(dir.path()), ["ses_r.json"]);
        assert_eq!(identity(dir.path(), "ses_r.json"), live);
        assert_eq!(
            std::fs::read(dir.path().join("ses_r.json")).unwrap(),
            b"live"
        );
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
    fn an_operator_named_directory_is_refused_only_when_group_or_others_may_enter() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let set_mode = |mode: u32| {
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).unwrap()
        };
        let mode = || std::fs::metadata(dir.path()).unwrap().permissions().mode() & 0o7777;
        for private in [0o700, 0o1700, 0o500] {
            set_mode(private);
            hold_private_dir(dir.path(), WiderMode::Refuse).unwrap();
            assert_eq!(mode(), private, "a private mode is left as it is");
        }
        for open in [0o750, 0o701, 0o1777] {
            set_mode(open);
            let refused = hold_private_dir(dir.path(), WiderMode::Refuse).unwrap_err();
            assert!(
                matches!(refused, PrivateDirError::Insecure { .. }),
                "{refused:?}"
            );
            assert_eq!(mode(), open, "a refused directory is left as it is");
        }
        hold_private_dir(dir.path(), WiderMode::Narrow).unwrap();
        assert_eq!(mode(), 0o700);
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

    #[test]
    fn quarantine_names_parse_back() {
        let me = std::process::id();
        let ours = quarantine_name("ses_1.json").expect("a name");
        let parsed = QuarantinedName::parse(&ours).expect("our own name parses");
        assert_eq!((parsed.name, parsed.pid), ("ses_1.json", me));
        assert_eq!(
            format!("{me}-{}", parsed.start.unwrap_or("?")),
            quarantine_owner()
        );
        assert_eq!(
            QuarantinedName::parse(".ses_1.json.42-77.0123456789abcdef.unlinking"),
            Some(QuarantinedName {
                name: "ses_1.json",
                pid: 42,
                start: Some("77")
            })
        );
        assert_eq!(
            QuarantinedName::parse(".ses_1.json.42.0123456789abcdef.unlinking"),
            Some(QuarantinedName {
                name: "ses_1.json",
                pid: 42,
                start: None
            })
        );
        for not_ours in [
            ".ses_1.json.42.0123456789abcdef.tmp",
            "ses_1.json.42.0123456789abcdef.unlinking",
            ".ses_1.json.x.0123456789abcdef.unlinking",
            ".ses_1.json.x-1.0123456789abcdef.unlinking",
            "..42.0123456789abcdef.unlinking",
            ".ses_1.json.42.short.unlinking",
            // Hex but not 16 digits, and 16 characters but not hex.
            ".ses_1.json.42.0123abcd.unlinking",
            ".ses_1.json.42.0123456789abcdeg.unlinking",
            ".ses_1.json.42.0123456789abcdef.unlinkin",
            ".ses_1.json.42.0123456789abcdefunlinking",
            // Names of the directory itself.
            "...42.0123456789abcdef.unlinking",
            "....42.0123456789abcdef.unlinking",
        ] {
            assert_eq!(QuarantinedName::parse(not_ours), None, "{not_ours}");
        }
    }
}
