//! The HTTP front: the `Host` and `Origin` checks, the query parameters (`status`, `include`,
//! `capsule`, `skill`, `timeout`, ...) and the signal body, sent as any request to the router
//! the registry serves (in process, over its real middleware), with an empty running directory.
//!
//! Checks: no panic and no 5xx but 503; a request whose `Host` is not the registry's own (by
//! a reading of the rule written here) is refused (400 or 403), and a 2xx comes only with an
//! admitted `Host` and `Origin`.
//!
//! Input: parts split at 0xFF bytes: a selector byte and the `Host`, the `Origin` (empty: none),
//! the path's tail or query, the body.
#![no_main]

use std::sync::OnceLock;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, header};
use libfuzzer_sys::fuzz_target;
use murmur_registry::http::{AppState, app};
use murmur_registry::registry::Registry;
use murmur_registry::running::DoorProbe;
use murmur_registry::token::TokenStore;
use tower::ServiceExt;

const PORT: u16 = 7070;
const ROUTES: [(&str, &str); 8] = [
    ("GET", "/sessions?"),
    ("GET", "/sessions/ses_0123456789abcdef0123456789abcdef?"),
    ("GET", "/sessions/"),
    (
        "POST",
        "/sessions/ses_0123456789abcdef0123456789abcdef/signal?",
    ),
    ("POST", "/sessions/"),
    ("GET", "/fleet/sessions?"),
    ("GET", "/healthz?"),
    ("DELETE", "/sessions?"),
];

struct Served {
    router: Router,
    token: String,
    runtime: tokio::runtime::Runtime,
    _home: tempfile::TempDir,
}

fn served() -> &'static Served {
    static SERVED: OnceLock<Served> = OnceLock::new();
    SERVED.get_or_init(|| {
        let home = tempfile::tempdir().expect("a temporary home");
        let dir = murmur_registry::running::running_dir_in(home.path()).expect("a running dir");
        let token_path = home.path().join("token");
        let token = murmur_registry::token::load_or_create(&token_path).expect("a token");
        let tokens = TokenStore::open(&token_path).expect("the token store");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let router = runtime.block_on(async {
            let registry = Registry::new(dir, DoorProbe::new());
            let bound = ([127, 0, 0, 1], PORT).into();
            app(AppState::new(registry, tokens, bound, &[], &[]))
        });
        Served {
            router,
            token,
            runtime,
            _home: home,
        }
    })
}

/// Whether `host` names the registry: one of its three names, with or without a port.
fn host_admitted(host: &str) -> bool {
    let host = host.to_ascii_lowercase();
    ["localhost", "127.0.0.1", "[::1]"].into_iter().any(|name| {
        host == name
            || host
                .strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(':'))
                .is_some_and(|port| port.bytes().all(|b| b.is_ascii_digit()))
    })
}

fn origin_admitted(origin: &str) -> bool {
    ["127.0.0.1", "localhost", "[::1]"]
        .into_iter()
        .any(|name| origin == format!("http://{name}:{PORT}"))
}

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(4, |&b| b == 0xFF);
    let (Some(first), origin, tail, body) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return;
    };
    let Some((&pick, host)) = first.split_first() else {
        return;
    };
    let (method, path) = ROUTES[usize::from(pick) % ROUTES.len()];
    let tail = String::from_utf8_lossy(tail.unwrap_or_default());
    let Ok(uri) = format!("{path}{tail}").parse::<axum::http::Uri>() else {
        return;
    };
    let mut request = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).expect("a method"))
        .uri(uri)
        .header(header::HOST, host)
        .header(header::CONTENT_TYPE, "application/json");
    let origin = origin.filter(|o| !o.is_empty());
    if let Some(origin) = origin {
        request = request.header(header::ORIGIN, origin);
    }
    let served = served();
    if pick & 0x80 != 0 {
        request = request.header(header::AUTHORIZATION, format!("Bearer {}", served.token));
    }
    let Ok(request) = request.body(Body::from(body.unwrap_or_default().to_vec())) else {
        return;
    };
    let response = served
        .runtime
        .block_on(served.router.clone().oneshot(request))
        .expect("the router is infallible");
    let status = response.status();
    assert!(
        !status.is_server_error() || status.as_u16() == 503,
        "answered {status}"
    );
    let host_ok = std::str::from_utf8(host).is_ok_and(host_admitted);
    if !host_ok {
        assert!(
            matches!(status.as_u16(), 400 | 403),
            "a foreign Host got {status}"
        );
    }
    if status.is_success() {
        assert!(host_ok, "2xx to a foreign Host");
        let origin_ok = origin.is_none_or(|o| std::str::from_utf8(o).is_ok_and(origin_admitted));
        assert!(origin_ok, "2xx to a foreign Origin");
    }
});
