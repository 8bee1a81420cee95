//! Every error the service answers, as RFC 9457 `application/problem+json`.
//!
//! Invariants kept here:
//! - Handlers return [`ApiError`]; it is the one place statuses and problem types are chosen.
//! - A 5xx says that something failed and where to look (the registry's log), never what: the
//!   internals go to the log only.
//! - Errors produced outside handlers (unknown route, wrong method, axum's extractor
//!   rejections) are rewritten into problems by [`problem_for_plain_errors`], keeping their
//!   headers (`Allow`, `WWW-Authenticate`) and their short text as the detail.

use axum::body::{Body, to_bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::registry::RegistryError;
use crate::running::RunningError;

/// The media type of every error body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// An RFC 9457 problem: `type`, `title`, `status`, `detail`, plus extra members.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(example = json!({
    "type": "urn:murmur-registry:problem:not-found",
    "title": "Not Found",
    "status": 404,
    "detail": "no record for session ses_0193a4c2e1f07a3b9c5d2e4f6a8b0c1d"
}))]
pub struct Problem {
    /// A URI naming the kind of problem.
    #[serde(rename = "type")]
    pub kind: String,
    /// A short summary of the kind of problem.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What went wrong with this request.
    pub detail: String,
    /// Members specific to the problem (e.g. a refused signal's `outcome` and `reason`).
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Map<String, Value>,
}

impl Problem {
    /// A problem of kind `slug` (`urn:murmur-registry:problem:<slug>`) with this status.
    pub fn new(status: StatusCode, slug: &str, detail: impl Into<String>) -> Self {
        Self {
            kind: format!("urn:murmur-registry:problem:{slug}"),
            title: status.canonical_reason().unwrap_or("Error").to_owned(),
            status: status.as_u16(),
            detail: detail.into(),
            extra: Map::new(),
        }
    }

    /// Add the fields of `members` (a struct serializing to an object) as extra members.
    pub fn with_members(mut self, members: &impl Serialize) -> Self {
        if let Ok(Value::Object(map)) = serde_json::to_value(members) {
            self.extra.extend(map);
        }
        self
    }

    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = self.status_code();
        let body = serde_json::to_vec(&self).unwrap_or_else(|_| b"{}".to_vec());
        (
            status,
            [(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON))],
            body,
        )
            .into_response()
    }
}

/// The error type of every handler.
#[derive(Debug)]
pub enum ApiError {
    /// A problem already shaped for the client.
    Problem(Box<Problem>),
    /// A registry failure, to be classified.
    Registry(RegistryError),
}

impl From<Problem> for ApiError {
    fn from(problem: Problem) -> Self {
        Self::Problem(Box::new(problem))
    }
}

impl From<RegistryError> for ApiError {
    fn from(error: RegistryError) -> Self {
        Self::Registry(error)
    }
}

impl ApiError {
    /// 400: the session id in the path cannot name a record.
    pub fn invalid_session_id() -> Self {
        invalid_session_id_problem().into()
    }

    /// 400: a query parameter has a value the endpoint does not take.
    pub fn bad_query(detail: impl Into<String>) -> Self {
        Problem::new(StatusCode::BAD_REQUEST, "invalid-query", detail).into()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            Self::Problem(problem) => problem.into_response(),
            Self::Registry(error) => registry_problem(error).into_response(),
        }
    }
}

fn invalid_session_id_problem() -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "invalid-session-id",
        "a session id is 1 to 128 characters of A-Z a-z 0-9 _ -",
    )
}

fn registry_problem(error: RegistryError) -> Problem {
    let problem = problem_for(&error);
    match &error {
        RegistryError::Running(RunningError::DirUnavailable { path, why }) => {
            tracing::error!(path = %path.display(), %why, "running directory unavailable");
        }
        _ if problem.status >= 500 => tracing::error!(%error, "request failed"),
        _ => {}
    }
    problem
}

/// The problem a registry failure is answered with, without logging it: for a caller that has
/// logged it already, or tells it again (the last words of an `/events` stream).
pub fn problem_for(error: &RegistryError) -> Problem {
    match error {
        RegistryError::NotFound(id) => Problem::new(
            StatusCode::NOT_FOUND,
            "not-found",
            format!("no record for session {id}"),
        ),
        RegistryError::InvalidSessionId => invalid_session_id_problem(),
        // A file that could not be read says nothing about the session: that is our failure.
        RegistryError::Running(RunningError::Unreadable(entry)) if entry.why.is_read_failure() => {
            internal()
        }
        RegistryError::Running(RunningError::Unreadable(entry)) => Problem::new(
            StatusCode::NOT_FOUND,
            "not-a-record",
            format!(
                "{} {}; it is not a valid record",
                entry.file_name, entry.why
            ),
        ),
        // The path goes to the log only; the client learns what is wrong (missing, not a
        // directory, a foreign owner, a mode open to others: nothing secret) and that it is
        // temporary.
        RegistryError::Running(RunningError::DirUnavailable { why, .. }) => Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "running-dir-unavailable",
            format!(
                "the running directory is unavailable: {why}; the registry answers again once it is back (its log says where)"
            ),
        ),
        _ => internal(),
    }
}

/// A 500 that says where to look, never what happened (the caller logs the error).
fn internal() -> Problem {
    Problem::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        "the registry could not complete this request; its log says why",
    )
}

/// Rewrite an error response that is not yet a problem into one, keeping its headers.
///
/// Catches axum's own answers (404 for an unknown route, 405 with `Allow`, 413/415/400/422
/// extractor rejections) so that every error a client sees has the same shape.
pub async fn problem_for_plain_errors(response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let already_problem = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|ct| ct.as_bytes().starts_with(PROBLEM_JSON.as_bytes()));
    if already_problem {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = to_bytes(body, 4096).await.unwrap_or_default();
    let detail = if status.is_server_error() {
        "the registry could not complete this request; its log says why".to_owned()
    } else {
        match std::str::from_utf8(&text).map(str::trim) {
            Ok(text) if !text.is_empty() => text.to_owned(),
            _ => default_detail(status).to_owned(),
        }
    };
    let slug = match status {
        StatusCode::NOT_FOUND => "not-found",
        StatusCode::METHOD_NOT_ALLOWED => "method-not-allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "body-too-large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported-media-type",
        StatusCode::UNAUTHORIZED => "unauthorized",
        _ if status.is_server_error() => "internal",
        _ => "bad-request",
    };
    let problem = Problem::new(status, slug, detail);
    let body = serde_json::to_vec(&problem).unwrap_or_default();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts
        .headers
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    Response::from_parts(parts, Body::from(body))
}

fn default_detail(status: StatusCode) -> &'static str {
    match status {
        StatusCode::NOT_FOUND => "no such endpoint; GET /openapi.json lists them",
        StatusCode::METHOD_NOT_ALLOWED => {
            "this endpoint does not take that method; see the Allow header"
        }
        StatusCode::PAYLOAD_TOO_LARGE => "the request body is larger than 16 KiB",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "the request body must be application/json",
        _ => "the request could not be handled",
    }
}
