//! Whether an object decodes as its type, and the errors Kubernetes'
//! decoder gives when it does not: a 400 `… cannot be handled as a …` for
//! a body (create, update), a 422 on the field `patch` for the result of a
//! JSON, merge or strategic merge patch. A wrong JSON type is worded as
//! Go's `encoding/json` words it, from the schema of the k8s-openapi type;
//! other failures keep serde's words. Not value validation.

use serde_json::Value;
use serde_path_to_error::Segment;

use super::{cause, go_quote, quantities};
use crate::resources::{ResourceType, RoundtripError};
use crate::schema::{definition_name, DEFINITIONS};
use crate::status::ApiError;

/// `Pod in version "v1" cannot be handled as a Pod: …`, as Kubernetes
/// prefixes every decoding failure of a request body.
pub(super) fn cannot_be_handled(resource: &ResourceType, detail: &str) -> ApiError {
    ApiError::bad_request(format!(
        "{kind} in version {version} cannot be handled as a {kind}: {detail}",
        kind = resource.kind,
        version = go_quote(resource.version),
    ))
}

/// A 400 when `object` (a request body, or what a write path made of
/// one) does not decode as `resource`'s type.
pub fn check_decodes(resource: &ResourceType, object: &Value) -> Result<(), ApiError> {
    match decode_error(resource, object) {
        Some(detail) => Err(cannot_be_handled(resource, &detail)),
        None => Ok(()),
    }
}

/// A 422 on the field `patch` when the result of a JSON, merge or
/// strategic merge patch does not decode, as Kubernetes' patch handler
/// answers: the value shown is the patched object (JSON and merge
/// patches) or the patch itself as Go prints a map (strategic merge).
pub fn check_patched(
    resource: &ResourceType,
    strategic: bool,
    patch: &Value,
    patched: &Value,
) -> Result<(), ApiError> {
    let Some(detail) = decode_error(resource, patched) else {
        return Ok(());
    };
    let shown = match strategic {
        true => go_quote(&go_value(patch)),
        false => go_quote(&patched.to_string()),
    };
    let message = format!("Invalid value: {shown}: {detail}");
    Err(ApiError::invalid(
        "",
        "",
        "",
        "",
        vec![cause("FieldValueInvalid", "patch", message)],
    ))
}

/// Why `object` does not decode as `resource`'s type; `None` when it does.
fn decode_error(resource: &ResourceType, object: &Value) -> Option<String> {
    let Err(plain) = (resource.decode)(object) else {
        // Our types keep a quantity as its text; Kubernetes' parse it.
        return quantities::first_unparsable(resource, object).map(|err| err.to_string());
    };
    Some(match (resource.roundtrip)(object) {
        Err(err) => go_type_error(resource, object, &err).unwrap_or_else(|| {
            match err.path().iter().next() {
                Some(_) => format!("{}: {}", err.path(), err.inner()),
                None => err.inner().to_string(),
            }
        }),
        Ok(_) => plain.to_string(),
    })
}

/// `json: cannot unmarshal string into Go struct field
/// DeploymentSpec.spec.replicas of type int32`, when serde's error is a
/// wrong type (or an integer out of range) and the schema says what Go
/// type the field has.
fn go_type_error(resource: &ResourceType, object: &Value, err: &RoundtripError) -> Option<String> {
    let inner = err.inner().to_string();
    let overflow = inner.starts_with("invalid value: integer");
    if !inner.starts_with("invalid type:") && !overflow {
        return None;
    }
    let mut value = object;
    let (mut owner, mut schema) =
        resolve(DEFINITIONS.get(resource.definition)?, resource.definition);
    let mut struct_name = short_name(resource.definition);
    let mut fields: Vec<&str> = Vec::new();
    for segment in err.path().iter() {
        match segment {
            Segment::Map { key } => {
                value = value.get(key.as_str())?;
                let next = match schema.get("properties") {
                    Some(properties) => {
                        struct_name = short_name(owner?);
                        fields.push(key);
                        properties.get(key.as_str())?
                    }
                    None => schema.get("additionalProperties")?,
                };
                let name = definition_name(next);
                (owner, schema) = match name {
                    Some(name) => resolve(DEFINITIONS.get(name)?, name),
                    None => (None, next),
                };
            }
            Segment::Seq { index } => {
                value = value.get(*index)?;
                let items = schema.get("items")?;
                (owner, schema) = match definition_name(items) {
                    Some(name) => resolve(DEFINITIONS.get(name)?, name),
                    None => (None, items),
                };
            }
            _ => return None,
        }
    }
    if fields.is_empty() {
        return None;
    }
    let go_type = go_type(owner, schema)?;
    let sent = match value {
        Value::String(_) => "string".to_string(),
        Value::Bool(_) => "bool".to_string(),
        Value::Array(_) => "array".to_string(),
        Value::Object(_) => "object".to_string(),
        Value::Number(n) if overflow || n.is_f64() => format!("number {n}"),
        Value::Number(_) => "number".to_string(),
        Value::Null => return None,
    };
    Some(format!(
        "json: cannot unmarshal {sent} into Go struct field {struct_name}.{} of type {go_type}",
        fields.join(".")
    ))
}

/// The definition `name`'s schema, as (its name, its body).
fn resolve<'a>(body: &'a Value, name: &'a str) -> (Option<&'a str>, &'a Value) {
    (Some(name), body)
}

/// `DeploymentSpec` of `io.k8s.api.apps.v1.DeploymentSpec`.
fn short_name(definition: &str) -> &str {
    definition.rsplit('.').next().unwrap_or(definition)
}

