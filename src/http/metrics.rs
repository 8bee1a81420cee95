//! `GET /metrics`: the Prometheus text exposition (version 0.0.4), rendered by
//! `prometheus-client` from figures the registry already holds.
//!
//! Invariants kept here:
//! - A scrape reads counters and the last pictures only: no directory pass, no door probe.
//! - Label values come from the wire's own enums (session states, outcomes, removal reasons)
//!   or from bounded sets ([`super::access`]'s route templates and methods, [`ShedCause`]),
//!   so no session id or raw path can become a series.

mod figures;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::prometheus_text::{CONTENT_TYPE, encode};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use super::AppState;
use super::responses::GateProblems;
use super::server::LoadFigures;
use crate::fleet::PublishFigures;
use crate::registry::DURATION_BUCKETS;

/// The path of the exposition.
pub const PATH: &str = "/metrics";

/// Every metric's name starts with this.
const PREFIX: &str = "murmur_registry_";

/// One request's series: what was asked, of which route, and how it was answered.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    method: &'static str,
    route: String,
    status: u16,
}

/// One route's duration series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RouteLabels {
    method: &'static str,
    route: String,
}

type Durations = Family<RouteLabels, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// The HTTP side's figures: requests by route template and status, their durations, and the
/// accept loop's load figures.
#[derive(Debug)]
pub struct HttpMetrics {
    requests: Family<RequestLabels, Counter>,
    durations: Durations,
    load: Arc<LoadFigures>,
    fleet_publishing: Arc<PublishFigures>,
}

impl Default for HttpMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            durations: Family::new_with_constructor(duration_histogram),
            load: Arc::default(),
            fleet_publishing: Arc::default(),
        }
    }
}

impl HttpMetrics {
    /// Count one answered request: `route` is its template (see [`super::access`]), `took` the
    /// time to its response head.
    pub(super) fn answered(&self, method: &'static str, route: &str, status: u16, took: Duration) {
        let route = route.to_owned();
        self.durations
            .get_or_create(&RouteLabels {
                method,
                route: route.clone(),
            })
            .observe(took.as_secs_f64());
        self.requests
            .get_or_create(&RequestLabels {
                method,
                route,
                status,
            })
            .inc();
    }

    /// The accept loop's load figures, shared with it.
    pub fn load(&self) -> &Arc<LoadFigures> {
        &self.load
    }

    /// How publishing to the fleet stands, shared with the publishing (feature `fleet`).
    pub fn fleet_publishing(&self) -> &Arc<PublishFigures> {
        &self.fleet_publishing
    }
}

/// The registry's figures for Prometheus.
///
/// Needs the bearer token. A scrape probes nothing: sessions by state are those of the
/// registry's latest picture, its last verified listing (a page: the sessions it verified) or the
/// live view's last pass (made at `murmur_registry_last_listing_timestamp_seconds`); counters
/// run from the registry's start.
#[utoipa::path(
    get, path = PATH, tag = "service",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The Prometheus text exposition (version 0.0.4)",
            content_type = "text/plain; version=0.0.4; charset=utf-8", body = String),
        GateProblems,
    )
)]
pub async fn metrics(State(state): State<AppState>) -> Response {
    let mut exposition =
        prometheus_client::registry::Registry::with_prefix(PREFIX.trim_end_matches('_'));
    let http = state.metrics();
    exposition.register(
        "http_requests",
        "Requests answered by the router, by method, route template and status",
        http.requests.clone(),
    );
    exposition.register(
        "http_request_duration_seconds",
        "Time from request head to response head, by method and route template",
        http.durations.clone(),
    );
    exposition.register_collector(Box::new(figures::Figures::of(&state)));
    let mut text = String::new();
    match encode(&mut text, &exposition) {
        Ok(()) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(error) => {
            tracing::error!(%error, "cannot render the metrics");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}
