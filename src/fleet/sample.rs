//! Sample fleet entries for unit tests, as other hosts' registries would publish them under the
//! prefix `/p`.
//!
//! Invariant: every value here parses as the entry its key names, unless a test spoils it.

use super::cache::FleetCache;
use super::keys::FleetKeys;

/// The layout the samples use.
pub(crate) fn keys() -> FleetKeys {
    FleetKeys::new("/p")
}

/// `(key, value)` of host `id`'s entry.
pub(crate) fn host(id: &str) -> (Vec<u8>, Vec<u8>) {
    let value = serde_json::json!({
        "host_id": id, "version": "1", "started_at": "2026-12-01T00:00:00Z",
        "registry_url": null
    });
    (
        format!("/p/hosts/{id}").into_bytes(),
        value.to_string().into_bytes(),
    )
}

/// `(key, value)` of session `id` on `host`, started at second `started` of a day, in `state`,
/// offering one skill `skill` tagged `tag`.
pub(crate) fn session(
    host: &str,
    id: &str,
    started: u32,
    state: &str,
    skill: &str,
) -> (Vec<u8>, Vec<u8>) {
    let value = serde_json::json!({
        "host_id": host, "changed_at": "2026-12-01T00:00:00Z", "door_scope": "host",
        "skills": [{"id": skill, "tags": ["tag"]}],
        "session_id": id, "url": "127.0.0.1:1", "pid": 7, "process_start": "1",
        "capsule_name": "c", "capsule_version": "1", "workdir": "/w",
        "outlives_launcher": false, "started_at": format!("2026-12-01T00:00:{started:02}Z"),
        "liveness": {"state": state, "process": "alive", "reason": null}
    });
    (
        format!("/p/sessions/{host}/{id}").into_bytes(),
        value.to_string().into_bytes(),
    )
}

/// The cache of `entries` at `revision`.
pub(crate) fn cache(revision: i64, entries: &[(Vec<u8>, Vec<u8>)]) -> FleetCache {
    let (cache, skipped) = FleetCache::read(
        keys(),
        revision,
        entries.iter().map(|(k, v)| (k.as_slice(), v.as_slice())),
    );
    assert_eq!(skipped, [], "samples parse");
    cache
}
