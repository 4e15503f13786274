//! CustomResourceDefinitions: the schema of each served version applied
//! to custom objects.
//!
//! A CRD written to the store becomes rows of the resource table at once
//! ([`register`]): one [`ResourceType`] per served version, all stored
//! under `/registry/<group>/<plural>/` at the storage version. The
//! conversion strategy is `None`: only `apiVersion` differs between
//! versions, which the server sets on the way in and out
//! (`conversion::served`).

pub mod columns;
pub mod structural;

use std::sync::Arc;

use serde_json::{json, Value};

use crate::resources::{self, ResourceType, RoundtripError};
use crate::status::Cause;

/// The group, version and plural of CustomResourceDefinitions.
pub const CRDS: (&str, &str, &str) = ("apiextensions.k8s.io", "v1", "customresourcedefinitions");

/// What a served version of a custom resource has beyond a built-in row.
#[derive(Debug)]
pub struct CustomVersion {
    /// The CRD's name (`widgets.example.com`).
    pub crd: String,
    /// The version's `schema.openAPIV3Schema`.
    pub schema: Value,
    /// Its `additionalPrinterColumns` (or the default Age column).
    pub columns: Vec<columns::Column>,
    /// The version objects are stored at.
    pub storage_version: &'static str,
    /// The scale subresource's paths, when served.
    pub scale: Option<ScalePaths>,
}

/// `subresources.scale` of a CRD version (paths as written: `.spec.replicas`).
#[derive(Debug, Clone)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: Option<String>,
}

fn leak(text: &str) -> &'static str {
    Box::leak(text.to_string().into_boxed_str())
}

