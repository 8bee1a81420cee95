//! Listing the running directory: directory passes (scan and layers 1–2) shared by the listings
//! that ask at the same moment, one record read by id, and reads that change nothing.
//!
//! A small directory on a local filesystem is listed on the calling task (see
//! [`INLINE_SCAN_ENTRIES`]); anything else, and every directory on a network or userspace
//! filesystem (where an `lstat` may wait on a server), is read on the blocking pool.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;

use super::pins::Pins;
use super::verify::{Cards, Reading, ReadingCard, lean_reading};
use super::{Registry, RegistryError, blocking, copy_error};
use crate::running::{self, ProcessState, RunningRecord, UnreadableEntry};

/// A directory whose last scan found at most this many entries is read on the calling task
/// instead of the blocking pool (see the module's invariants).
pub const INLINE_SCAN_ENTRIES: usize = 32;

/// What orders every listing, newest first (descending): `started_at` as the record writes it
/// (RFC 3339 in UTC), then the session id. A page of a listing starts after a session by it.
pub fn listing_key(record: &RunningRecord) -> (&str, &str) {
    (&record.started_at, &record.session_id)
}

/// What one directory pass gives every listing that waited for it: the `probe=false` listing,
/// or why the directory could not be read.
pub(super) type PassResult = Result<Arc<Listing>, Arc<RegistryError>>;

/// Every record in the directory, read, plus how many entries are not records.
#[derive(Debug)]
pub struct Listing {
    /// Newest session first ([`listing_key`], descending).
    pub readings: Vec<Reading>,
    /// Entries that are not valid records.
    pub unreadable: Vec<UnreadableEntry>,
    /// Reading by reading, the card that verified it, for a listing that asked for cards
    /// ([`Registry::sessions_with_cards`]); empty for any other. Dropped with the listing.
    pub cards: Vec<ReadingCard>,
    /// The listing as a client receives it, once encoded ([`Listing::encoded`]).
    encoded: OnceLock<Bytes>,
}

impl Listing {
    fn new(readings: Vec<Reading>, unreadable: Vec<UnreadableEntry>) -> Self {
        Self {
            readings,
            unreadable,
            cards: Vec::new(),
            encoded: OnceLock::new(),
        }
    }

    /// This listing as `encode` makes it, made once: a listing shared by many callers (the
    /// `probe=false` one of a shared pass) is encoded by the first of them and the bytes are
    /// handed to the rest. The bytes are always this listing's own: the slot is private, it
    /// is filled from `self` only, and the readings cannot change while the listing is shared.
    pub fn encoded<E>(&self, encode: impl FnOnce(&Self) -> Result<Bytes, E>) -> Result<Bytes, E> {
        if let Some(bytes) = self.encoded.get() {
            return Ok(bytes.clone());
        }
        let bytes = encode(self)?;
        Ok(self.encoded.get_or_init(|| bytes).clone())
    }
}

/// The magic number of the filesystem `dir` is on (statfs(2)'s `f_type`); `None` when it cannot
/// be told (the directory does not exist yet, say).
fn filesystem_magic(dir: &Path) -> Option<u32> {
    // `f_type` is a signed word of the platform's size; the magic numbers fit 32 bits.
    rustix::fs::statfs(dir).ok().map(|stat| stat.f_type as u32)
}

/// Whether a filesystem's metadata calls answer from this kernel alone: `false` for network and
/// userspace filesystems, whose calls may wait on a server or a daemon, and when it cannot be
/// told. The pool is always safe, only slower.
fn answers_locally(magic: Option<u32>) -> bool {
    // NFS, SMB, CIFS, SMB2, FUSE, 9P, Ceph, AFS, Coda, GFS2, Lustre.
    const REMOTE: [u32; 11] = [
        0x6969,
        0x517B,
        0xFF53_4D42,
        0xFE53_4D42,
        0x6573_5546,
        0x0102_1997,
        0x00C3_6400,
        0x5346_414F,
        0x7375_7245,
        0x0116_1970,
        0x0BD0_0BD0,
    ];
    magic.is_some_and(|magic| !REMOTE.contains(&magic))
}

/// Whether an inotify watch on a filesystem sees every change to it, whoever makes it: only on
/// a local disk or memory filesystem named here. On any other (a network or cluster filesystem,
/// whose other clients' changes no watch here sees, or one not known) `false`, and the live
/// view reads the directory on every pass: slower, never blind.
fn watch_sees_every_change(magic: Option<u32>) -> bool {
    // ext2/3/4, XFS, Btrfs, tmpfs, ramfs, overlayfs, F2FS, ZFS, bcachefs, ReiserFS, JFS.
    const WATCHABLE: [u32; 11] = [
        0xEF53,
        0x5846_5342,
        0x9123_683E,
        0x0102_1994,
        0x8584_58F6,
        0x794C_7630,
        0xF2F5_2010,
        0x2FC1_2FC1,
        0xCA45_1A4E,
        0x5265_4973,
        0x3153_464A,
    ];
    magic.is_some_and(|magic| WATCHABLE.contains(&magic))
}

