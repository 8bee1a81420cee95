//! The sessions API: list, inspect, prune, signal and stop, each documented in the OpenAPI spec
//! by its own handler's annotation.
//!
//! Invariants kept here:
//! - Session ids are validated before anything reaches the registry; no path is built from
//!   raw input.
//! - The session JSON is built field by field from the record ([`SessionView`]): it has no
//!   place for `door_token` or `credentials`, so they cannot leak through it.
//! - These GETs change nothing on disk; only DELETE, signal and stop remove a record, and only
//!   on the evidence the registry returns. (`GET /events` is the exception, by design: while a
//!   listener is connected the live view prunes gone records, on the same evidence.)
//! - A list body is the encoding of the listing the registry handed this request; a listing
//!   shared by several requests (`probe=false`) is encoded once, by the first of them, into
//!   the listing itself ([`Listing::encoded`]), so the bytes are always that listing's own.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, IntoResponses, ToSchema};

use super::AppState;
use super::error::{ApiError, Problem};
use axum::extract::rejection::JsonRejection;
use axum::response::{IntoResponse, Response};

use crate::registry::{
    CardRefusal, DEFAULT_STOP_TIMEOUT, Listing, MAX_STOP_TIMEOUT, PruneOutcome, Reading,
    RegistryError, SignalKind, StopOutcome,
};
use crate::running::{Liveness, ProcessState, SignalOutcome, is_valid_session_id};

/// The tag every sessions endpoint carries in the OpenAPI spec.
pub const TAG: &str = "sessions";

const EXAMPLE_ID: &str = "ses_0193a4c2e1f07a3b9c5d2e4f6a8b0c1d";

/// What all three layers say, as a word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SessionState {
    /// The process is the writer and the door answers for the session.
    Live,
    /// The process is alive (or unverified) but the door did not confirm the session.
    Unreachable,
    /// No process holds the pid, or another process does.
    Gone,
}

impl From<&Liveness> for SessionState {
    fn from(liveness: &Liveness) -> Self {
        match liveness {
            Liveness::Live => Self::Live,
            Liveness::Unreachable { .. } => Self::Unreachable,
            Liveness::Gone { .. } => Self::Gone,
        }
    }
}

/// What layers 1–2 say, as a word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProcessStatus {
    /// The pid is held by the process that wrote the record.
    Alive,
    /// The pid is held, but by whom could not be established.
    Unverified,
    /// No process holds the pid, or another process does.
    Gone,
}

impl From<&ProcessState> for ProcessStatus {
    fn from(state: &ProcessState) -> Self {
        match state {
            ProcessState::Alive => Self::Alive,
            ProcessState::Unverified { .. } => Self::Unverified,
            ProcessState::Gone { .. } => Self::Gone,
        }
    }
}

/// The verification of one session.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LivenessView {
    /// All three layers' verdict. Omitted under `probe=false` when only the door could decide.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<SessionState>,
    /// Layers 1–2 alone.
    pub process: ProcessStatus,
    /// Why the session is not live, when it is not.
    #[schema(example = "no process holds pid 41234")]
    pub reason: Option<String>,
}

impl LivenessView {
    fn of(reading: &Reading) -> Self {
        let reason = reading
            .liveness
            .as_ref()
            .and_then(Liveness::reason)
            .or(match &reading.process {
                ProcessState::Unverified { reason } | ProcessState::Gone { reason } => Some(reason),
                ProcessState::Alive => None,
            })
            .map(str::to_owned);
        Self {
            state: reading.liveness.as_ref().map(SessionState::from),
            process: ProcessStatus::from(&reading.process),
            reason,
        }
    }
}

