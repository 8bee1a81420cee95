//! The registry's HTTP service: routes, layers, and the `serve` loop shared by `main` and tests.
//!
//! Invariants kept here:
//! - Routes and the OpenAPI spec come from the same `utoipa_axum` routers, so a route cannot
//!   exist undocumented, nor a documented one be missing.
//! - Layer order, outermost first: credentials headers are marked sensitive before the access
//!   record (`access`: method, route template, status and latency, counted and logged; never a
//!   raw path, a query or a header); the Host/Origin gate answers 403 before any other work; error responses are reshaped into
//!   problems; the bearer check guards every route but `/healthz`, `/openapi.json` and the
//!   dashboard's static files (`/`, `/dashboard.js`, `/dashboard.css`), which carry no data.
//! - Nothing here touches `/proc` or the running directory itself: all of that goes through
//!   [`crate::registry::Registry`].

mod access;
pub(crate) mod auth;
mod body;
pub(crate) mod dashboard;
pub(crate) mod error;
pub(crate) mod event_data;
pub(crate) mod event_stream;
pub(crate) mod events;
pub(crate) mod fleet;
mod include;
mod json_body;
mod list_filter;
pub(crate) mod mcp;
pub(crate) mod metrics;
mod paging;
mod panics;
pub(crate) mod resource_feed;
pub(crate) mod responses;
mod routes;
pub(crate) mod server;
mod session_page;
pub(crate) mod sessions;
mod sse_body;
pub(crate) use sse_body::{sse_comment_text, sse_event_text};

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{HeaderName, StatusCode, header};
use axum::response::IntoResponse;
use axum::{Json, Router, middleware};
use serde::Serialize;
use tokio::net::TcpListener;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::fleet::FleetView;
use crate::monitor::Monitor;
use crate::registry::Registry;
use crate::token::TokenStore;
use auth::HostPolicy;
use error::{ApiError, Problem, ProblemType};
pub(crate) use list_filter::ListFilter;
use metrics::HttpMetrics;
pub use server::ServeLimits;

/// Request bodies larger than this are refused with 413.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// What every handler shares: the registry, its live view, the token, and the Host/Origin
/// policy.
#[derive(Debug, Clone)]
pub struct AppState {
    inner: Arc<Shared>,
    /// Apart from `inner` so that [`AppState::with_fleet`] can set it at any time.
    fleet: FleetView,
    /// `/mcp`'s session bound and shutdown token ([`AppState::with_mcp`]).
    mcp: mcp::McpSettings,
}

#[derive(Debug)]
struct Shared {
    registry: Arc<Registry>,
    events: Monitor,
    /// The `resources` events, sampled while a stream asks for them.
    resources: resource_feed::ResourceFeed,
    tokens: TokenStore,
    hosts: HostPolicy,
    cors_origins: Vec<String>,
    metrics: HttpMetrics,
}

impl AppState {
    /// State for a registry bound at `bound`.
    ///
    /// `allow_hosts` and `allow_origins` extend the loopback defaults (`auth::HostPolicy`);
    /// origins listed here are also granted CORS.
    pub fn new(
        registry: Registry,
        tokens: TokenStore,
        bound: SocketAddr,
        allow_hosts: &[String],
        allow_origins: &[String],
    ) -> Self {
        let registry = Arc::new(registry);
        Self {
            inner: Arc::new(Shared {
                events: Monitor::new(Arc::clone(&registry)),
                resources: resource_feed::ResourceFeed::default(),
                registry,
                tokens,
                hosts: HostPolicy::new(bound, allow_hosts, allow_origins),
                cors_origins: allow_origins.to_vec(),
                metrics: HttpMetrics::default(),
            }),
            fleet: FleetView::not_configured(),
            mcp: mcp::McpSettings::default(),
        }
    }

    /// This state serving `/mcp` with `settings` (its session bound). Give it before serving.
    pub fn with_mcp(mut self, settings: mcp::McpSettings) -> Self {
        self.mcp = settings;
        self
    }

    /// What `/mcp` is given: its session bound and shutdown token.
    pub fn mcp(&self) -> &mcp::McpSettings {
        &self.mcp
    }

