//! The fleet's keys and values as read from etcd: any keys and values, put and deleted in any
//! order into the cache the fleet view serves from.
//!
//! Checks: no panic; a put whose value serde_json does not read as an object is refused and its
//! key leaves the cache (never served); every entry held is under the key its `host_id` and
//! `session_id` name, and its served JSON is an object holding only the members of a session
//! the registry serves (as its OpenAPI document describes a fleet session, apart from the
//! code's own list: `door_token`, `credentials` or any unknown member never goes out).
//!
//! Input: operations split at 0xFF bytes: `P<key>\x00<value>` puts, anything else deletes.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use murmur_registry::test_support::fleet::cache::{FleetCache, WatchChange};
use murmur_registry::test_support::fleet::keys::FleetKeys;
use serde_json::Value;

/// The members an entry may be served with, read from the OpenAPI document the registry
/// serves (the session view's, `SessionView`, and the fleet entry's own in `FleetSessionView`),
/// not from the list the cache keeps members by.
static SERVED: LazyLock<Vec<String>> = LazyLock::new(|| {
    let text = murmur_registry::http::openapi_json_text().expect("the OpenAPI document");
    let document: Value = serde_json::from_str(&text).expect("the OpenAPI document is JSON");
    let schemas = &document["components"]["schemas"];
    let members = |schema: &Value| {
        (schema["properties"].as_object().into_iter())
            .flat_map(|properties| properties.keys().cloned())
            .collect::<Vec<_>>()
    };
    let mut served = members(&schemas["SessionView"]);
    let fleet_parts = schemas["FleetSessionView"]["allOf"].as_array();
    served.extend(fleet_parts.into_iter().flatten().flat_map(members));
    for named in ["session_id", "liveness", "host_id", "door_scope"] {
        assert!(
            served.iter().any(|m| m == named),
            "the oracle lacks {named}"
        );
    }
    served
});

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
            assert!(SERVED.contains(name), "served an unknown member {name:?}");
        }
        assert_eq!(
            members.get("host_id").and_then(Value::as_str),
            Some(cached.host_id().as_str())
        );
    }
});
