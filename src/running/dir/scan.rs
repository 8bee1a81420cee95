//! One read of the running directory: every `*.json` entry judged and read (by two threads in a
//! large directory), one entry per name, records newest first. Changes nothing.

use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

use super::cache::{CacheMap, Cached, RecordCache, read_entry_cached};
use super::directory::{io_at, open_running_dir};
use super::unreadable::{EntryError, Unreadable, UnreadableEntry};
use crate::running::RunningError;
use crate::running::record::{RECORD_SUFFIX, RunningRecord, is_valid_session_id};

/// What one read of the running directory found, without changing it.
#[derive(Debug, Default)]
pub struct Scan {
    /// Every valid record, newest session first, each shared with the cache the scan read
    /// through (an unchanged record is never copied; [`Arc::unwrap_or_clone`] takes one out).
    pub records: Vec<Arc<RunningRecord>>,
    /// Every `*.json` entry that is not a valid record, by file name.
    pub unreadable: Vec<UnreadableEntry>,
}

/// Directories with at least this many candidate entries are judged by two threads, each
/// taking half: an `lstat` per entry is most of a large scan, and a listing waits for it.
const SPLIT_SCAN_ENTRIES: usize = 2_048;

/// Read every `*.json` entry of `dir`, changing nothing.
///
/// Records come back newest first (session ids are UUIDv7, so descending order is newest
/// first). Entries that are not valid records are reported in [`Scan::unreadable`]; entries
/// gone by the time they are read are in neither.
///
/// With a `cache` (for a caller that reads the directory over and over), only the records
/// whose file changed since the cache saw them are parsed again. Every entry is still judged
/// afresh on every call (an `lstat` without following links: a regular file, ours, and the
/// very file that was read before, by device, inode, size, modification and change time).
/// Only the open, read and parse of an unchanged file are skipped. A file changed within the
/// last second is read again at every scan until it has settled, so a rewrite inside one tick
/// of the filesystem's clock cannot hide behind an unchanged timestamp. The cache keeps only entries the latest scan
/// saw, so it never outgrows the directory. Without one, every record is parsed. A name the
/// cache knew that the directory listing did not show is read by name before it is left out:
/// a listing may miss a record renamed over its name (btrfs >= 6.8, NFS).
pub fn scan(dir: &Path, cache: Option<&RecordCache>) -> Result<Scan, RunningError> {
    let this_scan_only = RecordCache::default();
    let cache = cache.unwrap_or(&this_scan_only);
    let dir_fd = open_running_dir(dir)?;
    let names = candidate_names(dir, &dir_fd)?;
    Ok(read_listed(dir, &dir_fd, cache, &names))
}

/// The names of `dir`'s entries that may be records: `*.json`, not hidden.
fn candidate_names(dir: &Path, dir_fd: &OwnedFd) -> Result<EntryNames, RunningError> {
    let io_err = io_at(dir);
    let entries = rustix::fs::Dir::read_from(dir_fd).map_err(|e| io_err(e.into()))?;
    let mut names = EntryNames::default();
    for entry in entries {
        let entry = entry.map_err(|e| io_err(e.into()))?;
        let Ok(file_name) = entry.file_name().to_str() else {
            continue;
        };
        let Some(stem) = file_name.strip_suffix(RECORD_SUFFIX) else {
            continue;
        };
        // Hidden names are a writer's staging files (and `.json` alone has no stem).
        if stem.is_empty() || file_name.starts_with('.') {
            continue;
        }
        names.push(file_name);
    }
    Ok(names)
}

/// Read the entries `names` lists (and any the cache knew that it missed) through `cache`.
fn read_listed(dir: &Path, dir_fd: &OwnedFd, cache: &RecordCache, names: &EntryNames) -> Scan {
    let reader = EntryReader {
        dir_fd,
        dir,
        me: rustix::process::geteuid().as_raw(),
        known: cache.snapshot(dir),
    };
    let all: Vec<&str> = names.iter().collect();
    let found = if all.len() >= SPLIT_SCAN_ENTRIES {
        let (first, second) = all.split_at(all.len() / 2);
        std::thread::scope(|scope| {
            let other = std::thread::Builder::new()
                .name("scan".to_owned())
                .spawn_scoped(scope, || reader.read(second));
            let mut found = reader.read(first);
            match other.map(|other| other.join()) {
                Ok(Ok(theirs)) => found.append(theirs),
                // No thread to spare (or it panicked): this one reads the other half too.
                Ok(Err(_)) | Err(_) => found.append(reader.read(second)),
            }
            found
        })
    } else {
        reader.read(&all)
    };
    let mut found = found;
    read_unlisted_known(&reader, &all, &mut found);
    let Found {
        scan,
        seen,
        changed,
        ..
    } = found;
    if changed || seen.len() != reader.known.len() {
        cache.replace(dir, seen.into_iter().collect());
    }
    scan
}

