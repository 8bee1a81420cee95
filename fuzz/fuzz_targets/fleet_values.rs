//! The fleet's keys and values as read from etcd: any keys and values, put and deleted in any
//! order into the cache the fleet view serves from.
//!
//! Checks: no panic; a put whose value serde_json does not read as an object is refused and its
//! key leaves the cache (never served); every entry held is under the key its `host_id` and
//! `session_id` name, and its served JSON is an object holding only the members of a session
//! the registry serves (a list written here, apart from the code: `door_token`, `credentials`
//! or any unknown member never goes out).
//!
//! Input: operations split at 0xFF bytes: `P<key>\x00<value>` puts, anything else deletes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use murmur_registry::test_support::fleet::cache::{FleetCache, WatchChange};
use murmur_registry::test_support::fleet::keys::FleetKeys;
use serde_json::Value;

/// The members an entry is served with: the session view's and the entry's own.
const SERVED: [&str; 20] = [
    "session_id",
    "url",
    "pid",
    "process_start",
    "capsule_name",
    "capsule_version",
    "workdir",
    "outlives_launcher",
    "started_at",
    "formation_id",
    "formation_member",
    "spawned_by",
    "records_dir",
    "liveness",
    "card",
    "resources",
    "host_id",
    "changed_at",
    "door_scope",
    "skills",
];

fuzz_target!(|data: &[u8]| {
    let (mut cache, _) = FleetCache::read(FleetKeys::new("/m"), 1, []);
    for (revision, op) in (2..).zip(data.split(|&b| b == 0xFF)) {
        let put = op.strip_prefix(b"P").and_then(|rest| {
            let at = rest.iter().position(|&b| b == 0)?;
            Some((&rest[..at], &rest[at + 1..]))
        });
        match put {
            Some((key, value)) => {
                let applied = cache.apply(revision, WatchChange::Put { key, value });
                let object = serde_json::from_slice::<Value>(value).is_ok_and(|v| v.is_object());
                if !object {
                    assert!(
                        applied.refused.is_some(),
                        "a value that is no object was taken"
                    );
                }
                if applied.refused.is_some() {
                    let held = String::from_utf8_lossy(key);
                    let named = |host: &str, id: &str| held == format!("/m/sessions/{host}/{id}");
                    assert!(
                        !cache
                            .sessions()
                            .any(|s| named(s.host_id().as_str(), s.session_id())),
                        "a refused value's key still served"
                    );
                    assert!(
                        !cache
                            .hosts()
                            .any(|h| held == format!("/m/hosts/{}", h.host_id)),
                        "a refused host value still served"
                    );
                }
            }
            None => {
                cache.apply(revision, WatchChange::Delete { key: op });
            }
        }
    }
    for cached in cache.sessions() {
        let served: Value = serde_json::from_str(cached.json().get()).expect("served JSON decodes");
        let Value::Object(members) = served else {
            panic!("a session served as no object");
        };
        for name in members.keys() {
            assert!(
                SERVED.contains(&name.as_str()),
                "served an unknown member {name:?}"
            );
        }
        assert_eq!(
            members.get("host_id").and_then(Value::as_str),
            Some(cached.host_id().as_str())
        );
    }
});
