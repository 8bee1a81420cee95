//! Files for the tests: private temporary directories, raw writes, FIFOs, and snapshots of a
//! directory precise enough to notice any change a reader could make.
//!
//! Invariant: every directory handed out is fresh and private (0700), so no test sees
//! another's files, and every write lands with mode 0600 as murmur gives a record.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use tempfile::TempDir;

/// A fresh, private (0700, as murmur makes its running directory) temporary directory for one
/// test (a running directory, or a fake home).
pub fn temp_dir() -> TempDir {
    let dir = tempfile::Builder::new()
        .prefix("murmur-registry-test-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .expect("create a temporary directory");
    assert_eq!(mode_of(dir.path()), 0o700, "a private test directory");
    dir
}

/// The permission bits of `path` (not following a symlink at its last component).
pub fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .mode()
        & 0o7777
}

/// What a directory entry is, as [`dir_snapshot`] records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntrySnapshot {
    /// `file`, `dir`, `symlink`, `fifo` or `other`.
    pub kind: &'static str,
    pub inode: u64,
    pub mode: u32,
    pub len: u64,
    pub modified: Option<SystemTime>,
    /// The link's target, for a symlink.
    pub target: Option<PathBuf>,
}

/// Every entry of `dir` by name, with enough detail to notice any change a reader could make
/// (a removal, a replacement, a chmod, a write), without opening anything.
pub fn dir_snapshot(dir: &Path) -> BTreeMap<String, EntrySnapshot> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|entry| {
            let entry = entry.expect("directory entry");
            let meta = std::fs::symlink_metadata(entry.path()).expect("lstat entry");
            let ft = meta.file_type();
            let kind = if ft.is_file() {
                "file"
            } else if ft.is_dir() {
                "dir"
            } else if ft.is_symlink() {
                "symlink"
            } else if std::os::unix::fs::FileTypeExt::is_fifo(&ft) {
                "fifo"
            } else {
                "other"
            };
            let target = ft
                .is_symlink()
                .then(|| std::fs::read_link(entry.path()).expect("readlink"));
            let snapshot = EntrySnapshot {
                kind,
                inode: meta.ino(),
                mode: meta.mode() & 0o7777,
                len: meta.len(),
                modified: meta.modified().ok(),
                target,
            };
            (entry.file_name().to_string_lossy().into_owned(), snapshot)
        })
        .collect()
}

/// Write `bytes` to `dir/name` as a plain file, mode 0600 (what murmur gives a record).
///
/// The mode is set through the open file, not the path: a registry running beside the test
/// may read the record and prune it the moment it exists.
pub fn write_raw(dir: &Path, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(name);
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)?;
        file.write_all(bytes.as_ref())?;
        // An existing file keeps its mode through `open`.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
    };
    write().unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}

/// Replace `dir/name` the way a writer does: stage a new file beside it, rename it over the name.
/// The file under the name afterwards is a different inode from the one before.
pub fn replace_by_rename(dir: &Path, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
    let staged = write_raw(dir, &format!(".{name}.replacement.tmp"), bytes);
    let path = dir.join(name);
    std::fs::rename(&staged, &path).expect("rename the replacement into place");
    path
}

/// Create a FIFO at `path` (mode 0600).
pub fn make_fifo(path: &Path) {
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        path,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .unwrap_or_else(|e| panic!("mkfifo {}: {e}", path.display()));
}

/// How many bytes the *calling thread* has read through `read(2)`-like calls so far
/// (`rchar` of `/proc/thread-self/io`). Per thread, so tests running in parallel do not
/// disturb it; reading the file itself adds a few hundred bytes.
pub fn thread_bytes_read() -> u64 {
    let io = std::fs::read_to_string("/proc/thread-self/io").expect("read /proc/thread-self/io");
    io.lines()
        .find_map(|line| line.strip_prefix("rchar:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("rchar in /proc/thread-self/io")
}

/// Fail unless nothing at all (not even a dangling symlink) exists at `path`.
pub fn assert_absent(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Ok(meta) => panic!("{} still exists ({:?})", path.display(), meta.file_type()),
        Err(e) => panic!("lstat {}: {e}", path.display()),
    }
}
