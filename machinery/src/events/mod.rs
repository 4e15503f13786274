//! Events, recorded as client-go's event recorder does for every
//! Kubernetes component: the caller hands an event over and goes on (a
//! queue of [`QUEUE`], dropped when full, never waited on); one task per
//! recorder passes each through the [`correlator`] (rate limit per
//! object, similar ones combined, repeats counted) and writes core/v1
//! Events, several at once, named `<object>.<time in hex>` in the
//! object's namespace (`default` for cluster-wide objects), with the
//! component and host as their source.

pub mod correlator;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Semaphore};

use correlator::{Correlator, Decision, EventKey};

/// Events waiting for the recorder's task; more are dropped.
pub const QUEUE: usize = 1000;
/// Writes in flight at once.
const WRITERS: usize = 8;
/// Times a write the API refused as too many is sent again, and after
/// how long.
const RETRIES_ON_TOO_MANY: u32 = 5;
const RETRY_AFTER: std::time::Duration = std::time::Duration::from_millis(200);

/// An event's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One event about `regarding`.
#[derive(Debug, Clone)]
pub struct Event {
    pub regarding: ObjectReference,
    pub type_: EventType,
    pub reason: String,
    pub message: String,
}

/// A reference to `object` for an event: its kind, apiVersion, namespace,
/// name, uid and resourceVersion.
pub fn reference<K>(object: &K) -> ObjectReference
where
    K: Resource<DynamicType = ()>,
{
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        name: object.meta().name.clone(),
        namespace: object.meta().namespace.clone(),
        uid: object.meta().uid.clone(),
        resource_version: object.meta().resource_version.clone(),
        field_path: None,
    }
}

/// Records events for one component; cheap to clone, every clone feeding
/// the same task.
#[derive(Clone)]
pub struct Recorder {
    queue: mpsc::Sender<Event>,
}

impl Recorder {
    /// A recorder writing through `client` as `component` on `host` (the
    /// node it runs on, when it has one). Its task runs until every clone
    /// is dropped.
    pub fn new(client: Client, component: &str, host: Option<&str>) -> Recorder {
        let (queue, events) = mpsc::channel(QUEUE);
        let sink = Sink {
            client,
            component: component.to_string(),
            host: host.map(str::to_string),
            correlator: Arc::new(std::sync::Mutex::default()),
            written: AtomicU64::new(0),
            writers: Arc::new(Semaphore::new(WRITERS)),
        };
        tokio::spawn(Arc::new(sink).run(events));
        Recorder { queue }
    }

    /// Records `event`, without waiting: when the queue is full it is
    /// dropped (and said at debug level), as client-go drops it.
    pub fn record(&self, event: Event) {
        if let Err(err) = self.queue.try_send(event) {
            tracing::debug!(error = %err, "event dropped: the recorder's queue is full");
        }
    }

    /// Records an event of `type_` about `object`.
    pub fn event<K>(&self, object: &K, type_: EventType, reason: &str, message: impl Into<String>)
    where
        K: Resource<DynamicType = ()>,
    {
        self.record(Event {
            regarding: reference(object),
            type_,
            reason: reason.to_string(),
            message: message.into(),
        });
    }
}

struct Sink {
    client: Client,
    component: String,
    host: Option<String>,
    correlator: Arc<std::sync::Mutex<Correlator>>,
    written: AtomicU64,
    writers: Arc<Semaphore>,
}

impl Sink {
    /// The correlator, whatever a panicking holder left of it.
    fn correlator(&self) -> std::sync::MutexGuard<'_, Correlator> {
        self.correlator.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn run(self: Arc<Self>, mut events: mpsc::Receiver<Event>) {
        while let Some(event) = events.recv().await {
            let key = self.key(&event);
            let decision = self.correlator().observe(&key, Instant::now());
            let Ok(permit) = self.writers.clone().acquire_owned().await else {
                return;
            };
            let sink = self.clone();
            tokio::spawn(async move {
                sink.write(event, decision).await;
                drop(permit);
            });
        }
    }

