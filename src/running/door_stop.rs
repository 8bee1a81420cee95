//! Asking a capsule to stop its work through its door: murmur 0.8's JSON-RPC method
//! `murmur.StopSession`, as `mur stop` asks it before it signals.
//!
//! Invariants kept here:
//! - `StopSession` names no session, so the door is asked only right after a fresh probe in the
//!   same call has shown it answers as the record's session, and the answer's `session_id` is
//!   checked again: a door on a port another process took over is never asked, or not believed.
//! - One connection straight to the socket address whose answer just verified the session (the
//!   record's name is not resolved again), the whole ask within [`STOP_ASK_DEADLINE`], at most
//!   [`MAX_STOP_ANSWER_BYTES`] read; the door's own error message is never quoted.
//! - The ask's connection is checked like the probe's (`door_owner`): unless a process of
//!   the records' owner accepted it, nothing is sent (the token least of all) and the door is
//!   not asked ([`DoorStop::NotLive`]).
//! - What the door answers is only reported: it never decides whether signals are sent. Every
//!   string in it has the record's secrets replaced before it leaves this module.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tokio::net::TcpStream;

use super::door_address::door_address;
use super::door_exchange::{DoorRequest, ExchangeFailure, exchange};
use super::door_json::parse_door_json;
use super::door_redaction::{quote_briefly, redact_secrets, redact_secrets_in};
use super::verdict::verified_at;
use super::{ANSWER_DEADLINE, CONNECT_DEADLINE, DoorProbe, Liveness, RunningRecord};

/// The longest the ask may take, connecting included (`mur stop`'s answer deadline).
pub const STOP_ASK_DEADLINE: Duration = Duration::from_secs(5);
/// The longest the fresh probe before the ask may take, whatever the prober's own deadlines
/// (an operator may lengthen those to a minute each): the spec's 2 s to connect and 5 s to
/// answer. A door slower than that is not asked.
pub const STOP_PROBE_DEADLINE: Duration = CONNECT_DEADLINE.saturating_add(ANSWER_DEADLINE);
/// The longest [`ask_door_to_stop`] takes: the probe, then the ask.
pub const DOOR_STOP_DEADLINE: Duration = STOP_PROBE_DEADLINE.saturating_add(STOP_ASK_DEADLINE);
/// Answers larger than this are not read to the end (0.8's answer is two short lists).
pub const MAX_STOP_ANSWER_BYTES: usize = 64 * 1024;
/// The JSON-RPC error a door answers for a method it does not serve.
const METHOD_NOT_FOUND: i64 = -32601;

const STOP_SESSION_REQUEST: &[u8] =
    br#"{"jsonrpc":"2.0","id":1,"method":"murmur.StopSession","params":{}}"#;

/// What asking the door to stop came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DoorStop {
    /// The door answered for this session: it canceled `canceled` and leaves `residue` running.
    Answered {
        /// The tasks it canceled, as the door named them (task ids).
        canceled: Vec<Value>,
        /// What it leaves running (detached commands, delegated children), as the door wrote.
        residue: Vec<Value>,
    },
    /// The door answered with an error (a JSON-RPC error, method-not-found included, or an
    /// HTTP error status).
    Refused {
        /// Which error.
        reason: String,
    },
    /// No usable answer within the deadline: no connection, no answer, or not JSON-RPC.
    NoAnswer {
        /// What happened.
        reason: String,
    },
    /// The door answered for another session, or for none.
    Mismatch {
        /// Which session it named.
        reason: String,
    },
    /// Not asked: the fresh verification did not show the door answering as this session, or
    /// the connection for the ask was not held by a process of the records' owner.
    NotLive {
        /// What the verification found.
        reason: String,
    },
    /// Not asked: the record names no door.
    NoDoor,
    /// Not asked: the caller said not to (or asked for SIGKILL at once).
    Skipped,
}

