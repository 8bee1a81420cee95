//! The fleet endpoints' bodies as a client reads them (`GET /fleet/sessions`,
//! `GET /fleet/hosts`, each `/fleet/events` event's data), and the filters of
//! `GET /fleet/sessions` ([`FleetQuery`], read by the server too).
//!
//! A host's entry, its load and a door's scope are owned by the server too (etcd's values
//! decode into them): one type each, here. The sessions' bodies the server writes from its
//! cache of etcd, borrowing what it holds (`http::fleet::wire`), so it cannot deserialize into
//! them; those here are their owned twins, under the same names. Invariant: each twin's schema
//! is the one the server's OpenAPI document gives under its name, member for member (a test
//! compares them, descriptions and examples aside), so a client's reading cannot drift.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{SessionState, SessionView};
use crate::running::Skill;

/// The fleet's sessions (`GET /fleet/sessions`), and a `/fleet/events` snapshot.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct FleetSessions {
    /// The etcd revision this answer describes.
    pub revision: i64,
    /// The answering registry's own host id: act (stop, signal) on its sessions only.
    pub host_id: String,
    /// The hosts in the fleet (those the `host` filter names); on a page, its sessions' hosts.
    pub hosts: Vec<HostEntry>,
    /// With `limit`: `Some(Some(cursor))` of the next page, `Some(None)` on the last; `None`
    /// without `limit`.
    #[serde(default, deserialize_with = "super::present")]
    #[schema(value_type = Option<String>, nullable)]
    pub next_cursor: Option<Option<String>>,
    /// The sessions that match, newest first; on a page, by host then session id.
    pub sessions: Vec<FleetSessionView>,
}

/// The fleet's hosts (`GET /fleet/hosts`).
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct FleetHosts {
    /// The etcd revision this answer describes.
    pub revision: i64,
    /// The answering registry's own host id.
    pub host_id: String,
    /// Every host in the fleet, by id.
    pub hosts: Vec<HostEntry>,
}

/// One session of the fleet: the session `GET /sessions` serves on its host, plus whose it is
/// and what it offers.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct FleetSessionView {
    /// The host whose registry verified it.
    pub host_id: String,
    /// When its verdict last changed, as its host saw it (RFC 3339, UTC).
    pub changed_at: String,
    /// From where its door can be reached; `None`: it has no door.
    pub door_scope: Option<DoorScope>,
    /// The skills its verified card lists (empty unless live).
    pub skills: Vec<Skill>,
    /// How many of the card's last skills its host left out to fit the entry.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub skills_omitted: Option<usize>,
    /// The session as its host serves it.
    #[serde(flatten)]
    pub session: SessionView,
}

/// `<prefix>/hosts/<host_id>`: one registry process taking part in the fleet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct HostEntry {
    /// The host's id (`--host-id`).
    pub host_id: String,
    /// The registry's version.
    pub version: String,
    /// When this registry process joined the fleet (RFC 3339, UTC).
    pub started_at: String,
    /// Where the registry serves its own API, when it said (`--advertise-url`).
    pub registry_url: Option<String>,
    /// How loaded the host is, read again every 30 s; absent when it could not be read, or
    /// from a registry that predates it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<HostLoad>,
}

/// How loaded a host is, as its registry last read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"cpus": 8, "load_1m": 1.25, "load_5m": 0.9, "load_15m": 0.7,
    "memory_total_bytes": 16_777_216_000u64, "memory_available_bytes": 9_663_676_416u64,
    "measured_at": "2026-12-02T18:00:00Z"}))]
pub struct HostLoad {
    /// Logical CPUs the kernel reports on the host.
    pub cpus: u32,
    /// Runnable and uninterruptible tasks, averaged over 1 minute (`/proc/loadavg`).
    pub load_1m: f64,
    /// The same over 5 minutes.
    pub load_5m: f64,
    /// The same over 15 minutes.
    pub load_15m: f64,
    /// Physical memory, in bytes.
    pub memory_total_bytes: u64,
    /// Memory available to new work without swapping (the kernel's `MemAvailable`), in bytes.
    pub memory_available_bytes: u64,
    /// When it was read (RFC 3339, UTC, whole seconds).
    pub measured_at: String,
}

/// From where a session's door can be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DoorScope {
    /// The door listens on loopback: only processes on its own host can reach it.
    Host,
    /// The door listens on another address: other hosts may reach it.
    Network,
}

/// Data of a fleet `session.added` event.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct FleetSessionAdded {
    /// The session.
    pub session_id: String,
    /// Its host.
    pub host_id: String,
    /// The session as its host published it.
    pub session: FleetSessionView,
}

