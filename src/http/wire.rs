//! The sessions API's wire types: every JSON body, query and path parameter a client sees,
//! each documented in the OpenAPI spec by its own type, one file per job: a session
//! (`session`), the list body (`session_list`), paths and queries (`query`), signal, stop,
//! prune and card. The events' own data is in `http::event_data`, the fleet's in
//! `http::fleet::wire`.
//!
//! Invariant: a session's JSON is built field by field from the record ([`SessionView::of`]);
//! it has no place for `door_token` or `credentials`, so they cannot leak through it.

mod card;
mod prune;
mod query;
mod session;
mod session_list;
mod signal;
mod signal_problem;
mod stop;

pub use card::{AgentCard, CardProblem, CardRefusalMembers};
pub use prune::{PruneAllResponse, PruneProblem, PruneRefusal, PruneResponse, PrunedEntry};
pub use query::{EventsQuery, ListQuery, ProbeQuery, SessionPath};
pub use session::{
    LivenessReport, LivenessView, ProcessStatus, ResourcesView, SessionState, SessionView,
};
pub use session_list::{ListMembers, SessionList};
pub use signal::{Outcome, SignalName, SignalRequest, SignalResponse};
pub use signal_problem::{SignalProblem, SignalRefusal};
pub use stop::{DoorOutcome, DoorStopView, StopQuery, StopResponse};