    /// This state serving `fleet` on `/fleet/*` (without it they answer 404
    /// `fleet-not-configured`). Give it before serving: clones made earlier keep the old view.
    pub fn with_fleet(mut self, fleet: FleetView) -> Self {
        self.fleet = fleet;
        self
    }

    /// The fleet view behind `/fleet/*`.
    pub fn fleet(&self) -> &FleetView {
        &self.fleet
    }

    /// The registry.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// The live view behind `/events` (idle until someone listens).
    pub fn events(&self) -> &Monitor {
        &self.inner.events
    }

    /// A share of the `resources` events of the live view's steps (sampling starts with the
    /// first share and stops when the last one is dropped).
    pub fn listen_resources(&self) -> resource_feed::ResourceListener {
        self.inner
            .resources
            .listen(&self.inner.registry, &self.inner.events)
    }

    /// The token store.
    pub fn tokens(&self) -> &TokenStore {
        &self.inner.tokens
    }

    /// The Host/Origin policy.
    pub fn host_policy(&self) -> &HostPolicy {
        &self.inner.hosts
    }

    /// The HTTP side's figures for `/metrics` (requests, and the accept loop's load).
    pub fn metrics(&self) -> &HttpMetrics {
        &self.inner.metrics
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "murmur-registry",
        description = "The verified registry of running murmur capsules on this machine.\n\n\
            Every route but `/healthz`, `/openapi.json` and the dashboard's static files needs \
            `Authorization: Bearer <token>`; \
            the token is in `~/.murmur/registry/token` (see `murmur-registry token`). \
            Errors are RFC 9457 `application/problem+json`.",
        license(name = "MIT OR Apache-2.0"),
    ),
    servers((url = "http://127.0.0.1:7420", description = "the default loopback bind")),
    modifiers(&BearerScheme),
    components(schemas(
        crate::wire::SessionAdded,
        crate::wire::SessionChanged,
        crate::wire::SessionRemoved,
        crate::registry::RemovalCause,
    )),
    tags(
        (name = sessions::TAG, description = "Running capsule sessions, verified in three layers"),
        (
            name = events::TAG,
            description = "The live view: every change to the verified picture, pushed"
        ),
        (
            name = fleet::TAG,
            description = "Every host's verified sessions, from etcd (`--fleet-etcd`)"
        ),
        (name = "service", description = "The registry itself"),
        (
            name = dashboard::TAG,
            description = "The browser dashboard: static files embedded in the binary, \
                served without a token"
        ),
    )
)]
struct ApiDoc;

struct BearerScheme;

impl Modify for BearerScheme {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let mut scheme = Http::new(HttpAuthScheme::Bearer);
        scheme.description = Some(
            "The hex token from the registry's token file (`murmur-registry token --show`)."
                .to_owned(),
        );
        components.add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}

fn protected_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(sessions::list_sessions, sessions::prune_all))
        .routes(routes!(sessions::get_session, sessions::prune_session))
        .routes(routes!(sessions::get_liveness))
        .routes(routes!(sessions::signal_session))
        .routes(routes!(sessions::stop_session))
        .routes(routes!(sessions::get_card))
        .routes(routes!(events::events))
        .routes(routes!(fleet::fleet_sessions))
        .routes(routes!(fleet::fleet_hosts))
        .routes(routes!(fleet::fleet_events))
        .routes(routes!(metrics::metrics))
}

fn public_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(openapi_json))
        .routes(routes!(dashboard::dashboard_page))
        .routes(routes!(dashboard::dashboard_script))
        .routes(routes!(dashboard::dashboard_style))
}

/// The OpenAPI 3.1 document, generated from the handlers.
pub fn openapi() -> utoipa::openapi::OpenApi {
    OpenApiRouter::<AppState>::with_openapi(ApiDoc::openapi())
        .merge(protected_routes())
        .merge(public_routes())
        .into_openapi()
}

/// The OpenAPI document as the pretty JSON that is committed at `openapi/openapi.json`.
pub fn openapi_json_text() -> Result<String, serde_json::Error> {
    let mut text = openapi().to_pretty_json()?;
    text.push('\n');
    Ok(text)
}

