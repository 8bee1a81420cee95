//! Records on disk, with real files in a private temporary running directory per test:
//!
//! - parsing every generation of record (the nine spec fields are required, later and unknown
//!   keys are accepted, a later key of an unexpected shape reads as absent, `url` may be
//!   `null`); why a record does not parse is told without quoting any of its values;
//! - `scan` (reports), `list` (records only; both change nothing) and a pruning pass (unlinks
//!   what can never be a record) facing
//!   truncated JSON, oversized files (reported, never removed: size proves nothing), a record
//!   of 40 credentials over murmur's old 64 KiB cap (read), symlinks, directories, FIFOs, name
//!   mismatches, names that are not session ids (reported, never removed), and the staging /
//!   control / hidden files that are not records at all; newest-first ordering;
//! - `read_record`; `running_dir_in` creating, narrowing and refusing directories;
//! - `RunningGuard`: mode, round trip, secrets never written or printed, removal on drop (only
//!   of its own file), and atomic replacement under a racing reader;
//! - `prune`: only for `Gone`, only records read from disk, only the very file that was read,
//!   together with its `.control`.

mod common;

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{
    DEADLINE, ExitedChild, NINE_FIELDS, RecordJson, TestProcess, assert_absent, dir_snapshot,
    make_fifo, mode_of, replace_by_rename, session_id, temp_dir, thread_bytes_read, within,
    write_raw,
};
use murmur_registry::registry::{PruneReport, Registry};
use murmur_registry::running::{
    DoorProbe, FileFate, Liveness, MAX_RECORD_BYTES, ProcessState, RecordCache, RunningError,
    RunningGuard, RunningRecord, Secret, Unreadable, UnreadableEntry, list, process_state, prune,
    read_record, running_dir_in, scan, still_the_file_read,
};
use serde_json::{Value, json};

fn formation_id() -> String {
    format!("frm_{}", &session_id()[4..])
}

fn names_of<R: std::borrow::Borrow<RunningRecord>>(records: &[R]) -> Vec<String> {
    records
        .iter()
        .map(|r| r.borrow().session_id.clone())
        .collect()
}

/// One pruning pass over `dir`, as `DELETE /sessions` and `murmur-registry prune` run it.
fn prune_all(dir: &Path) -> PruneReport {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime
        .block_on(Registry::new(dir, DoorProbe::new()).prune_all())
        .expect("a pruning pass")
}

