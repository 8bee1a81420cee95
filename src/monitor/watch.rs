//! The inotify watch on the running directory, which nudges the loop when a record may have
//! changed.
//!
//! Invariants:
//! - Every change to a record's entry, and every change to the directory itself (its mode, its
//!   owner, its removal or renaming), sends a nudge after it happens, unless one is already
//!   waiting to be taken: a pass that starts on a nudge sees every change made before it.
//! - A watch that may have missed something (the kernel's queue overflowed, reading it failed,
//!   the directory it watches was removed or renamed) says so ([`DirectoryWatch::renew`]
//!   answers `false`) and is replaced; so is one on a directory replaced by another.
//! - Without a watch, the periodic pass sees every change: a watch that cannot start costs one
//!   interval, never a change.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use notify::Watcher;
use tokio::sync::mpsc;

/// A watch on one directory, as identified (device, inode) when it started.
pub(super) struct DirectoryWatch {
    identity: Option<(u64, u64)>,
    /// Set by the watch's own thread once it may have missed a change.
    broken: Arc<AtomicBool>,
    _watcher: notify::RecommendedWatcher,
}

impl DirectoryWatch {
    /// Keep the watch in `slot` if it still watches the directory at `dir` and has missed
    /// nothing, else start a new one (none if that fails).
    ///
    /// `true` when the watch kept is the one that watched since the previous call, unbroken:
    /// every change to the directory since then has nudged. `false` when it was replaced (or
    /// there is none): a change made before the new one started may have gone unseen.
    pub(super) fn renew(slot: &mut Option<Self>, dir: &Path, nudge: &mpsc::Sender<()>) -> bool {
        let identity = directory_identity(dir);
        if let Some(watch) = slot
            && identity.is_some()
            && watch.identity == identity
            && !watch.broken.load(Ordering::Acquire)
        {
            return true;
        }
        *slot = Self::start(dir, identity, nudge.clone());
        false
    }

    fn start(dir: &Path, identity: Option<(u64, u64)>, nudge: mpsc::Sender<()>) -> Option<Self> {
        let broken = Arc::new(AtomicBool::new(false));
        let handler = {
            let (dir, broken) = (dir.to_path_buf(), Arc::clone(&broken));
            move |event: notify::Result<notify::Event>| {
                let seen = match &event {
                    Ok(event) => what_it_says(event, &dir),
                    Err(_) => Seen::Loss,
                };
                if seen == Seen::Loss {
                    // Before the nudge: the pass it wakes must not trust this watch.
                    broken.store(true, Ordering::Release);
                }
                if seen != Seen::Nothing {
                    // Full means a pass is already due: one nudge covers any number of changes.
                    let _ = nudge.try_send(());
                }
            }
        };
        let started = notify::recommended_watcher(handler).and_then(|mut watcher| {
            watcher.watch(dir, notify::RecursiveMode::NonRecursive)?;
            Ok(watcher)
        });
        match started {
            Ok(watcher) => Some(Self {
                identity,
                broken,
                _watcher: watcher,
            }),
            Err(error) => {
                // The periodic pass still sees every change, one interval later.
                tracing::warn!(dir = %dir.display(), %error, "cannot watch the running directory");
                None
            }
        }
    }
}

/// The directory's device and inode, to notice it being replaced.
fn directory_identity(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(dir)
        .ok()
        .filter(|m| m.is_dir())
        .map(|m| (m.dev(), m.ino()))
}

fn names_a_record(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext == "json")
}

/// What one event of the watch on `dir` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// Nothing that can change what a pass reads.
    Nothing,
    /// A record, or the directory's own mode or owner, may have changed.
    Change,
    /// Events may have been lost, or the watched directory left its path: nothing after it is
    /// seen by this watch.
    Loss,
}

/// What `event`, from the watch on `dir`, says: reads say nothing (the watch sees opens, and
/// every pass and listing opens records; a pass woken by its own reads would only delay the
/// doors' rechecks); anything else on a record's path, or on the directory itself, is a change;
/// a lost event, or the directory removed or renamed, is a loss.
fn what_it_says(event: &notify::Event, dir: &Path) -> Seen {
    use notify::event::{AccessKind, AccessMode, EventKind, ModifyKind};
    if event.need_rescan() {
        return Seen::Loss;
    }
    let read_only = match event.kind {
        EventKind::Access(AccessKind::Close(mode)) => mode != AccessMode::Write,
        EventKind::Access(_) => true,
        _ => false,
    };
    if read_only {
        return Seen::Nothing;
    }
    let on_itself = event.paths.iter().any(|p| p == dir);
    let gone_from_its_path = matches!(
        event.kind,
        EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(_)) | EventKind::Other
    );
    if on_itself && gone_from_its_path {
        Seen::Loss
    } else if on_itself || event.paths.iter().any(|p| names_a_record(p)) {
        Seen::Change
    } else {
        Seen::Nothing
    }
}

#[cfg(test)]
mod tests {
    use notify::event::{
        AccessKind, AccessMode, CreateKind, EventKind, Flag, MetadataKind, ModifyKind, RemoveKind,
        RenameMode,
    };

    use super::*;

    const DIR: &str = "/run";

    fn on(path: &str, kind: EventKind) -> Seen {
        what_it_says(
            &notify::Event::new(kind).add_path(path.into()),
            Path::new(DIR),
        )
    }

    fn on_record(kind: EventKind) -> Seen {
        on("/run/ses_0190a5c0f4d17c3e8b2a4d6f8e0c1b3a.json", kind)
    }

    #[test]
    fn reads_of_a_record_do_not_nudge_and_everything_else_on_it_does() {
        for kind in [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Read),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
        ] {
            assert_eq!(on_record(kind), Seen::Nothing, "{kind:?}");
        }
        for kind in [
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Any),
            EventKind::Modify(ModifyKind::Name(RenameMode::To)),
            EventKind::Remove(RemoveKind::File),
        ] {
            assert_eq!(on_record(kind), Seen::Change, "{kind:?}");
        }
        assert_eq!(
            on("/run/x.tmp", EventKind::Create(CreateKind::File)),
            Seen::Nothing
        );
        let lost = notify::Event::new(EventKind::Other).set_flag(Flag::Rescan);
        assert_eq!(what_it_says(&lost, Path::new(DIR)), Seen::Loss);
    }

    #[test]
    fn the_directory_changed_nudges_and_the_directory_leaving_its_path_breaks_the_watch() {
        let metadata = EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any));
        assert_eq!(on(DIR, metadata), Seen::Change, "chmod or chown");
        assert_eq!(
            on(DIR, EventKind::Access(AccessKind::Open(AccessMode::Any))),
            Seen::Nothing,
            "a pass opening it"
        );
        for kind in [
            EventKind::Remove(RemoveKind::Folder),
            EventKind::Modify(ModifyKind::Name(RenameMode::From)),
        ] {
            assert_eq!(on(DIR, kind), Seen::Loss, "{kind:?}");
        }
    }
}