/// What a directory pass reads with, owned, so that a pass runs as a task of its own and to
/// its end whoever started it (see `passes`).
#[derive(Debug, Clone)]
pub(super) struct PassReader {
    pub(super) dir: PathBuf,
    cache: Arc<running::RecordCache>,
    /// The processes pinned by pidfd, which layers 1–2 read first.
    pub(super) pins: Arc<Pins>,
    /// Entries the latest scan found; `usize::MAX` before the first.
    last_scan_entries: Arc<AtomicUsize>,
    /// Whether a small directory may be listed on the calling task (it is on a local
    /// filesystem; decided once, when the registry is made).
    inline_scans: bool,
    /// Whether a watch on the directory sees every change to it (decided with `inline_scans`).
    watched_fully: bool,
}

impl PassReader {
    /// A reader of `dir`, listing on the calling task only if it is on a local filesystem.
    pub(super) fn new(dir: PathBuf) -> Self {
        let magic = filesystem_magic(&dir);
        Self {
            inline_scans: answers_locally(magic),
            watched_fully: watch_sees_every_change(magic),
            dir,
            cache: Arc::default(),
            pins: Arc::new(Pins::new()),
            last_scan_entries: Arc::new(AtomicUsize::new(usize::MAX)),
        }
    }

    /// The registry's one scan of its directory: through its cache, the pins no record names
    /// any more swept once it is read. Blocking: the blocking pool's, or the calling task's for
    /// a small directory on a local filesystem.
    fn scan(&self) -> Result<running::Scan, RegistryError> {
        let pass = self.pins.begin_pass();
        let scan = running::scan(&self.dir, Some(&self.cache))?;
        self.pins.sweep(pass, &scan.records);
        Ok(scan)
    }

    /// One pass: scan the directory and read layers 1–2 for every record, in one trip to the
    /// blocking pool if it takes one; the `probe=false` listing of what it read.
    async fn pass(self) -> PassResult {
        let inline = self.inline_scans
            && self.last_scan_entries.load(Ordering::Relaxed) <= INLINE_SCAN_ENTRIES;
        let last_scan_entries = Arc::clone(&self.last_scan_entries);
        let read = move || {
            let scan = self.scan()?;
            let states = self.pins.states(&scan.records);
            Ok::<_, RegistryError>((scan, states))
        };
        let read = if inline {
            read()
        } else {
            blocking(read).await.and_then(|read| read)
        };
        let (scan, states) = read.map_err(Arc::new)?;
        last_scan_entries.store(
            scan.records.len() + scan.unreadable.len(),
            Ordering::Relaxed,
        );
        let mut readings: Vec<Reading> =
            (scan.records.into_iter().zip(states).map(lean_reading)).collect();
        readings.sort_by(|a, b| listing_key(&b.record).cmp(&listing_key(&a.record)));
        Ok(Arc::new(Listing::new(readings, scan.unreadable)))
    }
}

/// The result of a pass that panicked: its waiters are told, as for a blocking task that did.
fn pass_panicked(why: String) -> PassResult {
    Err(Arc::new(RegistryError::Task(format!(
        "the directory pass panicked: {why}"
    ))))
}

impl Registry {
    /// Whether an inotify watch on the running directory sees every change to it, whoever
    /// makes it (decided when the registry was made, from its filesystem).
    pub fn watch_sees_every_change(&self) -> bool {
        self.reader.watched_fully
    }

    /// Every record, verified (three layers when `probe`, else layers 1–2), newest first.
    ///
    /// Changes nothing on disk. The directory and layers 1–2 are read by a pass that starts
    /// after this call: concurrent listings share one such pass (see `passes`), and the
    /// `probe=false` listing it makes is handed to all of them as is. Doors are probed
    /// concurrently, at most the prober's limit at once, and a door already being probed for
    /// an identical record (by any caller) is not asked again: its probe's answer is shared.
    pub async fn sessions(&self, probe: bool) -> Result<Arc<Listing>, RegistryError> {
        let lean = self.lean_listing().await?;
        if !probe {
            return Ok(lean);
        }
        Ok(Arc::new(self.probed(&lean, Cards::Unwanted).await))
    }

    /// [`Registry::sessions`] with the probe, plus each live session's card as its door served
    /// it in that probe (secrets redacted as [`Registry::card`] does), in [`Listing::cards`].
    ///
    /// No door is asked twice: the card is the one that verified the session, shared with any
    /// caller probing the same record at the same moment. The verdicts are those of a listing
    /// without cards.
    pub async fn sessions_with_cards(&self) -> Result<Listing, RegistryError> {
        let lean = self.lean_listing().await?;
        Ok(self.probed(&lean, Cards::Wanted).await)
    }