fn unreadable_kinds(entries: &[UnreadableEntry]) -> Vec<(String, Unreadable)> {
    entries
        .iter()
        .map(|e| (e.file_name.clone(), e.why.clone()))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------------

#[test]
fn a_spec_generation_record_with_only_the_nine_fields_parses() {
    let id = session_id();
    let json = json!({
        "session_id": id,
        "url": "localhost:41235",
        "pid": 4242,
        "process_start": "123456",
        "capsule_name": "scribe",
        "capsule_version": "0.3.1",
        "workdir": "/home/u/.murmur/sessions/x",
        "outlives_launcher": true,
        "started_at": "2026-01-02T03:04:05Z",
    });
    let record = RunningRecord::parse(json.to_string().as_bytes()).unwrap();
    assert_eq!(record.session_id, id);
    assert_eq!(record.url.as_deref(), Some("localhost:41235"));
    assert_eq!(record.pid, 4242);
    assert_eq!(record.process_start, "123456");
    assert_eq!(record.capsule_name, "scribe");
    assert_eq!(record.capsule_version, "0.3.1");
    assert_eq!(record.workdir, Path::new("/home/u/.murmur/sessions/x"));
    assert!(record.outlives_launcher);
    assert_eq!(record.started_at, "2026-01-02T03:04:05Z");
    assert_eq!(record.records_dir, None);
    assert!(record.door_token.is_none());
    assert!(record.credentials.is_empty());
    assert_eq!(record.formation_id, None);
    assert!(!record.formation_entry && !record.formation_lifeline);
    assert_eq!(
        record.source_path(),
        None,
        "parsed from bytes, not from disk"
    );
}

#[test]
fn a_later_generation_record_with_every_optional_key_and_unknown_keys_parses() {
    let id = session_id();
    let frm = formation_id();
    let spawner = session_id();
    let bytes = RecordJson::new(&id)
        .set("records_dir", "/home/u/.murmur/records/x")
        .set("door_token", "door-tok-0123")
        .set("credentials", json!({"ops": "cred-a", "ci": "cred-b"}))
        .set("formation_id", frm.as_str())
        .set("formation_member", "reviewer")
        .set("formation_entry", true)
        .set("formation_lifeline", true)
        .set(
            "formation_launcher",
            json!({"pid": 777, "process_start": "999"}),
        )
        .set("spawned_by", spawner.as_str())
        .set(
            "a_key_from_the_future",
            json!({"nested": [1, 2, {"x": null}]}),
        )
        .set("another_unknown", 12.5)
        .to_bytes();
    let record = RunningRecord::parse(&bytes).unwrap();
    assert_eq!(record.session_id, id);
    assert_eq!(
        record.records_dir.as_deref(),
        Some(Path::new("/home/u/.murmur/records/x"))
    );
    assert_eq!(record.door_token, Some(Secret::new("door-tok-0123")));
    assert_eq!(record.credentials.len(), 2);
    assert_eq!(record.credentials["ops"].expose(), "cred-a");
    assert_eq!(record.credentials["ci"].expose(), "cred-b");
    assert_eq!(record.formation_id.as_deref(), Some(frm.as_str()));
    assert_eq!(record.formation_member.as_deref(), Some("reviewer"));
    assert!(record.formation_entry);
    assert!(record.formation_lifeline);
    let launcher = record.formation_launcher.as_ref().unwrap();
    assert_eq!(
        (launcher.pid, launcher.process_start.as_str()),
        (777, "999")
    );
    assert_eq!(record.spawned_by.as_deref(), Some(spawner.as_str()));
}

#[test]
fn a_null_url_parses_as_a_record_without_a_door() {
    let record = RecordJson::fresh().no_door().parse();
    assert_eq!(record.url, None);
}

#[test]
fn a_record_missing_any_one_of_the_nine_fields_does_not_parse() {
    let full = RecordJson::fresh();
    assert!(RunningRecord::parse(&full.to_bytes()).is_ok());
    for field in NINE_FIELDS {
        let bytes = full.clone().without(field).to_bytes();
        assert!(
            RunningRecord::parse(&bytes).is_err(),
            "a record without `{field}` parsed"
        );
    }
}

#[test]
fn a_record_with_a_wrongly_typed_spec_field_does_not_parse() {
    let full = RecordJson::fresh();
    let wrong: [(&str, Value); 11] = [
        ("session_id", json!(5)),
        ("url", json!(41235)),
        ("pid", json!("4242")),
        ("pid", json!(-1)),
        ("pid", json!(4_294_967_296_u64)),
        ("process_start", json!(123)),
        ("capsule_name", Value::Null),
        ("capsule_version", json!(1)),
        ("workdir", json!(["/w"])),
        ("outlives_launcher", json!("true")),
        ("started_at", json!(0)),
    ];
    for (field, value) in wrong {
        let bytes = full.clone().set(field, value.clone()).to_bytes();
        assert!(
            RunningRecord::parse(&bytes).is_err(),
            "`{field}: {value}` parsed"
        );
    }
    for not_an_object in [&b"[]"[..], b"null", b"\"ses\"", b""] {
        assert!(RunningRecord::parse(not_an_object).is_err());
    }
}

/// Later keys, each with a value of a shape this crate does not expect.
fn later_keys_of_unexpected_shape() -> [(&'static str, Value); 12] {
    [
        ("credentials", Value::Null),
        ("credentials", json!({"ops": 1})),
        ("credentials", json!(["cred"])),
        ("formation_entry", Value::Null),
        ("formation_lifeline", json!("yes")),
        ("formation_launcher", json!({"pid": 1})),
        ("formation_launcher", json!("launcher")),
        ("door_token", json!(42)),
        ("records_dir", json!(7)),
        ("formation_id", json!([])),
        ("formation_member", json!({"name": "x"})),
        ("spawned_by", json!(false)),
    ]
}

#[test]
fn later_keys_of_an_unexpected_shape_read_as_absent() {
    let mut all_at_once = RecordJson::fresh();
    for (key, value) in later_keys_of_unexpected_shape() {
        all_at_once = all_at_once.set(key, value.clone());
        let record = RunningRecord::parse(&RecordJson::fresh().set(key, value.clone()).to_bytes())
            .unwrap_or_else(|e| panic!("`{key}: {value}` made the record unparseable: {e}"));
        assert_eq!(record.pid, std::process::id(), "{key}: {value}");
    }
    let record = RunningRecord::parse(&all_at_once.to_bytes()).expect("every odd key at once");
    assert_eq!(record.session_id, all_at_once.session_id());
    assert!(record.credentials.is_empty());
    assert!(!record.formation_entry && !record.formation_lifeline);
    assert_eq!(record.formation_launcher, None);
    assert!(record.door_token.is_none());
    assert_eq!(record.records_dir, None);
    assert_eq!(record.formation_id, None);
    assert_eq!(record.formation_member, None);
    assert_eq!(record.spawned_by, None);
    // One odd key does not cost the well-shaped ones beside it.
    let mixed = RecordJson::fresh()
        .set("door_token", json!(42))
        .set("formation_member", "reviewer")
        .set("credentials", json!({"ops": "cred-a"}))
        .set("formation_launcher", json!({"pid": 1}))
        .parse();
    assert_eq!(mixed.formation_member.as_deref(), Some("reviewer"));
    assert_eq!(mixed.credentials["ops"].expose(), "cred-a");
    assert!(mixed.door_token.is_none());
}

#[test]
fn a_record_with_odd_later_keys_is_listed_and_never_removed() {
    let dir = temp_dir();
    let mut paths = Vec::new();
    let mut all_at_once = RecordJson::fresh();
    for (key, value) in later_keys_of_unexpected_shape() {
        all_at_once = all_at_once.set(key, value.clone());
        paths.push(RecordJson::fresh().set(key, value).write_in(dir.path()));
    }
    paths.push(all_at_once.write_in(dir.path()));
    let found = scan(dir.path(), None).unwrap();
    assert!(found.unreadable.is_empty(), "{:?}", found.unreadable);
    assert_eq!(found.records.len(), paths.len());
    assert_eq!(list(dir.path()).unwrap().len(), paths.len());
    for path in &paths {
        assert!(path.exists(), "{} was removed", path.display());
    }
}

/// A value that must never appear in any reason given for a record.
const SECRET: &str = "tok-SECRET-123";

/// Records in `dir` that do not parse, each with [`SECRET`] where a value should be or beside
/// it (as its door token and as an unknown member): a field of the wrong type, each in turn;
/// not JSON at all; cut short; a field missing. Their session ids, and the one missing `pid`.
fn write_records_hiding_the_secret(dir: &Path) -> (Vec<String>, String) {
    let wrong: [(&str, Value); 8] = [
        ("pid", json!(SECRET)),
        ("process_start", json!([SECRET])),
        ("outlives_launcher", json!(SECRET)),
        ("url", json!({ SECRET: SECRET })),
        ("capsule_name", json!(7)),
        ("workdir", json!({"path": SECRET})),
        ("started_at", json!([1, SECRET])),
        ("session_id", json!({ "id": SECRET })),
    ];
    let mut ids = Vec::new();
    for (field, value) in wrong {
        let record = RecordJson::fresh()
            .door_token(SECRET)
            .set(field, value)
            .set("padding", SECRET);
        // Written under a name of its own, since `session_id` itself may be the odd value.
        let id = session_id();
        record.write_as(dir, &format!("{id}.json"));
        ids.push(id);
    }
    let bare = session_id();
    write_raw(
        dir,
        &format!("{bare}.json"),
        format!(r#"{{"pid": {SECRET}}}"#),
    );
    ids.push(bare);
    let cut = session_id();
    write_raw(
        dir,
        &format!("{cut}.json"),
        format!(r#"{{"pid": "{SECRET}"#),
    );
    ids.push(cut);
    // A missing field is named by its key.
    let missing = session_id();
    RecordJson::new(&missing)
        .without("pid")
        .door_token(SECRET)
        .write_in(dir);
    ids.push(missing.clone());
    (ids, missing)
}

#[test]
fn why_a_record_does_not_parse_never_quotes_its_values() {
    let dir = temp_dir();
    let (ids, missing) = write_records_hiding_the_secret(dir.path());

    let found = scan(dir.path(), None).unwrap();
    assert!(found.records.is_empty(), "{:?}", names_of(&found.records));
    assert_eq!(found.unreadable.len(), ids.len(), "{:?}", found.unreadable);
    let mut shown = vec![format!("{found:?}")];
    for entry in &found.unreadable {
        assert!(
            matches!(entry.why, Unreadable::Malformed(_)),
            "{}: {:?}",
            entry.file_name,
            entry.why
        );
        shown.push(entry.why.to_string());
        shown.push(format!("{entry:?}"));
    }
    for id in &ids {
        let read = read_record(dir.path(), id);
        let Err(error @ RunningError::Unreadable(_)) = &read else {
            panic!("{id}: expected Unreadable, got {read:?}");
        };
        shown.push(error.to_string());
        shown.push(format!("{error:?}"));
    }
    for text in &shown {
        assert!(!text.contains(SECRET), "a value was quoted: {text}");
        assert!(
            !text.contains("SECRET"),
            "part of a value was quoted: {text}"
        );
    }
    let missing_reason = found
        .unreadable
        .iter()
        .find(|e| e.file_name == format!("{missing}.json"))
        .map(|e| e.why.to_string());
    assert_eq!(
        missing_reason.as_deref(),
        Some("is not a record: missing field `pid`")
    );
}

// ---------------------------------------------------------------------------------------------
// scan and list
// ---------------------------------------------------------------------------------------------

#[test]
fn list_keeps_valid_records_of_every_generation() {
    let dir = temp_dir();
    let spec = RecordJson::fresh();
    let later = RecordJson::fresh()
        .set("records_dir", "/r")
        .set("door_token", "tok")
        .set("formation_id", formation_id())
        .set(
            "formation_launcher",
            json!({"pid": 1, "process_start": "1"}),
        )
        .set("unknown_key", json!({"a": 1}));
    let script = RecordJson::fresh().no_door();
    let paths: Vec<_> = [&spec, &later, &script]
        .iter()
        .map(|r| r.write_in(dir.path()))
        .collect();

    let found = scan(dir.path(), None).unwrap();
    assert!(found.unreadable.is_empty(), "{:?}", found.unreadable);
    let listed = list(dir.path()).unwrap();
    assert_eq!(listed.len(), 3);
    for path in &paths {
        assert!(path.exists(), "{} was removed", path.display());
    }
    let script_listed = listed
        .iter()
        .find(|r| r.session_id == script.session_id())
        .unwrap();
    assert_eq!(script_listed.url, None);
    assert_eq!(
        script_listed.source_path().as_deref(),
        Some(dir.path().join(script.file_name()).as_path())
    );
}

#[test]
fn records_come_newest_session_first() {
    let dir = temp_dir();
    let ids: Vec<String> = (0..6).map(|_| session_id()).collect();
    // Written in an order unrelated to their age.
    for i in [3, 0, 5, 1, 4, 2] {
        RecordJson::new(&ids[i]).write_in(dir.path());
    }
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    assert_eq!(
        names_of(&scan(dir.path(), None).unwrap().records),
        newest_first
    );
    assert_eq!(names_of(&list(dir.path()).unwrap()), newest_first);
}

#[test]
fn truncated_json_is_reported_by_scan_and_unlinked_by_a_pruning_pass() {
    let dir = temp_dir();
    let good = RecordJson::fresh();
    let good_path = good.write_in(dir.path());
    let broken = RecordJson::fresh();
    let bytes = broken.to_bytes();
    let broken_path = write_raw(dir.path(), &broken.file_name(), &bytes[..bytes.len() / 2]);

    let found = scan(dir.path(), None).unwrap();
    assert_eq!(names_of(&found.records), [good.session_id()]);
    assert_eq!(found.unreadable.len(), 1);
    assert_eq!(found.unreadable[0].file_name, broken.file_name());
    assert!(
        matches!(found.unreadable[0].why, Unreadable::Malformed(_)),
        "{:?}",
        found.unreadable[0].why
    );
    assert!(found.unreadable[0].is_removable());
    assert!(broken_path.exists(), "scan must not remove anything");

    assert_eq!(names_of(&list(dir.path()).unwrap()), [good.session_id()]);
    assert!(broken_path.exists(), "list must not remove anything");
    assert_eq!(prune_all(dir.path()).removed_unreadable, found.unreadable);
    assert_absent(&broken_path);
    assert!(good_path.exists());
}

/// Size proves nothing about being a record (murmur sets no limit): a file over the cap is
/// reported without being read past it, and a pruning pass keeps it, with its `.control`.
#[test]
fn an_oversized_record_is_too_large_not_read_past_the_cap_and_kept_by_a_pruning_pass() {
    let dir = temp_dir();
    let big = RecordJson::fresh().set("padding", "x".repeat(10 * 1024 * 1024));
    let big_bytes = big.to_bytes();
    // Were it read whole, it would be a perfectly good record: only the cap can refuse it.
    assert!(RunningRecord::parse(&big_bytes).is_ok());
    let big_path = write_raw(dir.path(), &big.file_name(), &big_bytes);
    let control = write_raw(dir.path(), &format!("{}.control", big.session_id()), "ctl");
    drop(big_bytes);

    let before = thread_bytes_read();
    let found = scan(dir.path(), None).unwrap();
    let read = thread_bytes_read() - before;
    assert!(found.records.is_empty());
    assert_eq!(
        unreadable_kinds(&found.unreadable),
        [(big.file_name(), Unreadable::TooLarge)]
    );
    assert!(
        read < 1024 * 1024,
        "scan read {read} bytes of a 10 MB file; the cap is {MAX_RECORD_BYTES}"
    );

    assert!(!found.unreadable[0].is_removable());

    assert!(list(dir.path()).unwrap().is_empty());
    assert!(big_path.exists(), "list must not remove anything");
    let before = dir_snapshot(dir.path());
    assert!(prune_all(dir.path()).removed_unreadable.is_empty());
    assert!(big_path.exists() && control.exists());
    assert_eq!(dir_snapshot(dir.path()), before);
}

/// The record of the report that found the old 64 KiB cap: 40 credentials of some 1.8 KB,
/// 72,925 bytes in all. It is a record like any other.
#[test]
fn a_record_of_forty_long_credentials_reads_as_a_record() {
    let dir = temp_dir();
    let credentials: serde_json::Map<String, Value> = (0..40)
        .map(|n| {
            (
                format!("peer-{n:02}"),
                json!(format!("{n:02}{}", "k".repeat(1_800))),
            )
        })
        .collect();
    let record = RecordJson::fresh().set("credentials", Value::Object(credentials));
    let path = record.write_in(dir.path());
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(
        (64 * 1024..MAX_RECORD_BYTES).contains(&size),
        "{size} bytes"
    );

    let found = scan(dir.path(), None).unwrap();
    assert!(found.unreadable.is_empty(), "{:?}", found.unreadable);
    assert_eq!(names_of(&found.records), [record.session_id()]);
    assert_eq!(found.records[0].credentials.len(), 40);
    let read = read_record(dir.path(), &record.session_id()).unwrap();
    assert_eq!(read.map(|r| r.credentials.len()), Some(40));
}

#[test]
fn a_record_of_exactly_the_cap_is_read_and_one_byte_more_is_too_large() {
    let dir = temp_dir();
    let cap = usize::try_from(MAX_RECORD_BYTES).unwrap();
    let padded = |total: usize| {
        let base = RecordJson::fresh().set("padding", "");
        let len = base.to_bytes().len();
        base.set("padding", "p".repeat(total - len))
    };
    let at_cap = padded(cap);
    assert_eq!(at_cap.to_bytes().len(), cap);
    at_cap.write_in(dir.path());
    let over = padded(cap + 1);
    assert_eq!(over.to_bytes().len(), cap + 1);
    over.write_in(dir.path());

    let found = scan(dir.path(), None).unwrap();
    assert_eq!(names_of(&found.records), [at_cap.session_id()]);
    assert_eq!(
        unreadable_kinds(&found.unreadable),
        [(over.file_name(), Unreadable::TooLarge)]
    );
}

#[test]
fn a_symlinked_record_is_never_followed_and_pruning_removes_only_the_link() {
    let dir = temp_dir();
    let elsewhere = temp_dir();
    let record = RecordJson::fresh();
    // The target is a valid record for the very session the link is named after.
    let target = record.write_in(elsewhere.path());
    let target_bytes = std::fs::read(&target).unwrap();
    let link = dir.path().join(record.file_name());
    std::os::unix::fs::symlink(&target, &link).unwrap();

    let found = scan(dir.path(), None).unwrap();
    assert!(found.records.is_empty(), "a symlink was followed");
    assert_eq!(
        unreadable_kinds(&found.unreadable),
        [(record.file_name(), Unreadable::Symlink)]
    );
    assert!(std::fs::symlink_metadata(&link).is_ok());

    assert!(list(dir.path()).unwrap().is_empty());
    assert!(
        std::fs::symlink_metadata(&link).is_ok(),
        "list removes nothing"
    );
    prune_all(dir.path());
    assert_absent(&link);
    assert_eq!(
        std::fs::read(&target).unwrap(),
        target_bytes,
        "the link's target must survive untouched"
    );
}

#[test]
fn a_directory_named_like_a_record_is_reported_and_never_removed() {
    let dir = temp_dir();
    let record_dir = dir.path().join("x.json");
    std::fs::create_dir(&record_dir).unwrap();
    let inside = write_raw(&record_dir, "keep.txt", "not ours to judge");

    let found = scan(dir.path(), None).unwrap();
    assert_eq!(
        unreadable_kinds(&found.unreadable),
        [("x.json".to_owned(), Unreadable::Directory)]
    );
    assert!(!found.unreadable[0].is_removable());

    assert!(list(dir.path()).unwrap().is_empty());
    assert!(prune_all(dir.path()).removed_unreadable.is_empty());
    assert!(record_dir.is_dir());
    assert!(inside.exists());
    // Still reported on the next pass.
    assert_eq!(scan(dir.path(), None).unwrap().unreadable.len(), 1);
}

#[test]
fn a_fifo_named_like_a_record_does_not_block_and_is_removed_by_a_pruning_pass() {
    let dir = temp_dir();
    let fifo_name = format!("{}.json", session_id());
    let fifo = dir.path().join(&fifo_name);
    make_fifo(&fifo);
    let path = dir.path().to_path_buf();
    let found = within("scan of a directory holding a FIFO", DEADLINE, move || {
        scan(&path, None).unwrap()
    });
    assert!(found.records.is_empty());
    assert_eq!(
        unreadable_kinds(&found.unreadable),
        [(fifo_name.clone(), Unreadable::NotRegularFile)]
    );

    let path = dir.path().to_path_buf();
    let listed = within("list of a directory holding a FIFO", DEADLINE, move || {
        list(&path).unwrap()
    });
    assert!(listed.is_empty());
    let path = dir.path().to_path_buf();
    within("a pruning pass over a FIFO", DEADLINE, move || {
        prune_all(&path)
    });
    assert_absent(&fifo);
}

#[test]
fn a_record_whose_session_id_disagrees_with_its_file_name_is_reported_and_unlinked() {
    let dir = temp_dir();
    let inner = RecordJson::fresh();
    let outer_name = format!("{}.json", session_id());
    let path = inner.write_as(dir.path(), &outer_name);

    let found = scan(dir.path(), None).unwrap();
    assert!(found.records.is_empty());
    assert_eq!(
        unreadable_kinds(&found.unreadable),
        [(outer_name, Unreadable::NameMismatch(inner.session_id()))]
    );
    assert!(path.exists());

    assert!(list(dir.path()).unwrap().is_empty());
    assert!(path.exists(), "list removes nothing");
    prune_all(dir.path());
    assert_absent(&path);
}

#[test]
fn names_that_are_not_session_ids_are_reported_and_never_removed() {
    let dir = temp_dir();
    // Junk under names no record can have, and a perfectly valid record under one.
    let names = ["a b.json", "x.y.json", "caf\u{e9}.json", "semi;colon.json"];
    let mut paths: Vec<_> = names
        .iter()
        .map(|name| write_raw(dir.path(), name, "{ not a record"))
        .collect();
    let valid_inside = RecordJson::fresh();
    paths.push(valid_inside.write_as(dir.path(), "with.dot.json"));
    let before = dir_snapshot(dir.path());

    let found = scan(dir.path(), None).unwrap();
    assert!(found.records.is_empty(), "{:?}", names_of(&found.records));
    let mut expected: Vec<(String, Unreadable)> = names
        .iter()
        .chain(["with.dot.json"].iter())
        .map(|n| ((*n).to_owned(), Unreadable::InvalidName))
        .collect();
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(unreadable_kinds(&found.unreadable), expected);
    for entry in &found.unreadable {
        assert!(!entry.is_removable(), "{entry:?}");
        assert_eq!(entry.why.to_string(), "is not named after a session id");
    }

    assert!(list(dir.path()).unwrap().is_empty());
    // Even a pruning pass, which judges each by name, leaves them.
    assert!(prune_all(dir.path()).removed_unreadable.is_empty());
    for path in &paths {
        assert!(path.exists(), "{} was removed", path.display());
    }
    assert_eq!(dir_snapshot(dir.path()), before);
}

/// What was read proves none of these is not a record (needs root: chown), so a pruning pass
/// keeps them all: junk under a name murmur never gives, a directory, and a record of another
/// owner, each under a murmur-shaped name but the first.
#[ignore = "needs root: chowns a record to uid 65534"]
#[test]
fn entries_nothing_read_proves_no_record_are_kept_by_a_pruning_pass() {
    let dir = temp_dir();
    let junk = write_raw(dir.path(), "junk.json", "not json");
    let folder = dir.path().join(format!("{}.json", session_id()));
    std::fs::create_dir(&folder).unwrap();
    let foreign = RecordJson::fresh();
    let foreign_path = foreign.write_in(dir.path());
    std::os::unix::fs::chown(&foreign_path, Some(65534), Some(65534)).expect("chown to nobody");
    let before = dir_snapshot(dir.path());

    let found = scan(dir.path(), None).unwrap();
    assert_eq!(found.unreadable.len(), 3, "{:?}", found.unreadable);
    for entry in &found.unreadable {
        assert!(!entry.is_removable(), "{entry:?}");
    }
    assert!(prune_all(dir.path()).removed_unreadable.is_empty());
    assert!(junk.exists() && folder.is_dir() && foreign_path.exists());
    assert_eq!(dir_snapshot(dir.path()), before);
}

/// Removal needs proof on two counts: the name is murmur's (`ses_` + 32 hex digits), and what
/// was read shows the entry can never be a record. A read that failed proves nothing, nor does
/// a file too large to read, and a directory is never ours to remove.
#[test]
fn only_a_murmur_named_entry_proven_to_be_junk_is_removable() {
    let id = session_id();
    let murmur_named = |why: Unreadable| UnreadableEntry {
        file_name: format!("{id}.json"),
        why,
    };
    let malformed = || Unreadable::Malformed("truncated".to_owned());
    for why in [
        malformed(),
        Unreadable::NameMismatch(session_id()),
        Unreadable::Symlink,
        Unreadable::NotRegularFile,
    ] {
        assert!(murmur_named(why.clone()).is_removable(), "{why:?}");
    }
    for why in [
        Unreadable::InvalidName,
        Unreadable::Io("read failed".to_owned()),
        Unreadable::Replaced,
        Unreadable::Directory,
        Unreadable::ForeignOwner(65534),
        Unreadable::TooLarge,
    ] {
        assert!(!murmur_named(why.clone()).is_removable(), "{why:?}");
    }
    let foreign = UnreadableEntry {
        file_name: "my-notes.json".to_owned(),
        why: malformed(),
    };
    assert!(!foreign.is_removable());

    // A pruning pass acts on that judgement: the murmur-named junk goes, and only it.
    let dir = temp_dir();
    let murmur_file = write_raw(dir.path(), &format!("{id}.json"), "{");
    let foreign_file = write_raw(dir.path(), "my-notes.json", "{");
    let removed = prune_all(dir.path()).removed_unreadable;
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert_eq!(removed[0].file_name, format!("{id}.json"));
    assert_absent(&murmur_file);
    assert!(prune_all(dir.path()).removed_unreadable.is_empty());
    assert!(foreign_file.exists());
}

#[test]
fn a_record_is_still_the_file_read_only_until_that_file_is_replaced_or_removed() {
    let dir = temp_dir();
    let json = RecordJson::fresh();
    let path = json.write_in(dir.path());
    let read = read_record(dir.path(), &json.session_id())
        .unwrap()
        .unwrap();
    assert!(still_the_file_read(&read));
    assert!(
        !still_the_file_read(&json.parse()),
        "a record not read from disk"
    );

    replace_by_rename(dir.path(), &json.file_name(), json.to_bytes());
    assert!(
        !still_the_file_read(&read),
        "replaced by a file with the same bytes"
    );
    let reread = read_record(dir.path(), &json.session_id())
        .unwrap()
        .unwrap();
    assert!(still_the_file_read(&reread));
    std::fs::remove_file(&path).unwrap();
    assert!(!still_the_file_read(&reread), "removed");
}

#[test]
fn staging_control_and_hidden_files_are_not_records() {
    let dir = temp_dir();
    let record = RecordJson::fresh();
    let record_path = record.write_in(dir.path());
    let id = record.session_id();
    // A writer's staging file, holding a complete valid record, and a truncated one.
    let staged = write_raw(
        dir.path(),
        &format!(".{id}.json.4242.0123456789abcdef.tmp"),
        record.to_bytes(),
    );
    let staged_broken = write_raw(
        dir.path(),
        &format!(".{}.json.4242.fedcba9876543210.tmp", session_id()),
        "{\"session_id\":",
    );
    let control = write_raw(dir.path(), &format!("{id}.control"), "control-token");
    let hidden_json = write_raw(dir.path(), ".hidden.json", "not json at all");
    let bare_suffix = write_raw(dir.path(), ".json", "nothing");
    let notes = write_raw(dir.path(), "notes.txt", "{");
    let before = dir_snapshot(dir.path());

    let found = scan(dir.path(), None).unwrap();
    assert_eq!(names_of(&found.records), [id]);
    assert!(found.unreadable.is_empty(), "{:?}", found.unreadable);

    assert_eq!(list(dir.path()).unwrap().len(), 1);
    for kept in [
        &record_path,
        &staged,
        &staged_broken,
        &control,
        &hidden_json,
        &bare_suffix,
        &notes,
    ] {
        assert!(kept.exists(), "{} was removed", kept.display());
    }
    assert_eq!(dir_snapshot(dir.path()), before);
}

#[test]
fn scan_changes_nothing_on_disk() {
    let dir = temp_dir();
    let elsewhere = temp_dir();
    RecordJson::fresh().write_in(dir.path());
    RecordJson::fresh().no_door().write_in(dir.path());
    let truncated = RecordJson::fresh();
    write_raw(
        dir.path(),
        &truncated.file_name(),
        "{\"session_id\": \"ses_",
    );
    RecordJson::fresh()
        .set("padding", "y".repeat(2 * 1024 * 1024))
        .write_in(dir.path());
    RecordJson::fresh().write_as(dir.path(), &format!("{}.json", session_id()));
    let target = RecordJson::fresh().write_in(elsewhere.path());
    std::os::unix::fs::symlink(&target, dir.path().join("link.json")).unwrap();
    std::fs::create_dir(dir.path().join("x.json")).unwrap();
    make_fifo(&dir.path().join("f.json"));
    write_raw(dir.path(), "s.control", "c");
    write_raw(dir.path(), ".s.json.1.2.tmp", "{");
    // A record at mode 0644 and one at 0400: a reader narrows nothing and widens nothing.
    let loose = RecordJson::fresh().write_in(dir.path());
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    let readonly = RecordJson::fresh().write_in(dir.path());
    std::fs::set_permissions(&readonly, std::fs::Permissions::from_mode(0o400)).unwrap();
    // Private, with a setgid bit a reader has no business clearing.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o2700)).unwrap();

    let before = dir_snapshot(dir.path());
    let dir_mode = mode_of(dir.path());
    let path = dir.path().to_path_buf();
    let found = within("scan", DEADLINE, move || scan(&path, None).unwrap());
    assert_eq!(found.records.len(), 4);
    assert_eq!(found.unreadable.len(), 6, "{:?}", found.unreadable);
    assert_eq!(dir_snapshot(dir.path()), before);
    assert_eq!(mode_of(dir.path()), dir_mode);
    assert_eq!(
        std::fs::read_link(dir.path().join("link.json")).unwrap(),
        target
    );
}

#[test]
fn a_running_dir_opened_to_group_or_others_is_refused_untouched_until_it_is_private_again() {
    let dir = temp_dir();
    let record = RecordJson::fresh();
    record.write_in(dir.path());
    for wider in [0o755, 0o710, 0o701, 0o777, 0o1777] {
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(wider)).unwrap();
        let before = dir_snapshot(dir.path());
        let error = scan(dir.path(), None).expect_err("a directory others may enter is refused");
        assert!(
            matches!(&error, RunningError::DirUnavailable { why, .. }
                if why.contains(&format!("{wider:04o}")) && why.contains("chmod 700")),
            "{wider:o}: {error}"
        );
        assert!(list(dir.path()).is_err(), "{wider:o}: list refuses too");
        assert!(read_record(dir.path(), &record.session_id()).is_err());
        assert_eq!(mode_of(dir.path()), wider, "a reader repairs nothing");
        assert_eq!(
            dir_snapshot(dir.path()),
            before,
            "nothing in it was touched"
        );
    }
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let found = scan(dir.path(), None).expect("private again: read");
    assert_eq!(found.records.len(), 1);
}

#[test]
fn entries_removed_between_the_listing_and_their_reading_are_neither_records_nor_unreadable() {
    // Writers churn whole records in and out (staged, renamed into place, unlinked soon after),
    // so a scan keeps listing entries that are gone by the time it reads them. Each one must
    // simply be skipped, by a `scan` with a cache and without alike, never reported as unreadable.
    const WRITERS: usize = 4;
    const KEPT_PER_WRITER: usize = 16;
    const SCANS: usize = 300;
    let dir = Arc::new(temp_dir());
    let stable = RecordJson::fresh();
    stable.write_in(dir.path());
    let done = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let dir = Arc::clone(&dir);
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                let mut kept = std::collections::VecDeque::new();
                let mut written = 0u64;
                while !done.load(Ordering::SeqCst) {
                    let record = RecordJson::fresh();
                    let staged = write_raw(
                        dir.path(),
                        &format!(".churn-{writer}.tmp"),
                        record.to_bytes(),
                    );
                    let path = dir.path().join(record.file_name());
                    std::fs::rename(&staged, &path).unwrap();
                    kept.push_back(path);
                    if kept.len() > KEPT_PER_WRITER
                        && let Some(oldest) = kept.pop_front()
                    {
                        std::fs::remove_file(oldest).unwrap();
                    }
                    written += 1;
                }
                written
            })
        })
        .collect();

    let cache = RecordCache::default();
    let mut listed = 0usize;
    for round in 0..SCANS {
        let found = if round % 2 == 0 {
            scan(dir.path(), None)
        } else {
            scan(dir.path(), Some(&cache))
        }
        .unwrap_or_else(|e| panic!("scan {round}: {e}"));
        assert!(
            found.unreadable.is_empty(),
            "scan {round} reported entries gone since the listing: {:?}",
            unreadable_kinds(&found.unreadable)
        );
        assert!(
            names_of(&found.records).contains(&stable.session_id()),
            "scan {round} lost the record that stayed"
        );
        listed += found.records.len();
    }
    done.store(true, Ordering::SeqCst);
    let written: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
    // The churn really ran alongside the scans.
    assert!(written > SCANS as u64, "only {written} records churned");
    assert!(listed > SCANS, "the scans saw no churned record");
}

