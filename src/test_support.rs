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
pub use crate::registry::verify::ProbesInFlight;

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
