//! One object between its JSON form and its protobuf message, for any
//! message of the schema: fields by their JSON names, Go's inline fields
//! flattened, and the apimachinery types whose JSON is not an object of
//! their fields (Time, Quantity, IntOrString, RawExtension…) written as
//! Kubernetes writes them.

use base64::Engine;
use prost_reflect::{
    DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, ReflectMessage, Value,
};
use serde_json::{Map, Value as Json};

use super::schema::SCHEMA;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

const META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";
const EXTENSIONS: &str = "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1";

fn at(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The message `descriptor` of a JSON value; `Err` names the field that
/// does not fit (`spec.replicas: expected an integer`).
pub fn to_message(
    descriptor: &MessageDescriptor,
    json: &Json,
    path: &str,
) -> Result<DynamicMessage, String> {
    if let Some(message) = special_to_message(descriptor, json, path)? {
        return Ok(message);
    }
    let object = json
        .as_object()
        .ok_or_else(|| format!("{path}: expected an object, found {}", kind_of(json)))?;
    let mut message = DynamicMessage::new(descriptor.clone());
    for (key, value) in object {
        if !value.is_null() {
            set_json_field(&mut message, key, value, path)?;
        }
    }
    Ok(message)
}

/// Sets the field a JSON key names, looking into inline fields; a key the
/// message does not know is dropped, as Kubernetes' decoder drops it.
fn set_json_field(
    message: &mut DynamicMessage,
    key: &str,
    value: &Json,
    path: &str,
) -> Result<bool, String> {
    let descriptor = message.descriptor();
    let layout = SCHEMA.layout(&descriptor);
    if let Some(field) = layout.by_json.get(key) {
        let converted = to_field(field, value, &at(path, key))?;
        message.set_field(field, converted);
        return Ok(true);
    }
    for inline in &layout.inline {
        let Kind::Message(inner) = inline.kind() else {
            continue;
        };
        if !knows(&inner, key) {
            continue;
        }
        if let Value::Message(sub) = message.get_field_mut(inline) {
            return set_json_field(sub, key, value, path);
        }
    }
    Ok(false)
}

fn knows(descriptor: &MessageDescriptor, key: &str) -> bool {
    let layout = SCHEMA.layout(descriptor);
    layout.by_json.contains_key(key)
        || layout
            .inline
            .iter()
            .any(|f| matches!(f.kind(), Kind::Message(m) if knows(&m, key)))
}

fn to_field(field: &FieldDescriptor, json: &Json, path: &str) -> Result<Value, String> {
    if field.is_map() {
        let Kind::Message(entry) = field.kind() else {
            return Err(format!("{path}: not a map"));
        };
        let value_field = entry.map_entry_value_field();
        let object = json
            .as_object()
            .ok_or_else(|| format!("{path}: expected an object, found {}", kind_of(json)))?;
        let mut map = std::collections::HashMap::new();
        for (key, item) in object {
            if item.is_null() {
                continue;
            }
            let value = to_single(&value_field.kind(), item, &at(path, key))?;
            map.insert(MapKey::String(key.clone()), value);
        }
        return Ok(Value::Map(map));
    }
    if field.is_list() {
        let items = json
            .as_array()
            .ok_or_else(|| format!("{path}: expected an array, found {}", kind_of(json)))?;
        let kind = field.kind();
        return items
            .iter()
            .enumerate()
            .map(|(i, item)| to_single(&kind, item, &format!("{path}[{i}]")))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::List);
    }
    to_single(&field.kind(), json, path)
}

fn to_single(kind: &Kind, json: &Json, path: &str) -> Result<Value, String> {
    let wrong = |expected: &str| format!("{path}: expected {expected}, found {}", kind_of(json));
    let integer = || json.as_i64().ok_or_else(|| wrong("an integer"));
    Ok(match kind {
        Kind::String => Value::String(json.as_str().ok_or_else(|| wrong("a string"))?.into()),
        Kind::Bool => Value::Bool(json.as_bool().ok_or_else(|| wrong("a boolean"))?),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Value::I32(
            i32::try_from(integer()?).map_err(|_| format!("{path}: out of range for int32"))?,
        ),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Value::I64(integer()?),
        Kind::Uint32 | Kind::Fixed32 => Value::U32(
            u32::try_from(integer()?).map_err(|_| format!("{path}: out of range for uint32"))?,
        ),
        Kind::Uint64 | Kind::Fixed64 => {
            Value::U64(json.as_u64().ok_or_else(|| wrong("an unsigned integer"))?)
        }
        Kind::Double => Value::F64(json.as_f64().ok_or_else(|| wrong("a number"))?),
        Kind::Float => Value::F32(json.as_f64().ok_or_else(|| wrong("a number"))? as f32),
        Kind::Bytes => {
            let text = json.as_str().ok_or_else(|| wrong("a base64 string"))?;
            Value::Bytes(
                B64.decode(text)
                    .map_err(|e| format!("{path}: not base64: {e}"))?
                    .into(),
            )
        }
        Kind::Message(descriptor) => Value::Message(to_message(descriptor, json, path)?),
        Kind::Enum(_) => Value::EnumNumber(
            i32::try_from(integer()?).map_err(|_| format!("{path}: out of range"))?,
        ),
    })
}

