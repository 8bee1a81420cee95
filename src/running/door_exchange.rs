//! One HTTP/1.1 exchange with a door, on hyper's client connection: a request on a fresh
//! connection, sent once the connection is known to reach a socket of the records' owner
//! (`door_owner`), and the body of a 2xx answer.
//!
//! Invariants kept here:
//! - Only requests built by [`DoorRequest`] are sent: a path of ours, a checked door address,
//!   and a token refused when it holds a byte a header cannot carry, so a record can neither
//!   add a header nor smuggle a second request.
//! - Not one byte is written before the far end is known to be the records' owner's; when it
//!   is not, the failure says whose it is and that nothing (the token least of all) was sent.
//! - Nothing unbounded is buffered: the head (and any trailers) within [`MAX_HEAD_BYTES`], the
//!   body within the caller's cap. A length over the cap is refused before the body is read,
//!   a body that grows past it is cut there.
//! - The connection carries one request (`Connection: close`) and is never pooled. Once the
//!   answer is whole the socket is reset (`SO_LINGER` 0), not shut down: on loopback the
//!   door's side of a graceful close runs on our CPU, about as dear as the request.

use bytes::Bytes;
use futures_util::future::{Either, FutureExt, select};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Body, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::Secret;
use super::door_address::DoorAddress;
use super::door_owner::held_by;

/// The largest answer head read (status line and headers), and the most trailer bytes.
const MAX_HEAD_BYTES: usize = 64 * 1024;

const USER_AGENT: &str = concat!("murmur-registry/", env!("CARGO_PKG_VERSION"));

const NOT_HTTP: &str = "closed the connection without a valid HTTP answer";
const BROKE_OFF: &str = "broke off its answer";

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

fn broken(text: impl Into<String>) -> ExchangeFailure {
    ExchangeFailure::Broken(text.into())
}

/// One request to a door: its `Host`, our `User-Agent`, `A2A-Version: 1.0` and
/// `Connection: close`, then what the kind of request adds.
pub(crate) struct DoorRequest {
    request: Request<Full<Bytes>>,
    /// Whether the request carries a door token (said when it is withheld).
    carries_token: bool,
}

impl std::fmt::Debug for DoorRequest {
    /// The request may carry a door token: it is never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DoorRequest(..)")
    }
}

impl DoorRequest {
    /// `GET path`, with no body and no credentials.
    pub(crate) fn get(address: &DoorAddress<'_>, path: &'static str) -> Result<Self, String> {
        let request = door_request(Method::GET, path, address)
            .body(Full::default())
            .map_err(|_| "the request is malformed".to_owned())?;
        Ok(Self {
            request,
            carries_token: false,
        })
    }

    /// `POST /` with the JSON `body`, and `Authorization: Bearer <token>` when there is a
    /// token. `Err` when the token holds a byte a header value cannot carry (a control byte
    /// other than tab): it is not sent, in part or mangled.
    pub(crate) fn post_json(
        address: &DoorAddress<'_>,
        body: &'static [u8],
        token: Option<&Secret>,
    ) -> Result<Self, String> {
        let mut builder = door_request(Method::POST, "/", address)
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(token) = token {
            let bearer = format!("Bearer {}", token.expose());
            let mut value = HeaderValue::from_bytes(bearer.as_bytes())
                .map_err(|_| "the door token cannot be sent in a header".to_owned())?;
            value.set_sensitive(true);
            builder = builder.header(header::AUTHORIZATION, value);
        }
        let request = builder
            .body(Full::new(Bytes::from_static(body)))
            .map_err(|_| "the request is malformed".to_owned())?;
        Ok(Self {
            request,
            carries_token: token.is_some(),
        })
    }
}

/// The request line and the headers every request carries, `address` being a checked
/// `host:port`.
fn door_request(
    method: Method,
    path: &'static str,
    address: &DoorAddress<'_>,
) -> hyper::http::request::Builder {
    Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, address.authority)
        .header(header::USER_AGENT, USER_AGENT)
        .header("a2a-version", "1.0")
        .header(header::CONNECTION, "close")
}

/// Send `request` over `stream` once its far end is a socket of `owner` (the records' owner);
/// the body of a 2xx answer, at most `max_bytes` of it.
///
/// The connection is driven here, beside the request, not in a task of its own (a probe is
/// one request; a task per probe cost more than the request in the idle live view). The
/// socket is closed when this returns, whatever the door left unread or unsent: the caller
/// bounds the whole call with its own deadline, the wait for the door to accept included.
pub(crate) async fn exchange(
    stream: TcpStream,
    request: DoorRequest,
    max_bytes: usize,
    owner: u32,
) -> Result<Bytes, ExchangeFailure> {
    held_by(&stream, owner)
        .await
        .map_err(|why| ExchangeFailure::Withheld {
            why,
            token: request.carries_token,
        })?;
    let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
        // RFC 9112 section 5.2: a client must take a folded header line as one.
        .allow_obsolete_multiline_headers_in_responses(true)
        .max_header_size(MAX_HEAD_BYTES)
        .handshake::<_, Full<Bytes>>(TokioIo::new(stream))
        .await
        .map_err(|_| broken(NOT_HTTP))?;
    let answer = std::pin::pin!(body_of(sender.send_request(request.request), max_bytes));
    // Handed back instead of shut down once the answer is whole, so it can be reset.
    let connection = std::pin::pin!(connection.without_shutdown());
    let (answer, ended) = match select(answer, connection).await {
        // The connection ends in the same turn that reads the answer's last byte; should it
        // not be done yet, it is dropped (closed, not reset) rather than waited for.
        Either::Left((answer, connection)) => (answer, connection.now_or_never()),
        Either::Right((ended, answer)) => (answer.await, Some(ended)),
    };
    if let (Ok(_), Some(Ok(parts))) = (&answer, ended) {
        let _ = parts.io.into_inner().set_zero_linger();
    }
    answer
}

/// The body of the answer `sent` brings, if its status is 2xx and it is within `max_bytes`.
async fn body_of(
    sent: impl Future<Output = hyper::Result<Response<Incoming>>>,
    max_bytes: usize,
) -> Result<Bytes, ExchangeFailure> {
    let response = sent.await.map_err(|e| {
        if e.is_parse_too_large() {
            broken(format!(
                "answered a head larger than {MAX_HEAD_BYTES} bytes or with too many headers"
            ))
        } else {
            broken(NOT_HTTP)
        }
    })?;
    let status = response.status();
    if !status.is_success() {
        return Err(ExchangeFailure::Status(status.as_u16()));
    }
    let too_large = || broken(format!("answered more than {max_bytes} bytes"));
    let body = response.into_body();
    if body.size_hint().lower() > max_bytes as u64 {
        return Err(too_large());
    }
    Limited::new(body, max_bytes)
        .collect()
        .await
        .map(|whole| whole.to_bytes())
        .map_err(|e| {
            if e.is::<LengthLimitError>() {
                too_large()
            } else if e
                .downcast_ref::<hyper::Error>()
                .is_some_and(hyper::Error::is_parse_too_large)
            {
                broken(format!(
                    "answered trailers larger than {MAX_HEAD_BYTES} bytes"
                ))
            } else {
                broken(BROKE_OFF)
            }
        })
}

#[cfg(test)]
mod tests;