/// One running session: its record's fields (never its secrets) and its verification.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(example = json!({
    "session_id": EXAMPLE_ID,
    "url": "127.0.0.1:41235",
    "pid": 41234,
    "process_start": "8234517",
    "capsule_name": "researcher",
    "capsule_version": "0.3.1",
    "workdir": "/home/ada/.murmur/sessions/ses_0193a4c2e1f07a3b9c5d2e4f6a8b0c1d",
    "outlives_launcher": true,
    "started_at": "2026-11-30T09:12:44Z",
    "liveness": {"state": "live", "process": "alive", "reason": null}
}))]
pub struct SessionView {
    /// The session id (`ses_` + 32 hex digits in murmur).
    pub session_id: String,
    /// `host:port` of the A2A door; `null` for a capsule without one.
    pub url: Option<String>,
    /// The process that holds the door.
    pub pid: u32,
    /// The process's start token as recorded (clock ticks since boot on Linux).
    pub process_start: String,
    /// The capsule's name.
    pub capsule_name: String,
    /// The capsule's version.
    pub capsule_version: String,
    /// The session directory.
    pub workdir: String,
    /// Whether the capsule outlives the terminal that launched it.
    pub outlives_launcher: bool,
    /// When the session started (RFC 3339, UTC).
    pub started_at: String,
    /// The formation the session belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub formation_id: Option<String>,
    /// The session's name in its formation's roster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub formation_member: Option<String>,
    /// The session that delegated to this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spawned_by: Option<String>,
    /// Where the session's trace lives.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub records_dir: Option<String>,
    /// The verification.
    pub liveness: LivenessView,
}

impl SessionView {
    /// The view of one reading. Copies public fields only.
    pub fn of(reading: &Reading) -> Self {
        let r = &reading.record;
        Self {
            session_id: r.session_id.clone(),
            url: r.url.clone(),
            pid: r.pid,
            process_start: r.process_start.clone(),
            capsule_name: r.capsule_name.clone(),
            capsule_version: r.capsule_version.clone(),
            workdir: r.workdir.to_string_lossy().into_owned(),
            outlives_launcher: r.outlives_launcher,
            started_at: r.started_at.clone(),
            formation_id: r.formation_id.clone(),
            formation_member: r.formation_member.clone(),
            spawned_by: r.spawned_by.clone(),
            records_dir: r
                .records_dir
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned()),
            liveness: LivenessView::of(reading),
        }
    }
}

/// Every session, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionList {
    /// The sessions that match the filter, newest first.
    pub sessions: Vec<SessionView>,
    /// How many `*.json` entries in the running directory are not valid records.
    #[schema(example = 0)]
    pub unreadable: usize,
}

/// The session named in a path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SessionPath {
    /// The session id (murmur's are `ses_` + 32 hex digits).
    #[param(
        pattern = "^[A-Za-z0-9_-]{1,128}$",
        example = "ses_0193a4c2e1f07a3b9c5d2e4f6a8b0c1d"
    )]
    pub id: String,
}

/// The problems every authenticated route may answer (OpenAPI responses).
#[derive(Debug, IntoResponses)]
pub enum GateProblems {
    /// Missing or wrong bearer token.
    #[response(
        status = 401,
        description = "Missing or wrong bearer token",
        content_type = "application/problem+json"
    )]
    Unauthorized(Problem),
    /// The `Host` or `Origin` is not this registry's.
    #[response(
        status = 403,
        description = "Host or Origin is not this registry's",
        content_type = "application/problem+json"
    )]
    Forbidden(Problem),
    /// The request took too long to be answered; a signal or stop under way still finishes.
    #[response(
        status = 408,
        description = "The request was not answered within the registry's request timeout; the connection is closed",
        content_type = "application/problem+json"
    )]
    RequestTimeout(Problem),
    /// Unavailable for now: overloaded, the running directory is missing, or the token file
    /// is unusable.
    #[response(
        status = 503,
        description = "Unavailable for now: too many requests in flight (`overloaded`, with Retry-After), the running directory is missing, replaced or open to others (`running-dir-unavailable`), or the token file is unusable (`token-file-unusable`)",
        content_type = "application/problem+json"
    )]
    Unavailable(Problem),
    /// Something failed inside the registry; the detail says where to look, never what.
    #[response(
        status = 500,
        description = "The registry could not complete the request; its log says why",
        content_type = "application/problem+json"
    )]
    Internal(Problem),
}

/// The problems a route without a token may answer: the Host/Origin gate, and load
/// (OpenAPI responses).
#[derive(Debug, IntoResponses)]
pub enum LoadProblems {
    /// The `Host` or `Origin` is not this registry's.
    #[response(
        status = 403,
        description = "Host or Origin is not this registry's",
        content_type = "application/problem+json"
    )]
    Forbidden(Problem),
    /// The request took too long to be answered; a signal or stop under way still finishes.
    #[response(
        status = 408,
        description = "The request was not answered within the registry's request timeout; the connection is closed",
        content_type = "application/problem+json"
    )]
    RequestTimeout(Problem),
    /// Too many requests in flight.
    #[response(
        status = 503,
        description = "Too many requests in flight (`overloaded`); retry after the Retry-After seconds",
        content_type = "application/problem+json"
    )]
    Overloaded(Problem),
}

