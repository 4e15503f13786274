//! Parsing only some fields of a JSON object. The watch cache keeps each
//! object's stored bytes and reads from them just what selectors need
//! (labels and a few fields); building a whole `Value` of every pod written
//! only to drop it again was most of the cost of caching it.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};

/// The fields of `json` (an object) on `paths` (dotted: `metadata.labels`,
/// `status.podIPs`), each whole; the rest is skipped without being built.
/// A value on the way to a path that is not an object is kept whole, so
/// that what reads the result sees the same as in the full parse.
pub fn parse_fields(json: &[u8], paths: &[&str]) -> serde_json::Result<Value> {
    let wanted: Vec<&str> = paths.to_vec();
    let mut deserializer = serde_json::Deserializer::from_slice(json);
    let value = Wanted {
        paths: &wanted,
        depth: 0,
    }
    .deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

/// The paths still wanted below the current place, which is `depth`
/// segments down each of them.
struct Wanted<'p, 'a> {
    paths: &'p [&'a str],
    depth: usize,
}

fn segment<'a>(path: &'a str, depth: usize) -> Option<&'a str> {
    path.split('.').nth(depth)
}

impl<'de> DeserializeSeed<'de> for Wanted<'_, '_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Wanted<'_, '_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let below: Vec<&str> = self
                .paths
                .iter()
                .copied()
                .filter(|p| segment(p, self.depth) == Some(key.as_str()))
                .collect();
            if below.is_empty() {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let whole = below
                .iter()
                .any(|p| segment(p, self.depth + 1).is_none());
            let value = match whole {
                true => map.next_value::<Value>()?,
                false => map.next_value_seed(Wanted {
                    paths: &below,
                    depth: self.depth + 1,
                })?,
            };
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }

    // Anything but an object is kept as it is.
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        Visitor::visit_seq(ValueVisitor, seq)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

/// A whole array, through `Value`'s own deserializer.
struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON array")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Value>()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_the_wanted_fields_are_kept_each_whole() {
        let object = json!({
            "kind": "Pod",
            "metadata": {"name": "web", "labels": {"app": "web", "tier": "a"}, "uid": "u"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}], "hostNetwork": true},
            "status": {"podIPs": [{"ip": "10.0.0.1"}], "phase": "Running"},
        });
        let bytes = serde_json::to_vec(&object).unwrap();
        let parsed = parse_fields(
            &bytes,
            &["kind", "metadata.labels", "spec.nodeName", "status.podIPs", "status.podIP"],
        )
        .unwrap();
        assert_eq!(
            parsed,
            json!({
                "kind": "Pod",
                "metadata": {"labels": {"app": "web", "tier": "a"}},
                "spec": {"nodeName": "n1"},
                "status": {"podIPs": [{"ip": "10.0.0.1"}]},
            })
        );
    }

    #[test]
    fn a_value_that_is_not_an_object_on_the_way_is_kept() {
        let bytes = br#"{"spec": [1, {"a": 2}], "status": null, "other": {"x": 1}}"#;
        let parsed = parse_fields(bytes, &["spec.nodeName", "status.phase"]).unwrap();
        assert_eq!(parsed, json!({"spec": [1, {"a": 2}], "status": null}));
    }

    #[test]
    fn bad_json_is_an_error() {
        assert!(parse_fields(b"{\"kind\": ", &["kind"]).is_err());
        assert!(parse_fields(b"{} x", &["kind"]).is_err());
    }
}
