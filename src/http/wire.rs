//! The sessions API's wire types: every JSON body, query and path parameter a client sees,
//! each documented in the OpenAPI spec by its own type.
//!
//! Invariant: the session JSON is built field by field from the record ([`SessionView::of`]);
//! it has no place for `door_token` or `credentials`, so they cannot leak through it.

use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize, Serializer};
use utoipa::{IntoParams, ToSchema};

use super::error::Problem;
use super::include::INCLUDE_PATTERN;
use crate::registry::{Reading, Resources};
use crate::running::{DoorStop, Liveness, ProcessState, RedactedCard, RunningRecord};

const EXAMPLE_ID: &str = "ses_0193a4c2e1f07a3b9c5d2e4f6a8b0c1d";

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
    /// Only in a listing asked for with `include=card`: the agent card the session's door
    /// served in the probe that verified it, secrets redacted as `GET /sessions/{id}/card`
    /// answers it; `null` unless the session is live and has a door.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "card_member"
    )]
    #[schema(value_type = Option<Object>, required = false)]
    pub card: Option<Option<Arc<RedactedCard>>>,
    /// What the process costs, with `include=resources` only (the member is absent without
    /// it); `null` when layers 1–2 do not confirm the process.
    #[serde(skip_serializing_if = "Option::is_none")]
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

/// What a session's process costs: CPU, memory, threads.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
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

/// Every session, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionList {
    /// The sessions that match the filter, newest first.
    pub sessions: Vec<SessionView>,
    /// How many `*.json` entries in the running directory are not valid records.
    #[schema(example = 0)]
    pub unreadable: usize,
}

/// The optional members of every session in a list body (`include=`), each indexed like the
/// listing's readings; `None` leaves the member out of every session.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListMembers<'a> {
    /// `card`: each reading's card, `None` where there is none to show.
    pub cards: Option<&'a [Option<Arc<RedactedCard>>]>,
    /// `resources`: each reading's figures, `None` where the process is not confirmed.
    pub resources: Option<&'a [Option<Resources>]>,
}

impl SessionList {
    /// The JSON a [`SessionList`] of `readings` (those `keep` admits) encodes to, written one
    /// session at a time: each record's public fields are encoded once and kept with the
    /// record (shared records are unchanged while their file is), and only the verification
    /// is encoded afresh. A listing of 10,000 neither copies its records nor holds their views
    /// beside its body.
    ///
    /// Each session carries the optional members `members` holds (`include=`), and no others.
    pub fn encode(
        readings: &[Reading],
        members: ListMembers<'_>,
        keep: impl Fn(&Reading) -> bool,
        unreadable: usize,
    ) -> serde_json::Result<Vec<u8>> {
        // About what a session's view takes, so the body is seldom grown and copied.
        const VIEW_BYTES: usize = 400;
        let mut body = Vec::with_capacity(64 + readings.len() * VIEW_BYTES);
        // serde_json's compact form of `SessionList`, member by member (a test holds the
        // bytes equal).
        body.extend_from_slice(b"{\"sessions\":[");
        let kept = (readings.iter().enumerate()).filter(|(_, reading)| keep(reading));
        for (n, (at, reading)) in kept.enumerate() {
            if n > 0 {
                body.push(b',');
            }
            body.extend_from_slice(reading.record.encoded_once(encode_record_fields)?);
            serde_json::to_writer(&mut body, &LivenessViewOf::of(reading))?;
            if let Some(cards) = members.cards {
                body.extend_from_slice(b",\"card\":");
                let card = cards.get(at).and_then(Option::as_deref);
                serde_json::to_writer(&mut body, &card.map(RedactedCard::json))?;
            }
            if let Some(resources) = members.resources {
                let figure = resources.get(at).copied().flatten();
                body.extend_from_slice(b",\"resources\":");
                serde_json::to_writer(&mut body, &figure.as_ref().map(ResourcesView::from))?;
            }
            body.push(b'}');
        }
        body.extend_from_slice(b"],\"unreadable\":");
        serde_json::to_writer(&mut body, &unreadable)?;
        body.push(b'}');
        Ok(body)
    }
}

