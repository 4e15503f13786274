//! Replies written in the form the client negotiated ([`accept::negotiate`]):
//! the handlers answer in JSON, and a reply for a client that prefers
//! YAML or protobuf is rewritten here, objects, lists, `Status` errors and
//! watch streams alike. A reply that is not plain JSON (a Table, logs) is
//! left as it is.

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue};
use axum::response::Response;
use futures::StreamExt;
use serde_json::Value;

use crate::accept::Output;
use crate::protobuf;

/// The largest JSON reply rewritten; a list larger than this is answered
/// in JSON (which every client reads) rather than held twice in memory.
const MAX_REWRITTEN_BYTES: usize = 512 * 1024 * 1024;

fn is_plain_json(response: &Response) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == "application/json")
}

/// `response` in `output`. A JSON object that cannot be written as
/// protobuf (data that does not fit its type) stays JSON, with a log line:
/// every client reads a JSON reply by its Content-Type.
pub async fn write_as(output: Output, response: Response) -> Response {
    if output == Output::Json || !is_plain_json(&response) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_REWRITTEN_BYTES).await {
        Ok(bytes) => bytes,
        Err(err) => {
            tracing::warn!(%err, "reading a reply to rewrite it");
            return Response::from_parts(parts, Body::empty());
        }
    };
    let Ok(value) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    let written = match output {
        Output::Json => None,
        Output::Yaml => serde_yaml::to_string(&value).ok().map(Bytes::from),
        Output::Protobuf => match protobuf::encode(&value) {
            Ok(encoded) => Some(Bytes::from(encoded)),
            Err(err) => {
                tracing::warn!(%err, "a reply stays JSON");
                None
            }
        },
    };
    match written {
        Some(written) => {
            parts.headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(output.media_type()),
            );
            parts.headers.remove(header::CONTENT_LENGTH);
            Response::from_parts(parts, Body::from(written))
        }
        None => Response::from_parts(parts, Body::from(bytes)),
    }
}

/// A JSON watch reply (one event per line) as a protobuf watch stream:
/// each event one length-prefixed frame. An event that cannot be written
/// ends the stream with an ERROR event, as Kubernetes ends a watch whose
/// object it cannot encode.
pub fn watch_as_protobuf(response: Response) -> Response {
    if !is_plain_json(&response) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(protobuf::WATCH_MEDIA_TYPE),
    );
    let frames = futures::stream::unfold(
        (body.into_data_stream(), Vec::<u8>::new(), false),
        |(mut chunks, mut pending, ended)| async move {
            if ended {
                return None;
            }
            loop {
                if let Some(end) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    let (frame, fatal) = frame_of(&line);
                    return Some((
                        Ok::<_, std::convert::Infallible>(frame),
                        (chunks, pending, fatal),
                    ));
                }
                match chunks.next().await {
                    Some(Ok(chunk)) => pending.extend_from_slice(&chunk),
                    Some(Err(err)) => {
                        tracing::warn!(%err, "reading a watch stream to frame it");
                        return None;
                    }
                    None => return None,
                }
            }
        },
    );
    Response::from_parts(parts, Body::from_stream(frames))
}