fn leak_list(items: Vec<String>) -> &'static [&'static str] {
    let items: Vec<&'static str> = items.iter().map(|s| leak(s)).collect();
    Box::leak(items.into_boxed_slice())
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn decode_any(value: &Value) -> Result<(), serde_json::Error> {
    serde_json::from_value::<serde_json::Map<String, Value>>(value.clone()).map(|_| ())
}

fn roundtrip_same(value: &Value) -> Result<Value, RoundtripError> {
    Ok(value.clone())
}

fn schema_any(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::Schema::default()
}

/// The storage version of a CRD (`spec.versions[].storage`).
fn storage_version(crd: &Value) -> Option<&str> {
    crd.pointer("/spec/versions")?
        .as_array()?
        .iter()
        .find(|v| v["storage"].as_bool() == Some(true))
        .and_then(|v| v["name"].as_str())
}

/// The rows of every served version of `crd`.
pub fn rows_of(crd: &Value) -> Vec<ResourceType> {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let (Some(group), Some(plural), Some(kind), Some(storage)) = (
        spec["group"].as_str(),
        names["plural"].as_str(),
        names["kind"].as_str(),
        storage_version(crd),
    ) else {
        return Vec::new();
    };
    let group = leak(group);
    let plural = leak(plural);
    let kind = leak(kind);
    let storage = leak(storage);
    let list_kind = leak(
        names["listKind"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("{kind}List"))
            .as_str(),
    );
    let singular = names["singular"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_ascii_lowercase());
    let short_names = leak_list(strings(&names["shortNames"]));
    let categories = leak_list(strings(&names["categories"]));
    let namespaced = spec["scope"].as_str() != Some("Cluster");
    let crd_name = crate::object::name(crd).to_string();
    let reversed: Vec<&str> = group.rsplit('.').collect();
    let mut rows = Vec::new();
    for version in spec["versions"].as_array().into_iter().flatten() {
        if version["served"].as_bool() != Some(true) {
            continue;
        }
        let Some(name) = version["name"].as_str() else {
            continue;
        };
        let mut subresources = Vec::new();
        let subs = &version["subresources"];
        if subs.get("status").is_some() {
            subresources.push("status".to_string());
        }
        let scale = subs.get("scale").map(|s| ScalePaths {
            spec_replicas: s["specReplicasPath"].as_str().unwrap_or_default().into(),
            status_replicas: s["statusReplicasPath"].as_str().unwrap_or_default().into(),
            label_selector: s["labelSelectorPath"].as_str().map(str::to_string),
        });
        if scale.is_some() {
            subresources.push("scale".to_string());
        }
        rows.push(ResourceType {
            group,
            version: leak(name),
            kind,
            list_kind,
            plural,
            singular: singular.clone(),
            namespaced,
            short_names,
            categories,
            subresources: leak_list(subresources),
            decode: decode_any,
            roundtrip: roundtrip_same,
            schema: schema_any,
            definition: leak(&format!("{}.{name}.{kind}", reversed.join("."))),
            conversion: None,
            custom: Some(Arc::new(CustomVersion {
                crd: crd_name.clone(),
                schema: version
                    .pointer("/schema/openAPIV3Schema")
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object"})),
                columns: columns::of_version(version),
                storage_version: storage,
                scale,
            })),
        });
    }
    rows
}

/// Serves `crd`'s versions (replacing what an earlier version of it
/// served), unless it is being deleted.
pub fn register(crd: &Value) {
    let name = crate::object::name(crd);
    if crate::object::is_deleting(crd) {
        resources::unregister_custom(name);
        return;
    }
    resources::register_custom(name, rows_of(crd));
}

/// Sets what Kubernetes' CRD controllers set in `status`: the accepted
/// names and the NamesAccepted and Established conditions, so that clients
/// waiting for `condition=Established` go on at once.
pub fn accept(crd: &mut Value) {
    let names = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let now = crate::object::now();
    let before = crd.pointer("/status/conditions").cloned();
    let condition = |kind: &str, reason: &str, message: &str| {
        // An unchanged condition keeps its transition time.
        let since = before
            .as_ref()
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c["type"] == kind && c["status"] == "True")
            })
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(now));
        json!({
            "type": kind, "status": "True", "lastTransitionTime": since,
            "reason": reason, "message": message,
        })
    };
    let mut stored: Vec<String> = strings(
        crd.pointer("/status/storedVersions")
            .unwrap_or(&Value::Null),
    );
    if let Some(storage) = storage_version(crd) {
        if !stored.iter().any(|v| v == storage) {
            stored.push(storage.to_string());
        }
    }
    crd["status"] = json!({
        "acceptedNames": names,
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "storedVersions": stored,
    });
}