/// A session view up to its verification: `{` and every member before `liveness`, then
/// `"liveness":`, as serde_json writes [`SessionView`].
fn encode_record_fields(record: &RunningRecord) -> serde_json::Result<Vec<u8>> {
    let mut fields = serde_json::to_vec(&RecordFieldsOf::of(record))?;
    // `session_id` is always there, so the object is never empty: its `}` gives way to the
    // next member.
    fields.pop();
    fields.extend_from_slice(b",\"liveness\":");
    Ok(fields)
}

/// The members of [`SessionView`] before `liveness`, borrowed from the record: the same
/// members, in the same order, under the same conditions.
#[derive(Serialize)]
struct RecordFieldsOf<'a> {
    session_id: &'a str,
    url: Option<&'a str>,
    pid: u32,
    process_start: &'a str,
    capsule_name: &'a str,
    capsule_version: &'a str,
    workdir: Cow<'a, str>,
    outlives_launcher: bool,
    started_at: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    formation_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    formation_member: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    spawned_by: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    records_dir: Option<Cow<'a, str>>,
}

impl<'a> RecordFieldsOf<'a> {
    fn of(r: &'a RunningRecord) -> Self {
        Self {
            session_id: &r.session_id,
            url: r.url.as_deref(),
            pid: r.pid,
            process_start: &r.process_start,
            capsule_name: &r.capsule_name,
            capsule_version: &r.capsule_version,
            workdir: r.workdir.to_string_lossy(),
            outlives_launcher: r.outlives_launcher,
            started_at: &r.started_at,
            formation_id: r.formation_id.as_deref(),
            formation_member: r.formation_member.as_deref(),
            spawned_by: r.spawned_by.as_deref(),
            records_dir: r.records_dir.as_deref().map(Path::to_string_lossy),
        }
    }
}

/// [`LivenessView`] borrowing its reading's reason, made by the same rules.
#[derive(Serialize)]
struct LivenessViewOf<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<SessionState>,
    process: ProcessStatus,
    reason: Option<&'a str>,
}

impl<'a> LivenessViewOf<'a> {
    fn of(reading: &'a Reading) -> Self {
        Self {
            state: reading.liveness.as_ref().map(SessionState::from),
            process: ProcessStatus::from(&reading.process),
            reason: reason_of(reading),
        }
    }
}

/// Why a reading is not live, if it is not: the verdict's reason, else what layers 1–2 said.
fn reason_of(reading: &Reading) -> Option<&str> {
    reading
        .liveness
        .as_ref()
        .and_then(Liveness::reason)
        .or(match &reading.process {
            ProcessState::Unverified { reason } | ProcessState::Gone { reason } => Some(reason),
            ProcessState::Alive => None,
        })
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

/// The pattern of an `include` that takes `resources` alone (one session, `/events`).
const RESOURCES_ONLY_PATTERN: &str = "^resources(,resources)*$";

/// The schema of the `include` parameter of `GET /sessions/{id}`: `resources` only (one
/// session's card is `GET /sessions/{id}/card`).
fn session_include_schema() -> utoipa::openapi::Object {
    include_parameter(
        RESOURCES_ONLY_PATTERN,
        "`resources` adds what the session's process costs: CPU, memory, threads (`null` \
         for a process that is not confirmed). Its card is `GET /sessions/{id}/card`.",
        "resources",
    )
}

/// The schema of the `include` parameter of `GET /events`: `resources` only.
fn events_include_schema() -> utoipa::openapi::Object {
    include_parameter(
        RESOURCES_ONLY_PATTERN,
        "`resources` adds a `resources` event after each periodic pass: what every \
         confirmed session's process costs.",
        "resources",
    )
}

/// An `include` parameter's schema: a string of `pattern`. utoipa takes only a literal
/// `pattern` and drops the field's doc beside `schema_with`, so each caller gives its doc here.
fn include_parameter(pattern: &str, description: &str, example: &str) -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .pattern(Some(pattern))
        .description(Some(description))
        .examples([example])
        .build()
}

/// Filters and options of `GET /sessions`.
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
    /// Members to add to each session, as [`include_schema`] documents them.
    #[param(schema_with = include_schema)]
    pub include: Option<String>,
    /// Comma-separated capsule names to keep (the record's `capsule_name`).
    #[param(example = "researcher,writer", pattern = "^[^,]+(,[^,]+)*$")]
    pub capsule: Option<String>,
    /// Comma-separated skills: keep live sessions whose verified card lists a skill with one
    /// of them as its `id` or among its `tags`. Needs the probe.
    #[param(example = "summarize,nlp", pattern = "^[^,]+(,[^,]+)*$")]
    pub skill: Option<String>,
}