/// Verify `record` afresh (all three layers, a probe of its own, shared with nobody) and, if
/// its door answers as this session, ask it `murmur.StopSession`.
///
/// Takes at most [`DOOR_STOP_DEADLINE`]: the probe within `probe`'s deadlines and
/// [`STOP_PROBE_DEADLINE`], the ask within [`STOP_ASK_DEADLINE`].
pub async fn ask_door_to_stop(record: &RunningRecord, probe: &DoorProbe) -> DoorStop {
    if record.url.is_none() {
        return DoorStop::NoDoor;
    }
    let verified = tokio::time::timeout(STOP_PROBE_DEADLINE, verified_at(record, probe)).await;
    let at = match verified {
        Ok(Ok(at)) => at,
        // Live without a door to have answered: nothing to ask.
        Ok(Err(Liveness::Live)) => return DoorStop::NoDoor,
        Ok(Err(Liveness::Unreachable { reason } | Liveness::Gone { reason })) => {
            return redacted(DoorStop::NotLive { reason }, record);
        }
        Err(_) => {
            let reason = format!(
                "the session was not confirmed within {} (its probe, and any wait for a free \
                 probe slot)",
                humantime::format_duration(STOP_PROBE_DEADLINE)
            );
            return DoorStop::NotLive { reason };
        }
    };
    let answer = tokio::time::timeout(
        STOP_ASK_DEADLINE,
        send_stop_session(record, at, probe.door_owner()),
    )
    .await;
    let stop = match answer {
        Err(_) => DoorStop::NoAnswer {
            reason: format!(
                "the door did not answer murmur.StopSession within {}",
                humantime::format_duration(STOP_ASK_DEADLINE)
            ),
        },
        Ok(Err(AskFailure::Refused(reason))) => DoorStop::Refused { reason },
        Ok(Err(AskFailure::NoAnswer(reason))) => DoorStop::NoAnswer { reason },
        Ok(Err(AskFailure::NotAsked(reason))) => DoorStop::NotLive { reason },
        Ok(Ok(body)) => read_stop_answer(&body, record),
    };
    redacted(stop, record)
}

/// Why the exchange brought no answer to read.
enum AskFailure {
    Refused(String),
    NoAnswer(String),
    /// Nothing was sent: the connection was not the records' owner's.
    NotAsked(String),
}

/// One `POST /` carrying `murmur.StopSession` to the socket at `at`, the very one whose answer
/// just verified the session (the record's name is not resolved again: it could name another
/// socket by now), with the record's door token as bearer if it has one; the body of a 2xx
/// answer. Sent only once `owner`'s process has accepted the connection.
async fn send_stop_session(
    record: &RunningRecord,
    at: SocketAddr,
    owner: u32,
) -> Result<Bytes, AskFailure> {
    let url = record.url.as_deref().unwrap_or_default();
    let address = door_address(url).map_err(AskFailure::NoAnswer)?;
    let stream = TcpStream::connect(at).await.map_err(|e| {
        AskFailure::NoAnswer(format!("the door at {url} could not be reached: {e}"))
    })?;
    let request =
        DoorRequest::post_json(&address, STOP_SESSION_REQUEST, record.door_token.as_ref())
            .map_err(|why| AskFailure::NoAnswer(format!("the door could not be asked: {why}")))?;
    exchange(stream, request, MAX_STOP_ANSWER_BYTES, owner)
        .await
        .map_err(|failure| match failure {
            ExchangeFailure::Withheld { .. } => AskFailure::NotAsked(format!("the door {failure}")),
            ExchangeFailure::Status(_) => {
                AskFailure::Refused(format!("the door {failure} to murmur.StopSession"))
            }
            ExchangeFailure::Broken(_) => AskFailure::NoAnswer(format!("the door {failure}")),
        })
}