// ---------------------------------------------------------------------------------------------
// read_record
// ---------------------------------------------------------------------------------------------

#[test]
fn read_record_finds_a_present_record() {
    let dir = temp_dir();
    let record = RecordJson::fresh().set("capsule_name", "finder");
    let path = record.write_in(dir.path());
    let read = read_record(dir.path(), &record.session_id())
        .unwrap()
        .expect("the record is there");
    assert_eq!(read.session_id, record.session_id());
    assert_eq!(read.capsule_name, "finder");
    assert_eq!(read.source_path(), Some(path));
}

#[test]
fn read_record_answers_none_for_an_absent_record_or_an_impossible_id() {
    let home = temp_dir();
    let dir = home.path().join("running");
    std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    RecordJson::fresh().write_in(&dir);
    assert!(read_record(&dir, &session_id()).unwrap().is_none());
    // An id that would escape the directory names no file: a record beside it is not read.
    RecordJson::new("escapee").write_in(home.path());
    RecordJson::new("running").write_in(home.path());
    for impossible in ["", "..", "../running", ".hidden", "../escapee", "a/b"] {
        assert!(
            read_record(&dir, impossible).unwrap().is_none(),
            "{impossible:?}"
        );
    }
}

#[test]
fn read_record_reports_why_an_existing_entry_is_not_a_record() {
    let dir = temp_dir();
    let elsewhere = temp_dir();

    let malformed = session_id();
    write_raw(dir.path(), &format!("{malformed}.json"), "{ not json");
    let mismatched = session_id();
    let other = RecordJson::fresh();
    other.write_as(dir.path(), &format!("{mismatched}.json"));
    let linked = RecordJson::fresh();
    std::os::unix::fs::symlink(
        linked.write_in(elsewhere.path()),
        dir.path().join(linked.file_name()),
    )
    .unwrap();
    let directory = session_id();
    std::fs::create_dir(dir.path().join(format!("{directory}.json"))).unwrap();
    let fifo = session_id();
    make_fifo(&dir.path().join(format!("{fifo}.json")));

    let cases = [
        (malformed, "malformed"),
        (mismatched, "mismatch"),
        (linked.session_id(), "symlink"),
        (directory, "directory"),
        (fifo, "fifo"),
    ];
    for (id, what) in cases {
        let path = dir.path().to_path_buf();
        let read = within("read_record", DEADLINE, move || read_record(&path, &id));
        let Err(RunningError::Unreadable(entry)) = read else {
            panic!("{what}: expected Unreadable, got {read:?}");
        };
        let ok = match what {
            "malformed" => matches!(entry.why, Unreadable::Malformed(_)),
            "mismatch" => entry.why == Unreadable::NameMismatch(other.session_id()),
            "symlink" => entry.why == Unreadable::Symlink,
            "directory" => entry.why == Unreadable::Directory,
            "fifo" => entry.why == Unreadable::NotRegularFile,
            _ => unreachable!(),
        };
        assert!(ok, "{what}: {:?}", entry.why);
    }
}

