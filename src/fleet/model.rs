//! The values fleet keys hold, as etcd stores them and the fleet endpoints serve them.
//!
//! Invariant: these are the only shapes written under a fleet prefix, and every field is public
//! by construction: a session entry carries the session view `GET /sessions` serves (built by
//! the caller from the public view only), never a record's `door_token` or any credential.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::running::Skill;

/// `<prefix>/hosts/<host_id>`: one registry process taking part in the fleet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HostEntry {
    /// The host's id (`--host-id`).
    pub host_id: String,
    /// The registry's version.
    pub version: String,
    /// When this registry process joined the fleet (RFC 3339, UTC).
    pub started_at: String,
    /// Where the registry serves its own API, when it said (`--advertise-url`).
    pub registry_url: Option<String>,
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

impl DoorScope {
    /// The scope of a door at `url` (`host:port`, as records write it).
    pub fn of(url: &str) -> Self {
        let host = match url.rsplit_once(':') {
            Some((host, _port)) => host,
            None => url,
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let loopback = host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if loopback { Self::Host } else { Self::Network }
    }
}

/// `<prefix>/sessions/<host_id>/<session_id>`: one session as its host verified it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionEntry {
    /// The host whose registry verified it.
    pub host_id: String,
    /// When its verdict last changed, as its host saw it (RFC 3339, UTC).
    pub changed_at: String,
    /// From where its door can be reached; `null` for a session without a door.
    pub door_scope: Option<DoorScope>,
    /// The skills its verified card lists (ids and tags only; empty unless live).
    pub skills: Vec<Skill>,
    /// The session object `GET /sessions` serves for it, field for field.
    #[serde(flatten)]
    pub session: Map<String, Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_doors_are_reachable_from_their_host_only() {
        for url in [
            "127.0.0.1:8080",
            "127.9.9.9:1",
            "[::1]:80",
            "localhost:3000",
            "LOCALHOST:1",
        ] {
            assert_eq!(DoorScope::of(url), DoorScope::Host, "{url}");
        }
        for url in [
            "10.0.0.5:8080",
            "[2001:db8::1]:80",
            "0.0.0.0:80",
            "box.lan:9000",
        ] {
            assert_eq!(DoorScope::of(url), DoorScope::Network, "{url}");
        }
    }

    #[test]
    fn a_session_entry_round_trips_with_the_session_fields_at_top_level() {
        let text = r#"{"host_id":"a","changed_at":"2026-12-01T00:00:00Z","door_scope":"host",
            "skills":[{"id":"plan","tags":["x"]}],"session_id":"ses_1","pid":7}"#;
        let entry: SessionEntry = serde_json::from_str(text).expect("parses");
        assert_eq!(entry.session["session_id"], "ses_1");
        assert_eq!(entry.door_scope, Some(DoorScope::Host));
        let again: Value = serde_json::to_value(&entry).expect("encodes");
        assert_eq!(again, serde_json::from_str::<Value>(text).expect("parses"));
    }
}
