//! A live session's agent card, fetched from its door and verified to name the session.

use super::{Registry, RegistryError};
use crate::running::{self, Liveness, ProcessState, Verdict};

/// Why a session has no card to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CardRefusal {
    /// The process is confirmed but the record names no door (a script capsule).
    NoDoor,
    /// The session is not live: what the layers said.
    NotLive {
        /// All three layers.
        liveness: Liveness,
        /// Layers 1–2.
        process: ProcessState,
    },
}

impl Registry {
    /// Fetch the agent card a session's live door serves, verified to name the session.
    ///
    /// The card is the one the probe read (the extended card for an authenticated door), with
    /// every string that holds one of the record's secrets redacted. `Err` with the reason
    /// when the session is not live: its process is not confirmed, it has no door, or the door
    /// did not confirm the session.
    pub async fn card(
        &self,
        session_id: &str,
    ) -> Result<Result<serde_json::Value, CardRefusal>, RegistryError> {
        let (record, process) = self.read_with_process(session_id).await?;
        match running::settled_without_door(&record, process) {
            // Layers 1–2 decided: gone, unverified, or live without a door to ask.
            Ok(Verdict {
                liveness: Liveness::Live,
                ..
            }) => Ok(Err(CardRefusal::NoDoor)),
            Ok(Verdict { process, liveness }) => {
                Ok(Err(CardRefusal::NotLive { liveness, process }))
            }
            Err(process) => {
                Ok(self
                    .door
                    .card(&record)
                    .await
                    .map_err(|reason| CardRefusal::NotLive {
                        liveness: Liveness::Unreachable { reason },
                        process,
                    }))
            }
        }
    }
}
