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

use crate::fleet::FleetUnavailable;
use crate::registry::RegistryError;
use crate::running::RunningError;
pub use crate::wire::Problem;

/// The media type of every error body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// Every kind of problem the registry answers, each with its one status.
///
/// Its slug is the last segment of the problem's `type` (`urn:murmur-registry:problem:<slug>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemType {
    /// 400: a request the registry cannot read (a broken JSON body, a bad query string).
    BadRequest,
    /// 400: the session id in the path cannot name a record.
    InvalidSessionId,
    /// 400: a query parameter has a value the endpoint does not take.
    InvalidQuery,
    /// 400: more than one `Host` header line (RFC 9112 section 3.2).
    InvalidHost,
    /// 400: a paging `cursor` that this registry did not make, or for another listing.
    InvalidCursor,
    /// 401: a missing or wrong bearer token.
    Unauthorized,
    /// 403: the `Host` is not this registry's.
    ForbiddenHost,
    /// 403: the `Origin` is not this registry's, nor listed.
    ForbiddenOrigin,
    /// 404: no such endpoint, or no record for the session.
    NotFound,
    /// 404: the session's file is there but is not a valid record.
    NotARecord,
    /// 404: this registry is not part of a fleet (started without `--fleet-etcd`).
    FleetNotConfigured,
    /// 405: the endpoint does not take that method.
    MethodNotAllowed,
    /// 408: no answer within the request timeout.
    RequestTimeout,
    /// 409: a prune found the process alive or unverified.
    SessionNotGone,
    /// 409: the session is not live, or has no door (no card).
    SessionNotLive,
    /// 409: a signal was refused.
    SignalRefused,
    /// 409: a stop was refused or gave up.
    StopRefused,
    /// 410: the process was already gone; nothing was sent.
    AlreadyGone,
    /// 410: a fleet paging cursor whose revision etcd has compacted away: start the walk again.
    CursorExpired,
    /// 413: a body over [`super::MAX_BODY_BYTES`].
    BodyTooLarge,
    /// 414: a request line over [`super::server::MAX_REQUEST_LINE`], answered at the
    /// connection.
    UriTooLong,
    /// 415: a body that is not JSON.
    UnsupportedMediaType,
    /// 422: a signal body that names no signal the registry sends.
    UnknownSignal,
    /// 431: a request head over [`super::server::MAX_REQUEST_HEAD`] or with more than
    /// [`super::server::MAX_HEADER_LINES`] header lines, answered at the connection.
    HeadersTooLarge,
    /// 500: something failed inside the registry.
    Internal,
    /// 503: too many requests in flight.
    Overloaded,
    /// 503: as many event streams open as allowed.
    TooManyEventStreams,
    /// 503: the registry is shutting down and gives out no stream.
    EventsUnavailable,
    /// 503: the running directory cannot be used for now.
    RunningDirUnavailable,
    /// 503: the token file cannot be used.
    TokenFileUnusable,
    /// 503: etcd cannot be reached (or the fleet is not read yet): no fleet is served.
    FleetUnavailable,
}

impl ProblemType {
    /// The status every problem of this type is answered with.
    pub const fn status(self) -> StatusCode {
        match self {
            Self::BadRequest
            | Self::InvalidSessionId
            | Self::InvalidQuery
            | Self::InvalidHost
            | Self::InvalidCursor => StatusCode::BAD_REQUEST,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::ForbiddenHost | Self::ForbiddenOrigin => StatusCode::FORBIDDEN,
            Self::NotFound | Self::NotARecord | Self::FleetNotConfigured => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::SessionNotGone
            | Self::SessionNotLive
            | Self::SignalRefused
            | Self::StopRefused => StatusCode::CONFLICT,
            Self::AlreadyGone | Self::CursorExpired => StatusCode::GONE,
            Self::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UriTooLong => StatusCode::URI_TOO_LONG,
            Self::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::UnknownSignal => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Overloaded
            | Self::TooManyEventStreams
            | Self::EventsUnavailable
            | Self::RunningDirUnavailable
            | Self::TokenFileUnusable
            | Self::FleetUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The word a client sees at the end of `type`.
    pub const fn slug(self) -> &'static str {
        match self {
            Self::BadRequest => "bad-request",
            Self::InvalidSessionId => "invalid-session-id",
            Self::InvalidQuery => "invalid-query",
            Self::InvalidHost => "invalid-host",
            Self::InvalidCursor => "invalid-cursor",
            Self::Unauthorized => "unauthorized",
            Self::ForbiddenHost => "forbidden-host",
            Self::ForbiddenOrigin => "forbidden-origin",
            Self::NotFound => "not-found",
            Self::NotARecord => "not-a-record",
            Self::FleetNotConfigured => "fleet-not-configured",
            Self::MethodNotAllowed => "method-not-allowed",
            Self::RequestTimeout => "request-timeout",
            Self::SessionNotGone => "session-not-gone",
            Self::SessionNotLive => "session-not-live",
            Self::SignalRefused => "signal-refused",
            Self::StopRefused => "stop-refused",
            Self::AlreadyGone => "already-gone",
            Self::CursorExpired => "cursor-expired",
            Self::BodyTooLarge => "body-too-large",
            Self::UriTooLong => "uri-too-long",
            Self::HeadersTooLarge => "headers-too-large",
            Self::UnsupportedMediaType => "unsupported-media-type",
            Self::UnknownSignal => "unknown-signal",
            Self::Internal => "internal",
            Self::Overloaded => "overloaded",
            Self::TooManyEventStreams => "too-many-event-streams",
            Self::EventsUnavailable => "events-unavailable",
            Self::RunningDirUnavailable => "running-dir-unavailable",
            Self::TokenFileUnusable => "token-file-unusable",
            Self::FleetUnavailable => "fleet-unavailable",
        }
    }

    /// The type of an error response that is not yet a problem, by the status axum gave it.
    fn of_plain(status: StatusCode) -> Self {
        match status {
            StatusCode::NOT_FOUND => Self::NotFound,
            StatusCode::METHOD_NOT_ALLOWED => Self::MethodNotAllowed,
            StatusCode::PAYLOAD_TOO_LARGE => Self::BodyTooLarge,
            StatusCode::UNSUPPORTED_MEDIA_TYPE => Self::UnsupportedMediaType,
            StatusCode::UNAUTHORIZED => Self::Unauthorized,
            _ if status.is_server_error() => Self::Internal,
            _ => Self::BadRequest,
        }
    }
}

impl Problem {
    /// A problem of type `kind`, answered with its status.
    pub fn new(kind: ProblemType, detail: impl Into<String>) -> Self {
        Self::with_status(kind.status(), kind, detail)
    }

