//! The dashboard: one page (HTML, CSS, JS) compiled into the binary and served at `GET /`.
//!
//! Invariants kept here:
//! - The page is static bytes fixed at build time: it carries no session data and no token, so
//!   it is served without auth. Everything it shows it fetches itself, from `/events`, the
//!   sessions endpoints and `/fleet/*`, with the token the person pastes (kept in
//!   `sessionStorage` only).
//! - Nothing is fetched from another host and nothing runs inline: every response here carries
//!   a Content-Security-Policy that allows scripts, styles and connections to this origin only
//!   (plus `data:` images), forbids framing, `<base>` and form submission, and is never cached.
//! - Each file is a documented route of the public router, so "no undocumented route" holds.

use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::responses::LoadProblems;

/// The tag of the dashboard's routes in the OpenAPI document.
pub const TAG: &str = "dashboard";

/// The Content-Security-Policy of every dashboard response.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
    style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
    form-action 'none'; frame-ancestors 'none'";

const INDEX_HTML: &str = include_str!("dashboard/index.html");
const DASHBOARD_JS: &str = include_str!("dashboard/dashboard.js");
const DASHBOARD_CSS: &str = include_str!("dashboard/dashboard.css");

/// One embedded file with the headers every dashboard response carries.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::X_FRAME_OPTIONS, "DENY"),
            // The files change with the binary; a stale script against a newer API is worse
            // than a few kilobytes fetched again.
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// The dashboard page. Needs no token and carries no data: it asks for the token itself.
#[utoipa::path(
    get, path = "/", tag = TAG,
    responses(
        (
            status = 200,
            description = "The dashboard's HTML page",
            content_type = "text/html",
            body = String
        ),
        LoadProblems,
    )
)]
pub async fn dashboard_page() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

/// The dashboard's script. Needs no token.
#[utoipa::path(
    get, path = "/dashboard.js", tag = TAG,
    responses(
        (
            status = 200,
            description = "The dashboard's JavaScript",
            content_type = "text/javascript",
            body = String
        ),
        LoadProblems,
    )
)]
pub async fn dashboard_script() -> Response {
    asset("text/javascript; charset=utf-8", DASHBOARD_JS)
}

/// The dashboard's style sheet. Needs no token.
#[utoipa::path(
    get, path = "/dashboard.css", tag = TAG,
    responses(
        (
            status = 200,
            description = "The dashboard's style sheet",
            content_type = "text/css",
            body = String
        ),
        LoadProblems,
    )
)]
pub async fn dashboard_style() -> Response {
    asset("text/css; charset=utf-8", DASHBOARD_CSS)
}
