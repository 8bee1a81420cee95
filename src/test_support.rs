//! The one door for tests, the benchmark and fuzz targets to what is no part of the library's
//! API: hidden from the docs, and free to change with the code behind it.
//!
//! Invariant: an item reached only from outside the crate for testing lives behind this module
//! (re-exported, or a thin function over a crate-private one), never `pub` at its own place.

use std::future::Future;

use axum::Router;
use tokio::net::TcpListener;

use crate::http::ServeLimits;
use crate::registry::Registry;

pub use crate::http::dashboard::CONTENT_SECURITY_POLICY;
pub use crate::http::event_stream::EventName;
pub use crate::registry::verify::ProbesInFlight;

/// The fleet's parts that tests, the bench and the `fleet_values` fuzz target drive directly: the
/// key layout, the values, the watch-fed cache and (feature `fleet`) etcd, publishing and the
/// watcher. The server reaches the fleet through `cli` and `http::AppState`.
pub mod fleet {
    pub use crate::fleet::{DoorScope, FleetView, HOST_LOAD_REFRESH, HostId, SessionEntry};
    pub use crate::fleet::{cache, keys};
    #[cfg(feature = "fleet")]
    pub use crate::fleet::{etcd, publisher, publishing, watcher};
}

/// The live view at its own level, for tests that listen to it without a server.
pub mod monitor {
    pub use crate::monitor::{
        EVENT_BUFFER, EventKind, Monitor, Next, Published, SNAPSHOT_OVER, SubscribeError,
    };
}

/// Lift the soft open-files limit to the hard one, as `serve` does: tests and the bench hold
/// thousands of sockets of their own.
pub fn raise_open_files_limit() {
    crate::cli::raise_open_files_limit();
}

/// Serve `router` on `listener` under `limits` until `shutdown` resolves, then drain: the
/// accept loop `serve` runs, around a router of the test's own.
pub async fn serve_router(
    listener: TcpListener,
    router: Router,
    limits: ServeLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    crate::http::server::serve_router(listener, router, limits, shutdown).await
}

/// How many door probes `registry` has in flight right now, and how many verifications wait on
/// them (several callers verifying one record wait on one probe).
pub fn probes_in_flight(registry: &Registry) -> ProbesInFlight {
    registry.probes_in_flight()
}

/// A door's answer `body` read as the probe reads it (numbers that hold a secret read as
/// strings), then redacted with `record`'s secrets: the card and its skills as a caller is
/// shown them, or `None` when the body is not JSON.
pub fn redacted_door_card(
    body: &[u8],
    record: &crate::running::RunningRecord,
) -> Option<(serde_json::Value, Vec<crate::running::Skill>)> {
    let card = crate::running::parse_door_json(body, record).ok()?;
    let card = crate::running::RedactedCard::redacted(card, record);
    let skills = card.skills();
    Some((card.json().clone(), skills))
}

/// `reason` with `record`'s secrets replaced, as every failure of a probe is shown.
pub fn redacted_reason(reason: String, record: &crate::running::RunningRecord) -> String {
    crate::running::redact_secrets(reason, record)
}

/// Unlink what of `unreadable` (from a [`crate::running::scan`] of `dir`) is provably junk, as
/// a pruning pass does; answers which went.
pub fn remove_unreadable(
    dir: &std::path::Path,
    unreadable: &[crate::running::UnreadableEntry],
) -> Result<Vec<crate::running::UnreadableEntry>, crate::running::RunningError> {
    crate::running::remove_unreadable(dir, unreadable)
}

/// The bytes an event stream writes for event `name` with `id` and `value` as its data.
pub fn sse_event_text(id: u64, name: EventName, value: &serde_json::Value) -> Vec<u8> {
    crate::http::sse_event_text(id, name, value)
}

/// The bytes an event stream writes for the comment `text`.
pub fn sse_comment_text(text: &str) -> Vec<u8> {
    crate::http::sse_comment_text(text)
}

/// A fleet watcher as [`crate::fleet::watcher::start`] starts one, but reading the fleet in
/// ranges of `page_keys` keys, each within `page_deadline` (a read of many short pages).
#[cfg(feature = "fleet")]
pub fn start_fleet_watcher_paged(
    settings: crate::fleet::etcd::EtcdSettings,
    keys: crate::fleet::keys::FleetKeys,
    ttl: std::time::Duration,
    view: crate::fleet::FleetView,
    page_keys: i64,
    page_deadline: std::time::Duration,
) -> crate::fleet::watcher::FleetWatcher {
    let paging = crate::fleet::etcd::ReadPaging {
        keys: page_keys,
        deadline: page_deadline,
    };
    crate::fleet::watcher::start_paged(settings, keys, ttl, view, paging)
}