/// What Kubernetes refuses in a CRD beyond its type: the name must be
/// `<plural>.<group>`, exactly one version stored, every version with a
/// schema.
pub fn validate_definition(crd: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or_default();
    let plural = spec
        .pointer("/names/plural")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = crate::object::name(crd);
    if group.is_empty() {
        causes.push(cause(
            "FieldValueRequired",
            "spec.group",
            "Required value".into(),
        ));
    }
    if plural.is_empty() {
        causes.push(cause(
            "FieldValueRequired",
            "spec.names.plural",
            "Required value".into(),
        ));
    }
    if spec
        .pointer("/names/kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .is_empty()
    {
        causes.push(cause(
            "FieldValueRequired",
            "spec.names.kind",
            "Required value".into(),
        ));
    }
    if !name.is_empty() && name != format!("{plural}.{group}") {
        causes.push(cause(
            "FieldValueInvalid",
            "metadata.name",
            format!(
                "Invalid value: {}: must be spec.names.plural+\".\"+spec.group",
                skiff_machinery::quote::go_quote(name)
            ),
        ));
    }
    if !["Namespaced", "Cluster"].contains(&spec["scope"].as_str().unwrap_or_default()) {
        causes.push(cause(
            "FieldValueNotSupported",
            "spec.scope",
            format!(
                "Unsupported value: {}: supported values: \"Cluster\", \"Namespaced\"",
                skiff_machinery::quote::go_quote(spec["scope"].as_str().unwrap_or_default())
            ),
        ));
    }
    let versions = spec["versions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if versions.is_empty() {
        causes.push(cause(
            "FieldValueInvalid",
            "spec.versions",
            "Invalid value: null: must have exactly one version marked as storage version".into(),
        ));
    } else {
        let stored = versions
            .iter()
            .filter(|v| v["storage"].as_bool() == Some(true))
            .count();
        if stored != 1 {
            causes.push(cause(
                "FieldValueInvalid",
                "spec.versions",
                format!("Invalid value: {stored}: must have exactly one version marked as storage version"),
            ));
        }
    }
    for (i, version) in versions.iter().enumerate() {
        if version["name"].as_str().unwrap_or_default().is_empty() {
            causes.push(cause(
                "FieldValueRequired",
                &format!("spec.versions[{i}].name"),
                "Required value".into(),
            ));
        }
        match version.pointer("/schema/openAPIV3Schema") {
            None => causes.push(cause(
                "FieldValueRequired",
                &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                "Required value: schemas are required".into(),
            )),
            Some(schema) => {
                let path = format!("spec.versions[{i}].schema.openAPIV3Schema");
                let root_type = schema.get("type").and_then(Value::as_str).unwrap_or("");
                if !root_type.is_empty() && root_type != "object" {
                    causes.push(cause(
                        "FieldValueInvalid",
                        &format!("{path}.type"),
                        format!(
                            "Invalid value: {}: must be object at the root",
                            skiff_machinery::quote::go_quote(root_type)
                        ),
                    ));
                }
                check_schema_types(schema, &path, &mut causes);
            }
        }
    }
    if let Some(strategy) = spec.pointer("/conversion/strategy").and_then(Value::as_str) {
        if strategy != "None" {
            causes.push(cause(
                "FieldValueNotSupported",
                "spec.conversion.strategy",
                format!(
                    "Unsupported value: {}: supported values: \"None\"",
                    skiff_machinery::quote::go_quote(strategy)
                ),
            ));
        }
    }
    causes
}

/// The OpenAPI types a structural schema may name.
const SCHEMA_TYPES: &[&str] = &["array", "boolean", "integer", "number", "object", "string"];

/// Every `type` of a schema and of the schemas inside it is one Kubernetes
/// knows, and an array says what its items are; paths as Kubernetes
/// writes them (`properties[spec].type`).
fn check_schema_types(schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    let Some(object) = schema.as_object() else {
        return;
    };
    match object.get("type") {
        Some(Value::String(kind)) if !kind.is_empty() && !SCHEMA_TYPES.contains(&kind.as_str()) => {
            let listed: Vec<String> = SCHEMA_TYPES
                .iter()
                .map(|t| skiff_machinery::quote::go_quote(t))
                .collect();
            causes.push(cause(
                "FieldValueNotSupported",
                &format!("{path}.type"),
                format!(
                    "Unsupported value: {}: supported values: {}",
                    skiff_machinery::quote::go_quote(kind),
                    listed.join(", ")
                ),
            ));
        }
        Some(Value::String(kind)) if kind == "array" && object.get("items").is_none() => {
            causes.push(cause(
                "FieldValueRequired",
                &format!("{path}.items"),
                "Required value: must be specified".into(),
            ));
        }
        _ => {}
    }
    if let Some(properties) = object.get("properties").and_then(Value::as_object) {
        for (name, inner) in properties {
            check_schema_types(inner, &format!("{path}.properties[{name}]"), causes);
        }
    }
    for name in ["items", "additionalProperties", "not"] {
        if let Some(inner) = object.get(name) {
            check_schema_types(inner, &format!("{path}.{name}"), causes);
        }
    }
    for name in ["allOf", "anyOf", "oneOf"] {
        for (i, inner) in object
            .get(name)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            check_schema_types(inner, &format!("{path}.{name}[{i}]"), causes);
        }
    }
}

