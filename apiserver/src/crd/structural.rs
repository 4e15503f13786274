//! A CustomResourceDefinition version's `openAPIV3Schema` applied to an
//! object, as Kubernetes applies a structural schema: unknown fields pruned
//! (unless `x-kubernetes-preserve-unknown-fields`), nulls of non-nullable
//! fields dropped, `default`s filled in, then validated — types, required,
//! enum, pattern, numeric and length bounds, item and property counts,
//! `x-kubernetes-int-or-string`, `allOf`/`anyOf`/`oneOf`/`not`.
//!
//! At the root, `apiVersion`, `kind` and `metadata` belong to the server:
//! they are never pruned, and the schema may only constrain
//! `metadata.name` and `metadata.generateName`.

use regex::Regex;
use serde_json::{Map, Value};

use crate::status::Cause;

const PRESERVE: &str = "x-kubernetes-preserve-unknown-fields";
const INT_OR_STRING: &str = "x-kubernetes-int-or-string";
const EMBEDDED: &str = "x-kubernetes-embedded-resource";

/// Prunes, drops non-nullable nulls and applies defaults, in Kubernetes'
/// order, to `object` (a whole custom resource).
pub fn normalize(schema: &Value, object: &mut Value) {
    let Value::Object(root) = object else {
        return;
    };
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        if !preserves(schema) {
            root.retain(|k, _| is_root_meta(k));
        }
        return;
    };
    for (key, value) in root.iter_mut() {
        if is_root_meta(key) {
            continue;
        }
        if let Some(child) = properties.get(key) {
            prune(child, value);
        }
    }
    if !preserves(schema) && schema.get("additionalProperties").is_none() {
        root.retain(|k, _| is_root_meta(k) || properties.contains_key(k));
    }
    drop_nulls_and_default(schema, object, true);
}

fn is_root_meta(key: &str) -> bool {
    matches!(key, "apiVersion" | "kind" | "metadata")
}

fn preserves(schema: &Value) -> bool {
    schema.get(PRESERVE).and_then(Value::as_bool) == Some(true)
}

/// Removes the fields `schema` does not specify, below any level.
fn prune(schema: &Value, value: &mut Value) {
    if schema.get(EMBEDDED).and_then(Value::as_bool) == Some(true) {
        // An embedded object keeps its apiVersion, kind and metadata.
        if let Value::Object(map) = value {
            let properties = schema.get("properties").and_then(Value::as_object);
            for (key, child) in map.iter_mut() {
                if let Some(child_schema) = properties.and_then(|p| p.get(key)) {
                    prune(child_schema, child);
                }
            }
            if !preserves(schema) {
                map.retain(|k, _| is_root_meta(k) || properties.is_some_and(|p| p.contains_key(k)));
            }
        }
        return;
    }
    match value {
        Value::Object(map) => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (key, child) in map.iter_mut() {
                    if let Some(child_schema) = properties.get(key) {
                        prune(child_schema, child);
                    }
                }
                if !preserves(schema) {
                    map.retain(|k, _| properties.contains_key(k));
                }
            } else if let Some(additional) = schema.get("additionalProperties") {
                if additional.is_object() {
                    for child in map.values_mut() {
                        prune(additional, child);
                    }
                }
            } else if !preserves(schema)
                && schema.get("type").and_then(Value::as_str) == Some("object")
            {
                map.clear();
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    prune(item_schema, item);
                }
            }
        }
        _ => {}
    }
}

/// Drops nulls where the schema does not allow them, then fills in
/// `default`s of absent fields (defaults are themselves pruned first).
fn drop_nulls_and_default(schema: &Value, value: &mut Value, root: bool) {
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            if let Some(properties) = properties {
                // A null stays where the schema allows it, where the schema
                // does not know the field (preserved), and at the root's
                // server-owned fields.
                map.retain(|key, child| {
                    let Some(field) = properties.get(key) else {
                        return true;
                    };
                    let nullable = field.get("nullable").and_then(Value::as_bool) == Some(true);
                    !child.is_null() || nullable || (root && is_root_meta(key))
                });
                for (key, child_schema) in properties {
                    if root && is_root_meta(key) {
                        continue;
                    }
                    if !map.contains_key(key) {
                        if let Some(default) = child_schema.get("default") {
                            let mut default = default.clone();
                            prune(child_schema, &mut default);
                            map.insert(key.clone(), default);
                        }
                    }
                    if let Some(child) = map.get_mut(key) {
                        drop_nulls_and_default(child_schema, child, false);
                    }
                }
            } else if let Some(additional) =
                schema.get("additionalProperties").filter(|a| a.is_object())
            {
                let nullable = additional.get("nullable").and_then(Value::as_bool) == Some(true);
                if !nullable {
                    map.retain(|_, child| !child.is_null());
                }
                for child in map.values_mut() {
                    drop_nulls_and_default(additional, child, false);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    drop_nulls_and_default(item_schema, item, false);
                }
            }
        }
        _ => {}
    }
}

