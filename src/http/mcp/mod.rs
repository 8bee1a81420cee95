//! `/mcp`: the registry as a Model Context Protocol server (streamable HTTP), built on the
//! official Rust SDK, `rmcp`, so agents reach the sessions API as MCP tools and resources.
//!
//! Invariants kept here:
//! - `/mcp` keeps every rule of the other routes: it sits behind the same Host/Origin gate and
//!   bearer check (rmcp's own Host and Origin checks are off, so `--allow-host` and
//!   `--allow-origin` mean the same here), and rmcp's request-body limit is the API's 16 KiB.
//!   It is mounted where the problem+json rewriting does not reach: MCP's own errors (JSON-RPC
//!   bodies, rmcp's plain 4xx) go out as the protocol defines them.
//! - One path per job: every tool runs the very handler of the REST route for the same
//!   operation ([`tool_calls`]), so its evidence rules, query words and JSON are the route's.
//! - MCP sessions are bounded ([`session_bound`]); a GET stream and a `subscriptions/listen`
//!   stream each take an event-stream place (`routes.rs`; a listen that holds none is
//!   refused), and subscriptions listen to the live view's feed as `/events` does.

mod handler;
mod not_json_rpc;
mod output_schema;
mod resources;
mod session_bound;
mod subscriptions;
mod tool_calls;
mod tools;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::{AppState, MAX_BODY_BYTES, auth};
use handler::McpHandler;
use session_bound::BoundedSessions;

/// Where the MCP endpoint is served.
pub const PATH: &str = "/mcp";

/// The header naming a 2025-11-25 MCP session.
pub(super) const SESSION_HEADER: &str = "mcp-session-id";

/// The header naming a 2026-07-28 request's method (rmcp refuses one that differs from the
/// body's).
const METHOD_HEADER: &str = "mcp-method";

/// The 2026-07-28 method whose answer is a stream that stays open.
const LISTEN_METHOD: &str = "subscriptions/listen";

/// Whether a POST with `headers` opens a `subscriptions/listen` stream: it takes an
/// event-stream place, as `GET /mcp` and `/events` do.
pub(super) fn opens_a_listen(headers: &HeaderMap) -> bool {
    headers
        .get_all(METHOD_HEADER)
        .iter()
        .any(|method| method.as_bytes() == LISTEN_METHOD.as_bytes())
}

/// The request headers a browser MCP client sends besides the API's own (granted by CORS to
/// `--allow-origin`'s origins).
pub(super) const CORS_REQUEST_HEADERS: [&str; 4] = [
    SESSION_HEADER,
    "mcp-protocol-version",
    METHOD_HEADER,
    "last-event-id",
];

/// How many MCP sessions are kept at once by default (`--max-mcp-sessions`).
pub const DEFAULT_MAX_MCP_SESSIONS: usize = 32;

/// What `/mcp` is given apart from the registry: its session bound, and the token that ends
/// its sessions and streams at shutdown. Cheap to clone; clones share the token.
#[derive(Debug, Clone)]
pub struct McpSettings {
    max_sessions: usize,
    closing: CancellationToken,
}

impl Default for McpSettings {
    fn default() -> Self {
        Self {
            max_sessions: DEFAULT_MAX_MCP_SESSIONS,
            closing: CancellationToken::new(),
        }
    }
}

impl McpSettings {
    /// These settings keeping at most `max_sessions` MCP sessions (at least one).
    pub fn with_max_sessions(mut self, max_sessions: usize) -> Self {
        self.max_sessions = max_sessions.max(1);
        self
    }

    /// End every MCP session and stream (the server is shutting down).
    pub fn close(&self) {
        self.closing.cancel();
    }
}

/// The `/mcp` routes (every method), behind the bearer check, for `state`.
pub(super) fn routes(state: &AppState) -> Router<AppState> {
    let settings = state.mcp().clone();
    let config = StreamableHttpServerConfig::default()
        // Ours answer first (the gate and the bearer check around this service).
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_max_request_body_bytes(MAX_BODY_BYTES)
        // A 2026-07-28 request's terminal answer goes out as one JSON body, not an SSE stream
        // of it (rmcp falls back to SSE when a notification comes first).
        .with_json_response(true)
        .with_cancellation_token(settings.closing.child_token());
    let handler_state = state.clone();
    let service = StreamableHttpService::new(
        move || Ok(McpHandler::new(handler_state.clone())),
        Arc::new(BoundedSessions::new(settings.max_sessions)),
        config,
    );
    Router::new()
        .route_service(PATH, service)
        .route_layer(middleware::from_fn(
            not_json_rpc::bad_request_when_not_json_rpc,
        ))
        .route_layer(middleware::from_fn(ended_is_no_content))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ))
}

/// A `DELETE` that ended its session answers `204 No Content`: rmcp says `202 Accepted`, which
/// clients (the official Python SDK among them) take for a failed termination.
async fn ended_is_no_content(request: Request, next: Next) -> Response {
    let deleting = request.method() == Method::DELETE;
    let mut response = next.run(request).await;
    if deleting && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
        *response.body_mut() = Body::empty();
        response.headers_mut().remove(header::CONTENT_LENGTH);
    }
    response
}
