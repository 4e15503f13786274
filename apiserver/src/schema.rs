//! The schema of the served types, walked field by field: which definition
//! a field holds, whether it is a map, and what a list's items are. Shared
//! by strategic merge patch and server-side apply; how lists merge is
//! `patch::list_strategy`'s business, not this module's.

use std::collections::HashMap;
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
#[derive(Clone, Copy, Debug)]
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
    owner
        .and_then(|owner| FIELDS.get(owner)?.get(name).copied())
        .unwrap_or(Field {
            shape: Shape::Struct(None),
            items: None,
        })
}

/// The fields of the definition `owner`; `None` for a definition without
/// properties (free-form JSON, strings such as Quantity and Time).
pub(crate) fn fields_of(owner: &str) -> Option<&'static HashMap<&'static str, Field<'static>>> {
    FIELDS.get(owner)
}

/// Every definition's fields, worked out once: `field_of` runs for every
/// field of every object written (server-side apply's field sets, strategic
/// merge), and reading the schema's JSON each time was a visible share of
/// a create's cost.
static FIELDS: LazyLock<HashMap<&'static str, HashMap<&'static str, Field<'static>>>> =
    LazyLock::new(|| {
        let definitions: &'static Map<String, Value> = &DEFINITIONS;
        definitions
            .iter()
            .filter_map(|(owner, definition)| {
                let properties = definition.get("properties")?.as_object()?;
                let fields = properties
                    .iter()
                    .map(|(name, schema)| (name.as_str(), field_from_schema(schema)))
                    .collect();
                Some((owner.as_str(), fields))
            })
            .collect()
    });

/// What the schema of one property says it holds.
fn field_from_schema(schema: &Value) -> Field<'_> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_say_what_the_schema_holds() {
        let spec = field_of(Some("io.k8s.api.core.v1.Pod"), "spec");
        assert!(matches!(
            spec.shape,
            Shape::Struct(Some("io.k8s.api.core.v1.PodSpec"))
        ));
        let containers = field_of(Some("io.k8s.api.core.v1.PodSpec"), "containers");
        assert_eq!(containers.items, Some("io.k8s.api.core.v1.Container"));
        let selector = field_of(Some("io.k8s.api.core.v1.PodSpec"), "nodeSelector");
        assert!(matches!(selector.shape, Shape::Values(None)));
        // Unknown owners and fields know nothing.
        let unknown = field_of(Some("io.k8s.api.core.v1.PodSpec"), "noSuchField");
        assert!(matches!(unknown.shape, Shape::Struct(None)) && unknown.items.is_none());
        assert!(matches!(field_of(None, "spec").shape, Shape::Struct(None)));
    }
}