/// The schema of the `include` parameter of `GET /sessions`, pattern [`INCLUDE_PATTERN`].
fn include_schema() -> utoipa::openapi::Object {
    include_parameter(
        INCLUDE_PATTERN,
        "Comma-separated members to add to each session: `card` (the agent card its door \
         served in the probe that verified it, `null` for a session that is not live; no \
         second request to any door; needs the probe) and `resources` (what its process \
         costs: CPU, memory, threads; `null` for a process that is not confirmed).",
        "card",
    )
}

/// Options of `GET /sessions/{id}`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ProbeQuery {
    /// `false` runs layers 1–2 only (no door probe). Default `true`.
    pub probe: Option<bool>,
    /// Comma-separated members to add to the session: `resources` (what its process costs).
    #[param(schema_with = session_include_schema)]
    pub include: Option<String>,
}

/// Options of `GET /events`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// `resources` adds a `resources` event after each periodic pass: what every confirmed
    /// session's process costs.
    #[param(schema_with = events_include_schema)]
    pub include: Option<String>,
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
    /// Missing, or not a string: 422 `unknown-signal`, as for any other name.
    #[serde(default, deserialize_with = "text_or_none")]
    #[schema(value_type = SignalName, required = true)]
    pub signal: Option<String>,
}

fn text_or_none<'de, D: serde::Deserializer<'de>>(value: D) -> Result<Option<String>, D::Error> {
    match serde_json::Value::deserialize(value)? {
        serde_json::Value::String(text) => Ok(Some(text)),
        _ => Ok(None),
    }
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
    pub outcome: Outcome,
}

/// What a signal or stop did, as the `outcome` member says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The signal was delivered.
    Sent,
    /// The stop ended the process.
    Stopped,
    /// The process was gone before anything was sent.
    AlreadyGone,
    /// Nothing more was sent: the process could not be confirmed, or the kernel refused.
    Refused,
}

/// Options of `POST /sessions/{id}/stop`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StopQuery {
    /// Seconds to wait after SIGTERM before SIGKILL (default 10, at most 300; `0` = SIGKILL at
    /// once, without asking the door).
    #[param(example = 10, maximum = 300)]
    pub timeout: Option<u64>,
    /// `false` stops by signals alone, without asking the capsule's door
    /// (`murmur.StopSession`) first. Default `true`.
    #[param(example = false)]
    pub door: Option<bool>,
}

/// What asking the door to stop came to, as the `door.outcome` member says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DoorOutcome {
    /// The door answered for this session: `canceled` and `residue` are its answer.
    Answered,
    /// The door answered with an error (method not found included): signals alone stopped it.
    Refused,
    /// No usable answer in time: signals alone stopped it.
    NoAnswer,
    /// The door answered for another session, or none: nothing it said is kept.
    Mismatch,
    /// Not asked: a fresh probe did not show the door answering as this session.
    NotLive,
    /// Not asked: the session has no door.
    NoDoor,
    /// Not asked: `door=false` or `timeout=0`.
    Skipped,
}

/// What the door said to `murmur.StopSession`, asked before any signal.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(example = json!({"outcome": "answered", "canceled": ["task_01"],
    "residue": ["shell: npm run dev (pid 41240)"], "reason": null}))]
pub struct DoorStopView {
    /// How the ask went.
    pub outcome: DoorOutcome,
    /// The tasks the capsule canceled (task ids, as the door named them); empty unless
    /// `answered`.
    pub canceled: Vec<serde_json::Value>,
    /// What the capsule leaves running (detached commands, delegated children), as the door
    /// wrote each item; empty unless `answered`. The signals that follow end the capsule's own
    /// process only.
    pub residue: Vec<serde_json::Value>,
    /// Why the door was not asked, or why its answer was not taken; `null` when `answered`,
    /// `no_door` or `skipped`.
    #[schema(
        example = "the door does not serve murmur.StopSession (JSON-RPC error -32601, method not found)"
    )]
    pub reason: Option<String>,
}

