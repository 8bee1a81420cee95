//! `POST /sessions/{id}/signal` on the wire: the request, the signals it takes, and the
//! answer; `outcome`, which a stop's answer shares.
//!
//! Invariant: the signals are the registry's [`SignalKind`]; the wire documents their spellings
//! ([`SignalName`]) and never keeps a list of its own.

use serde::{Deserialize, Serialize};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, SchemaType, Type};
use utoipa::{PartialSchema, ToSchema};

use super::session::EXAMPLE_ID;
use crate::registry::SignalKind;

/// The body of `POST /sessions/{id}/signal`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"signal": "SIGTERM"}))]
pub struct SignalRequest {
    /// `SIGTERM` or `SIGKILL` (`TERM`, `KILL` also accepted, in any case).
    /// Missing, or not a string: 422 `unknown-signal`, as for any other name.
    #[serde(default, deserialize_with = "text_or_none")]
    #[schema(value_type = SignalName, required = true)]
    pub signal: Option<String>,
}

fn text_or_none<'de, D: serde::Deserializer<'de>>(value: D) -> Result<Option<String>, D::Error> {
    match serde_json::Value::deserialize(value)? {
        serde_json::Value::String(text) => Ok(Some(text)),
        _ => Ok(None),
    }
}

/// The signals `POST /sessions/{id}/signal` accepts.
///
/// The wire's schema of a [`SignalKind`]: each by its [`SignalKind::name`] and its
/// [`SignalKind::short_name`], as [`SignalKind::parse`] reads them (in any case).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalName(pub SignalKind);

impl PartialSchema for SignalName {
    fn schema() -> RefOr<Schema> {
        let names = SignalKind::ALL.map(SignalKind::name);
        let short_names = SignalKind::ALL.map(SignalKind::short_name);
        ObjectBuilder::new()
            .schema_type(SchemaType::Type(Type::String))
            .description(Some("The signals `POST /sessions/{id}/signal` accepts."))
            .enum_values(Some(names.into_iter().chain(short_names)))
            .into()
    }
}

impl ToSchema for SignalName {}

/// A signal that was delivered.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"session_id": EXAMPLE_ID, "signal": "SIGTERM", "outcome": "sent"}))]
pub struct SignalResponse {
    /// The session signalled.
    pub session_id: String,
    /// `SIGTERM` or `SIGKILL`.
    pub signal: String,
    /// Always `sent`.
    pub outcome: Outcome,
}

/// What a signal or stop did, as the `outcome` member says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The signal was delivered.
    Sent,
    /// The stop ended the process.
    Stopped,
    /// The process was gone before anything was sent.
    AlreadyGone,
    /// Nothing more was sent: the process could not be confirmed, or the kernel refused.
    Refused,
}
