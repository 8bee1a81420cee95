//! The one line of JSON every event's data is written as, on `/events` and `/fleet/events`
//! alike (the data's types are [`crate::wire`]'s).
//!
//! Invariant: an event's data is serde_json's compact form of its wire type.

use serde::Serialize;

/// One line of JSON. Serializing these types cannot fail (string keys, no maps of non-strings).
pub(super) fn encode(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|error| {
        tracing::error!(%error, "cannot encode an event");
        "{}".to_owned()
    })
}