/// The service's router, with every layer, ready to serve.
pub fn app(state: AppState) -> Router {
    let (protected, _) = protected_routes().split_for_parts();
    let (public, _) = public_routes().split_for_parts();
    let protected = protected.route_layer(middleware::from_fn_with_state(
        state.clone(),
        auth::require_token,
    ));
    let mut router = Router::new()
        .merge(protected)
        .merge(public)
        .fallback(unknown_route)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::map_response(error::problem_for_plain_errors))
        // MCP answers its own errors as the protocol defines them: out of the rewriting's reach.
        .merge(mcp::routes(&state));
    if !state.inner.cors_origins.is_empty() {
        let origins = state
            .inner
            .cors_origins
            .iter()
            .filter_map(|o| o.parse().ok())
            .collect::<Vec<_>>();
        router = router.layer(
            CorsLayer::new()
                .allow_origin(AllowOrigin::list(origins))
                .allow_methods([
                    axum::http::Method::GET,
                    axum::http::Method::POST,
                    axum::http::Method::DELETE,
                ])
                // With the headers a browser MCP client at `/mcp` names its session in.
                .allow_headers(
                    [header::AUTHORIZATION, header::CONTENT_TYPE]
                        .into_iter()
                        .chain(mcp::CORS_REQUEST_HEADERS.map(HeaderName::from_static))
                        .collect::<Vec<_>>(),
                )
                .expose_headers([HeaderName::from_static(mcp::SESSION_HEADER)]),
        );
    }
    router
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::check_host,
        ))
        .layer(panics::catch_panics())
        // Method, route template, status and latency only: a query string or a header may
        // carry a token a client put in the wrong place, and neither is ever logged.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            access::record,
        ))
        .layer(SetSensitiveRequestHeadersLayer::new([
            header::AUTHORIZATION,
            header::COOKIE,
            HeaderName::from_static("proxy-authorization"),
        ]))
        .with_state(state)
}

/// Serve `app(state)` on `listener` with the default [`ServeLimits`] until `shutdown`
/// resolves, then finish in-flight requests.
///
/// Event streams end when `shutdown` resolves: they would otherwise never finish.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, state, ServeLimits::default(), shutdown).await
}

/// [`serve`] under the given limits (header and request timeouts, connection and in-flight
/// caps, shutdown grace); see [`ServeLimits`] for what each one guarantees. Event streams end
/// when `shutdown` resolves.
pub async fn serve_with(
    listener: TcpListener,
    state: AppState,
    limits: ServeLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let events = state.events().clone();
    let fleet = state.fleet().clone();
    let mcp = state.mcp().clone();
    let load = std::sync::Arc::clone(state.metrics().load());
    let shutdown = async move {
        shutdown.await;
        events.close();
        fleet.close();
        mcp.close();
    };
    server::serve_router_counting(listener, app(state), limits, load, shutdown).await
}

/// The registry's own health.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"status": "ok"}))]
struct Health {
    /// Always `ok` while the registry answers.
    status: &'static str,
}

/// Whether the registry answers. Needs no token and reveals nothing.
#[utoipa::path(
    get, path = "/healthz", tag = "service",
    responses(
        (status = 200, description = "The registry is up", body = Health),
        responses::LoadProblems,
    )
)]
async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// This document. Needs no token.
#[utoipa::path(
    get, path = "/openapi.json", tag = "service",
    responses(
        (status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json"),
        responses::LoadProblems,
    )
)]
async fn openapi_json() -> axum::response::Response {
    // The document is fixed for the life of the binary: render it once.
    static DOCUMENT: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
    match DOCUMENT.get_or_init(|| openapi_json_text().map_err(|e| e.to_string())) {
        Ok(text) => ([(header::CONTENT_TYPE, "application/json")], text.clone()).into_response(),
        Err(error) => {
            tracing::error!(%error, "cannot render the OpenAPI document");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// 404 for unknown paths; 400 for a session path whose id is empty.
async fn unknown_route(request: Request) -> ApiError {
    let path = request.uri().path();
    if path == "/sessions/" || path.starts_with("/sessions//") {
        return ApiError::invalid_session_id();
    }
    Problem::new(
        ProblemType::NotFound,
        "no such endpoint; GET /openapi.json lists them",
    )
    .into()
}
