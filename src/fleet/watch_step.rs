//! The fleet watcher's decisions, apart from its I/O: what one watch response means, and the
//! deadlines that keep the view honest within one TTL.
//!
//! Invariants:
//! - A compaction is always a re-read (never applied as changes: events were lost), even when
//!   etcd also marks the watch canceled.
//! - Silence is noticed within half a TTL, and a fresh read is tried again every sixth of one,
//!   so a fleet is never served stale past one TTL and is back within one TTL of etcd answering.
//! - A watch that breaks while following (its member went away) is read again at once, at most
//!   once a TTL: a lone member once, several in turn for up to five sixths of a TTL before the
//!   fleet is called unavailable (another member answers once the cluster has a leader), so
//!   staleness still ends within one TTL.

use std::time::Duration;

/// What a watch response says, in the terms the watcher acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WatchStep {
    /// The watch is set up; nothing changed.
    Started,
    /// Changes to apply.
    Changes,
    /// Nothing changed up to this revision (a progress notice).
    Progress(i64),
    /// The revisions the watch needed are compacted away: read the prefix again.
    Compacted,
    /// etcd ended the watch, for this reason.
    Canceled(String),
}

/// The facts of one watch response the decision needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ResponseFacts<'a> {
    pub(crate) created: bool,
    pub(crate) canceled: bool,
    pub(crate) compact_revision: i64,
    pub(crate) cancel_reason: &'a str,
    pub(crate) events: usize,
    /// The header's revision.
    pub(crate) revision: i64,
}

#[cfg(feature = "fleet")]
impl<'a> ResponseFacts<'a> {
    /// The facts of `response`, as etcd sent it.
    pub(crate) fn of(response: &'a etcd_client::WatchResponse) -> Self {
        Self {
            created: response.created(),
            canceled: response.canceled(),
            compact_revision: response.compact_revision(),
            cancel_reason: response.cancel_reason(),
            events: response.events().len(),
            revision: response.header().map_or(0, |header| header.revision()),
        }
    }
}

/// What the watcher does with a response.
pub(crate) fn step_of(facts: ResponseFacts<'_>) -> WatchStep {
    if facts.compact_revision > 0 {
        return WatchStep::Compacted;
    }
    if facts.canceled {
        let reason = match facts.cancel_reason {
            "" => "no reason given".to_owned(),
            reason => reason.to_owned(),
        };
        return WatchStep::Canceled(reason);
    }
    if facts.events > 0 {
        return WatchStep::Changes;
    }
    if facts.created {
        return WatchStep::Started;
    }
    WatchStep::Progress(facts.revision)
}

/// How following the fleet failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// etcd refused to connect, read or watch.
    Refused,
    /// The watch broke (an error, or the stream ended) while following.
    Broken,
    /// etcd said nothing within its deadline.
    Silent,
    /// etcd canceled the watch.
    Canceled,
}

/// Whether to read again at once instead of calling the fleet unavailable: only for a watch
/// that broke, and only if the last such retry was at least `ttl` ago (`None`: never), so a
/// watch that keeps breaking cannot spin.
pub(crate) fn read_again_at_once(
    failure: Failure,
    since_last_retry: Option<Duration>,
    ttl: Duration,
) -> bool {
    failure == Failure::Broken && since_last_retry.is_none_or(|since| since >= ttl)
}

/// How long the watcher waits for what, for a lease of one TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WatchDeadlines {
    /// How often the watcher asks etcd for a progress notice, so a quiet fleet still answers.
    pub(crate) progress_every: Duration,
    /// How long without any word from etcd before the fleet is unavailable.
    pub(crate) silent_after: Duration,
    /// The pause before trying a fresh read again after a failure.
    pub(crate) retry_after: Duration,
    /// How long members are asked for a read after a watch broke, before the fleet is
    /// unavailable, when there are several (one is asked once).
    reread_grace: Duration,
}

