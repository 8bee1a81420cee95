//! The committed OpenAPI document (`openapi/openapi.json`) must equal the one generated from
//! the handlers, and must describe every route the service answers, and every event the
//! `/events` stream sends as it is sent.

mod common;

use std::path::Path;
use std::time::Duration;

use common::server::TestServer;
use common::*;
use serde_json::Value;

const REGENERATE: &str = "cargo run -- openapi > openapi/openapi.json";

#[test]
fn committed_spec_equals_the_generated_one() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi/openapi.json");
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; create it with `{REGENERATE}`",
            path.display()
        )
    });
    let generated = murmur_registry::http::openapi_json_text().unwrap();
    assert!(
        committed == generated,
        "openapi/openapi.json is out of date with the handlers; regenerate it with `{REGENERATE}` and commit it"
    );
}

#[test]
fn spec_is_openapi_3_1_with_bearer_security_and_every_route() {
    let spec: Value =
        serde_json::from_str(&murmur_registry::http::openapi_json_text().unwrap()).unwrap();
    assert_eq!(spec["openapi"], "3.1.0");
    assert_eq!(
        spec["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    let expected = [
        ("/sessions", "get", vec!["200", "400", "401"]),
        ("/sessions", "delete", vec!["200", "401", "413", "415"]),
        ("/sessions/{id}", "get", vec!["200", "400", "401", "404"]),
        (
            "/sessions/{id}",
            "delete",
            vec!["200", "400", "401", "404", "409", "413", "415"],
        ),
        (
            "/sessions/{id}/liveness",
            "get",
            vec!["200", "400", "401", "404"],
        ),
        (
            "/sessions/{id}/signal",
            "post",
            vec![
                "200", "400", "401", "404", "409", "410", "413", "415", "422",
            ],
        ),
        (
            "/sessions/{id}/stop",
            "post",
            vec!["200", "400", "401", "404", "409", "413", "415"],
        ),
        ("/healthz", "get", vec!["200"]),
        ("/openapi.json", "get", vec!["200"]),
        ("/", "get", vec!["200"]),
        ("/dashboard.js", "get", vec!["200"]),
        ("/dashboard.css", "get", vec!["200"]),
    ];
    for (path, method, statuses) in expected {
        let operation = &spec["paths"][path][method];
        assert!(operation.is_object(), "{method} {path} is not documented");
        // Every route may time out (408) or shed load (503).
        for status in statuses.into_iter().chain(["408", "503"]) {
            assert!(
                operation["responses"][status].is_object(),
                "{method} {path} does not document {status}"
            );
        }
        let secured = operation["security"].is_array();
        let public = matches!(
            path,
            "/healthz" | "/openapi.json" | "/" | "/dashboard.js" | "/dashboard.css"
        );
        assert_eq!(secured, !public, "{method} {path}: security requirement");
    }
}

/// The documented schema of one `/events` event named `name`: the `oneOf` member whose `event`
/// is that name.
fn documented_event<'a>(spec: &'a Value, name: &str) -> &'a Value {
    let reference = spec["paths"]["/events"]["get"]["responses"]["200"]["content"]
        ["text/event-stream"]["schema"]["$ref"]
        .as_str()
        .expect("the event schema is a component");
    let component = reference.rsplit('/').next().unwrap_or_default();
    spec["components"]["schemas"][component]["oneOf"]
        .as_array()
        .expect("events are documented one schema per name")
        .iter()
        .find(|variant| variant["properties"]["event"]["enum"] == serde_json::json!([name]))
        .unwrap_or_else(|| panic!("event {name} is not documented"))
}

/// `event` is documented, with every field its data's documented schema requires (the common
/// reader has already checked it has a numeric id, a name and one JSON document of data).
fn assert_event_matches(spec: &Value, event: &SseEvent) {
    let (name, data) = (&event.name, &event.data);
    let variant = documented_event(spec, name);
    for field in ["id", "event", "data"] {
        assert!(
            variant["required"]
                .as_array()
                .unwrap()
                .contains(&Value::from(field)),
            "{name}: {field} is not required"
        );
    }
    let documented = &variant["properties"]["data"];
    assert_eq!(documented["contentMediaType"], "application/json", "{name}");
    let reference = documented["contentSchema"]["$ref"]
        .as_str()
        .expect("contentSchema");
    let component = &spec["components"]["schemas"][reference.rsplit('/').next().unwrap()];
    for field in component["required"].as_array().expect("required fields") {
        let field = field.as_str().unwrap();
        assert!(data.get(field).is_some(), "{name}: no {field} in {data}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_the_stream_sends_is_documented_as_sent() {
    let spec: Value =
        serde_json::from_str(&murmur_registry::http::openapi_json_text().unwrap()).unwrap();
    let server = TestServer::builder()
        .events_interval(Duration::from_millis(200))
        .start()
        .await;
    let first = TestProcess::sleeping();
    first.record().no_door().write_in(server.dir());
    let response = reqwest::Client::new()
        .get(format!("{}/events", server.base()))
        .bearer_auth(server.token())
        .send()
        .await
        .unwrap();
    let mut events = EventStream::new(response, Duration::from_secs(30));
    // The snapshot, then a newcomer's `session.added`.
    assert_event_matches(&spec, &events.snapshot().await);
    let second = TestProcess::sleeping();
    second.record().no_door().write_in(server.dir());
    let added = events.expect_event().await;
    assert_eq!(added.name, "session.added");
    assert_event_matches(&spec, &added);
}
