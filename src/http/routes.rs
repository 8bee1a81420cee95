//! What the accept loop must know of a route before the router sees the request.
//!
//! Invariant: a route's class is looked up by the same path constant its handler is documented
//! and routed under, so renaming a route cannot drop its stream cap or its stop deadline; a
//! test ties each class to the OpenAPI document. An MCP request whose answer stays open (a
//! 2026-07-28 `subscriptions/listen`) is told by its `Mcp-Method` header, which rmcp holds
//! equal to the body's method; the handler refuses a listen that holds no place
//! ([`HoldsStreamPlace`]), so none streams uncounted.

use axum::http::{HeaderMap, Method};

use super::{events, fleet, mcp, sessions};

/// How the accept loop treats a request, before routing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteClass {
    /// Its answer is a stream that stays open: it takes a stream place, capped apart.
    EventStream,
    /// A stop: its deadline covers its longest wait and SIGKILL's grace.
    Stop,
    /// Every other request.
    Ordinary,
}

/// The routes that are not ordinary. `HEAD` is there because axum answers it with the `GET`
/// handler.
const CLASSED: [(Method, &str, RouteClass); 7] = [
    (Method::GET, events::PATH, RouteClass::EventStream),
    (Method::HEAD, events::PATH, RouteClass::EventStream),
    (Method::GET, fleet::EVENTS_PATH, RouteClass::EventStream),
    (Method::HEAD, fleet::EVENTS_PATH, RouteClass::EventStream),
    (Method::POST, sessions::STOP_PATH, RouteClass::Stop),
    // MCP's GET opens its session's stream of server messages.
    (Method::GET, mcp::PATH, RouteClass::EventStream),
    // A tool call may be a stop, whose answer (2026-07-28: the response's head) waits for it.
    (Method::POST, mcp::PATH, RouteClass::Stop),
];

/// Put in a request's extensions by the accept loop when it holds an event-stream place for
/// it, so a handler that streams can tell the place is held.
#[derive(Debug, Clone, Copy)]
pub struct HoldsStreamPlace;

/// The class of a request for `method` on `path` (the request's path, no query) with
/// `headers`.
pub fn class_of(method: &Method, path: &str, headers: &HeaderMap) -> RouteClass {
    if method == Method::POST && path == mcp::PATH && mcp::opens_a_listen(headers) {
        return RouteClass::EventStream;
    }
    CLASSED
        .iter()
        .find(|(m, template, _)| m == method && matches_template(template, path))
        .map_or(RouteClass::Ordinary, |(_, _, class)| *class)
}

/// Whether `path` fits `template`, where a `{name}` segment stands for one non-empty segment.
fn matches_template(template: &str, path: &str) -> bool {
    let mut path = path.split('/');
    let fits = template.split('/').all(|want| match path.next() {
        Some(got) if want.starts_with('{') && want.ends_with('}') => !got.is_empty(),
        Some(got) => got == want,
        None => false,
    });
    fits && path.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class_of_path(method: &Method, path: &str) -> RouteClass {
        class_of(method, path, &HeaderMap::new())
    }

    #[test]
    fn an_mcp_listen_is_a_stream() {
        let mut headers = HeaderMap::new();
        headers.insert("mcp-method", "subscriptions/listen".parse().unwrap());
        let listen = class_of(&Method::POST, "/mcp", &headers);
        assert_eq!(listen, RouteClass::EventStream);
        assert_eq!(
            class_of(&Method::POST, "/events", &headers),
            RouteClass::Ordinary
        );
        headers.insert("mcp-method", "tools/call".parse().unwrap());
        let call = class_of(&Method::POST, "/mcp", &headers);
        assert_eq!(call, RouteClass::Stop);
    }

    #[test]
    fn classes_follow_the_templates() {
        assert_eq!(
            class_of_path(&Method::GET, "/events"),
            RouteClass::EventStream
        );
        assert_eq!(
            class_of_path(&Method::HEAD, "/events"),
            RouteClass::EventStream
        );
        assert_eq!(
            class_of_path(&Method::POST, "/events"),
            RouteClass::Ordinary
        );
        assert_eq!(
            class_of_path(&Method::GET, "/fleet/events"),
            RouteClass::EventStream
        );
        assert_eq!(
            class_of_path(&Method::GET, "/fleet/sessions"),
            RouteClass::Ordinary
        );
        assert_eq!(
            class_of_path(&Method::GET, "/events/"),
            RouteClass::Ordinary
        );
        assert_eq!(
            class_of_path(&Method::POST, "/sessions/ses_1/stop"),
            RouteClass::Stop
        );
        assert_eq!(
            class_of_path(&Method::GET, "/sessions/ses_1/stop"),
            RouteClass::Ordinary
        );
        assert_eq!(
            class_of_path(&Method::POST, "/sessions//stop"),
            RouteClass::Ordinary
        );
        assert_eq!(
            class_of_path(&Method::POST, "/sessions/a/b/stop"),
            RouteClass::Ordinary
        );
        assert_eq!(
            class_of_path(&Method::POST, "/sessions/a/signal"),
            RouteClass::Ordinary
        );
        assert_eq!(class_of_path(&Method::GET, "/mcp"), RouteClass::EventStream);
        assert_eq!(class_of_path(&Method::POST, "/mcp"), RouteClass::Stop);
        assert_eq!(class_of_path(&Method::DELETE, "/mcp"), RouteClass::Ordinary);
    }

    /// The document is what the router serves: every operation that answers a stream is classed
    /// a stream, and the stop is classed a stop, under the path it is routed at.
    #[test]
    fn every_streaming_route_and_the_stop_are_classed() {
        let spec = serde_json::to_value(crate::http::openapi()).unwrap();
        let mut streams = 0;
        for (path, item) in spec["paths"].as_object().unwrap() {
            let concrete = path.replace("{id}", "ses_1");
            for (method, operation) in item.as_object().unwrap() {
                let method: Method = method.to_uppercase().parse().unwrap();
                let content = &operation["responses"]["200"]["content"];
                if content.get("text/event-stream").is_some() {
                    streams += 1;
                    assert_eq!(
                        class_of_path(&method, &concrete),
                        RouteClass::EventStream,
                        "{path}"
                    );
                }
                if operation["operationId"] == "stop_session" {
                    assert_eq!(
                        class_of_path(&method, &concrete),
                        RouteClass::Stop,
                        "{path}"
                    );
                }
            }
        }
        assert_eq!(streams, 2, "both event streams are documented");
    }
}
