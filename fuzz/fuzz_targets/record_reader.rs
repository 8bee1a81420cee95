//! The record reader: any bytes under any file name in a real running directory, scanned and
//! then pruned of junk as a pruning pass does.
//!
//! Checks, against an oracle apart from the reader (serde_json's own view of the bytes): no
//! panic; a record is accepted only when the bytes are a JSON object whose `session_id` is
//! the file's stem, with the nine spec fields of their JSON types; such an object is always
//! accepted; a file is removed only when it is named like a murmur record and is not such an
//! object; nothing is ever removed but the one file written.
//!
//! Input: byte 0 picks the name (a murmur record's name, another valid session id, or the
//! next byte's count of bytes as the name); the rest is the file's contents.
#![no_main]

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use murmur_registry::running::scan;
use murmur_registry::test_support::remove_unreadable;
use serde_json::Value;

const MURMUR_STEM: &str = "ses_0123456789abcdef0123456789abcdef";

/// The file name, and the contents, the input describes; `None` for a name no file can have.
fn file_of(data: &[u8]) -> Option<(String, &[u8])> {
    let (&pick, rest) = data.split_first()?;
    match pick % 4 {
        0 | 1 => Some((format!("{MURMUR_STEM}.json"), rest)),
        2 => Some(("other-name_1.json".to_owned(), rest)),
        _ => {
            let (&len, rest) = rest.split_first()?;
            let len = usize::from(len % 48).min(rest.len());
            let name = std::str::from_utf8(&rest[..len]).ok()?;
            let bad = name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']);
            (!bad).then(|| (name.to_owned(), &rest[len..]))
        }
    }
}

/// Whether `bytes` are, to serde_json, an object naming `stem` with the nine spec fields.
fn is_record(bytes: &[u8], stem: &str) -> bool {
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(bytes) else {
        return false;
    };
    let string = |key: &str| map.get(key).is_some_and(Value::is_string);
    map.get("session_id").and_then(Value::as_str) == Some(stem)
        && map.get("url").is_some_and(|u| u.is_string() || u.is_null())
        && map
            .get("pid")
            .and_then(Value::as_u64)
            .is_some_and(|pid| u32::try_from(pid).is_ok())
        && [
            "process_start",
            "capsule_name",
            "capsule_version",
            "workdir",
            "started_at",
        ]
        .into_iter()
        .all(string)
        && map.get("outlives_launcher").is_some_and(Value::is_boolean)
}

fn is_murmur_name(name: &str) -> bool {
    name.strip_suffix(".json")
        .and_then(|stem| stem.strip_prefix("ses_"))
        .is_some_and(|hex| {
            hex.len() == 32
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> bool {
    use std::io::Write;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dir.join(name));
    file.and_then(|mut f| f.write_all(bytes)).is_ok()
}

fuzz_target!(|data: &[u8]| {
    let Some((name, bytes)) = file_of(data) else {
        return;
    };
    let home = tempfile::tempdir().expect("a temporary home");
    let dir = home.path().join(".murmur/running");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .expect("a private running directory");
    if !write(&dir, &name, bytes) {
        return;
    }
    let seen = scan(&dir, None).expect("the running directory reads");
    let stem = name.strip_suffix(".json");
    let judged_record = stem.is_some_and(|stem| is_record(bytes, stem));
    for record in &seen.records {
        assert_eq!(
            Some(record.session_id.as_str()),
            stem,
            "a record under another name"
        );
        assert!(
            judged_record,
            "accepted what serde_json does not read as a record"
        );
    }
    let valid_name = stem.is_some_and(|s| {
        !s.is_empty()
            && s.len() <= 128
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    });
    if judged_record && valid_name && !name.starts_with('.') {
        assert_eq!(
            seen.records.len(),
            1,
            "refused a record: {:?}",
            seen.unreadable
        );
    }
    let removed = remove_unreadable(&dir, &seen.unreadable).expect("the pass runs");
    let left: Vec<_> = std::fs::read_dir(&dir)
        .expect("the directory lists")
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .collect();
    if removed.is_empty() {
        assert_eq!(
            left.len(),
            1,
            "a file went without being reported: {left:?}"
        );
    } else {
        assert_eq!(removed.len(), 1);
        assert!(left.is_empty(), "reported removed, still there: {left:?}");
        assert!(
            is_murmur_name(&name),
            "removed a file not named like a record: {name:?}"
        );
        assert!(!judged_record, "removed what serde_json reads as a record");
    }
});