// ---------------------------------------------------------------------------------------------
// running_dir_in
// ---------------------------------------------------------------------------------------------

fn expect_refusal(home: &Path, offending: &Path) -> String {
    let err = running_dir_in(home).expect_err("the directory must be refused");
    let message = err.to_string();
    assert!(
        matches!(
            err,
            RunningError::Dir(murmur_registry::private_fs::PrivateDirError::Insecure { .. })
        ),
        "expected an insecure-directory refusal, got {err:?}"
    );
    assert!(
        message.contains(&offending.display().to_string()),
        "the error does not name {}: {message}",
        offending.display()
    );
    message
}

#[test]
fn running_dir_in_creates_murmur_and_running_at_0700() {
    let home = temp_dir();
    let running = running_dir_in(home.path()).unwrap();
    assert_eq!(running, home.path().join(".murmur").join("running"));
    for dir in [home.path().join(".murmur"), running.clone()] {
        assert!(dir.is_dir(), "{} not created", dir.display());
        assert_eq!(mode_of(&dir), 0o700, "{}", dir.display());
    }
    // A second call finds and keeps them.
    let marker = write_raw(&running, "kept.json", "{}");
    assert_eq!(running_dir_in(home.path()).unwrap(), running);
    assert!(marker.exists());
}

#[test]
fn running_dir_in_narrows_wider_modes_back_to_0700() {
    let home = temp_dir();
    let murmur = home.path().join(".murmur");
    let running = murmur.join("running");
    std::fs::create_dir_all(&running).unwrap();
    std::fs::set_permissions(&murmur, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&running, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_eq!(running_dir_in(home.path()).unwrap(), running);
    assert_eq!(mode_of(&murmur), 0o700);
    assert_eq!(mode_of(&running), 0o700);
}

#[test]
fn running_dir_in_refuses_a_symlinked_murmur_dir() {
    let home = temp_dir();
    let real = temp_dir();
    std::fs::set_permissions(real.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let murmur = home.path().join(".murmur");
    std::os::unix::fs::symlink(real.path(), &murmur).unwrap();
    expect_refusal(home.path(), &murmur);
    assert!(
        std::fs::read_dir(real.path()).unwrap().next().is_none(),
        "nothing may be created through the link"
    );
    assert_eq!(
        mode_of(real.path()),
        0o755,
        "nothing may be changed through the link"
    );
}

#[test]
fn a_refused_running_dir_is_called_what_it_is_a_symlink_or_not_a_directory() {
    let home = temp_dir();
    let real = temp_dir();
    let murmur = home.path().join(".murmur");
    std::fs::create_dir(&murmur).unwrap();
    let running = murmur.join("running");
    std::os::unix::fs::symlink(real.path(), &running).unwrap();
    let message = expect_refusal(home.path(), &running);
    assert!(message.contains("it is a symlink"), "{message}");

    std::fs::remove_file(&running).unwrap();
    write_raw(&murmur, "running", "not a directory");
    let message = expect_refusal(home.path(), &running);
    assert!(message.contains("it is not a directory"), "{message}");
}

#[test]
fn running_dir_in_refuses_a_symlinked_running_dir() {
    let home = temp_dir();
    let real = temp_dir();
    std::fs::set_permissions(real.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let murmur = home.path().join(".murmur");
    std::fs::create_dir(&murmur).unwrap();
    let running = murmur.join("running");
    std::os::unix::fs::symlink(real.path(), &running).unwrap();
    expect_refusal(home.path(), &running);
    assert_eq!(mode_of(real.path()), 0o755);
}

#[test]
fn running_dir_in_refuses_a_regular_file_in_place_of_a_directory() {
    let home = temp_dir();
    let murmur = home.path().join(".murmur");
    std::fs::create_dir(&murmur).unwrap();
    let running = write_raw(&murmur, "running", "I am a file");
    expect_refusal(home.path(), &running);
    assert_eq!(std::fs::read_to_string(&running).unwrap(), "I am a file");

    let other_home = temp_dir();
    let murmur_file = write_raw(other_home.path(), ".murmur", "also a file");
    expect_refusal(other_home.path(), &murmur_file);
    assert!(murmur_file.is_file());
}

#[test]
#[ignore = "needs root: chowns the running directory to uid 65534"]
fn running_dir_in_refuses_a_directory_owned_by_another_user_and_changes_nothing() {
    const NOBODY: u32 = 65534;
    // A foreign ~/.murmur.
    let home = temp_dir();
    let murmur = home.path().join(".murmur");
    std::fs::create_dir(&murmur).unwrap();
    std::fs::set_permissions(&murmur, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(&murmur, Some(NOBODY), Some(NOBODY)).unwrap();
    expect_refusal(home.path(), &murmur);
    assert_eq!(
        mode_of(&murmur),
        0o755,
        "a refused directory must not be narrowed"
    );
    assert_eq!(std::fs::metadata(&murmur).unwrap().uid(), NOBODY);
    assert!(!murmur.join("running").exists());

    // A foreign ~/.murmur/running inside our own ~/.murmur.
    let home = temp_dir();
    let murmur = home.path().join(".murmur");
    let running = murmur.join("running");
    std::fs::create_dir_all(&running).unwrap();
    std::fs::set_permissions(&running, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(&running, Some(NOBODY), Some(NOBODY)).unwrap();
    let message = expect_refusal(home.path(), &running);
    assert!(message.contains("65534"), "{message}");
    assert_eq!(mode_of(&running), 0o755);
}

// ---------------------------------------------------------------------------------------------
// RunningGuard
// ---------------------------------------------------------------------------------------------

fn tmp_files_in(dir: &Path) -> Vec<String> {
    dir_snapshot(dir)
        .into_keys()
        .filter(|name| name.ends_with(".tmp"))
        .collect()
}

#[test]
fn a_guard_writes_a_0600_record_that_reads_back_equal() {
    let dir = temp_dir();
    let record = RecordJson::fresh()
        .set("records_dir", "/records/here")
        .set("formation_id", formation_id())
        .set("formation_member", "lead")
        .set("formation_entry", true)
        .set(
            "formation_launcher",
            json!({"pid": 1234, "process_start": "77"}),
        )
        .parse();
    let guard = RunningGuard::write(dir.path(), &record).unwrap();
    let path = dir.path().join(format!("{}.json", record.session_id));
    assert_eq!(guard.path(), path);
    assert_eq!(mode_of(&path), 0o600);
    assert!(
        tmp_files_in(dir.path()).is_empty(),
        "staging file left behind"
    );

    let back = RunningRecord::parse(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(back, record);
    let read = read_record(dir.path(), &record.session_id)
        .unwrap()
        .unwrap();
    assert_eq!(read.source_path(), Some(path.clone()));
    assert_eq!(read, record);
    assert_eq!(
        names_of(&list(dir.path()).unwrap()),
        std::slice::from_ref(&record.session_id)
    );
    drop(guard);
}

#[test]
fn a_guard_writes_a_record_made_for_this_process() {
    let dir = temp_dir();
    let id = session_id();
    let record = RunningRecord::for_this_process(
        id.as_str(),
        Some("127.0.0.1:41235".to_owned()),
        "capsule",
        "1.2.3",
        "/work",
    );
    assert_eq!(record.pid, std::process::id());
    assert_eq!(record.process_start, common::own_start_token());
    let guard = RunningGuard::write(dir.path(), &record).unwrap();
    let read = read_record(dir.path(), &id).unwrap().unwrap();
    assert_eq!(read.pid, std::process::id());
    assert_eq!(process_state(&read), ProcessState::Alive);
    drop(guard);
}

/// Set (to a running directory) in a copy of this test binary started by [`rerun_under`]:
/// the test it runs then plays the writer's part in that directory.
const WRITER_DIR: &str = "MURMUR_REGISTRY_TEST_WRITER_DIR";

/// Field 7 of `/proc/self/stat`: the controlling terminal's device number, 0 when there is none.
fn own_tty_nr() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 1..];
    after_comm
        .split_ascii_whitespace()
        .nth(4)
        .unwrap()
        .parse()
        .unwrap()
}

/// `setsid` starts its command in a new session: no controlling terminal.
const WITHOUT_TERMINAL: &[&str] = &["setsid", "--wait"];
/// `script` starts its command on a new pseudo-terminal, its controlling terminal.
const WITH_TERMINAL: &[&str] = &["script", "--quiet", "--return", "--command"];

/// Run the test `name` of this binary again, as `wrapper`'s child, with [`WRITER_DIR`] set to
/// `dir`; answer what it printed, after checking that it passed and that its controlling
/// terminal (the premise) is the one `wrapper` gives.
fn rerun_under(wrapper: &[&str], name: &str, dir: &Path) -> String {
    let exe = std::env::current_exe().unwrap();
    let mut command = std::process::Command::new(wrapper[0]);
    command.args(&wrapper[1..]);
    if wrapper == WITH_TERMINAL {
        // `script` runs its command through a shell; the path is quoted for it.
        let quoted = format!("'{}' --exact {name} --nocapture", exe.display());
        command.arg(quoted).arg("/dev/null");
    } else {
        command.arg(&exe).args(["--exact", name, "--nocapture"]);
    }
    let output = command
        .env(WRITER_DIR, dir)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {wrapper:?}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{wrapper:?}: {output:?}");
    let tty_nr: u64 = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("writer tty_nr="))
        .unwrap_or_else(|| panic!("{wrapper:?} printed no tty_nr: {stdout}"))
        .parse()
        .unwrap();
    assert_eq!(
        tty_nr != 0,
        wrapper == WITH_TERMINAL,
        "the premise: {wrapper:?} gives a controlling terminal exactly when it is `script`"
    );
    stdout
}

/// The spec: a capsule attached to a terminal dies with that window, so its record says
/// `outlives_launcher: false`; one without a controlling terminal says `true`. The writer is
/// this test binary run again, once under `setsid` and once under `script`.
#[test]
fn outlives_launcher_is_false_exactly_when_the_writer_has_a_controlling_terminal() {
    if let Some(dir) = std::env::var_os(WRITER_DIR) {
        let record = RunningRecord::for_this_process(session_id(), None, "c", "1", "/w");
        // Left in place for the parent to read from disk.
        std::mem::forget(RunningGuard::write(Path::new(&dir), &record).unwrap());
        println!("writer tty_nr={}", own_tty_nr());
        return;
    }
    let name = "outlives_launcher_is_false_exactly_when_the_writer_has_a_controlling_terminal";
    for (wrapper, outlives) in [(WITHOUT_TERMINAL, true), (WITH_TERMINAL, false)] {
        let dir = temp_dir();
        let stdout = rerun_under(wrapper, name, dir.path());
        let records = list(dir.path()).unwrap();
        assert_eq!(records.len(), 1, "{wrapper:?}: {stdout}");
        assert_ne!(records[0].pid, std::process::id());
        assert_eq!(
            records[0].outlives_launcher, outlives,
            "{wrapper:?}: {records:?}"
        );
    }
}

/// How many children are started while one piece of work runs in a loop.
const CHILDREN_PER_WORK: usize = 150;

/// The descriptors (as `fd -> target`) that children started while `work` runs in a loop on
/// another thread found open in themselves, beyond those a child started before had.
fn descriptors_inherited_while(work: impl Fn() + Send + 'static) -> Vec<String> {
    let open_in_child = || {
        let output = std::process::Command::new("ls")
            .args(["-l", "/proc/self/fd"])
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|l| l.split_once(" -> "))
            // Past the standard three (new pipes, for this output), and not the directory
            // `ls` reads.
            .filter(|(head, _)| {
                head.rsplit(' ')
                    .next()
                    .and_then(|fd| fd.parse::<u32>().ok())
                    > Some(2)
            })
            .map(|(_, target)| target.to_owned())
            .filter(|target| !(target.starts_with("/proc/") && target.ends_with("/fd")))
            .collect::<Vec<_>>()
    };
    let before = open_in_child();
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                work();
            }
        })
    };
    let mut inherited = Vec::new();
    for _ in 0..CHILDREN_PER_WORK {
        inherited.extend(open_in_child().into_iter().filter(|t| !before.contains(t)));
    }
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    inherited.sort();
    inherited.dedup();
    inherited
}

