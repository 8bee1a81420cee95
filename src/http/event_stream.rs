//! The words of the `/events` stream: each event's name, and the OpenAPI schema of one event.
//!
//! Invariant: the names sent and the names documented come from [`EventName`] alone, and each
//! event's `data` is documented by the schema of the type it is encoded from.

use std::borrow::Cow;

use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use super::events::{SessionAdded, SessionChanged, SessionRemoved};
use super::wire::SessionList;

/// The `event:` field of an event on the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventName {
    /// The whole picture (`SessionList`): replace everything.
    Snapshot,
    /// A new session (`SessionAdded`).
    SessionAdded,
    /// A session's state or record changed (`SessionChanged`).
    SessionChanged,
    /// A session left (`SessionRemoved`).
    SessionRemoved,
}

impl EventName {
    /// Every name, in the order the schema lists them.
    pub const ALL: [Self; 4] = [
        Self::Snapshot,
        Self::SessionAdded,
        Self::SessionChanged,
        Self::SessionRemoved,
    ];

    /// The name as sent.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Snapshot => "snapshot",
            Self::SessionAdded => "session.added",
            Self::SessionChanged => "session.changed",
            Self::SessionRemoved => "session.removed",
        }
    }

    /// The component schema of the JSON in this event's `data`.
    fn data_schema(self) -> Cow<'static, str> {
        match self {
            Self::Snapshot => SessionList::name(),
            Self::SessionAdded => SessionAdded::name(),
            Self::SessionChanged => SessionChanged::name(),
            Self::SessionRemoved => SessionRemoved::name(),
        }
    }
}

/// One event of `GET /events` as a client parses it: `id`, `event`, and `data` (one line of
/// JSON whose schema depends on `event`). Documentation only: events are written by
/// [`super::events`].
pub struct StreamEvent;

impl PartialSchema for StreamEvent {
    fn schema() -> RefOr<Schema> {
        let mut one_of = OneOfBuilder::new();
        for name in EventName::ALL {
            let mut data = ObjectBuilder::new()
                .schema_type(SchemaType::Type(Type::String))
                .content_media_type("application/json")
                .description(Some(format!("A JSON document: `{}`", name.data_schema())))
                .build();
            // utoipa has no `contentSchema` keyword; it goes in beside the others.
            let reference = Ref::from_schema_name(name.data_schema());
            if let Ok(reference) = serde_json::to_value(reference) {
                data.extensions
                    .get_or_insert_with(Default::default)
                    .insert("contentSchema".to_owned(), reference);
            }
            one_of = one_of.item(
                ObjectBuilder::new()
                    .title(Some(name.as_str()))
                    .property(
                        "id",
                        ObjectBuilder::new()
                            .schema_type(SchemaType::Type(Type::String))
                            .pattern(Some("^[0-9]+$"))
                            .description(Some("A decimal that only grows")),
                    )
                    .required("id")
                    .property(
                        "event",
                        ObjectBuilder::new()
                            .schema_type(SchemaType::Type(Type::String))
                            .enum_values(Some([name.as_str()])),
                    )
                    .required("event")
                    .property("data", data)
                    .required("data"),
            );
        }
        one_of
            .description(Some(
                "One event of the stream: its `id`, its `event` name, and its `data`",
            ))
            .into()
    }
}

impl ToSchema for StreamEvent {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.extend([
            (SessionList::name().into_owned(), SessionList::schema()),
            (SessionAdded::name().into_owned(), SessionAdded::schema()),
            (
                SessionChanged::name().into_owned(),
                SessionChanged::schema(),
            ),
            (
                SessionRemoved::name().into_owned(),
                SessionRemoved::schema(),
            ),
        ]);
        SessionList::schemas(schemas);
        SessionAdded::schemas(schemas);
        SessionChanged::schemas(schemas);
        SessionRemoved::schemas(schemas);
    }
}
