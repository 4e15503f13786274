//! JSON Merge Patch (RFC 7386): objects merge member by member, `null`
//! removes a member, anything else (arrays included) replaces.

use serde_json::{Map, Value};

use super::PatchError;

/// Applies `patch` to a copy of `document`. Kubernetes accepts only an
/// object as a merge patch, so anything else is malformed.
pub fn apply(document: &Value, patch: &Value) -> Result<Value, PatchError> {
    if !patch.is_object() {
        return Err(PatchError::Malformed(
            "a merge patch must be a JSON object".into(),
        ));
    }
    let mut doc = document.clone();
    merge(&mut doc, patch);
    Ok(doc)
}

fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(members) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(target) = target {
        for (key, value) in members {
            if value.is_null() {
                target.remove(key);
            } else {
                merge(target.entry(key.as_str()).or_insert(Value::Null), value);
            }
        }
    }
}
