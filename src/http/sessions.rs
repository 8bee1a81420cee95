//! The sessions API's handlers: list, inspect, prune, signal and stop, each documented in the
//! OpenAPI spec by its own annotation (wire types in [`super::wire`]).
//!
//! Invariants kept here:
//! - Session ids are validated before anything reaches the registry; no path is built from
//!   raw input.
//! - These GETs change nothing on disk; only DELETE, signal and stop remove a record, and only
//!   on the evidence the registry returns (and `GET /events`, whose live view prunes gone
//!   records on the same evidence while someone listens).
//! - A list body encodes the listing handed to this request; a listing shared by several
//!   (`probe=false`) is encoded once, into the listing itself ([`Listing::encoded`]).

use std::sync::Arc;
use std::time::Duration;

use super::AppState;
use super::body::NoBodyOrJson;
use super::error::{ApiError, Problem, ProblemType};
use super::include::Includes;
use super::json_body::json_body;
use super::list_filter::ListFilter;
use super::paging::{SessionsCursor, page_size};
use super::responses::{BodyProblems, GateProblems, SessionProblems};
use super::session_page::{self, PageAsk};
use crate::wire::{
    AgentCard, CardProblem, CardRefusalMembers, DoorStopView, ListMembers, ListQuery,
    LivenessReport, LivenessView, Outcome, ProbeQuery, ProcessStatus, PruneAllResponse,
    PruneProblem, PruneRefusal, PruneResponse, PrunedEntry, SessionList, SessionPath, SessionState,
    SessionView, SignalProblem, SignalRefusal, SignalRequest, SignalResponse, StopQuery,
    StopResponse,
};
use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use crate::registry::{
    AskDoor, CardRefusal, DEFAULT_STOP_TIMEOUT, Listing, MAX_STOP_TIMEOUT, PruneDecision, Reading,
    RegistryError, Resources, SignalKind, StopOutcome,
};
use crate::running::{ProcessState, SignalOutcome, is_valid_session_id};

/// The tag every sessions endpoint carries in the OpenAPI spec.
pub const TAG: &str = "sessions";

/// Where a session is stopped.
pub const STOP_PATH: &str = "/sessions/{id}/stop";

fn valid_id(id: &str) -> Result<(), ApiError> {
    if is_valid_session_id(id) {
        Ok(())
    } else {
        Err(ApiError::invalid_session_id())
    }
}

/// List every session, verified.
///
/// All records are verified concurrently (one slow door delays no other), newest first
/// (`started_at`, then `session_id`). Nothing on disk changes. With `limit`, one page: only its
/// sessions' doors are probed, and `next_cursor` gives the next (`null` on the last; a page
/// may come out empty when a filter needs the probe). `include=card` adds each live session's card from the probe that
/// verified it (no second request to any door); `capsule` and `skill` filter as `status` does.
#[utoipa::path(
    get, path = "/sessions", tag = TAG,
    params(ListQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every session that matches", body = SessionList),
        (
            status = 400,
            description = "Unknown status or include word, an empty capsule or skill name, more \
                than 64 words in one list, live/unreachable, skill or include=card asked for \
                without the probe, a limit outside 1–10,000, a cursor without a limit \
                (`invalid-query`), or a cursor this list did not hand out (`invalid-cursor`)",
            body = Problem,
            content_type = "application/problem+json"
        ),
        GateProblems,
    )
)]
pub async fn list_sessions(
    State(state): State<AppState>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let probe = query.probe.unwrap_or(true);
    let (status, capsule, skill) = (&query.status, &query.capsule, &query.skill);
    let filter = ListFilter::parse(status.as_deref(), capsule.as_deref(), skill.as_deref())?;
    let includes = Includes::parse(query.include.as_deref())?;
    if !probe {
        if let Some(why) = filter.needs_probe() {
            return Err(ApiError::bad_query(why));
        }
        if includes.card {
            return Err(ApiError::bad_query(
                "include=card needs the door probe (the card is the one that verified the \
                 session); drop probe=false",
            ));
        }
    }
    if let Some(limit) = page_size(query.limit, query.cursor.as_deref())? {
        let cursor = (query.cursor.as_deref())
            .map(SessionsCursor::decode)
            .transpose()?;
        let ask = PageAsk {
            limit,
            cursor,
            probe,
            includes,
            filter,
        };
        return session_page::page(&state, ask).await;
    }
    let listing = if includes.card {
        // The cards live as long as this answer: they are dropped with the listing.
        Arc::new(state.registry().sessions_with_cards().await?)
    } else {
        state.registry().sessions(probe).await?
    };
    let resources = match includes.resources {
        true => Some(resources_of_kept(&state, &listing, &filter).await),
        false => None,
    };
    let members = ListMembers {
        cards: includes.card.then_some(&listing.cards[..]),
        resources: resources.as_deref(),
    };
    if includes.card || includes.resources || !filter.is_everything() {
        return Ok(json_body(encode_list(&listing, members, &filter)?));
    }
    // A `probe=false` listing is shared by every caller that waited for its pass: it is
    // encoded once, by the first of them.
    Ok(json_body(listing.encoded(|listing| {
        encode_list(listing, ListMembers::default(), &filter)
    })?))
}

