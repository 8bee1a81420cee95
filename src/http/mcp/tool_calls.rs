//! A tool call: its arguments turned into the REST route's own request values, the route's
//! handler run, and its answer turned into the tool's result.
//!
//! Invariants kept here:
//! - One path per job: each tool calls the handler of its REST route (`sessions`, `fleet`),
//!   so the query words, filters, evidence rules and JSON are the route's, never a copy.
//! - `structuredContent` is exactly the JSON the route answers, and the text content is that
//!   JSON's very bytes. A refusal is the route's problem (its `type`, `detail` and members)
//!   with `isError: true`; arguments that do not fit are a `bad-request` problem, as a query
//!   that does not parse is on the route.
//! - Nothing is added: no secret the route leaves out can reach a result.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::super::body::NoBodyOrJson;
use super::super::error::{Problem, ProblemType};
use super::super::fleet::wire::FleetQuery;
use super::super::{AppState, fleet, sessions};
use super::tools;
use crate::wire::{ListQuery, ProbeQuery, SessionPath, SignalRequest, StopQuery};

/// The arguments of `list_sessions` (and, without `include` and `probe`, `find_peers`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArguments {
    status: Option<Vec<String>>,
    capsule: Option<Vec<String>>,
    skill: Option<Vec<String>>,
    include: Option<Vec<String>>,
    probe: Option<bool>,
    limit: Option<u32>,
    cursor: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PeerArguments {
    capsule: Option<Vec<String>>,
    skill: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionArguments {
    session_id: String,
    include: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OneSession {
    session_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StopArguments {
    session_id: String,
    timeout: Option<u64>,
    door: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SignalArguments {
    session_id: String,
    signal: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PruneArguments {
    session_id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FleetArguments {
    status: Option<Vec<String>>,
    host: Option<Vec<String>>,
    capsule: Option<Vec<String>>,
    skill: Option<Vec<String>>,
    limit: Option<u32>,
    cursor: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArguments {}

/// Run tool `name` with `arguments`; `None` when this registry has no such tool.
pub(super) async fn call(
    state: &AppState,
    name: &str,
    arguments: Option<JsonObject>,
) -> Option<CallToolResult> {
    let arguments = Value::Object(arguments.unwrap_or_default());
    let answer = match name {
        tools::LIST_SESSIONS => list(state, arguments).await,
        tools::FIND_PEERS => find_peers(state, arguments).await,
        tools::GET_SESSION => get_session(state, arguments).await,
        tools::GET_LIVENESS => match parse::<OneSession>(arguments) {
            Ok(args) => into(sessions::get_liveness(st(state), path(args.session_id)).await),
            Err(refusal) => Err(refusal),
        },
        tools::GET_CARD => match parse::<OneSession>(arguments) {
            Ok(args) => into(sessions::get_card(st(state), path(args.session_id)).await),
            Err(refusal) => Err(refusal),
        },
        tools::STOP_SESSION => stop(state, arguments).await,
        tools::SIGNAL_SESSION => signal(state, arguments).await,
        tools::PRUNE => prune(state, arguments).await,
        tools::FLEET_SESSIONS | tools::FLEET_HOSTS if state.fleet().own_host().is_none() => {
            return None;
        }
        tools::FLEET_SESSIONS => fleet_sessions(state, arguments).await,
        tools::FLEET_HOSTS => match parse::<NoArguments>(arguments) {
            Ok(NoArguments {}) => into(fleet::fleet_hosts(st(state)).await),
            Err(refusal) => Err(refusal),
        },
        _ => return None,
    };
    let response = match answer {
        Ok(response) => response,
        Err(problem) => problem.into_response(),
    };
    Some(result_of(response).await)
}

/// A handler's answer (success or problem) as one response, or the problem of arguments that
/// never reached it.
type Answer = Result<Response, Box<Problem>>;

fn into<T: IntoResponse, E: IntoResponse>(answer: Result<T, E>) -> Answer {
    Ok(match answer {
        Ok(ok) => ok.into_response(),
        Err(problem) => problem.into_response(),
    })
}

fn st(state: &AppState) -> State<AppState> {
    State(state.clone())
}

fn path(id: String) -> Path<SessionPath> {
    Path(SessionPath { id })
}

/// The arguments as `T`, or the `bad-request` problem saying why they do not fit.
fn parse<T: DeserializeOwned>(arguments: Value) -> Result<T, Box<Problem>> {
    serde_json::from_value(arguments).map_err(|error| {
        Box::new(Problem::new(
            ProblemType::BadRequest,
            format!("the arguments do not fit the tool's input schema: {error}"),
        ))
    })
}

/// A list argument as the route's comma-separated query value. A word holding a comma would
/// be read as two: refused.
fn joined(argument: &str, words: Option<Vec<String>>) -> Result<Option<String>, Box<Problem>> {
    let Some(words) = words else {
        return Ok(None);
    };
    if words.iter().any(|word| word.contains(',')) {
        return Err(Box::new(Problem::new(
            ProblemType::InvalidQuery,
            format!("each word of {argument} is an element of its array, without commas"),
        )));
    }
    Ok(Some(words.join(",")))
}

async fn list(state: &AppState, arguments: Value) -> Answer {
    let args = parse::<ListArguments>(arguments)?;
    let query = ListQuery {
        status: joined("status", args.status)?,
        probe: args.probe,
        include: joined("include", args.include)?,
        capsule: joined("capsule", args.capsule)?,
        skill: joined("skill", args.skill)?,
        limit: args.limit,
        cursor: args.cursor,
    };
    into(sessions::list_sessions(st(state), Query(query)).await)
}

async fn find_peers(state: &AppState, arguments: Value) -> Answer {
    let args = parse::<PeerArguments>(arguments)?;
    let query = ListQuery {
        status: Some("live".to_owned()),
        probe: None,
        include: Some("card".to_owned()),
        capsule: joined("capsule", args.capsule)?,
        skill: joined("skill", args.skill)?,
        limit: None,
        cursor: None,
    };
    into(sessions::list_sessions(st(state), Query(query)).await)
}

async fn get_session(state: &AppState, arguments: Value) -> Answer {
    let args = parse::<SessionArguments>(arguments)?;
    let query = ProbeQuery {
        probe: None,
        include: joined("include", args.include)?,
    };
    into(sessions::get_session(st(state), path(args.session_id), Query(query)).await)
}

async fn stop(state: &AppState, arguments: Value) -> Answer {
    let args = parse::<StopArguments>(arguments)?;
    let query = StopQuery {
        timeout: args.timeout,
        door: args.door,
    };
    let stopped = sessions::stop_session(
        st(state),
        path(args.session_id),
        Query(query),
        Ok(NoBodyOrJson),
    );
    into(stopped.await)
}

async fn signal(state: &AppState, arguments: Value) -> Answer {
    let args = parse::<SignalArguments>(arguments)?;
    let body = Ok(Json(SignalRequest {
        signal: Some(args.signal),
    }));
    into(sessions::signal_session(st(state), path(args.session_id), body).await)
}

async fn prune(state: &AppState, arguments: Value) -> Answer {
    match parse::<PruneArguments>(arguments)?.session_id {
        Some(id) => into(sessions::prune_session(st(state), path(id), Ok(NoBodyOrJson)).await),
        None => into(sessions::prune_all(st(state), NoBodyOrJson).await),
    }
}

async fn fleet_sessions(state: &AppState, arguments: Value) -> Answer {
    let args = parse::<FleetArguments>(arguments)?;
    let query = FleetQuery {
        status: joined("status", args.status)?,
        host: joined("host", args.host)?,
        capsule: joined("capsule", args.capsule)?,
        skill: joined("skill", args.skill)?,
        limit: args.limit,
        cursor: args.cursor,
    };
    into(fleet::fleet_sessions(st(state), Query(query)).await)
}

/// The route's answer as a tool result: its JSON, structured and as text, `isError` unless it
/// succeeded.
async fn result_of(response: Response) -> CallToolResult {
    let succeeded = response.status().is_success();
    // The body is already in memory (the handlers encode whole answers): no limit bites.
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    // The route's own bytes, not encoded again (nor copied: the body's buffer is taken over).
    let text = String::from_utf8(Vec::from(bytes))
        .unwrap_or_else(|invalid| String::from_utf8_lossy(invalid.as_bytes()).into_owned());
    // Parsed from the text, checked as UTF-8 once above: from bytes, serde_json checks every
    // string again, which made the parse of a 100-card `find_peers` answer 1.7x as long.
    let value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let content = vec![ContentBlock::text(text)];
    let mut result = if succeeded {
        CallToolResult::success(content)
    } else {
        CallToolResult::error(content)
    };
    result.structured_content = Some(value);
    result
}
