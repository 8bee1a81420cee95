//! Scenario `chaos`: what every part of the soak shares: operations done per kind, invariants
//! checked per kind, violations, the registry's current address, the gate that quiesces the
//! churn, and the flag that ends it.
//!
//! Invariant: a violation is recorded, never asserted on the spot, so the soak runs to its end
//! and reports all of them; the scenario fails afterwards when there is any.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, RwLock};

/// Counts by name, printed in name order.
#[derive(Default)]
pub struct Tally(Mutex<BTreeMap<&'static str, u64>>);

impl Tally {
    pub fn add(&self, what: &'static str) {
        self.add_n(what, 1);
    }

    pub fn add_n(&self, what: &'static str, n: u64) {
        *self.lock().entry(what).or_default() += n;
    }

    /// Every count, `  name: n` a line.
    pub fn lines(&self) -> String {
        self.lock()
            .iter()
            .map(|(what, n)| format!("  {what}: {n}\n"))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, u64>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Everything the soak's threads and tasks share.
pub struct Shared {
    pub operations: Tally,
    pub invariants: Tally,
    violations: Mutex<Vec<String>>,
    /// `http://127.0.0.1:<port>` of the registry running now.
    base: RwLock<String>,
    pub token: String,
    /// Churn and requests that change something hold it to read; a quiesce phase takes it to
    /// write, so once it holds it nothing but the registry itself changes the world.
    pub gate: tokio::sync::RwLock<()>,
    pub done: AtomicBool,
    pub fleet: bool,
}

impl Shared {
    pub fn new(base: String, token: String, fleet: bool) -> Self {
        Self {
            operations: Tally::default(),
            invariants: Tally::default(),
            violations: Mutex::new(Vec::new()),
            base: RwLock::new(base),
            token,
            gate: tokio::sync::RwLock::new(()),
            done: AtomicBool::new(false),
            fleet,
        }
    }

    /// Record a broken invariant (printed at once, and counted).
    pub fn violation(&self, what: String) {
        eprintln!("chaos: VIOLATION: {what}");
        self.violations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(what);
    }

    pub fn violations(&self) -> Vec<String> {
        self.violations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub fn base(&self) -> String {
        self.base
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub fn set_base(&self, base: String) {
        *self
            .base
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = base;
    }

    pub fn is_done(&self) -> bool {
        self.done.load(std::sync::atomic::Ordering::Relaxed)
    }
}