/// Everything wrong with `object` under `schema`, Kubernetes' causes.
pub fn validate(schema: &Value, object: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Value::Object(root) = object else {
        causes.push(invalid("", object, "must be of type object"));
        return causes;
    };
    // Only name and generateName of metadata are for the schema.
    if let Some(meta_schema) = schema.pointer("/properties/metadata/properties") {
        for field in ["name", "generateName"] {
            if let (Some(s), Some(v)) = (
                meta_schema.get(field),
                root.get("metadata").and_then(|m| m.get(field)),
            ) {
                check(s, v, &format!("metadata.{field}"), &mut causes);
            }
        }
    }
    let mut rest = Map::new();
    for (key, value) in root {
        if !is_root_meta(key) {
            rest.insert(key.clone(), value.clone());
        }
    }
    let mut root_schema = schema.clone();
    if let Some(properties) = root_schema
        .get_mut("properties")
        .and_then(Value::as_object_mut)
    {
        for meta in ["apiVersion", "kind", "metadata"] {
            properties.remove(meta);
        }
    }
    if let Some(required) = root_schema
        .get_mut("required")
        .and_then(Value::as_array_mut)
    {
        required.retain(|r| !r.as_str().is_some_and(is_root_meta));
    }
    check(&root_schema, &Value::Object(rest), "", &mut causes);
    causes
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// How Go prints a JSON value in a validation message.
fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        Value::Null => "\"null\"".into(),
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

fn invalid(path: &str, value: &Value, why: &str) -> Cause {
    let at = if path.is_empty() { "body" } else { path };
    Cause {
        reason: "FieldValueInvalid",
        message: format!("Invalid value: {}: {at} in body {why}", shown(value)),
        field: path.to_string(),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn check(schema: &Value, value: &Value, path: &str, causes: &mut Vec<Cause>) {
    if value.is_null() {
        if schema.get("nullable").and_then(Value::as_bool) != Some(true)
            && schema.get("type").is_some()
        {
            causes.push(invalid(
                path,
                value,
                &format!(
                    "must be of type {}",
                    schema["type"].as_str().unwrap_or("object")
                ),
            ));
        }
        return;
    }
    let int_or_string = schema.get(INT_OR_STRING).and_then(Value::as_bool) == Some(true);
    if int_or_string {
        if !matches!(type_name(value), "integer" | "string") {
            causes.push(invalid(path, value, "must be of type integer or string"));
            return;
        }
    } else if let Some(wanted) = schema.get("type").and_then(Value::as_str) {
        let actual = type_name(value);
        let fits = actual == wanted || (wanted == "number" && actual == "integer");
        if !fits {
            causes.push(Cause {
                reason: "FieldValueTypeInvalid",
                message: format!(
                    "Invalid value: {}: {} in body must be of type {wanted}: {:?}",
                    shown(value),
                    if path.is_empty() { "body" } else { path },
                    actual
                ),
                field: path.to_string(),
            });
            return;
        }
    }
    check_enum(schema, value, path, causes);
    match value {
        Value::String(s) => check_string(schema, s, value, path, causes),
        Value::Number(_) => check_number(schema, value, path, causes),
        Value::Array(items) => check_array(schema, items, value, path, causes),
        Value::Object(map) => check_object(schema, map, value, path, causes),
        _ => {}
    }
    check_combinators(schema, value, path, causes);
}

fn check_enum(schema: &Value, value: &Value, path: &str, causes: &mut Vec<Cause>) {
    let Some(allowed) = schema.get("enum").and_then(Value::as_array) else {
        return;
    };
    if !allowed.contains(value) {
        let listed: Vec<String> = allowed.iter().map(shown).collect();
        causes.push(Cause {
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: {}: supported values: {}",
                shown(value),
                listed.join(", ")
            ),
            field: path.to_string(),
        });
    }
}

fn check_string(schema: &Value, s: &str, value: &Value, path: &str, causes: &mut Vec<Cause>) {
    let length = s.chars().count() as u64;
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64) {
        if length > max {
            causes.push(Cause {
                reason: "FieldValueTooLong",
                message: format!("Too long: may not be more than {max} bytes"),
                field: path.to_string(),
            });
        }
    }
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64) {
        if length < min {
            causes.push(invalid(
                path,
                value,
                &format!("should be at least {min} chars long"),
            ));
        }
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        match Regex::new(pattern) {
            Ok(re) if !re.is_match(s) => {
                causes.push(invalid(path, value, &format!("should match '{pattern}'")));
            }
            Ok(_) => {}
            Err(_) => causes.push(invalid(
                path,
                value,
                &format!("has a pattern that is not a valid regular expression: '{pattern}'"),
            )),
        }
    }
    if let Some(format) = schema.get("format").and_then(Value::as_str) {
        if !format_ok(format, s) {
            causes.push(invalid(path, value, &format!("must be of type {format}")));
        }
    }
}