impl DoorStopView {
    /// The view of what a stop's ask came to.
    pub fn of(stop: &DoorStop) -> Self {
        let (outcome, reason) = match stop {
            DoorStop::Answered { canceled, residue } => {
                return Self {
                    outcome: DoorOutcome::Answered,
                    canceled: canceled.clone(),
                    residue: residue.clone(),
                    reason: None,
                };
            }
            DoorStop::Refused { reason } => (DoorOutcome::Refused, Some(reason)),
            DoorStop::NoAnswer { reason } => (DoorOutcome::NoAnswer, Some(reason)),
            DoorStop::Mismatch { reason } => (DoorOutcome::Mismatch, Some(reason)),
            DoorStop::NotLive { reason } => (DoorOutcome::NotLive, Some(reason)),
            DoorStop::NoDoor => (DoorOutcome::NoDoor, None),
            DoorStop::Skipped => (DoorOutcome::Skipped, None),
        };
        Self {
            outcome,
            canceled: Vec::new(),
            residue: Vec::new(),
            reason: reason.cloned(),
        }
    }
}

/// A stop that ended.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"session_id": EXAMPLE_ID, "signal_sent": "SIGTERM",
    "outcome": "stopped", "waited_ms": 132, "door": {"outcome": "answered",
    "canceled": ["task_01"], "residue": [], "reason": null}}))]
