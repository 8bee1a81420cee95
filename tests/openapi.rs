//! The committed OpenAPI document (`openapi/openapi.json`) must equal the one generated from
//! the handlers, and must describe every route the service answers.

use std::path::Path;

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
