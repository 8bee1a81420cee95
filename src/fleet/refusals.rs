//! Fleet entries a reader refused, told once per key: one log line when a key is first refused
//! (or refused for another reason), however often it is read again or rewritten, and a count of
//! every refusal, by kind, for `/metrics`.
//!
//! Invariants: the memory of keys told never grows past [`REMEMBERED`] keys (past it, it starts
//! afresh, so a key may be told once more); a key that later holds an accepted value or is
//! deleted is forgotten, so its next refusal is told again. Process-wide, as a registry follows
//! one fleet.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// An entry under the prefix that the fleet cache does not hold, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The key, lossily decoded (for the log).
    pub key: String,
    /// Why it was skipped.
    pub why: String,
    /// Of which kind the refusal is.
    pub refusal: Refusal,
}

/// Why a value was refused, as `/metrics` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Beyond the caps every value keeps ([`super::model::MAX_VALUE_BYTES`], its skills).
    TooLarge,
    /// Not an entry of the layout: a foreign key, a value not of its shape, or naming another.
    Invalid,
}

impl Refusal {
    /// Every kind, in the order of their numbers.
    pub const ALL: [Self; 2] = [Self::TooLarge, Self::Invalid];

    /// The label value.
    pub fn word(self) -> &'static str {
        match self {
            Self::TooLarge => "too_large",
            Self::Invalid => "invalid",
        }
    }
}

/// The most keys remembered as told.
const REMEMBERED: usize = 4096;

/// Each key told, with why.
static TOLD: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());

/// Refusals counted, by [`Refusal`] (in the order of [`Refusal::ALL`]).
static COUNTED: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

fn told() -> MutexGuard<'static, BTreeMap<String, String>> {
    // Every change leaves the map whole: a poisoned lock's map is still consistent.
    TOLD.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Count `skipped` and log it, unless its key was told already for the same reason.
pub(crate) fn report(skipped: &Skipped) {
    COUNTED[skipped.refusal as usize].fetch_add(1, Ordering::Relaxed);
    if first_telling(&mut told(), skipped) {
        tracing::warn!(key = %skipped.key, why = %skipped.why, "fleet entry skipped");
    }
}

/// Whether `skipped` is news to `told` (which then remembers it).
fn first_telling(told: &mut BTreeMap<String, String>, skipped: &Skipped) -> bool {
    if told.get(&skipped.key) == Some(&skipped.why) {
        return false;
    }
    if told.len() >= REMEMBERED && !told.contains_key(&skipped.key) {
        told.clear();
    }
    told.insert(skipped.key.clone(), skipped.why.clone());
    true
}

/// `key` holds an accepted value now, or nothing: a later refusal of it is news.
pub(crate) fn forget(key: &str) {
    forget_each([key.as_bytes()]);
}

/// [`forget`] each of `keys`, under one hold of the told set: a cold read's page forgets
/// thousands of keys, from several threads at once.
pub(crate) fn forget_each<'a>(keys: impl IntoIterator<Item = &'a [u8]>) {
    let mut told = told();
    if told.is_empty() {
        return;
    }
    for key in keys {
        told.remove(&*String::from_utf8_lossy(key));
    }
}

/// How many values were refused for `refusal`, since the process started.
pub fn refused(refusal: Refusal) -> u64 {
    COUNTED[refusal as usize].load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skipped(key: &str, why: &str) -> Skipped {
        Skipped {
            key: key.to_owned(),
            why: why.to_owned(),
            refusal: Refusal::TooLarge,
        }
    }

    #[test]
    fn a_key_is_told_once_per_reason_and_the_memory_stays_bounded() {
        let mut told = BTreeMap::new();
        assert!(first_telling(&mut told, &skipped("/p/a", "large")));
        assert!(!first_telling(&mut told, &skipped("/p/a", "large")));
        assert!(first_telling(&mut told, &skipped("/p/a", "bad")));
        assert!(first_telling(&mut told, &skipped("/p/b", "bad")));
        for n in 0..3 * REMEMBERED {
            first_telling(&mut told, &skipped(&format!("/p/{n}"), "large"));
            assert!(told.len() <= REMEMBERED);
        }
    }

    #[test]
    fn refusals_are_counted_by_kind() {
        let before = refused(Refusal::TooLarge);
        report(&skipped("/refusals-test/a", "large"));
        report(&skipped("/refusals-test/a", "large"));
        assert!(
            refused(Refusal::TooLarge) >= before + 2,
            "each refusal counts"
        );
        forget("/refusals-test/a");
        assert!(!told().contains_key("/refusals-test/a"));
    }
}
