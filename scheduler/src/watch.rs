//! The scheduler's view of the cluster, kept by `kube` watchers: bound
//! pods and nodes into the cache, unscheduled pods into the queue, and the
//! other objects plugins read.

use std::collections::HashSet;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolumeClaim, Pod, ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::framework::{ClusterObjects, PodInfo};
use crate::scheduler::Scheduler;

/// What a watch of one kind does with its objects.
trait Sink<K>: Send {
    fn apply(&mut self, object: K);
    fn delete(&mut self, object: K);
    /// A relist finished: `seen` are the keys of every object now there.
    fn relisted(&mut self, seen: HashSet<String>);
    fn key(object: &K) -> String;
}

/// Runs a watcher of every `K` into `sink` until the stream ends.
async fn follow<K, S>(client: Client, mut sink: S)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    S: Sink<K>,
{
    let api: Api<K> = Api::all(client);
    let stream = watcher(api, watcher::Config::default());
    drive(stream, &mut sink).await;
}

/// Feeds `stream` into `sink`. Objects are kept without their
/// `managedFields`, as kube-scheduler's informers keep them: nothing here
/// reads them, and with thousands of pods they would be much of the
/// cache's memory.
async fn drive<K: Resource, S: Sink<K>>(
    stream: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    sink: &mut S,
) {
    let mut stream = std::pin::pin!(stream);
    let mut seen: Option<HashSet<String>> = None;
    while let Some(mut event) = stream.next().await {
        if let Ok(
            watcher::Event::Apply(object)
            | watcher::Event::Delete(object)
            | watcher::Event::InitApply(object),
        ) = &mut event
        {
            object.meta_mut().managed_fields = None;
        }
        match event {
            Ok(watcher::Event::Apply(object)) => sink.apply(object),
            Ok(watcher::Event::Delete(object)) => sink.delete(object),
            Ok(watcher::Event::Init) => seen = Some(HashSet::new()),
            Ok(watcher::Event::InitApply(object)) => {
                if let Some(seen) = seen.as_mut() {
                    seen.insert(S::key(&object));
                }
                sink.apply(object);
            }
            Ok(watcher::Event::InitDone) => sink.relisted(seen.take().unwrap_or_default()),
            Err(err) => {
                tracing::debug!(error = %err, "scheduler watch failed; the watcher retries");
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
        }
    }
}

fn object_key<K: Resource>(object: &K) -> String {
    let meta = object.meta();
    match meta.namespace.as_deref() {
        Some(ns) => format!("{ns}/{}", meta.name.as_deref().unwrap_or_default()),
        None => meta.name.clone().unwrap_or_default(),
    }
}

struct Pods(Arc<Scheduler>);

impl Sink<Pod> for Pods {
    fn apply(&mut self, pod: Pod) {
        self.0.pod_changed(pod);
    }

    fn delete(&mut self, pod: Pod) {
        self.0.pod_deleted(&object_key(&pod));
    }

    fn relisted(&mut self, seen: HashSet<String>) {
        self.0.pods_relisted(&seen);
    }

    fn key(pod: &Pod) -> String {
        object_key(pod)
    }
}

struct Nodes(Arc<Scheduler>);

impl Sink<Node> for Nodes {
    fn apply(&mut self, node: Node) {
        self.0.with_cache(|cache| cache.set_node(node));
        self.0.queue.move_all_unschedulable();
    }

    fn delete(&mut self, node: Node) {
        self.0
            .with_cache(|cache| cache.remove_node(&node.name_any()));
    }

    fn relisted(&mut self, seen: HashSet<String>) {
        self.0.with_cache(|cache| cache.retain_nodes(&seen));
        self.0.queue.move_all_unschedulable();
    }

    fn key(node: &Node) -> String {
        node.name_any()
    }
}

/// Objects kept in [`ClusterObjects`]: how each kind is stored there.
trait ClusterKind:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static
{
    fn store(cluster: &mut ClusterObjects, object: Option<Self>, key: &str);
    fn retain(cluster: &mut ClusterObjects, seen: &HashSet<String>);
}

macro_rules! listed_kind {
    ($kind:ty, $field:ident) => {
        impl ClusterKind for $kind {
            fn store(cluster: &mut ClusterObjects, object: Option<Self>, key: &str) {
                cluster.$field.retain(|o| object_key(o.as_ref()) != key);
                if let Some(object) = object {
                    cluster.$field.push(Arc::new(object));
                }
            }

            fn retain(cluster: &mut ClusterObjects, seen: &HashSet<String>) {
                cluster
                    .$field
                    .retain(|o| seen.contains(&object_key(o.as_ref())));
            }
        }
    };
}

listed_kind!(PodDisruptionBudget, pdbs);
listed_kind!(Service, services);
listed_kind!(ReplicaSet, replica_sets);
listed_kind!(StatefulSet, stateful_sets);
listed_kind!(ReplicationController, replication_controllers);

impl ClusterKind for Namespace {
    fn store(cluster: &mut ClusterObjects, object: Option<Self>, key: &str) {
        match object {
            Some(ns) => {
                cluster
                    .namespaces
                    .insert(key.to_string(), ns.metadata.labels.unwrap_or_default());
            }
            None => {
                cluster.namespaces.remove(key);
            }
        }
    }

    fn retain(cluster: &mut ClusterObjects, seen: &HashSet<String>) {
        cluster.namespaces.retain(|k, _| seen.contains(k));
    }
}

impl ClusterKind for PersistentVolumeClaim {
    fn store(cluster: &mut ClusterObjects, object: Option<Self>, key: &str) {
        match object {
            Some(claim) => {
                cluster.claims.insert(key.to_string(), Arc::new(claim));
            }
            None => {
                cluster.claims.remove(key);
            }
        }
    }

    fn retain(cluster: &mut ClusterObjects, seen: &HashSet<String>) {
        cluster.claims.retain(|k, _| seen.contains(k));
    }
}

struct Cluster<K>(Arc<Scheduler>, std::marker::PhantomData<K>);

impl<K: ClusterKind> Sink<K> for Cluster<K> {
    fn apply(&mut self, object: K) {
        let key = object_key(&object);
        self.0
            .with_cache(|cache| cache.update_cluster(|c| K::store(c, Some(object), &key)));
        self.0.queue.move_all_unschedulable();
    }

    fn delete(&mut self, object: K) {
        let key = object_key(&object);
        self.0
            .with_cache(|cache| cache.update_cluster(|c| K::store(c, None, &key)));
    }

    fn relisted(&mut self, seen: HashSet<String>) {
        self.0
            .with_cache(|cache| cache.update_cluster(|c| K::retain(c, &seen)));
    }

    fn key(object: &K) -> String {
        object_key(object)
    }
}

fn cluster<K: ClusterKind>(scheduler: &Arc<Scheduler>) -> Cluster<K> {
    Cluster(scheduler.clone(), std::marker::PhantomData)
}

/// The watches whose first list is not in yet. Scheduling waits for
/// none to be left, as kube-scheduler waits for its informers' caches to
/// sync: a pod taken before the nodes are listed would find no node (and
/// say so in an event), one taken before the other pods are would be
/// placed as if its node were empty.
#[derive(Clone)]
pub struct Synced(Arc<tokio::sync::watch::Sender<usize>>);

impl Synced {
    fn new() -> Synced {
        Synced(Arc::new(tokio::sync::watch::Sender::new(0)))
    }

    fn done(&self) {
        self.0.send_modify(|left| *left = left.saturating_sub(1));
    }

    /// Returns once every watch has had its first list (of those made
    /// before the call).
    pub async fn wait(&self) {
        let mut left = self.0.subscribe();
        // The sender lives in `self`: the wait cannot end otherwise.
        let _ = left.wait_for(|left| *left == 0).await;
    }

    /// `sink`, telling this when its first list is in: one more watch
    /// to wait for.
    fn sink<S>(&self, sink: S) -> SyncedSink<S> {
        self.0.send_modify(|left| *left += 1);
        SyncedSink {
            sink,
            synced: Some(self.clone()),
        }
    }
}

struct SyncedSink<S> {
    sink: S,
    /// Until the first list is in.
    synced: Option<Synced>,
}

impl<K, S: Sink<K>> Sink<K> for SyncedSink<S> {
    fn apply(&mut self, object: K) {
        self.sink.apply(object);
    }

    fn delete(&mut self, object: K) {
        self.sink.delete(object);
    }

    fn relisted(&mut self, seen: HashSet<String>) {
        self.sink.relisted(seen);
        if let Some(synced) = self.synced.take() {
            synced.done();
        }
    }

    fn key(object: &K) -> String {
        S::key(object)
    }
}

/// Starts every watch; they run until the returned tasks are aborted.
/// ReplicationControllers are not watched: skiff's API does not serve
/// them (their watch only failed, again and again), so none can select a
/// pod.
/// The [`Synced`] tells when all have listed what there is.
pub fn start(
    client: &Client,
    scheduler: &Arc<Scheduler>,
) -> (Vec<tokio::task::JoinHandle<()>>, Synced) {
    let s = scheduler;
    let synced = Synced::new();
    let y = &synced;
    let tasks = vec![
        tokio::spawn(follow::<Node, _>(client.clone(), y.sink(Nodes(s.clone())))),
        tokio::spawn(follow::<Pod, _>(client.clone(), y.sink(Pods(s.clone())))),
        tokio::spawn(follow::<Namespace, _>(
            client.clone(),
            y.sink(cluster::<Namespace>(s)),
        )),
        tokio::spawn(follow::<PodDisruptionBudget, _>(
            client.clone(),
            y.sink(cluster::<PodDisruptionBudget>(s)),
        )),
        tokio::spawn(follow::<Service, _>(
            client.clone(),
            y.sink(cluster::<Service>(s)),
        )),
        tokio::spawn(follow::<ReplicaSet, _>(
            client.clone(),
            y.sink(cluster::<ReplicaSet>(s)),
        )),
        tokio::spawn(follow::<StatefulSet, _>(
            client.clone(),
            y.sink(cluster::<StatefulSet>(s)),
        )),
        tokio::spawn(follow::<PersistentVolumeClaim, _>(
            client.clone(),
            y.sink(cluster::<PersistentVolumeClaim>(s)),
        )),
    ];
    (tasks, synced)
}

pub fn pod_info(pod: Pod) -> Arc<PodInfo> {
    Arc::new(PodInfo::new(Arc::new(pod)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Kept {
        applied: Vec<Pod>,
        deleted: Vec<Pod>,
        relisted: Vec<HashSet<String>>,
    }

    impl Sink<Pod> for Kept {
        fn apply(&mut self, pod: Pod) {
            self.applied.push(pod);
        }
        fn delete(&mut self, pod: Pod) {
            self.deleted.push(pod);
        }
        fn relisted(&mut self, seen: HashSet<String>) {
            self.relisted.push(seen);
        }
        fn key(pod: &Pod) -> String {
            object_key(pod)
        }
    }

    fn pod(name: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name, "namespace": "default", "labels": {"app": "web"},
                "managedFields": [{"manager": "kubectl", "operation": "Update",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {}}}],
            },
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        }))
        .unwrap()
    }

    /// Every object reaches the sink without its managedFields and
    /// otherwise whole; a relist reports the keys it saw.
    #[tokio::test]
    async fn objects_are_kept_without_managed_fields() {
        let events = vec![
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(pod("a"))),
            Ok(watcher::Event::InitDone),
            Ok(watcher::Event::Apply(pod("b"))),
            Ok(watcher::Event::Delete(pod("a"))),
        ];
        let mut kept = Kept::default();
        drive(futures::stream::iter(events), &mut kept).await;
        let names = |pods: &[Pod]| -> Vec<String> { pods.iter().map(|p| p.name_any()).collect() };
        assert_eq!(names(&kept.applied), ["a", "b"]);
        assert_eq!(names(&kept.deleted), ["a"]);
        for pod in kept.applied.iter().chain(&kept.deleted) {
            assert_eq!(pod.metadata.managed_fields, None);
            assert_eq!(pod.labels().get("app").map(String::as_str), Some("web"));
            assert!(pod.spec.is_some());
        }
        assert_eq!(kept.relisted, [HashSet::from(["default/a".to_string()])]);
    }

    #[tokio::test]
    async fn scheduling_waits_for_every_watch_to_list() {
        let synced = Synced::new();
        let mut nodes = synced.sink(Kept::default());
        let mut pods = synced.sink(Kept::default());
        let waiting = tokio::spawn({
            let synced = synced.clone();
            async move { synced.wait().await }
        });
        nodes.relisted(HashSet::new());
        // A second list of the same watch does not count twice.
        nodes.relisted(HashSet::new());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "one watch has not listed");
        pods.relisted(HashSet::new());
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("the wait ends once all have listed")
            .unwrap();
        assert_eq!(nodes.sink.relisted.len(), 2, "lists still reach the sink");
    }
}