/// What the process of each session `filter` keeps costs, indexed like `listing.readings`
/// (`None` for the others): only the sessions the answer shows are sampled, so a filtered
/// listing moves no other process's CPU baseline.
async fn resources_of_kept(
    state: &AppState,
    listing: &Listing,
    filter: &ListFilter,
) -> Vec<Option<Resources>> {
    let kept: Vec<usize> = (0..listing.readings.len())
        .filter(|&at| filter.keeps(&listing.readings[at]))
        .collect();
    let readings: Vec<Reading> = kept
        .iter()
        .map(|&at| listing.readings[at].clone())
        .collect();
    let figures = state.registry().resources(&readings).await;
    let mut all = vec![None; listing.readings.len()];
    for (at, figure) in kept.into_iter().zip(figures) {
        all[at] = figure;
    }
    all
}

/// The list body of `listing`, keeping the sessions `filter` admits, each with the optional
/// `members` given.
fn encode_list(
    listing: &Listing,
    members: ListMembers<'_>,
    filter: &ListFilter,
) -> Result<Bytes, ApiError> {
    SessionList::encode(
        &listing.readings,
        members,
        |reading| filter.keeps(reading),
        listing.unreadable.len(),
        None,
    )
    .map(Bytes::from)
    .map_err(|e| RegistryError::Task(format!("encoding the session list: {e}")).into())
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
    let includes = Includes::parse(query.include.as_deref())?;
    if includes.card {
        return Err(ApiError::bad_query(
            "include=card lists cards of many sessions; one session's card is \
             GET /sessions/{id}/card",
        ));
    }
    let reading = state
        .registry()
        .session(&id, query.probe.unwrap_or(true))
        .await?;
    let view = SessionView::of(&reading);
    if !includes.resources {
        return Ok(Json(view));
    }
    let resources = state
        .registry()
        .resources(std::slice::from_ref(&reading))
        .await;
    Ok(Json(view.with_resources(
        resources.first().and_then(Option::as_ref),
    )))
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
        (
            status = 409,
            description = "The process is alive or unverified; the record stays",
            body = PruneProblem,
            content_type = "application/problem+json"
        ),
        SessionProblems,
        BodyProblems,
        GateProblems,
    )
)]
pub async fn prune_session(
    State(state): State<AppState>,
    Path(SessionPath { id }): Path<SessionPath>,
    body: Result<NoBodyOrJson, ApiError>,
) -> Result<Json<PruneResponse>, ApiError> {
    valid_id(&id)?;
    body?;
    match state.registry().prune_session(&id).await? {
        PruneDecision::Removed { reason } => Ok(Json(PruneResponse {
            session_id: id,
            pruned: true,
            reason,
        })),
        PruneDecision::Kept { process } => {
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
            Err(Problem::new(ProblemType::SessionNotGone, detail)
                .with_members(&refusal)
                .into())
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
        BodyProblems,
        GateProblems,
    )
)]
pub async fn prune_all(
    State(state): State<AppState>,
    _: NoBodyOrJson,
) -> Result<Json<PruneAllResponse>, ApiError> {
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
        (
            status = 409,
            description = "Refused: the process could not be confirmed, or the kernel said EPERM",
            body = SignalProblem,
            content_type = "application/problem+json"
        ),
        (
            status = 410,
            description = "The process was already gone; nothing was sent. Its record is pruned \
                           on that evidence, and the detail says whether it was removed",
            body = SignalProblem,
            content_type = "application/problem+json"
        ),
        BodyProblems,
        (
            status = 422,
            description = "Unknown signal",
            body = Problem,
            content_type = "application/problem+json"
        ),
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
    let Some(kind) = body.signal.as_deref().and_then(SignalKind::parse) else {
        return Err(Problem::new(
            ProblemType::UnknownSignal,
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
            outcome: Outcome::Sent,
        })),
        SignalOutcome::AlreadyGone { reason } => Err(Problem::new(
            ProblemType::AlreadyGone,
            match &report.pruned {
                Some(fate) => format!("{reason}; nothing was sent and {}", fate.sentence()),
                None => format!("{reason}; nothing was sent"),
            },
        )
        .with_members(&SignalRefusal {
            session_id: id,
            signal: kind.name().to_owned(),
            outcome: Outcome::AlreadyGone,
            reason,
            signal_sent: None,
            door: None,
        })
        .into()),
        SignalOutcome::Refused { reason } => Err(Problem::new(
            ProblemType::SignalRefused,
            format!("{reason}; nothing was sent"),
        )
        .with_members(&SignalRefusal {
            session_id: id,
            signal: kind.name().to_owned(),
            outcome: Outcome::Refused,
            reason,
            signal_sent: None,
            door: None,
        })
        .into()),
    }
}