/// What a door's JSON-RPC answer to `murmur.StopSession` says, for `record`'s session.
fn read_stop_answer(body: &[u8], record: &RunningRecord) -> DoorStop {
    let Ok(answer) = parse_door_json(body, record) else {
        return DoorStop::NoAnswer {
            reason: "the door answered something that is not JSON".to_owned(),
        };
    };
    if let Some(error) = answer.get("error") {
        // The door's own message is not quoted: it may echo what it was sent.
        let reason = match error.get("code").and_then(Value::as_i64) {
            Some(METHOD_NOT_FOUND) => "the door does not serve murmur.StopSession (JSON-RPC \
                                       error -32601, method not found)"
                .to_owned(),
            Some(code) => format!("the door refused murmur.StopSession (JSON-RPC error {code})"),
            None => "the door refused murmur.StopSession".to_owned(),
        };
        return DoorStop::Refused { reason };
    }
    let Some(result) = answer.get("result").filter(|r| r.is_object()) else {
        return DoorStop::NoAnswer {
            reason: "the door answered JSON-RPC without a `result`".to_owned(),
        };
    };
    match result.get("session_id").and_then(Value::as_str) {
        Some(id) if id == record.session_id => {
            // murmur 0.8 always sends both lists; an answer without them is not its answer.
            match (list_of(result, "canceled"), list_of(result, "residue")) {
                (Some(canceled), Some(residue)) => DoorStop::Answered { canceled, residue },
                _ => DoorStop::NoAnswer {
                    reason: "the door's answer lacks murmur 0.8's `canceled` and `residue` lists"
                        .to_owned(),
                },
            }
        }
        // Redacted before it is quoted: escaping or cutting would hide a secret from the
        // redaction that follows.
        Some(id) => DoorStop::Mismatch {
            reason: format!(
                "the door answered for session {}, not this one; nothing it said is kept",
                quote_briefly(&redact_secrets(id.to_owned(), record))
            ),
        },
        None => DoorStop::Mismatch {
            reason: "the door's answer names no session; nothing it said is kept".to_owned(),
        },
    }
}

/// The array `result[key]`; `None` when absent or not an array.
fn list_of(result: &Value, key: &str) -> Option<Vec<Value>> {
    match result.get(key) {
        Some(Value::Array(items)) => Some(items.clone()),
        _ => None,
    }
}

