//! The cache fed by a read and a watch: what each step changes, and what it skips.

use super::*;

fn keys() -> FleetKeys {
    FleetKeys::new("/p")
}

fn host_value(id: &str) -> Vec<u8> {
    format!(r#"{{"host_id":"{id}","version":"1","started_at":"2026-12-01T00:00:00Z","registry_url":null}}"#)
        .into_bytes()
}

fn session_value(host: &str, id: &str, state: &str) -> Vec<u8> {
    format!(
        r#"{{"host_id":"{host}","changed_at":"2026-12-01T00:00:00Z","door_scope":"host",
        "skills":[],"session_id":"{id}","liveness":{{"state":"{state}"}}}}"#
    )
    .into_bytes()
}

fn host_key(id: &str) -> Vec<u8> {
    format!("/p/hosts/{id}").into_bytes()
}

fn session_key(host: &str, id: &str) -> Vec<u8> {
    format!("/p/sessions/{host}/{id}").into_bytes()
}

fn read(entries: &[(Vec<u8>, Vec<u8>)]) -> (FleetCache, Vec<Skipped>) {
    FleetCache::read(
        keys(),
        10,
        entries.iter().map(|(k, v)| (k.as_slice(), v.as_slice())),
    )
}

fn put(cache: &mut FleetCache, revision: i64, key: &[u8], value: &[u8]) -> Option<FleetChange> {
    let applied = cache.apply(revision, WatchChange::Put { key, value });
    assert_eq!(applied.refused, None, "a valid entry");
    applied.change
}

/// A short name for each change, to compare sequences.
fn names(changes: &[FleetChange]) -> Vec<String> {
    changes
        .iter()
        .map(|change| match change {
            FleetChange::HostJoined(h) => format!("joined {}", h.host_id),
            FleetChange::HostChanged(h) => format!("host changed {}", h.host_id),
            FleetChange::HostLeft { host_id } => format!("left {host_id}"),
            FleetChange::SessionAdded(s) => format!("added {:?}", s.session_id()),
            FleetChange::SessionChanged { now, .. } => {
                format!("changed {:?}", now.session_id())
            }
            FleetChange::SessionRemoved { session_id, .. } => format!("removed {session_id}"),
        })
        .collect()
}