/// Keep one entry per name in `found`, then read by name each entry the cache knew that the
/// listing `all` did not show: a listing may miss a name a record was renamed over (btrfs 6.8
/// and later, NFS), and a record left out of a scan is taken for removed. A name really gone
/// is found gone again (one more `lstat`).
fn read_unlisted_known(reader: &EntryReader<'_>, all: &[&str], found: &mut Found) {
    let read = found.scan.records.len() + found.scan.unreadable.len();
    one_entry_per_name(&mut found.scan);
    let kept = found.scan.records.len() + found.scan.unreadable.len();
    if every_known_name_listed(
        reader.known.len(),
        found.known_hits,
        read,
        kept,
        found.vanished,
    ) {
        return;
    }
    let missing = unlisted(&reader.known, all);
    if !missing.is_empty() {
        found.append(reader.read(&missing));
        one_entry_per_name(&mut found.scan);
    }
}

/// Whether a listing surely showed every one of the `known` names the cache held, without
/// comparing names: each name it showed was read into one entry (`read` entries were `kept`
/// once repeats were dropped, none had `vanished`), so its `hits` on the cache counted each
/// name once.
fn every_known_name_listed(
    known: usize,
    hits: usize,
    read: usize,
    kept: usize,
    vanished: usize,
) -> bool {
    vanished == 0 && read == kept && hits == known
}

/// The names in `known` (the entries the cache kept from earlier scans) that `listed` does not
/// hold.
fn unlisted<'a>(known: &'a CacheMap, listed: &[&str]) -> Vec<&'a str> {
    let listed: HashSet<&str> = listed.iter().copied().collect();
    known
        .keys()
        .map(AsRef::as_ref)
        .filter(|name| !listed.contains(name))
        .collect()
}

/// Sort `scan` (records newest first, unreadable entries by name) and keep one entry per file
/// name: a directory listing may name a file twice while a record is renamed over it, and every
/// reader of a scan counts on one record a session. A name read both as a record and as
/// unreadable is a record (one of its reads was whole).
fn one_entry_per_name(scan: &mut Scan) {
    // An id is its file's name, so once repeats are gone the unstable sort is deterministic.
    scan.records
        .sort_unstable_by(|a, b| b.session_id.cmp(&a.session_id));
    scan.records.dedup_by(|a, b| a.session_id == b.session_id);
    scan.unreadable
        .sort_by(|a, b| a.file_name.cmp(&b.file_name));
    scan.unreadable.dedup_by(|a, b| a.file_name == b.file_name);
    let records = &scan.records;
    scan.unreadable.retain(|entry| {
        let stem = entry.file_name.strip_suffix(RECORD_SUFFIX);
        !stem.is_some_and(|stem| {
            records
                .binary_search_by(|record| stem.cmp(record.session_id.as_str()))
                .is_ok()
        })
    });
}

/// The candidate names of one directory listing, in one buffer rather than one allocation each.
#[derive(Default)]
struct EntryNames {
    text: String,
    ends: Vec<usize>,
}

impl EntryNames {
    fn push(&mut self, name: &str) {
        self.text.push_str(name);
        self.ends.push(self.text.len());
    }

    fn iter(&self) -> impl Iterator<Item = &str> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(&self.ends)
            .map(|(start, end)| &self.text[start..*end])
    }
}

/// What judges entries of one scan: the directory, our uid, and what the cache knew.
struct EntryReader<'a> {
    dir_fd: &'a OwnedFd,
    dir: &'a Path,
    me: u32,
    known: Arc<CacheMap>,
}

/// What reading some entries found, and what the cache should hold for them.
struct Found {
    scan: Scan,
    /// Every record read, by name, as the cache should hold it.
    seen: Vec<(Arc<str>, Arc<Cached>)>,
    /// Whether any of them differs from what the cache held (the cache map is built anew only
    /// then: most passes find nothing new).
    changed: bool,
    /// How many of the names read the cache knew (a name listed twice counts twice).
    known_hits: usize,
    /// How many names read were gone by then.
    vanished: usize,
}

