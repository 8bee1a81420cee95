//! The tools `/mcp` lists: their names, what each argument accepts, their output schemas and
//! their annotations, as the contract fixes them (DESIGN.md, issue 24).
//!
//! Invariants kept here:
//! - The names never change: prompts and configurations rely on them.
//! - Lists are JSON arrays of words, never comma strings; every schema refuses unknown members.
//! - Read tools are read-only; stop and signal are destructive and not idempotent; prune is
//!   destructive and idempotent. The fleet tools are listed only with a fleet.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

use super::output_schema::one_of;

/// Every tool's name, in the order they are listed.
pub(super) const LIST_SESSIONS: &str = "list_sessions";
pub(super) const GET_SESSION: &str = "get_session";
pub(super) const GET_LIVENESS: &str = "get_liveness";
pub(super) const GET_CARD: &str = "get_card";
pub(super) const FIND_PEERS: &str = "find_peers";
pub(super) const STOP_SESSION: &str = "stop_session";
pub(super) const SIGNAL_SESSION: &str = "signal_session";
pub(super) const PRUNE: &str = "prune";
pub(super) const FLEET_SESSIONS: &str = "fleet_sessions";
pub(super) const FLEET_HOSTS: &str = "fleet_hosts";

/// The tools of a registry, with the fleet's when `fleet` is configured.
pub(super) fn catalogue(fleet: bool) -> Vec<Tool> {
    let mut tools = reading_tools();
    tools.extend(acting_tools());
    if fleet {
        tools.extend(fleet_tools());
    }
    tools
}

/// The tools that read this host's sessions: read-only.
fn reading_tools() -> Vec<Tool> {
    vec![
        read(
            LIST_SESSIONS,
            "Every session on this machine, verified (process alive, same process, door \
             answering as the session), newest first: what GET /sessions answers for the same \
             words. Filters combine; `include` adds each live session's card or what its \
             process costs.",
            object(list_arguments(true)),
            &["SessionList"],
        ),
        read(
            GET_SESSION,
            "One session, verified: what GET /sessions/{id} answers.",
            object_requiring(
                json!({ "session_id": session_id(), "include": include(&["resources"]) }),
            ),
            &["SessionView"],
        ),
        read(
            GET_LIVENESS,
            "The three layers for one session (process alive, same process, door answering): \
             what GET /sessions/{id}/liveness answers.",
            object_requiring(json!({ "session_id": session_id() })),
            &["LivenessReport"],
        ),
        read(
            GET_CARD,
            "The A2A agent card a live session's door serves, for talking to it: what GET \
             /sessions/{id}/card answers (secrets redacted).",
            object_requiring(json!({ "session_id": session_id() })),
            &["AgentCard"],
        ),
        read(
            FIND_PEERS,
            "Live sessions with their agent cards, one door probe each, optionally only those \
             whose card lists a skill (id or tag) or whose capsule is named: GET \
             /sessions?status=live&include=card with the filters.",
            object(
                json!({ "skill": words("skill ids or tags"), "capsule": words("capsule names") }),
            ),
            &["SessionList"],
        ),
    ]
}

/// The tools that end a process or remove a record: destructive.
fn acting_tools() -> Vec<Tool> {
    vec![
        act(
            STOP_SESSION,
            "Stop a session as POST /sessions/{id}/stop does: ask its door to cancel its tasks, \
             then SIGTERM, wait up to `timeout` seconds, SIGKILL if it is still the same \
             process. Never signals a pid that changed hands. Its record is removed once the \
             process is gone.",
            object_requiring(json!({
                "session_id": session_id(),
                "timeout": { "type": "integer", "minimum": 0, "maximum": 300,
                    "description": "Seconds to wait after SIGTERM before SIGKILL (default 10; 0 \
                        sends SIGKILL at once and skips the door)" },
                "door": { "type": "boolean",
                    "description": "Ask the door to cancel its tasks first (default true)" },
            })),
            &["StopResponse"],
            false,
        ),
        act(
            SIGNAL_SESSION,
            "Send SIGTERM or SIGKILL to a session's process, as POST /sessions/{id}/signal does: \
             only if layers 1-2 still confirm it is the session's process, through a pidfd.",
            object_requiring(json!({
                "session_id": session_id(),
                "signal": { "type": "string", "enum": ["SIGTERM", "SIGKILL", "TERM", "KILL"] },
            })),
            &["SignalResponse"],
            false,
        ),
        act(
            PRUNE,
            "Remove the record of a session whose process is gone (DELETE /sessions/{id}), or, \
             without a session_id, every gone record and every file that can never be a record \
             (DELETE /sessions). On evidence only: a live or unverified process keeps its \
             record.",
            object(json!({ "session_id": session_id() })),
            &["PruneResponse", "PruneAllResponse"],
            true,
        ),
    ]
}

