//! Served versions other than a resource's storage version, converted to and
//! from it at the JSON level (k8s-openapi no longer carries their types).
//! One file per converted type; what the server does with them at its
//! boundary is `served`. Not defaulting or validation of the storage
//! version: that runs on the converted object, as for any request.

pub mod cron_job;
pub mod priority_class;
pub(crate) mod served;

use schemars::SchemaGenerator;
use serde_json::{Map, Value};

/// A served version converted to and from its storage version: the
/// resource table builds its row from this (`resources::converted`).
pub trait ServedVersion {
    /// The storage version's k8s-openapi type (same group, kind and plural).
    type Storage;
    const VERSION: &'static str;
    /// The OpenAPI definition of the served kind, e.g.
    /// `io.k8s.api.batch.v1beta1.CronJob`.
    const DEFINITION: &'static str;
    /// The `Warning` Kubernetes sends on every request at this version.
    const DEPRECATION: Option<&'static str>;
    /// Fills in what this version defaults, as Kubernetes does when it
    /// decodes a whole object at this version (not an applied
    /// configuration, which holds only what its manager set).
    fn set_defaults(object: &mut Value);
    /// An object (or an applied configuration) of this version as the
    /// storage version.
    fn to_storage(object: &Value) -> Value;
    /// A stored object as this version.
    fn from_storage(object: &Value) -> Value;
    /// Adds this version's definitions to `generator`, derived from the
    /// storage version's, which are there already.
    fn add_definitions(generator: &mut SchemaGenerator);
}

/// A field renamed (or not) between a served version and the storage
/// version: (served name, storage name).
pub type FieldMap = &'static [(&'static str, &'static str)];

/// Which way a conversion goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    ToStorage,
    FromStorage,
}

/// `object` with its fields named as `direction` asks by `fields`, each
/// value passed through `convert` (given the field's name on the side it
/// comes from). Fields neither version knows are kept as they are, so that
/// the storage version prunes them (or strict validation, run before, has
/// refused them) exactly as for a request at that version.
pub fn map_fields(
    object: &Value,
    fields: FieldMap,
    direction: Direction,
    convert: impl Fn(&str, &Value) -> Value,
) -> Value {
    let Value::Object(map) = object else {
        return object.clone();
    };
    let rename = |key: &str| -> String {
        let found = fields.iter().find(|(served, storage)| match direction {
            Direction::ToStorage => *served == key,
            Direction::FromStorage => *storage == key,
        });
        match (found, direction) {
            (Some((_, storage)), Direction::ToStorage) => storage.to_string(),
            (Some((served, _)), Direction::FromStorage) => served.to_string(),
            (None, _) => key.to_string(),
        }
    };
    let out: Map<String, Value> = map
        .iter()
        .map(|(key, value)| (rename(key), convert(key, value)))
        .collect();
    Value::Object(out)
}

/// Sets `field` of `object` to `value` when it is absent or null.
pub fn default_field(object: &mut Value, field: &str, value: Value) {
    if let Value::Object(map) = object {
        if map.get(field).is_none_or(Value::is_null) {
            map.insert(field.to_string(), value);
        }
    }
}

/// Copies each definition `from` of `renames` to `to`, with every `$ref` to
/// one of the `from`s pointing at its `to` instead: a served version's
/// schema derived from the storage version's. `patch` then applies the
/// differences between the two versions to the copies.
pub fn derive_definitions(
    generator: &mut SchemaGenerator,
    renames: &[(&str, &str)],
    patch: impl Fn(&str, &mut Value),
) {
    let definitions = generator.definitions_mut();
    for (from, to) in renames {
        let Some(mut copy) = definitions.get(*from).cloned() else {
            continue;
        };
        retarget_refs(&mut copy, renames);
        patch(to, &mut copy);
        definitions.insert(to.to_string(), copy);
    }
}

fn retarget_refs(schema: &mut Value, renames: &[(&str, &str)]) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                match (key.as_str(), value) {
                    ("$ref", Value::String(reference)) => {
                        if let Some((path, name)) = reference.rsplit_once('/') {
                            if let Some((_, to)) = renames.iter().find(|(from, _)| *from == name) {
                                *reference = format!("{path}/{to}");
                            }
                        }
                    }
                    (_, value) => retarget_refs(value, renames),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| retarget_refs(v, renames)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const FIELDS: FieldMap = &[("old", "new"), ("same", "same")];

    #[test]
    fn fields_are_renamed_both_ways_and_unknown_ones_kept() {
        let served = json!({"old": 1, "same": 2, "unknown": 3});
        let stored = map_fields(&served, FIELDS, Direction::ToStorage, |_, v| v.clone());
        assert_eq!(stored, json!({"new": 1, "same": 2, "unknown": 3}));
        let back = map_fields(&stored, FIELDS, Direction::FromStorage, |_, v| v.clone());
        assert_eq!(back, served);
    }

    #[test]
    fn defaults_fill_only_absent_fields() {
        let mut object = json!({"a": 1, "b": null});
        default_field(&mut object, "a", json!(2));
        default_field(&mut object, "b", json!(3));
        default_field(&mut object, "c", json!(4));
        assert_eq!(object, json!({"a": 1, "b": 3, "c": 4}));
    }

    #[test]
    fn derived_definitions_point_at_each_other() {
        let mut generator = schemars::generate::SchemaSettings::openapi3().into_generator();
        let definitions = generator.definitions_mut();
        definitions.insert(
            "v1.A".into(),
            json!({"properties": {"b": {"$ref": "#/components/schemas/v1.B"}, "c": {"$ref": "#/components/schemas/v1.C"}}}),
        );
        definitions.insert("v1.B".into(), json!({"type": "object"}));
        derive_definitions(
            &mut generator,
            &[("v1.A", "v2.A"), ("v1.B", "v2.B")],
            |name, schema| {
                if name == "v2.B" {
                    schema["description"] = json!("B at v2");
                }
            },
        );
        let definitions = generator.definitions();
        assert_eq!(
            definitions["v2.A"]["properties"]["b"]["$ref"],
            "#/components/schemas/v2.B"
        );
        // Definitions both versions share stay shared.
        assert_eq!(
            definitions["v2.A"]["properties"]["c"]["$ref"],
            "#/components/schemas/v1.C"
        );
        assert_eq!(definitions["v2.B"]["description"], "B at v2");
        assert_eq!(
            definitions["v1.A"]["properties"]["b"]["$ref"],
            "#/components/schemas/v1.B"
        );
    }
}
