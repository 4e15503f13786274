//! `additionalPrinterColumns` of a CustomResourceDefinition version: the
//! Table columns `kubectl get` shows for custom objects, each cell the
//! value at the column's JSONPath (evaluated with `jsonpath-rust`) in the
//! column's type. A version without any gets Kubernetes' default: Age.

use jiff::Timestamp;
use jsonpath_rust::JsonPath;
use serde_json::{json, Value};

/// One printer column of a served version.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub name: String,
    /// `integer`, `number`, `string`, `boolean` or `date`.
    pub kind: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    /// As written in the CRD (`.spec.replicas`).
    pub json_path: String,
    /// As jsonpath-rust reads it (`$.spec.replicas`); None when the CRD's
    /// path cannot be read (its cells are then empty).
    query: Option<String>,
}

/// The columns of a CRD version (`spec.versions[i]`).
pub fn of_version(version: &Value) -> Vec<Column> {
    let Some(listed) = version
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
    else {
        return vec![column(
            "Age",
            "date",
            "",
            ".metadata.creationTimestamp",
            0,
            AGE,
        )];
    };
    listed
        .iter()
        .map(|c| {
            column(
                c["name"].as_str().unwrap_or_default(),
                c["type"].as_str().unwrap_or("string"),
                c["format"].as_str().unwrap_or_default(),
                c["jsonPath"].as_str().unwrap_or_default(),
                c["priority"].as_i64().unwrap_or(0),
                c["description"].as_str().unwrap_or_default(),
            )
        })
        .collect()
}

const AGE: &str =
    "CreationTimestamp is a timestamp representing the server time when this object was created.";

fn column(
    name: &str,
    kind: &str,
    format: &str,
    path: &str,
    priority: i64,
    description: &str,
) -> Column {
    Column {
        name: name.to_string(),
        kind: kind.to_string(),
        format: format.to_string(),
        description: description.to_string(),
        priority,
        json_path: path.to_string(),
        query: to_query(path),
    }
}

/// `.spec.x` (or `{.spec.x}`) as a JSONPath query from the root.
fn to_query(path: &str) -> Option<String> {
    let path = path.trim();
    let path = path
        .strip_prefix('{')
        .and_then(|p| p.strip_suffix('}'))
        .unwrap_or(path);
    if !path.starts_with('.') && !path.starts_with('[') {
        return None;
    }
    let query = format!("${path}");
    let probe = json!({});
    probe.query(&query).ok().map(|_| query)
}

/// The Table `columnDefinitions`: Name first, then the printer columns.
pub fn definitions(columns: &[Column]) -> Vec<Value> {
    let mut definitions = vec![json!({
        "name": "Name", "type": "string", "format": "name", "priority": 0,
        "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
    })];
    definitions.extend(columns.iter().map(|c| {
        json!({"name": c.name, "type": c.kind, "format": c.format,
               "description": c.description, "priority": c.priority})
    }));
    definitions
}

/// The cells of `object`'s row: its name, then each column's value.
pub fn cells(columns: &[Column], object: &Value, now: Timestamp) -> Vec<Value> {
    let mut cells = vec![object["metadata"]["name"].clone()];
    cells.extend(columns.iter().map(|c| cell(c, object, now)));
    cells
}

fn cell(column: &Column, object: &Value, now: Timestamp) -> Value {
    let Some(query) = &column.query else {
        return Value::Null;
    };
    let found = match object.query(query) {
        Ok(found) => found,
        Err(_) => return Value::Null,
    };
    let Some(first) = found.first() else {
        return Value::Null;
    };
    match column.kind.as_str() {
        "date" => match first.as_str().and_then(|s| s.parse::<Timestamp>().ok()) {
            Some(at) => json!(crate::table::human_duration(now.duration_since(at))),
            None => Value::Null,
        },
        "integer" => first.as_i64().map(Value::from).unwrap_or(Value::Null),
        "number" => first.as_f64().map(Value::from).unwrap_or(Value::Null),
        "boolean" => first.as_bool().map(Value::from).unwrap_or(Value::Null),
        _ => match first {
            Value::String(_) => (*first).clone(),
            Value::Null => Value::Null,
            _ => {
                // Kubernetes prints every match, comma-separated.
                let shown: Vec<String> = found
                    .iter()
                    .map(|v| match v {
                        Value::String(s) => s.clone(),
                        v => v.to_string(),
                    })
                    .collect();
                json!(shown.join(","))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version() -> Value {
        json!({"name": "v1", "additionalPrinterColumns": [
            {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
            {"name": "Colour", "type": "string", "jsonPath": ".spec.colour", "priority": 1, "description": "its colour"},
            {"name": "Ready", "type": "boolean", "jsonPath": ".status.ready"},
            {"name": "Ports", "type": "string", "jsonPath": ".spec.ports[*].port"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            {"name": "Broken", "type": "string", "jsonPath": "spec..["}
        ]})
    }

    fn widget() -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": "w", "creationTimestamp": "2026-01-01T00:00:00Z"},
               "spec": {"size": 3, "colour": "red", "ports": [{"port": 80}, {"port": 443}]},
               "status": {"ready": true}})
    }

    #[test]
    fn cells_take_each_columns_value_in_its_type() {
        let columns = of_version(&version());
        let now: Timestamp = "2026-01-01T00:05:00Z".parse().unwrap();
        assert_eq!(
            cells(&columns, &widget(), now),
            vec![
                json!("w"),
                json!(3),
                json!("red"),
                json!(true),
                json!("80,443"),
                json!("5m"),
                Value::Null
            ]
        );
        let bare = json!({"metadata": {"name": "b"}});
        assert_eq!(
            cells(&columns, &bare, now),
            vec![
                json!("b"),
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null
            ]
        );
    }

    #[test]
    fn definitions_start_with_name_and_keep_priorities() {
        let defs = definitions(&of_version(&version()));
        let names: Vec<&str> = defs.iter().map(|d| d["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            ["Name", "Size", "Colour", "Ready", "Ports", "Age", "Broken"]
        );
        assert_eq!(defs[2]["priority"], 1);
        assert_eq!(defs[2]["description"], "its colour");
    }

    #[test]
    fn a_version_without_columns_shows_age() {
        let columns = of_version(&json!({"name": "v1"}));
        assert_eq!(columns.len(), 1);
        assert_eq!(
            (columns[0].name.as_str(), columns[0].kind.as_str()),
            ("Age", "date")
        );
    }
}