fn cause(reason: &'static str, field: &str, message: String) -> Cause {
    Cause {
        reason,
        message,
        field: field.to_string(),
    }
}

/// The value at a CRD path (`.spec.replicas`) of `object`.
pub fn at_path<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let mut at = object;
    for field in path
        .trim_start_matches('.')
        .split('.')
        .filter(|f| !f.is_empty())
    {
        at = at.get(field)?;
    }
    Some(at)
}

/// Sets the value at a CRD path (`.spec.replicas`) of `object`, making the
/// objects on the way.
pub fn set_path(object: &mut Value, path: &str, value: Value) {
    let mut at = object;
    for field in path
        .trim_start_matches('.')
        .split('.')
        .filter(|f| !f.is_empty())
    {
        if !at.is_object() {
            *at = json!({});
        }
        at = at
            .as_object_mut()
            .expect("made an object")
            .entry(field.to_string())
            .or_insert(Value::Null);
    }
    *at = value;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn widgets() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
                "versions": [
                    {"name": "v1", "served": true, "storage": true,
                     "schema": {"openAPIV3Schema": {"type": "object"}},
                     "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}}},
                    {"name": "v1beta1", "served": true, "storage": false,
                     "schema": {"openAPIV3Schema": {"type": "object"}}},
                ],
            },
        })
    }

    #[test]
    fn every_served_version_is_a_row_stored_at_the_storage_version() {
        let rows = rows_of(&widgets());
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].storage_prefix(), rows[1].storage_prefix());
        assert_eq!(rows[0].storage_prefix(), "/registry/example.com/widgets/");
        assert_eq!(rows[0].subresources, ["status", "scale"]);
        assert!(rows[1].subresources.is_empty());
        assert_eq!(rows[1].custom.as_ref().unwrap().storage_version, "v1");
        assert_eq!(rows[0].definition, "com.example.v1.Widget");
        assert!(validate_definition(&widgets()).is_empty());
    }

    #[test]
    fn definitions_are_checked() {
        let mut crd = widgets();
        crd["metadata"]["name"] = json!("gadgets.example.com");
        crd["spec"]["versions"][1]["storage"] = json!(true);
        let fields: Vec<String> = validate_definition(&crd)
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(fields, ["metadata.name", "spec.versions"]);
    }

    #[test]
    fn schema_types_are_ones_kubernetes_knows() {
        let mut crd = widgets();
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = json!({"type": "object",
            "properties": {"spec": {"type": "object", "properties": {
                "size": {"type": "nonsense"},
                "tags": {"type": "array"},
                "either": {"anyOf": [{"type": "integer"}, {"type": "text"}]},
                "labels": {"type": "object", "additionalProperties": {"type": "map"}}}}}});
        crd["spec"]["versions"][1]["schema"]["openAPIV3Schema"] = json!({"type": "string"});
        let lines: Vec<String> = validate_definition(&crd)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let supported = "supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\"";
        let schema = "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties";
        assert_eq!(lines, vec![
            format!("{schema}[either].anyOf[1].type: Unsupported value: \"text\": {supported}"),
            format!("{schema}[labels].additionalProperties.type: Unsupported value: \"map\": {supported}"),
            format!("{schema}[size].type: Unsupported value: \"nonsense\": {supported}"),
            format!("{schema}[tags].items: Required value: must be specified"),
            "spec.versions[1].schema.openAPIV3Schema.type: Invalid value: \"string\": must be object at the root".to_string(),
        ]);
    }

    #[test]
    fn paths_read_and_write() {
        let mut object = json!({"spec": {"replicas": 2}});
        assert_eq!(at_path(&object, ".spec.replicas"), Some(&json!(2)));
        set_path(&mut object, ".status.replicas", json!(3));
        assert_eq!(object["status"]["replicas"], 3);
    }
}
