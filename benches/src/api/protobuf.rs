//! Kubernetes' protobuf wire as client-go speaks it, for the benchmark's
//! clients: the benchmark's pod as a `k8s-pb` message in the `k8s\0`
//! envelope, a list's item count, watch streams' length-prefixed frames
//! and the sequence annotation of an event's pod. Not a general codec.

use std::collections::BTreeMap;

use anyhow::{bail, ensure, Context, Result};
use bytes::Bytes;
use k8s_pb::api::core::v1::{
    Container, ContainerPort, EnvVar, HttpGetAction, Pod, PodList, PodSpec, Probe, ProbeHandler,
    ResourceRequirements,
};
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1::{ObjectMeta, WatchEvent};
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use prost::Message;

use super::encoding::Event;
use super::pods::{self, SEQ_ANNOTATION};

/// What every protobuf body starts with, before its `runtime.Unknown`.
pub const MAGIC: &[u8] = b"k8s\0";
/// A watch frame longer than this is not one: the stream is not what it
/// claims to be (a JSON answer read as frames, say).
const MAX_FRAME: usize = 64 << 20;
/// `IntOrString.type` of an integer.
const INT: i64 = 0;

/// Pod `name`, in group `index % GROUPS`, its annotation `seq` set to
/// `seq`, as a create's body: the same pod as [`pods::pod_json`].
pub fn pod_body(name: &str, index: usize, seq: usize) -> Bytes {
    envelope("v1", "Pod", &pod(name, index, seq))
}

