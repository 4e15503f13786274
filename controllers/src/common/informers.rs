//! Shared informers, as kube-controller-manager's `SharedInformerFactory`
//! keeps them: one watch and one cache per resource (and namespace and
//! selector) for every controller of the process, however many ask for it.
//!
//! A controller asks [`Informers::watch`] for a resource and gets, once the
//! first list is in, the shared cache (a reflector [`Store`]) and a stream
//! of its own of the watch events.
//! The cache is updated before an event is handed out, so a controller that
//! reads the cache on an event sees at least that event. A controller that
//! subscribes after the first list is given the cache's contents as a list
//! of its own (`Init`, an `InitApply` per object, `InitDone`), so that it
//! starts from the same state as the ones that came first.
//!
//! The cache is handed out only once it has been filled: `kube`'s
//! `Store::wait_until_ready` wakes only the last of several tasks waiting
//! on one store before it is ready (its one-shot channel keeps one waker),
//! and here controllers of different tasks share each store. The informer
//! does the waiting for the first list instead, for any number of waiters;
//! a store's own readiness is settled by the time anyone can ask it.
//!
//! Each subscriber's events are queued for it without bound, as the Go
//! informer's listeners are: a slow controller never holds back the others
//! or the watch.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{
    ConfigMap, Endpoints, Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod,
    ResourceQuota, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::NamespaceResourceScope;
use kube::api::Api;
use kube::discovery::ApiResource;
use kube::runtime::reflector::{self, Lookup, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use skiff_machinery::metrics::{QueueMetrics, Workqueues};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// The informers of one controller-manager term: dropped (and their
/// watches stopped) when the term ends.
pub struct Informers {
    client: Client,
    /// The work queues' metrics of the process.
    workqueues: Workqueues,
    shared: Mutex<HashMap<Key, Arc<dyn Any + Send + Sync>>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

/// What makes two informers the same one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    kind: TypeId,
    namespace: Option<String>,
    label_selector: Option<String>,
    field_selector: Option<String>,
}

/// A controller's view of a shared informer.
pub struct Subscription<K: Lookup + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    /// The shared cache.
    pub store: Store<K>,
    /// This subscriber's events, in the order the watch saw them.
    pub events: EventStream<K>,
}

/// What an informer can watch: a typed Kubernetes object.
pub trait Object:
    Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static
{
}

impl<K> Object for K where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static
{
}

impl<K: Object> Subscription<K> {
    /// The cache and the events, apart.
    pub fn into_parts(self) -> (Store<K>, EventStream<K>) {
        (self.store, self.events)
    }
}

/// The events handed to one subscriber. Watch errors are logged (and the
/// watch retried) by the informer, so a subscriber sees only events; the
/// item type is the watcher's so that `kube`'s stream adapters apply.
pub type EventStream<K> =
    futures::stream::BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>;

impl Informers {
    pub fn new(client: Client) -> Arc<Informers> {
        Informers::with_workqueues(client, Workqueues::new())
    }

    /// Informers whose controllers report their queues in `workqueues`.
    pub fn with_workqueues(client: Client, workqueues: Workqueues) -> Arc<Informers> {
        Arc::new(Informers {
            client,
            workqueues,
            shared: Mutex::new(HashMap::new()),
            tasks: Mutex::new(Vec::new()),
        })
    }

    /// The client the informers watch through, for the controllers' writes.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The metrics of the work queue `name` (kube-controller-manager's
    /// name for it), starting empty.
    pub fn workqueue(&self, name: &str) -> QueueMetrics {
        self.workqueues.queue(name)
    }

    /// Every object of `K` in the cluster.
    pub async fn all<K: Object>(&self) -> Subscription<K> {
        self.watch(watcher::Config::default()).await
    }

    /// Every object of `K` in the cluster that `config`'s selectors choose.
    pub async fn watch<K>(&self, config: watcher::Config) -> Subscription<K>
    where
        K: Object,
    {
        let (subscription, synced) = self.share(None, config, || Api::all(self.client.clone()));
        until_synced(synced).await;
        subscription
    }

    /// The objects of `K` in `namespace` that `config`'s selectors choose.
    pub async fn watch_namespaced<K>(
        &self,
        namespace: &str,
        config: watcher::Config,
    ) -> Subscription<K>
    where
        K: Object + Resource<Scope = NamespaceResourceScope>,
    {
        let (subscription, synced) = self.share(Some(namespace), config, || {
            Api::namespaced(self.client.clone(), namespace)
        });
        until_synced(synced).await;
        subscription
    }