/// The string formats Kubernetes checks that people use most.
fn format_ok(format: &str, s: &str) -> bool {
    match format {
        "date-time" => s.parse::<jiff::Timestamp>().is_ok(),
        "date" => s.parse::<jiff::civil::Date>().is_ok(),
        "int32" | "int64" | "byte" | "password" | "" => true,
        "uuid" => {
            let parts: Vec<&str> = s.split('-').collect();
            parts.len() == 5
                && [8, 4, 4, 4, 12]
                    .iter()
                    .zip(&parts)
                    .all(|(n, p)| p.len() == *n && p.chars().all(|c| c.is_ascii_hexdigit()))
        }
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        _ => true,
    }
}

fn check_number(schema: &Value, value: &Value, path: &str, causes: &mut Vec<Cause>) {
    let Some(n) = value.as_f64() else {
        return;
    };
    let exclusive = |key: &str| schema.get(key).and_then(Value::as_bool) == Some(true);
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        if exclusive("exclusiveMinimum") && n <= min {
            causes.push(invalid(
                path,
                value,
                &format!("should be greater than {}", num(min)),
            ));
        } else if n < min {
            causes.push(invalid(
                path,
                value,
                &format!("should be greater than or equal to {}", num(min)),
            ));
        }
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
        if exclusive("exclusiveMaximum") && n >= max {
            causes.push(invalid(
                path,
                value,
                &format!("should be less than {}", num(max)),
            ));
        } else if n > max {
            causes.push(invalid(
                path,
                value,
                &format!("should be less than or equal to {}", num(max)),
            ));
        }
    }
    if let Some(step) = schema
        .get("multipleOf")
        .and_then(Value::as_f64)
        .filter(|s| *s > 0.0)
    {
        if (n / step).fract().abs() > 1e-9 {
            causes.push(invalid(
                path,
                value,
                &format!("should be a multiple of {}", num(step)),
            ));
        }
    }
}

/// A bound as Go prints it (no ".0" on whole numbers).
fn num(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        n.to_string()
    }
}

fn check_array(
    schema: &Value,
    items: &[Value],
    value: &Value,
    path: &str,
    causes: &mut Vec<Cause>,
) {
    let count = items.len() as u64;
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64) {
        if count > max {
            causes.push(Cause {
                reason: "FieldValueTooMany",
                message: format!("Too many: {count}: must have at most {max} items"),
                field: path.to_string(),
            });
        }
    }
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64) {
        if count < min {
            causes.push(invalid(
                path,
                value,
                &format!("should have at least {min} items"),
            ));
        }
    }
    let list_type = schema.get("x-kubernetes-list-type").and_then(Value::as_str);
    if list_type == Some("set") {
        for (i, item) in items.iter().enumerate() {
            if items[..i].contains(item) {
                causes.push(Cause {
                    reason: "FieldValueDuplicate",
                    message: format!("Duplicate value: {}", shown(item)),
                    field: format!("{path}[{i}]"),
                });
            }
        }
    }
    if let Some(item_schema) = schema.get("items") {
        for (i, item) in items.iter().enumerate() {
            check(item_schema, item, &format!("{path}[{i}]"), causes);
        }
    }
}

