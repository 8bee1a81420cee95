//! Layer 3: the door answers and names the record's session; and the verdict of all three layers.
//!
//! Invariants kept here:
//! - A door that is silent, slow, wrong or garbled makes a record `Unreachable`, never `Gone`:
//!   the process behind it passed layers 1 and 2 and may be mid-turn.
//! - The probe keeps to its deadlines (connect, then answer) and reads at most
//!   [`MAX_CARD_BYTES`], so no door can hold a verification hostage or exhaust memory; many
//!   records are verified concurrently, so one slow door delays no other.
//! - A door is probed only on loopback, over plain HTTP, without proxies or redirects: a
//!   record's `door_token` is sent to the address the record names and nowhere else, and only
//!   over a connection whose far end a process of the records' owner accepted (checked in
//!   `door_exchange`, for every probe: a door held by another user is `Unreachable`, sent
//!   nothing).
//! - Reasons never quote a secret, and quote a door's own words only briefly and sanitised.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use super::door_exchange::{DoorRequest, exchange};
use super::door_json::parse_door_json;
use super::skills::{Skill, skills_of};

use super::process::process_state;
use super::{RunningRecord, Secret};
use crate::process_identity::ProcessState;

/// How long a door may take to accept a connection (the spec's 2 s).
pub const CONNECT_DEADLINE: Duration = Duration::from_secs(2);
/// How long a connected door may take to answer (the spec's 5 s).
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(5);
/// Cards larger than this are not read to the end.
pub const MAX_CARD_BYTES: usize = 256 * 1024;
/// The A2A extension under which current murmur cards carry the session id.
pub const MURMUR_CAPSULE_EXTENSION: &str =
    "https://docs.murmur.nexus/reference/agent-card/#murmur-capsule-v1";
/// The most door probes in flight at once, to stay far below the open-files limit.
pub const MAX_CONCURRENT_PROBES: usize = 256;

/// What all three layers say about a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// The process is the writer and its door answers for this session (or it has no door).
    Live,
    /// The process passed layers 1–2 (or could not be verified) but the door did not confirm
    /// the session. The record is kept.
    Unreachable {
        /// What failed, for a person.
        reason: String,
    },
    /// Layers 1–2 found evidence the session is over; the record may be pruned.
    Gone {
        /// The evidence.
        reason: String,
    },
}

impl Liveness {
    /// The reason, for anything but `Live`.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::Live => None,
            Self::Unreachable { reason } | Self::Gone { reason } => Some(reason),
        }
    }
}

/// Both readings of one verification: layers 1–2 alone, and the verdict of all three.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// What layers 1 and 2 said.
    pub(crate) process: ProcessState,
    /// What all three layers say.
    pub(crate) liveness: Liveness,
}

/// What layers 1–2 decide alone: `gone`, and `live` for a record with no door.
///
/// `None` for an alive process with a door (only the probe can tell) and for an unverified
/// process (nothing can tell).
pub fn decided_by_process(record: &RunningRecord, process: &ProcessState) -> Option<Liveness> {
    match process {
        ProcessState::Gone { reason } => Some(Liveness::Gone {
            reason: reason.clone(),
        }),
        ProcessState::Alive if record.url.is_none() => Some(Liveness::Live),
        _ => None,
    }
}

/// The verdict without a probe where one would prove nothing, or `Err` handing the process
/// state back when only the probe can tell.
///
/// An unverified process is unreachable and never probed: whatever answers on its door, the
/// pid's holder is not confirmed as the writer.
pub(crate) fn settled_without_door(
    record: &RunningRecord,
    process: ProcessState,
) -> Result<Verdict, ProcessState> {
    let liveness = match (decided_by_process(record, &process), &process) {
        (Some(liveness), _) => liveness,
        (None, ProcessState::Unverified { reason }) => Liveness::Unreachable {
            reason: reason.clone(),
        },
        (None, _) => return Err(process),
    };
    Ok(Verdict { process, liveness })
}

