//! The dashboard's files as the server hands them out, without a browser (the browser test is
//! `tests/dashboard_browser.rs`).
//!
//! Checked here, against the real server on `127.0.0.1:0`:
//! - `GET /`, `/dashboard.js` and `/dashboard.css` answer 200 without a token, with their
//!   content types and the strict headers (CSP, nosniff, no referrer, no framing, no caching);
//!   the Host gate still applies to them, and other methods get 405;
//! - the page carries no data and no token, and loads nothing from another host;
//! - the files keep the rules the CSP and the design rely on: no inline script or style, no
//!   `innerHTML`-like sink, no `eval`, the token never in `localStorage`, a cookie or a URL;
//! - the accessibility basics: labelled token and filter fields, a labelled "this host / fleet"
//!   switch, a real table with scoped headers (the host column's too), a live region, a modal
//!   dialog for confirmations.

mod common;

use std::time::Duration;

use common::server::TestServer;
use murmur_registry::running::DoorProbe;
use murmur_registry::test_support::CONTENT_SECURITY_POLICY;
use reqwest::header::{self, HeaderMap};

/// A registry served in-process over an empty running directory, and a client.
struct Served {
    base: String,
    token: String,
    client: reqwest::Client,
    _server: TestServer,
}

impl Served {
    async fn start() -> Self {
        let server = TestServer::builder()
            .probe(DoorProbe::with_deadlines(
                Duration::from_millis(500),
                Duration::from_millis(1500),
            ))
            .start()
            .await;
        Self {
            base: server.base().to_owned(),
            token: server.token().to_owned(),
            client: reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("client"),
            _server: server,
        }
    }

    /// `method path` without a token; answers status, headers and body.
    async fn fetch(&self, method: reqwest::Method, path: &str) -> (u16, HeaderMap, String) {
        let response = self
            .client
            .request(method, format!("{}{path}", self.base))
            .send()
            .await
            .expect("the registry answers");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.text().await.expect("a text body");
        (status, headers, body)
    }

    async fn get(&self, path: &str) -> (u16, HeaderMap, String) {
        self.fetch(reqwest::Method::GET, path).await
    }
}

