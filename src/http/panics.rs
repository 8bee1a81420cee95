//! A panic in a handler or a middleware answers 500 with a problem body and a log line, and
//! the registry goes on: the connection, and every other request, are untouched.
//!
//! Invariant: what panicked goes to the log only; the client reads the words of any other 500.

use std::any::Any;

use axum::response::{IntoResponse, Response};
use tower_http::catch_panic::CatchPanicLayer;

/// How a caught panic is answered.
pub(crate) type PanicAnswer = fn(Box<dyn Any + Send + 'static>) -> Response;

/// The layer that turns a panic below it into a 500 problem (the router's, inside the access
/// log so the 500 is counted and logged like any other answer).
pub(crate) fn catch_panics() -> CatchPanicLayer<PanicAnswer> {
    CatchPanicLayer::custom(answer_panic as PanicAnswer)
}

fn answer_panic(payload: Box<dyn Any + Send + 'static>) -> Response {
    let what = (payload.downcast_ref::<&str>().copied())
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message");
    tracing::error!(
        panic = what,
        "a request panicked; answered 500, the registry goes on"
    );
    super::error::internal().into_response()
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::{Body, to_bytes};
    use axum::http::{Request, StatusCode};
    use axum::routing::get;
    use tower_service::Service;

    use super::catch_panics;

    async fn call(router: &mut Router, path: &str) -> (StatusCode, serde_json::Value) {
        let request = Request::get(path).body(Body::empty()).unwrap();
        let response = router.call(request).await.unwrap();
        let status = response.status();
        let body = to_bytes(response.into_body(), 1 << 16).await.unwrap();
        (status, serde_json::from_slice(&body).unwrap_or_default())
    }

    async fn boom() -> &'static str {
        panic!("the handler's own words")
    }

    #[tokio::test]
    async fn a_panicking_handler_is_a_500_problem_and_the_router_goes_on() {
        let mut router: Router = Router::new()
            .route("/boom", get(boom))
            .route(
                "/fine",
                get(|| async { axum::Json(serde_json::json!({"ok": true})) }),
            )
            .layer(catch_panics());
        let (status, problem) = call(&mut router, "/boom").await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(problem["type"], "urn:murmur-registry:problem:internal");
        assert_eq!(problem["status"], 500);
        assert!(!problem.to_string().contains("own words"), "{problem}");
        let (status, body) = call(&mut router, "/fine").await;
        assert_eq!((status, body["ok"].as_bool()), (StatusCode::OK, Some(true)));
    }
}
