//! One HTTP/1.1 exchange with a door: a request written whole on a fresh connection, and the
//! body of its answer, read to its framed end by [`AnswerReader`].
//!
//! Invariants kept here:
//! - Only the bytes built by [`DoorRequest`] are sent: its header values come from a checked
//!   door address and a token refused when it holds a byte a header cannot carry, so a record
//!   can neither add a header nor smuggle a second request.
//! - The connection carries one request (it says `Connection: close`) and is closed once the
//!   answer is read (reset once it is whole): never pooled, never reused.
//!
//! Why not hyper's client here: a probe is one small request on a connection of its own, and in
//! the idle live view (100 probes a second) hyper's dispatcher, its channel and its `shutdown`
//! after the answer cost more CPU than the request itself.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Secret;
use super::door::DoorAddress;
pub(crate) use super::door_answer::ExchangeFailure;
use super::door_answer::{AnswerReader, Progress, broken};

/// How much room each read asks for.
const READ_ROOM: usize = 8 * 1024;

const USER_AGENT: &str = concat!("murmur-registry/", env!("CARGO_PKG_VERSION"));

/// The bytes of one request to a door: its `Host`, our `User-Agent`, `A2A-Version: 1.0` and
/// `Connection: close`, then what the kind of request adds.
pub(crate) struct DoorRequest {
    bytes: Vec<u8>,
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
        Ok(Self { bytes })
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

/// Send `request` over `stream`; the body of a 2xx answer, at most `max_bytes` of it.
///
/// The socket is closed when this returns, whatever the door left unread or unsent: the caller
/// bounds the whole call with its own deadline.
pub(crate) async fn exchange(
    mut stream: TcpStream,
    request: &DoorRequest,
    max_bytes: usize,
) -> Result<Bytes, ExchangeFailure> {
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

#[cfg(test)]
mod tests;