/// Every descriptor the crate opens to make and write a record (its `/proc` stat, the
/// controlling terminal, the staged file) is closed on exec: a child the capsule starts
/// meanwhile inherits none. Checked with and without a controlling terminal.
#[test]
fn a_child_started_while_records_are_made_and_written_inherits_none_of_their_descriptors() {
    let name =
        "a_child_started_while_records_are_made_and_written_inherits_none_of_their_descriptors";
    if let Some(dir) = std::env::var_os(WRITER_DIR) {
        let made = descriptors_inherited_while(|| {
            RunningRecord::for_this_process(session_id(), None, "c", "1", "/w");
        });
        println!("inherited while made: {made:?}");
        let written = descriptors_inherited_while(move || {
            let record = RunningRecord::for_this_process(session_id(), None, "c", "1", "/w");
            drop(RunningGuard::write(Path::new(&dir), &record).unwrap());
        });
        println!("inherited while written: {written:?}");
        println!("writer tty_nr={}", own_tty_nr());
        return;
    }
    for wrapper in [WITHOUT_TERMINAL, WITH_TERMINAL] {
        let dir = temp_dir();
        let stdout = rerun_under(wrapper, name, dir.path());
        for work in ["made", "written"] {
            let line = format!("inherited while {work}: ");
            let inherited = stdout
                .lines()
                .find_map(|l| l.trim().strip_prefix(line.as_str()))
                .unwrap_or_else(|| panic!("{wrapper:?} printed no {line:?}: {stdout}"));
            assert_eq!(inherited, "[]", "{wrapper:?}: {work}");
        }
        assert_eq!(
            list(dir.path()).unwrap(),
            Vec::new(),
            "every guard removed its record"
        );
    }
}