/// The problems every route naming one session may answer (OpenAPI responses).
#[derive(Debug, IntoResponses)]
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

/// Filters of `GET /sessions`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Comma-separated states to keep: `live`, `unreachable`, `gone`.
    #[param(
        example = "live,unreachable",
        pattern = "^(live|unreachable|gone)(,(live|unreachable|gone))*$"
    )]
    pub status: Option<String>,
    /// `false` runs layers 1–2 only (no door probes). Default `true`.
    #[param(example = false)]
    pub probe: Option<bool>,
}

/// Options of `GET /sessions/{id}`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ProbeQuery {
    /// `false` runs layers 1–2 only (no door probe). Default `true`.
    pub probe: Option<bool>,
}

/// The three layers for one session.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"session_id": EXAMPLE_ID, "state": "unreachable", "process": "alive",
    "reason": "door at 127.0.0.1:41235 did not answer within 5s"}))]
pub struct LivenessReport {
    /// The session.
    pub session_id: String,
    /// All three layers' verdict.
    pub state: SessionState,
    /// Layers 1–2 alone.
    pub process: ProcessStatus,
    /// Why the session is not live, when it is not.
    pub reason: Option<String>,
}

/// A record removed on evidence.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"session_id": EXAMPLE_ID, "pruned": true,
    "reason": "no process holds pid 41234"}))]
pub struct PruneResponse {
    /// The session whose record was removed.
    pub session_id: String,
    /// Always `true`.
    pub pruned: bool,
    /// The evidence.
    pub reason: String,
}

/// One record removed by `DELETE /sessions`.
#[derive(Debug, Serialize, ToSchema)]
pub struct PrunedEntry {
    /// The session whose record was removed.
    pub session_id: String,
    /// The evidence.
    pub reason: String,
}

/// What `DELETE /sessions` removed.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"pruned": [{"session_id": EXAMPLE_ID,
    "reason": "pid 41234 is held by a process that started at another time"}],
    "removed_unreadable": 1}))]
pub struct PruneAllResponse {
    /// Records whose process was gone.
    pub pruned: Vec<PrunedEntry>,
    /// How many entries that were not valid records were removed.
    pub removed_unreadable: usize,
}

/// The body of `POST /sessions/{id}/signal`.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"signal": "SIGTERM"}))]
pub struct SignalRequest {
    /// `SIGTERM` or `SIGKILL` (`TERM`, `KILL` also accepted, in any case).
    #[schema(value_type = SignalName)]
    pub signal: String,
}

/// The signals `POST /sessions/{id}/signal` accepts.
#[derive(Debug, Clone, Copy, ToSchema)]
pub enum SignalName {
    /// Ask the capsule to finish.
    #[schema(rename = "SIGTERM")]
    Sigterm,
    /// End it now.
    #[schema(rename = "SIGKILL")]
    Sigkill,
    /// Same as `SIGTERM`.
    #[schema(rename = "TERM")]
    Term,
    /// Same as `SIGKILL`.
    #[schema(rename = "KILL")]
    Kill,
}

/// A signal that was delivered.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"session_id": EXAMPLE_ID, "signal": "SIGTERM", "outcome": "sent"}))]
pub struct SignalResponse {
    /// The session signalled.
    pub session_id: String,
    /// `SIGTERM` or `SIGKILL`.
    pub signal: String,
    /// Always `sent`.
    pub outcome: String,
}

/// Options of `POST /sessions/{id}/stop`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StopQuery {
    /// Seconds to wait after SIGTERM before SIGKILL (default 10, at most 300; `0` = SIGKILL at
    /// once).
    #[param(example = 10, maximum = 300)]
    pub timeout: Option<u64>,
}

/// A stop that ended.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"session_id": EXAMPLE_ID, "signal_sent": "SIGTERM",
    "outcome": "stopped", "waited_ms": 132}))]
pub struct StopResponse {
    /// The session stopped.
    pub session_id: String,
    /// The last signal sent (`SIGTERM` if it sufficed, else `SIGKILL`); `null` if the process
    /// was already gone.
    pub signal_sent: Option<String>,
    /// `stopped` or `already_gone`.
    pub outcome: String,
    /// How long the stop waited for the process to go, in milliseconds.
    pub waited_ms: u64,
}

