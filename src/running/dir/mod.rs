//! The running directory: finding it and holding it private (`directory`), reading one entry
//! (`entry`, why one is no record: `unreadable`), scanning them all (`scan`, through a
//! `cache`), and removing records and junk (`prune`).
//!
//! Invariants kept here:
//! - `~/.murmur` and `~/.murmur/running` are directories of the effective user at 0700: a wider
//!   mode is narrowed at setup; a link, a non-directory or a foreign owner is refused with the
//!   path. Every pass checks the directory again through one `O_NOFOLLOW` descriptor and
//!   refuses it, untouched, while it is not ours or lets group or others in.
//! - Only `*.json` entries are records, read through `O_NOFOLLOW | O_NONBLOCK` only when they
//!   are regular files we own, and never past [`MAX_RECORD_BYTES`].
//! - [`scan()`] and [`list`] change nothing. Pruning passes remove only files named like a murmur
//!   record that what was read proves can never be one ([`UnreadableEntry::is_removable`]);
//!   size is never such proof, so a file over the cap is counted and kept.
//!   [`prune()`] removes a record only for a `Gone` reading, only the very file it was read from,
//!   and with it only the `.control` seen beside it then.
//! - An entry gone (`ENOENT`) by the time it is read is skipped, neither a record nor
//!   unreadable; any other failure to read is [`Unreadable::Io`].
//! - A [`scan()`] through a [`RecordCache`] reuses a parse only while `lstat` shows the very file
//!   read before, unchanged, and that file had not changed for a second before it was read; the
//!   records it hands out are shared with the cache, never changed after they are parsed.
//! - A record the cache knew is left out of a scan only once it is read by name and found gone:
//!   a directory listing can miss a name a record is renamed over (btrfs >= 6.8, NFS), and a
//!   record left out is taken for removed.

mod cache;
mod directory;
mod entry;
mod prune;
mod scan;
mod unreadable;

pub use cache::RecordCache;
pub use directory::{running_dir, running_dir_in};
pub use entry::{read_record, still_the_file_read};
pub use prune::prune;
pub(crate) use prune::{recover_quarantined, remove_unreadable};
pub use scan::{Scan, list, scan};
pub use unreadable::{MAX_RECORD_BYTES, Unreadable, UnreadableEntry};