    /// The `probe=false` listing of a directory pass started after this call.
    async fn lean_listing(&self) -> Result<Arc<Listing>, RegistryError> {
        // The reader is copied only by the caller that starts a pass, not by every caller.
        self.passes
            .run(|| self.reader.clone().pass(), pass_panicked)
            .await
            .map_err(|shared| copy_error(&shared))
    }

    /// `lean`'s records verified with all three layers.
    async fn probed(&self, lean: &Listing, cards: Cards) -> Listing {
        let (readings, cards) = self.verified(&lean.readings, cards == Cards::Wanted).await;
        let mut listing = Listing::new(readings, lean.unreadable.clone());
        listing.cards = cards;
        self.tally.listed(&listing);
        listing
    }

    /// `lean`'s readings (layers 1–2) verified with all three layers, in their order, with
    /// each live one's card when `with_cards` (else no cards): a page of a listing, which
    /// probes the doors of its own sessions only. Changes nothing on disk.
    pub async fn verified(
        &self,
        lean: &[Reading],
        with_cards: bool,
    ) -> (Vec<Reading>, Vec<ReadingCard>) {
        let (records, states) = (lean.iter())
            .map(|reading| (Arc::clone(&reading.record), reading.process.clone()))
            .unzip();
        let cards = if with_cards {
            Cards::Wanted
        } else {
            Cards::Unwanted
        };
        self.probe_all(records, states, cards).await
    }

    /// One record, verified like [`Registry::sessions`]. Changes nothing on disk.
    pub async fn session(&self, session_id: &str, probe: bool) -> Result<Reading, RegistryError> {
        let (record, process) = self.read_with_process(session_id).await?;
        Ok(self.read_one(record, process, probe).await)
    }

    /// The record of `session_id` and what layers 1–2 say of it, in one trip to the pool.
    pub(super) async fn read_with_process(
        &self,
        session_id: &str,
    ) -> Result<(Arc<RunningRecord>, ProcessState), RegistryError> {
        if !running::is_valid_session_id(session_id) {
            return Err(RegistryError::InvalidSessionId);
        }
        let dir = self.reader.dir.clone();
        let pins = Arc::clone(&self.reader.pins);
        let id = session_id.to_owned();
        blocking(move || {
            let record = running::read_record(&dir, &id)?;
            let process = record.as_ref().map(|record| pins.state(record));
            Ok::<_, RegistryError>(record.map(Arc::new).zip(process))
        })
        .await??
        .ok_or_else(|| RegistryError::NotFound(session_id.to_owned()))
    }

    /// Every entry of the directory, read but not verified, for a caller that verifies them all
    /// next (the live view's pass): the same scan as a listing's pass, through the same cache,
    /// on the blocking pool. Changes nothing on disk.
    pub(crate) async fn scan(&self) -> Result<running::Scan, RegistryError> {
        let reader = self.reader.clone();
        blocking(move || reader.scan()).await?
    }

    /// The records among `records` whose file is still the very one each was read from
    /// ([`running::still_the_file_read`]); none when that cannot be looked at. Changes nothing.
    pub async fn still_the_files_read(
        &self,
        records: Vec<Arc<RunningRecord>>,
    ) -> Vec<Arc<RunningRecord>> {
        if records.is_empty() {
            return records;
        }
        blocking(move || {
            records
                .into_iter()
                .filter(|record| running::still_the_file_read(record))
                .collect()
        })
        .await
        .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::{answers_locally, watch_sees_every_change};

    const EXT4: u32 = 0xEF53;
    const TMPFS: u32 = 0x0102_1994;
    const NFS: u32 = 0x6969;
    const FUSE: u32 = 0x6573_5546;
    /// OCFS2: a cluster filesystem on a shared disk, neither remote nor watchable.
    const OCFS2: u32 = 0x7461_636F;

    #[test]
    fn a_watch_is_trusted_only_on_filesystems_named_as_watchable() {
        assert!(watch_sees_every_change(Some(EXT4)));
        assert!(watch_sees_every_change(Some(TMPFS)));
        for not_watchable in [Some(NFS), Some(FUSE), Some(OCFS2), None] {
            assert!(
                !watch_sees_every_change(not_watchable),
                "{not_watchable:x?}"
            );
        }
    }

    #[test]
    fn only_network_and_userspace_filesystems_or_an_unknown_one_keep_scans_off_the_task() {
        assert!(answers_locally(Some(EXT4)));
        assert!(answers_locally(Some(OCFS2)), "a disk of this kernel's");
        for remote in [Some(NFS), Some(FUSE), None] {
            assert!(!answers_locally(remote), "{remote:x?}");
        }
    }
}