pub struct StopResponse {
    /// The session stopped.
    pub session_id: String,
    /// The last signal sent (`SIGTERM` if it sufficed, else `SIGKILL`); `null` if the process
    /// was already gone.
    pub signal_sent: Option<String>,
    /// `stopped` or `already_gone`.
    pub outcome: Outcome,
    /// How long the stop waited for the process to go, in milliseconds (after the door).
    pub waited_ms: u64,
    /// What the door said when asked to stop, before any signal.
    pub door: DoorStopView,
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
    pub outcome: Outcome,
    /// Why, in the registry's words.
    #[schema(
        example = "the kernel refused to signal pid 41234: Operation not permitted (os error 1)"
    )]
    pub reason: String,
    /// For a stop: the last signal that was delivered before it gave up (`null` when none was).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "SIGTERM")]
    pub signal_sent: Option<Option<String>>,
    /// For a stop: what the door said when asked to stop, before any signal.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub door: Option<DoorStopView>,
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
pub struct AgentCard(pub(crate) serde_json::Value);

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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn reading(n: u32, liveness: Option<Liveness>) -> Reading {
        let record: RunningRecord = serde_json::from_value(serde_json::json!({
            "session_id": format!("ses_{n:032x}"), "url": "127.0.0.1:1", "pid": n,
            "process_start": "7", "capsule_name": "c", "capsule_version": "1",
            "workdir": "/w", "outlives_launcher": false, "started_at": "2026-11-30T00:00:00Z",
            "formation_id": "frm_1", "records_dir": "/r"
        }))
        .expect("a record");
        Reading {
            record: record.into(),
            process: ProcessState::Alive,
            liveness,
            skills: Default::default(),
        }
    }

    #[test]
    fn encoding_one_view_at_a_time_gives_the_bytes_of_the_list() {
        let readings = vec![
            reading(1, Some(Liveness::Live)),
            reading(2, None),
            reading(3, Some(Liveness::Live)),
        ];
        let live = |reading: &Reading| reading.liveness == Some(Liveness::Live);
        for keep in [&(|_: &Reading| true) as &dyn Fn(&Reading) -> bool, &live] {
            let whole = SessionList {
                sessions: readings
                    .iter()
                    .filter(|r| keep(r))
                    .map(SessionView::of)
                    .collect(),
                unreadable: 4,
            };
            let streamed =
                SessionList::encode(&readings, ListMembers::default(), keep, 4).expect("encodes");
            assert_eq!(
                String::from_utf8(streamed).expect("utf-8"),
                serde_json::to_string(&whole).expect("encodes")
            );
        }
        let none = SessionList::encode(&[], ListMembers::default(), |_| true, 0).expect("encodes");
        assert_eq!(none, br#"{"sessions":[],"unreadable":0}"#);
    }

    #[test]
    fn a_listing_with_cards_gives_the_bytes_of_its_views() {
        let readings = vec![
            reading(1, Some(Liveness::Live)),
            reading(2, None),
            reading(3, Some(Liveness::Live)),
        ];
        let card = serde_json::json!({"name": "c", "skills": [{"id": "s", "tags": ["t"]}]});
        let card = Arc::new(RedactedCard::redacted(card, &readings[0].record));
        let cards = vec![None, Some(card), None];
        let whole = SessionList {
            sessions: (readings.iter().zip(&cards))
                .skip(1)
                .map(|(reading, card)| SessionView {
                    card: Some(card.clone()),
                    ..SessionView::of(reading)
                })
                .collect(),
            unreadable: 0,
        };
        let not_first = |r: &Reading| !Arc::ptr_eq(&r.record, &readings[0].record);
        let with_cards = ListMembers {
            cards: Some(&cards),
            resources: None,
        };
        let written = SessionList::encode(&readings, with_cards, not_first, 0).expect("encodes");
        assert_eq!(
            String::from_utf8(written).expect("utf-8"),
            serde_json::to_string(&whole).expect("encodes")
        );
        let all = SessionList::encode(&readings, with_cards, |_| true, 0).expect("encodes");
        let all: serde_json::Value = serde_json::from_slice(&all).expect("JSON");
        assert_eq!(all["sessions"][0]["card"], serde_json::Value::Null);
        assert_eq!(all["sessions"][1]["card"]["skills"][0]["id"], "s");
    }

    /// Every member that may be absent, every verdict, strings that need escaping, and each
    /// record listed twice (its fields then come from what the first listing kept).
    #[test]
    fn a_listing_written_from_kept_record_fields_gives_the_bytes_of_the_list() {
        let odd: RunningRecord = serde_json::from_value(serde_json::json!({
            "session_id": "ses_odd", "url": null, "pid": 9, "process_start": "",
            "capsule_name": "q\"uote\\back\u{1}ctl", "capsule_version": "\u{e9}\u{1f600}",
            "workdir": "/w/\u{2028}", "outlives_launcher": true, "started_at": "x",
            "formation_member": "m", "spawned_by": "ses_0", "formation_id": "frm_2"
        }))
        .expect("a record");
        let odd = Arc::new(odd);
        let with = |process: ProcessState, liveness: Option<Liveness>| Reading {
            record: Arc::clone(&odd),
            process,
            liveness,
            skills: Default::default(),
        };
        let gone = "no process holds pid 9 \"quoted\"".to_owned();
        let readings = vec![
            with(
                ProcessState::Gone {
                    reason: gone.clone(),
                },
                Some(Liveness::Gone { reason: gone }),
            ),
            with(
                ProcessState::Unverified {
                    reason: "cannot read /proc/9/stat".to_owned(),
                },
                None,
            ),
            with(
                ProcessState::Alive,
                Some(Liveness::Unreachable {
                    reason: "door at 127.0.0.1:1 refused".to_owned(),
                }),
            ),
            reading(4, Some(Liveness::Live)),
        ];
        let whole = SessionList {
            sessions: readings.iter().map(SessionView::of).collect(),
            unreadable: 0,
        };
        for _ in 0..2 {
            let written = SessionList::encode(&readings, ListMembers::default(), |_| true, 0)
                .expect("encodes");
            assert_eq!(
                String::from_utf8(written).expect("utf-8"),
                serde_json::to_string(&whole).expect("encodes")
            );
        }
    }

    /// The `include` patterns the document gives are the words `include` reads there.
    #[test]
    fn include_parameters_carry_the_include_pattern() {
        let document = serde_json::to_value(crate::http::openapi()).expect("the document");
        let patterns = [
            ("/sessions", crate::http::include::INCLUDE_PATTERN),
            ("/sessions/{id}", RESOURCES_ONLY_PATTERN),
            ("/events", RESOURCES_ONLY_PATTERN),
        ];
        for (path, pattern) in patterns {
            let parameters = document["paths"][path]["get"]["parameters"]
                .as_array()
                .expect("parameters");
            let include = parameters
                .iter()
                .find(|p| p["name"] == "include")
                .expect("an include parameter");
            assert_eq!(include["schema"]["pattern"], pattern, "{path}");
        }
    }
}