/// Layer 3's prober: the deadlines it keeps and the probes it lets run at once.
///
/// Cheap to clone; clones share one limit on probes in flight, so concurrent requests to the
/// registry cannot together open more sockets than its limit ([`MAX_CONCURRENT_PROBES`]
/// unless built with [`DoorProbe::with_limits`]).
#[derive(Debug, Clone)]
pub struct DoorProbe {
    connect_deadline: Duration,
    answer_deadline: Duration,
    max_in_flight: usize,
    in_flight: Arc<Semaphore>,
    observer: Option<VisitObserver>,
    /// The uid a door's accepted socket must belong to: the records' owner, which is this
    /// process's effective uid (a record of any other owner is never read).
    owner: u32,
}

/// Told of every visit to a door: whether it confirmed the session, and how long the door took
/// (connecting to the card read, the wait for a probe slot excluded).
#[derive(Clone)]
pub(crate) struct VisitObserver(Arc<dyn Fn(bool, Duration) + Send + Sync>);

impl std::fmt::Debug for VisitObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VisitObserver")
    }
}

/// The door's address, split for connecting and for the `Host` header.
pub(crate) struct DoorAddress<'a> {
    /// The host as it is resolved (`localhost`, `127.0.0.1`, `::1`).
    host: &'a str,
    port: u16,
    /// `host:port` as the record wrote it (brackets around an IPv6 literal), for `Host`.
    pub(crate) authority: &'a str,
}

impl Default for DoorProbe {
    fn default() -> Self {
        Self::new()
    }
}

impl DoorProbe {
    /// A prober with the spec's deadlines: 2 s to connect, 5 s to answer.
    pub fn new() -> Self {
        Self::with_deadlines(CONNECT_DEADLINE, ANSWER_DEADLINE)
    }

    /// A prober with other deadlines (tests, or an operator's setting) and the spec's limit of
    /// [`MAX_CONCURRENT_PROBES`] probes in flight.
    ///
    /// `connect` bounds the TCP connection; `answer` bounds everything after it (request,
    /// response head and card).
    pub fn with_deadlines(connect: Duration, answer: Duration) -> Self {
        Self::with_limits(connect, answer, MAX_CONCURRENT_PROBES)
    }

