//! One object and one change as the watch cache holds them: the store's
//! JSON bytes, shared by the object map and the event ring, plus the few
//! fields selectors read. Objects are parsed only when they are served.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

use crate::resources::ResourceType;
use crate::status::ApiResult;

/// An object in the cache at one of its revisions.
#[derive(Debug)]
pub struct CachedObject {
    /// The store key.
    pub key: Arc<str>,
    pub mod_revision: i64,
    /// The value as stored (JSON without resourceVersion).
    pub stored: Bytes,
    /// What label and field selectors read of the object.
    selectable: Selectable,
    /// Where the resourceVersion goes when the stored bytes are served.
    splice: Option<crate::object::Splice>,
}

impl CachedObject {
    pub fn new(
        resource: &ResourceType,
        key: Arc<str>,
        mod_revision: i64,
        stored: Bytes,
    ) -> CachedObject {
        let parsed = parse_selectable(resource, &stored);
        // Bytes that are not a JSON object (written past the API, with
        // etcdctl say) are served only through a parse, which refuses them.
        let splice = match parsed {
            Some(_) if std::str::from_utf8(&stored).is_ok() => crate::object::Splice::find(&stored),
            _ => None,
        };
        CachedObject {
            key,
            mod_revision,
            selectable: Selectable::new(resource, parsed.as_ref().unwrap_or(&Value::Null)),
            splice,
            stored,
        }
    }

    /// The object as served, with `resourceVersion` = `revision`.
    pub fn served(&self, resource: &ResourceType, revision: i64) -> ApiResult<Value> {
        crate::object::from_stored(resource, &self.stored, revision)
    }

    /// Appends the object as served at `revision` to `out` without
    /// parsing it; `false` (nothing written) when its bytes are not what
    /// the registry stores, for [`CachedObject::served`] to serve.
    pub fn write_served(&self, out: &mut Vec<u8>, revision: i64) -> bool {
        match self.splice {
            Some(splice) => {
                splice.write(out, &self.stored, revision);
                true
            }
            None => false,
        }
    }

    /// Whether [`CachedObject::write_served`] can write it.
    pub fn splices(&self) -> bool {
        self.splice.is_some()
    }

    /// The object as selectors see it (only the fields they read).
    pub fn selectable(&self) -> &Selectable {
        &self.selectable
    }

    /// Bytes this object holds, roughly: its JSON and what selectors keep.
    pub fn size(&self) -> usize {
        self.stored.len() + self.key.len() + self.selectable.size() + 96
    }
}

/// What selectors read of a stored object: its `kind`, its labels and the
/// paths its kind's selectable fields read, built alone; the rest of the
/// JSON is checked but not built (most of a pod is neither). `None` when
/// the bytes are not one JSON object.
fn parse_selectable(resource: &ResourceType, stored: &[u8]) -> Option<Value> {
    let mut paths = vec!["kind", "metadata.labels"];
    for field in skiff_machinery::selectors::supported_fields(resource.kind) {
        skiff_machinery::selectors::paths_read(field, &mut paths);
    }
    let mut reader = serde_json::Deserializer::from_slice(stored);
    let parsed = Wanted(paths).deserialize(&mut reader).ok()?;
    reader.end().ok()?;
    if !parsed.is_object() {
        return None;
    }
    match parsed.get("kind").and_then(Value::as_str) {
        // Another kind's fields: rare enough to parse it whole.
        Some(kind) if kind != resource.kind => serde_json::from_slice(stored).ok(),
        _ => Some(parsed),
    }
}

/// Builds the members of a JSON object at these dotted paths (relative to
/// it) and skips the rest; anything but an object reads as null, as the
/// paths would find nothing in it.
struct Wanted(Vec<&'static str>);

impl<'de> DeserializeSeed<'de> for Wanted {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Wanted {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let key = key.as_str();
            if self.0.contains(&key) {
                out.insert(key.to_string(), map.next_value::<Value>()?);
                continue;
            }
            let deeper: Vec<&'static str> = self
                .0
                .iter()
                .filter_map(|path| path.strip_prefix(key)?.strip_prefix('.'))
                .collect();
            if deeper.is_empty() {
                map.next_value::<IgnoredAny>()?;
            } else {
                out.insert(key.to_string(), map.next_value_seed(Wanted(deeper))?);
            }
        }
        Ok(Value::Object(out))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Value::Null)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_str<E>(self, _: &str) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

/// An object key, borrowed from the input when it has no escapes.
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(key) => key,
            Key::Owned(key) => key,
        }
    }
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object key")
            }

            fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::Borrowed(key))
            }

            fn visit_str<E>(self, key: &str) -> Result<Key<'de>, E> {
                Ok(Key::Owned(key.to_string()))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// The labels and selectable field values of an object, packed so that