/// The Go type of a value the schema describes (`int32`, `[]string`,
/// `v1.PodSpec`); `None` for types that decode themselves (quantities,
/// times, int-or-strings), whose errors Go words otherwise.
fn go_type(owner: Option<&str>, schema: &Value) -> Option<String> {
    if let Some(owner) = owner {
        schema.get("properties")?;
        let package = owner.rsplit('.').nth(1)?;
        return Some(format!("{package}.{}", short_name(owner)));
    }
    let element = |schema: &Value| match definition_name(schema) {
        Some(name) => go_type(Some(name), DEFINITIONS.get(name)?),
        None => go_type(None, schema),
    };
    match schema.get("type").and_then(Value::as_str)? {
        "integer" => Some(
            match schema.get("format").and_then(Value::as_str) {
                Some("int32") => "int32",
                Some("int64") => "int64",
                _ => "int",
            }
            .to_string(),
        ),
        "number" => Some("float64".to_string()),
        "boolean" => Some("bool".to_string()),
        "string" if schema.get("format").and_then(Value::as_str) == Some("byte") => {
            Some("[]uint8".to_string())
        }
        "string" => Some("string".to_string()),
        "array" => Some(format!("[]{}", element(schema.get("items")?)?)),
        "object" => Some(format!(
            "map[string]{}",
            element(schema.get("additionalProperties")?)?
        )),
        _ => None,
    }
}

/// A decoded JSON value as Go's `%+v` prints it (`map[spec:map[replicas:3]]`).
fn go_value(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let shown: Vec<String> = items.iter().map(go_value).collect();
            format!("[{}]", shown.join(" "))
        }
        Value::Object(map) => {
            let mut pairs: Vec<(&String, &Value)> = map.iter().collect();
            pairs.sort_by(|a, b| a.0.cmp(b.0));
            let shown: Vec<String> = pairs
                .iter()
                .map(|(k, v)| format!("{k}:{}", go_value(v)))
                .collect();
            format!("map[{}]", shown.join(" "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::kind;
    use super::*;
    use serde_json::json;

    fn message(api_version: &str, kind_name: &str, object: Value) -> String {
        let err = check_decodes(kind(api_version, kind_name), &object).unwrap_err();
        assert_eq!((err.code, err.reason), (400, "BadRequest"));
        err.message
    }

    #[test]
    fn wrong_types_are_worded_as_gos_json_decoder_words_them() {
        let deployment = |extra: Value| {
            let mut object = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web"}, "spec": {"selector": {}, "template": {}}});
            for (k, v) in extra.as_object().unwrap() {
                object[k] = v.clone();
            }
            object
        };
        let prefix = "Deployment in version \"v1\" cannot be handled as a Deployment: ";
        let table = [
            (json!({"status": "x"}), "json: cannot unmarshal string into Go struct field Deployment.status of type v1.DeploymentStatus"),
            (json!({"status": {"replicas": "many"}}), "json: cannot unmarshal string into Go struct field DeploymentStatus.status.replicas of type int32"),
            (json!({"spec": {"replicas": "3", "selector": {}, "template": {}}}), "json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32"),
            (json!({"spec": {"replicas": 1.5, "selector": {}, "template": {}}}), "json: cannot unmarshal number 1.5 into Go struct field DeploymentSpec.spec.replicas of type int32"),
            (json!({"spec": {"replicas": 99999999999i64, "selector": {}, "template": {}}}), "json: cannot unmarshal number 99999999999 into Go struct field DeploymentSpec.spec.replicas of type int32"),
            (json!({"metadata": {"name": "web", "labels": {"a": 1}}}), "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string"),
            (json!({"spec": "x"}), "json: cannot unmarshal string into Go struct field Deployment.spec of type v1.DeploymentSpec"),
            (json!({"spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "c", "args": [1]}]}}}}),
                "json: cannot unmarshal number into Go struct field Container.spec.template.spec.containers.args of type string"),
            (json!({"spec": {"selector": {}, "template": {"spec": {"containers": {}}}}}),
                "json: cannot unmarshal object into Go struct field PodSpec.spec.template.spec.containers of type []v1.Container"),
        ];
        for (extra, expected) in table {
            assert_eq!(
                message("apps/v1", "Deployment", deployment(extra.clone())),
                format!("{prefix}{expected}"),
                "{extra}"
            );
        }
        let secret = json!({"metadata": {"name": "s"}, "data": {"k": 5}});
        assert_eq!(
            message("v1", "Secret", secret),
            "Secret in version \"v1\" cannot be handled as a Secret: json: cannot unmarshal number into Go struct field Secret.data of type []uint8"
        );
    }

    #[test]
    fn a_patch_that_breaks_the_type_is_invalid_on_the_field_patch() {
        let resource = kind("v1", "ConfigMap");
        let patched = json!({"metadata": {"name": "c"}, "data": {"k": 1}});
        let err = check_patched(resource, false, &json!({}), &patched).unwrap_err();
        assert_eq!((err.code, err.reason), (422, "Invalid"));
        let causes = &err.details.as_ref().unwrap().causes;
        assert_eq!(causes[0].field, "patch");
        assert_eq!(
            err.message,
            format!(" \"\" is invalid: patch: Invalid value: {}: json: cannot unmarshal number into Go struct field ConfigMap.data of type string",
                go_quote(&patched.to_string()))
        );
        let patch = json!({"data": {"k": 1, "b": [true, null, "x"]}});
        let err = check_patched(resource, true, &patch, &patched).unwrap_err();
        assert!(
            err.message.starts_with(" \"\" is invalid: patch: Invalid value: \"map[data:map[b:[true <nil> x] k:1]]\": json: "),
            "{}",
            err.message
        );
        let fine = json!({"metadata": {"name": "c"}, "data": {"k": "1"}});
        assert_eq!(check_patched(resource, true, &patch, &fine), Ok(()));
    }
}