/// The protobuf frame of one JSON watch event, and whether it ends the
/// stream.
fn frame_of(line: &[u8]) -> (Bytes, bool) {
    let failed = |why: String| {
        tracing::warn!(%why, "a watch event has no protobuf form; ending the watch");
        let status = crate::status::ApiError::internal(why).to_status();
        let event = serde_json::json!({"type": "ERROR", "object": status});
        let frame = protobuf::watch_frame(&event).unwrap_or_default();
        (Bytes::from(frame), true)
    };
    match serde_json::from_slice::<Value>(line) {
        Ok(event) => match protobuf::watch_frame(&event) {
            Ok(frame) => (Bytes::from(frame), false),
            Err(err) => failed(err.to_string()),
        },
        Err(err) => failed(format!("a watch event is not JSON: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::response::IntoResponse;

    fn json_reply(value: &Value) -> Response {
        (
            [(header::CONTENT_TYPE, "application/json")],
            serde_json::to_vec(value).unwrap(),
        )
            .into_response()
    }

    async fn body_of(response: Response) -> (String, Bytes) {
        let content_type = response.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_string();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (content_type, bytes)
    }

    fn config_map() -> Value {
        serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "default", "resourceVersion": "7"},
            "data": {"k": "v"}
        })
    }

    #[tokio::test]
    async fn objects_and_statuses_are_rewritten_in_the_negotiated_form() {
        let (kind, bytes) =
            body_of(write_as(Output::Protobuf, json_reply(&config_map())).await).await;
        assert_eq!(kind, protobuf::MEDIA_TYPE);
        assert_eq!(protobuf::decode(&bytes).unwrap(), config_map());

        let status = crate::status::ApiError::not_found("", "configmaps", "a").to_status();
        let (kind, bytes) = body_of(write_as(Output::Protobuf, json_reply(&status)).await).await;
        assert_eq!(kind, protobuf::MEDIA_TYPE);
        assert_eq!(protobuf::decode(&bytes).unwrap()["reason"], "NotFound");

        let (kind, bytes) = body_of(write_as(Output::Yaml, json_reply(&config_map())).await).await;
        assert_eq!(kind, "application/yaml");
        let read: Value = serde_yaml::from_slice(&bytes).unwrap();
        assert_eq!(read, config_map());
    }

    #[tokio::test]
    async fn what_has_no_protobuf_form_stays_json() {
        let custom = serde_json::json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}});
        let (kind, bytes) = body_of(write_as(Output::Protobuf, json_reply(&custom)).await).await;
        assert_eq!(kind, "application/json");
        assert_eq!(serde_json::from_slice::<Value>(&bytes).unwrap(), custom);
        // A table is not plain JSON and is left alone.
        let table = (
            [(
                header::CONTENT_TYPE,
                "application/json;as=Table;v=v1;g=meta.k8s.io",
            )],
            "{}",
        )
            .into_response();
        let (kind, _) = body_of(write_as(Output::Protobuf, table).await).await;
        assert!(kind.contains("as=Table"));
    }

    #[tokio::test]
    async fn watch_lines_become_frames_whatever_the_chunking() {
        let added = serde_json::json!({"type": "ADDED", "object": config_map()});
        let mut text = serde_json::to_vec(&added).unwrap();
        text.push(b'\n');
        let deleted = serde_json::json!({"type": "DELETED", "object": config_map()});
        text.extend(serde_json::to_vec(&deleted).unwrap());
        text.push(b'\n');
        // Chunks that split the lines anywhere.
        let chunks: Vec<Result<Bytes, std::convert::Infallible>> = text
            .chunks(7)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let response = (
            [(header::CONTENT_TYPE, "application/json")],
            Body::from_stream(futures::stream::iter(chunks)),
        )
            .into_response();
        let (kind, bytes) = body_of(watch_as_protobuf(response)).await;
        assert_eq!(kind, protobuf::WATCH_MEDIA_TYPE);
        let (first, object, used) = protobuf::read_watch_frame(&bytes).unwrap().unwrap();
        assert_eq!((first.as_str(), &object), ("ADDED", &config_map()));
        let (second, _, rest) = protobuf::read_watch_frame(&bytes[used..]).unwrap().unwrap();
        assert_eq!(second, "DELETED");
        assert_eq!(used + rest, bytes.len());
    }

    #[tokio::test]
    async fn an_event_with_no_protobuf_form_ends_the_watch_with_an_error() {
        let custom = serde_json::json!({"type": "ADDED", "object": {"apiVersion": "example.com/v1", "kind": "Widget"}});
        let mut text = serde_json::to_vec(&custom).unwrap();
        text.push(b'\n');
        text.extend(
            serde_json::to_vec(&serde_json::json!({"type": "ADDED", "object": config_map()}))
                .unwrap(),
        );
        text.push(b'\n');
        let (_, bytes) = body_of(watch_as_protobuf(json_reply_raw(text))).await;
        let (kind, object, used) = protobuf::read_watch_frame(&bytes).unwrap().unwrap();
        assert_eq!(
            (kind.as_str(), object["code"].as_u64()),
            ("ERROR", Some(500))
        );
        assert_eq!(used, bytes.len(), "nothing follows the error");
    }

    fn json_reply_raw(bytes: Vec<u8>) -> Response {
        ([(header::CONTENT_TYPE, "application/json")], bytes).into_response()
    }
}