    /// A prober with other deadlines and another limit on probes in flight.
    ///
    /// At most `max_in_flight` probes (clamped to at least 1) hold a socket at once, across
    /// every clone of this prober; the rest wait their turn, and waiting counts against no
    /// deadline. Each probe holds one socket, so keep the limit well below the open-files limit.
    pub fn with_limits(connect: Duration, answer: Duration, max_in_flight: usize) -> Self {
        let max_in_flight = max_in_flight.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            connect_deadline: connect,
            answer_deadline: answer,
            max_in_flight,
            in_flight: Arc::new(Semaphore::new(max_in_flight)),
            observer: None,
            owner: rustix::process::geteuid().as_raw(),
        }
    }

    /// This prober, telling `observer` of every visit to a door (see [`VisitObserver`]).
    pub(crate) fn observed_by(
        mut self,
        observer: impl Fn(bool, Duration) + Send + Sync + 'static,
    ) -> Self {
        self.observer = Some(VisitObserver(Arc::new(observer)));
        self
    }

    /// How many probes may hold a socket at once.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight
    }

    /// The uid whose process must hold the far end of a door connection before anything is
    /// written on it: the records' owner.
    pub(crate) fn door_owner(&self) -> u32 {
        self.owner
    }

    /// Probe the door of `record`: `Ok` when it names the record's session, else why not.
    ///
    /// A record with a `door_token` is asked for its extended card (JSON-RPC
    /// `GetExtendedAgentCard` with the token as bearer); any other for the public card at
    /// `/.well-known/agent-card.json`. Either card shape is read. Each probe is a fresh
    /// connection straight to the address the record names: no proxy, no redirect, no pool.
    pub async fn probe(&self, record: &RunningRecord) -> Result<(), String> {
        self.probe_unredacted(record)
            .await
            .map(drop)
            .map_err(|reason| redact_secrets(reason, record))
    }

    /// Probe like [`DoorProbe::probe`] and answer the card that named the session.
    ///
    /// For an authenticated door that is the extended card. Every string in it that contains
    /// one of the record's secrets has the secret replaced by `[redacted]` (a door may echo
    /// its token), so the card can be shown to anyone allowed to list sessions.
    pub async fn card(&self, record: &RunningRecord) -> Result<Value, String> {
        match self.verified_card(record).await {
            Ok((mut card, _)) => {
                redact_secrets_in(&mut card, record);
                Ok(card)
            }
            Err(reason) => Err(redact_secrets(reason, record)),
        }
    }

    /// [`DoorProbe::probe`] before secrets are taken out of the reason: for a caller that
    /// shares one probe among equal records and redacts each answer with its own record.
    ///
    /// `Ok` holds the verified card with `record`'s secrets already redacted, as
    /// [`DoorProbe::card`] answers it.
    pub(crate) async fn probe_unredacted(
        &self,
        record: &RunningRecord,
    ) -> Result<RedactedCard, String> {
        let (card, _) = self.verified_card(record).await?;
        Ok(RedactedCard::redacted(card, record))
    }

    /// Probe like [`DoorProbe::probe`]; `Ok` with the socket address that answered as the
    /// record's session, so that a caller may speak to that socket and no other.
    pub(crate) async fn confirmed_at(&self, record: &RunningRecord) -> Result<SocketAddr, String> {
        match self.verified_card(record).await {
            Ok((_, at)) => Ok(at),
            Err(reason) => Err(redact_secrets(reason, record)),
        }
    }

    /// The card the door answered, if it names the record's session, and the address that
    /// answered; else why not (secrets not yet redacted).
    async fn verified_card(&self, record: &RunningRecord) -> Result<(Value, SocketAddr), String> {
        let Some(url) = record.url.as_deref() else {
            return Err("the record names no door".to_owned());
        };
        let address = door_address(url)?;
        // Waiting for a permit is not the door's fault, so it counts against no deadline.
        let _permit = self
            .in_flight
            .acquire()
            .await
            .map_err(|_| "the prober is shutting down".to_owned())?;
        let started = std::time::Instant::now();
        let visited = self.visit(record, url, &address).await;
        if let Some(observer) = &self.observer {
            (observer.0)(visited.is_ok(), started.elapsed());
        }
        visited
    }

    /// One visit to the door at `address`, holding a probe slot: the card, if it names the
    /// record's session.
    async fn visit(
        &self,
        record: &RunningRecord,
        url: &str,
        address: &DoorAddress<'_>,
    ) -> Result<(Value, SocketAddr), String> {
        let (stream, at) = tokio::time::timeout(self.connect_deadline, connect_loopback(address))
            .await
            .map_err(|_| {
                format!(
                    "door at {url} did not accept a connection within {}",
                    humantime::format_duration(self.connect_deadline)
                )
            })?
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::ConnectionRefused => {
                    format!("door at {url} refused the connection")
                }
                _ => format!("door at {url} could not be reached: {e}"),
            })?;
        let body = tokio::time::timeout(
            self.answer_deadline,
            fetch_card(stream, address, record.door_token.as_ref(), self.owner),
        )
        .await
        .map_err(|_| {
            format!(
                "door at {url} did not answer within {}",
                humantime::format_duration(self.answer_deadline)
            )
        })?
        .map_err(|e| format!("door at {url} {e}"))?;
        let answer = parse_door_json(&body, record)
            .map_err(|_| format!("door at {url} answered something that is not JSON"))?;
        let card = if record.door_token.is_some() {
            extended_card(answer).map_err(|e| format!("door at {url} {e}"))?
        } else {
            answer
        };
        match session_id_of(&card) {
            Some(id) if id == record.session_id => Ok((card, at)),
            Some(id) => Err(format!(
                "door at {url} answers for session {}, not this one",
                quote_briefly(&redact_secrets(id.to_owned(), record))
            )),
            None => Err(format!(
                "door at {url} answered a card that names no session"
            )),
        }
    }
}

