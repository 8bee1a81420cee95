//! The words of the event streams (`/events`, `/fleet/events`): each event's name, and the
//! OpenAPI schema of one event.
//!
//! Invariant: the names sent and the names documented come from [`EventName`] alone, and each
//! event's `data` is documented by the schema of the type it is encoded from.

use std::borrow::Cow;

use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use crate::wire::{ResourcesEvent, SessionAdded, SessionChanged, SessionList, SessionRemoved};

pub use crate::wire::EventName;

/// One event of `GET /events` as a client parses it: `id`, `event`, and `data` (one line of
/// JSON whose schema depends on `event`). Documentation only: events are written by
/// [`super::events`].
pub struct StreamEvent;

impl PartialSchema for StreamEvent {
    fn schema() -> RefOr<Schema> {
        // The names `/events` sends, in the order its schema lists them, with their data.
        one_event_schema([
            (EventName::Snapshot, SessionList::name()),
            (EventName::SessionAdded, SessionAdded::name()),
            (EventName::SessionChanged, SessionChanged::name()),
            (EventName::SessionRemoved, SessionRemoved::name()),
            (EventName::Resources, ResourcesEvent::name()),
        ])
    }
}

/// The schema of one event of a stream that sends `events`: each name with the component
/// schema of its `data`.
pub(super) fn one_event_schema(
    events: impl IntoIterator<Item = (EventName, Cow<'static, str>)>,
) -> RefOr<Schema> {
    let mut one_of = OneOfBuilder::new();
    for (name, data_schema) in events {
        let mut data = ObjectBuilder::new()
            .schema_type(SchemaType::Type(Type::String))
            .content_media_type("application/json")
            .description(Some(format!("A JSON document: `{data_schema}`")))
            .build();
        // utoipa has no `contentSchema` keyword; it goes in beside the others.
        let reference = Ref::from_schema_name(data_schema);
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
            (
                ResourcesEvent::name().into_owned(),
                ResourcesEvent::schema(),
            ),
        ]);
        SessionList::schemas(schemas);
        SessionAdded::schemas(schemas);
        SessionChanged::schemas(schemas);
        SessionRemoved::schemas(schemas);
        ResourcesEvent::schemas(schemas);
    }
}
