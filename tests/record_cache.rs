//! The scan's record cache: an unchanged record is not read again, and every change to the
//! entry (an edit in place, a replacement, a symlink, a removal) is seen on the very next scan.
//!
//! The cache trusts only files that had not changed for a second when they were read, so the
//! test waits (by polling the files' own timestamps) until its records are that old.

mod common;

use std::io::{Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{RecordJson, temp_dir, thread_bytes_read, wait_until};
use murmur_registry::running::{RecordCache, Unreadable, scan};

fn settled(path: &Path) -> bool {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.ctime().max(m.mtime()) < now - 1)
}

#[test]
fn unchanged_records_are_not_read_again_and_every_change_is_seen() {
    let dir = temp_dir();
    let a = RecordJson::fresh().url("127.0.0.1:1001");
    let b = RecordJson::fresh().url("127.0.0.1:2002");
    let a_path = a.write_in(dir.path());
    let b_path = b.write_in(dir.path());
    wait_until("the records to settle", Duration::from_secs(5), || {
        settled(&a_path) && settled(&b_path)
    });
    let cache = RecordCache::default();
    let first = scan(dir.path(), Some(&cache)).expect("scan");
    assert_eq!(first.records.len(), 2);

    let before = thread_bytes_read();
    let second = scan(dir.path(), Some(&cache)).expect("scan");
    let read = thread_bytes_read() - before;
    assert_eq!(second.records, first.records);
    // Only the directory listing itself was read, not a record's bytes.
    assert!(read < 1024, "read {read} bytes for two cached records");

    // An edit in place to a record of the same length: same inode, same size.
    let edited = String::from_utf8(a.to_bytes())
        .expect("utf-8")
        .replace("127.0.0.1:1001", "127.0.0.1:1009");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(&a_path)
        .expect("open");
    file.rewind().expect("rewind");
    file.write_all(edited.as_bytes()).expect("write");
    drop(file);
    // A replacement by a symlink to a valid record.
    let target = dir.path().join("elsewhere");
    std::fs::copy(&b_path, &target).expect("copy");
    std::fs::remove_file(&b_path).expect("remove");
    std::os::unix::fs::symlink(&target, &b_path).expect("symlink");

    let third = scan(dir.path(), Some(&cache)).expect("scan");
    assert_eq!(third.records.len(), 1);
    assert_eq!(third.records[0].url.as_deref(), Some("127.0.0.1:1009"));
    assert_eq!(third.unreadable.len(), 1);
    assert_eq!(third.unreadable[0].why, Unreadable::Symlink);

    std::fs::remove_file(&a_path).expect("remove");
    let fourth = scan(dir.path(), Some(&cache)).expect("scan");
    assert!(fourth.records.is_empty());
}

#[test]
fn a_cache_is_never_used_for_another_directory() {
    let (one, two) = (temp_dir(), temp_dir());
    let record = RecordJson::fresh();
    let path = record.write_in(one.path());
    wait_until("the record to settle", Duration::from_secs(5), || {
        settled(&path)
    });
    let cache = RecordCache::default();
    assert_eq!(
        scan(one.path(), Some(&cache)).expect("scan").records.len(),
        1
    );
    assert!(
        scan(two.path(), Some(&cache))
            .expect("scan")
            .records
            .is_empty()
    );
}