fn check_object(
    schema: &Value,
    map: &Map<String, Value>,
    value: &Value,
    path: &str,
    causes: &mut Vec<Cause>,
) {
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for field in required.iter().filter_map(Value::as_str) {
            if map.get(field).is_none_or(Value::is_null) {
                causes.push(Cause {
                    reason: "FieldValueRequired",
                    message: "Required value".into(),
                    field: join(path, field),
                });
            }
        }
    }
    let count = map.len() as u64;
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64) {
        if count > max {
            causes.push(Cause {
                reason: "FieldValueTooMany",
                message: format!("Too many: {count}: must have at most {max} items"),
                field: path.to_string(),
            });
        }
    }
    if let Some(min) = schema.get("minProperties").and_then(Value::as_u64) {
        if count < min {
            causes.push(invalid(
                path,
                value,
                &format!("should have at least {min} properties"),
            ));
        }
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    for (key, child) in map {
        let at = join(path, key);
        match properties.and_then(|p| p.get(key)) {
            Some(child_schema) => check(child_schema, child, &at, causes),
            None => {
                if let Some(additional) =
                    schema.get("additionalProperties").filter(|a| a.is_object())
                {
                    check(additional, child, &at, causes);
                }
            }
        }
    }
}

fn check_combinators(schema: &Value, value: &Value, path: &str, causes: &mut Vec<Cause>) {
    let passes = |sub: &Value| {
        let mut found = Vec::new();
        check(sub, value, path, &mut found);
        found.is_empty()
    };
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for sub in all {
            check(sub, value, path, causes);
        }
    }
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array) {
        if !any.iter().any(passes) {
            causes.push(invalid(
                path,
                value,
                "must validate at least one schema (anyOf)",
            ));
        }
    }
    if let Some(one) = schema.get("oneOf").and_then(Value::as_array) {
        let matched = one.iter().filter(|s| passes(s)).count();
        if matched != 1 {
            causes.push(invalid(
                path,
                value,
                "must validate one and only one schema (oneOf)",
            ));
        }
    }
    if let Some(not) = schema.get("not") {
        if passes(not) {
            causes.push(invalid(path, value, "must not validate the schema (not)"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["size"],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 10},
                        "colour": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                        "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 8},
                        "port": {"x-kubernetes-int-or-string": true},
                        "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "note": {"type": "string", "nullable": true},
                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "limits": {"type": "object", "properties": {"cpu": {"type": "string"}}, "default": {"cpu": "1", "junk": 1}}
                    }
                },
                "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
            }
        })
    }

    fn object(spec: Value) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": "w", "labels": {"a": "b"}}, "spec": spec})
    }

    fn fields(causes: &[Cause]) -> Vec<String> {
        causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn unknown_fields_are_pruned_except_where_preserved() {
        let mut w = object(
            json!({"size": 2, "bogus": 1, "extra": {"any": {"thing": 1}},
                                  "labels": {"x": "y"}}),
        );
        w["topLevel"] = json!(true);
        normalize(&schema(), &mut w);
        assert_eq!(w.get("topLevel"), None);
        assert_eq!(w["spec"].get("bogus"), None);
        assert_eq!(w["spec"]["extra"], json!({"any": {"thing": 1}}));
        assert_eq!(w["spec"]["labels"], json!({"x": "y"}));
        assert_eq!(
            w["metadata"]["labels"],
            json!({"a": "b"}),
            "metadata is the server's"
        );
    }

    #[test]
    fn defaults_fill_absent_fields_and_are_pruned_themselves() {
        let mut w = object(json!({"size": 2}));
        normalize(&schema(), &mut w);
        assert_eq!(w["spec"]["colour"], "red");
        assert_eq!(w["spec"]["limits"], json!({"cpu": "1"}));
        let mut blue = object(json!({"size": 2, "colour": "blue"}));
        normalize(&schema(), &mut blue);
        assert_eq!(blue["spec"]["colour"], "blue");
    }

    #[test]
    fn nulls_are_dropped_unless_nullable() {
        let mut w = object(json!({"size": 2, "name": null, "note": null}));
        normalize(&schema(), &mut w);
        assert_eq!(w["spec"].get("name"), None);
        assert_eq!(w["spec"]["note"], Value::Null);
        assert!(validate(&schema(), &w).is_empty());
    }

    #[test]
    fn a_valid_object_has_no_causes() {
        let w = object(
            json!({"size": 10, "colour": "blue", "name": "abc", "port": "http",
                              "tags": ["a"], "labels": {"k": "v"}}),
        );
        assert_eq!(fields(&validate(&schema(), &w)), Vec::<String>::new());
        let w = object(json!({"size": 1, "port": 8080}));
        assert!(validate(&schema(), &w).is_empty());
    }

    #[test]
    fn each_rule_names_its_field() {
        let w = object(
            json!({"size": "big", "colour": "pink", "name": "ABCDEFGHIJ",
                              "port": 1.5, "tags": ["a", "b", 3], "labels": {"k": 1}}),
        );
        assert_eq!(
            fields(&validate(&schema(), &w)),
            vec![
                r#"spec.colour: Unsupported value: "pink": supported values: "red", "blue""#,
                "spec.labels.k: Invalid value: 1: spec.labels.k in body must be of type string: \"integer\"",
                "spec.name: Too long: may not be more than 8 bytes",
                r#"spec.name: Invalid value: "ABCDEFGHIJ": spec.name in body should match '^[a-z]+$'"#,
                "spec.port: Invalid value: 1.5: spec.port in body must be of type integer or string",
                "spec.size: Invalid value: \"big\": spec.size in body must be of type integer: \"string\"",
                "spec.tags: Too many: 3: must have at most 2 items",
                "spec.tags[2]: Invalid value: 3: spec.tags[2] in body must be of type string: \"integer\"",
            ]
        );
        let w = object(json!({"size": 0}));
        assert_eq!(
            fields(&validate(&schema(), &w)),
            vec!["spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"]
        );
        let w = object(json!({}));
        assert_eq!(
            fields(&validate(&schema(), &w)),
            vec!["spec.size: Required value"]
        );
    }

    #[test]
    fn metadata_name_may_be_constrained_and_the_rest_is_not_checked() {
        let mut s = schema();
        s["properties"]["metadata"] =
            json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 3}}});
        let w = object(json!({"size": 1}));
        assert_eq!(
            fields(&validate(&s, &w)),
            Vec::<String>::new(),
            "w is short enough"
        );
        let mut long = w.clone();
        long["metadata"]["name"] = json!("widget");
        assert_eq!(
            fields(&validate(&s, &long)),
            vec!["metadata.name: Too long: may not be more than 3 bytes"]
        );
    }

    #[test]
    fn combinators_and_formats() {
        let s = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "when": {"type": "string", "format": "date-time"},
            "either": {"anyOf": [{"type": "integer"}, {"type": "string", "pattern": "^[0-9]+%$"}]},
            "id": {"type": "string", "format": "uuid"}
        }}}});
        let good = object(
            json!({"when": "2024-01-02T03:04:05Z", "either": "50%", "id": "123e4567-e89b-12d3-a456-426614174000"}),
        );
        assert!(validate(&s, &good).is_empty());
        let bad = object(json!({"when": "yesterday", "either": "half", "id": "x"}));
        let found = fields(&validate(&s, &bad));
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(
            found[0].starts_with("spec.either: Invalid value: \"half\""),
            "{found:?}"
        );
    }

    #[test]
    fn odd_shapes_never_panic() {
        for value in [
            json!(null),
            json!(3),
            json!([1, 2]),
            json!({"spec": []}),
            json!({"spec": {"size": null}}),
        ] {
            let mut v = value.clone();
            normalize(&schema(), &mut v);
            let _ = validate(&schema(), &v);
        }
        let _ = validate(
            &json!({"type": "object", "properties": {"x": {"pattern": "(unclosed"}}}),
            &json!({"x": "a"}),
        );
    }
}
