//! `GET /sessions/{id}/card` on the wire: the card as the door served it, and why a session
//! has none.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::Problem;
use super::session::{ProcessStatus, SessionState};

/// The agent card a live session's door serves, exactly as the door answered it (secrets of
/// the record redacted, should the door echo one).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(value_type = Object, example = json!({
    "protocolVersion": "1.0",
    "name": "researcher",
    "version": "0.3.1",
    "capabilities": {"extensions": [{
        "uri": "https://docs.murmur.nexus/reference/agent-card/#murmur-capsule-v1",
        "params": {"sessionId": EXAMPLE_ID}
    }]}
}))]
pub struct AgentCard(pub(crate) serde_json::Value);

impl AgentCard {
    /// The card's JSON, as the door served it.
    pub fn json(&self) -> &serde_json::Value {
        &self.0
    }
}

/// Why a session has no card: what the layers said.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CardRefusalMembers {
    /// The session.
    pub session_id: String,
    /// All three layers' verdict (`live` for a session without a door).
    pub state: SessionState,
    /// Layers 1–2 alone.
    pub process: ProcessStatus,
    /// Why there is no card.
    pub reason: String,
}

/// A card refusal as the client sees it.
#[derive(Debug, Serialize, ToSchema)]
pub struct CardProblem {
    #[serde(flatten)]
    problem: Problem,
    #[serde(flatten)]
    members: CardRefusalMembers,
}
