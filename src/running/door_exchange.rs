//! One HTTP/1.1 exchange with a door: a request written whole on a fresh connection, and the
//! body of its answer read to its framed end.
//!
//! Invariants kept here:
//! - Only the bytes built by [`DoorRequest`] are sent: its header values come from a checked
//!   door address and a token refused when it holds a byte a header cannot carry, so a record
//!   can neither add a header nor smuggle a second request.
//! - Nothing unbounded is buffered: the head within [`MAX_HEAD_BYTES`], the body within the
//!   caller's cap, a chunk-size line within [`MAX_CHUNK_LINE_BYTES`].
//! - The answer's end is where HTTP/1.1 frames it (chunked, `Content-Length`, or the door's
//!   close); an answer that ends short of it, or frames itself two ways, brings no body.
//! - The connection carries one request (it says `Connection: close`) and is closed once the
//!   answer is read (reset once it is whole): never pooled, never reused.
//!
//! Why not hyper's client here: a probe is one small request on a connection of its own, and in
//! the idle live view (100 probes a second) hyper's dispatcher, its channel and its `shutdown`
//! after the answer cost more CPU than the request itself.

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Secret;
use super::door::DoorAddress;

/// The largest answer head read (status line and headers).
pub(crate) const MAX_HEAD_BYTES: usize = 64 * 1024;
/// The most headers an answer head may have.
const MAX_HEADERS: usize = 100;
/// The longest chunk-size line (the size and any chunk extensions).
pub(crate) const MAX_CHUNK_LINE_BYTES: usize = 4 * 1024;
/// How much room each read asks for.
const READ_ROOM: usize = 8 * 1024;

const USER_AGENT: &str = concat!("murmur-registry/", env!("CARGO_PKG_VERSION"));

/// Why one exchange with a door brought no body back; displayed as the end of a sentence that
/// starts with the door (`door at … answered HTTP 401`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ExchangeFailure {
    /// The door answered, with a status that is not 2xx.
    #[error("answered HTTP {0}")]
    Status(u16),
    /// No whole answer: the connection closed, broke off, or the answer was too large or not
    /// HTTP/1.1.
    #[error("{0}")]
    Broken(String),
}

fn broken(text: impl Into<String>) -> ExchangeFailure {
    ExchangeFailure::Broken(text.into())
}

/// The bytes of one request to a door: its `Host`, our `User-Agent`, `A2A-Version: 1.0` and
/// `Connection: close`, then what the kind of request adds.
#[derive(Clone)]
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
    /// token. `Err` when the token holds a byte a header value cannot carry (a control byte, or
    /// anything outside printable ASCII): it is not sent, in part or mangled.
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
                .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
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
            .map_err(|_| broken("broke off its answer"))?;
        if let Progress::Answered(body) = reader.take(&mut received, read == 0)? {
            // The answer is whole, so the connection has nothing left to carry: it is reset
            // rather than closed in turn. On loopback the door's side of a graceful close runs
            // on our CPU (its FIN_WAIT to TIME_WAIT, its ACK back), about as dear as the
            // request; and a door that closed first, as `Connection: close` asks, is not
            // bothered by the reset. Failing to set it leaves the graceful close.
            let _ = stream.set_zero_linger();
            return Ok(body);
        }
    }
}

/// What [`AnswerReader::take`] came to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Progress {
    /// The answer is not whole yet: read more.
    More,
    /// The whole body of a 2xx answer.
    Answered(Bytes),
}

/// Where in the answer the reader is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Before the final (non-1xx) head.
    Head,
    /// In a body of known length: this many bytes still to come.
    Length(usize),
    /// Before a chunk-size line.
    ChunkSize,
    /// In a chunk: this many bytes of its data still to come.
    ChunkData(usize),
    /// After a chunk's data, before the line end that closes it.
    ChunkEnd,
    /// In a body that ends when the door closes the connection.
    UntilClose,
}

/// How the body of a 2xx answer is framed (RFC 9112, section 6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Chunked,
    Length(usize),
    UntilClose,
}

/// The answer's parser: bytes in as they arrive, the body out once it is whole. Pure: no I/O,
/// so every way an answer can be cut or framed is tested byte by byte.
#[derive(Debug)]
pub(crate) struct AnswerReader {
    max_bytes: usize,
    stage: Stage,
    body: BytesMut,
}

impl AnswerReader {
    /// A reader for one answer whose body may be at most `max_bytes`.
    pub(crate) fn new(max_bytes: usize) -> Self {
        Self {
            max_bytes,
            stage: Stage::Head,
            body: BytesMut::new(),
        }
    }

    /// Take what `received` holds (what is used is removed from it; a partial head or chunk
    /// line stays for the next call). `closed` says the door closed its side after those bytes.
    pub(crate) fn take(
        &mut self,
        received: &mut BytesMut,
        closed: bool,
    ) -> Result<Progress, ExchangeFailure> {
        loop {
            let before = (self.stage, received.len());
            if let Some(done) = self.step(received, closed)? {
                return Ok(done);
            }
            if (self.stage, received.len()) == before {
                // No progress on what is here: wait for more, unless nothing more can come.
                if closed {
                    return Err(self.cut_short(received));
                }
                return Ok(Progress::More);
            }
        }
    }

