//! The resources `/mcp` offers: `murmur://sessions` (the verified listing) and
//! `murmur://sessions/{session_id}` (one session), read through the REST routes' handlers.
//!
//! Invariants kept here:
//! - A resource's content is exactly what `GET /sessions` or `GET /sessions/{id}` answers.
//! - A URI is parsed here only: anything that is not one of the two forms, with a valid
//!   session id, is no resource at all.
//! - An unknown resource is MCP's resource-not-found error (never an empty content); the
//!   route's problem travels as the error's data.

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use rmcp::ErrorData;
use rmcp::model::{ReadResourceResult, Resource, ResourceContents, ResourceTemplate};
use serde_json::Value;

use super::super::AppState;
use super::super::error::ApiError;
use super::super::sessions;
use crate::running::is_valid_session_id;
use crate::wire::{ListQuery, ProbeQuery, SessionPath};

/// The listing's URI.
pub(super) const SESSIONS_URI: &str = "murmur://sessions";
/// The template of one session's URI.
pub(super) const SESSION_TEMPLATE: &str = "murmur://sessions/{session_id}";
const SESSION_PREFIX: &str = "murmur://sessions/";
const JSON: &str = "application/json";

/// What a URI names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Named {
    /// The whole listing.
    Sessions,
    /// One session, by its id.
    Session(String),
}

impl Named {
    /// What `uri` names, if it is one of the registry's resources.
    pub(super) fn parse(uri: &str) -> Option<Self> {
        if uri == SESSIONS_URI {
            return Some(Self::Sessions);
        }
        let id = uri.strip_prefix(SESSION_PREFIX)?;
        is_valid_session_id(id).then(|| Self::Session(id.to_owned()))
    }
}

/// One session's URI.
pub(super) fn session_uri(session_id: &str) -> String {
    format!("{SESSION_PREFIX}{session_id}")
}

/// The listing resource, and one resource per session a pass (layers 1–2, no door asked)
/// finds now.
pub(super) async fn list(state: &AppState) -> Result<Vec<Resource>, ErrorData> {
    let listing = match state.registry().sessions(false).await {
        Ok(listing) => listing,
        Err(error) => return Err(error_of(ApiError::from(error).into_response()).await),
    };
    let mut resources = vec![
        Resource::new(SESSIONS_URI, "sessions")
            .with_title("Every session on this machine, verified")
            .with_description("What GET /sessions answers: every session, newest first")
            .with_mime_type(JSON),
    ];
    resources.extend(listing.readings.iter().map(|reading| {
        let record = &reading.record;
        Resource::new(session_uri(&record.session_id), record.session_id.clone())
            .with_description(format!("Session of capsule {}", record.capsule_name))
            .with_mime_type(JSON)
    }));
    Ok(resources)
}

/// The one template: a session by its id.
pub(super) fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new(SESSION_TEMPLATE, "session")
            .with_title("One session, verified")
            .with_description("What GET /sessions/{id} answers")
            .with_mime_type(JSON),
    ]
}

/// The content of `uri`, as its route answers it.
pub(super) async fn read(state: &AppState, uri: &str) -> Result<ReadResourceResult, ErrorData> {
    let response = match Named::parse(uri) {
        None => return Err(not_found(uri, Value::Null)),
        Some(Named::Sessions) => {
            let query = ListQuery {
                status: None,
                probe: None,
                include: None,
                capsule: None,
                skill: None,
                limit: None,
                cursor: None,
            };
            sessions::list_sessions(State(state.clone()), Query(query))
                .await
                .into_response()
        }
        Some(Named::Session(id)) => {
            let query = ProbeQuery {
                probe: None,
                include: None,
            };
            sessions::get_session(State(state.clone()), Path(SessionPath { id }), Query(query))
                .await
                .into_response()
        }
    };
    if !response.status().is_success() {
        return Err(error_of(response).await);
    }
    let text = body_text(response).await;
    Ok(ReadResourceResult::new(vec![
        ResourceContents::text(text, uri).with_mime_type(JSON),
    ]))
}

/// Whether `uri` names a resource that exists now (a session with a record).
pub(super) async fn exists(state: &AppState, uri: &str) -> Result<(), ErrorData> {
    match Named::parse(uri) {
        None => Err(not_found(uri, Value::Null)),
        Some(Named::Sessions) => Ok(()),
        Some(Named::Session(id)) => match state.registry().session(&id, false).await {
            Ok(_) => Ok(()),
            Err(error) => Err(error_of(ApiError::from(error).into_response()).await),
        },
    }
}

fn not_found(uri: &str, problem: Value) -> ErrorData {
    let data = (!problem.is_null()).then_some(problem);
    ErrorData::resource_not_found(format!("no such resource: {uri}"), data)
}

/// The route's problem as MCP's error: not found, an invalid id, or the registry's failure.
async fn error_of(response: Response) -> ErrorData {
    let status = response.status();
    let problem: Value = serde_json::from_str(&body_text(response).await).unwrap_or(Value::Null);
    let detail = problem["detail"]
        .as_str()
        .unwrap_or("the registry could not read this resource")
        .to_owned();
    match status.as_u16() {
        404 => ErrorData::resource_not_found(detail, Some(problem)),
        400 => ErrorData::invalid_params(detail, Some(problem)),
        _ => ErrorData::internal_error(detail, Some(problem)),
    }
}

async fn body_text(response: Response) -> String {
    // Whole answers already encoded in memory: no limit bites.
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_two_forms_name_a_resource() {
        assert_eq!(Named::parse("murmur://sessions"), Some(Named::Sessions));
        assert_eq!(
            Named::parse("murmur://sessions/ses_1"),
            Some(Named::Session("ses_1".to_owned()))
        );
        for uri in [
            "murmur://sessions/",
            "murmur://sessions/a/b",
            "murmur://sessions/../x",
            "murmur://session",
            "file:///etc/passwd",
        ] {
            assert_eq!(Named::parse(uri), None, "{uri}");
        }
    }
}
