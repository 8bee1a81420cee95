//! Files only their owner may see, written whole and removed only when still the same file.
//!
//! The running directory, the token file and etcd's credentials share these rules, so they live
//! here once, a file per job:
//! - Directories are opened with `O_NOFOLLOW` and checked and fixed through that descriptor,
//!   so what is checked is what is fixed (`private_dir`).
//! - A secret is read only from a regular file of ours with no bit for group or others, judged
//!   on the descriptor it is then read from (`private_file`).
//! - A file is replaced atomically: staged under a hidden, random, exclusive name in the same
//!   directory (mode 0600 whatever the umask), fsynced, renamed into place, directory fsynced
//!   (`write_whole`).
//! - A file is removed only while it is provably the one the caller judged: it is first renamed
//!   to a hidden quarantine name (atomically taking whatever is under the name now), judged
//!   there, and unlinked or put back (`unlink`; what became of it: [`FileFate`]). A file put back
//!   that finds another under its name keeps the name only if it is the newer (later mtime); it
//!   is dropped only for a newer copy or the same bytes (`put_back`). The quarantine name carries
//!   its owner's pid and start token (`quarantine`); an entry stranded there (a crash, or a
//!   removal that failed halfway, this process's own included) is put back by the next pruning
//!   pass (`recovery`).

mod fate;
mod file_identity;
#[cfg(test)]
mod fixtures;
mod private_dir;
mod private_file;
mod put_back;
mod quarantine;
mod recovery;
mod unlink;
mod write_whole;

pub use fate::FileFate;
pub(crate) use file_identity::FileIdentity;
pub(crate) use private_dir::open_dir;
pub use private_dir::{PrivateDirError, WiderMode, hold_private_dir};
pub(crate) use private_file::{PrivateFileProblem, read_private_file};
pub(crate) use recovery::recover_quarantined;
pub(crate) use unlink::unlink_checked;
pub(crate) use write_whole::{create_atomically, fill_random, write_atomically};
