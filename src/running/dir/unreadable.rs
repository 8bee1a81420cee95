//! Why a `*.json` entry of the running directory is not a valid record (past what size one is
//! not read at all), and whether what was read of it proves it never can be one (the one rule
//! that lets an unreadable entry go).

use rustix::io::Errno;

use crate::running::record::{RECORD_SUFFIX, is_murmur_session_id};

/// The most of a record file that is read. murmur sets no limit: a record is a few KiB, and one
/// carrying hundreds of credentials of a few KiB each still fits. A larger file is not read,
/// so nothing is known of it: it is counted unreadable and kept ([`Unreadable::TooLarge`]).
pub const MAX_RECORD_BYTES: u64 = 1024 * 1024;

/// Why a `*.json` entry is not a valid record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreadable {
    /// A symlink: never followed.
    Symlink,
    /// A directory: reported, never removed.
    Directory,
    /// A FIFO, socket or device.
    NotRegularFile,
    /// Owned by another uid.
    ForeignOwner(u32),
    /// Larger than [`MAX_RECORD_BYTES`]: not read, so it may well be a record; never removed.
    TooLarge,
    /// Not a record of any generation.
    Malformed(String),
    /// Its `session_id` is not the one its file name says.
    NameMismatch(String),
    /// Its name is not `<session id>.json` for any id the registry can address.
    InvalidName,
    /// It kept being replaced while it was read (a writer rewriting it rapidly).
    Replaced,
    /// Opening or reading it failed: no evidence about what it is.
    Io(String),
}

impl Unreadable {
    /// Whether the entry merely failed to be read ([`Unreadable::Io`], [`Unreadable::Replaced`]):
    /// that says nothing about what the file holds, and may pass. Every other reason stays true
    /// of the entry until someone changes it.
    pub fn is_read_failure(&self) -> bool {
        matches!(self, Self::Io(_) | Self::Replaced)
    }

    /// Whether what was read of the entry proves it can never be a record: the one rule that
    /// lets any path remove an unreadable entry (see [`UnreadableEntry::is_removable`]).
    pub(super) fn proves_no_record(&self) -> bool {
        match self {
            // Read whole, and not a record of this file's session.
            Self::Malformed(_) | Self::NameMismatch(_) => true,
            // murmur renames a regular file onto the name; removing a link removes only the link.
            Self::Symlink | Self::NotRegularFile => true,
            // Nothing of it was read. Size proves nothing (murmur sets no limit on a record), nor
            // does ownership (a record written by root, say), and a directory is never ours.
            Self::TooLarge | Self::ForeignOwner(_) | Self::Directory => false,
            // No name the registry can address: it may be someone else's file.
            Self::InvalidName => false,
            // A read that failed is no evidence at all.
            Self::Io(_) | Self::Replaced => false,
        }
    }
}

/// Why reading one entry gave no record: it is not one, or it was not there any more.
pub(super) enum EntryError {
    /// No file by that name when it was read: removed or renamed away after the listing.
    Vanished,
    /// There is a file, and it is not a valid record.
    Unreadable(Unreadable),
}

impl From<Unreadable> for EntryError {
    fn from(why: Unreadable) -> Self {
        Self::Unreadable(why)
    }
}

/// An error of `lstat` or `open` on an entry: `ENOENT` is the entry gone, anything else is no
/// evidence either way.
pub(super) fn entry_errno(e: Errno) -> EntryError {
    match e {
        Errno::NOENT => EntryError::Vanished,
        e => EntryError::Unreadable(Unreadable::Io(std::io::Error::from(e).to_string())),
    }
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Symlink => f.write_str("is a symlink"),
            Self::Directory => f.write_str("is a directory"),
            Self::NotRegularFile => f.write_str("is not a regular file"),
            Self::ForeignOwner(uid) => write!(f, "is owned by uid {uid}"),
            Self::TooLarge => write!(f, "is larger than {MAX_RECORD_BYTES} bytes"),
            Self::Malformed(why) => write!(f, "is not a record: {why}"),
            Self::NameMismatch(id) => write!(f, "names session {id:?}, not its file name"),
            Self::InvalidName => f.write_str("is not named after a session id"),
            Self::Replaced => f.write_str("kept changing while it was read"),
            Self::Io(why) => write!(f, "could not be read: {why}"),
        }
    }
}

/// A `*.json` entry of the running directory that is not a valid record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadableEntry {
    /// The entry's file name within the running directory.
    pub file_name: String,
    /// What is wrong with it.
    pub why: Unreadable,
}

impl UnreadableEntry {
    /// Whether this entry can be removed on what was read of it: it is named like a murmur
    /// record (`ses_` + 32 hex digits: any other name may be someone else's file) and what was
    /// read proves it can never be one. Not a directory, not a file of another owner or over
    /// the size cap (nothing of those was read), and not an entry that merely failed to read.
    /// Removing a symlink removes only the link.
    pub fn is_removable(&self) -> bool {
        self.file_name
            .strip_suffix(RECORD_SUFFIX)
            .is_some_and(is_murmur_session_id)
            && self.why.proves_no_record()
    }
}