    /// A subscription to the informer of `K` in `namespace` with `config`,
    /// started on `api` when it is the first asked for, and what tells when
    /// its first list is in.
    fn share<K>(
        &self,
        namespace: Option<&str>,
        config: watcher::Config,
        api: impl FnOnce() -> Api<K>,
    ) -> (Subscription<K>, Synced)
    where
        K: Object,
    {
        let key = Key {
            kind: TypeId::of::<K>(),
            namespace: namespace.map(str::to_string),
            label_selector: config.label_selector.clone(),
            field_selector: config.field_selector.clone(),
        };
        let mut shared = self.shared.lock();
        if let Some(informer) = shared.get(&key) {
            let informer = informer
                .clone()
                .downcast::<Shared<K>>()
                .expect("an informer is keyed by its object type");
            return (informer.subscribe(), informer.synced.subscribe());
        }
        let informer = Arc::new(Shared::<K>::new());
        shared.insert(key, informer.clone());
        let subscription = (informer.subscribe(), informer.synced.subscribe());
        let source = watcher(api(), config).default_backoff();
        let task = tokio::spawn(informer.drive(source));
        self.tasks.lock().push(task);
        subscription
    }

    /// The metadata of every object of `resource`, through the typed
    /// informer of that resource when it is one the controllers watch typed
    /// (as kube-controller-manager's garbage collector uses the typed
    /// informer where one exists), so that the garbage collector adds no
    /// second watch of pods, nodes or ReplicaSets. `None` for any other
    /// resource: the caller watches its metadata itself.
    pub async fn metadata(&self, resource: &ApiResource) -> Option<EventStream<ObjectMeta>> {
        let wanted = (
            resource.group.as_str(),
            resource.version.as_str(),
            resource.plural.as_str(),
        );
        let (_, share) = TYPED.iter().find(|(key, _)| key() == wanted)?;
        Some(share(self).await)
    }