#[test]
fn a_read_keeps_what_parses_and_says_why_it_skipped_the_rest() {
    let (cache, skipped) = read(&[
        (host_key("a"), host_value("a")),
        (
            session_key("a", "ses_1"),
            session_value("a", "ses_1", "live"),
        ),
        (host_key("b"), b"{not json".to_vec()),
        (host_key("c"), host_value("a")),
        (
            session_key("a", "ses_2"),
            session_value("b", "ses_2", "live"),
        ),
        (
            session_key("a", "ses_3"),
            session_value("a", "ses_4", "live"),
        ),
        (b"/p/other/x".to_vec(), b"{}".to_vec()),
    ]);
    assert_eq!(cache.revision(), 10);
    assert_eq!(cache.hosts().count(), 1);
    assert_eq!(cache.sessions().count(), 1);
    let whys: Vec<_> = skipped
        .iter()
        .map(|s| (s.key.as_str(), s.why.as_str()))
        .collect();
    assert_eq!(whys.len(), 5, "{whys:?}");
    assert!(whys[0].0 == "/p/hosts/b" && whys[0].1.starts_with("not a host entry"));
    assert_eq!(whys[1], ("/p/hosts/c", r#"names host "a""#));
    assert_eq!(whys[2], ("/p/sessions/a/ses_2", r#"names host "b""#));
    assert_eq!(
        whys[3],
        ("/p/sessions/a/ses_3", "its session_id is not its key's")
    );
    assert_eq!(whys[4], ("/p/other/x", "not a key of the fleet layout"));
}

#[test]
fn watch_events_add_change_and_remove_and_a_repeat_changes_nothing() {
    let (mut cache, _) = read(&[]);
    let mut changes = Vec::new();
    changes.extend(put(&mut cache, 11, &host_key("a"), &host_value("a")));
    let added = session_value("a", "ses_1", "live");
    changes.extend(put(&mut cache, 12, &session_key("a", "ses_1"), &added));
    // The publisher re-puts everything after replacing a lost lease: no change.
    assert_eq!(
        put(&mut cache, 13, &session_key("a", "ses_1"), &added),
        None
    );
    assert_eq!(put(&mut cache, 13, &host_key("a"), &host_value("a")), None);
    let gone = session_value("a", "ses_1", "gone");
    changes.extend(put(&mut cache, 14, &session_key("a", "ses_1"), &gone));
    // A host entry rewritten (its load read again) is a change of the host, not a join.
    let reloaded = String::from_utf8(host_value("a"))
        .expect("UTF-8")
        .replace(r#""registry_url":null"#, r#""registry_url":null,"load":{"cpus":2,"load_1m":0.5,"load_5m":0.25,"load_15m":0.0,"memory_total_bytes":100,"memory_available_bytes":50,"measured_at":"2026-12-02T18:00:00Z"}"#);
    changes.extend(put(&mut cache, 14, &host_key("a"), reloaded.as_bytes()));
    for key in [session_key("a", "ses_1"), host_key("a")] {
        changes.extend(cache.apply(15, WatchChange::Delete { key: &key }).change);
    }
    assert_eq!(
        names(&changes),
        [
            "joined a",
            r#"added "ses_1""#,
            r#"changed "ses_1""#,
            "host changed a",
            "removed ses_1",
            "left a"
        ]
    );
    let FleetChange::HostChanged(host) = &changes[3] else {
        panic!("a host change");
    };
    assert_eq!(host.load.as_ref().map(|load| load.cpus), Some(2));
    let FleetChange::SessionChanged { old, now } = &changes[2] else {
        panic!("a change");
    };
    assert_eq!(old.state(), Some("live"));
    assert_eq!(now.state(), Some("gone"));
    assert_eq!(cache.revision(), 15);
    assert_eq!(cache.hosts().count() + cache.sessions().count(), 0);
    // A delete of what is not held (or not a fleet key) changes nothing.
    let nothing = Applied {
        change: None,
        refused: None,
    };
    let key = host_key("z");
    assert_eq!(cache.apply(16, WatchChange::Delete { key: &key }), nothing);
    let key = b"/q/x";
    assert_eq!(cache.apply(16, WatchChange::Delete { key }), nothing);
}

#[test]
fn a_key_overwritten_with_a_bad_value_leaves_the_cache_and_a_listener_hears_so() {
    let (mut cache, _) = read(&[(
        session_key("a", "ses_1"),
        session_value("a", "ses_1", "live"),
    )]);
    let key = session_key("a", "ses_1");
    let value = b"[]";
    let applied = cache.apply(11, WatchChange::Put { key: &key, value });
    let refused = applied.refused.expect("refused");
    assert_eq!(refused.key, "/p/sessions/a/ses_1");
    assert_eq!(names(&Vec::from_iter(applied.change)), ["removed ses_1"]);
    assert_eq!(cache.sessions().count(), 0, "not what etcd holds any more");
    assert_eq!(cache.revision(), 11, "the revision still moves");
    // A bad value under a key not held refuses, and removes nothing.
    let key = session_key("a", "ses_2");
    let applied = cache.apply(12, WatchChange::Put { key: &key, value });
    assert!(applied.refused.is_some());
    assert_eq!(applied.change, None);
}

#[test]
fn the_revision_only_moves_forward() {
    let (mut cache, _) = read(&[]);
    cache.advance(20);
    cache.advance(12);
    assert_eq!(cache.revision(), 20);
}

#[test]
fn a_fresh_read_replaces_the_cache_with_removals_first_and_no_repeats() {
    let (mut cache, _) = read(&[
        (host_key("a"), host_value("a")),
        (host_key("b"), host_value("b")),
        (
            session_key("a", "ses_1"),
            session_value("a", "ses_1", "live"),
        ),
        (
            session_key("a", "ses_2"),
            session_value("a", "ses_2", "live"),
        ),
        (
            session_key("b", "ses_3"),
            session_value("b", "ses_3", "live"),
        ),
    ]);
    let (newer, _) = FleetCache::read(
        keys(),
        40,
        [
            (host_key("a"), host_value("a")),
            (host_key("c"), host_value("c")),
            (
                session_key("a", "ses_1"),
                session_value("a", "ses_1", "live"),
            ),
            (
                session_key("a", "ses_2"),
                session_value("a", "ses_2", "unreachable"),
            ),
            (
                session_key("c", "ses_4"),
                session_value("c", "ses_4", "live"),
            ),
        ]
        .iter()
        .map(|(k, v)| (k.as_slice(), v.as_slice())),
    );
    let changes = cache.replace(newer);
    assert_eq!(
        names(&changes),
        [
            "removed ses_3",
            "left b",
            "joined c",
            r#"changed "ses_2""#,
            r#"added "ses_4""#
        ]
    );
    assert_eq!(cache.revision(), 40);
    let hosts: Vec<_> = cache.hosts().map(|h| h.host_id.as_str()).collect();
    assert_eq!(hosts, ["a", "c"]);
    assert_eq!(cache.sessions().count(), 3);
}

#[test]
fn secrets_a_faulty_host_published_are_dropped() {
    let value = br#"{"host_id":"a","changed_at":"t","door_scope":null,"skills":[],
        "session_id":"ses_1","door_token":"s3cret","credentials":{"k":"v"},"pid":7}"#;
    let (cache, skipped) =
        FleetCache::read(keys(), 1, [(&session_key("a", "ses_1")[..], &value[..])]);
    assert_eq!(skipped, []);
    let entry = cache
        .sessions()
        .next()
        .expect("kept")
        .entry()
        .expect("parses");
    assert_eq!(entry.session.get("door_token"), None);
    assert_eq!(entry.session.get("credentials"), None);
    assert_eq!(entry.session["pid"], 7);
}

#[test]
fn members_a_session_is_not_served_with_are_dropped() {
    let value = br#"{"host_id":"a","changed_at":"t","door_scope":null,"skills":[],
        "session_id":"ses_1","pid":7,"script":"<img src=x>","environ":{"PATH":"/bin"}}"#;
    let (cache, skipped) =
        FleetCache::read(keys(), 1, [(&session_key("a", "ses_1")[..], &value[..])]);
    assert_eq!(skipped, []);
    let cached = cache.sessions().next().expect("kept");
    let entry = cached.entry().expect("the held JSON is a session entry");
    let members: Vec<&str> = entry.session.keys().map(String::as_str).collect();
    assert_eq!(members, ["pid", "session_id"]);
    let json = cached.json().get();
    assert!(!json.contains("script") && !json.contains("environ"));
}

#[test]
fn the_members_kept_are_the_session_views_own() {
    use utoipa::PartialSchema;
    let utoipa::openapi::RefOr::T(utoipa::openapi::schema::Schema::Object(view)) =
        crate::wire::SessionView::schema()
    else {
        panic!("the session view's schema is an object");
    };
    let mut served: Vec<&str> = view.properties.keys().map(String::as_str).collect();
    let mut kept = crate::fleet::model::SESSION_MEMBERS.to_vec();
    served.sort_unstable();
    kept.sort_unstable();
    assert_eq!(kept, served);
}

/// Found by the `fleet_values` fuzz target: serde skipped an unknown member's invalid UTF-8.
#[test]
fn a_value_that_is_not_utf8_is_refused_even_in_a_member_ignored() {
    let mut value = host_value("h");
    value.splice(1..1, *b"\"x\xc1\":1,");
    let (cache, skipped) = FleetCache::read(keys(), 1, [(&host_key("h")[..], &value[..])]);
    assert_eq!(cache.hosts().count(), 0);
    assert_eq!(skipped.len(), 1);
    assert!(skipped[0].why.contains("UTF-8"), "{}", skipped[0].why);
}