/// The members a signal or stop problem carries beside `type`, `title`, `status`, `detail`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SignalRefusal {
    /// The session.
    #[schema(example = "ses_0193a4c2e1f07a3b9c5d2e4f6a8b0c1d")]
    pub session_id: String,
    /// The signal that did not get through.
    #[schema(example = "SIGTERM")]
    pub signal: String,
    /// `refused` (409) or `already_gone` (410).
    #[schema(example = "refused")]
    pub outcome: String,
    /// Why, in the registry's words.
    #[schema(
        example = "the kernel refused to signal pid 41234: Operation not permitted (os error 1)"
    )]
    pub reason: String,
    /// For a stop: the last signal that was delivered before it gave up (`null` when none was).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "SIGTERM")]
    pub signal_sent: Option<Option<String>>,
}

/// A signal or stop that did not happen, or did not finish: problem details plus what was
/// attempted.
#[derive(Debug, Serialize, ToSchema)]
pub struct SignalProblem {
    /// The problem.
    #[serde(flatten)]
    pub problem: Problem,
    /// What was attempted.
    #[serde(flatten)]
    pub refusal: SignalRefusal,
}

/// The members a refused prune carries beside `type`, `title`, `status`, `detail`.
#[derive(Debug, Serialize, ToSchema)]
pub struct PruneRefusal {
    /// The session.
    #[schema(example = "ses_0193a4c2e1f07a3b9c5d2e4f6a8b0c1d")]
    pub session_id: String,
    /// `alive` or `unverified`.
    pub process: ProcessStatus,
    /// Why the process could not be verified, when it could not.
    pub reason: Option<String>,
}

/// A refused prune: problem details plus what layers 1–2 said.
#[derive(Debug, Serialize, ToSchema)]
pub struct PruneProblem {
    /// The problem.
    #[serde(flatten)]
    pub problem: Problem,
    /// What layers 1–2 said.
    #[serde(flatten)]
    pub refusal: PruneRefusal,
}

fn valid_id(id: &str) -> Result<(), ApiError> {
    if is_valid_session_id(id) {
        Ok(())
    } else {
        Err(ApiError::invalid_session_id())
    }
}

fn parse_status_filter(status: &str) -> Result<Vec<SessionState>, ApiError> {
    status
        .split(',')
        .map(str::trim)
        .map(|word| match word {
            "live" => Ok(SessionState::Live),
            "unreachable" => Ok(SessionState::Unreachable),
            "gone" => Ok(SessionState::Gone),
            other => Err(ApiError::bad_query(format!(
                "unknown status {other:?}: use live, unreachable or gone, comma-separated"
            ))),
        })
        .collect()
}

/// List every session, verified.
///
/// All records are verified concurrently (one slow door delays no other), newest first.
/// Nothing on disk changes.
#[utoipa::path(
    get, path = "/sessions", tag = TAG,
    params(ListQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every session that matches", body = SessionList),
        (status = 400, description = "Unknown status, or live/unreachable asked for without the probe", body = Problem, content_type = "application/problem+json"),
        GateProblems,
    )
)]
pub async fn list_sessions(
    State(state): State<AppState>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let probe = query.probe.unwrap_or(true);
    let filter = query
        .status
        .as_deref()
        .map(parse_status_filter)
        .transpose()?;
    if !probe
        && filter
            .as_ref()
            .is_some_and(|f| f.iter().any(|s| *s != SessionState::Gone))
    {
        return Err(ApiError::bad_query(
            "status=live and status=unreachable need the door probe; drop probe=false",
        ));
    }
    let listing = state.registry().sessions(probe).await?;
    if filter.is_some() {
        return Ok(json_body(encode_list(&listing, filter.as_deref())?));
    }
    // A `probe=false` listing is shared by every caller that waited for its pass: it is
    // encoded once, by the first of them.
    Ok(json_body(
        listing.encoded(|listing| encode_list(listing, None))?,
    ))
}

/// The list body of `listing`, keeping only the sessions whose state is in `keep`, if given.
fn encode_list(listing: &Listing, keep: Option<&[SessionState]>) -> Result<Bytes, ApiError> {
    let list = SessionList {
        sessions: listing
            .readings
            .iter()
            .map(SessionView::of)
            .filter(|view| match keep {
                None => true,
                Some(keep) => view.liveness.state.is_some_and(|s| keep.contains(&s)),
            })
            .collect(),
        unreadable: listing.unreadable.len(),
    };
    serde_json::to_vec(&list)
        .map(Bytes::from)
        .map_err(|e| RegistryError::Task(format!("encoding the session list: {e}")).into())
}

