//! A typed client of the registry's HTTP API, for capsules and tools written in Rust: one
//! method per operation, each answering the [`crate::wire`] type the server serializes, and an
//! event stream that outlives a restart of the registry.
//!
//! Invariants kept here:
//! - Never through a proxy (the bearer token must not travel to `$HTTP_PROXY`), no redirect
//!   followed: the one client configuration is [`crate::discovery::client_builder`].
//! - The token is sent as `Authorization: Bearer` (marked sensitive) and is never in a URL, a
//!   log line or a `Debug` print.
//! - A registry found by [`Client::discover`] is trusted only as the discovery file's rules
//!   say ([`crate::discovery::find`]); the event stream finds it again after a restart.
//! - Every refusal carries the registry's problem+json ([`Error::Problem`]).
//! - An `https://` URL is spoken over TLS, its certificate verified, or refused outright (a
//!   build without the `client-tls` feature): never asked over plain HTTP.

mod error;
mod events;
mod fleet;
mod sse;

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::{Method, RequestBuilder, Url};
use serde::de::DeserializeOwned;

pub use error::Error;
pub use events::Event;
pub use fleet::FleetEvent;

use crate::discovery::{Found, client_builder, dir_of, find};
use crate::registry::SignalKind;
use crate::token;
use crate::wire::{
    AgentCard, ListQuery, LivenessReport, ProbeQuery, PruneAllResponse, PruneResponse, SessionList,
    SessionView, SignalRequest, SignalResponse, StopQuery, StopResponse,
};

/// How long one request may take, a full listing's probes included (`serve`'s own request
/// timeout); a stop waits longer (its `timeout` plus this).
const REQUEST_DEADLINE: Duration = Duration::from_secs(30);

/// A registry's bearer token: sent, never shown.
#[derive(Clone)]
struct Token(String);

/// A client of one registry. Cheap to clone (the connection pool is shared).
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    token: Token,
    /// The directory it was discovered in, to discover it again after a restart.
    found_in: Option<PathBuf>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("url", &self.base.as_str())
            .field("token", &"<redacted>")
            .field("found_in", &self.found_in)
            .finish()
    }
}

impl Client {
    /// A client of the registry at `url` (`http://IP:PORT`; `https://…` with the `client-tls`
    /// feature, verified against the system's roots) with `token`.
    pub fn new(url: &str, token: impl Into<String>) -> Result<Self, Error> {
        Self::with_builder(url, token, client_builder())
    }