impl WatchDeadlines {
    /// How long to ask `members` for a read after a watch broke: a lone member is asked once
    /// (zero), several for as long as a cluster may take to elect a leader within one TTL.
    pub(crate) fn reread_grace(&self, members: usize) -> Duration {
        if members > 1 {
            self.reread_grace
        } else {
            Duration::ZERO
        }
    }

    /// The deadlines for `ttl` (`--fleet-ttl`).
    pub(crate) fn for_ttl(ttl: Duration) -> Self {
        // Several notices fit in the silence allowed, so one lost answer is not an outage.
        let floor = Duration::from_millis(50);
        Self {
            progress_every: (ttl / 6).max(floor),
            silent_after: (ttl / 2).max(floor * 3),
            retry_after: (ttl / 6).max(floor),
            // Room for a cluster's election (a second by default, longer on a loaded machine),
            // and still within one TTL of the watch breaking.
            reread_grace: (ttl * 5 / 6).max(floor * 3),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> ResponseFacts<'static> {
        ResponseFacts {
            created: false,
            canceled: false,
            compact_revision: 0,
            cancel_reason: "",
            events: 0,
            revision: 9,
        }
    }

    #[test]
    fn each_response_means_one_step() {
        let created = ResponseFacts {
            created: true,
            ..facts()
        };
        assert_eq!(step_of(created), WatchStep::Started);
        let changes = ResponseFacts {
            events: 3,
            ..facts()
        };
        assert_eq!(step_of(changes), WatchStep::Changes);
        assert_eq!(step_of(facts()), WatchStep::Progress(9));
        let canceled = ResponseFacts {
            canceled: true,
            cancel_reason: "permission denied",
            ..facts()
        };
        assert_eq!(
            step_of(canceled),
            WatchStep::Canceled("permission denied".to_owned())
        );
        let silent_cancel = ResponseFacts {
            canceled: true,
            ..facts()
        };
        assert_eq!(
            step_of(silent_cancel),
            WatchStep::Canceled("no reason given".to_owned())
        );
    }

    #[test]
    fn a_compaction_is_a_re_read_even_when_etcd_cancels_the_watch() {
        for canceled in [false, true] {
            let compacted = ResponseFacts {
                canceled,
                compact_revision: 5,
                ..facts()
            };
            assert_eq!(step_of(compacted), WatchStep::Compacted);
        }
    }

    #[test]
    fn only_a_broken_watch_is_read_again_at_once_and_at_most_once_a_ttl() {
        let ttl = Duration::from_secs(3);
        assert!(read_again_at_once(Failure::Broken, None, ttl));
        assert!(read_again_at_once(Failure::Broken, Some(ttl), ttl));
        assert!(!read_again_at_once(
            Failure::Broken,
            Some(ttl - Duration::from_millis(1)),
            ttl
        ));
        for failure in [Failure::Refused, Failure::Silent, Failure::Canceled] {
            assert!(!read_again_at_once(failure, None, ttl), "{failure:?}");
        }
    }

    #[test]
    fn silence_is_noticed_and_a_read_retried_well_within_one_ttl() {
        for ttl in [1, 3, 15, 60].map(Duration::from_secs) {
            let deadlines = WatchDeadlines::for_ttl(ttl);
            assert!(deadlines.silent_after <= ttl / 2, "{ttl:?}");
            assert!(
                deadlines.progress_every * 3 <= deadlines.silent_after,
                "{ttl:?}"
            );
            // A retry, then a connect and a read (each within a third of the TTL, as
            // `etcd::connect` sets them) fit in one TTL.
            assert!(deadlines.retry_after + ttl / 3 * 2 <= ttl, "{ttl:?}");
            // After a broken watch, reads are tried more than once, and given up within a TTL.
            assert!(deadlines.reread_grace(3) < ttl, "{ttl:?}");
            assert!(
                deadlines.reread_grace(3) >= deadlines.progress_every * 3,
                "{ttl:?}"
            );
            assert_eq!(
                deadlines.reread_grace(1),
                Duration::ZERO,
                "a lone member: once"
            );
        }
    }
}