    /// For axum's own answers only: their status stays (a 400 or a 422 is `bad-request`).
    fn with_status(status: StatusCode, kind: ProblemType, detail: impl Into<String>) -> Self {
        Self {
            kind: format!("urn:murmur-registry:problem:{}", kind.slug()),
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

/// The most characters of a client's value that a detail quotes.
const QUOTED_CHARS: usize = 40;

/// `value`, a client's, as a problem detail quotes it: in quotes and escaped, cut after
/// [`QUOTED_CHARS`] characters (then saying how many bytes it had), so an answer never grows
/// with what a client sent. Every detail that echoes a client's value goes through here.
pub(crate) fn quoted(value: &str) -> String {
    match cut_after(value, QUOTED_CHARS) {
        None => format!("{value:?}"),
        Some(kept) => format!("{kept:?}… ({} bytes)", value.len()),
    }
}

/// The most characters of axum's own rejection text a detail keeps: its words fit, and a
/// client's value quoted inside it (a JSON body's unknown variant) is cut with it.
const PLAIN_DETAIL_CHARS: usize = 160;

/// The first `chars` characters of `text`, when it has more.
fn cut_after(text: &str, chars: usize) -> Option<&str> {
    let (at, _) = text.char_indices().nth(chars)?;
    Some(&text[..at])
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

impl From<FleetUnavailable> for ApiError {
    fn from(error: FleetUnavailable) -> Self {
        let kind = match &error {
            FleetUnavailable::NotConfigured => ProblemType::FleetNotConfigured,
            FleetUnavailable::Unavailable(_) => ProblemType::FleetUnavailable,
            // As `/events` answers it: the registry gives out nothing more.
            FleetUnavailable::Closing => ProblemType::EventsUnavailable,
        };
        Problem::new(kind, error.to_string()).into()
    }
}

impl ApiError {
    /// 400: the session id in the path cannot name a record.
    pub fn invalid_session_id() -> Self {
        invalid_session_id_problem().into()
    }

    /// 400: a query parameter has a value the endpoint does not take.
    pub fn bad_query(detail: impl Into<String>) -> Self {
        Problem::new(ProblemType::InvalidQuery, detail).into()
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
        ProblemType::InvalidSessionId,
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
        RegistryError::NotFound(id) => {
            Problem::new(ProblemType::NotFound, format!("no record for session {id}"))
        }
        RegistryError::InvalidSessionId => invalid_session_id_problem(),
        // A file that could not be read says nothing about the session: that is our failure.
        RegistryError::Running(RunningError::Unreadable(entry)) if entry.why.is_read_failure() => {
            internal()
        }
        RegistryError::Running(RunningError::Unreadable(entry)) => Problem::new(
            ProblemType::NotARecord,
            format!(
                "{} {}; it is not a valid record",
                entry.file_name, entry.why
            ),
        ),
        // The path goes to the log only; the client learns what is wrong (missing, not a
        // directory, a foreign owner, a mode open to others: nothing secret) and that it is
        // temporary.
        RegistryError::Running(RunningError::DirUnavailable { why, .. }) => Problem::new(
            ProblemType::RunningDirUnavailable,
            format!(
                "the running directory is unavailable: {why}; the registry answers again once it \
                 is back (its log says where)"
            ),
        ),
        _ => internal(),
    }
}

/// A 500 that says where to look, never what happened (the caller logs the error).
pub(crate) fn internal() -> Problem {
    Problem::new(
        ProblemType::Internal,
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
            Ok(text) if !text.is_empty() => match cut_after(text, PLAIN_DETAIL_CHARS) {
                Some(kept) => format!("{kept}…"),
                None => text.to_owned(),
            },
            _ => default_detail(status).to_owned(),
        }
    };
    let problem = Problem::with_status(status, ProblemType::of_plain(status), detail);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quoted_value_keeps_a_few_dozen_characters_and_says_how_long_it_was() {
        assert_eq!(quoted("alive"), "\"alive\"");
        assert_eq!(quoted("a\"b\n"), "\"a\\\"b\\n\"");
        let long = "é".repeat(30_000);
        let quote = quoted(&long);
        assert_eq!(
            quote,
            format!("{:?}… (60000 bytes)", "é".repeat(QUOTED_CHARS))
        );
        let exact = "x".repeat(QUOTED_CHARS);
        assert_eq!(quoted(&exact), format!("{exact:?}"));
    }
}