/// `stop` with every secret of `record` replaced, in its reason and in every string it lists.
fn redacted(stop: DoorStop, record: &RunningRecord) -> DoorStop {
    let text = |reason: String| redact_secrets(reason, record);
    match stop {
        DoorStop::Answered {
            mut canceled,
            mut residue,
        } => {
            canceled
                .iter_mut()
                .chain(residue.iter_mut())
                .for_each(|item| redact_secrets_in(item, record));
            DoorStop::Answered { canceled, residue }
        }
        DoorStop::Refused { reason } => DoorStop::Refused {
            reason: text(reason),
        },
        DoorStop::NoAnswer { reason } => DoorStop::NoAnswer {
            reason: text(reason),
        },
        DoorStop::Mismatch { reason } => DoorStop::Mismatch {
            reason: text(reason),
        },
        DoorStop::NotLive { reason } => DoorStop::NotLive {
            reason: text(reason),
        },
        DoorStop::NoDoor => DoorStop::NoDoor,
        DoorStop::Skipped => DoorStop::Skipped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(token: Option<&str>) -> RunningRecord {
        let mut fields = json!({
            "session_id": "ses_a", "url": "127.0.0.1:1", "pid": 1, "process_start": "1",
            "capsule_name": "c", "capsule_version": "1", "workdir": "/w",
            "outlives_launcher": false, "started_at": "2026-11-30T00:00:00Z",
        });
        if let Some(token) = token {
            fields["door_token"] = json!(token);
        }
        serde_json::from_value(fields).expect("a record")
    }

    fn read(answer: Value) -> DoorStop {
        read_stop_answer(answer.to_string().as_bytes(), &record(None))
    }

    #[test]
    fn an_answer_for_this_session_gives_its_lists() {
        let answered = read(json!({"jsonrpc": "2.0", "id": 1, "result": {
            "session_id": "ses_a", "canceled": ["t1", "t2"], "residue": ["sh: make", {"pid": 7}]
        }}));
        assert_eq!(
            answered,
            DoorStop::Answered {
                canceled: vec![json!("t1"), json!("t2")],
                residue: vec![json!("sh: make"), json!({"pid": 7})],
            }
        );
        let sparse = read(json!({"result": {"session_id": "ses_a", "canceled": "t1"}}));
        assert!(matches!(sparse, DoorStop::NoAnswer { .. }), "{sparse:?}");
        let empty = read(json!({"result": {"session_id": "ses_a", "canceled": [], "residue": []}}));
        assert_eq!(
            empty,
            DoorStop::Answered {
                canceled: vec![],
                residue: vec![]
            }
        );
    }

    #[test]
    fn errors_refuse_and_method_not_found_says_so() {
        let DoorStop::Refused { reason } =
            read(json!({"error": {"code": -32601, "message": "no such method"}}))
        else {
            panic!("method-not-found is a refusal");
        };
        assert!(reason.contains("method not found"), "{reason}");
        assert!(
            !reason.contains("no such method"),
            "the door's words are not quoted"
        );
        let DoorStop::Refused { reason } =
            read(json!({"error": {"code": -32000, "message": "busy"}}))
        else {
            panic!("an error is a refusal");
        };
        assert!(reason.contains("-32000"), "{reason}");
        assert!(matches!(
            read(json!({"error": "no"})),
            DoorStop::Refused { .. }
        ));
    }

    #[test]
    fn another_session_or_none_is_a_mismatch_and_garbage_no_answer() {
        let other = read(json!({"result": {"session_id": "ses_b", "canceled": ["t"]}}));
        assert!(
            matches!(&other, DoorStop::Mismatch { reason } if reason.contains("ses_b")),
            "{other:?}"
        );
        assert!(matches!(
            read(json!({"result": {"canceled": []}})),
            DoorStop::Mismatch { .. }
        ));
        assert!(matches!(
            read(json!({"result": {"session_id": 7}})),
            DoorStop::Mismatch { .. }
        ));
        assert!(matches!(
            read(json!({"result": ["ses_a"]})),
            DoorStop::NoAnswer { .. }
        ));
        assert!(matches!(
            read_stop_answer(b"<html>", &record(None)),
            DoorStop::NoAnswer { .. }
        ));
    }

    #[tokio::test]
    async fn an_ask_on_a_connection_another_user_holds_sends_nothing() {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        let door = tokio::spawn(async move {
            let (mut accepted, _) = listener.accept().await.expect("accepted");
            let mut received = Vec::new();
            accepted.read_to_end(&mut received).await.map(|_| received)
        });
        let mut record = record(Some("s3cret"));
        record.url = Some(at.to_string());
        // The listener is ours: as another owner's door, it must be sent nothing.
        let me = rustix::process::geteuid().as_raw();
        let other = me.wrapping_add(1);
        let Err(AskFailure::NotAsked(reason)) = send_stop_session(&record, at, other).await else {
            panic!("asked on a connection of another owner");
        };
        assert_eq!(
            reason,
            format!(
                "the door is held by uid {me}, not by the records' owner (uid {other}); \
                 the token was not sent"
            )
        );
        let received = door.await.unwrap().expect("read to the end");
        assert!(received.is_empty(), "{received:?}");
    }

    #[test]
    fn secrets_are_redacted_from_lists_and_reasons() {
        let record = record(Some("s3cret"));
        let answered = DoorStop::Answered {
            canceled: vec![json!("task s3cret")],
            residue: vec![json!({"cmd": "curl -H s3cret"})],
        };
        assert_eq!(
            redacted(answered, &record),
            DoorStop::Answered {
                canceled: vec![json!("task [redacted]")],
                residue: vec![json!({"cmd": "curl -H [redacted]"})],
            }
        );
        let mismatch = read_stop_answer(
            json!({"result": {"session_id": "s3cret"}})
                .to_string()
                .as_bytes(),
            &record,
        );
        let DoorStop::Mismatch { reason } = redacted(mismatch, &record) else {
            panic!("a mismatch");
        };
        assert!(!reason.contains("s3cret"), "{reason}");
        // A secret that quoting would escape, or cut at its 80 characters, is still redacted.
        let quoted = format!("q\"{}\\", "x".repeat(90));
        let holder = self::record(Some(&quoted));
        let id = format!("ses_{quoted}");
        let mismatch = read_stop_answer(
            json!({"result": {"session_id": id}}).to_string().as_bytes(),
            &holder,
        );
        let DoorStop::Mismatch { reason } = redacted(mismatch, &holder) else {
            panic!("a mismatch");
        };
        assert!(!reason.contains("q\\\"x"), "{reason}");
        assert!(reason.contains("[redacted]"), "{reason}");
    }

    #[test]
    fn an_all_digit_token_echoed_as_a_number_is_redacted_from_the_lists() {
        let record = record(Some("8675309"));
        let answer = br#"{"result": {"session_id": "ses_a", "canceled": [8675309],
            "residue": [{"pid": 18675309, "port": 42}]}}"#;
        assert_eq!(
            redacted(read_stop_answer(answer, &record), &record),
            DoorStop::Answered {
                canceled: vec![json!("[redacted]")],
                residue: vec![json!({"pid": "1[redacted]", "port": 42})],
            }
        );
    }
}