#[test]
fn a_guard_never_writes_or_prints_the_door_secrets() {
    let dir = temp_dir();
    let record = RecordJson::fresh()
        .door_token("DOOR-SECRET-7f3a")
        .set("credentials", json!({"ops": "CRED-SECRET-91bc"}))
        .parse();
    assert_eq!(
        record.door_token.as_ref().unwrap().expose(),
        "DOOR-SECRET-7f3a"
    );
    let guard = RunningGuard::write(dir.path(), &record).unwrap();
    let on_disk = std::fs::read_to_string(guard.path()).unwrap();
    let shown = [
        on_disk,
        format!("{record:?}"),
        format!("{record:#?}"),
        format!("{guard:?}"),
        serde_json::to_string(&record).unwrap(),
        format!("{:?}", read_record(dir.path(), &record.session_id)),
        format!("{:?}", scan(dir.path(), None).unwrap()),
    ];
    for text in shown {
        assert!(!text.contains("DOOR-SECRET"), "door token leaked: {text}");
        assert!(!text.contains("CRED-SECRET"), "credential leaked: {text}");
    }
}

#[test]
fn a_guard_refuses_a_session_id_that_cannot_name_a_file() {
    let home = temp_dir();
    let dir = home.path().join("running");
    std::fs::create_dir(&dir).unwrap();
    for bad in ["../escape", "", ".hidden", "a/b", "ses x"] {
        let record = RecordJson::new(bad).parse();
        let err = RunningGuard::write(&dir, &record).expect_err(bad);
        assert!(matches!(err, RunningError::InvalidSessionId(_)), "{err:?}");
    }
    assert!(dir_snapshot(&dir).is_empty());
    assert_eq!(
        dir_snapshot(home.path()).len(),
        1,
        "only `running` in the home"
    );
}

