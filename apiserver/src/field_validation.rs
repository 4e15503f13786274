//! `fieldValidation=Strict|Warn|Ignore`: what happens to fields of a request
//! body that the type does not have, and to fields given twice.
//!
//! Strict refuses the request (400, every offending field named); Warn
//! accepts it and answers one `Warning` header per field; Ignore (and no
//! parameter) accepts it silently. Unknown fields are dropped either way
//! when the object is stored, because it is stored as its type knows it.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Ignore,
    Warn,
    Strict,
}

impl Mode {
    /// From the request's query (`fieldValidation`).
    pub fn from_query(query: &HashMap<String, String>) -> ApiResult<Mode> {
        match query.get("fieldValidation").map(String::as_str) {
            None | Some("" | "Ignore") => Ok(Mode::Ignore),
            Some("Warn") => Ok(Mode::Warn),
            Some("Strict") => Ok(Mode::Strict),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation must be Ignore, Warn or Strict, not {other:?}"
            ))),
        }
    }
}

/// Checks `object` (and, for duplicates, the raw `body` it came from) under
/// `mode`: the warnings to send back, or the Strict error.
pub fn check(
    resource: &ResourceType,
    mode: Mode,
    object: &Value,
    body: Option<&[u8]>,
) -> ApiResult<Vec<String>> {
    if mode == Mode::Ignore {
        return Ok(Vec::new());
    }
    let mut problems: Vec<String> = body
        .map(duplicate_fields)
        .unwrap_or_default()
        .into_iter()
        .map(|f| format!("duplicate field {}", skiff_machinery::quote::go_quote(&f)))
        .collect();
    problems.extend(
        crate::validation::strict_unknown_fields(resource, object)
            .into_iter()
            .map(|f| format!("unknown field {}", skiff_machinery::quote::go_quote(&f))),
    );
    match mode {
        Mode::Strict if !problems.is_empty() => Err(crate::validation::strict_decoding_error(
            resource, &problems,
        )),
        Mode::Strict | Mode::Ignore => Ok(Vec::new()),
        Mode::Warn => Ok(problems),
    }
}

/// The value of a `Warning` response header carrying `text` (RFC 7234
/// form, as Kubernetes sends it: code 299, agent "-").
pub fn warning_header(text: &str) -> String {
    let escaped: String = text
        .chars()
        .flat_map(|c| match c {
            '"' | '\\' => vec!['\\', c],
            c if c.is_control() => vec![' '],
            c => vec![c],
        })
        .collect();
    format!("299 - \"{escaped}\"")
}

/// The paths (`spec.replicas`, `spec.containers[0].name`) of the object
/// keys that occur twice in one JSON object of `body`. A body that is not
/// JSON has none (its parse error is reported elsewhere).
pub fn duplicate_fields(body: &[u8]) -> Vec<String> {
    let mut found = BTreeSet::new();
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let walk = Walk {
        path: String::new(),
        found: &mut found,
    };
    if walk.deserialize(&mut deserializer).is_err() {
        return Vec::new();
    }
    found.into_iter().collect()
}

/// Visits one JSON value at `path`, recording duplicate keys below it.
struct Walk<'f> {
    path: String,
    found: &'f mut BTreeSet<String>,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0;
        loop {
            let walk = Walk {
                path: format!("{}[{index}]", self.path),
                found: &mut *self.found,
            };
            if seq.next_element_seed(walk)?.is_none() {
                return Ok(());
            }
            index += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = BTreeSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            if !seen.insert(key) {
                self.found.insert(path.clone());
            }
            map.next_value_seed(Walk {
                path,
                found: &mut *self.found,
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::find;
    use serde_json::json;

    fn pods() -> &'static ResourceType {
        find("", "v1", "pods").unwrap()
    }

    #[test]
    fn duplicate_keys_are_found_with_their_paths() {
        let body = br#"{"metadata":{"name":"a","name":"b"},"spec":{"containers":[{"name":"c","image":"x","image":"y"}]}}"#;
        assert_eq!(
            duplicate_fields(body),
            vec!["metadata.name", "spec.containers[0].image"]
        );
        assert!(duplicate_fields(br#"{"a":{"b":1},"c":{"b":2}}"#).is_empty());
        assert!(duplicate_fields(b"not json").is_empty());
    }

    #[test]
    fn strict_refuses_unknown_and_duplicate_fields_naming_each() {
        let body = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","name":"p"},"spec":{"bogus":1,"containers":[{"name":"c","image":"i"}]}}"#;
        let object: Value = serde_json::from_slice(body).unwrap();
        let err = check(pods(), Mode::Strict, &object, Some(body)).unwrap_err();
        assert_eq!(err.code, 400);
        assert!(
            err.message
                .contains(r#"strict decoding error: duplicate field "metadata.name", unknown field "spec.bogus""#),
            "{}",
            err.message
        );
    }

    #[test]
    fn warn_accepts_and_reports_each_field_ignore_says_nothing() {
        let object = json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},
            "spec":{"bogus":1,"containers":[{"name":"c","image":"i","colour":"red"}]}});
        let warnings = check(pods(), Mode::Warn, &object, None).unwrap();
        assert_eq!(
            warnings,
            vec![
                r#"unknown field "spec.bogus""#,
                r#"unknown field "spec.containers[0].colour""#
            ]
        );
        assert!(check(pods(), Mode::Ignore, &object, None)
            .unwrap()
            .is_empty());
        let clean = json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},
            "spec":{"containers":[{"name":"c","image":"i"}]}});
        assert!(check(pods(), Mode::Strict, &clean, None)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn modes_parse_from_the_query_and_bad_ones_are_refused() {
        let query = |v: &str| HashMap::from([("fieldValidation".to_string(), v.to_string())]);
        assert_eq!(Mode::from_query(&HashMap::new()).unwrap(), Mode::Ignore);
        assert_eq!(Mode::from_query(&query("Warn")).unwrap(), Mode::Warn);
        assert_eq!(Mode::from_query(&query("Strict")).unwrap(), Mode::Strict);
        assert_eq!(Mode::from_query(&query("strict")).unwrap_err().code, 400);
    }

    #[test]
    fn warning_headers_quote_their_text() {
        assert_eq!(
            warning_header(r#"unknown field "spec.x""#),
            r#"299 - "unknown field \"spec.x\"""#
        );
    }
}