/// A card that verified its session, with every secret of its record replaced by `[redacted]`:
/// fit to show to anyone allowed to list sessions.
///
/// Made only by the probe, after redaction. It is the door's data, so its `Debug` names its
/// kind and nothing of its content: a card never reaches a log.
pub struct RedactedCard(Value);

impl RedactedCard {
    /// `card` with every secret of `record` replaced, in every string (keys included).
    pub(crate) fn redacted(mut card: Value, record: &RunningRecord) -> Self {
        redact_secrets_in(&mut card, record);
        Self(card)
    }

    /// The card as JSON.
    pub fn json(&self) -> &Value {
        &self.0
    }

    /// The skills it lists (ids and tags, bounded: [`skills_of`]).
    pub fn skills(&self) -> Vec<Skill> {
        skills_of(&self.0)
    }
}

impl std::fmt::Debug for RedactedCard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RedactedCard(..)")
    }
}

/// Connect to the door, on loopback addresses only: `localhost` is resolved by the system,
/// and a door token must not follow a hosts file that points it elsewhere. With the stream, the
/// address it is connected to.
async fn connect_loopback(address: &DoorAddress<'_>) -> std::io::Result<(TcpStream, SocketAddr)> {
    let mut last_error = None;
    for addr in tokio::net::lookup_host((address.host, address.port)).await? {
        if !addr.ip().is_loopback() {
            continue;
        }
        match TcpStream::connect(addr).await {
            Ok(stream) => return Ok((stream, addr)),
            Err(error) => last_error = Some(error),
        }
    }
    Err(last_error.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::AddrNotAvailable,
            "the name resolves to no loopback address",
        )
    }))
}

/// Ask for the card over `stream`, once its far end is `owner`'s; the body of a 2xx answer, at
/// most [`MAX_CARD_BYTES`] of it.
async fn fetch_card(
    stream: TcpStream,
    address: &DoorAddress<'_>,
    door_token: Option<&Secret>,
    owner: u32,
) -> Result<Bytes, String> {
    let request = match door_token {
        Some(token) => DoorRequest::post_json(address, EXTENDED_CARD_REQUEST, Some(token))
            .map_err(|why| format!("could not be asked: {why}"))?,
        None => DoorRequest::get(address, "/.well-known/agent-card.json"),
    };
    exchange(stream, &request, MAX_CARD_BYTES, owner)
        .await
        .map_err(|failure| failure.to_string())
}

const EXTENDED_CARD_REQUEST: &[u8] =
    br#"{"jsonrpc":"2.0","id":1,"method":"GetExtendedAgentCard","params":{}}"#;

/// A record's `host:port`, if it is a door on loopback.
pub(crate) fn door_address(url: &str) -> Result<DoorAddress<'_>, String> {
    let refuse = || {
        format!(
            "door address {} is not host:port on loopback; not probed",
            quote_briefly(url)
        )
    };
    let (host, port) = url.rsplit_once(':').ok_or_else(refuse)?;
    let port = port
        .parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(refuse)?;
    let bare_host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let loopback = bare_host.eq_ignore_ascii_case("localhost")
        || bare_host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if !loopback || (bare_host.contains(':') && !host.starts_with('[')) {
        return Err(refuse());
    }
    Ok(DoorAddress {
        host: bare_host,
        port,
        authority: url,
    })
}

/// `reason` with every secret of `record` replaced, in case a door echoed one back.
pub(crate) fn redact_secrets(mut reason: String, record: &RunningRecord) -> String {
    let mut secrets: Vec<&str> = (record.door_token.iter().chain(record.credentials.values()))
        .map(|secret| secret.expose())
        .filter(|secret| !secret.is_empty())
        .collect();
    // Longest first: a secret that holds another must go whole, not leave its remainder.
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    for secret in secrets {
        reason = reason.replace(secret, "[redacted]");
    }
    reason
}