#[test]
fn dropping_a_guard_removes_its_record() {
    let dir = temp_dir();
    let record = RecordJson::fresh().parse();
    let guard = RunningGuard::write(dir.path(), &record).unwrap();
    let path = guard.path();
    assert!(path.exists());
    drop(guard);
    assert_absent(&path);
    assert!(dir_snapshot(dir.path()).is_empty());
}

#[test]
fn dropping_a_guard_leaves_a_record_that_replaced_its_own() {
    let dir = temp_dir();
    let record = RecordJson::fresh();
    let guard = RunningGuard::write(dir.path(), &record.parse()).unwrap();
    let replacement = record.clone().set("capsule_version", "9.9.9").to_bytes();
    let path = replace_by_rename(dir.path(), &record.file_name(), &replacement);
    drop(guard);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        replacement,
        "the replacement belongs to whoever wrote it"
    );
}

#[test]
fn a_reader_racing_a_thousand_staged_writes_never_sees_a_partial_record() {
    const WRITES: usize = 1000;
    let dir = Arc::new(temp_dir());
    let id = session_id();
    // Versions differ in size, so a torn read could not pass for a whole one.
    let version = |i: usize| {
        RecordJson::new(&id)
            .set("capsule_version", i.to_string())
            .set("capsule_name", "n".repeat(1 + i * 37 % 700))
            .parse()
    };
    let first = RunningGuard::write(dir.path(), &version(0)).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let dir = Arc::clone(&dir);
        let done = Arc::clone(&done);
        let versions: Vec<RunningRecord> = (1..=WRITES).map(version).collect();
        std::thread::spawn(move || {
            let mut held = first;
            for record in &versions {
                // The previous guard drops only after its file was replaced, so it leaves the
                // new one alone and the name is never empty.
                held = RunningGuard::write(dir.path(), record).unwrap();
            }
            done.store(true, Ordering::SeqCst);
            held
        })
    };

    let start = Instant::now();
    let mut reads = 0u64;
    let mut last_seen = 0usize;
    loop {
        let finished = done.load(Ordering::SeqCst);
        let record = if reads % 4 == 3 {
            let found = scan(dir.path(), None).unwrap();
            assert!(found.unreadable.is_empty(), "{:?}", found.unreadable);
            assert_eq!(found.records.len(), 1);
            Arc::unwrap_or_clone(found.records.into_iter().next().unwrap())
        } else {
            read_record(dir.path(), &id)
                .unwrap_or_else(|e| panic!("read {reads}: {e}"))
                .unwrap_or_else(|| panic!("read {reads}: the record was missing"))
        };
        let seen: usize = record.capsule_version.parse().unwrap();
        assert!(seen <= WRITES);
        assert_eq!(record.capsule_name.len(), 1 + seen * 37 % 700);
        assert!(seen >= last_seen, "went back from {last_seen} to {seen}");
        last_seen = seen;
        reads += 1;
        if finished {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the writer never finished"
        );
    }
    let last = writer.join().unwrap();
    assert_eq!(last_seen, WRITES, "the last read after the writer finished");
    assert!(reads > 1);
    assert!(tmp_files_in(dir.path()).is_empty());
    drop(last);
    assert!(dir_snapshot(dir.path()).is_empty());
}

