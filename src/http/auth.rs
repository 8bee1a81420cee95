//! Who may talk to the registry: the Host/Origin gate and the bearer token.
//!
//! Invariants kept here:
//! - The Host check runs before anything else, on every route: a page on another site that
//!   rebinds its DNS name to 127.0.0.1 still sends its own name as `Host`, and gets 403.
//!   A browser `Origin` other than the registry's own (or one listed with `--allow-origin`)
//!   gets 403 too. Two `Host` lines are 400 (RFC 9112 section 3.2), never judged by the first.
//! - The token is taken only from `Authorization: Bearer …` (scheme in any case), never from a
//!   query string or a cookie, and compared by [`TokenStore::check`] in constant time.
//! - A missing or wrong token gets 401 with `WWW-Authenticate: Bearer realm="murmur-registry"`;
//!   the answer never says which it was.

use std::net::SocketAddr;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::error::{Problem, ProblemType};

/// The `WWW-Authenticate` challenge of every 401.
pub const CHALLENGE: &str = r#"Bearer realm="murmur-registry""#;

/// Which `Host` and `Origin` values the registry answers.
#[derive(Debug, Clone)]
pub struct HostPolicy {
    hosts: Vec<String>,
    origins: Vec<String>,
}

impl HostPolicy {
    /// The policy for a registry bound at `bound`.
    ///
    /// Hosts: `localhost`, `127.0.0.1`, `[::1]` (any port), plus `extra_hosts` and, when the
    /// bind is not loopback, the bound IP. Origins: `http://{127.0.0.1,localhost,[::1]}:PORT`
    /// for the bound port, plus `extra_origins` (exact match).
    pub fn new(bound: SocketAddr, extra_hosts: &[String], extra_origins: &[String]) -> Self {
        let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "[::1]"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        if !bound.ip().is_loopback() && !bound.ip().is_unspecified() {
            hosts.push(match bound {
                SocketAddr::V4(v4) => v4.ip().to_string(),
                SocketAddr::V6(v6) => format!("[{}]", v6.ip()),
            });
        }
        // An empty name would let a request with an empty Host through: never listed.
        hosts.extend(
            extra_hosts
                .iter()
                .filter(|h| !h.trim().is_empty())
                .map(|h| h.to_ascii_lowercase()),
        );
        let port = bound.port();
        let mut origins: Vec<String> = ["127.0.0.1", "localhost", "[::1]"]
            .into_iter()
            .map(|h| format!("http://{h}:{port}"))
            .collect();
        origins.extend(extra_origins.iter().cloned());
        Self { hosts, origins }
    }

    fn allows_host(&self, host: &str) -> bool {
        let name = host_without_port(host).to_ascii_lowercase();
        self.hosts.contains(&name)
    }

    fn allows_origin(&self, origin: &str) -> bool {
        self.origins.iter().any(|allowed| allowed == origin)
    }
}

/// `example:80` → `example`; `[::1]:80` → `[::1]`; a bare name or `[v6]` stays as it is.
///
/// Only a port (`:` and digits) is ever cut: anything else after the name, `]` included, stays,
/// so `[::1]evil` is compared whole and matches no listed name.
fn host_without_port(host: &str) -> &str {
    let (name, port) = match host.strip_prefix('[') {
        Some(_) => match host.find(']') {
            Some(end) => host.split_at(end + 1),
            None => return host,
        },
        None => match host.rsplit_once(':') {
            Some((name, _)) if name.contains(':') => return host,
            Some((name, _)) => host.split_at(name.len()),
            None => return host,
        },
    };
    let is_port = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_digit()));
    if is_port { name } else { host }
}