/// 100 000 pods cost little more than their JSON: one string holding every
/// label key and value and every field value back to back, and the offsets
/// where each ends. A parsed `Value` of the same fields cost more than the
/// whole JSON of a pod.
#[derive(Debug, PartialEq, Eq)]
pub struct Selectable {
    text: Box<str>,
    /// Per label, sorted by key: where its key starts, where its key ends
    /// (and its value starts) and where its value ends.
    labels: Box<[(u32, u32, u32)]>,
    /// The fields a field selector may name for the kind, in that order.
    names: &'static [&'static str],
    /// Per name, where its value ends.
    fields: Box<[u32]>,
}

impl Selectable {
    fn new(resource: &ResourceType, object: &Value) -> Selectable {
        let mut text = String::new();
        let mut labels: Vec<(&str, &str)> = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|labels| {
                labels
                    .iter()
                    .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
                    .collect()
            })
            .unwrap_or_default();
        labels.sort_unstable();
        let mut label_ends = Vec::with_capacity(labels.len());
        for (key, value) in labels {
            let start = text.len();
            text.push_str(key);
            let key_end = text.len();
            text.push_str(value);
            label_ends.push((offset(start), offset(key_end), offset(text.len())));
        }
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or(resource.kind);
        let names = skiff_machinery::selectors::supported_fields(kind);
        let mut with_kind;
        let object = match object.get("kind") {
            Some(_) => object,
            None => {
                with_kind = object.clone();
                if let Some(map) = with_kind.as_object_mut() {
                    map.insert("kind".into(), Value::from(resource.kind));
                }
                &with_kind
            }
        };
        let fields = names
            .iter()
            .map(|name| {
                text.push_str(&skiff_machinery::selectors::field_value(object, name));
                offset(text.len())
            })
            .collect();
        Selectable {
            text: text.into_boxed_str(),
            labels: label_ends.into_boxed_slice(),
            names,
            fields,
        }
    }

    /// The value of label `key`, if the object has it as a string.
    pub fn label(&self, key: &str) -> Option<&str> {
        let text = |from: u32, to: u32| self.text.get(from as usize..to as usize);
        let i = self
            .labels
            .binary_search_by(|&(start, key_end, _)| text(start, key_end).unwrap_or("").cmp(key))
            .ok()?;
        let (_, key_end, value_end) = self.labels[i];
        text(key_end, value_end)
    }

    /// The value field selectors compare `field` with (`None` when a
    /// selector may not name it for this kind).
    pub fn field(&self, field: &str) -> Option<&str> {
        let i = self.names.iter().position(|name| *name == field)?;
        let start = match i {
            0 => self.labels.last().map_or(0, |&(_, _, end)| end as usize),
            _ => self.fields[i - 1] as usize,
        };
        self.text.get(start..self.fields[i] as usize)
    }

    fn size(&self) -> usize {
        self.text.len() + self.labels.len() * 12 + self.fields.len() * 4 + 48
    }
}

/// Offsets within one object's selectable text. An object is at most a
/// few MiB, far below `u32::MAX`.
fn offset(at: usize) -> u32 {
    u32::try_from(at).unwrap_or(u32::MAX)
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
        let line = match self.object.splice {
            // The stored bytes with the revision spliced in, unparsed.
            Some(splice) => event_line(event.as_str(), self.object.stored.len(), |out| {
                splice.write(out, &self.object.stored, self.revision)
            }),
            None => encode_event(event.as_str(), &self.served(resource).ok()?),
        };
        Some(self.lines[event.index()].get_or_init(|| line).clone())
    }

    /// Bytes this event keeps alive, roughly.
    pub fn size(&self) -> usize {
        self.object.size() + self.prev.as_ref().map_or(0, |p| p.size()) + 64
    }
}

