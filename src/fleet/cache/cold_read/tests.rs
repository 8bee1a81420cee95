//! A read in pages, its maps built at the end, against inserting each entry in turn.

use super::*;
use crate::fleet::model::MAX_VALUE_BYTES;

/// The cache and skipped entries inserting each of `entries` in turn makes (the old way).
fn one_by_one(entries: &[(Vec<u8>, Vec<u8>)]) -> (FleetCache, Vec<Skipped>) {
    let keys = FleetKeys::new("/p");
    let mut cache = FleetCache {
        keys: keys.clone(),
        revision: 9,
        hosts: BTreeMap::new(),
        sessions: BTreeMap::new(),
    };
    let mut skipped = Vec::new();
    for (key, value) in entries {
        match parse(&keys, key, value) {
            Ok(Parsed::Host(id, entry)) => drop(cache.hosts.insert(id, entry)),
            Ok(Parsed::Session(host, id, entry)) => drop(cache.sessions.insert((host, id), entry)),
            Err(skip) => skipped.push(skip),
        }
    }
    (cache, skipped)
}

fn in_pages(entries: &[(Vec<u8>, Vec<u8>)], keys_a_page: usize) -> (FleetCache, Vec<Skipped>) {
    let keys = FleetKeys::new("/p");
    let mut read = ColdRead::new(keys.clone(), 9);
    for page in entries.chunks(keys_a_page) {
        read.take(ParsedPage::of(
            &keys,
            page.iter().map(|(k, v)| (k.as_slice(), v.as_slice())),
        ));
    }
    read.finish()
}

/// Everything a cache holds, in its order: hosts, then sessions with their JSON.
fn held(cache: &FleetCache) -> (Vec<HostEntry>, Vec<(HostId, String, String)>) {
    let hosts = cache.hosts().map(|host| HostEntry::clone(host)).collect();
    let sessions = (cache.sessions_after(None))
        .map(|((host, id), session)| (host.clone(), id.clone(), session.json().get().to_owned()))
        .collect();
    (hosts, sessions)
}

fn session(host: &str, id: &str, extra: &str) -> (Vec<u8>, Vec<u8>) {
    let key = format!("/p/sessions/{host}/{id}");
    let value = format!(
        r#"{{"host_id":"{host}","changed_at":"t","door_scope":"host","skills":[],
        "session_id":"{id}","liveness":{{"state":"live"}}{extra}}}"#
    );
    (key.into_bytes(), value.into_bytes())
}

fn host(id: &str, names: &str) -> (Vec<u8>, Vec<u8>) {
    let value =
        format!(r#"{{"host_id":"{names}","version":"1","started_at":"t","registry_url":null}}"#);
    (format!("/p/hosts/{id}").into_bytes(), value.into_bytes())
}

#[test]
fn a_read_in_pages_holds_and_skips_what_inserting_in_turn_did() {
    let too_large = format!(r#","pid":"{}""#, "x".repeat(MAX_VALUE_BYTES));
    // A field given twice: refused, as the derive refuses it.
    let repeated = r#","skills":[{"id":"s","tags":[]}]"#;
    let mut entries = vec![
        host("a", "a"),
        host("a-b", "a-b"),
        host("a.c", "a.c"),
        host("b", "a"),
        (b"/p/hosts/d".to_vec(), b"{not json".to_vec()),
        session("a", "ses_1", ""),
        session(
            "a",
            "ses_2",
            r#","door_token":"s3cret","credentials":{"k":"v"}"#,
        ),
        session("a", "ses_3", r#","session_id":"ses_4""#),
        session("a", "ses_5", &too_large),
        session("a", "ses_6", repeated),
        session(
            "a-b",
            "ses_1",
            r#","capsule_name":"c\u00e9","started_at":"s""#,
        ),
        session("a-b", "ses_2", r#","pid":1e400"#),
        session("a.c", "ses_1", r#","card":{"z":[1,2.5,-3e2],"a":null}"#),
        (b"/p/sessions/a/ses_7".to_vec(), b"{\"x\xc1\":1}".to_vec()),
        (b"/p/sessions/a/not a session".to_vec(), b"{}".to_vec()),
        (b"/p/other".to_vec(), b"{}".to_vec()),
    ];
    entries.sort();
    // A key given twice (never in one read, yet): the later value that parses is kept.
    entries.push(session("a", "ses_1", r#","pid":2"#));
    entries.push(session("a", "ses_1", r#","x""#));
    let (want, want_skipped) = one_by_one(&entries);
    assert!(
        (
            want.hosts().len(),
            want.sessions().len(),
            want_skipped.len()
        ) == (3, 4, 10),
        "{want_skipped:?}"
    );
    for keys_a_page in [1, 3, entries.len()] {
        let (got, skipped) = in_pages(&entries, keys_a_page);
        assert_eq!(held(&got), held(&want), "pages of {keys_a_page}");
        assert_eq!(skipped, want_skipped, "pages of {keys_a_page}");
        assert_eq!(got.revision(), 9);
    }
}