impl Found {
    fn append(&mut self, mut other: Found) {
        self.scan.records.append(&mut other.scan.records);
        self.scan.unreadable.append(&mut other.scan.unreadable);
        self.seen.append(&mut other.seen);
        self.changed |= other.changed;
        self.known_hits += other.known_hits;
        self.vanished += other.vanished;
    }
}

impl EntryReader<'_> {
    /// Judge and read every entry named in `names`.
    fn read(&self, names: &[&str]) -> Found {
        let mut found = Found {
            scan: Scan {
                records: Vec::with_capacity(names.len()),
                unreadable: Vec::new(),
            },
            seen: Vec::with_capacity(names.len()),
            changed: false,
            known_hits: 0,
            vanished: 0,
        };
        for &file_name in names {
            let Some(stem) = file_name.strip_suffix(RECORD_SUFFIX) else {
                continue;
            };
            let read = if is_valid_session_id(stem) {
                self.read_valid(file_name, stem, &mut found)
            } else {
                Err(Unreadable::InvalidName.into())
            };
            match read {
                Ok(record) => found.scan.records.push(record),
                // Gone since the listing: there is nothing to report (a rename onto the name
                // never leaves it missing, so this is not a record being rewritten).
                Err(EntryError::Vanished) => found.vanished += 1,
                Err(EntryError::Unreadable(why)) => found.scan.unreadable.push(UnreadableEntry {
                    file_name: file_name.to_owned(),
                    why,
                }),
            }
        }
        found
    }

    /// Read an entry named after a valid session id through the cache, noting what to cache.
    fn read_valid(
        &self,
        file_name: &str,
        stem: &str,
        found: &mut Found,
    ) -> Result<Arc<RunningRecord>, EntryError> {
        let before = self.known.get_key_value(file_name);
        found.known_hits += usize::from(before.is_some());
        let (read, cached) = read_entry_cached(
            self.dir_fd,
            self.dir,
            file_name,
            stem,
            self.me,
            before.map(|(_, cached)| cached),
        );
        match (cached, before) {
            (Some(now), Some((name, before))) if Arc::ptr_eq(&now, before) => {
                found.seen.push((Arc::clone(name), now));
            }
            (None, None) => {}
            (Some(now), _) => {
                found.changed = true;
                found.seen.push((Arc::from(file_name), now));
            }
            (None, Some(_)) => found.changed = true,
        }
        read
    }
}

