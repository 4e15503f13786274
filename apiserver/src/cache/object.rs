//! One object and one change as the watch cache holds them: the store's
//! JSON bytes, shared by the object map and the event ring, plus the few
//! fields selectors read. Objects are parsed only when they are served.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use serde_json::{json, Map, Value};

use crate::resources::ResourceType;
use crate::status::ApiResult;

/// The paths label and field selectors can read, for every kind
/// (`selectors::kind_fields` lists them per kind; keep the two in step).
/// A cached object keeps only these, so that 100 000 pods cost little more
/// than their JSON.
const SELECTABLE_PATHS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "metadata.labels",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "spec.unschedulable",
    "spec.clusterIP",
    "spec.type",
    "spec.signerName",
    "status.phase",
    "status.podIP",
    "status.podIPs",
    "status.nominatedNodeName",
    "status.replicas",
    "status.succeeded",
    "involvedObject",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

/// An object in the cache at one of its revisions.
#[derive(Debug)]
pub struct CachedObject {
    /// The store key.
    pub key: Arc<str>,
    pub mod_revision: i64,
    /// The value as stored (JSON without resourceVersion).
    pub stored: Bytes,
    /// `kind` and the [`SELECTABLE_PATHS`] of the object, as JSON.
    selectable: Value,
}

impl CachedObject {
    pub fn new(
        resource: &ResourceType,
        key: Arc<str>,
        mod_revision: i64,
        stored: Bytes,
    ) -> CachedObject {
        let parsed: Value = serde_json::from_slice(&stored).unwrap_or(Value::Null);
        CachedObject {
            key,
            mod_revision,
            selectable: selectable(resource, &parsed),
            stored,
        }
    }

    /// The object as served, with `resourceVersion` = `revision`.
    pub fn served(&self, resource: &ResourceType, revision: i64) -> ApiResult<Value> {
        crate::object::from_stored(resource, &self.stored, revision)
    }

    /// The object as selectors see it (only the fields they read).
    pub fn selectable(&self) -> &Value {
        &self.selectable
    }

    /// Bytes this object holds, roughly: its JSON and what selectors keep.
    pub fn size(&self) -> usize {
        self.stored.len() + self.key.len() + 128
    }
}

fn selectable(resource: &ResourceType, object: &Value) -> Value {
    let mut out =
        json!({"kind": object.get("kind").and_then(Value::as_str).unwrap_or(resource.kind)});
    for path in SELECTABLE_PATHS {
        let mut parts = path.split('.');
        let Some(found) = path.split('.').try_fold(object, |v, part| v.get(part)) else {
            continue;
        };
        let mut at = &mut out;
        let mut part = parts.next().unwrap_or_default();
        for next in parts {
            if !at.get(part).is_some_and(Value::is_object) {
                at[part] = Value::Object(Map::new());
            }
            at = &mut at[part];
            part = next;
        }
        at[part] = found.clone();
    }
    out
}

/// Whether a change wrote or removed its object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeType {
    Put,
    Delete,
}

/// The type of a watch event, as a watcher sees it (selectors decide).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One change in the event ring.
#[derive(Debug)]
pub struct WatchEvent {
    pub revision: i64,
    pub change: ChangeType,
    /// Put: the new object. Delete: its last state.
    pub object: Arc<CachedObject>,
    /// Put: the object before, if it existed.
    pub prev: Option<Arc<CachedObject>>,
    /// The event's line (plain JSON, storage version) per event type,
    /// encoded once for every watcher that sees it so.
    lines: [OnceLock<Bytes>; 3],
}

impl WatchEvent {
    pub fn new(
        revision: i64,
        change: ChangeType,
        object: Arc<CachedObject>,
        prev: Option<Arc<CachedObject>>,
    ) -> WatchEvent {
        WatchEvent {
            revision,
            change,
            object,
            prev,
            lines: Default::default(),
        }
    }

    /// The object as this event serves it: a deleted object carries the
    /// revision of its deletion.
    pub fn served(&self, resource: &ResourceType) -> ApiResult<Value> {
        self.object.served(resource, self.revision)
    }

    /// `{"type":…,"object":…}\n` of this event, encoded on first use.
    /// `None` if the stored object is not valid JSON.
    pub fn line(&self, resource: &ResourceType, event: EventType) -> Option<Bytes> {
        if let Some(line) = self.lines[event.index()].get() {
            return Some(line.clone());
        }
        let served = self.served(resource).ok()?;
        let line = encode_event(event.as_str(), &served);
        Some(self.lines[event.index()].get_or_init(|| line).clone())
    }

    /// Bytes this event keeps alive, roughly.
    pub fn size(&self) -> usize {
        self.object.size() + self.prev.as_ref().map_or(0, |p| p.size()) + 64
    }
}

/// One watch event line: "type" first, as Kubernetes writes it.
pub fn encode_event(kind: &str, object: &Value) -> Bytes {
    let mut line = format!("{{\"type\":\"{kind}\",\"object\":").into_bytes();
    line.extend(serde_json::to_vec(object).unwrap_or_default());
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods() -> &'static ResourceType {
        crate::resources::find("", "v1", "pods").unwrap()
    }

    #[test]
    fn selectors_see_the_same_fields_as_on_the_whole_object() {
        let pod = json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web"},
                         "annotations": {"big": "x".repeat(1000)}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1"},
        });
        let cached = CachedObject::new(
            pods(),
            "/registry/core/pods/ns/p".into(),
            5,
            Bytes::from(serde_json::to_vec(&pod).unwrap()),
        );
        let s = cached.selectable();
        assert_eq!(s["kind"], "Pod");
        assert_eq!(s["metadata"]["labels"]["app"], "web");
        assert_eq!(s["spec"]["nodeName"], "n1");
        assert_eq!(s["status"]["phase"], "Running");
        assert!(s["metadata"].get("annotations").is_none());
        assert!(s["spec"].get("containers").is_none());
        for selector in [
            "spec.nodeName=n1",
            "spec.nodeName!=n2",
            "status.phase=Running",
            "metadata.name=p,metadata.namespace=ns",
            "status.podIP=10.0.0.1",
            "spec.hostNetwork=false",
        ] {
            let fields = crate::selectors::FieldSelector::parse(selector).unwrap();
            assert!(fields.matches(s), "{selector}");
        }
        let served = cached.served(pods(), 5).unwrap();
        assert_eq!(served["metadata"]["resourceVersion"], "5");
    }

    #[test]
    fn an_event_line_is_encoded_once_per_type() {
        let cached = Arc::new(CachedObject::new(
            pods(),
            "/registry/core/pods/ns/p".into(),
            7,
            Bytes::from_static(br#"{"metadata":{"name":"p"}}"#),
        ));
        let event = WatchEvent::new(9, ChangeType::Delete, cached, None);
        let a = event.line(pods(), EventType::Deleted).unwrap();
        let b = event.line(pods(), EventType::Deleted).unwrap();
        assert_eq!(a.as_ptr(), b.as_ptr(), "the same bytes for every watcher");
        let line: Value = serde_json::from_slice(&a).unwrap();
        assert_eq!(line["type"], "DELETED");
        assert_eq!(line["object"]["metadata"]["resourceVersion"], "9");
        assert!(a.starts_with(b"{\"type\":") && a.ends_with(b"}\n"));
    }
}