/// A 200 with a JSON body already encoded.
fn json_body(body: Bytes) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

/// One session, verified.
#[utoipa::path(
    get, path = "/sessions/{id}", tag = TAG,
    params(SessionPath, ProbeQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The session", body = SessionView),
        SessionProblems,
        GateProblems,
    )
)]
pub async fn get_session(
    State(state): State<AppState>,
    Path(SessionPath { id }): Path<SessionPath>,
    Query(query): Query<ProbeQuery>,
) -> Result<Json<SessionView>, ApiError> {
    valid_id(&id)?;
    let reading = state
        .registry()
        .session(&id, query.probe.unwrap_or(true))
        .await?;
    Ok(Json(SessionView::of(&reading)))
}

/// The three layers for one session.
#[utoipa::path(
    get, path = "/sessions/{id}/liveness", tag = TAG,
    params(SessionPath),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The verdict", body = LivenessReport),
        SessionProblems,
        GateProblems,
    )
)]
pub async fn get_liveness(
    State(state): State<AppState>,
    Path(SessionPath { id }): Path<SessionPath>,
) -> Result<Json<LivenessReport>, ApiError> {
    valid_id(&id)?;
    let reading = state.registry().session(&id, true).await?;
    let view = LivenessView::of(&reading);
    Ok(Json(LivenessReport {
        session_id: id,
        // A probed reading always has a verdict; `unreachable` is the cautious fallback.
        state: view.state.unwrap_or(SessionState::Unreachable),
        process: view.process,
        reason: view.reason,
    }))
}

/// Prune one session's record, on evidence only.
///
/// Re-reads layers 1–2; unlinks the record and its `.control` only if the process is gone.
#[utoipa::path(
    delete, path = "/sessions/{id}", tag = TAG,
    params(SessionPath),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The record was removed", body = PruneResponse),
        (status = 409, description = "The process is alive or unverified; the record stays", body = PruneProblem, content_type = "application/problem+json"),
        SessionProblems,
        GateProblems,
    )
)]
pub async fn prune_session(
    State(state): State<AppState>,
    Path(SessionPath { id }): Path<SessionPath>,
) -> Result<Json<PruneResponse>, ApiError> {
    valid_id(&id)?;
    match state.registry().prune_session(&id).await? {
        PruneOutcome::Pruned { reason } => Ok(Json(PruneResponse {
            session_id: id,
            pruned: true,
            reason,
        })),
        PruneOutcome::Kept { process } => {
            let reason = match &process {
                ProcessState::Unverified { reason } => Some(reason.clone()),
                _ => None,
            };
            let detail = match &reason {
                Some(reason) => format!("{reason}; the record stays"),
                None => format!("the process of session {id} is alive; its record stays"),
            };
            let refusal = PruneRefusal {
                session_id: id,
                process: ProcessStatus::from(&process),
                reason,
            };
            Err(
                Problem::new(StatusCode::CONFLICT, "session-not-gone", detail)
                    .with_members(&refusal)
                    .into(),
            )
        }
    }
}

/// Prune every gone record, and every file named like a record that can never be one.
///
/// Re-reads layers 1–2 for each record. Files are removed only when their name is a murmur
/// session id (`ses_` + 32 hex digits) and what was read proves they are not a record; a
/// directory, a file that could not be read, or any other name is left alone.
#[utoipa::path(
    delete, path = "/sessions", tag = TAG,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "What was removed", body = PruneAllResponse),
        GateProblems,
    )
)]
pub async fn prune_all(State(state): State<AppState>) -> Result<Json<PruneAllResponse>, ApiError> {
    let report = state.registry().prune_all().await?;
    Ok(Json(PruneAllResponse {
        pruned: report
            .pruned
            .into_iter()
            .map(|(session_id, reason)| PrunedEntry { session_id, reason })
            .collect(),
        removed_unreadable: report.removed_unreadable.len(),
    }))
}