/// The tools that read the fleet, listed only with one: read-only.
fn fleet_tools() -> Vec<Tool> {
    let mut arguments = list_arguments(false);
    arguments["host"] = words("host ids (--host-id)");
    vec![
        read(
            FLEET_SESSIONS,
            "Every session of every host in the fleet, as their registries verified and \
             published them: what GET /fleet/sessions answers. Act (stop, signal) only on \
             sessions of this registry's own host (`host_id`).",
            object(arguments),
            &["FleetSessions"],
        ),
        read(
            FLEET_HOSTS,
            "Every host in the fleet: what GET /fleet/hosts answers.",
            object(json!({})),
            &["FleetHosts"],
        ),
    ]
}

/// The arguments of a listing; with `local`, those only this host's listing takes.
fn list_arguments(local: bool) -> Value {
    let mut arguments = json!({
        "status": {
            "type": "array", "maxItems": 64,
            "items": { "type": "string", "enum": ["live", "unreachable", "gone"] },
            "description": "Only sessions in these states",
        },
        "capsule": words("capsule names"),
        "skill": words("skill ids or tags the verified card lists"),
        "limit": { "type": "integer", "minimum": 1, "maximum": 10000,
            "description": "Answer one page of at most this many sessions, with next_cursor" },
        "cursor": { "type": "string",
            "description": "The next_cursor of the page before (with limit)" },
    });
    if local {
        arguments["include"] = include(&["card", "resources"]);
        arguments["probe"] = json!({ "type": "boolean",
            "description": "Ask each door (default true); false checks processes only" });
    }
    arguments
}

fn session_id() -> Value {
    json!({ "type": "string", "pattern": "^[A-Za-z0-9_-]{1,128}$",
        "description": "The session id (ses_ + 32 hex digits for murmur's)" })
}

fn include(allowed: &[&str]) -> Value {
    json!({ "type": "array", "items": { "type": "string", "enum": allowed },
        "description": "Members to add to each session" })
}

fn words(what: &str) -> Value {
    json!({ "type": "array", "maxItems": 64,
        "items": { "type": "string", "minLength": 1, "pattern": "^[^,]+$" },
        "description": format!("Only sessions matching one of these {what}") })
}

/// An object schema with these optional `properties` and no others.
fn object(properties: Value) -> Arc<JsonObject> {
    let schema = json!({ "type": "object", "properties": properties,
        "additionalProperties": false });
    Arc::new(as_object(schema))
}

/// [`object`], with `session_id` required.
fn object_requiring(properties: Value) -> Arc<JsonObject> {
    let mut schema = as_object(json!({ "type": "object", "properties": properties,
        "additionalProperties": false }));
    schema.insert("required".to_owned(), json!(["session_id"]));
    Arc::new(schema)
}

fn as_object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

/// A read-only tool answering one of the `outputs` components.
fn read(name: &'static str, about: &'static str, input: Arc<JsonObject>, outputs: &[&str]) -> Tool {
    Tool::new(name, about, input)
        .with_raw_output_schema(one_of(outputs))
        .annotate(
            ToolAnnotations::new()
                .read_only(true)
                .destructive(false)
                .idempotent(true)
                .open_world(false),
        )
}

/// A tool that changes the machine: destructive, idempotent or not.
fn act(
    name: &'static str,
    about: &'static str,
    input: Arc<JsonObject>,
    outputs: &[&str],
    idempotent: bool,
) -> Tool {
    Tool::new(name, about, input)
        .with_raw_output_schema(one_of(outputs))
        .annotate(
            ToolAnnotations::new()
                .read_only(false)
                .destructive(true)
                .idempotent(idempotent)
                .open_world(false),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(tools: &[Tool]) -> Vec<&str> {
        tools.iter().map(|tool| &*tool.name).collect()
    }

    #[test]
    fn the_fleet_tools_are_listed_only_with_a_fleet() {
        let local = catalogue(false);
        assert_eq!(
            names(&local),
            [
                LIST_SESSIONS,
                GET_SESSION,
                GET_LIVENESS,
                GET_CARD,
                FIND_PEERS,
                STOP_SESSION,
                SIGNAL_SESSION,
                PRUNE
            ]
        );
        let fleet = catalogue(true);
        assert_eq!(names(&fleet)[8..], [FLEET_SESSIONS, FLEET_HOSTS]);
        let fleet_sessions = &fleet[8];
        assert_eq!(
            fleet_sessions.input_schema["properties"]["host"]["type"],
            "array"
        );
        assert!(
            fleet_sessions.input_schema["properties"]
                .get("include")
                .is_none()
        );
        assert!(fleet_sessions.annotations.as_ref().unwrap().read_only_hint == Some(true));
    }

    #[test]
    fn every_schema_refuses_members_it_does_not_list() {
        for tool in catalogue(true) {
            assert_eq!(
                tool.input_schema["additionalProperties"], false,
                "{}",
                tool.name
            );
            let output = tool.output_schema.as_ref().unwrap();
            assert_eq!(output["type"], "object", "{}", tool.name);
        }
    }
}
