//! Kubernetes' protobuf encoding of the built-in kinds, both ways: request
//! bodies read into the JSON the rest of the server works on, and replies
//! and watch events written from it.
//!
//! A body is the magic `k8s\0` then a `runtime.Unknown` (typeMeta =
//! {apiVersion, kind}, raw = the object's message). A watch stream is
//! frames of a 4-byte big-endian length then a `WatchEvent` message (no
//! magic), whose object is a whole body as above. The messages are
//! Kubernetes' own definitions (`proto/`), read through a descriptor pool:
//! every field of every kind, with no hand-written field numbers.

mod duration;
mod json;
mod schema;

use prost::Message;
use prost_reflect::{DynamicMessage, Value};
use serde_json::Value as Json;

pub use schema::SCHEMA;

/// The prefix of every Kubernetes protobuf body.
pub const MAGIC: &[u8] = b"k8s\0";

/// The media type of protobuf bodies and replies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The media type of a protobuf watch stream.
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

const UNKNOWN: &str = "k8s.io.apimachinery.pkg.runtime.Unknown";

/// Why a protobuf body could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Not a Kubernetes protobuf body, or a field does not decode.
    #[error("the protobuf body could not be read: {0}")]
    Malformed(String),
    /// A well-formed envelope around a kind with no protobuf form (a
    /// custom resource): Kubernetes' 415.
    #[error("{api_version} {kind} has no protobuf form; send it as application/json or application/yaml")]
    NoProtobufForm { api_version: String, kind: String },
}

fn envelope_fields(body: &[u8]) -> Result<(String, String, Vec<u8>), DecodeError> {
    let malformed = |what: &str| DecodeError::Malformed(what.to_string());
    let rest = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| malformed("it does not start with the magic k8s\\0"))?;
    let unknown = SCHEMA
        .message(UNKNOWN)
        .ok_or_else(|| malformed("runtime.Unknown is not in the schema"))?;
    let envelope = DynamicMessage::decode(unknown, rest)
        .map_err(|e| DecodeError::Malformed(format!("the runtime.Unknown envelope: {e}")))?;
    let text = |message: &DynamicMessage, name: &str| {
        message
            .get_field_by_name(name)
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    };
    if !text(&envelope, "contentEncoding").is_empty() {
        return Err(malformed("a contentEncoding is not supported"));
    }
    let content_type = text(&envelope, "contentType");
    if !content_type.is_empty() && content_type != MEDIA_TYPE {
        return Err(DecodeError::Malformed(format!(
            "the envelope holds {content_type:?}, not protobuf"
        )));
    }
    let (api_version, kind) = match envelope.get_field_by_name("typeMeta").as_deref() {
        Some(Value::Message(meta)) => (text(meta, "apiVersion"), text(meta, "kind")),
        _ => Default::default(),
    };
    let raw = envelope
        .get_field_by_name("raw")
        .and_then(|v| v.as_bytes().map(|b| b.to_vec()))
        .unwrap_or_default();
    Ok((api_version, kind, raw))
}

/// The JSON object of a protobuf body, with its `apiVersion` and `kind`.
pub fn decode(body: &[u8]) -> Result<Json, DecodeError> {
    let (api_version, kind, raw) = envelope_fields(body)?;
    if api_version.is_empty() || kind.is_empty() {
        return Err(DecodeError::Malformed(
            "the envelope names no apiVersion and kind".into(),
        ));
    }
    let Some(descriptor) = SCHEMA.message_for(&api_version, &kind) else {
        return Err(DecodeError::NoProtobufForm { api_version, kind });
    };
    let message = DynamicMessage::decode(descriptor, raw.as_slice())
        .map_err(|e| DecodeError::Malformed(format!("{api_version} {kind}: {e}")))?;
    let mut object = json::to_json(&message)
        .map_err(|e| DecodeError::Malformed(format!("{api_version} {kind}: {e}")))?;
    if let Json::Object(map) = &mut object {
        let mut typed = serde_json::Map::new();
        typed.insert("apiVersion".into(), Json::String(api_version));
        typed.insert("kind".into(), Json::String(kind));
        typed.extend(std::mem::take(map));
        *map = typed;
    }
    Ok(object)
}

