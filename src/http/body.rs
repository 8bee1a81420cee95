//! The body of a change that reads none (`POST …/stop`, the `DELETE`s).
//!
//! Invariant: the contract takes JSON bodies only, so a non-empty body whose `Content-Type` is
//! not JSON is 415 before the change runs; an empty body, or a JSON one, is let through unread.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode, header};

use super::error::{ApiError, Problem, ProblemType};

/// Proof that a request's body is empty or declared JSON.
#[derive(Debug)]
pub struct NoBodyOrJson;

impl<S: Send + Sync> FromRequest<S> for NoBodyOrJson {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let declared_json = is_json(request.headers());
        let body =
            Bytes::from_request(request, state)
                .await
                .map_err(|rejection| match rejection.status() {
                    StatusCode::PAYLOAD_TOO_LARGE => Problem::new(
                        ProblemType::BodyTooLarge,
                        "the request body is larger than 16 KiB",
                    ),
                    _ => Problem::new(ProblemType::BadRequest, rejection.body_text()),
                })?;
        if body.is_empty() || declared_json {
            Ok(Self)
        } else {
            Err(Problem::new(
                ProblemType::UnsupportedMediaType,
                "a request body must be application/json (this one takes none)",
            )
            .into())
        }
    }
}

/// `application/json`, or `application/<anything>+json`, as axum's `Json` takes them.
fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|subtype| subtype.ends_with("+json"))
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn json_media_types_are_told_from_others() {
        let mut headers = HeaderMap::new();
        assert!(!is_json(&headers));
        for (value, json) in [
            ("application/json", true),
            ("Application/JSON; charset=utf-8", true),
            ("application/problem+json", true),
            ("text/plain", false),
            ("application/jsonx", false),
            ("text/json+xml", false),
            ("application/x-www-form-urlencoded", false),
        ] {
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(value));
            assert_eq!(is_json(&headers), json, "{value}");
        }
    }
}
