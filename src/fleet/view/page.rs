//! One page of the fleet's sessions, by host then session id: what `GET /fleet/sessions?limit=`
//! answers, taken from the view as it is now.
//!
//! Invariants: the page starts strictly after the key it is given (whether that session is
//! still there or not), so a session present for a whole walk is on exactly one of its pages;
//! this registry's own host is shown as its publisher published it, as in every picture
//! ([`super::snapshot_of`]); a page holds at most its limit, and says whether a session the
//! filter keeps follows it.

use std::iter::Peekable;
use std::sync::Arc;

use super::{FleetUnavailable, FleetView};
use crate::fleet::cache::CachedSession;
use crate::fleet::{HostEntry, HostId};

/// A page of the fleet.
#[derive(Debug)]
pub struct FleetPage {
    /// The etcd revision the view describes.
    pub revision: i64,
    /// This registry's own host id.
    pub host_id: HostId,
    /// The hosts of the page's sessions, by id.
    pub hosts: Vec<Arc<HostEntry>>,
    /// The sessions, by host then session id, each with its host's id and its JSON.
    pub sessions: Vec<(HostId, Arc<CachedSession>)>,
    /// Whether the filter keeps a session after the page's last.
    pub more: bool,
}

type Key = (HostId, String);

impl FleetView {
    /// The first `limit` sessions after `after` (from the first without one) that `keep`
    /// admits, by host then session id.
    pub fn page(
        &self,
        after: Option<&Key>,
        limit: usize,
        keep: impl Fn(&CachedSession) -> bool,
    ) -> Result<FleetPage, FleetUnavailable> {
        let shared = self.shared()?;
        let state = shared.lock();
        let cache = match &state.cache {
            Ok(cache) => cache,
            Err(why) => return Err(FleetUnavailable::Unavailable(why.clone())),
        };
        let own = &shared.own;
        let others = (cache.sessions_after(after)).filter(|(key, _)| key.0 != *own);
        let mine = (state.own.as_ref()).map(|mine| mine.sessions_after(after));
        let mut kept = merged(others, mine.into_iter().flatten())
            .filter(|(_, cached)| keep(cached))
            .peekable();
        let sessions: Vec<(HostId, Arc<CachedSession>)> = (kept.by_ref().take(limit))
            .map(|(key, cached)| (key.0.clone(), Arc::clone(cached)))
            .collect();
        let more = kept.peek().is_some();
        let host_of = |id: &HostId| match id == own {
            true => state.own.as_ref().and_then(|mine| mine.host(id)),
            false => cache.host(id),
        };
        let mut hosts: Vec<Arc<HostEntry>> = Vec::new();
        for (id, _) in &sessions {
            let last = hosts.last().map(|host| host.host_id.as_str());
            if last != Some(id.as_str())
                && let Some(host) = host_of(id)
            {
                hosts.push(Arc::clone(host));
            }
        }
        Ok(FleetPage {
            revision: cache.revision(),
            host_id: own.clone(),
            hosts,
            sessions,
            more,
        })
    }
}

/// Two runs of sessions, each by key, as one run by key.
fn merged<'a>(
    a: impl Iterator<Item = (&'a Key, &'a Arc<CachedSession>)>,
    b: impl Iterator<Item = (&'a Key, &'a Arc<CachedSession>)>,
) -> impl Iterator<Item = (&'a Key, &'a Arc<CachedSession>)> {
    let (mut a, mut b): (Peekable<_>, Peekable<_>) = (a.peekable(), b.peekable());
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some((ka, _)), Some((kb, _))) if kb < ka => b.next(),
        (Some(_), _) => a.next(),
        (None, _) => b.next(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::cache::FleetCache;
    use crate::fleet::keys::FleetKeys;

    fn cache_of(entries: &[(&str, &str)]) -> FleetCache {
        let values: Vec<(String, String)> = (entries.iter())
            .map(|(host, id)| {
                let value = serde_json::json!({
                    "host_id": host, "changed_at": "2026-12-01T00:00:00Z",
                    "door_scope": null, "skills": [], "session_id": id,
                    "started_at": "2026-12-01T00:00:00Z",
                    "liveness": {"state": "live", "process": "alive", "reason": null}
                });
                (format!("/p/sessions/{host}/{id}"), value.to_string())
            })
            .collect();
        let pairs = values.iter().map(|(k, v)| (k.as_bytes(), v.as_bytes()));
        let (cache, skipped) = FleetCache::read(FleetKeys::new("/p"), 7, pairs);
        assert_eq!(skipped, []);
        cache
    }

    fn key(host: &str, id: &str) -> Key {
        (host.parse().expect("a host id"), id.to_owned())
    }

    #[test]
    fn pages_walk_by_host_then_session_with_the_own_host_in_its_place() {
        let etcd = cache_of(&[("a", "s1"), ("b", "s1"), ("b", "s2"), ("c", "s1")]);
        let mine = cache_of(&[("b", "s0"), ("b", "s3")]);
        let view = FleetView::new("b".parse().expect("a host id"));
        view.read(etcd);
        view.own(Some(mine));
        let mut walked = Vec::new();
        let mut after = None;
        loop {
            let page = view.page(after.as_ref(), 2, |_| true).expect("a page");
            assert!(page.sessions.len() <= 2);
            walked.extend(
                page.sessions
                    .iter()
                    .map(|(host, c)| key(host.as_str(), c.session_id())),
            );
            let last = walked.last().cloned();
            if !page.more {
                break;
            }
            after = last;
        }
        let expected = [
            key("a", "s1"),
            key("b", "s0"),
            key("b", "s3"),
            key("c", "s1"),
        ];
        assert_eq!(
            walked, expected,
            "etcd's b/s1 and b/s2 are not this host's word"
        );
        let page = view
            .page(Some(&key("b", "s1")), 10, |_| true)
            .expect("a page");
        assert_eq!(page.sessions.len(), 2, "after a key no longer held");
        assert!(!page.more);
        let none = view.page(None, 10, |_| false).expect("a page");
        assert!(none.sessions.is_empty() && !none.more && none.hosts.is_empty());
    }
}
