//! Which sessions a stop is under way for: each stop holds its session's lock for its whole
//! run, so stops of one session run one at a time, and a prune can tell at the moment it
//! unlinks that the process it found gone was the stop's doing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The stops in progress, by session id: each stop holds its session's lock for its whole run.
/// Shared with blocking tasks, so a prune can tell at the moment it unlinks whether a stop of
/// that session is under way.
pub(super) type StopsInProgress = Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>;

/// Whether a stop of `session_id` is under way (its lock is held beyond the map's own copy).
pub(super) fn is_stopping(stops: &StopsInProgress, session_id: &str) -> bool {
    stops
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(session_id)
        .is_some_and(|lock| Arc::strong_count(lock) > 1)
}