fn kind_of(json: &Json) -> &'static str {
    match json {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

/// A message holding the given fields by name.
fn with_fields(
    descriptor: &MessageDescriptor,
    fields: impl IntoIterator<Item = (&'static str, Value)>,
) -> Result<DynamicMessage, String> {
    let mut message = DynamicMessage::new(descriptor.clone());
    for (name, value) in fields {
        message
            .try_set_field_by_name(name, value)
            .map_err(|e| format!("{}.{name}: {e}", descriptor.name()))?;
    }
    Ok(message)
}

fn raw_json(json: &Json) -> Value {
    Value::Bytes(serde_json::to_vec(json).unwrap_or_default().into())
}

/// The types whose JSON is not an object of their fields.
fn special_to_message(
    descriptor: &MessageDescriptor,
    json: &Json,
    path: &str,
) -> Result<Option<DynamicMessage>, String> {
    let wrong = |expected: &str| format!("{path}: expected {expected}, found {}", kind_of(json));
    let name = descriptor.full_name();
    let fields: Vec<(&'static str, Value)> = match name {
        "k8s.io.apimachinery.pkg.api.resource.Quantity" => {
            let text = match json {
                Json::String(s) => s.clone(),
                Json::Number(n) => n.to_string(),
                _ => return Err(wrong("a quantity")),
            };
            vec![("string", Value::String(text))]
        }
        _ if name == format!("{META}.Time") || name == format!("{META}.MicroTime") => {
            let text = json.as_str().ok_or_else(|| wrong("an RFC 3339 time"))?;
            let time: jiff::Timestamp = text
                .parse()
                .map_err(|e| format!("{path}: not an RFC 3339 time: {e}"))?;
            vec![
                ("seconds", Value::I64(time.as_second())),
                ("nanos", Value::I32(time.subsec_nanosecond())),
            ]
        }
        _ if name == format!("{META}.Duration") => {
            let text = json.as_str().ok_or_else(|| wrong("a duration"))?;
            let nanos = super::duration::parse(text)
                .ok_or_else(|| format!("{path}: not a duration: {text:?}"))?;
            vec![("duration", Value::I64(nanos))]
        }
        "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => match json {
            Json::String(s) => vec![
                ("type", Value::I64(1)),
                ("strVal", Value::String(s.clone())),
            ],
            Json::Number(_) => {
                let n = json
                    .as_i64()
                    .and_then(|n| i32::try_from(n).ok())
                    .ok_or_else(|| wrong("an int32 or a string"))?;
                vec![("type", Value::I64(0)), ("intVal", Value::I32(n))]
            }
            _ => return Err(wrong("an integer or a string")),
        },
        "k8s.io.apimachinery.pkg.runtime.RawExtension" => vec![("raw", raw_json(json))],
        _ if name == format!("{META}.FieldsV1") => vec![("Raw", raw_json(json))],
        _ if name == format!("{EXTENSIONS}.JSON") => vec![("raw", raw_json(json))],
        _ if name == format!("{EXTENSIONS}.JSONSchemaPropsOrArray") => match json {
            Json::Array(items) => {
                let props = schema_props(descriptor)?;
                let list = items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| {
                        to_message(&props, item, &format!("{path}[{i}]")).map(Value::Message)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                vec![("jSONSchemas", Value::List(list))]
            }
            _ => vec![(
                "schema",
                Value::Message(to_message(&schema_props(descriptor)?, json, path)?),
            )],
        },
        _ if name == format!("{EXTENSIONS}.JSONSchemaPropsOrBool") => match json {
            Json::Bool(allows) => vec![("allows", Value::Bool(*allows))],
            _ => vec![
                ("allows", Value::Bool(true)),
                (
                    "schema",
                    Value::Message(to_message(&schema_props(descriptor)?, json, path)?),
                ),
            ],
        },
        _ if name == format!("{EXTENSIONS}.JSONSchemaPropsOrStringArray") => match json {
            Json::Array(_) => vec![(
                "property",
                strings(json).ok_or_else(|| wrong("an array of strings"))?,
            )],
            _ => vec![(
                "schema",
                Value::Message(to_message(&schema_props(descriptor)?, json, path)?),
            )],
        },
        _ if is_string_list(descriptor) => vec![(
            "items",
            strings(json).ok_or_else(|| wrong("an array of strings"))?,
        )],
        _ => return Ok(None),
    };
    with_fields(descriptor, fields).map(Some)
}

/// A JSON array of strings as a repeated string field.
fn strings(json: &Json) -> Option<Value> {
    json.as_array()?
        .iter()
        .map(|i| i.as_str().map(|s| Value::String(s.into())))
        .collect::<Option<Vec<_>>>()
        .map(Value::List)
}

fn schema_props(descriptor: &MessageDescriptor) -> Result<MessageDescriptor, String> {
    descriptor
        .parent_pool()
        .get_message_by_name(&format!("{EXTENSIONS}.JSONSchemaProps"))
        .ok_or_else(|| "JSONSchemaProps is not in the schema".to_string())
}

/// Go's named string slices (`ExtraValue`, `Verbs`), a message of one
/// repeated string in protobuf and an array in JSON.
fn is_string_list(descriptor: &MessageDescriptor) -> bool {
    matches!(descriptor.name(), "ExtraValue" | "Verbs")
        && descriptor.fields().len() == 1
        && descriptor
            .get_field_by_name("items")
            .is_some_and(|f| f.is_list() && f.kind() == Kind::String)
}

/// The JSON form of a message.
pub fn to_json(message: &DynamicMessage) -> Result<Json, String> {
    if let Some(json) = special_to_json(message)? {
        return Ok(json);
    }
    let mut object = Map::new();
    write_fields(message, &mut object)?;
    Ok(Json::Object(object))
}

fn write_fields(message: &DynamicMessage, object: &mut Map<String, Json>) -> Result<(), String> {
    let descriptor = message.descriptor();
    let layout = SCHEMA.layout(&descriptor);
    for (field, value) in message.fields() {
        if layout.inline.iter().any(|f| f.number() == field.number()) {
            if let Value::Message(inner) = value {
                write_fields(inner, object)?;
            }
            continue;
        }
        if layout.omits_zero(&field) && is_zero(value) {
            continue;
        }
        let json = field_to_json(&field, value)?;
        if json.is_null()
            || json.as_array().is_some_and(Vec::is_empty) && (field.is_list() || field.is_map())
            || json.as_object().is_some_and(Map::is_empty) && field.is_map()
        {
            continue;
        }
        object.insert(layout.json_name(&field).to_string(), json);
    }
    Ok(())
}

fn is_zero(value: &Value) -> bool {
    match value {
        Value::Bool(b) => !b,
        Value::I32(n) => *n == 0,
        Value::I64(n) => *n == 0,
        Value::U32(n) => *n == 0,
        Value::U64(n) => *n == 0,
        Value::F32(n) => *n == 0.0,
        Value::F64(n) => *n == 0.0,
        Value::String(s) => s.is_empty(),
        Value::Bytes(b) => b.is_empty(),
        Value::EnumNumber(n) => *n == 0,
        Value::Message(_) | Value::List(_) | Value::Map(_) => false,
    }
}

fn field_to_json(field: &FieldDescriptor, value: &Value) -> Result<Json, String> {
    match value {
        Value::Map(map) => {
            let mut object = Map::new();
            for (key, item) in map {
                let key = match key {
                    MapKey::String(s) => s.clone(),
                    MapKey::Bool(b) => b.to_string(),
                    MapKey::I32(n) => n.to_string(),
                    MapKey::I64(n) => n.to_string(),
                    MapKey::U32(n) => n.to_string(),
                    MapKey::U64(n) => n.to_string(),
                };
                object.insert(key, single_to_json(item)?);
            }
            // Stable output: Go writes map keys sorted.
            let mut sorted: Vec<_> = object.into_iter().collect();
            sorted.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(Json::Object(sorted.into_iter().collect()))
        }
        Value::List(items) => items
            .iter()
            .map(single_to_json)
            .collect::<Result<Vec<_>, _>>()
            .map(Json::Array),
        _ if field.is_list() => Ok(Json::Array(Vec::new())),
        single => single_to_json(single),
    }
}

fn single_to_json(value: &Value) -> Result<Json, String> {
    Ok(match value {
        Value::Bool(b) => Json::Bool(*b),
        Value::I32(n) => Json::from(*n),
        Value::I64(n) => Json::from(*n),
        Value::U32(n) => Json::from(*n),
        Value::U64(n) => Json::from(*n),
        Value::F32(n) => number(f64::from(*n))?,
        Value::F64(n) => number(*n)?,
        Value::String(s) => Json::String(s.clone()),
        Value::Bytes(b) => Json::String(B64.encode(b)),
        Value::EnumNumber(n) => Json::from(*n),
        Value::Message(m) => to_json(m)?,
        Value::List(_) | Value::Map(_) => return Err("a list inside a list".into()),
    })
}

fn number(n: f64) -> Result<Json, String> {
    // Go writes a whole float64 without a fraction (`1`, not `1.0`).
    if n.fract() == 0.0 && n.abs() < 1e15 {
        return Ok(Json::from(n as i64));
    }
    serde_json::Number::from_f64(n)
        .map(Json::Number)
        .ok_or_else(|| format!("{n} is not a JSON number"))
}

fn get<'a>(message: &'a DynamicMessage, name: &str) -> Option<std::borrow::Cow<'a, Value>> {
    message.get_field_by_name(name)
}

