//! One session as a reader's cache holds it: its checked JSON, and the few fields the fleet
//! endpoints sort, filter and page by, taken once when it was read.
//!
//! Invariant: `json` is the serde encoding of a [`SessionEntry`] the cache accepted (secrets
//! dropped), and every other field is what that entry says. Nothing else of the entry is held,
//! so a cached session costs its bytes and a few short strings, not a tree of values (a reader
//! of 100,000 sessions at rest: 148 MiB resident, against 493 with the tree); whoever needs the
//! whole entry parses it again ([`CachedSession::entry`]).

use serde_json::value::RawValue;

use crate::running::Skill;

use super::super::{HostId, SessionEntry};
use super::held::HeldEntry;

/// A session as the cache holds it. Two are equal when their encodings are (the encoding is
/// canonical: serde writes a map's members in key order, and every other field derives from it).
#[derive(Debug, Clone)]
pub struct CachedSession {
    host_id: HostId,
    session_id: Box<str>,
    started_at: Box<str>,
    capsule_name: Option<Box<str>>,
    state: Option<Box<str>>,
    reason: Option<Box<str>>,
    skills: Box<[Skill]>,
    json: Box<RawValue>,
}

impl PartialEq for CachedSession {
    fn eq(&self, other: &Self) -> bool {
        self.json.get() == other.json.get()
    }
}

impl Eq for CachedSession {}

impl CachedSession {
    /// `held`, checked, of host `host_id` and session `session_id`, as `json` encodes it.
    pub(super) fn new(
        host_id: HostId,
        session_id: String,
        held: HeldEntry,
        json: Box<RawValue>,
    ) -> Self {
        let text = |value: Option<&serde_json::Value>| {
            value.and_then(|v| v.as_str()).map(Box::<str>::from)
        };
        let members = &held.members;
        let liveness = |field: &str| (members.get("liveness")).and_then(|l| l.get(field));
        Self {
            started_at: text(members.get("started_at")).unwrap_or_default(),
            capsule_name: text(members.get("capsule_name")),
            state: text(liveness("state")),
            reason: text(liveness("reason")),
            host_id,
            session_id: session_id.into(),
            skills: held.entry.skills.into(),
            json,
        }
    }

    /// Its host.
    pub fn host_id(&self) -> &HostId {
        &self.host_id
    }

    /// Its session id.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// When it started, as its host published it (`""` if it did not say).
    pub fn started_at(&self) -> &str {
        &self.started_at
    }

    /// Its capsule's name, if its host published one.
    pub fn capsule_name(&self) -> Option<&str> {
        self.capsule_name.as_deref()
    }

    /// Its `liveness.state` word as its host published it, if it did.
    pub fn state(&self) -> Option<&str> {
        self.state.as_deref()
    }

    /// Its `liveness.reason` as its host published it (why it is not live), if any.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// The skills its host published for it.
    pub fn skills(&self) -> &[Skill] {
        &self.skills
    }

    /// Its JSON: `serde_json::to_string` of its entry, byte for byte.
    pub fn json(&self) -> &RawValue {
        &self.json
    }

    /// The whole entry, parsed again from its JSON (which the cache made from a parsed entry,
    /// so it always parses; an error is reported, never assumed away).
    pub fn entry(&self) -> Result<SessionEntry, serde_json::Error> {
        serde_json::from_str(self.json.get())
    }
}