const FILES: [(&str, &str); 3] = [
    ("/", "text/html; charset=utf-8"),
    ("/dashboard.js", "text/javascript; charset=utf-8"),
    ("/dashboard.css", "text/css; charset=utf-8"),
];

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header"))
        .to_str()
        .expect("an ASCII header")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_served_without_a_token_with_strict_headers() {
    let served = Served::start().await;
    for (path, content_type) in FILES {
        let (status, headers, body) = served.get(path).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(header(&headers, "content-type"), content_type, "{path}");
        assert_eq!(
            header(&headers, "content-security-policy"),
            CONTENT_SECURITY_POLICY
        );
        assert_eq!(header(&headers, "x-content-type-options"), "nosniff");
        assert_eq!(header(&headers, "referrer-policy"), "no-referrer");
        assert_eq!(header(&headers, "x-frame-options"), "DENY");
        assert_eq!(header(&headers, "cache-control"), "no-store");
        assert!(!body.contains(&served.token), "{path} carries the token");
        assert!(!body.is_empty());
    }
    // The policy itself: this origin only, nothing inline, no framing, no form posts.
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "img-src 'self' data:",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ] {
        assert!(
            CONTENT_SECURITY_POLICY
                .split("; ")
                .any(|d| d.trim() == directive),
            "CSP lacks {directive}: {CONTENT_SECURITY_POLICY}"
        );
    }
    assert!(!CONTENT_SECURITY_POLICY.contains("unsafe"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_gate_and_methods_still_apply() {
    let served = Served::start().await;
    for (path, _) in FILES {
        let response = served
            .client
            .get(format!("{}{path}", served.base))
            .header(header::HOST, "evil.example")
            .send()
            .await
            .expect("answer");
        assert_eq!(response.status().as_u16(), 403, "{path}");
        let (status, headers, _) = served.fetch(reqwest::Method::POST, path).await;
        assert_eq!(status, 405, "POST {path}");
        assert_eq!(header(&headers, "allow"), "GET,HEAD", "POST {path}");
    }
}

/// Whether `html` has an attribute like ` onclick=`: whitespace, `on`, letters, `=`.
fn has_event_handler_attribute(html: &str) -> bool {
    html.match_indices("on").any(|(at, _)| {
        let before = html[..at].chars().next_back();
        let rest = &html[at + 2..];
        let name_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        before.is_some_and(char::is_whitespace)
            && name_len > 0
            && rest[name_len..].trim_start().starts_with('=')
    })
}

/// The three files as the binary embeds them.
async fn files(served: &Served) -> (String, String, String) {
    let (_, _, html) = served.get("/").await;
    let (_, _, js) = served.get("/dashboard.js").await;
    let (_, _, css) = served.get("/dashboard.css").await;
    (html, js, css)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_inline_nothing_foreign_no_html_sinks() {
    let served = Served::start().await;
    let (html, js, css) = files(&served).await;

    // Every script and style sheet is a same-origin file; the CSP would block anything inline.
    let lower = html.to_ascii_lowercase();
    assert_eq!(lower.matches("<script").count(), 1, "one script element");
    assert!(lower.contains(r#"<script src="/dashboard.js" defer></script>"#));
    assert!(!lower.contains("<style"), "no inline style sheet");
    assert!(!lower.contains(" style="), "no style attribute");
    assert!(
        !has_event_handler_attribute(&lower),
        "no inline event handler attribute"
    );
    assert!(lower.contains(r#"<link rel="stylesheet" href="/dashboard.css">"#));

    // Nothing from another host: no absolute URL at all, no protocol-relative one, no import.
    for (name, text) in [
        ("index.html", &html),
        ("dashboard.js", &js),
        ("dashboard.css", &css),
    ] {
        for needle in [
            "http://",
            "https://",
            "url(",
            "@import",
            "src=\"//",
            "href=\"//",
        ] {
            assert!(!text.contains(needle), "{name} contains {needle:?}");
        }
    }

    // Data becomes text, never markup or code.
    for sink in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
        "new Function",
        "setTimeout('",
        "setTimeout(\"",
    ] {
        assert!(!js.contains(sink), "dashboard.js uses {sink}");
    }
    // The token: sessionStorage and an Authorization header only.
    for place in [
        "localStorage",
        "document.cookie",
        "?token",
        "&token",
        "access_token",
    ] {
        assert!(!js.contains(place), "dashboard.js mentions {place}");
    }
    assert!(js.contains("sessionStorage"));
    assert!(js.contains("Authorization: 'Bearer '"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_has_labels_a_real_table_and_a_live_region() {
    let served = Served::start().await;
    let (html, _, _) = files(&served).await;
    for needle in [
        r#"<html lang="en">"#,
        r#"<meta name="viewport" content="width=device-width, initial-scale=1">"#,
        r#"<label for="token">"#,
        // No name: a form submitted without the script would carry nothing.
        r#"<input id="token" type="password""#,
        r#"<label for="filter">"#,
        r#"<select id="filter">"#,
        // The "this host / fleet" switch: a labelled group of two labelled radios.
        r#"<fieldset class="scope">"#,
        "<legend",
        r#"<input type="radio" id="scope-host" name="scope" value="host" checked>"#,
        r#"<label for="scope-host">This host</label>"#,
        r#"<label for="scope-fleet">Fleet</label>"#,
        r#"<th scope="col" class="col-host">Host</th>"#,
        "<table",
        "<caption",
        r#"<th scope="col">State</th>"#,
        r#"aria-live="polite""#,
        r#"role="status""#,
        r#"role="alert""#,
        "<dialog",
    ] {
        assert!(html.contains(needle), "index.html lacks {needle}");
    }
    let headers = html.matches("<th ").count();
    let scoped = html.matches("<th scope=\"col\"").count();
    assert_eq!(headers, scoped, "every table header has a scope");
}
