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
                Ok(event) => event.paths.iter().any(|p| names_a_record(p)) || event.need_rescan(),
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
