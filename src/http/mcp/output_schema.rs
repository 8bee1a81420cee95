//! The tools' output schemas, cut from the OpenAPI document's own component schemas.
//!
//! Invariant: a tool's output schema is the schema of the REST answer it returns, taken from
//! the same generated document as `openapi.json` (never written twice), made self-contained:
//! every component it reaches is under `$defs`, and nothing else is.

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};

use rmcp::model::JsonObject;
use serde_json::{Map, Value, json};

const COMPONENT_REF: &str = "#/components/schemas/";
const DEFS_REF: &str = "#/$defs/";

/// The OpenAPI document's component schemas, rendered once.
fn components() -> &'static Map<String, Value> {
    static COMPONENTS: OnceLock<Map<String, Value>> = OnceLock::new();
    COMPONENTS.get_or_init(|| {
        let document = serde_json::to_value(crate::http::openapi()).unwrap_or(Value::Null);
        match document.pointer("/components/schemas") {
            Some(Value::Object(schemas)) => schemas.clone(),
            _ => Map::new(),
        }
    })
}

/// A JSON Schema (an object at its root, as MCP asks) accepting what one of the `names`
/// components accepts.
pub(super) fn one_of(names: &[&str]) -> Arc<JsonObject> {
    let components = components();
    let mut reached = BTreeSet::new();
    let mut pending: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
    while let Some(name) = pending.pop() {
        if !reached.insert(name.clone()) {
            continue;
        }
        if let Some(schema) = components.get(&name) {
            collect_refs(schema, &mut pending);
        }
    }
    let defs: Map<String, Value> = reached
        .into_iter()
        .filter_map(|name| {
            let schema = components.get(&name)?.clone();
            Some((name, rewrite_refs(schema)))
        })
        .collect();
    let choices: Vec<Value> = names
        .iter()
        .map(|name| json!({ "$ref": format!("{DEFS_REF}{name}") }))
        .collect();
    let mut root = Map::new();
    root.insert("type".to_owned(), json!("object"));
    match <[Value; 1]>::try_from(choices) {
        Ok([single]) => {
            root.insert("$ref".to_owned(), single["$ref"].clone());
        }
        Err(choices) => {
            root.insert("oneOf".to_owned(), Value::Array(choices));
        }
    }
    root.insert("$defs".to_owned(), Value::Object(defs));
    Arc::new(root)
}

/// Push the component names `schema` refers to onto `into`.
fn collect_refs(schema: &Value, into: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::String(target)) = map.get("$ref")
                && let Some(name) = target.strip_prefix(COMPONENT_REF)
            {
                into.push(name.to_owned());
            }
            map.values().for_each(|value| collect_refs(value, into));
        }
        Value::Array(items) => items.iter().for_each(|value| collect_refs(value, into)),
        _ => {}
    }
}

/// `schema` with its component references pointing into `$defs`.
fn rewrite_refs(schema: Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(key, value)| match (key.as_str(), value) {
                    ("$ref", Value::String(target)) => {
                        let target = match target.strip_prefix(COMPONENT_REF) {
                            Some(name) => format!("{DEFS_REF}{name}"),
                            None => target,
                        };
                        (key, Value::String(target))
                    }
                    (_, value) => (key, rewrite_refs(value)),
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(rewrite_refs).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schema_carries_every_component_it_reaches_and_no_other() {
        let schema = one_of(&["SessionList"]);
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["$ref"], "#/$defs/SessionList");
        let defs = schema["$defs"].as_object().unwrap();
        assert!(defs.contains_key("SessionView"));
        assert!(!defs.contains_key("FleetHosts"));
        let text = serde_json::to_string(&*schema).unwrap();
        assert!(!text.contains(COMPONENT_REF), "{text}");
        let both = one_of(&["PruneResponse", "PruneAllResponse"]);
        assert_eq!(both["oneOf"].as_array().unwrap().len(), 2);
    }
}
