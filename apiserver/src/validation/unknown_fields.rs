//! Fields the type does not have: the `fieldValidation=Strict` refusal and
//! the pruning of what Kubernetes drops when it decodes a request.

use super::*;

/// The paths (`spec.containers[0].foo`) of the fields of `object` that its
/// k8s-openapi type does not know, for `fieldValidation=Strict` (an error)
/// or `Warn` (a warning each). Fields sent as `null` are not reported.
/// Empty when the object does not decode: [`validate_object`] reports that.
pub fn strict_unknown_fields(resource: &ResourceType, object: &Value) -> Vec<String> {
    if let Some(custom) = &resource.custom {
        // What the schema keeps is what it knows.
        let mut known = object.clone();
        crate::crd::structural::normalize(&custom.schema, &mut known);
        let mut unknown = Vec::new();
        collect_unknown(object, &known, "", &mut unknown);
        return unknown;
    }
    let Ok(known) = (resource.roundtrip)(object) else {
        return Vec::new();
    };
    let mut unknown = Vec::new();
    collect_unknown(object, &known, "", &mut unknown);
    unknown
}

fn collect_unknown(sent: &Value, known: &Value, path: &str, unknown: &mut Vec<String>) {
    match (sent, known) {
        (Value::Object(sent), Value::Object(known)) => {
            for (key, value) in sent.iter().filter(|(_, v)| !v.is_null()) {
                let at = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match known.get(key) {
                    None => unknown.push(at),
                    Some(known) => collect_unknown(value, known, &at, unknown),
                }
            }
        }
        (Value::Array(sent), Value::Array(known)) => {
            for (i, (value, known)) in sent.iter().zip(known).enumerate() {
                collect_unknown(value, known, &format!("{path}[{i}]"), unknown);
            }
        }
        _ => {}
    }
}

/// Removes the fields `resource`'s type does not have, as Kubernetes drops
/// them when it decodes a request (after `fieldValidation` has had its
/// say). Known fields keep what was sent, right or wrong, for validation
/// to judge.
pub fn prune_unknown_fields(resource: &ResourceType, object: &mut Value) {
    if let Some(custom) = &resource.custom {
        // Pruned, nulls dropped and defaulted, as Kubernetes decodes a
        // custom resource.
        crate::crd::structural::normalize(&custom.schema, object);
        return;
    }
    if resource.conversion.is_some() {
        // Served at another version than stored: its own types know.
        prune_by_roundtrip(resource, object);
        return;
    }
    prune_struct(object, resource.definition);
}

/// Keeps the fields (and nulls) of an object of `definition` that the
/// schema knows, and walks into them: the fields serde's typed round trip
/// keeps, without decoding into the type and encoding it back (which
/// cost a create more than a tenth of its time).
pub(super) fn prune_struct(value: &mut Value, definition: &str) {
    let Some(fields) = crate::schema::fields_of(definition) else {
        return;
    };
    let Value::Object(map) = value else {
        return;
    };
    map.retain(|key, value| value.is_null() || fields.contains_key(key.as_str()));
    for (key, value) in map.iter_mut() {
        if let Some(field) = fields.get(key.as_str()) {
            prune_field(value, field);
        }
    }
}

fn prune_field(value: &mut Value, field: &crate::schema::Field<'_>) {
    use crate::schema::Shape;
    match (value, field.shape) {
        (Value::Array(items), _) => {
            if let Some(definition) = field.items {
                for item in items {
                    prune_struct(item, definition);
                }
            }
        }
        (value @ Value::Object(_), Shape::Struct(Some(definition))) => {
            prune_struct(value, definition)
        }
        (Value::Object(map), Shape::Values(Some(definition))) => {
            for item in map.values_mut() {
                prune_struct(item, definition);
            }
        }
        _ => {}
    }
}

/// Prunes to what the resource's type keeps through a decode and encode;
/// an object the type cannot read is left alone.
pub(super) fn prune_by_roundtrip(resource: &ResourceType, object: &mut Value) {
    let Ok(known) = (resource.roundtrip)(object) else {
        return;
    };
    prune(object, &known);
}

fn prune(sent: &mut Value, known: &Value) {
    match (sent, known) {
        (Value::Object(sent), Value::Object(known)) => {
            sent.retain(|key, value| value.is_null() || known.contains_key(key));
            for (key, value) in sent.iter_mut() {
                if let Some(known) = known.get(key) {
                    prune(value, known);
                }
            }
        }
        (Value::Array(sent), Value::Array(known)) => {
            for (value, known) in sent.iter_mut().zip(known) {
                prune(value, known);
            }
        }
        _ => {}
    }
}

/// The 400 a Kubernetes apiserver answers under `fieldValidation=Strict`:
/// `Pod in version "v1" cannot be handled as a Pod: strict decoding error:
/// unknown field "spec.foo"`. `problems` are worded already (`unknown
/// field "spec.foo"`, `duplicate field "metadata.name"`).
pub fn strict_decoding_error(resource: &ResourceType, problems: &[String]) -> ApiError {
    decode::cannot_be_handled(
        resource,
        &format!("strict decoding error: {}", problems.join(", ")),
    )
}