    /// How many informers (watches) run; each is shared by all that asked.
    pub fn len(&self) -> usize {
        self.shared.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The resource a typed informer watches, as (group, version, plural).
type ResourceKey = fn() -> (&'static str, &'static str, &'static str);

/// The metadata events of a typed informer.
type MetadataOf = for<'a> fn(&'a Informers) -> BoxFuture<'a, EventStream<ObjectMeta>>;

/// The kinds the controllers watch typed, whose informers the garbage
/// collector shares.
const TYPED: &[(ResourceKey, MetadataOf)] = &[
    typed::<ConfigMap>(),
    typed::<Endpoints>(),
    typed::<Namespace>(),
    typed::<Node>(),
    typed::<PersistentVolume>(),
    typed::<PersistentVolumeClaim>(),
    typed::<Pod>(),
    typed::<ResourceQuota>(),
    typed::<Secret>(),
    typed::<Service>(),
    typed::<ServiceAccount>(),
    typed::<CronJob>(),
    typed::<DaemonSet>(),
    typed::<Deployment>(),
    typed::<Job>(),
    typed::<PodDisruptionBudget>(),
    typed::<ReplicaSet>(),
    typed::<StatefulSet>(),
    typed::<StorageClass>(),
];

const fn typed<K>() -> (ResourceKey, MetadataOf)
where
    K: Object + k8s_openapi::Resource,
{
    (
        || {
            (
                <K as k8s_openapi::Resource>::GROUP,
                <K as k8s_openapi::Resource>::VERSION,
                <K as k8s_openapi::Resource>::URL_PATH_SEGMENT,
            )
        },
        |informers| {
            async move {
                informers
                    .watch::<K>(watcher::Config::default())
                    .await
                    .events
                    .map(|event| event.map(metadata_of))
                    .boxed()
            }
            .boxed()
        },
    )
}

/// The same event, of the object's metadata.
fn metadata_of<K: Resource>(event: watcher::Event<K>) -> watcher::Event<ObjectMeta> {
    map_event(event, |object| object.meta().clone())
}

/// The same event, of `f` of its object.
pub fn map_event<A, B>(event: watcher::Event<A>, f: impl FnOnce(A) -> B) -> watcher::Event<B> {
    match event {
        watcher::Event::Apply(object) => watcher::Event::Apply(f(object)),
        watcher::Event::Delete(object) => watcher::Event::Delete(f(object)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(object) => watcher::Event::InitApply(f(object)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

impl Drop for Informers {
    fn drop(&mut self) {
        for task in self.tasks.get_mut().drain(..) {
            task.abort();
        }
    }
}

/// One informer: the cache, and whom to tell.
struct Shared<K: Lookup + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    state: Mutex<State<K>>,
    /// Whether a first list has completed, for any number of waiters.
    synced: tokio::sync::watch::Sender<bool>,
}

/// Tells when an informer's first list is in.
type Synced = tokio::sync::watch::Receiver<bool>;

/// Waits for an informer's first list; returns at once if the informer is
/// gone (its controllers are being stopped).
async fn until_synced(mut synced: Synced) {
    let _ = synced.wait_for(|listed| *listed).await;
}

struct State<K: Lookup + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    writer: reflector::store::Writer<K>,
    subscribers: Vec<mpsc::UnboundedSender<watcher::Event<K>>>,
    /// The objects of a list under way (between `Init` and `InitDone`),
    /// which the cache shows only once it is complete, so that a subscriber
    /// arriving in the middle of it can be given what came before.
    listing: Option<Vec<K>>,
    /// Whether a list has completed: the cache is worth replaying.
    listed: bool,
}

impl<K> Shared<K>
where
    K: Lookup + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
{
    fn new() -> Shared<K> {
        let writer = reflector::store::Writer::<K>::default();
        Shared {
            store: writer.as_reader(),
            state: Mutex::new(State {
                writer,
                subscribers: Vec::new(),
                listing: None,
                listed: false,
            }),
            synced: tokio::sync::watch::Sender::new(false),
        }
    }

    /// A new subscriber, caught up with what the informer has seen.
    fn subscribe(&self) -> Subscription<K> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut state = self.state.lock();
        let catch_up: Vec<watcher::Event<K>> = match (&state.listing, state.listed) {
            (Some(listing), _) => std::iter::once(watcher::Event::Init)
                .chain(listing.iter().cloned().map(watcher::Event::InitApply))
                .collect(),
            (None, true) => std::iter::once(watcher::Event::Init)
                .chain(
                    self.store
                        .state()
                        .into_iter()
                        .map(|object| watcher::Event::InitApply((*object).clone())),
                )
                .chain(std::iter::once(watcher::Event::InitDone))
                .collect(),
            (None, false) => Vec::new(),
        };
        for event in catch_up {
            // The receiver is still in hand: this send cannot fail.
            let _ = tx.send(event);
        }
        state.subscribers.push(tx);
        drop(state);
        let events = futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).map(Ok);
        Subscription {
            store: self.store.clone(),
            events: events.boxed(),
        }
    }

    /// Applies one watch event to the cache and hands it to every
    /// subscriber still listening.
    fn publish(&self, event: watcher::Event<K>) {
        let mut state = self.state.lock();
        state.writer.apply_watcher_event(&event);
        match &event {
            watcher::Event::Init => state.listing = Some(Vec::new()),
            watcher::Event::InitApply(object) => {
                if let Some(listing) = state.listing.as_mut() {
                    listing.push(object.clone());
                }
            }
            watcher::Event::InitDone => {
                state.listing = None;
                state.listed = true;
                self.synced.send_replace(true);
            }
            watcher::Event::Apply(_) | watcher::Event::Delete(_) => {}
        }
        state
            .subscribers
            .retain(|subscriber| subscriber.send(event.clone()).is_ok());
    }

    /// Runs the watch until aborted.
    async fn drive(
        self: Arc<Self>,
        source: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
    ) {
        let mut source = std::pin::pin!(source);
        while let Some(event) = source.next().await {
            match event {
                Ok(event) => self.publish(event),
                Err(err) => {
                    tracing::warn!(kind = std::any::type_name::<K>(), error = %err, "informer watch failed; retrying")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::ObjectRef;

    fn pod(name: &str, version: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.namespace = Some("default".into());
        pod.metadata.resource_version = Some(version.into());
        pod
    }

    /// What a subscriber has been handed so far, as short strings.
    fn drain(events: &mut EventStream<Pod>) -> Vec<String> {
        let name = |pod: &Pod| pod.metadata.name.clone().unwrap_or_default();
        let mut seen = Vec::new();
        while let Some(Some(Ok(event))) = events.next().now_or_never() {
            seen.push(match event {
                watcher::Event::Init => "init".to_string(),
                watcher::Event::InitApply(pod) => format!("list {}", name(&pod)),
                watcher::Event::InitDone => "listed".to_string(),
                watcher::Event::Apply(pod) => format!("apply {}", name(&pod)),
                watcher::Event::Delete(pod) => format!("delete {}", name(&pod)),
            });
        }
        seen
    }

    #[test]
    fn every_subscriber_sees_every_event_and_one_cache() {
        let informer = Shared::<Pod>::new();
        let mut first = informer.subscribe();
        let mut second = informer.subscribe();
        informer.publish(watcher::Event::Init);
        informer.publish(watcher::Event::InitApply(pod("a", "1")));
        informer.publish(watcher::Event::InitDone);
        informer.publish(watcher::Event::Apply(pod("b", "2")));
        informer.publish(watcher::Event::Delete(pod("a", "3")));
        let expected = ["init", "list a", "listed", "apply b", "delete a"];
        assert_eq!(drain(&mut first.events), expected);
        assert_eq!(drain(&mut second.events), expected);
        let names: Vec<ObjectRef<Pod>> = first
            .store
            .state()
            .iter()
            .map(|p| ObjectRef::from_obj(&**p))
            .collect();
        assert_eq!(names, [ObjectRef::new("b").within("default")]);
        assert_eq!(second.store.state().len(), 1);
    }

    #[test]
    fn a_late_subscriber_is_handed_the_cache_as_a_list() {
        let informer = Shared::<Pod>::new();
        informer.publish(watcher::Event::Init);
        informer.publish(watcher::Event::InitApply(pod("a", "1")));
        informer.publish(watcher::Event::InitDone);
        informer.publish(watcher::Event::Apply(pod("b", "2")));
        let mut late = informer.subscribe();
        let mut seen = drain(&mut late.events);
        seen[1..3].sort();
        assert_eq!(seen, ["init", "list a", "list b", "listed"]);
        informer.publish(watcher::Event::Delete(pod("b", "3")));
        assert_eq!(drain(&mut late.events), ["delete b"]);
    }

    #[test]
    fn a_subscriber_arriving_mid_list_is_handed_what_came_before() {
        let informer = Shared::<Pod>::new();
        informer.publish(watcher::Event::Init);
        informer.publish(watcher::Event::InitApply(pod("a", "1")));
        let mut late = informer.subscribe();
        informer.publish(watcher::Event::InitApply(pod("b", "2")));
        informer.publish(watcher::Event::InitDone);
        assert_eq!(
            drain(&mut late.events),
            ["init", "list a", "list b", "listed"]
        );
        assert_eq!(late.store.state().len(), 2);
    }

    #[test]
    fn a_subscriber_that_went_away_is_forgotten() {
        let informer = Shared::<Pod>::new();
        let gone = informer.subscribe();
        let mut kept = informer.subscribe();
        drop(gone);
        informer.publish(watcher::Event::Apply(pod("a", "1")));
        assert_eq!(informer.state.lock().subscribers.len(), 1);
        assert_eq!(drain(&mut kept.events), ["apply a"]);
    }

    /// Controllers of different tasks wait on one informer's first list:
    /// every one of them is woken (`kube`'s own store readiness wakes only
    /// the last to wait).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_waiter_for_the_first_list_is_woken() {
        let informer = Arc::new(Shared::<Pod>::new());
        let waiters: Vec<_> = (0..8)
            .map(|_| tokio::spawn(until_synced(informer.synced.subscribe())))
            .collect();
        // Let every waiter start waiting.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        informer.publish(watcher::Event::Init);
        informer.publish(watcher::Event::InitApply(pod("a", "1")));
        informer.publish(watcher::Event::InitDone);
        for waiter in waiters {
            // A bound so that a waiter left asleep fails the test instead
            // of hanging it.
            tokio::time::timeout(std::time::Duration::from_secs(10), waiter)
                .await
                .expect("a waiter was never woken")
                .unwrap();
        }
        assert_eq!(informer.store.state().len(), 1);
    }

    #[tokio::test]
    async fn one_informer_per_kind_namespace_and_selector() {
        // A client that is never reached: the watches fail and retry in
        // the background, which this test does not wait for.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let informers = Informers::new(client.clone());
        let all = || Api::<Pod>::all(client.clone());
        let _a = informers.share(None, watcher::Config::default(), all);
        let _b = informers.share(None, watcher::Config::default(), all);
        assert_eq!(informers.len(), 1);
        let system = || Api::<Pod>::namespaced(client.clone(), "kube-system");
        let _c = informers.share(Some("kube-system"), watcher::Config::default(), system);
        let web = watcher::Config::default().labels("app=web");
        let _d = informers.share(None, web, all);
        let nodes = || Api::<k8s_openapi::api::core::v1::Node>::all(client.clone());
        let _e = informers.share(None, watcher::Config::default(), nodes);
        assert_eq!(informers.len(), 4);
    }
}
