//! How this registry's publishing to the fleet stands, for `/metrics`: whether it holds its
//! lease, and when a step last published. Plain atomics, written by the publishing task
//! (feature `fleet`) and read by scrapes; in a build without the fleet they stay at zero.
//!
//! Invariant: `lease_held` is 1 only while the publisher's last step (or its claim) renewed
//! its lease; a step that failed, or a leave, sets it to 0.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The publishing's figures. Shared by the publishing task and the HTTP side.
#[derive(Debug, Default)]
pub struct PublishFigures {
    lease_held: AtomicBool,
    /// Milliseconds since the Unix epoch of the last successful step; 0 before the first.
    last_published_ms: AtomicU64,
}

impl PublishFigures {
    /// Whether the publisher's last step (or its claim) renewed its lease.
    pub fn lease_held(&self) -> bool {
        self.lease_held.load(Ordering::Relaxed)
    }

    /// When a step last published successfully; `None` before the first.
    pub fn last_published(&self) -> Option<SystemTime> {
        match self.last_published_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(UNIX_EPOCH + Duration::from_millis(ms)),
        }
    }

    /// The publisher holds (`true`) or has lost or given up (`false`) its lease.
    pub fn set_lease_held(&self, held: bool) {
        self.lease_held.store(held, Ordering::Relaxed);
    }

    /// A step published the picture and renewed the lease, now.
    pub fn published(&self) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
            });
        self.last_published_ms.store(now.max(1), Ordering::Relaxed);
        self.lease_held.store(true, Ordering::Relaxed);
    }
}