/// One watch event line: "type" first, as Kubernetes writes it.
pub fn encode_event(kind: &str, object: &Value) -> Bytes {
    event_line(kind, 0, |out| {
        // A Value always serializes (its keys are strings).
        let _ = serde_json::to_writer(out, object);
    })
}

/// `{"type":<kind>,"object":…}\n`, the object written by `object`;
/// `size`: roughly how many bytes it writes.
fn event_line(kind: &str, size: usize, object: impl FnOnce(&mut Vec<u8>)) -> Bytes {
    let mut line = Vec::with_capacity(size + 48);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(kind.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    object(&mut line);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pods() -> &'static ResourceType {
        crate::resources::find("", "v1", "pods").unwrap()
    }

    #[test]
    fn selectors_see_the_same_fields_as_on_the_whole_object() {
        use skiff_machinery::selectors::{FieldSelector, LabelSelector};
        // No `kind` in the stored object: the resource's kind is used.
        let pod = json!({
            "metadata": {"name": "p", "namespace": "ns",
                         "labels": {"tier": "db", "app": "web", "a": "", "zz": "last", "n": 5},
                         "annotations": {"big": "x".repeat(1000)}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.1"}]},
        });
        let cached = CachedObject::new(
            pods(),
            "/registry/core/pods/ns/p".into(),
            5,
            Bytes::from(serde_json::to_vec(&pod).unwrap()),
        );
        let s = cached.selectable();
        assert_eq!(s.label("app"), Some("web"));
        assert_eq!(s.label("a"), Some(""));
        assert_eq!(s.label("zz"), Some("last"));
        assert_eq!(s.label("n"), None, "a label that is not a string is absent");
        assert_eq!(s.label("missing"), None);
        assert_eq!(s.field("spec.nodeName"), Some("n1"));
        assert_eq!(s.field("status.podIP"), Some("10.0.0.1"));
        assert_eq!(s.field("spec.hostNetwork"), Some("false"));
        assert_eq!(s.field("spec.containers"), None);
        let mut whole = pod.clone();
        whole["kind"] = json!("Pod");
        for selector in [
            "spec.nodeName=n1",
            "spec.nodeName!=n2",
            "spec.nodeName=n2",
            "status.phase=Running",
            "metadata.name=p,metadata.namespace=ns",
            "metadata.name=p,metadata.namespace=other",
            "status.podIP=10.0.0.1",
            "spec.hostNetwork=false",
            "status.nominatedNodeName=",
        ] {
            let fields = FieldSelector::parse(selector).unwrap();
            assert_eq!(
                fields.matches_by(|f| s.field(f)),
                fields.matches(&whole),
                "{selector}"
            );
        }
        for selector in [
            "app=web",
            "app!=web",
            "a=",
            "tier in (db,cache),zz",
            "!missing",
            "n",
            "app,!tier",
        ] {
            let labels = LabelSelector::parse(selector).unwrap();
            assert_eq!(
                labels.matches_by(|k| s.label(k)),
                labels.matches_object(&whole),
                "{selector}"
            );
        }
        let served = cached.served(pods(), 5).unwrap();
        assert_eq!(served["metadata"]["resourceVersion"], "5");
    }

    #[test]
    fn a_secret_without_a_type_is_opaque_to_field_selectors() {
        let secrets = crate::resources::find("", "v1", "secrets").unwrap();
        let cached = CachedObject::new(
            secrets,
            "/registry/core/secrets/ns/s".into(),
            5,
            Bytes::from_static(br#"{"metadata":{"name":"s","namespace":"ns"}}"#),
        );
        assert_eq!(cached.selectable().field("type"), Some("Opaque"));
        assert_eq!(cached.selectable().label("app"), None);
    }

    /// Selectable as it was built before objects were parsed in part.
    fn selectable_of_whole(resource: &ResourceType, stored: &[u8]) -> Selectable {
        let whole: Value = serde_json::from_slice(stored).unwrap_or(Value::Null);
        Selectable::new(resource, &whole)
    }

    #[test]
    fn selectors_read_the_same_of_a_partly_parsed_object() {
        let mut checked = 0;
        for (resource, mut full) in crate::validation::tests::instances() {
            full["metadata"]["labels"] = json!({"b": "2", "a": "1", "e\"scaped": "x"});
            let without_kind = json!({"metadata": full["metadata"].clone()});
            for object in [full, without_kind] {
                let stored = serde_json::to_vec(&object).unwrap();
                let cached =
                    CachedObject::new(resource, "/k".into(), 1, Bytes::from(stored.clone()));
                assert_eq!(
                    cached.selectable,
                    selectable_of_whole(resource, &stored),
                    "{}",
                    resource.kind
                );
                checked += 1;
            }
        }
        assert!(checked >= 60, "only {checked} objects checked");
        // The fields read at other paths than their own, and odd shapes.
        let odd = [
            (
                crate::resources::find("", "v1", "pods").unwrap(),
                json!({"kind": "Pod", "status": {"podIPs": [{"ip": "10.0.0.2"}], "phase": 3},
                    "spec": {"hostNetwork": true, "nodeName": ["x"]}, "metadata": "m"}),
            ),
            (
                crate::resources::find("", "v1", "events").unwrap(),
                json!({"kind": "Event", "source": {"component": "kubelet"}, "reportingComponent": "r",
                    "involvedObject": {"kind": "Pod", "name": "web"}, "type": "Warning"}),
            ),
            (
                crate::resources::find("", "v1", "events").unwrap(),
                json!({"kind": "Event", "reportingComponent": "r", "source": "s"}),
            ),
            (
                crate::resources::find("batch", "v1", "jobs").unwrap(),
                json!({"kind": "Job", "status": {"succeeded": 2}}),
            ),
            (
                crate::resources::find("", "v1", "secrets").unwrap(),
                json!({"kind": "Secret"}),
            ),
            // Another kind than the resource's: its own fields.
            (
                crate::resources::find("", "v1", "secrets").unwrap(),
                json!({"kind": "Node", "spec": {"unschedulable": true}, "metadata": {"name": "n"}}),
            ),
            (
                crate::resources::find("", "v1", "nodes").unwrap(),
                json!({"kind": "Node", "spec": {"unschedulable": true}, "metadata": {"name": "n", "labels": {"a": 1}}}),
            ),
        ];
        for (resource, object) in odd {
            let stored = serde_json::to_vec(&object).unwrap();
            let cached = CachedObject::new(resource, "/k".into(), 1, Bytes::from(stored.clone()));
            assert_eq!(
                cached.selectable,
                selectable_of_whole(resource, &stored),
                "{object}"
            );
        }
    }

    #[test]
    fn bytes_that_are_not_one_json_object_are_not_spliced() {
        let pods = pods();
        for bad in [
            &br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"#[..],
            br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}} {}"#,
            br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"x":tru}}"#,
            b"{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"\xff\"}}",
        ] {
            let cached = CachedObject::new(pods, "/k".into(), 1, Bytes::copy_from_slice(bad));
            assert!(!cached.splices(), "{}", String::from_utf8_lossy(bad));
            let event = WatchEvent::new(2, ChangeType::Put, Arc::new(cached), None);
            assert_eq!(event.line(pods, EventType::Added), None);
        }
        let good = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}"#;
        assert!(CachedObject::new(pods, "/k".into(), 1, Bytes::from_static(good)).splices());
    }

    #[test]
    fn a_spliced_event_line_is_the_served_object() {
        let stored = serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}))
        .unwrap();
        let cached = Arc::new(CachedObject::new(
            pods(),
            "/k".into(),
            4,
            Bytes::from(stored),
        ));
        assert!(cached.splices());
        for (change, event, revision) in [
            (ChangeType::Put, EventType::Added, 4),
            (ChangeType::Put, EventType::Modified, 4),
            (ChangeType::Delete, EventType::Deleted, 11),
        ] {
            let watch_event = WatchEvent::new(revision, change, cached.clone(), None);
            let line = watch_event.line(pods(), event).unwrap();
            assert!(line.starts_with(format!("{{\"type\":\"{}\",", event.as_str()).as_bytes()));
            assert!(line.ends_with(b"}\n") && line.iter().filter(|b| **b == b'\n').count() == 1);
            let parsed: Value = serde_json::from_slice(&line).unwrap();
            let served = watch_event.served(pods()).unwrap();
            assert_eq!(parsed, json!({"type": event.as_str(), "object": served}));
            assert_eq!(
                parsed["object"]["metadata"]["resourceVersion"],
                revision.to_string()
            );
        }
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
