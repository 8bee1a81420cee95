//! A door's answer read as HTTP/1.1 frames it: the bytes in as they arrive, the body of a 2xx
//! answer out once it is whole. Pure: no I/O, so every way an answer can be cut or framed is
//! tested byte by byte.
//!
//! Invariants kept here:
//! - Nothing unbounded is buffered: the head within [`MAX_HEAD_BYTES`] (trailers too), the
//!   body within the caller's cap, a chunk-size line within [`MAX_CHUNK_LINE_BYTES`].
//! - An answer is whole only where HTTP/1.1 ends it: the last chunk and its trailers' blank
//!   line, `Content-Length` bytes, or the door's close when nothing else frames it. One that
//!   ends short of that, or frames itself in a way the RFC calls faulty (two different
//!   lengths, `Transfer-Encoding` in HTTP/1.0), brings no body.

use bytes::{Buf, Bytes, BytesMut};

/// The largest answer head read (status line and headers), and the most trailer bytes.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// The most headers an answer head may have.
const MAX_HEADERS: usize = 100;
/// The longest chunk-size line (the size and any chunk extensions).
const MAX_CHUNK_LINE_BYTES: usize = 4 * 1024;

const NOT_HTTP: &str = "closed the connection without a valid HTTP answer";
const BROKE_OFF: &str = "broke off its answer";
const MALFORMED_CHUNK: &str = "answered a malformed chunk";

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
    /// Nothing was sent: the connection's far end is not a socket of the records' owner
    /// (`why` says whose it is, or why that could not be told).
    #[error("{why}; {}", if *token { "the token was not sent" } else { "nothing was sent" })]
    Withheld {
        /// Who holds the far end, or why that is unknown.
        why: String,
        /// Whether the request withheld carried the door token.
        token: bool,
    },
}

pub(crate) fn broken(text: impl Into<String>) -> ExchangeFailure {
    ExchangeFailure::Broken(text.into())
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
    /// After the last chunk: trailer lines up to a blank one; this many trailer bytes so far.
    Trailers(usize),
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

/// The answer's parser. See the module's invariants.
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

    /// Take what `received` holds (what is used is removed from it; a partial head or line
    /// stays for the next call). `closed` says the door closed its side after those bytes.
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
                    return Err(self.broken_off());
                }
                return Ok(Progress::More);
            }
        }
    }

    /// Why the answer is not whole, if the connection ends (or fails) here.
    pub(crate) fn broken_off(&self) -> ExchangeFailure {
        broken(match self.stage {
            Stage::Head => NOT_HTTP,
            _ => BROKE_OFF,
        })
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
            Stage::ChunkSize => self.read_chunk_size(received)?,
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
                } else if received.len() >= 2 || received.first().is_some_and(|b| *b != b'\r') {
                    return Err(broken(MALFORMED_CHUNK));
                }
            }
            Stage::Trailers(seen) => return self.read_trailer_line(received, seen),
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
        let too_large = || {
            broken(format!(
                "answered a head larger than {MAX_HEAD_BYTES} bytes"
            ))
        };
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut headers);
        // RFC 9112 section 5.2: a client must take a folded header line as one.
        let length = match httparse::ParserConfig::default()
            .allow_obsolete_multiline_headers_in_responses(true)
            .parse_response(&mut response, received)
        {
            Ok(httparse::Status::Complete(length)) if length > MAX_HEAD_BYTES => {
                return Err(too_large());
            }
            Ok(httparse::Status::Complete(length)) => length,
            Ok(httparse::Status::Partial) if received.len() > MAX_HEAD_BYTES => {
                return Err(too_large());
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => {
                return Err(broken(format!("answered more than {MAX_HEADERS} headers")));
            }
            Err(_) => return Err(broken(NOT_HTTP)),
        };
        let status = response.code.unwrap_or_default();
        let framing = match status {
            // An interim answer (`100 Continue`, `103 Early Hints`): the real one follows.
            100 | 102..=199 => None,
            200..=299 => Some(framing_of(response.headers, response.version, status)?),
            101 | 300..=999 => return Err(ExchangeFailure::Status(status)),
            _ => return Err(broken(NOT_HTTP)),
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

    /// A chunk-size line: the next chunk's data, or after the last chunk its trailers.
    fn read_chunk_size(&mut self, received: &mut BytesMut) -> Result<(), ExchangeFailure> {
        // httparse reads a line without digits as size 0, the last chunk; it is not a size.
        if received.first().is_some_and(|b| !b.is_ascii_hexdigit()) {
            return Err(broken(MALFORMED_CHUNK));
        }
        match httparse::parse_chunk_size(received) {
            Ok(httparse::Status::Complete((line, size))) => {
                received.advance(line);
                let size = usize::try_from(size).unwrap_or(usize::MAX);
                if size > self.max_bytes - self.body.len() {
                    return Err(self.too_large());
                }
                self.stage = match size {
                    0 => Stage::Trailers(0),
                    size => Stage::ChunkData(size),
                };
            }
            Ok(httparse::Status::Partial) if received.len() > MAX_CHUNK_LINE_BYTES => {
                return Err(broken("answered a chunk-size line too long to read"));
            }
            Ok(httparse::Status::Partial) => {}
            Err(_) => return Err(broken(MALFORMED_CHUNK)),
        }
        Ok(())
    }

    /// One trailer line, `seen` trailer bytes before it: skipped, or the blank line that ends
    /// the answer.
    fn read_trailer_line(
        &mut self,
        received: &mut BytesMut,
        seen: usize,
    ) -> Result<Option<Progress>, ExchangeFailure> {
        let within = |trailer_bytes: usize| {
            if trailer_bytes > MAX_HEAD_BYTES {
                return Err(broken(format!(
                    "answered trailers larger than {MAX_HEAD_BYTES} bytes"
                )));
            }
            Ok(None)
        };
        let Some(end) = received.iter().position(|b| *b == b'\n') else {
            return within(seen + received.len());
        };
        let line = received.split_to(end + 1);
        if line.as_ref() == b"\r\n" || line.as_ref() == b"\n" {
            return Ok(Some(self.answered()));
        }
        self.stage = Stage::Trailers(seen + line.len());
        within(seen + line.len())
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
}

/// How a 2xx answer of HTTP/1.`minor` with `headers` frames its body. `Transfer-Encoding`
/// decides (chunked when chunked is its last coding, else the body runs to the close; faulty in
/// HTTP/1.0); otherwise `Content-Length`, whose every value must be the same number; otherwise
/// the close. 204 has no body.
fn framing_of(
    headers: &[httparse::Header<'_>],
    minor: Option<u8>,
    status: u16,
) -> Result<Framing, ExchangeFailure> {
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
        if minor != Some(1) {
            return Err(broken("answered HTTP/1.0 with a Transfer-Encoding"));
        }
        return Ok(match values("transfer-encoding").rfind(|v| !v.is_empty()) {
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
