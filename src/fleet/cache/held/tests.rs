//! The one-pass read against serde's derive: the same entry (less the members not served) for
//! every value the derive takes, the same refusals for the ones it does not.

use super::*;

/// The derive's reading of `text`, its members cut to [`SESSION_MEMBERS`].
fn derived(text: &str) -> Result<SessionEntry, serde_json::Error> {
    let mut entry: SessionEntry = serde_json::from_str(text)?;
    (entry.session).retain(|name, _| SESSION_MEMBERS.contains(&name.as_str()));
    Ok(entry)
}

fn held(text: &str) -> Result<SessionEntry, serde_json::Error> {
    serde_json::from_str::<HeldEntry>(text).map(HeldEntry::into_entry)
}

#[test]
fn every_value_reads_as_the_derive_reads_it_less_what_is_not_served() {
    let values = [
        // An honest host's, as `SessionEntry::encode` writes it.
        r#"{"host_id":"h1","changed_at":"2026-12-01T09:00:00Z","door_scope":"network","skills":[{"id":"s","tags":["a","b"]}],"capsule_name":"c","liveness":{"state":"live","reason":null},"session_id":"ses_1","started_at":"2026-12-01T09:00:00Z"}"#,
        // Members in another order, spaces, escapes, a repeated member (the last kept), and
        // what a reader drops: a door token, credentials, an unknown member.
        r#" { "session_id" : "ses_\u0031", "door_token":"secret", "skills_omitted": 3,
            "skills" : [], "url":"a", "url":"b", "credentials":{"k":[1,2.5,-3e2]},
            "x":null, "host_id":"h\u00e9", "changed_at":"", "pid": 18446744073709551615,
            "liveness": {"z": 1, "a": [true, false]}, "door_scope": null } "#,
        // No door scope at all.
        r#"{"host_id":"h","changed_at":"t","skills":[],"card":{"name":"n"}}"#,
    ];
    for text in values {
        let want = derived(text).expect("the derive takes it");
        let got = held(text).expect("taken");
        assert_eq!(got, want, "{text}");
        let encode = |entry: &SessionEntry| serde_json::to_string(entry).expect("encodes");
        assert_eq!(encode(&got), encode(&want), "{text}");
        let written =
            serde_json::from_str::<HeldEntry>(text).and_then(|held| serde_json::to_string(&held));
        assert_eq!(written.expect("written"), encode(&want), "{text}");
    }
}

#[test]
fn what_the_derive_refuses_is_refused() {
    let refused = [
        "[]",
        "null",
        r#"{"changed_at":"t","skills":[]}"#,
        r#"{"host_id":"h","skills":[]}"#,
        r#"{"host_id":"h","changed_at":"t"}"#,
        r#"{"host_id":"h","host_id":"h","changed_at":"t","skills":[]}"#,
        r#"{"host_id":1,"changed_at":"t","skills":[]}"#,
        r#"{"host_id":"h","changed_at":"t","skills":[],"door_scope":"moon"}"#,
        r#"{"host_id":"h","changed_at":"t","skills":[{"id":"s"}]}"#,
        r#"{"host_id":"h","changed_at":"t","skills":[],"skills_omitted":-1}"#,
        r#"{"host_id":"h","changed_at":"t","skills":[],"url":}"#,
        r#"{"host_id":"h","changed_at":"t","skills":[],"x":[1,}"#,
        r#"{"host_id":"h","changed_at":"t","skills":[],"x":1e400}"#,
        r#"{"host_id":"h","changed_at":"t","skills":[],"pid":-1e999}"#,
        r#"{"host_id":"h","changed_at":"t","skills":[]} trailing"#,
    ];
    let deep = format!(
        r#"{{"host_id":"h","changed_at":"t","skills":[],"x":{}{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    for text in refused.iter().copied().chain([deep.as_str()]) {
        assert!(derived(text).is_err(), "the derive takes {text}");
        assert!(held(text).is_err(), "{text}");
    }
}
