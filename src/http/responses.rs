//! The problem responses routes share in the OpenAPI document, each set written once.
//!
//! Invariant: every route documents the gate's 403 and the deadline's 408 from one place
//! (`every_route`), so no route's document can leave either out.

use std::collections::BTreeMap;

use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};
use utoipa::{IntoResponses, ToSchema};

use super::error::{PROBLEM_JSON, Problem};

/// A problem response with this description.
fn problem(description: &str) -> RefOr<Response> {
    let content = ContentBuilder::new()
        .schema(Some(Ref::from_schema_name(Problem::name())))
        .build();
    ResponseBuilder::new()
        .description(description)
        .content(PROBLEM_JSON, content)
        .build()
        .into()
}

/// The gate's 403 and the deadline's 408, which every route may answer.
fn every_route() -> BTreeMap<String, RefOr<Response>> {
    BTreeMap::from([
        (
            "403".to_owned(),
            problem("Host or Origin is not this registry's"),
        ),
        (
            "408".to_owned(),
            problem(
                "The request was not answered within the registry's request timeout; \
                 the connection is closed",
            ),
        ),
    ])
}

/// The problems every authenticated route may answer.
#[derive(Debug)]
pub struct GateProblems;

impl IntoResponses for GateProblems {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        let mut set = every_route();
        set.extend([
            ("401".to_owned(), problem("Missing or wrong bearer token")),
            (
                "500".to_owned(),
                problem("The registry could not complete the request; its log says why"),
            ),
            (
                "503".to_owned(),
                problem(
                    "Unavailable for now: too many requests in flight (`overloaded`, with \
                     Retry-After), the running directory is missing, replaced or open to others \
                     (`running-dir-unavailable`), or the token file is unusable \
                     (`token-file-unusable`)",
                ),
            ),
        ]);
        set
    }
}

/// The problems a route without a token may answer: the gate, the deadline, and load.
#[derive(Debug)]
pub struct LoadProblems;

impl IntoResponses for LoadProblems {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        let mut set = every_route();
        set.insert(
            "503".to_owned(),
            problem(
                "Too many requests in flight (`overloaded`); retry after the Retry-After seconds",
            ),
        );
        set
    }
}

/// The problems every route naming one session may answer (OpenAPI responses).
#[derive(Debug, IntoResponses)]
// Named only in the OpenAPI document (`responses(...)`): a handler answers a `Problem`.
#[allow(dead_code)]
pub enum SessionProblems {
    /// Bad input.
    #[response(
        status = 400,
        description = "Bad input: an invalid session id, query or body",
        content_type = "application/problem+json"
    )]
    BadRequest(Problem),
    /// No valid record for this session.
    #[response(
        status = 404,
        description = "No valid record for this session",
        content_type = "application/problem+json"
    )]
    NotFound(Problem),
}

/// The problems of a request body (OpenAPI responses).
#[derive(Debug, IntoResponses)]
// Named only in the OpenAPI document (`responses(...)`): a handler answers a `Problem`.
#[allow(dead_code)]
pub enum BodyProblems {
    /// Too big.
    #[response(
        status = 413,
        description = "Body over 16 KiB",
        content_type = "application/problem+json"
    )]
    TooLarge(Problem),
    /// Not JSON.
    #[response(
        status = 415,
        description = "The body is not application/json",
        content_type = "application/problem+json"
    )]
    NotJson(Problem),
}
