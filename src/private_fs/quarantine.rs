//! Quarantine names: the hidden name a file is renamed to while its removal is judged,
//! `.<name>.<pid>-<start token>.<random>.unlinking`, made, held while judged, and parsed back.
//! The owner's pid and start token let a later pass tell whether the remover may still be at
//! work; the holds tell it for this process's own.

use std::collections::BTreeSet;
use std::sync::{Mutex, OnceLock};

use super::write_whole::random_hex;

/// The suffix of an entry moved aside by [`super::unlink_checked`] while it is judged.
const QUARANTINE: &str = "unlinking";

/// This process as a quarantine names its owner: `<pid>-<start token>`, so that a later holder
/// of the pid is not taken for it. The token is `""` if it cannot be read.
fn quarantine_owner() -> &'static str {
    static OWNER: OnceLock<String> = OnceLock::new();
    OWNER.get_or_init(|| {
        let pid = std::process::id();
        let start = crate::process_identity::process_start_token(pid).unwrap_or_default();
        format!("{pid}-{start}")
    })
}

/// A quarantine name for `name`, unique to this call: `.<name>.<pid>-<start>.<random>.unlinking`.
pub(super) fn quarantine_name(name: &str) -> std::io::Result<String> {
    Ok(format!(
        ".{name}.{}.{}.{QUARANTINE}",
        quarantine_owner(),
        random_hex()?
    ))
}

/// The quarantine names this process holds right now: an entry of ours not among them was
/// stranded (its removal failed halfway) and is put back like a dead process's.
static HELD_QUARANTINES: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// One quarantine name held while it is judged (an [`super::unlink_checked`] call, or a put
/// back's file taken aside).
pub(super) struct HeldQuarantine(pub(super) String);

impl HeldQuarantine {
    pub(super) fn hold(name: &str) -> std::io::Result<Self> {
        let quarantine = quarantine_name(name)?;
        held_quarantines().insert(quarantine.clone());
        Ok(Self(quarantine))
    }
}

impl Drop for HeldQuarantine {
    fn drop(&mut self) {
        held_quarantines().remove(&self.0);
    }
}

pub(super) fn held_quarantines() -> std::sync::MutexGuard<'static, BTreeSet<String>> {
    // A set of names: no invariant a panicking holder could break halfway.
    HELD_QUARANTINES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A quarantine name taken apart: the entry's own name and who moved it aside.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct QuarantinedName<'a> {
    pub(super) name: &'a str,
    pub(super) pid: u32,
    /// The owner's start token; `None` in names written before tokens were (pid only).
    pub(super) start: Option<&'a str>,
}

impl<'a> QuarantinedName<'a> {
    /// `.<name>.<pid>[-<start>].<random>.unlinking`, or `None` for any other name.
    pub(super) fn parse(file_name: &'a str) -> Option<Self> {
        let inner = file_name
            .strip_prefix('.')?
            .strip_suffix(QUARANTINE)?
            .strip_suffix('.')?;
        let (rest, random) = inner.rsplit_once('.')?;
        let (name, owner) = rest.rsplit_once('.')?;
        // `.` and `..` name the directory itself: never an entry to put back.
        let names_an_entry = !matches!(name, "" | "." | "..");
        if !names_an_entry || random.len() != 16 || !random.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let (pid, start) = match owner.split_once('-') {
            Some((pid, start)) => (pid, Some(start)),
            None => (owner, None),
        };
        Some(Self {
            name,
            pid: pid.parse().ok()?,
            start,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quarantine_names_parse_back() {
        let me = std::process::id();
        let ours = quarantine_name("ses_1.json").expect("a name");
        let parsed = QuarantinedName::parse(&ours).expect("our own name parses");
        assert_eq!((parsed.name, parsed.pid), ("ses_1.json", me));
        assert_eq!(
            format!("{me}-{}", parsed.start.unwrap_or("?")),
            quarantine_owner()
        );
        assert_eq!(
            QuarantinedName::parse(".ses_1.json.42-77.0123456789abcdef.unlinking"),
            Some(QuarantinedName {
                name: "ses_1.json",
                pid: 42,
                start: Some("77")
            })
        );
        assert_eq!(
            QuarantinedName::parse(".ses_1.json.42.0123456789abcdef.unlinking"),
            Some(QuarantinedName {
                name: "ses_1.json",
                pid: 42,
                start: None
            })
        );
        for not_ours in [
            ".ses_1.json.42.0123456789abcdef.tmp",
            "ses_1.json.42.0123456789abcdef.unlinking",
            ".ses_1.json.x.0123456789abcdef.unlinking",
            ".ses_1.json.x-1.0123456789abcdef.unlinking",
            "..42.0123456789abcdef.unlinking",
            ".ses_1.json.42.short.unlinking",
            // Hex but not 16 digits, and 16 characters but not hex.
            ".ses_1.json.42.0123abcd.unlinking",
            ".ses_1.json.42.0123456789abcdeg.unlinking",
            ".ses_1.json.42.0123456789abcdef.unlinkin",
            ".ses_1.json.42.0123456789abcdefunlinking",
            // Names of the directory itself.
            "...42.0123456789abcdef.unlinking",
            "....42.0123456789abcdef.unlinking",
        ] {
            assert_eq!(QuarantinedName::parse(not_ours), None, "{not_ours}");
        }
    }
}