/// Why an object could not be written as protobuf.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// Its kind has no protobuf form: reply in JSON, or 406.
    #[error("{0} has no protobuf form")]
    NoProtobufForm(String),
    /// A field holds a value its message cannot (stored data that does not
    /// fit the type).
    #[error("the object cannot be written as protobuf: {0}")]
    Unfit(String),
}

/// The protobuf body of a JSON object that names its `apiVersion` and
/// `kind`.
pub fn encode(object: &Json) -> Result<Vec<u8>, EncodeError> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let descriptor = SCHEMA
        .message_for(api_version, kind)
        .ok_or_else(|| EncodeError::NoProtobufForm(format!("{api_version} {kind}")))?;
    let message = json::to_message(&descriptor, object, "").map_err(EncodeError::Unfit)?;
    let unknown = SCHEMA
        .message(UNKNOWN)
        .ok_or_else(|| EncodeError::Unfit("runtime.Unknown is not in the schema".into()))?;
    let type_meta = unknown
        .get_field_by_name("typeMeta")
        .and_then(|f| f.kind().as_message().cloned())
        .ok_or_else(|| EncodeError::Unfit("runtime.Unknown has no typeMeta".into()))?;
    let mut meta = DynamicMessage::new(type_meta);
    meta.set_field_by_name("apiVersion", Value::String(api_version.into()));
    meta.set_field_by_name("kind", Value::String(kind.into()));
    let mut envelope = DynamicMessage::new(unknown);
    envelope.set_field_by_name("typeMeta", Value::Message(meta));
    envelope.set_field_by_name("raw", Value::Bytes(message.encode_to_vec().into()));
    let mut body = MAGIC.to_vec();
    envelope
        .encode(&mut body)
        .map_err(|e| EncodeError::Unfit(e.to_string()))?;
    Ok(body)
}

/// One frame of a protobuf watch stream from one JSON watch event
/// (`{"type": "ADDED", "object": {…}}`).
pub fn watch_frame(event: &Json) -> Result<Vec<u8>, EncodeError> {
    let watch_event = SCHEMA
        .message(&format!("{}.WatchEvent", schema::META))
        .ok_or_else(|| EncodeError::Unfit("WatchEvent is not in the schema".into()))?;
    let raw_extension = watch_event
        .get_field_by_name("object")
        .and_then(|f| f.kind().as_message().cloned())
        .ok_or_else(|| EncodeError::Unfit("WatchEvent has no object".into()))?;
    let mut object = DynamicMessage::new(raw_extension);
    object.set_field_by_name("raw", Value::Bytes(encode(&event["object"])?.into()));
    let mut message = DynamicMessage::new(watch_event);
    let kind = event["type"].as_str().unwrap_or_default();
    message.set_field_by_name("type", Value::String(kind.into()));
    message.set_field_by_name("object", Value::Message(object));
    let encoded = message.encode_to_vec();
    let length = u32::try_from(encoded.len())
        .map_err(|_| EncodeError::Unfit("a watch event over 4 GiB".into()))?;
    let mut frame = length.to_be_bytes().to_vec();
    frame.extend(encoded);
    Ok(frame)
}

/// Reads one frame of a protobuf watch stream: the event type and object,
/// and the bytes that follow. `None` while the frame is incomplete.
pub fn read_watch_frame(bytes: &[u8]) -> Option<Result<(String, Json, usize), DecodeError>> {
    let length = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let frame = bytes.get(4..4 + length)?;
    let decoded = (|| {
        let descriptor = SCHEMA
            .message(&format!("{}.WatchEvent", schema::META))
            .ok_or_else(|| DecodeError::Malformed("no WatchEvent".into()))?;
        let event = DynamicMessage::decode(descriptor, frame)
            .map_err(|e| DecodeError::Malformed(format!("a WatchEvent: {e}")))?;
        let kind = event
            .get_field_by_name("type")
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let raw = match event.get_field_by_name("object").as_deref() {
            Some(Value::Message(object)) => object
                .get_field_by_name("raw")
                .and_then(|v| v.as_bytes().map(|b| b.to_vec()))
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        Ok((kind, decode(&raw)?, 4 + length))
    })();
    Some(decoded)
}

#[cfg(test)]
mod tests;
