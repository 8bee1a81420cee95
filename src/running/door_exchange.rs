//! One HTTP/1.1 exchange with a door: a request written whole on a fresh connection, once the
//! connection is known to reach a socket of the records' owner, and the body of its answer,
//! read to its framed end by [`AnswerReader`].
//!
//! Invariants kept here:
//! - Only the bytes built by [`DoorRequest`] are sent: its header values come from a checked
//!   door address and a token refused when it holds a byte a header cannot carry, so a record
//!   can neither add a header nor smuggle a second request.
//! - Not one byte is written before the kernel has said that the far end of this very
//!   connection (its exact 4-tuple, [`far_end`]) is a socket accepted by a process of the
//!   records' owner. A far end held by anyone else, by nobody, or that cannot be looked up
//!   gets nothing: the connection is closed and the failure says who held it and that nothing
//!   was sent. Every exchange is checked, with or without a token: a door's answer counts for
//!   layer 3 only when the capsule's user gave it.
//! - The connection carries one request (it says `Connection: close`) and is closed once the
//!   answer is read (reset once it is whole): never pooled, never reused.
//!
//! Why not hyper's client here: a probe is one small request on a connection of its own, and in
//! the idle live view (100 probes a second) hyper's dispatcher, its channel and its `shutdown`
//! after the answer cost more CPU than the request itself.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Secret;
use super::door_address::DoorAddress;
pub(crate) use super::door_answer::ExchangeFailure;
use super::door_answer::{AnswerReader, Progress, broken};
use crate::socket_owner::{FarEnd, far_end};

/// How much room each read asks for.
const READ_ROOM: usize = 8 * 1024;

const USER_AGENT: &str = concat!("murmur-registry/", env!("CARGO_PKG_VERSION"));

/// The bytes of one request to a door: its `Host`, our `User-Agent`, `A2A-Version: 1.0` and
/// `Connection: close`, then what the kind of request adds.
pub(crate) struct DoorRequest {
    bytes: Vec<u8>,
    /// Whether the bytes carry a door token (said when they are withheld).
    carries_token: bool,
}

impl std::fmt::Debug for DoorRequest {
    /// The bytes may carry a door token: they are never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DoorRequest(..)")
    }
}

impl DoorRequest {
    /// `GET path`, with no body and no credentials.
    pub(crate) fn get(address: &DoorAddress<'_>, path: &str) -> Self {
        let mut text = head("GET", path, address.authority);
        text.push_str("\r\n");
        Self {
            bytes: text.into_bytes(),
            carries_token: false,
        }
    }

    /// `POST /` with the JSON `body`, and `Authorization: Bearer <token>` when there is a
    /// token. `Err` when the token holds a byte a header value cannot carry (a control byte
    /// other than tab): it is not sent, in part or mangled.
    pub(crate) fn post_json(
        address: &DoorAddress<'_>,
        body: &[u8],
        token: Option<&Secret>,
    ) -> Result<Self, String> {
        let mut text = head("POST", "/", address.authority);
        if let Some(token) = token {
            let token = token.expose();
            if !token
                .bytes()
                .all(|b| b == b'\t' || (b >= b' ' && b != 0x7f))
            {
                return Err("the door token cannot be sent in a header".to_owned());
            }
            text.push_str("Authorization: Bearer ");
            text.push_str(token);
            text.push_str("\r\n");
        }
        text.push_str("Content-Type: application/json\r\n");
        text.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        let mut bytes = text.into_bytes();
        bytes.extend_from_slice(body);
        Ok(Self {
            bytes,
            carries_token: token.is_some(),
        })
    }
}

/// The request line and the headers every request carries, `authority` being a checked
/// `host:port` (no byte that could end a line).
fn head(method: &str, path: &str, authority: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: {USER_AGENT}\r\n\
         A2A-Version: 1.0\r\nConnection: close\r\n"
    )
}

/// How long the first wait for a door to accept lasts; each next one doubles, up to
/// [`LONGEST_ACCEPT_PAUSE`].
const FIRST_ACCEPT_PAUSE: Duration = Duration::from_millis(1);
/// The longest wait between two looks at a far end not yet accepted.
const LONGEST_ACCEPT_PAUSE: Duration = Duration::from_millis(64);