    /// A client of the `https://` registry at `url` (behind a TLS proxy) that trusts the CA
    /// certificates in `ca_pem` beside the system's roots.
    #[cfg(feature = "client-tls")]
    pub fn with_root_certificates(
        url: &str,
        token: impl Into<String>,
        ca_pem: &[u8],
    ) -> Result<Self, Error> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let roots = CertificateDer::pem_slice_iter(ca_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Error::Url(format!("the CA certificates given are not PEM: {e}")))?;
        if roots.is_empty() {
            return Err(Error::Url("no CA certificate in the PEM given".to_owned()));
        }
        let builder = crate::discovery::with_tls(client_builder(), roots);
        Self::with_builder(url, token, builder)
    }

    fn with_builder(
        url: &str,
        token: impl Into<String>,
        builder: reqwest::ClientBuilder,
    ) -> Result<Self, Error> {
        let base = Url::parse(url).map_err(|e| Error::Url(format!("{url:?}: {e}")))?;
        if base.cannot_be_a_base() {
            return Err(Error::Url(format!("{url:?} cannot be a base URL")));
        }
        spoken(&base).map_err(|why| Error::Url(format!("{url:?}: {why}")))?;
        let http = builder
            .build()
            .map_err(|source| Error::transport(url, source))?;
        Ok(Self {
            http,
            base,
            token: Token(token.into()),
            found_in: None,
        })
    }

    /// The registry of this user (`$HOME/.murmur/registry`), found through its discovery file.
    pub async fn discover() -> Result<Self, Error> {
        let home = std::env::var_os("HOME")
            .filter(|home| !home.is_empty())
            .ok_or_else(|| Error::NotRunning("HOME is not set".to_owned()))?;
        let dir = dir_of(&token::default_token_path(Path::new(&home)));
        Self::discover_in(&dir).await
    }

    /// The registry whose discovery file (`server.json`) and token file are in `dir` (a
    /// `--token-file` registry's own directory), trusted only as the discovery rules say.
    pub async fn discover_in(dir: &Path) -> Result<Self, Error> {
        let http = client_builder()
            .build()
            .map_err(|source| Error::transport(&dir.display().to_string(), source))?;
        let info = match find(dir, &http).await {
            Found::Running(info) => info,
            Found::NotRunning(why) => return Err(Error::NotRunning(why)),
            Found::Untrusted(why) => return Err(Error::Untrusted(why)),
        };
        let token = token::read_existing(&info.token_file)
            .map_err(|e| Error::Token(format!("{}: {e}", info.token_file.display())))?;
        let mut client = Self::new(&info.url, token)?;
        client.found_in = Some(dir.to_path_buf());
        Ok(client)
    }

    /// The registry's URL.
    pub fn url(&self) -> &str {
        self.base.as_str().trim_end_matches('/')
    }

    /// `GET /healthz` (no token): `Ok` when it answers `200`.
    pub async fn healthz(&self) -> Result<(), Error> {
        let request = self
            .http
            .get(self.at(&["healthz"]))
            .timeout(REQUEST_DEADLINE);
        let answer = request
            .send()
            .await
            .map_err(|source| Error::transport(self.url(), source))?;
        error::checked(answer, self.url()).await.map(drop)
    }

    /// `GET /sessions`: the sessions `query` keeps (filters, `probe`, `include`, a page with
    /// `limit` and `cursor`).
    pub async fn sessions(&self, query: &ListQuery) -> Result<SessionList, Error> {
        let mut url = self.at(&["sessions"]);
        list_pairs(&mut url, query);
        self.call(self.request(Method::GET, url)).await
    }

    /// `GET /sessions/{id}`.
    pub async fn session(&self, id: &str, query: &ProbeQuery) -> Result<SessionView, Error> {
        let mut url = self.at(&["sessions", id]);
        let mut pairs = url.query_pairs_mut();
        if let Some(probe) = query.probe {
            pairs.append_pair("probe", if probe { "true" } else { "false" });
        }
        if let Some(include) = &query.include {
            pairs.append_pair("include", include);
        }
        drop(pairs);
        self.call(self.request(Method::GET, clean(url))).await
    }

    /// `GET /sessions/{id}/liveness`: all three layers, asked afresh.
    pub async fn liveness(&self, id: &str) -> Result<LivenessReport, Error> {
        let url = self.at(&["sessions", id, "liveness"]);
        self.call(self.request(Method::GET, url)).await
    }

    /// `GET /sessions/{id}/card`: the agent card its door serves.
    pub async fn card(&self, id: &str) -> Result<AgentCard, Error> {
        let url = self.at(&["sessions", id, "card"]);
        self.call(self.request(Method::GET, url)).await
    }

    /// `POST /sessions/{id}/signal`.
    pub async fn signal(&self, id: &str, signal: SignalKind) -> Result<SignalResponse, Error> {
        let url = self.at(&["sessions", id, "signal"]);
        let body = SignalRequest {
            signal: Some(signal.name().to_owned()),
        };
        let body = serde_json::to_vec(&body).map_err(Error::Decode)?;
        let request = self
            .request(Method::POST, url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        self.call(request).await
    }

    /// `POST /sessions/{id}/stop`: ask its door, then SIGTERM, then SIGKILL after `timeout`.
    pub async fn stop(&self, id: &str, query: &StopQuery) -> Result<StopResponse, Error> {
        let mut url = self.at(&["sessions", id, "stop"]);
        let mut pairs = url.query_pairs_mut();
        if let Some(timeout) = query.timeout {
            pairs.append_pair("timeout", &timeout.to_string());
        }
        if let Some(door) = query.door {
            pairs.append_pair("door", if door { "true" } else { "false" });
        }
        drop(pairs);
        let waits = Duration::from_secs(query.timeout.unwrap_or(10)) + REQUEST_DEADLINE;
        let request = self.request(Method::POST, clean(url)).timeout(waits);
        self.call(request).await
    }

    /// `DELETE /sessions/{id}`: remove its record, only when its process is gone.
    pub async fn prune(&self, id: &str) -> Result<PruneResponse, Error> {
        let url = self.at(&["sessions", id]);
        self.call(self.request(Method::DELETE, url)).await
    }

    /// `DELETE /sessions`: remove every record whose process is gone.
    pub async fn prune_all(&self) -> Result<PruneAllResponse, Error> {
        let url = self.at(&["sessions"]);
        self.call(self.request(Method::DELETE, url)).await
    }

    /// `GET /metrics`: the Prometheus text.
    pub async fn metrics(&self) -> Result<String, Error> {
        let answer = self
            .send(self.request(Method::GET, self.at(&["metrics"])))
            .await?;
        answer
            .text()
            .await
            .map_err(|source| Error::transport(self.url(), source))
    }

    /// `base` with `segments` as its path, each percent-encoded as one segment.
    fn at(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.clear().extend(segments);
        }
        url
    }

    /// A request with the token, bounded by [`REQUEST_DEADLINE`].
    fn request(&self, method: Method, url: Url) -> RequestBuilder {
        self.http
            .request(method, url)
            .bearer_auth(&self.token.0)
            .timeout(REQUEST_DEADLINE)
    }

    /// Send `request`; a refusal is an [`Error`] carrying the problem.
    async fn send(&self, request: RequestBuilder) -> Result<reqwest::Response, Error> {
        let answer = request
            .send()
            .await
            .map_err(|source| Error::transport(self.url(), source))?;
        error::checked(answer, self.url()).await
    }

    /// Send `request` and read its JSON answer as `T`.
    async fn call<T: DeserializeOwned>(&self, request: RequestBuilder) -> Result<T, Error> {
        let answer = self.send(request).await?;
        let body = answer
            .bytes()
            .await
            .map_err(|source| Error::transport(self.url(), source))?;
        serde_json::from_slice(&body).map_err(Error::Decode)
    }
}