/// Data of a fleet `session.changed` event.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct FleetSessionChanged {
    /// The session.
    pub session_id: String,
    /// Its host.
    pub host_id: String,
    /// The state before.
    pub old_state: SessionState,
    /// The state now.
    pub new_state: SessionState,
    /// Why it is not live now, when it is not.
    pub reason: Option<String>,
    /// The session as it is now.
    pub session: FleetSessionView,
}

/// Data of a fleet `session.removed` event: its host removed it, or left the fleet.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct FleetSessionRemoved {
    /// The session.
    pub session_id: String,
    /// Its host.
    pub host_id: String,
}

/// Data of a `host.joined` or `host.changed` event.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct HostJoined {
    /// The host.
    pub host_id: String,
    /// Its entry.
    pub host: HostEntry,
}

/// Data of a `host.left` event (its sessions' `session.removed` came first).
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct HostLeft {
    /// The host.
    pub host_id: String,
}

/// Filters of `GET /fleet/sessions`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FleetQuery {
    /// Comma-separated states to keep: `live`, `unreachable`, `gone`.
    #[param(
        example = "live,unreachable",
        pattern = "^(live|unreachable|gone)(,(live|unreachable|gone))*$"
    )]
    pub status: Option<String>,
    /// Comma-separated host ids to keep (sessions and hosts).
    #[param(
        example = "web01,web02",
        pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}(,[A-Za-z0-9][A-Za-z0-9._-]{0,127})*$"
    )]
    pub host: Option<String>,
    /// Comma-separated capsule names to keep (each session's `capsule_name`).
    #[param(example = "researcher,writer", pattern = "^[^,]+(,[^,]+)*$")]
    pub capsule: Option<String>,
    /// Comma-separated skills: keep sessions offering one of them, as a skill id or tag of
    /// their verified card.
    #[param(example = "summarize,nlp", pattern = "^[^,]+(,[^,]+)*$")]
    pub skill: Option<String>,
    /// Answer one page of at most this many sessions, by host then session id, with
    /// `next_cursor`.
    #[param(minimum = 1, maximum = 10000, example = 1000)]
    pub limit: Option<u32>,
    /// The `next_cursor` of the page before (with `limit`): the page after it. A cursor whose
    /// walk began at a revision etcd has since compacted is a 410 `cursor-expired`.
    pub cursor: Option<String>,
}

#[cfg(all(test, feature = "server"))]
mod tests {
    use serde_json::{Map, Value};
    use utoipa::ToSchema;
    use utoipa::openapi::RefOr;
    use utoipa::openapi::schema::Schema;

    use super::*;

    /// A schema without what only documents it (descriptions, examples): the members, their
    /// types, formats, bounds, which are required and which may be `null`.
    fn shape(schema: &Value) -> Value {
        match schema {
            Value::Object(members) => {
                let kept = members
                    .iter()
                    .filter(|(key, _)| !matches!(key.as_str(), "description" | "example"))
                    .map(|(key, value)| {
                        let value = match (key.as_str(), value) {
                            // A map of member names: each name stays, its schema is shaped.
                            ("properties", Value::Object(properties)) => Value::Object(
                                (properties.iter())
                                    .map(|(name, s)| (name.clone(), shape(s)))
                                    .collect::<Map<_, _>>(),
                            ),
                            _ => shape(value),
                        };
                        (key.clone(), value)
                    });
                Value::Object(kept.collect())
            }
            Value::Array(items) => Value::Array(items.iter().map(shape).collect()),
            other => other.clone(),
        }
    }

    fn entry<T: ToSchema>() -> (String, RefOr<Schema>) {
        (T::name().into_owned(), T::schema())
    }

    /// Every client type's schema is the one the server documents under its name.
    #[test]
    fn each_type_reads_the_schema_the_server_documents() {
        let document = serde_json::to_value(crate::http::openapi()).expect("the document");
        let served = &document["components"]["schemas"];
        let ours = [
            entry::<FleetSessions>(),
            entry::<FleetHosts>(),
            entry::<FleetSessionView>(),
            entry::<FleetSessionAdded>(),
            entry::<FleetSessionChanged>(),
            entry::<FleetSessionRemoved>(),
            entry::<HostJoined>(),
            entry::<HostLeft>(),
        ];
        for (name, schema) in ours {
            let ours = serde_json::to_value(schema).expect("a schema");
            assert!(
                served.get(&name).is_some(),
                "the server documents no {name}"
            );
            assert_eq!(shape(&ours), shape(&served[&name]), "{name}");
        }
    }
}