fn parse_raw(bytes: &[u8]) -> Result<Json, String> {
    if bytes.is_empty() {
        return Ok(Json::Null);
    }
    if bytes.starts_with(super::MAGIC) {
        return super::decode(bytes).map_err(|e| e.to_string());
    }
    serde_json::from_slice(bytes).map_err(|e| format!("raw JSON that does not parse: {e}"))
}

fn special_to_json(message: &DynamicMessage) -> Result<Option<Json>, String> {
    let descriptor = message.descriptor();
    let name = descriptor.full_name();
    let string = |field: &str| {
        get(message, field)
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    };
    let bytes = |field: &str| {
        get(message, field)
            .and_then(|v| v.as_bytes().map(|b| b.to_vec()))
            .unwrap_or_default()
    };
    let json = match name {
        "k8s.io.apimachinery.pkg.api.resource.Quantity" => Json::String(string("string")),
        _ if name == format!("{META}.Time") || name == format!("{META}.MicroTime") => {
            let seconds = get(message, "seconds")
                .and_then(|v| v.as_i64())
                .unwrap_or(0);
            let nanos = get(message, "nanos").and_then(|v| v.as_i32()).unwrap_or(0);
            if seconds == 0 && nanos == 0 {
                // Go's zero time, which it writes as null.
                return Ok(Some(Json::Null));
            }
            let time = jiff::Timestamp::new(seconds, nanos)
                .map_err(|e| format!("{}: {e}", descriptor.name()))?;
            let text = if descriptor.name() == "MicroTime" {
                time.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
            } else {
                time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
            };
            Json::String(text)
        }
        _ if name == format!("{META}.Duration") => {
            let nanos = get(message, "duration")
                .and_then(|v| v.as_i64())
                .unwrap_or(0);
            Json::String(super::duration::format(nanos))
        }
        "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => {
            match get(message, "type").and_then(|v| v.as_i64()) {
                Some(1) => Json::String(string("strVal")),
                _ => Json::from(get(message, "intVal").and_then(|v| v.as_i32()).unwrap_or(0)),
            }
        }
        "k8s.io.apimachinery.pkg.runtime.RawExtension" => parse_raw(&bytes("raw"))?,
        _ if name == format!("{META}.FieldsV1") => parse_raw(&bytes("Raw"))?,
        _ if name == format!("{EXTENSIONS}.JSON") => parse_raw(&bytes("raw"))?,
        _ if name == format!("{EXTENSIONS}.JSONSchemaPropsOrArray") => {
            match get(message, "jSONSchemas").as_deref() {
                Some(Value::List(items)) if !items.is_empty() => list_to_json(items)?,
                _ => schema_json(message)?,
            }
        }
        _ if name == format!("{EXTENSIONS}.JSONSchemaPropsOrBool") => {
            if message.has_field_by_name("schema") {
                schema_json(message)?
            } else {
                Json::Bool(
                    get(message, "allows")
                        .and_then(|v| v.as_bool())
                        .unwrap_or(false),
                )
            }
        }
        _ if name == format!("{EXTENSIONS}.JSONSchemaPropsOrStringArray") => {
            match get(message, "property").as_deref() {
                Some(Value::List(items)) if !items.is_empty() => list_to_json(items)?,
                _ => schema_json(message)?,
            }
        }
        _ if is_string_list(&descriptor) => match get(message, "items").as_deref() {
            Some(Value::List(items)) => list_to_json(items)?,
            _ => Json::Array(Vec::new()),
        },
        _ => return Ok(None),
    };
    Ok(Some(json))
}

fn list_to_json(items: &[Value]) -> Result<Json, String> {
    items
        .iter()
        .map(single_to_json)
        .collect::<Result<Vec<_>, _>>()
        .map(Json::Array)
}

fn schema_json(message: &DynamicMessage) -> Result<Json, String> {
    match get(message, "schema").as_deref() {
        Some(Value::Message(schema)) => to_json(schema),
        _ => Ok(Json::Object(Map::new())),
    }
}