/// Stop a session: ask its door, then SIGTERM, wait, SIGKILL if still the same process.
///
/// First, as `mur stop` does, asks the capsule to cancel its tasks (`murmur.StopSession`), but
/// only right after a fresh probe shows its door answering as this session; `door` says how
/// that went (it never changes what is signalled). That takes at most 12 s before the SIGTERM
/// (7 s for the probe, 5 s for the ask); `door=false` and `timeout=0` skip it. Then
/// waits at most `timeout` seconds for the process to go after SIGTERM, returning as soon as it
/// does, and sends SIGKILL only if layers 1–2 still confirm it. `timeout=0` sends SIGKILL at
/// once. The record is removed once the process is gone.
#[utoipa::path(
    post, path = STOP_PATH, tag = TAG,
    params(SessionPath, StopQuery),
    security(("bearer" = [])),
    responses(
        (
            status = 200,
            description = "The process is gone (stopped now, or already)",
            body = StopResponse
        ),
        (
            status = 409,
            description = "Refused: the process could not be confirmed, the kernel said EPERM, or \
                it outlived SIGKILL's grace; `signal_sent` says what went out, `door` what the \
                door said",
            body = SignalProblem,
            content_type = "application/problem+json"
        ),
        SessionProblems,
        BodyProblems,
        GateProblems,
    )
)]
pub async fn stop_session(
    State(state): State<AppState>,
    Path(SessionPath { id }): Path<SessionPath>,
    Query(query): Query<StopQuery>,
    body: Result<NoBodyOrJson, ApiError>,
) -> Result<Json<StopResponse>, ApiError> {
    valid_id(&id)?;
    body?;
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
    let ask = match query.door {
        Some(false) => AskDoor::Never,
        None | Some(true) => AskDoor::First,
    };
    // The stop runs to its end even if the client goes away: abandoning it between SIGTERM
    // and SIGKILL would leave a capsule half-stopped and its record in place.
    let stopping = {
        let state = state.clone();
        let id = id.clone();
        tokio::spawn(async move { state.registry().stop(&id, timeout, ask).await })
    };
    let report = stopping
        .await
        .map_err(|e| RegistryError::Task(e.to_string()))??;
    let waited_ms = u64::try_from(report.waited.as_millis()).unwrap_or(u64::MAX);
    let door = DoorStopView::of(&report.door);
    match report.outcome {
        StopOutcome::Stopped { signal_sent } => Ok(Json(StopResponse {
            session_id: id,
            signal_sent: Some(signal_sent.name().to_owned()),
            outcome: Outcome::Stopped,
            waited_ms,
            door,
        })),
        StopOutcome::AlreadyGone => Ok(Json(StopResponse {
            session_id: id,
            signal_sent: None,
            outcome: Outcome::AlreadyGone,
            waited_ms,
            door,
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
            Err(Problem::new(ProblemType::StopRefused, detail)
                .with_members(&SignalRefusal {
                    session_id: id,
                    signal: signal.name().to_owned(),
                    outcome: Outcome::Refused,
                    reason,
                    signal_sent: Some(sent.map(|s| s.name().to_owned())),
                    door: Some(door),
                })
                .into())
        }
    }
}

/// The agent card of a live session, for peers that want to talk to it.
///
/// Fetched from the session's door by the code that probes it (a request of its own; the
/// extended card for an authenticated door), so the card is proven to name this session. The
/// registry adds no credential: to talk to an authenticated door, a peer needs its own.
#[utoipa::path(
    get, path = "/sessions/{id}/card", tag = TAG,
    params(SessionPath),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The card the live door serves", body = AgentCard),
        (
            status = 409,
            description = "The session is not live, or has no door",
            body = CardProblem,
            content_type = "application/problem+json"
        ),
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
    Err(Problem::new(ProblemType::SessionNotLive, detail)
        .with_members(&members)
        .into())
}
