//! A 200 whose JSON body was encoded before it was answered (a listing, a page, the fleet's
//! answers): the one place such an answer gets its content type.
//!
//! Invariant: the body is sent as it was encoded, never parsed or encoded again.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

/// A 200 with a JSON body already encoded.
pub(super) fn json_body(body: Bytes) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}