    /// One move through the answer: `Some` when it ends here.
    fn step(
        &mut self,
        received: &mut BytesMut,
        closed: bool,
    ) -> Result<Option<Progress>, ExchangeFailure> {
        match self.stage {
            Stage::Head => return self.read_head(received),
            Stage::Length(0) => return Ok(Some(self.answered())),
            Stage::Length(left) => {
                let here = left.min(received.len());
                self.keep(received.split_to(here))?;
                self.stage = Stage::Length(left - here);
            }
            Stage::ChunkSize => match httparse::parse_chunk_size(received) {
                Ok(httparse::Status::Complete((line, 0))) => {
                    // The last chunk: the body is whole. Trailers, if any, are left unread
                    // with the connection.
                    received.advance(line);
                    return Ok(Some(self.answered()));
                }
                Ok(httparse::Status::Complete((line, size))) => {
                    received.advance(line);
                    let size = usize::try_from(size).unwrap_or(usize::MAX);
                    if size > self.max_bytes - self.body.len() {
                        return Err(self.too_large());
                    }
                    self.stage = Stage::ChunkData(size);
                }
                Ok(httparse::Status::Partial) if received.len() > MAX_CHUNK_LINE_BYTES => {
                    return Err(broken("answered a chunk-size line too long to read"));
                }
                Ok(httparse::Status::Partial) => {}
                Err(_) => return Err(broken("answered a malformed chunk")),
            },
            Stage::ChunkData(0) => self.stage = Stage::ChunkEnd,
            Stage::ChunkData(left) => {
                let here = left.min(received.len());
                self.keep(received.split_to(here))?;
                self.stage = Stage::ChunkData(left - here);
            }
            Stage::ChunkEnd => {
                if received.starts_with(b"\r\n") {
                    received.advance(2);
                    self.stage = Stage::ChunkSize;
                } else if received.len() >= 2 || (received.first().is_some_and(|b| *b != b'\r')) {
                    return Err(broken("answered a malformed chunk"));
                }
            }
            Stage::UntilClose => {
                let all = received.split();
                self.keep(all)?;
                if closed {
                    return Ok(Some(self.answered()));
                }
            }
        }
        Ok(None)
    }

    /// Parse the head once it is whole: a 1xx is skipped, any other status but 2xx ends the
    /// exchange, and a 2xx sets how its body is framed.
    fn read_head(&mut self, received: &mut BytesMut) -> Result<Option<Progress>, ExchangeFailure> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut headers);
        let length = match response.parse(received) {
            Ok(httparse::Status::Complete(length)) => length,
            Ok(httparse::Status::Partial) if received.len() > MAX_HEAD_BYTES => {
                return Err(broken(format!(
                    "answered a head larger than {MAX_HEAD_BYTES} bytes"
                )));
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => {
                return Err(broken(format!("answered more than {MAX_HEADERS} headers")));
            }
            Err(_) => return Err(broken("closed the connection without a valid HTTP answer")),
        };
        if length > MAX_HEAD_BYTES {
            return Err(broken(format!(
                "answered a head larger than {MAX_HEAD_BYTES} bytes"
            )));
        }
        let status = response.code.unwrap_or_default();
        let framing = match status {
            // An interim answer (`100 Continue`, `103 Early Hints`): the real one follows.
            100 | 102..=199 => None,
            200..=299 => Some(framing_of(response.headers, status)?),
            other => return Err(ExchangeFailure::Status(other)),
        };
        received.advance(length);
        self.stage = match framing {
            None => Stage::Head,
            Some(Framing::Chunked) => Stage::ChunkSize,
            Some(Framing::Length(length)) if length > self.max_bytes => {
                return Err(self.too_large());
            }
            Some(Framing::Length(length)) => Stage::Length(length),
            Some(Framing::UntilClose) => Stage::UntilClose,
        };
        Ok(None)
    }

    /// Add `bytes` to the body, within the cap.
    fn keep(&mut self, bytes: BytesMut) -> Result<(), ExchangeFailure> {
        if bytes.len() > self.max_bytes - self.body.len() {
            return Err(self.too_large());
        }
        self.body.unsplit(bytes);
        Ok(())
    }

    fn answered(&mut self) -> Progress {
        Progress::Answered(std::mem::take(&mut self.body).freeze())
    }

    fn too_large(&self) -> ExchangeFailure {
        broken(format!("answered more than {} bytes", self.max_bytes))
    }

    /// Why an answer the door closed on is not whole.
    fn cut_short(&self, received: &BytesMut) -> ExchangeFailure {
        match self.stage {
            Stage::Head if received.is_empty() => broken("closed the connection before answering"),
            Stage::Head => broken("closed the connection without a valid HTTP answer"),
            _ => broken("broke off its answer"),
        }
    }
}

/// How a 2xx answer with `headers` frames its body. A `Transfer-Encoding` decides (chunked when
/// chunked is its last coding, else the body runs to the close); otherwise `Content-Length`,
/// whose every value must be the same number; otherwise the close. 204 has no body.
fn framing_of(headers: &[httparse::Header<'_>], status: u16) -> Result<Framing, ExchangeFailure> {
    if status == 204 {
        return Ok(Framing::Length(0));
    }
    let values = |name: &'static str| {
        headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .flat_map(|h| h.value.split(|b| *b == b','))
            .map(|v| v.trim_ascii())
    };
    if values("transfer-encoding").next().is_some() {
        let last = values("transfer-encoding").rfind(|v| !v.is_empty());
        return Ok(match last {
            Some(coding) if coding.eq_ignore_ascii_case(b"chunked") => Framing::Chunked,
            _ => Framing::UntilClose,
        });
    }
    let mut length = None;
    for value in values("content-length") {
        let parsed = std::str::from_utf8(value)
            .ok()
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|v| v.parse::<usize>().ok());
        match (parsed, length) {
            (None, _) => return Err(broken("answered a Content-Length that is not a number")),
            (Some(n), Some(seen)) if n != seen => {
                return Err(broken("answered two different Content-Lengths"));
            }
            (Some(n), _) => length = Some(n),
        }
    }
    Ok(length.map_or(Framing::UntilClose, Framing::Length))
}

#[cfg(test)]
mod tests;
