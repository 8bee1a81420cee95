//! What a request names besides its body: the session in the path, and the query parameters of
//! the sessions API's reads (`GET /sessions`, `GET /sessions/{id}`, `GET /events`).
//!
//! Invariant: each `include` parameter is documented with the pattern of the words
//! `http::include` reads there (a test holds them equal).

use serde::Deserialize;
use utoipa::IntoParams;

/// The session named in a path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SessionPath {
    /// The session id (murmur's are `ses_` + 32 hex digits).
    #[param(
        pattern = "^[A-Za-z0-9_-]{1,128}$",
        example = "ses_0193a4c2e1f07a3b9c5d2e4f6a8b0c1d"
    )]
    pub id: String,
}

/// The pattern the OpenAPI document gives every `include` parameter of `GET /sessions`
/// (`http::include` reads these words).
pub(crate) const INCLUDE_PATTERN: &str = "^(card|resources)(,(card|resources))*$";

/// The pattern of an `include` that takes `resources` alone (one session, `/events`).
const RESOURCES_ONLY_PATTERN: &str = "^resources(,resources)*$";

/// The schema of the `include` parameter of `GET /sessions/{id}`: `resources` only (one
/// session's card is `GET /sessions/{id}/card`).
fn session_include_schema() -> utoipa::openapi::Object {
    include_parameter(
        RESOURCES_ONLY_PATTERN,
        "`resources` adds what the session's process costs: CPU, memory, threads (`null` \
         for a process that is not confirmed). Its card is `GET /sessions/{id}/card`.",
        "resources",
    )
}

/// The schema of the `include` parameter of `GET /events`: `resources` only.
fn events_include_schema() -> utoipa::openapi::Object {
    include_parameter(
        RESOURCES_ONLY_PATTERN,
        "`resources` adds a `resources` event after each periodic pass: what every \
         confirmed session's process costs.",
        "resources",
    )
}

/// An `include` parameter's schema: a string of `pattern`. utoipa takes only a literal
/// `pattern` and drops the field's doc beside `schema_with`, so each caller gives its doc here.
fn include_parameter(pattern: &str, description: &str, example: &str) -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .pattern(Some(pattern))
        .description(Some(description))
        .examples([example])
        .build()
}

/// Filters and options of `GET /sessions`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Comma-separated states to keep: `live`, `unreachable`, `gone`.
    #[param(
        example = "live,unreachable",
        pattern = "^(live|unreachable|gone)(,(live|unreachable|gone))*$"
    )]
    pub status: Option<String>,
    /// `false` runs layers 1–2 only (no door probes). Default `true`.
    #[param(example = false)]
    pub probe: Option<bool>,
    /// Members to add to each session, as [`include_schema`] documents them.
    #[param(schema_with = include_schema)]
    pub include: Option<String>,
    /// Comma-separated capsule names to keep (the record's `capsule_name`).
    #[param(example = "researcher,writer", pattern = "^[^,]+(,[^,]+)*$")]
    pub capsule: Option<String>,
    /// Comma-separated skills: keep live sessions whose verified card lists a skill with one
    /// of them as its `id` or among its `tags`. Needs the probe.
    #[param(example = "summarize,nlp", pattern = "^[^,]+(,[^,]+)*$")]
    pub skill: Option<String>,
    /// Answer one page of at most this many sessions, with `next_cursor`. Only the page's
    /// sessions are probed (layers 1–2 are read for every record: they order the list).
    #[param(minimum = 1, maximum = 10000, example = 500)]
    pub limit: Option<u32>,
    /// The `next_cursor` of the page before (with `limit`): the page after it.
    pub cursor: Option<String>,
}

/// The schema of the `include` parameter of `GET /sessions`, pattern [`INCLUDE_PATTERN`].
fn include_schema() -> utoipa::openapi::Object {
    include_parameter(
        INCLUDE_PATTERN,
        "Comma-separated members to add to each session: `card` (the agent card its door \
         served in the probe that verified it, `null` for a session that is not live; no \
         second request to any door; needs the probe) and `resources` (what its process \
         costs: CPU, memory, threads; `null` for a process that is not confirmed).",
        "card",
    )
}

/// Options of `GET /sessions/{id}`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ProbeQuery {
    /// `false` runs layers 1–2 only (no door probe). Default `true`.
    pub probe: Option<bool>,
    /// Comma-separated members to add to the session: `resources` (what its process costs).
    #[param(schema_with = session_include_schema)]
    pub include: Option<String>,
}

/// Options of `GET /events`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// `resources` adds a `resources` event after each periodic pass: what every confirmed
    /// session's process costs.
    #[param(schema_with = events_include_schema)]
    pub include: Option<String>,
}

#[cfg(all(test, feature = "server"))]
mod tests {
    use super::*;

    /// The `include` patterns the document gives are the words `include` reads there.
    #[test]
    fn include_parameters_carry_the_include_pattern() {
        let document = serde_json::to_value(crate::http::openapi()).expect("the document");
        let patterns = [
            ("/sessions", INCLUDE_PATTERN),
            ("/sessions/{id}", RESOURCES_ONLY_PATTERN),
            ("/events", RESOURCES_ONLY_PATTERN),
        ];
        for (path, pattern) in patterns {
            let parameters = document["paths"][path]["get"]["parameters"]
                .as_array()
                .expect("parameters");
            let include = parameters
                .iter()
                .find(|p| p["name"] == "include")
                .expect("an include parameter");
            assert_eq!(include["schema"]["pattern"], pattern, "{path}");
        }
    }
}
