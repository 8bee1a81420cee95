//! One session on the wire: its record's public fields and its verification, as every body
//! that shows a session carries them (`GET /sessions`, `/events`, `ps --json`).
//!
//! Invariant: the session JSON is built field by field from the record ([`SessionView::of`]);
//! it has no place for `door_token` or `credentials`, so they cannot leak through it.

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use utoipa::ToSchema;

use crate::registry::{Reading, Resources};
use crate::running::{Liveness, ProcessState, RedactedCard};

/// A session id as the documents' examples show one.
pub(super) const EXAMPLE_ID: &str = "ses_0193a4c2e1f07a3b9c5d2e4f6a8b0c1d";

/// What all three layers say, as a word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
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
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
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
    /// The verification of one reading.
    pub fn of(reading: &Reading) -> Self {
        let reason = reason_of(reading).map(str::to_owned);
        Self {
            state: reading.liveness.as_ref().map(SessionState::from),
            process: ProcessStatus::from(&reading.process),
            reason,
        }
    }
}

/// One running session: its record's fields (never its secrets) and its verification.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
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
    /// Only in a listing asked for with `include=card`: the agent card the session's door
    /// served in the probe that verified it, secrets redacted as `GET /sessions/{id}/card`
    /// answers it; `null` unless the session is live and has a door.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "card_member",
        deserialize_with = "card_read"
    )]
    #[schema(value_type = Option<Object>, required = false)]
    pub card: Option<Option<Arc<RedactedCard>>>,
    /// What the process costs, with `include=resources` only (the member is absent without
    /// it); `null` when layers 1–2 do not confirm the process.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::present"
    )]
    #[schema(value_type = Option<ResourcesView>)]
    pub resources: Option<Option<ResourcesView>>,
}

/// A present `card` member: the card's JSON, or `null`.
fn card_member<S: Serializer>(
    card: &Option<Option<Arc<RedactedCard>>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    card.as_ref()
        .and_then(|card| card.as_deref())
        .map(RedactedCard::json)
        .serialize(serializer)
}

/// A `card` member as a client reads it: present (the card, or `null`) or absent. The card
/// was redacted by the registry that served it.
fn card_read<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Option<Arc<RedactedCard>>>, D::Error> {
    let card = Option::<serde_json::Value>::deserialize(deserializer)?;
    Ok(Some(card.map(|card| Arc::new(RedactedCard::served(card)))))
}

/// What a session's process costs: CPU, memory, threads.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"cpu_percent": 12.5, "cpu_time_ms": 48210, "rss_bytes": 73_400_320,
    "threads": 9}))]
pub struct ResourcesView {
    /// Share of one CPU core used since the registry's previous sample of this process (by any
    /// client), in percent, one decimal; above 100 on several cores. A sample under 100 ms after
    /// the previous one repeats that one's figure (the kernel counts CPU in 10 ms ticks).
    /// `null` when the registry has no sample of it from the last 10 s (ask again, or read
    /// `/events?include=resources`).
    pub cpu_percent: Option<f64>,
    /// CPU time used since the process started (user and system), in milliseconds.
    pub cpu_time_ms: u64,
    /// Resident memory, in bytes.
    pub rss_bytes: u64,
    /// Threads in the process.
    pub threads: usize,
}

impl From<&Resources> for ResourcesView {
    fn from(r: &Resources) -> Self {
        Self {
            cpu_percent: r.cpu_percent,
            cpu_time_ms: r.cpu_time_ms,
            rss_bytes: r.rss_bytes,
            threads: r.threads,
        }
    }
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
            card: None,
            resources: None,
        }
    }

    /// This view with `resources` (for `include=resources`): `None` is a `null`.
    pub fn with_resources(mut self, resources: Option<&Resources>) -> Self {
        self.resources = Some(resources.map(ResourcesView::from));
        self
    }
}

/// The three layers for one session.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
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

/// Why a reading is not live, if it is not: the verdict's reason, else what layers 1–2 said.
pub(super) fn reason_of(reading: &Reading) -> Option<&str> {
    reading
        .liveness
        .as_ref()
        .and_then(Liveness::reason)
        .or(match &reading.process {
            ProcessState::Unverified { reason } | ProcessState::Gone { reason } => Some(reason),
            ProcessState::Alive => None,
        })
}
