//! What a client call can come to besides its answer: no registry found, none reached, or a
//! refusal, which carries the registry's problem+json whole.
//!
//! Invariant: a refusal with a problem body is always [`Error::Problem`], never text, so a
//! caller matches on `type` and `status`, as the API documents them.

use crate::wire::Problem;

/// Why a call did not answer its type.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No registry runs where it was looked for: why, naming the discovery file.
    #[error("{0}")]
    NotRunning(String),
    /// The discovery file must not be trusted: it was not followed; why.
    #[error("{0}")]
    Untrusted(String),
    /// The token file could not be read.
    #[error("cannot read the registry's token: {0}")]
    Token(String),
    /// The URL given is not one.
    #[error("not a registry URL: {0}")]
    Url(String),
    /// Nothing answered, or the exchange broke off.
    #[error("{}", crate::discovery::unanswered(.url, .source))]
    Transport {
        /// The registry's URL.
        url: String,
        /// What reqwest said.
        #[source]
        source: reqwest::Error,
    },
    /// The registry refused: its problem (`type`, `title`, `status`, `detail`, and the
    /// members of its kind in `extra`).
    #[error("the registry answered {} ({}): {}", .0.status, .0.kind, .0.detail)]
    Problem(Box<Problem>),
    /// The registry answered an error without a problem body (no registry of ours, then).
    #[error("the registry at {url} answered HTTP {status}")]
    Status {
        /// The registry's URL.
        url: String,
        /// The status.
        status: u16,
    },
    /// The answer is not the JSON of its type.
    #[error("cannot read the registry's answer: {0}")]
    Decode(#[source] serde_json::Error),
}

impl Error {
    pub(crate) fn transport(url: &str, source: reqwest::Error) -> Self {
        Self::Transport {
            url: url.to_owned(),
            source,
        }
    }

    /// The problem the registry answered, when it refused.
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            Self::Problem(problem) => Some(problem),
            _ => None,
        }
    }
}

/// `answer` when it is a success; else its problem as an [`Error`].
pub(super) async fn checked(
    answer: reqwest::Response,
    url: &str,
) -> Result<reqwest::Response, Error> {
    let status = answer.status();
    if status.is_success() {
        return Ok(answer);
    }
    let body = answer
        .bytes()
        .await
        .map_err(|source| Error::transport(url, source))?;
    Err(match serde_json::from_slice::<Problem>(&body) {
        Ok(problem) => Error::Problem(Box::new(problem)),
        Err(_) => Error::Status {
            url: url.to_owned(),
            status: status.as_u16(),
        },
    })
}
