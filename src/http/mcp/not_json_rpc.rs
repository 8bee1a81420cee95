//! A POST to `/mcp` typed JSON whose body is not a JSON-RPC message: `400 Bad Request` with a
//! JSON-RPC error response that has no `id`, as MCP's streamable HTTP transport asks of input
//! the server cannot accept (both revisions), with JSON-RPC 2.0's codes: `-32700` when the body
//! is not JSON at all, `-32600` when it is JSON but no JSON-RPC message. rmcp answers such a
//! body `415 Unsupported Media Type` in plain text, which names the wrong fault (the media type
//! was right) and gives a 2026-07-28 client no JSON-RPC error to tell a modern server by.
//!
//! Invariants kept here:
//! - Only that answer is changed: a body of another media type keeps rmcp's 415 (HTTP's word
//!   for it, and what the official Python SDK's server answers too), and whatever rmcp accepts
//!   reaches it byte for byte.
//! - The body is read once, under the API's 16 KiB limit; over it the answer is 413 with a
//!   JSON-RPC error, as before from rmcp.

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::super::MAX_BODY_BYTES;

/// JSON-RPC 2.0's code for a body that is not JSON.
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC 2.0's code for JSON that is not a valid request object.
const INVALID_REQUEST: i64 = -32600;

/// Hand `request` to rmcp; if its body, typed JSON, was not a JSON-RPC message, answer 400
/// with the JSON-RPC error that says why.
pub(super) async fn bad_request_when_not_json_rpc(request: Request, next: Next) -> Response {
    if request.method() != Method::POST || !typed_json(request.headers()) {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    // The only failures are a body over the limit and a client gone mid-body (who reads no
    // answer): both are told the limit.
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        let message = format!("the request body exceeds {MAX_BODY_BYTES} bytes");
        return refusal(StatusCode::PAYLOAD_TOO_LARGE, INVALID_REQUEST, &message);
    };
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes.clone())))
        .await;
    if response.status() != StatusCode::UNSUPPORTED_MEDIA_TYPE {
        return response;
    }
    let (code, message) = fault_of(&bytes);
    refusal(StatusCode::BAD_REQUEST, code, message)
}

/// Whether `headers` type the body `application/json` (any parameters).
fn typed_json(headers: &HeaderMap) -> bool {
    (headers.get(header::CONTENT_TYPE))
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// Why a body rmcp could not read as a JSON-RPC message is refused: its code and message.
fn fault_of(body: &Bytes) -> (i64, &'static str) {
    match serde_json::from_slice::<Value>(body) {
        Err(_) => (PARSE_ERROR, "the request body is not JSON"),
        Ok(_) => (
            INVALID_REQUEST,
            "the request body is not a JSON-RPC request, notification or response",
        ),
    }
}

/// `status` with a JSON-RPC error response that has no `id`.
fn refusal(status: StatusCode, code: i64, message: &str) -> Response {
    let body =
        json!({ "jsonrpc": "2.0", "id": null, "error": { "code": code, "message": message } });
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_json_is_a_parse_error_and_other_json_an_invalid_request() {
        for body in ["{", "", "not json", "{\"jsonrpc\":"] {
            assert_eq!(fault_of(&Bytes::from(body)).0, PARSE_ERROR, "{body:?}");
        }
        for body in ["[]", "1", "{}", "{\"jsonrpc\":\"2.0\",\"id\":1}"] {
            assert_eq!(fault_of(&Bytes::from(body)).0, INVALID_REQUEST, "{body:?}");
        }
    }

    #[test]
    fn only_a_json_media_type_is_typed_json() {
        let typed = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, value.parse().unwrap());
            typed_json(&headers)
        };
        assert!(typed("application/json"));
        assert!(typed("Application/JSON; charset=utf-8"));
        assert!(!typed("text/plain"));
        assert!(!typed("application/json-seq"));
        assert!(!typed_json(&HeaderMap::new()));
    }
}
