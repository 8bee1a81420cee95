//! This host as its own fleet view shows it: what its publisher last published, and only while
//! the publisher holds its lease.
//!
//! Invariant: the view is handed this host's picture only after a step that renewed the lease,
//! and takes it back when etcd says the lease is lost, or a TTL after the last renewal was sent
//! (whether a step failed or none came at all: a loop that stops completing passes renews
//! nothing). Counting from the sending, not the answer, errs on the side of hiding.

use std::time::{Duration, Instant};

use super::cache::FleetCache;
use super::keys::FleetKeys;
use super::publisher::Publisher;
use super::view::FleetView;

/// This host in this registry's own fleet view: what its publisher published, while it holds
/// its lease.
pub(super) struct Own {
    view: FleetView,
    keys: FleetKeys,
    ttl: Duration,
    /// When the renewal of the last step that renewed the lease was sent, while the view shows
    /// this host.
    shown_since_renewal: Option<Instant>,
    /// A step failed since the view was last handed the picture: it may have written part of
    /// what it wanted before failing, so the next step that renews hands the picture again.
    stale: bool,
}

impl Own {
    pub(super) fn new(view: FleetView, keys: FleetKeys, ttl: Duration) -> Self {
        Self {
            view,
            keys,
            ttl,
            shown_since_renewal: None,
            stale: false,
        }
    }

    /// A step renewed the lease; `wrote` if it wrote anything (or took a new lease).
    pub(super) fn renewed(&mut self, publisher: &Publisher, wrote: bool) {
        // A step that succeeded holds a lease; were it not so, nothing proves one is held.
        let Some(renewed_at) = publisher.renewed_at() else {
            self.hide();
            return;
        };
        if wrote || self.stale || self.shown_since_renewal.is_none() {
            self.stale = false;
            let (published, skipped) =
                FleetCache::read(self.keys.clone(), 0, publisher.published());
            for skipped in skipped {
                tracing::warn!(key = %skipped.key, why = %skipped.why, "fleet: an own entry is not shown");
            }
            self.view.own(Some(published));
        }
        self.shown_since_renewal = Some(renewed_at);
    }

    /// A step failed; `lost` if etcd said the lease is gone. A lease not renewed for a TTL is
    /// gone too, whatever the step said.
    pub(super) fn failed(&mut self, lost: bool) {
        self.stale = true;
        let lapsed = self
            .shown_since_renewal
            .is_some_and(|renewed| renewed.elapsed() >= self.ttl);
        if lost || lapsed {
            self.hide();
        }
    }

    /// When the lease may lapse, as far as this publisher renewed it, while the view shows
    /// this host.
    pub(super) fn lapses_at(&self) -> Option<Instant> {
        self.shown_since_renewal.map(|renewed| renewed + self.ttl)
    }

    pub(super) fn hide(&mut self) {
        if self.shown_since_renewal.take().is_some() {
            self.view.own(None);
        }
    }
}

/// Sleep until `deadline`; without one, never wake.
pub(super) async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_own_view_lapses_a_ttl_after_the_last_renewal_when_no_step_comes() {
        let ttl = Duration::from_millis(20);
        let view = FleetView::new("a".parse().expect("a host id"));
        let mut own = Own::new(view, FleetKeys::new("/p"), ttl);
        // Nothing shown: no deadline, and the wait for one never ends.
        assert_eq!(own.lapses_at(), None);
        let waited = tokio::time::timeout(ttl * 2, until(own.lapses_at())).await;
        assert!(waited.is_err(), "no deadline must never wake");
        let renewed = Instant::now();
        own.shown_since_renewal = Some(renewed);
        assert_eq!(own.lapses_at(), Some(renewed + ttl));
        until(own.lapses_at()).await;
        assert!(
            renewed.elapsed() >= ttl,
            "woke before the lease could lapse"
        );
        own.hide();
        assert_eq!(own.lapses_at(), None, "hidden: nothing left to lapse");
    }
}