/// Send SIGTERM or SIGKILL to a session's process, if it is still that process.
///
/// Re-checks layers 1–2 and signals through a pidfd, so a reused pid is never signalled.
#[utoipa::path(
    post, path = "/sessions/{id}/signal", tag = TAG,
    params(SessionPath),
    request_body(content = SignalRequest, content_type = "application/json"),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The signal was delivered", body = SignalResponse),
        (status = 409, description = "Refused: the process could not be confirmed, or the kernel said EPERM", body = SignalProblem, content_type = "application/problem+json"),
        (status = 410, description = "The process was already gone; its record was removed", body = SignalProblem, content_type = "application/problem+json"),
        (status = 413, description = "Body over 16 KiB", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Unknown signal", body = Problem, content_type = "application/problem+json"),
        SessionProblems,
        GateProblems,
    )
)]
pub async fn signal_session(
    State(state): State<AppState>,
    Path(SessionPath { id }): Path<SessionPath>,
    body: Result<Json<SignalRequest>, JsonRejection>,
) -> Result<Json<SignalResponse>, Response> {
    // The id first: a bad id is a 400 whatever the body.
    valid_id(&id).map_err(IntoResponse::into_response)?;
    let Json(body) = body.map_err(IntoResponse::into_response)?;
    signal_checked(&state, id, &body)
        .await
        .map_err(IntoResponse::into_response)
}

async fn signal_checked(
    state: &AppState,
    id: String,
    body: &SignalRequest,
) -> Result<Json<SignalResponse>, ApiError> {
    let Some(kind) = SignalKind::parse(&body.signal) else {
        return Err(Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown-signal",
            "signal must be SIGTERM or SIGKILL",
        )
        .into());
    };
    // Spawned, like a stop: once asked for, the signal and the prune after it finish even if
    // the client hangs up or the request times out, so what the registry did and what it
    // recorded never part.
    let report = {
        let state = state.clone();
        let id = id.clone();
        tokio::spawn(async move { state.registry().signal(&id, kind).await })
    }
    .await
    .map_err(|e| RegistryError::Task(e.to_string()))??;
    match report.outcome {
        SignalOutcome::Sent => Ok(Json(SignalResponse {
            session_id: id,
            signal: kind.name().to_owned(),
            outcome: "sent".to_owned(),
        })),
        SignalOutcome::AlreadyGone { reason } => Err(Problem::new(
            StatusCode::GONE,
            "already-gone",
            match &report.pruned {
                Some(fate) => format!("{reason}; nothing was sent and {}", fate.sentence()),
                None => format!("{reason}; nothing was sent"),
            },
        )
        .with_members(&SignalRefusal {
            session_id: id,
            signal: kind.name().to_owned(),
            outcome: "already_gone".to_owned(),
            reason,
            signal_sent: None,
        })
        .into()),
        SignalOutcome::Refused { reason } => Err(Problem::new(
            StatusCode::CONFLICT,
            "signal-refused",
            format!("{reason}; nothing was sent"),
        )
        .with_members(&SignalRefusal {
            session_id: id,
            signal: kind.name().to_owned(),
            outcome: "refused".to_owned(),
            reason,
            signal_sent: None,
        })
        .into()),
    }
}

/// Stop a session: SIGTERM, wait, then SIGKILL if it is still the same process.
///
/// Waits at most `timeout` seconds for the process to go after SIGTERM, returning as soon as
/// it does; then sends SIGKILL only if layers 1–2 still confirm it. `timeout=0` sends SIGKILL
/// at once. The record is removed once the process is gone.
#[utoipa::path(
    post, path = "/sessions/{id}/stop", tag = TAG,
    params(SessionPath, StopQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The process is gone (stopped now, or already)", body = StopResponse),
        (status = 409, description = "Refused: the process could not be confirmed, the kernel said EPERM, or it outlived SIGKILL's grace; `signal_sent` says what went out", body = SignalProblem, content_type = "application/problem+json"),
        SessionProblems,
        GateProblems,
    )
)]
pub async fn stop_session(
    State(state): State<AppState>,
    Path(SessionPath { id }): Path<SessionPath>,
    Query(query): Query<StopQuery>,
) -> Result<Json<StopResponse>, ApiError> {
    valid_id(&id)?;
    let timeout = match query.timeout {
        None => DEFAULT_STOP_TIMEOUT,
        Some(secs) if secs <= MAX_STOP_TIMEOUT.as_secs() => Duration::from_secs(secs),
        Some(_) => {
            return Err(ApiError::bad_query(format!(
                "timeout is at most {} seconds",
                MAX_STOP_TIMEOUT.as_secs()
            )));
        }
    };
    // The stop runs to its end even if the client goes away: abandoning it between SIGTERM
    // and SIGKILL would leave a capsule half-stopped and its record in place.
    let stopping = {
        let state = state.clone();
        let id = id.clone();
        tokio::spawn(async move { state.registry().stop(&id, timeout).await })
    };
    let report = stopping
        .await
        .map_err(|e| RegistryError::Task(e.to_string()))??;
    let waited_ms = u64::try_from(report.waited.as_millis()).unwrap_or(u64::MAX);
    match report.outcome {
        StopOutcome::Stopped { signal_sent } => Ok(Json(StopResponse {
            session_id: id,
            signal_sent: Some(signal_sent.name().to_owned()),
            outcome: "stopped".to_owned(),
            waited_ms,
        })),
        StopOutcome::AlreadyGone => Ok(Json(StopResponse {
            session_id: id,
            signal_sent: None,
            outcome: "already_gone".to_owned(),
            waited_ms,
        })),
        StopOutcome::Refused {
            reason,
            signal,
            sent,
        } => {
            let detail = match sent {
                None => format!("{reason}; nothing was sent"),
                Some(sent) => format!("{reason}; {} was sent before the stop gave up", sent.name()),
            };
            Err(Problem::new(StatusCode::CONFLICT, "stop-refused", detail)
                .with_members(&SignalRefusal {
                    session_id: id,
                    signal: signal.name().to_owned(),
                    outcome: "refused".to_owned(),
                    reason,
                    signal_sent: Some(sent.map(|s| s.name().to_owned())),
                })
                .into())
        }
    }
}

