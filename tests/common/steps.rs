//! Named steps for a long scenario (the browser test, the bench): a panic inside a step is
//! re-raised naming the step, so a failure says where it happened, not only what.
//!
//! Used from a test through `mod common;`, and from the bench by `#[path]` (std and
//! futures-util only, so it brings in none of the other fixtures).

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;

/// Run one step `what` names (e.g. ``dashboard step `set_up` ``); a panic in it panics again
/// with `what failed: ` before the original message.
pub async fn run_step<T>(what: &str, run: impl Future<Output = T>) -> T {
    match AssertUnwindSafe(run).catch_unwind().await {
        Ok(value) => value,
        Err(panic) => {
            let why = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            panic!("{what} failed: {why}");
        }
    }
}