/// Whether this build speaks `url`'s scheme: `http`, and `https` with the `client-tls` feature;
/// else why not.
fn spoken(url: &Url) -> Result<(), &'static str> {
    match url.scheme() {
        "http" => Ok(()),
        "https" if cfg!(feature = "client-tls") => Ok(()),
        "https" => Err(
            "https:// needs the client built with the `client-tls` feature \
            (this build speaks plain HTTP only, and will not send the token unencrypted there)",
        ),
        _ => Err("not an http:// or https:// URL"),
    }
}

/// `query`'s parameters on `url`, each as `GET /sessions` reads it.
fn list_pairs(url: &mut Url, query: &ListQuery) {
    set_query(
        url,
        [
            ("status", query.status.clone()),
            ("include", query.include.clone()),
            ("capsule", query.capsule.clone()),
            ("skill", query.skill.clone()),
            ("cursor", query.cursor.clone()),
            ("probe", query.probe.map(|probe| probe.to_string())),
            ("limit", query.limit.map(|limit| limit.to_string())),
        ],
    );
}

/// The `words` that have a value as `url`'s query, in their order; no `?` when none has.
fn set_query<'a>(url: &mut Url, words: impl IntoIterator<Item = (&'a str, Option<String>)>) {
    {
        let mut pairs = url.query_pairs_mut();
        for (name, value) in words {
            if let Some(value) = value {
                pairs.append_pair(name, &value);
            }
        }
    }
    *url = clean(url.clone());
}

/// `url` without an empty `?` (left when no parameter was added).
fn clean(mut url: Url) -> Url {
    if url.query() == Some("") {
        url.set_query(None);
    }
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_queries_are_encoded_and_the_token_is_never_shown() {
        let client = Client::new("http://127.0.0.1:7420", "s3cret-token").unwrap();
        assert_eq!(
            client.at(&["sessions", "a/b?c"]).as_str(),
            "http://127.0.0.1:7420/sessions/a%2Fb%3Fc"
        );
        let mut url = client.at(&["sessions"]);
        list_pairs(&mut url, &ListQuery::default());
        assert_eq!(url.as_str(), "http://127.0.0.1:7420/sessions");
        let query = ListQuery {
            skill: Some("a b&c".into()),
            probe: Some(false),
            limit: Some(5),
            ..ListQuery::default()
        };
        list_pairs(&mut url, &query);
        assert_eq!(url.query(), Some("skill=a+b%26c&probe=false&limit=5"));
        let shown = format!("{client:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(Client::new("not a url", "t").is_err());
    }

    #[test]
    fn only_http_and_with_its_feature_https_are_spoken() {
        let url = |text: &str| Url::parse(text).unwrap();
        assert_eq!(spoken(&url("http://127.0.0.1:1")), Ok(()));
        assert!(spoken(&url("ftp://127.0.0.1:1")).is_err());
        let https = spoken(&url("https://registry.example:443"));
        if cfg!(feature = "client-tls") {
            assert_eq!(https, Ok(()));
        } else {
            assert!(https.is_err_and(|why| why.contains("`client-tls`")));
        }
    }
}