/// The agent card a live session's door serves, exactly as the door answered it (secrets of
/// the record redacted, should the door echo one).
#[derive(Debug, Serialize, ToSchema)]
#[schema(value_type = Object, example = json!({
    "protocolVersion": "1.0",
    "name": "researcher",
    "version": "0.3.1",
    "capabilities": {"extensions": [{
        "uri": "https://docs.murmur.nexus/reference/agent-card/#murmur-capsule-v1",
        "params": {"sessionId": EXAMPLE_ID}
    }]}
}))]
pub struct AgentCard(serde_json::Value);

/// Why a session has no card: what the layers said.
#[derive(Debug, Serialize, ToSchema)]
pub struct CardRefusalMembers {
    /// The session.
    pub session_id: String,
    /// All three layers' verdict (`live` for a session without a door).
    pub state: SessionState,
    /// Layers 1–2 alone.
    pub process: ProcessStatus,
    /// Why there is no card.
    pub reason: String,
}

/// A card refusal as the client sees it.
#[derive(Debug, Serialize, ToSchema)]
pub struct CardProblem {
    #[serde(flatten)]
    problem: Problem,
    #[serde(flatten)]
    members: CardRefusalMembers,
}

/// The agent card of a live session, for peers that want to talk to it.
///
/// Fetched from the session's door by the code that probes it (a request of its own; the
/// extended card for an authenticated door), so the card is proven to name this session. The registry adds
/// no credential: to talk to an authenticated door, a peer needs its own.
#[utoipa::path(
    get, path = "/sessions/{id}/card", tag = TAG,
    params(SessionPath),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The card the live door serves", body = AgentCard),
        (status = 409, description = "The session is not live, or has no door", body = CardProblem, content_type = "application/problem+json"),
        SessionProblems,
        GateProblems,
    )
)]
pub async fn get_card(
    State(state): State<AppState>,
    Path(SessionPath { id }): Path<SessionPath>,
) -> Result<Json<AgentCard>, ApiError> {
    valid_id(&id)?;
    let refusal = match state.registry().card(&id).await? {
        Ok(card) => return Ok(Json(AgentCard(card))),
        Err(refusal) => refusal,
    };
    let members = match refusal {
        CardRefusal::NoDoor => CardRefusalMembers {
            session_id: id,
            state: SessionState::Live,
            process: ProcessStatus::Alive,
            reason: "the session has no door (its record names no url), so it has no card"
                .to_owned(),
        },
        CardRefusal::NotLive { liveness, process } => CardRefusalMembers {
            session_id: id,
            state: SessionState::from(&liveness),
            process: ProcessStatus::from(&process),
            reason: liveness
                .reason()
                .unwrap_or("the session is not live")
                .to_owned(),
        },
    };
    let detail = format!("no card: {}", members.reason);
    Err(
        Problem::new(StatusCode::CONFLICT, "session-not-live", detail)
            .with_members(&members)
            .into(),
    )
}