// ---------------------------------------------------------------------------------------------
// prune
// ---------------------------------------------------------------------------------------------

fn gone() -> Liveness {
    Liveness::Gone {
        reason: "no process holds pid 1".to_owned(),
    }
}

#[test]
fn prune_refuses_any_reading_but_gone() {
    let dir = temp_dir();
    let record = RecordJson::fresh();
    let path = record.write_in(dir.path());
    let control = write_raw(dir.path(), &format!("{}.control", record.session_id()), "c");
    let read = read_record(dir.path(), &record.session_id())
        .unwrap()
        .unwrap();
    for reading in [
        Liveness::Live,
        Liveness::Unreachable {
            reason: "door silent".to_owned(),
        },
    ] {
        let err = prune(&read, &reading).expect_err("prune must refuse");
        assert!(
            matches!(&err, RunningError::NotGone(id) if *id == record.session_id()),
            "{err:?}"
        );
    }
    assert!(path.exists());
    assert!(control.exists());
}

#[test]
fn prune_refuses_a_record_built_in_memory() {
    let dir = temp_dir();
    let record = RecordJson::fresh();
    // A file of the same name exists, but the record in hand was not read from it.
    let path = record.write_in(dir.path());
    let in_memory = record.parse();
    let err = prune(&in_memory, &gone()).expect_err("nothing to prune");
    assert!(matches!(err, RunningError::NotFromDisk(_)), "{err:?}");
    assert!(path.exists());
}

#[test]
fn prune_removes_a_gone_record_and_its_control_file_only() {
    let dir = temp_dir();
    let exited = ExitedChild::spawn();
    let record = exited.record();
    let path = record.write_in(dir.path());
    let control = write_raw(dir.path(), &format!("{}.control", record.session_id()), "c");
    let neighbour = RecordJson::fresh();
    let neighbour_path = neighbour.write_in(dir.path());
    let neighbour_control = write_raw(
        dir.path(),
        &format!("{}.control", neighbour.session_id()),
        "n",
    );

    let read = read_record(dir.path(), &record.session_id())
        .unwrap()
        .unwrap();
    let ProcessState::Gone { reason } = process_state(&read) else {
        panic!("a reaped child's record must be gone");
    };
    let reading = Liveness::Gone { reason };
    assert_eq!(prune(&read, &reading).unwrap(), FileFate::Removed);
    assert_absent(&path);
    assert_absent(&control);
    assert!(neighbour_path.exists());
    assert!(neighbour_control.exists());

    // Again: the file is gone already.
    assert_eq!(prune(&read, &reading).unwrap(), FileFate::AlreadyGone);
}

#[test]
fn prune_removes_a_gone_record_without_a_control_file() {
    let dir = temp_dir();
    let record = RecordJson::fresh();
    let path = record.write_in(dir.path());
    let read = read_record(dir.path(), &record.session_id())
        .unwrap()
        .unwrap();
    assert_eq!(prune(&read, &gone()).unwrap(), FileFate::Removed);
    assert_absent(&path);
}

#[test]
fn prune_leaves_a_record_replaced_since_it_was_read() {
    let dir = temp_dir();
    let record = RecordJson::fresh();
    record.write_in(dir.path());
    let control = write_raw(dir.path(), &format!("{}.control", record.session_id()), "c");
    let read = read_record(dir.path(), &record.session_id())
        .unwrap()
        .unwrap();
    let replacement = record.clone().set("capsule_version", "2.0.0").to_bytes();
    let path = replace_by_rename(dir.path(), &record.file_name(), &replacement);

    assert_eq!(prune(&read, &gone()).unwrap(), FileFate::Replaced);
    assert_eq!(std::fs::read(&path).unwrap(), replacement);
    assert!(
        control.exists(),
        "nothing may be unlinked for a replaced record"
    );
}

#[test]
fn prune_leaves_a_control_file_re_created_since_the_record_was_read() {
    let dir = temp_dir();
    let record = RecordJson::fresh();
    let path = record.write_in(dir.path());
    let control_name = format!("{}.control", record.session_id());
    write_raw(dir.path(), &control_name, "old-token");
    let read = read_record(dir.path(), &record.session_id())
        .unwrap()
        .unwrap();
    // A writer re-creating the session puts a new control token in place.
    let control = replace_by_rename(dir.path(), &control_name, "new-token");

    assert_eq!(prune(&read, &gone()).unwrap(), FileFate::Removed);
    assert_absent(&path);
    assert_eq!(std::fs::read(&control).unwrap(), b"new-token");
}

#[ignore = "needs root: chowns a control file to uid 65534"]
#[test]
fn prune_leaves_a_control_file_of_another_user() {
    let dir = temp_dir();
    let record = RecordJson::fresh();
    let path = record.write_in(dir.path());
    let control = write_raw(
        dir.path(),
        &format!("{}.control", record.session_id()),
        "their-token",
    );
    std::os::unix::fs::chown(&control, Some(65534), Some(65534)).expect("chown to nobody");
    let read = read_record(dir.path(), &record.session_id())
        .unwrap()
        .unwrap();

    assert_eq!(prune(&read, &gone()).unwrap(), FileFate::Removed);
    assert_absent(&path);
    assert_eq!(std::fs::read(&control).unwrap(), b"their-token");
}

#[test]
fn prune_never_follows_a_record_replaced_by_a_symlink() {
    let dir = temp_dir();
    let elsewhere = temp_dir();
    let record = RecordJson::fresh();
    let path = record.write_in(dir.path());
    let read = read_record(dir.path(), &record.session_id())
        .unwrap()
        .unwrap();
    let target = record.write_in(elsewhere.path());
    // The link is made while the original still exists (so it is another inode), then renamed
    // over it, as a writer replaces a record.
    let staged_link = dir.path().join(".link.tmp");
    std::os::unix::fs::symlink(&target, &staged_link).unwrap();
    std::fs::rename(&staged_link, &path).unwrap();

    assert_eq!(prune(&read, &gone()).unwrap(), FileFate::Replaced);
    assert!(std::fs::symlink_metadata(&path).unwrap().is_symlink());
    assert!(target.exists());
}

#[test]
fn entries_a_crashed_removal_left_in_quarantine_are_put_back_by_the_next_pruning_pass() {
    let dir = temp_dir();
    let dead = ExitedChild::spawn().pid;
    // A live session's record, hidden by a removal that died before it could put it back.
    let stranded = RecordJson::fresh();
    let quarantined = format!(
        ".{}.{dead}.0123456789abcdef.unlinking",
        stranded.file_name()
    );
    stranded.write_as(dir.path(), &quarantined);
    // One whose remover is alive (the very process that started then) is left to it.
    let remover = TestProcess::sleeping();
    let in_progress = RecordJson::fresh();
    let busy = format!(
        ".{}.{}-{}.fedcba9876543210.unlinking",
        in_progress.file_name(),
        remover.pid(),
        remover.start_token()
    );
    in_progress.write_as(dir.path(), &busy);
    assert!(
        scan(dir.path(), None).unwrap().records.is_empty(),
        "hidden names are not read"
    );

    assert!(
        list(dir.path()).unwrap().is_empty(),
        "list puts nothing back"
    );
    prune_all(dir.path());
    let listed = list(dir.path()).unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|r| r.session_id.clone())
            .collect::<Vec<_>>(),
        [stranded.session_id()]
    );
    assert!(dir.path().join(stranded.file_name()).exists());
    assert_absent(&dir.path().join(&quarantined));
    assert!(dir.path().join(&busy).exists());
}
