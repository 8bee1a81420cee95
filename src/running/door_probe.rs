//! Layer 3: the door answers and names the record's session.
//!
//! Invariants kept here:
//! - A door that is silent, slow, wrong or garbled fails the probe with a reason, which the
//!   verdict ([`super::verdict`]) makes `Unreachable`, never `Gone`: the process behind it
//!   passed layers 1 and 2 and may be mid-turn.
//! - The probe keeps to its deadlines (connect, then answer) and reads at most
//!   [`MAX_CARD_BYTES`], so no door can hold a verification hostage or exhaust memory; many
//!   records are verified concurrently, so one slow door delays no other.
//! - A door is probed only on loopback, over plain HTTP, without proxies or redirects: a
//!   record's `door_token` is sent to the address the record names and nowhere else, and only
//!   over a connection whose far end a process of the records' owner accepted (checked in
//!   `door_owner`, for every probe: a door held by another user is `Unreachable`, sent
//!   nothing).
//! - Reasons never quote a secret, and quote a door's own words only briefly and sanitised
//!   (`door_redaction`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use super::door_address::{DoorAddress, connect_loopback, door_address};
use super::door_exchange::{DoorRequest, exchange};
use super::door_json::parse_door_json;
use super::door_redaction::{RedactedCard, quote_briefly, redact_secrets, redact_secrets_in};
use super::{RunningRecord, Secret};

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
        None => DoorRequest::get(address, "/.well-known/agent-card.json")
            .map_err(|why| format!("could not be asked: {why}"))?,
    };
    exchange(stream, request, MAX_CARD_BYTES, owner)
        .await
        .map_err(|failure| failure.to_string())
}

const EXTENDED_CARD_REQUEST: &[u8] =
    br#"{"jsonrpc":"2.0","id":1,"method":"GetExtendedAgentCard","params":{}}"#;

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
}