/// Every record that parses, most recent session first. Changes nothing: [`scan`] also
/// reports the entries that are not records.
pub fn list(dir: &Path) -> Result<Vec<RunningRecord>, RunningError> {
    let records = scan(dir, None)?.records;
    Ok(records.into_iter().map(Arc::unwrap_or_clone).collect())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn write_record(dir: &Path, session_id: &str) {
        let json = format!(
            r#"{{"session_id":"{session_id}","url":"127.0.0.1:1","pid":1,"process_start":"1",
            "capsule_name":"c","capsule_version":"1","workdir":"/w","outlives_launcher":true,
            "started_at":"2026-11-30T00:00:00Z"}}"#
        );
        std::fs::write(dir.join(RunningRecord::file_name_for(session_id)), json).expect("write");
    }

    #[test]
    fn a_scan_keeps_one_entry_per_file_name() {
        let record = |id: &str| {
            let json = format!(
                r#"{{"session_id":"{id}","url":"127.0.0.1:1","pid":1,"process_start":"1",
                "capsule_name":"c","capsule_version":"1","workdir":"/w","outlives_launcher":true,
                "started_at":"2026-11-30T00:00:00Z"}}"#
            );
            Arc::new(serde_json::from_str::<RunningRecord>(&json).expect("a record"))
        };
        let unreadable = |id: &str| UnreadableEntry {
            file_name: RunningRecord::file_name_for(id),
            why: Unreadable::Malformed("cut short".to_owned()),
        };
        let (a, b, c) = ("ses_a", "ses_b", "ses_c");
        let mut scan = Scan {
            records: vec![record(a), record(c), record(a), record(b), record(a)],
            unreadable: vec![unreadable(c), unreadable("ses_d"), unreadable("ses_d")],
        };
        one_entry_per_name(&mut scan);
        let ids: Vec<&str> = scan.records.iter().map(|r| r.session_id.as_str()).collect();
        assert_eq!(ids, [c, b, a]);
        let names: Vec<&str> = scan
            .unreadable
            .iter()
            .map(|u| u.file_name.as_str())
            .collect();
        assert_eq!(names, ["ses_d.json"]);
    }

    fn listing(names: &[&str]) -> EntryNames {
        let mut listing = EntryNames::default();
        for name in names {
            listing.push(name);
        }
        listing
    }

    fn ids(scan: &Scan) -> Vec<&str> {
        scan.records.iter().map(|r| r.session_id.as_str()).collect()
    }

    #[test]
    fn a_record_a_listing_missed_is_read_by_name_when_the_cache_knew_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
            .expect("chmod 700");
        let (a, b) = ("ses_a", "ses_b");
        // Just written, so not settled: the cache knows the names all the same.
        write_record(dir.path(), a);
        write_record(dir.path(), b);
        let cache = RecordCache::default();
        assert_eq!(ids(&scan(dir.path(), Some(&cache)).expect("scan")), [b, a]);
        let dir_fd = open_running_dir(dir.path()).expect("open");
        // A listing that missed `ses_a.json`, and one that showed `ses_b.json` twice instead.
        for shown in [&["ses_b.json"][..], &["ses_b.json", "ses_b.json"]] {
            let found = read_listed(dir.path(), &dir_fd, &cache, &listing(shown));
            assert_eq!(ids(&found), [b, a], "{shown:?}");
        }
        // Counted with the unreadable entries: a name listed three times beside one that is
        // no record must not pass for every known name (`ses_c` and `ses_a` missed).
        write_record(dir.path(), "ses_c");
        std::fs::write(dir.path().join("ses_bad.json"), "{").expect("write");
        assert_eq!(
            ids(&scan(dir.path(), Some(&cache)).expect("scan")),
            ["ses_c", b, a]
        );
        let shown = ["ses_b.json", "ses_b.json", "ses_b.json", "ses_bad.json"];
        let found = read_listed(dir.path(), &dir_fd, &cache, &listing(&shown));
        assert_eq!(ids(&found), ["ses_c", b, a], "{shown:?}");
        std::fs::remove_file(dir.path().join("ses_a.json")).expect("remove");
        let shown = ["ses_b.json", "ses_c.json"];
        let found = read_listed(dir.path(), &dir_fd, &cache, &listing(&shown));
        assert_eq!(ids(&found), ["ses_c", b], "really gone");
        assert!(!cache.snapshot(dir.path()).contains_key("ses_a.json"));
    }

    #[test]
    fn only_a_listing_read_one_entry_a_name_with_every_known_hit_skips_the_check() {
        assert!(every_known_name_listed(2, 2, 5, 5, 0));
        assert!(
            !every_known_name_listed(2, 1, 5, 5, 0),
            "a known name missing"
        );
        assert!(
            !every_known_name_listed(2, 2, 5, 4, 0),
            "a name listed twice"
        );
        assert!(!every_known_name_listed(2, 2, 5, 5, 1), "a name vanished");
    }

    #[test]
    fn a_directory_judged_by_two_threads_reads_every_entry_once_newest_first() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
            .expect("chmod 700");
        let count = SPLIT_SCAN_ENTRIES + 11;
        let ids: Vec<String> = (0..count).map(|n| format!("ses_{n:032x}")).collect();
        for id in &ids {
            write_record(dir.path(), id);
        }
        std::fs::write(dir.path().join("ses_bad.json"), "{").expect("write");
        std::fs::write(dir.path().join("not a name.json"), "{}").expect("write");
        std::fs::create_dir(dir.path().join("ses_dir.json")).expect("mkdir");

        let cache = RecordCache::default();
        for _ in 0..2 {
            let found = scan(dir.path(), Some(&cache)).expect("scan");
            let read: Vec<&str> = found
                .records
                .iter()
                .map(|r| r.session_id.as_str())
                .collect();
            let newest_first: Vec<&str> = ids.iter().rev().map(String::as_str).collect();
            assert_eq!(read, newest_first);
            let unreadable: Vec<(&str, &Unreadable)> = found
                .unreadable
                .iter()
                .map(|entry| (entry.file_name.as_str(), &entry.why))
                .collect();
            assert!(matches!(
                unreadable[..],
                [
                    ("not a name.json", Unreadable::InvalidName),
                    ("ses_bad.json", Unreadable::Malformed(_)),
                    ("ses_dir.json", Unreadable::Directory),
                ]
            ));
        }
    }
}
