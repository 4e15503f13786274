//! The schema of the served types, walked field by field: which definition
//! a field holds, whether it is a map, and what a list's items are. Shared
//! by strategic merge patch and server-side apply; how lists merge is
//! `patch::list_strategy`'s business, not this module's.

use std::sync::LazyLock;

use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};

use crate::resources;

/// Every schema definition of the served types, by name.
pub(crate) static DEFINITIONS: LazyLock<Map<String, Value>> = LazyLock::new(|| {
    let mut generator = SchemaSettings::openapi3().into_generator();
    for resource in resources::served() {
        (resource.schema)(&mut generator);
    }
    generator.take_definitions(true)
});

/// What the schema says a value at some place in the object is.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Shape<'s> {
    /// An object of this definition (`None`: not known, so lists replace).
    Struct(Option<&'s str>),
    /// A map whose values are objects of this definition.
    Values(Option<&'s str>),
}

/// What the schema says a field holds: its own definition and, for lists,
/// the definition of the items.
pub(crate) struct Field<'s> {
    pub(crate) shape: Shape<'s>,
    pub(crate) items: Option<&'s str>,
}

pub(crate) fn definition_name(schema: &Value) -> Option<&str> {
    let reference = schema
        .get("$ref")
        .or_else(|| schema.get("allOf")?.get(0)?.get("$ref"))?
        .as_str()?;
    reference.rsplit('/').next()
}

/// The field `name` of an object of the definition `owner`.
pub(crate) fn field_of<'s>(owner: Option<&str>, name: &str) -> Field<'s> {
    let unknown = Field {
        shape: Shape::Struct(None),
        items: None,
    };
    let Some(schema) = owner
        .and_then(|d| DEFINITIONS.get(d))
        .and_then(|d| d.get("properties")?.get(name))
    else {
        return unknown;
    };
    match schema.get("type").and_then(Value::as_str) {
        Some("array") => Field {
            shape: Shape::Struct(None),
            items: schema.get("items").and_then(definition_name),
        },
        Some("object") if schema.get("additionalProperties").is_some() => Field {
            shape: Shape::Values(schema.get("additionalProperties").and_then(definition_name)),
            items: None,
        },
        _ => Field {
            shape: Shape::Struct(definition_name(schema)),
            items: None,
        },
    }
}
