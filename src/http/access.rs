//! Each request's one access record: its method, route template, status and latency, counted
//! for `/metrics` and logged as one event (target `murmur_registry::http::access`).
//!
//! Invariant: a request is named by its route template (`/sessions/{id}`, from axum's
//! `MatchedPath`), never by its raw path: no session id, query string or header reaches a log
//! line or a label, and the set of series stays bounded (unknown paths are [`UNMATCHED`],
//! unknown methods [`OTHER_METHOD`]).

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

use super::AppState;

/// The route of a request that matched none (answered 404 or 400 by the fallback).
pub const UNMATCHED: &str = "unmatched";
/// The method of a request whose method is not one HTTP defines.
pub const OTHER_METHOD: &str = "OTHER";

/// The route template `request` was routed to, or [`UNMATCHED`].
pub fn route_template(request: &Request) -> &str {
    request
        .extensions()
        .get::<MatchedPath>()
        .map_or(UNMATCHED, MatchedPath::as_str)
}

/// The method as a label: one of HTTP's own, else [`OTHER_METHOD`] (a client may send any
/// token as a method).
fn method_word(method: &Method) -> &'static str {
    const KNOWN: [Method; 9] = [
        Method::GET,
        Method::HEAD,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::PATCH,
        Method::OPTIONS,
        Method::CONNECT,
        Method::TRACE,
    ];
    KNOWN
        .iter()
        .find(|known| *known == method)
        .map_or(OTHER_METHOD, Method::as_str)
}

/// Middleware: run the request inside a span naming its method and route, then count and log
/// its answer. The latency is to the response head: a stream's body is not waited for.
pub async fn record(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let method = method_word(request.method());
    let route = route_template(&request).to_owned();
    let started = Instant::now();
    let span = tracing::debug_span!("request", method = %method, route = %route);
    let response = next.run(request).instrument(span).await;
    let took = started.elapsed();
    let status = response.status().as_u16();
    state.metrics().answered(method, &route, status, took);
    // Whole microseconds: a float of nanoseconds prints as noise.
    let latency_ms = u64::try_from(took.as_micros()).unwrap_or(u64::MAX) as f64 / 1000.0;
    tracing::info!(method = %method, route = %route, status, latency_ms, "request");
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_method_outside_https_own_is_other() {
        assert_eq!(method_word(&Method::DELETE), "DELETE");
        let invented = Method::from_bytes(b"SES_0193A4C2").expect("a token");
        assert_eq!(method_word(&invented), OTHER_METHOD);
    }
}
