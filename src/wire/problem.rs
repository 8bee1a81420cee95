//! The body of every error answer: an RFC 9457 problem, as `application/problem+json` carries
//! it (how the server chooses and answers one is `http::error`'s).
//!
//! Invariant: the members a problem type adds (a refused signal's `outcome`, …) travel in
//! `extra`, so a reader of any problem reads `type`, `status` and `detail` the same way.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// An RFC 9457 problem: `type`, `title`, `status`, `detail`, plus extra members.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "type": "urn:murmur-registry:problem:not-found",
    "title": "Not Found",
    "status": 404,
    "detail": "no record for session ses_0193a4c2e1f07a3b9c5d2e4f6a8b0c1d"
}))]
pub struct Problem {
    /// A URI naming the kind of problem.
    #[serde(rename = "type")]
    pub kind: String,
    /// A short summary of the kind of problem.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What went wrong with this request.
    pub detail: String,
    /// Members specific to the problem (e.g. a refused signal's `outcome` and `reason`).
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Map<String, Value>,
}

impl Problem {
    /// The kind's word: the last segment of `type` (`not-found` of
    /// `urn:murmur-registry:problem:not-found`).
    pub fn slug(&self) -> &str {
        self.kind.rsplit(':').next().unwrap_or(&self.kind)
    }
}
