//! The API's one vocabulary: every JSON body, query and path parameter, event and problem a
//! client sees, each documented in the OpenAPI spec by its own type, serialized by the server
//! (`http`) and deserialized by the client (`client`) alike, one file per job: a session
//! (`session`), the list body (`session_list`), paths and queries (`query`), signal, stop,
//! prune, card, the events' data (`events`) and problems (`problem`). The fleet's bodies are
//! written from its cache by `http::fleet::wire` and read by the client as `fleet`'s types,
//! whose schemas a test holds to the served ones.
//!
//! Invariant: a session's JSON is built field by field from the record ([`SessionView::of`]);
//! it has no place for `door_token` or `credentials`, so they cannot leak through it.

mod card;
mod events;
mod fleet;
mod problem;
mod prune;
mod query;
mod session;
mod session_list;
mod signal;
mod signal_problem;
mod stop;

pub use card::{AgentCard, CardProblem, CardRefusalMembers};
pub use events::{
    EventName, ResourcesEvent, SessionAdded, SessionChanged, SessionRemoved, SessionResources,
};
pub use fleet::{
    DoorScope, FleetHosts, FleetQuery, FleetSessionAdded, FleetSessionChanged, FleetSessionRemoved,
    FleetSessionView, FleetSessions, HostEntry, HostJoined, HostLeft, HostLoad,
};
pub use problem::Problem;
pub use prune::{PruneAllResponse, PruneProblem, PruneRefusal, PruneResponse, PrunedEntry};
pub use query::{EventsQuery, ListQuery, ProbeQuery, SessionPath};
pub use session::{
    LivenessReport, LivenessView, ProcessStatus, ResourcesView, SessionState, SessionView,
};
pub use session_list::{ListMembers, SessionList};
pub use signal::{Outcome, SignalName, SignalRequest, SignalResponse};
pub use signal_problem::{SignalProblem, SignalRefusal};
pub use stop::{DoorOutcome, DoorStopView, StopQuery, StopResponse};

/// A member that may be absent, `null` or a value, read as `None`, `Some(None)` and
/// `Some(Some(_))` (with `#[serde(default)]`; serde alone reads `null` as absent).
fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    serde::Deserialize::deserialize(deserializer).map(Some)
}