/// Replace every secret of `record` inside every string (keys included) of `value`. A door's
/// answer holds any number that carries a secret as a string of its source text
/// ([`parse_door_json`]), so this covers numbers too.
pub(crate) fn redact_secrets_in(value: &mut Value, record: &RunningRecord) {
    let has_secret = |text: &str| {
        record
            .door_token
            .iter()
            .chain(record.credentials.values())
            .any(|secret| !secret.expose().is_empty() && text.contains(secret.expose()))
    };
    match value {
        Value::String(text) if has_secret(text) => {
            *text = redact_secrets(std::mem::take(text), record);
        }
        Value::Array(items) => items.iter_mut().for_each(|v| redact_secrets_in(v, record)),
        Value::Object(members) => {
            if members.keys().any(|k| has_secret(k)) {
                *members = std::mem::take(members)
                    .into_iter()
                    .map(|(k, v)| (redact_secrets(k, record), v))
                    .collect();
            }
            members
                .values_mut()
                .for_each(|v| redact_secrets_in(v, record));
        }
        _ => {}
    }
}

/// The card inside a JSON-RPC answer to `GetExtendedAgentCard`.
fn extended_card(mut answer: Value) -> Result<Value, String> {
    if let Some(error) = answer.get("error") {
        // The door's own message is not quoted: it may echo what it was sent.
        return Err(match error.get("code").and_then(Value::as_i64) {
            Some(code) => format!("refused the extended card (JSON-RPC error {code})"),
            None => "refused the extended card".to_owned(),
        });
    }
    answer
        .get_mut("result")
        .filter(|r| r.is_object())
        .map(Value::take)
        .ok_or_else(|| "answered JSON-RPC without a card in `result`".to_owned())
}

/// The session id a card names, in either shape.
///
/// Spec generation: a top-level `session_id`. Current generation (A2A v1.0): the `sessionId`
/// parameter of the murmur capsule extension in `capabilities.extensions`.
pub fn session_id_of(card: &Value) -> Option<&str> {
    if let Some(id) = card.get("session_id").and_then(Value::as_str) {
        return Some(id);
    }
    card.get("capabilities")?
        .get("extensions")?
        .as_array()?
        .iter()
        .find(|ext| ext.get("uri").and_then(Value::as_str) == Some(MURMUR_CAPSULE_EXTENSION))?
        .get("params")?
        .get("sessionId")?
        .as_str()
}

/// Someone else's text, cut short and stripped of control characters, fit for a reason string.
pub(crate) fn quote_briefly(text: &str) -> String {
    let cleaned: String = text.chars().filter(|c| !c.is_control()).take(80).collect();
    if cleaned.len() < text.len() && text.chars().count() > 80 {
        format!("{cleaned:?}…")
    } else {
        format!("{cleaned:?}")
    }
}

/// All three layers, door probe included.
///
/// Layers 1–2 run on the blocking pool; the door is probed only for a process that passed them.
pub async fn verify(record: &RunningRecord, door: &DoorProbe) -> Liveness {
    match verified_at(record, door).await {
        Ok(_) => Liveness::Live,
        Err(liveness) => liveness,
    }
}

/// [`verify`], with the socket address whose answer made the session live: `Err` with the
/// verdict when it is not live through its door (a doorless live session included).
pub(crate) async fn verified_at(
    record: &RunningRecord,
    door: &DoorProbe,
) -> Result<SocketAddr, Liveness> {
    let process = process_state_off_worker(record.clone()).await;
    match settled_without_door(record, process) {
        Ok(verdict) => Err(verdict.liveness),
        Err(_) => door
            .confirmed_at(record)
            .await
            .map_err(|reason| Liveness::Unreachable { reason }),
    }
}