/// Send `request` over `stream` once its far end is a socket of `owner` (the records' owner);
/// the body of a 2xx answer, at most `max_bytes` of it.
///
/// The socket is closed when this returns, whatever the door left unread or unsent: the caller
/// bounds the whole call with its own deadline, the wait for the door to accept included.
pub(crate) async fn exchange(
    mut stream: TcpStream,
    request: &DoorRequest,
    max_bytes: usize,
    owner: u32,
) -> Result<Bytes, ExchangeFailure> {
    held_by(&stream, owner)
        .await
        .map_err(|why| ExchangeFailure::Withheld {
            why,
            token: request.carries_token,
        })?;
    stream
        .write_all(&request.bytes)
        .await
        .map_err(|_| broken("closed the connection before answering"))?;
    let mut reader = AnswerReader::new(max_bytes);
    let mut received = BytesMut::with_capacity(READ_ROOM);
    loop {
        received.reserve(READ_ROOM);
        let read = stream
            .read_buf(&mut received)
            .await
            .map_err(|_| reader.broken_off())?;
        if let Progress::Answered(body) = reader.take(&mut received, read == 0)? {
            // Whole, so nothing is left to carry: reset, not closed in turn. On loopback the
            // door's side of a graceful close runs on our CPU, about as dear as the request.
            let _ = stream.set_zero_linger();
            return Ok(body);
        }
    }
}

/// `Ok` once the far end of `stream` is a socket accepted by a process of `owner`; else why
/// nothing may be written on it.
///
/// Looks again while the door has not accepted yet. That is a poll: the kernel tells a
/// connecting socket nothing when its peer accepts (`sock_diag` announces only sockets'
/// destruction), so there is nothing to wait on. The pauses double from 1 ms (a door's event
/// loop accepts within a turn or two) up to 64 ms, so a door slow to accept costs at most
/// about 16 lookups a second (some 5 µs each); the caller's deadline ends the wait.
async fn held_by(stream: &TcpStream, owner: u32) -> Result<(), String> {
    let (ours, theirs) = stream
        .local_addr()
        .and_then(|ours| Ok((ours, stream.peer_addr()?)))
        .map_err(|e| format!("could not be checked for its owner ({e})"))?;
    let mut pause = FIRST_ACCEPT_PAUSE;
    loop {
        match holder(far_end(ours, theirs), owner) {
            Holder::Owner => return Ok(()),
            Holder::Refused(why) => return Err(why),
            Holder::NotYetAccepted => {}
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LONGEST_ACCEPT_PAUSE);
    }
}

/// What one look at the far end of a door connection decides.
#[derive(Debug, PartialEq, Eq)]
enum Holder {
    /// A socket accepted by a process of the records' owner: the request may be written.
    Owner,
    /// The door has not accepted the connection yet: look again.
    NotYetAccepted,
    /// Anything else: why nothing may be written.
    Refused(String),
}

/// What the kernel's word on the far end (`far_end`) decides for a door that must be `owner`'s.
///
/// A uid is compared only when the kernel reports it for an accepted socket (one a process
/// holds as a file), so the 0 some kernels fill in for a connection not yet accepted is never
/// taken for root; an accepted root-owned door matches only a registry that runs as root,
/// whose records root owns (and root can read every token anyway).
fn holder(far_end: std::io::Result<FarEnd>, owner: u32) -> Holder {
    match far_end {
        Ok(FarEnd::Accepted { uid }) if uid == owner => Holder::Owner,
        Ok(FarEnd::Accepted { uid }) => Holder::Refused(format!(
            "is held by uid {uid}, not by the records' owner (uid {owner})"
        )),
        Ok(FarEnd::NotYetAccepted) => Holder::NotYetAccepted,
        Ok(FarEnd::Absent) => {
            Holder::Refused("closed the connection before its holder could be checked".to_owned())
        }
        Err(e) => Holder::Refused(format!("could not be checked for its owner ({e})")),
    }
}

#[cfg(test)]
mod tests;
