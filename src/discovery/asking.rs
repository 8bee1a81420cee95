//! Asking a registry over HTTP from the command line: the one client configuration (no proxy,
//! a deadline; TLS with the `client-tls` feature) and the one `/healthz` question, which `health` and the discovery file's trust
//! check share.

use std::net::SocketAddr;
use std::time::Duration;

/// How long one question to a registry may take.
const DEADLINE: Duration = Duration::from_secs(3);

/// The one configuration of every client of a registry: never through a proxy (the bearer
/// token must not travel to `$HTTP_PROXY`), no redirects followed; with the `client-tls`
/// feature, `https://` verified against the system's roots.
pub fn client_builder() -> reqwest::ClientBuilder {
    let builder = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(DEADLINE);
    #[cfg(feature = "client-tls")]
    let builder = super::tls::with_tls(builder, Vec::new());
    builder
}

/// A client for a registry ([`client_builder`]), each request bounded by a few seconds.
pub fn plain_client() -> reqwest::Result<reqwest::Client> {
    client_builder().timeout(DEADLINE).build()
}

/// Ask `GET /healthz` at `addr` (an unspecified IP is asked on loopback). `Err` says, for a
/// person, what answered instead of `200`, or that nothing did.
pub async fn ask_healthz(client: &reqwest::Client, addr: SocketAddr) -> Result<(), String> {
    let url = super::ServerInfo::url_for(addr);
    let answer = client
        .get(format!("{url}/healthz"))
        .send()
        .await
        .map_err(|e| unanswered(&url, &e))?;
    match answer.status() {
        reqwest::StatusCode::OK => Ok(()),
        status => Err(format!(
            "the registry at {url} answered HTTP {}",
            status.as_u16()
        )),
    }
}

/// How a broken exchange with the registry at `url` reads, for a person: nothing there at
/// all, or what broke.
pub(crate) fn unanswered(url: &str, source: &reqwest::Error) -> String {
    if source.is_connect() || source.is_timeout() {
        format!("no registry answers at {url}")
    } else {
        format!("the registry at {url} did not answer: {source}")
    }
}