    /// The correlator's key: the object (and its field) as this
    /// component sees it, the type, reason and message.
    fn key(&self, event: &Event) -> EventKey {
        let r = &event.regarding;
        let object = [
            self.component.as_str(),
            self.host.as_deref().unwrap_or_default(),
            r.kind.as_deref().unwrap_or_default(),
            r.namespace.as_deref().unwrap_or_default(),
            r.name.as_deref().unwrap_or_default(),
            r.uid.as_deref().unwrap_or_default(),
            r.api_version.as_deref().unwrap_or_default(),
            r.field_path.as_deref().unwrap_or_default(),
        ]
        .join("/");
        EventKey {
            object,
            type_: event.type_.as_str().to_string(),
            reason: event.reason.clone(),
            message: event.message.clone(),
        }
    }

    async fn write(&self, event: Event, decision: Decision) {
        let namespace = event
            .regarding
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".to_string());
        match decision {
            Decision::Drop => {
                tracing::debug!(reason = %event.reason, object = ?event.regarding.name, "event held back: too many about this object lately");
            }
            Decision::Pending => {}
            Decision::Patch {
                key,
                name,
                count,
                message,
            } => {
                let patch = json!({"count": count, "lastTimestamp": now(), "message": message});
                let api: kube::Api<k8s_openapi::api::core::v1::Event> =
                    kube::Api::namespaced(self.client.clone(), &namespace);
                match api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => {}
                    // Gone (expired or deleted): written anew, reserved
                    // first so that a repeat meanwhile counts on it.
                    Err(kube::Error::Api(status)) if status.code == 404 => {
                        {
                            let mut correlator = self.correlator();
                            correlator.forget(&key);
                            correlator.observe(&key, Instant::now());
                        }
                        self.create(&event, &namespace, key, message).await;
                    }
                    // Another failure loses this count rather than starting
                    // a second event for the same thing.
                    Err(err) => tracing::debug!(error = %err, "could not update an event"),
                }
            }
            Decision::Create { key, message } => {
                self.create(&event, &namespace, key, message).await;
            }
        }
    }

    async fn create(&self, event: &Event, namespace: &str, key: EventKey, message: String) {
        let n = self.written.fetch_add(1, Ordering::Relaxed);
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let object = event.regarding.name.as_deref().unwrap_or("unknown");
        let name = format!("{object}.{stamp:x}{n:x}");
        let now = now();
        let mut source = json!({"component": self.component});
        if let Some(host) = &self.host {
            source["host"] = json!(host);
        }
        let body = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": event.regarding,
            "reason": event.reason,
            "message": message,
            "type": event.type_.as_str(),
            "source": source,
            "reportingComponent": self.component,
            "reportingInstance": self.host.clone().unwrap_or_else(|| self.component.clone()),
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        });
        let path = format!("/api/v1/namespaces/{namespace}/events");
        match post(&self.client, &path, &body).await {
            Ok(()) => {
                let count = self
                    .correlator()
                    .created(&key, name.clone(), Instant::now());
                if count > 1 {
                    let patch = json!({"count": count, "lastTimestamp": now});
                    let api: kube::Api<k8s_openapi::api::core::v1::Event> =
                        kube::Api::namespaced(self.client.clone(), namespace);
                    if let Err(err) = api
                        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                    {
                        tracing::debug!(error = %err, "could not update an event");
                    }
                }
            }
            Err(err) => {
                self.correlator().forget(&key);
                tracing::debug!(error = %err, reason = %event.reason, "could not record an event");
            }
        }
    }
}

/// POSTs `body` to `path`, the answer checked for an error but not
/// decoded; a write refused as too many is sent again, as client-go does.
async fn post(client: &Client, path: &str, body: &Value) -> Result<(), kube::Error> {
    let body = body.to_string().into_bytes();
    let mut refused = 0;
    loop {
        let request = kube::core::Request::new(path)
            .create(&PostParams::default(), body.clone())
            .map_err(kube::Error::BuildRequest)?;
        match client.request_text(request).await {
            Err(kube::Error::Api(status))
                if status.code == 429 && refused < RETRIES_ON_TOO_MANY =>
            {
                refused += 1;
                tokio::time::sleep(RETRY_AFTER).await;
            }
            answer => return answer.map(drop),
        }
    }
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}
