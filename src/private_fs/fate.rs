//! What became of a file a removal judged: one word from the unlink at the bottom up to the
//! registry's answers (a prune, a signal or a stop that found the process gone).

/// What became of a file a removal judged (a record's, a unit file's, an unreadable entry's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileFate {
    /// The file judged was unlinked.
    Removed,
    /// Nothing was under its name any more: nothing was unlinked.
    AlreadyGone,
    /// Something else was under the name by then (another file, a directory, or the file no
    /// longer judged removable); it was left in place and nothing was unlinked.
    Replaced,
    /// Unlinking failed; the file stays, and the next prune finds the same evidence.
    Kept {
        /// Why it could not be removed.
        error: String,
    },
}

impl FileFate {
    /// What became of a record's file, as the end of a sentence: `the record was removed`, ….
    pub fn sentence(&self) -> String {
        match self {
            Self::Removed => "the record was removed".to_owned(),
            Self::AlreadyGone | Self::Replaced => {
                "the record had already been removed or replaced".to_owned()
            }
            Self::Kept { error } => format!("the record could not be removed: {error}"),
        }
    }
}