/// Middleware: 403 unless `Host` (and `Origin`, if sent) are the registry's own.
pub async fn check_host(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let policy = state.host_policy();
    // Another hop may read the other line: which host was meant cannot be told.
    if request
        .headers()
        .get_all(header::HOST)
        .iter()
        .nth(1)
        .is_some()
    {
        return Problem::new(
            ProblemType::InvalidHost,
            "the request has more than one Host header line; send exactly one",
        )
        .into_response();
    }
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()));
    if !host.is_some_and(|h| policy.allows_host(h)) {
        return Problem::new(
            ProblemType::ForbiddenHost,
            "the Host header must name this registry (localhost, 127.0.0.1 or [::1])",
        )
        .into_response();
    }
    if let Some(origin) = request.headers().get(header::ORIGIN)
        && !origin.to_str().is_ok_and(|o| policy.allows_origin(o))
    {
        return Problem::new(
            ProblemType::ForbiddenOrigin,
            "requests from this Origin are not accepted; start the registry with --allow-origin to \
             permit it",
        )
        .into_response();
    }
    next.run(request).await
}

/// Middleware: 401 unless the request carries the current bearer token.
pub async fn require_token(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let Some(presented) = bearer_token(request.headers()) else {
        return unauthorized(
            "this endpoint needs Authorization: Bearer <token>; the token is in the registry's \
             token file",
        );
    };
    // An unchanged token file costs one `lstat`, done here: a trip to the blocking pool would
    // cost more than the check. A changed one is re-read off the async workers.
    let checked = match state.tokens().check_unchanged(presented) {
        Some(matches) => Ok(matches),
        None => {
            let presented = presented.to_owned();
            let checking = state.clone();
            tokio::task::spawn_blocking(move || checking.tokens().check(&presented))
                .await
                .unwrap_or_else(|e| {
                    Err(crate::token::TokenError::Io {
                        path: state.tokens().path().to_path_buf(),
                        cause: std::io::Error::other(e.to_string()),
                    })
                })
        }
    };
    match checked {
        Ok(true) => next.run(request).await,
        Ok(false) => unauthorized("the bearer token is not this registry's token"),
        Err(error) => {
            // Fail closed: with no trustworthy token file, no token is right.
            tracing::error!(%error, "token file unusable; rejecting requests until it is fixed");
            Problem::new(
                ProblemType::TokenFileUnusable,
                "the registry's token file is unusable; its log says why",
            )
            .into_response()
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header, scheme matched in any case.
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn unauthorized(detail: &str) -> Response {
    let mut response = Problem::new(ProblemType::Unauthorized, detail).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(CHALLENGE),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_ports_but_not_names() {
        assert_eq!(host_without_port("localhost:7420"), "localhost");
        assert_eq!(host_without_port("localhost"), "localhost");
        assert_eq!(host_without_port("[::1]:80"), "[::1]");
        assert_eq!(host_without_port("[::1]"), "[::1]");
        assert_eq!(host_without_port("127.0.0.1:1"), "127.0.0.1");
        assert_eq!(host_without_port("evil.example:80"), "evil.example");
        assert_eq!(host_without_port("[::1]evil"), "[::1]evil");
        assert_eq!(host_without_port("[::1].x.example"), "[::1].x.example");
        assert_eq!(host_without_port("[::1]:80x"), "[::1]:80x");
    }

    #[test]
    fn loopback_names_pass_and_others_do_not() {
        let policy = HostPolicy::new("127.0.0.1:7420".parse().unwrap(), &[], &[]);
        for ok in ["localhost", "LOCALHOST:1", "127.0.0.1:7420", "[::1]:9"] {
            assert!(policy.allows_host(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "127.0.0.1.nip.io",
            "localhost.evil",
            "[::2]",
            "[::1]evil",
            "[::1].x.example",
            "[::1]:x",
            "",
            "10.0.0.1",
        ] {
            assert!(!policy.allows_host(bad), "{bad}");
        }
        assert!(policy.allows_origin("http://localhost:7420"));
        assert!(!policy.allows_origin("http://localhost:7421"));
        assert!(!policy.allows_origin("null"));
        // An empty --allow-host never lets an empty Host through.
        let policy = HostPolicy::new("127.0.0.1:7420".parse().unwrap(), &[String::new()], &[]);
        assert!(!policy.allows_host(""));
    }

    #[test]
    fn bearer_scheme_is_case_insensitive_and_required() {
        let mut headers = HeaderMap::new();
        for (value, expected) in [
            ("Bearer abc", Some("abc")),
            ("bearer abc", Some("abc")),
            ("BEARER  abc ", Some("abc")),
            ("Basic abc", None),
            ("Bearer", None),
            ("abc", None),
        ] {
            headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
            assert_eq!(bearer_token(&headers), expected, "{value}");
        }
    }
}

/// Properties of the Authorization and Host parsers over arbitrary header values.
#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Never a panic; a token is only ever taken after a `Bearer` scheme, is never empty and
        /// is never padded.
        #[test]
        fn any_authorization_value_is_parsed_safely(bytes in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..120),
            "[ -~]{0,80}".prop_map(String::into_bytes),
            "(Bearer|bearer|BEARER|Basic|Token|Bearer:|Bear|) {0,2}[ -~]{0,40}"
                .prop_map(String::into_bytes),
        ]) {
            let Ok(value) = HeaderValue::from_bytes(&bytes) else { return Ok(()); };
            let mut headers = HeaderMap::new();
            headers.insert(header::AUTHORIZATION, value);
            if let Some(token) = bearer_token(&headers) {
                let text = std::str::from_utf8(&bytes).unwrap_or_default().trim();
                prop_assert!(text.get(..7).is_some_and(|s| s.eq_ignore_ascii_case("bearer ")));
                prop_assert!(!token.is_empty());
                prop_assert_eq!(token, token.trim());
            }
        }

        #[test]
        fn a_bearer_header_yields_exactly_its_token(
            scheme in "[Bb][Ee][Aa][Rr][Ee][Rr]",
            token in "[0-9a-f]{1,64}",
            pad in " {0,3}",
        ) {
            let mut headers = HeaderMap::new();
            let value = format!("{pad}{scheme} {pad}{token}{pad}");
            headers.insert(header::AUTHORIZATION, HeaderValue::from_str(&value).unwrap());
            prop_assert_eq!(bearer_token(&headers), Some(token.as_str()));
        }

        /// No Host value passes unless it is a listed name, with at most a port after it.
        /// Besides arbitrary text, the generator puts a listed name (bracketed IPv6 included)
        /// before arbitrary text, so a suffix after `]` or a port is reached often.
        #[test]
        fn only_listed_names_pass_the_host_check(host in prop_oneof![
            "\\PC{0,60}",
            (
                prop::sample::select(
                    vec!["localhost", "127.0.0.1", "[::1]", "extra.test", "[::1", "["],
                ),
                prop_oneof!["\\PC{0,20}", "(:[0-9]{0,6})?[\\].:a-z0-9]{0,12}"],
            ).prop_map(|(name, rest)| format!("{name}{rest}")),
        ]) {
            let extra = ["extra.test".to_owned()];
            let policy = HostPolicy::new("127.0.0.1:7420".parse().unwrap(), &extra, &[]);
            let _ = host_without_port(&host);
            if policy.allows_host(&host) {
                let name = host_without_port(&host).to_ascii_lowercase();
                let listed = ["localhost", "127.0.0.1", "[::1]", "extra.test"];
                prop_assert!(listed.contains(&name.as_str()), "{:?}", host);
                let rest = &host[host_without_port(&host).len()..];
                let port = rest.strip_prefix(':');
                prop_assert!(
                    rest.is_empty() || port.is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit())),
                    "{:?}",
                    host
                );
            }
        }

        /// A suffix or prefix on a listed name never passes (DNS rebinding names).
        #[test]
        fn rebinding_names_never_pass(
            name in prop::sample::select(vec!["localhost", "127.0.0.1", "extra.test"]),
            label in "[a-z0-9-]{1,20}",
            before in any::<bool>(),
        ) {
            let extra = ["extra.test".to_owned()];
            let policy = HostPolicy::new("127.0.0.1:7420".parse().unwrap(), &extra, &[]);
            let host = if before { format!("{label}.{name}") } else { format!("{name}.{label}") };
            prop_assert!(!policy.allows_host(&host), "{:?}", host);
        }
    }
}