fn pod(name: &str, index: usize, seq: usize) -> Pod {
    let group = format!("g{}", index % pods::GROUPS);
    let strings = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let quantities = |cpu: &str, memory: &str| -> BTreeMap<String, Quantity> {
        [("cpu", cpu), ("memory", memory)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), quantity(v)))
            .collect()
    };
    let seq = seq.to_string();
    let container = Container {
        name: Some("app".into()),
        image: Some(pods::IMAGE.into()),
        args: pods::ARGS.iter().map(|a| a.to_string()).collect(),
        ports: vec![ContainerPort {
            name: Some("http".into()),
            container_port: Some(pods::PORT),
            protocol: Some("TCP".into()),
            ..Default::default()
        }],
        env: vec![
            env("BENCH_INDEX", &index.to_string()),
            env("BENCH_GROUP", &group),
        ],
        resources: Some(ResourceRequirements {
            requests: quantities("100m", "64Mi"),
            limits: quantities("500m", "128Mi"),
            ..Default::default()
        }),
        readiness_probe: Some(Probe {
            handler: Some(ProbeHandler {
                http_get: Some(HttpGetAction {
                    path: Some("/healthz".into()),
                    port: Some(IntOrString {
                        r#type: Some(INT),
                        int_val: Some(pods::PORT),
                        str_val: None,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            period_seconds: Some(10),
            ..Default::default()
        }),
        ..Default::default()
    };
    Pod {
        metadata: Some(ObjectMeta {
            name: Some(name.into()),
            namespace: Some(pods::NAMESPACE.into()),
            labels: strings(&[
                ("app", "bench"),
                ("bench-group", &group),
                ("tier", "backend"),
            ]),
            annotations: strings(&[
                (SEQ_ANNOTATION, &seq),
                ("prometheus.io/scrape", "true"),
                ("prometheus.io/port", "8080"),
                ("description", pods::DESCRIPTION),
            ]),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            containers: vec![container],
            restart_policy: Some("Always".into()),
            termination_grace_period_seconds: Some(30),
            ..Default::default()
        }),
        status: None,
    }
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: Some(name.into()),
        value: Some(value.into()),
        value_from: None,
    }
}

fn quantity(text: &str) -> Quantity {
    Quantity {
        string: Some(text.into()),
    }
}

/// A request body: the magic, then `runtime.Unknown` around the message.
fn envelope(api_version: &str, kind: &str, message: &impl Message) -> Bytes {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(message.encode_to_vec()),
        content_encoding: None,
        content_type: None,
    };
    let mut body = Vec::with_capacity(MAGIC.len() + unknown.encoded_len());
    body.extend_from_slice(MAGIC);
    unknown
        .encode(&mut body)
        .expect("a Vec grows to take any message");
    Bytes::from(body)
}

/// The `runtime.Unknown` of a protobuf body: its kind and message.
fn unwrap(body: &[u8]) -> Result<(String, Vec<u8>)> {
    let Some(rest) = body.strip_prefix(MAGIC) else {
        let start = String::from_utf8_lossy(&body[..body.len().min(80)]).into_owned();
        bail!("not a protobuf body (no k8s\\0 magic): {start:?}");
    };
    let unknown = Unknown::decode(rest).context("the envelope is no runtime.Unknown")?;
    let kind = unknown.type_meta.and_then(|t| t.kind).unwrap_or_default();
    Ok((kind, unknown.raw.unwrap_or_default()))
}

/// Whether `body` is a protobuf answer (its magic), without decoding it.
pub fn is_protobuf(body: &[u8]) -> bool {
    body.starts_with(MAGIC)
}

/// The number of pods in a protobuf `PodList` answer.
pub fn list_items(body: &[u8]) -> Result<usize> {
    let (kind, raw) = unwrap(body)?;
    ensure!(
        kind == "PodList",
        "a list answered as {kind:?}, not PodList"
    );
    let list = PodList::decode(raw.as_slice()).context("the PodList does not decode")?;
    Ok(list.items.len())
}

/// A Pod's message read for its metadata alone: prost skips the spec and
/// status (fields 2 and 3) without decoding them, as the JSON watchers
/// find the annotation without parsing the rest of the line.
#[derive(Clone, PartialEq, Message)]
struct PodMetadata {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
}

/// One frame of a protobuf watch (its length already taken off): the
/// `WatchEvent`, and in its object (a whole `k8s\0` + `runtime.Unknown`
/// body) the pod's sequence annotation.
pub fn watch_event(frame: &[u8]) -> Event {
    let Ok(event) = WatchEvent::decode(frame) else {
        return Event::Unexpected;
    };
    match event.r#type.as_deref() {
        Some("BOOKMARK") => return Event::Bookmark,
        Some("ADDED" | "MODIFIED" | "DELETED") => {}
        _ => return Event::Unexpected,
    }
    let raw = event.object.and_then(|o| o.raw).unwrap_or_default();
    let sequence = || -> Option<usize> {
        let (kind, pod) = unwrap(&raw).ok()?;
        if kind != "Pod" {
            return None;
        }
        let meta = PodMetadata::decode(pod.as_slice()).ok()?.metadata?;
        meta.annotations.get(SEQ_ANNOTATION)?.parse().ok()
    };
    sequence().map_or(Event::Unexpected, Event::Sequence)
}

/// Length-prefixed frames from chunks that may cut them anywhere: a
/// 4-byte big-endian length, then that many bytes.
#[derive(Default)]
pub struct Frames {
    /// A frame not yet complete, its length included.
    partial: Vec<u8>,
}

impl Frames {
    /// Hands `on_frame` every frame `data` completes (without its length),
    /// keeping the rest for the next chunk. An impossible length is an
    /// error: the stream is not length-prefixed.
    pub fn split(&mut self, mut data: &[u8], mut on_frame: impl FnMut(&[u8])) -> Result<()> {
        while !self.partial.is_empty() {
            let want = match frame_length(&self.partial)? {
                Some(length) => 4 + length,
                None => 4,
            };
            let take = (want - self.partial.len()).min(data.len());
            self.partial.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.partial.len() < want {
                return Ok(());
            }
            if want > 4 || frame_length(&self.partial)? == Some(0) {
                on_frame(&self.partial[4..]);
                self.partial.clear();
            }
        }
        // Whole frames straight from the chunk, without copying them.
        while let Some(length) = frame_length(data)? {
            let Some(frame) = data.get(4..4 + length) else {
                break;
            };
            on_frame(frame);
            data = &data[4 + length..];
        }
        self.partial.extend_from_slice(data);
        Ok(())
    }
}

/// The length at the start of `bytes`, once its four bytes are there.
fn frame_length(bytes: &[u8]) -> Result<Option<usize>> {
    let Some(head) = bytes.first_chunk::<4>() else {
        return Ok(None);
    };
    let length = u32::from_be_bytes(*head) as usize;
    ensure!(
        length <= MAX_FRAME,
        "a watch frame of {length} bytes: the stream is not length-prefixed protobuf (it starts {:?})",
        String::from_utf8_lossy(&bytes[..bytes.len().min(40)])
    );
    Ok(Some(length))
}

#[cfg(test)]
mod tests {
    use k8s_pb::apimachinery::pkg::runtime::RawExtension;
    use serde_json::Value;

    use super::*;

    /// `value`'s string form: JSON strings as they are, numbers as text.
    fn text(value: &Value) -> String {
        value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_string)
    }

    fn strings(json: &Value) -> BTreeMap<String, String> {
        let object = json.as_object().expect("a JSON object");
        object.iter().map(|(k, v)| (k.clone(), text(v))).collect()
    }

    fn quantities(json: &Value) -> BTreeMap<String, Quantity> {
        let object = json.as_object().expect("a JSON object");
        object
            .iter()
            .map(|(k, v)| (k.clone(), quantity(&text(v))))
            .collect()
    }

    #[test]
    fn the_protobuf_pod_is_the_json_pod() {
        let body = pod_body("pod-000042", 42, 7);
        let (kind, raw) = unwrap(&body).unwrap();
        assert_eq!(kind, "Pod");
        let decoded = Pod::decode(raw.as_slice()).unwrap();
        assert_eq!(decoded, pod("pod-000042", 42, 7));

        let json: Value = serde_json::from_slice(&pods::pod_json("pod-000042", 42, 7)).unwrap();
        let meta = decoded.metadata.unwrap();
        assert_eq!(meta.name.as_deref(), json["metadata"]["name"].as_str());
        assert_eq!(
            meta.namespace.as_deref(),
            json["metadata"]["namespace"].as_str()
        );
        assert_eq!(meta.labels, strings(&json["metadata"]["labels"]));
        assert_eq!(meta.annotations, strings(&json["metadata"]["annotations"]));

        let spec = decoded.spec.unwrap();
        let want = &json["spec"];
        assert_eq!(
            spec.restart_policy.as_deref(),
            want["restartPolicy"].as_str()
        );
        assert_eq!(
            spec.termination_grace_period_seconds,
            want["terminationGracePeriodSeconds"].as_i64()
        );
        assert_eq!(spec.containers.len(), 1);
        let (c, want) = (&spec.containers[0], &want["containers"][0]);
        assert_eq!(c.name.as_deref(), want["name"].as_str());
        assert_eq!(c.image.as_deref(), want["image"].as_str());
        let args: Vec<String> = want["args"].as_array().unwrap().iter().map(text).collect();
        assert_eq!(c.args, args);
        let port = &want["ports"][0];
        assert_eq!(c.ports.len(), 1);
        assert_eq!(c.ports[0].name.as_deref(), port["name"].as_str());
        assert_eq!(
            c.ports[0].container_port.map(i64::from),
            port["containerPort"].as_i64()
        );
        assert_eq!(c.ports[0].protocol.as_deref(), port["protocol"].as_str());
        let env: Vec<(String, String)> = c
            .env
            .iter()
            .map(|e| (e.name.clone().unwrap(), e.value.clone().unwrap()))
            .collect();
        let want_env: Vec<(String, String)> = want["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (text(&e["name"]), text(&e["value"])))
            .collect();
        assert_eq!(env, want_env);
        let resources = c.resources.clone().unwrap();
        assert_eq!(
            resources.requests,
            quantities(&want["resources"]["requests"])
        );
        assert_eq!(resources.limits, quantities(&want["resources"]["limits"]));
        let probe = c.readiness_probe.clone().unwrap();
        let http_get = probe.handler.unwrap().http_get.unwrap();
        let want_probe = &want["readinessProbe"];
        assert_eq!(
            http_get.path.as_deref(),
            want_probe["httpGet"]["path"].as_str()
        );
        assert_eq!(
            http_get.port.and_then(|p| p.int_val).map(i64::from),
            want_probe["httpGet"]["port"].as_i64()
        );
        assert_eq!(
            probe.period_seconds.map(i64::from),
            want_probe["periodSeconds"].as_i64()
        );
    }

    #[test]
    fn lists_are_counted_and_json_is_refused() {
        let list = PodList {
            metadata: None,
            items: vec![pod("a", 0, 0), pod("b", 1, 0)],
        };
        assert_eq!(list_items(&envelope("v1", "PodList", &list)).unwrap(), 2);
        let err = list_items(b"{\"kind\":\"PodList\"}").unwrap_err();
        assert!(err.to_string().contains("no k8s\\0 magic"), "{err}");
        let err = list_items(&pod_body("a", 0, 0)).unwrap_err();
        assert!(err.to_string().contains("\"Pod\""), "{err}");
        assert!(is_protobuf(&pod_body("a", 0, 0)));
        assert!(!is_protobuf(b"{}"));
    }

    fn event_frame(kind: &str, object: Vec<u8>) -> Vec<u8> {
        WatchEvent {
            r#type: Some(kind.into()),
            object: Some(RawExtension { raw: Some(object) }),
        }
        .encode_to_vec()
    }

    #[test]
    fn a_watch_events_sequence_is_read_from_its_pod() {
        let added = event_frame("ADDED", pod_body("w", 3, 42).to_vec());
        assert_eq!(watch_event(&added), Event::Sequence(42));
        let modified = event_frame("MODIFIED", pod_body("w", 3, 0).to_vec());
        assert_eq!(watch_event(&modified), Event::Sequence(0));
        assert_eq!(
            watch_event(&event_frame("BOOKMARK", Vec::new())),
            Event::Bookmark
        );
        let error = event_frame(
            "ERROR",
            envelope("v1", "Status", &ObjectMeta::default()).to_vec(),
        );
        assert_eq!(watch_event(&error), Event::Unexpected);
        // A pod without the annotation, another kind, bytes that are no event.
        let mut bare = pod("w", 0, 0);
        bare.metadata.as_mut().unwrap().annotations.clear();
        let bare = event_frame("ADDED", envelope("v1", "Pod", &bare).to_vec());
        assert_eq!(watch_event(&bare), Event::Unexpected);
        let other = event_frame(
            "ADDED",
            envelope("v1", "ConfigMap", &pod("w", 0, 1)).to_vec(),
        );
        assert_eq!(watch_event(&other), Event::Unexpected);
        assert_eq!(watch_event(b"\xff\xff\xff"), Event::Unexpected);
    }

    /// Feeds `input` to a fresh splitter in pieces of `piece` bytes.
    fn split_in_pieces(input: &[u8], piece: usize) -> Result<Vec<Vec<u8>>> {
        let mut frames = Frames::default();
        let mut seen = Vec::new();
        for chunk in input.chunks(piece) {
            frames.split(chunk, |f| seen.push(f.to_vec()))?;
        }
        assert!(frames.partial.is_empty(), "a frame was left unfinished");
        Ok(seen)
    }

    #[test]
    fn frames_come_out_whole_however_the_reads_cut_them() {
        let bodies: [&[u8]; 4] = [b"first", b"", b"x", &[7; 300]];
        let mut input = Vec::new();
        for body in bodies {
            input.extend_from_slice(&(body.len() as u32).to_be_bytes());
            input.extend_from_slice(body);
        }
        for piece in 1..=input.len() {
            let seen = split_in_pieces(&input, piece).unwrap();
            assert_eq!(seen, bodies, "pieces of {piece} bytes");
        }
        // Cut at every point into two reads.
        for cut in 0..input.len() {
            let mut frames = Frames::default();
            let mut seen = Vec::new();
            let (a, b) = input.split_at(cut);
            frames.split(a, |f| seen.push(f.to_vec())).unwrap();
            frames.split(b, |f| seen.push(f.to_vec())).unwrap();
            assert_eq!(seen, bodies, "cut at {cut}");
        }
    }

    #[test]
    fn a_json_stream_read_as_frames_is_an_error() {
        let err = split_in_pieces(b"{\"type\":\"ADDED\"}\n", 3).unwrap_err();
        assert!(err.to_string().contains("not length-prefixed"), "{err}");
    }
}