/// Layers 1–2 for one record, on the blocking pool.
async fn process_state_off_worker(record: RunningRecord) -> ProcessState {
    tokio::task::spawn_blocking(move || process_state(&record))
        .await
        .unwrap_or_else(|_| process_check_failed())
}

/// The state of a process whose check panicked: nothing was learnt, so nothing is decided.
pub(crate) fn process_check_failed() -> ProcessState {
    ProcessState::Unverified {
        reason: "the process check failed".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_both_card_shapes() {
        assert_eq!(
            session_id_of(&json!({"session_id": "ses_a"})),
            Some("ses_a")
        );
        let current = json!({"name": "x", "capabilities": {"extensions": [
            {"uri": "https://example.invalid/other", "params": {"sessionId": "ses_wrong"}},
            {"uri": MURMUR_CAPSULE_EXTENSION, "params": {"sessionId": "ses_b"}}
        ]}});
        assert_eq!(session_id_of(&current), Some("ses_b"));
        assert_eq!(
            session_id_of(&json!({"capabilities": {"extensions": []}})),
            None
        );
        assert_eq!(session_id_of(&json!([1, 2])), None);
        assert_eq!(session_id_of(&json!({"session_id": 7})), None);
    }

    #[test]
    fn only_loopback_host_port_is_a_door() {
        for ok in [
            "127.0.0.1:4000",
            "localhost:1",
            "LOCALHOST:9",
            "[::1]:80",
            "127.3.4.5:65535",
        ] {
            assert!(door_address(ok).is_ok(), "{ok}");
        }
        for bad in [
            "10.0.0.1:80",
            "example.com:80",
            "127.0.0.1",
            "127.0.0.1:0",
            "127.0.0.1:99999",
            "::1:80",
            "127.0.0.1:80/x",
            "http://127.0.0.1:80",
            "user@127.0.0.1:80",
            "",
        ] {
            assert!(door_address(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_card_shown_for_another_record_is_redacted_for_its_secrets_too() {
        let record = |credential: &str| -> RunningRecord {
            serde_json::from_value(json!({
                "session_id": "ses_a", "url": "127.0.0.1:1", "pid": 1, "process_start": "7",
                "capsule_name": "c", "capsule_version": "1", "workdir": "/w",
                "outlives_launcher": false, "started_at": "2026-11-30T00:00:00Z",
                "door_token": "tok", "credentials": {"peer": credential}
            }))
            .expect("a record")
        };
        let (a, b) = (record("alpha"), record("beta"));
        let card = json!({"name": "tok alpha beta", "alpha": ["beta"]});
        let card = Arc::new(RedactedCard::redacted(card, &a));
        assert_eq!(
            *card.json(),
            json!({"name": "[redacted] [redacted] beta", "[redacted]": ["beta"]})
        );
        assert_eq!(
            RedactedCard::redacted(card.json().clone(), &b).json()["name"],
            "[redacted] [redacted] [redacted]"
        );
        assert_eq!(format!("{card:?}"), "RedactedCard(..)");
    }

    #[test]
    fn a_secret_that_holds_another_is_redacted_whole() {
        let record: RunningRecord = serde_json::from_value(serde_json::json!({
            "session_id": "ses_a", "url": "127.0.0.1:1", "pid": 1, "process_start": "1",
            "capsule_name": "c", "capsule_version": "1", "workdir": "/w",
            "outlives_launcher": false, "started_at": "2026-11-30T00:00:00Z",
            "door_token": "tok", "credentials": {"api": "tokXYZ"}
        }))
        .expect("a record");
        let said = redact_secrets("sent tokXYZ and tok".to_owned(), &record);
        assert_eq!(said, "sent [redacted] and [redacted]");
    }

    #[test]
    fn quotes_are_short_and_clean() {
        let quoted = quote_briefly(&format!("a\nb{}", "z".repeat(200)));
        assert!(!quoted.contains('\n'));
        assert!(quoted.chars().count() < 90);
    }
}
