//! The inotify watch on the running directory, which nudges the loop when a record may have
//! changed.
//!
//! Invariant: the watch only hastens passes; the periodic pass sees every change without it, so
//! a watch that cannot start (or a directory replaced under it) costs one interval, never a
//! change.

use std::path::Path;

use notify::Watcher;
use tokio::sync::mpsc;

/// A watch on one directory, as identified (device, inode) when it started.
pub(super) struct DirectoryWatch {
    identity: Option<(u64, u64)>,
    _watcher: notify::RecommendedWatcher,
}

impl DirectoryWatch {
    /// Keep the watch in `slot` if it still watches the directory at `dir`, else start a new
    /// one (none if that fails).
    pub(super) fn renew(slot: &mut Option<Self>, dir: &Path, nudge: &mpsc::Sender<()>) {
        let identity = directory_identity(dir);
        if let Some(watch) = slot
            && identity.is_some()
            && watch.identity == identity
        {
            return;
        }
        *slot = Self::start(dir, identity, nudge.clone());
    }

    fn start(dir: &Path, identity: Option<(u64, u64)>, nudge: mpsc::Sender<()>) -> Option<Self> {
        let handler = move |event: notify::Result<notify::Event>| {
            let relevant = match &event {
                Ok(event) => may_change_a_record(event),
                Err(_) => true,
            };
            if relevant {
                // Full means a pass is already due: one nudge covers any number of changes.
                let _ = nudge.try_send(());
            }
        };
        let started = notify::recommended_watcher(handler).and_then(|mut watcher| {
            watcher.watch(dir, notify::RecursiveMode::NonRecursive)?;
            Ok(watcher)
        });
        match started {
            Ok(watcher) => Some(Self {
                identity,
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

/// Whether `event` may have changed a record: anything on a record's path but a read of it (the
/// watch sees opens, and every pass and listing opens records; a pass woken by its own reads
/// would only delay the doors' rechecks), or a lost event.
fn may_change_a_record(event: &notify::Event) -> bool {
    use notify::event::{AccessKind, AccessMode, EventKind};
    let read_only = match event.kind {
        EventKind::Access(AccessKind::Close(mode)) => mode != AccessMode::Write,
        EventKind::Access(_) => true,
        _ => false,
    };
    event.need_rescan() || (!read_only && event.paths.iter().any(|p| names_a_record(p)))
}

#[cfg(test)]
mod tests {
    use notify::event::{AccessKind, AccessMode, CreateKind, EventKind, Flag, ModifyKind};

    use super::*;

    fn on_record(kind: EventKind) -> notify::Event {
        notify::Event::new(kind).add_path("/run/ses_0190a5c0f4d17c3e8b2a4d6f8e0c1b3a.json".into())
    }

    #[test]
    fn reads_of_a_record_do_not_nudge_and_everything_else_on_it_does() {
        for kind in [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Read),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
        ] {
            assert!(!may_change_a_record(&on_record(kind)), "{kind:?}");
        }
        for kind in [
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Any),
            EventKind::Remove(notify::event::RemoveKind::File),
        ] {
            assert!(may_change_a_record(&on_record(kind)), "{kind:?}");
        }
        let elsewhere =
            notify::Event::new(EventKind::Create(CreateKind::File)).add_path("/run/x.tmp".into());
        assert!(!may_change_a_record(&elsewhere));
        let lost = notify::Event::new(EventKind::Other).set_flag(Flag::Rescan);
        assert!(may_change_a_record(&lost));
    }
}
