//! The admission chain: what runs between decoding a write and storing it.
//! Mutating plugins (defaulting first, then the built-in plugins, then the
//! mutating webhooks) may change the object; after the registry's
//! validation, validating plugins and webhooks may only refuse it, and
//! ResourceQuota charges the namespace's quotas last. Validation of object
//! shape is not here (`crate::validation`).

pub mod default_storage_class;
pub mod default_toleration_seconds;
pub mod defaults;
pub mod limit_ranger;
pub mod namespace_lifecycle;
pub mod priority;
pub mod resource_quota;
pub mod service_account;
pub mod webhook;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::registry::Registry;
use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult, Details};
use crate::storage::Kv;

/// The verb of a write, as admission names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
}

impl Operation {
    /// `CREATE`, `UPDATE`, `DELETE`: the names webhook rules and
    /// AdmissionReview use.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

pub use crate::user::UserInfo;

/// One write as the plugins see it.
#[derive(Debug, Clone)]
pub struct Attributes {
    pub operation: Operation,
    pub resource: &'static ResourceType,
    /// `status`, `scale`, `binding`…; None for the object itself.
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: String,
    /// The object as it will be stored (None for a delete). Mutating
    /// plugins change it in place.
    pub object: Option<Value>,
    /// The stored object an update or delete replaces.
    pub old_object: Option<Value>,
    pub dry_run: bool,
    pub user: Option<UserInfo>,
}

impl Attributes {
    /// Whether this is a write of `kind` in the core group (`Pod`, …) on the
    /// object itself, not a subresource.
    pub fn is_core(&self, kind: &str) -> bool {
        self.resource.group.is_empty() && self.resource.kind == kind
    }

    pub fn on_object(&self) -> bool {
        self.subresource.is_none()
    }

    /// `403 Forbidden`: `pods "web" is forbidden: <why>`, as Kubernetes
    /// words an admission refusal.
    pub fn forbidden(&self, why: impl std::fmt::Display) -> ApiError {
        forbidden(self.resource.group, self.resource.plural, &self.name, why)
    }
}

/// `403 Forbidden` on `resource` `name`: `<resource> "<name>" is forbidden: <why>`.
pub fn forbidden(group: &str, resource: &str, name: &str, why: impl std::fmt::Display) -> ApiError {
    let qualified = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    let mut err = ApiError::new(
        403,
        "Forbidden",
        format!("{qualified} \"{name}\" is forbidden: {why}"),
    );
    err.details = Some(Box::new(Details {
        group: group.into(),
        kind: resource.into(),
        name: name.into(),
        ..Details::default()
    }));
    err
}

/// The chain's own state: the webhook client, and the objects plugins read
/// (namespaces, classes, ranges, quotas) as last decoded.
#[derive(Default)]
pub struct Admission {
    webhooks: webhook::Caller,
    decoded: Decoded,
    /// The revision of the last write this API server made of each
    /// resource (by storage prefix): what admission's reads of it must
    /// have caught up with.
    written: Mutex<HashMap<String, i64>>,
}

impl Admission {
    pub fn new() -> Admission {
        Admission::default()
    }

    /// The mutating phase, in Kubernetes' order: defaults, LimitRanger,
    /// ServiceAccount, DefaultTolerationSeconds, DefaultStorageClass,
    /// Priority, ResourceQuota
    /// (a quota's own status), then mutating webhooks (and defaults again
    /// on what they returned).
    pub async fn mutate(&self, registry: &Registry, attrs: &mut Attributes) -> ApiResult<()> {
        if let Some(object) = attrs.object.as_mut() {
            defaults::apply(attrs.resource, object);
        }
        limit_ranger::admit(registry, attrs).await?;
        service_account::admit(registry, attrs).await?;
        default_toleration_seconds::admit(attrs);
        default_storage_class::admit(registry, attrs).await?;
        priority::admit(registry, attrs).await?;
        resource_quota::admit(registry, attrs).await?;
        let webhooks_changed = self.webhooks.mutate(registry, attrs).await?;
        if webhooks_changed {
            if let Some(object) = attrs.object.as_mut() {
                defaults::apply(attrs.resource, object);
            }
        }
        if attrs.operation == Operation::Create {
            if let Some(object) = attrs.object.as_mut() {
                defaults::prepare_for_create(attrs.resource, object);
            }
        }
        Ok(())
    }

    /// The validating phase, after the registry's validation:
    /// NamespaceLifecycle, LimitRanger, Priority, validating webhooks, and
    /// last ResourceQuota, which charges the write to the namespace's
    /// quotas (see [`Self::release`] when the write then fails).
    pub async fn validate(&self, registry: &Registry, attrs: &Attributes) -> ApiResult<()> {
        namespace_lifecycle::validate(registry, attrs).await?;
        crate::authz::escalation::validate(registry, attrs).await?;
        limit_ranger::validate(registry, attrs).await?;
        priority::validate(registry, attrs).await?;
        self.webhooks.validate(registry, attrs).await?;
        resource_quota::validate(registry, attrs).await
    }

    /// A CREATE through a subresource whose object is not the resource's
    /// own (a pod's `Binding`): mutating webhooks, NamespaceLifecycle and
    /// validating webhooks, as Kubernetes runs them; the built-in plugins
    /// act on the resource's own objects only.
    pub async fn admit_subresource(
        &self,
        registry: &Registry,
        attrs: &mut Attributes,
    ) -> ApiResult<()> {
        self.webhooks.mutate(registry, attrs).await?;
        namespace_lifecycle::validate(registry, attrs).await?;
        self.webhooks.validate(registry, attrs).await
    }

    /// A write of `resource` was stored at `revision`: webhook
    /// configurations read before it (by requests running meanwhile) are
    /// stale, and admission's reads of `resource` wait until the watch
    /// cache has it.
    pub fn written(&self, resource: &'static ResourceType, revision: i64) {
        if resource.group == webhook::GROUP {
            self.webhooks.forget();
        }
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        let last = written.entry(resource.storage_prefix()).or_default();
        *last = (*last).max(revision);
    }

    /// What a read of `resource` must have caught up with: this API
    /// server's last write of it.
    fn last_written(&self, resource: &ResourceType) -> i64 {
        let written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        written
            .get(&resource.storage_prefix())
            .copied()
            .unwrap_or(0)
    }

    /// Gives back what [`Self::validate`] charged to quotas for a write
    /// that was not stored after all.
    pub async fn release(&self, registry: &Registry, attrs: &Attributes) {
        resource_quota::undo(registry, attrs).await;
    }

    /// An object left the store (deleted, or its last finalizer went):
    /// its usage leaves the namespace's quotas.
    pub async fn removed(
        &self,
        registry: &Registry,
        resource: &'static ResourceType,
        object: &Value,
    ) {
        resource_quota::removed(registry, resource, object).await;
    }
}

/// The watch cache of `resource`, as admission reads it instead of the
/// store (Kubernetes' admission plugins read informers): once it has every
/// write this API server made of `resource` (a namespace deleted or a
/// limit range created a moment ago through it counts), without a store
/// read and without waiting for writes of other resources. What another
/// member's API server wrote a moment ago may not be there yet, as in
/// Kubernetes. `None` when the cache cannot catch up in time: the store
/// answers.
async fn lister(
    registry: &Registry,
    resource: &'static ResourceType,
) -> ApiResult<Option<Arc<crate::cache::ResourceCache>>> {
    let freshness = match registry.admission().last_written(resource) {
        0 => crate::cache::Freshness::Any,
        revision => crate::cache::Freshness::AtLeast(revision),
    };
    registry
        .cache
        .fresh(resource, freshness, crate::cache::READY_WAIT)
        .await
}

/// Reads one object of one of the few resources admission consults
/// (namespaces, priority classes, service accounts…), through the watch
/// cache (see [`lister`]); None when it does not exist. An object
/// already decoded at its revision is not decoded again.
pub(crate) async fn read(
    registry: &Registry,
    (group, version, plural): (&str, &str, &str),
    namespace: Option<&str>,
    name: &str,
) -> ApiResult<Option<Arc<Value>>> {
    let resource = served(group, version, plural)?;
    let key = resource.key(namespace, name);
    let decoded = &registry.admission().decoded;
    if let Some(cache) = lister(registry, resource).await? {
        return match cache.get(&key).0 {
            Some(object) => decoded
                .decode(resource, &object.key, object.mod_revision, &object.stored)
                .map(Some),
            None => Ok(None),
        };
    }
    let modified = registry
        .storage()
        .mod_revisions(&key, "")
        .await
        .map_err(unavailable)?;
    match modified.as_deref() {
        Some([]) => return Ok(None),
        Some([(found, revision)]) if *found == key => {
            if let Some(object) = decoded.current(&key, *revision) {
                return Ok(Some(object));
            }
        }
        _ => {}
    }
    decoded.values_read.fetch_add(1, Ordering::Relaxed);
    let kv = registry.storage().get(&key).await.map_err(unavailable)?;
    kv.map(|kv| decoded.object(resource, &kv)).transpose()
}

/// Lists every object of one of the few resources admission consults (in
/// `namespace`, if given), through the watch cache (see [`lister`]).
/// Where the cache cannot catch up in time, from the store: when
/// every object is already decoded at the revision the store has for it,
/// without reading their values.
pub(crate) async fn list(
    registry: &Registry,
    (group, version, plural): (&str, &str, &str),
    namespace: Option<&str>,
) -> ApiResult<Vec<Arc<Value>>> {
    let resource = served(group, version, plural)?;
    let decoded = &registry.admission().decoded;
    let prefix = list_prefix(resource, namespace);
    if let Some(cache) = lister(registry, resource).await? {
        let filter = crate::cache::Filter::default();
        let snapshot = cache.snapshot(&prefix, &crate::storage::prefix_end(&prefix), &filter, 0);
        return snapshot
            .items
            .iter()
            .map(|object| {
                decoded.decode(resource, &object.key, object.mod_revision, &object.stored)
            })
            .collect();
    }
    let modified = registry
        .storage()
        .mod_revisions(&prefix, &crate::storage::prefix_end(&prefix))
        .await
        .map_err(unavailable)?;
    if let Some(modified) = modified {
        let current: Option<Vec<Arc<Value>>> = modified
            .iter()
            .map(|(key, revision)| decoded.current(key, *revision))
            .collect();
        if let Some(objects) = current {
            return Ok(objects);
        }
    }
    decoded.values_read.fetch_add(1, Ordering::Relaxed);
    list_kvs(registry, resource, namespace)
        .await?
        .iter()
        .map(|kv| decoded.object(resource, kv))
        .collect()
}

/// The objects [`read`] and [`list`] decoded, by key, each with the revision
/// it was decoded at. Admission reads on every write, from the watch cache
/// (with every write this API server made of what it reads: a quota or a
/// namespace's deletion made a moment ago counts), but the
/// objects it reads change seldom: one that has not changed since is not
/// decoded again (a namespace and the priority
/// classes were two decodes per pod created), and, where the store can say
/// which revision each key is at without reading its value (the store in
/// this process), not read again either (that read was 3 % of `skiff up`'s
/// CPU in the scheduler benchmark: a namespace, a service account and the
/// priority classes per pod, a namespace per binding and per Event).
#[derive(Default)]
pub(crate) struct Decoded {
    objects: Mutex<HashMap<String, (i64, Arc<Value>)>>,
    /// Reads and lists that read values from the store (not answered from
    /// `objects` alone).
    values_read: AtomicU64,
}

/// Objects kept before [`Decoded`] starts afresh.
const DECODED_MAX: usize = 4096;

impl Decoded {
    /// The object decoded for `key`, if it was decoded at `revision`.
    fn current(&self, key: &str, revision: i64) -> Option<Arc<Value>> {
        let objects = self.objects.lock().unwrap_or_else(|e| e.into_inner());
        match objects.get(key) {
            Some((at, object)) if *at == revision => Some(object.clone()),
            _ => None,
        }
    }

    /// `kv`'s object: the one decoded at its revision, or decoded now.
    fn object(&self, resource: &ResourceType, kv: &Kv) -> ApiResult<Arc<Value>> {
        self.decode(resource, &kv.key, kv.mod_revision, &kv.value)
    }

    /// The object stored at `key` as `stored` at `revision`: the one
    /// decoded at that revision, or decoded now.
    fn decode(
        &self,
        resource: &ResourceType,
        key: &str,
        revision: i64,
        stored: &[u8],
    ) -> ApiResult<Arc<Value>> {
        if let Some(object) = self.current(key, revision) {
            return Ok(object);
        }
        let object = Arc::new(crate::object::from_stored(resource, stored, revision)?);
        let mut objects = self.objects.lock().unwrap_or_else(|e| e.into_inner());
        if objects.len() >= DECODED_MAX && !objects.contains_key(key) {
            objects.clear();
        }
        objects.insert(key.to_string(), (revision, object.clone()));
        Ok(object)
    }
}

fn unavailable(err: crate::storage::StorageError) -> ApiError {
    ApiError::unavailable(format!("the store is unavailable: {err}"))
}

/// Where `resource`'s objects (in `namespace`, if given) are stored.
fn list_prefix(resource: &ResourceType, namespace: Option<&str>) -> String {
    match (resource.namespaced, namespace) {
        (true, Some(namespace)) => resource.namespace_prefix(namespace),
        _ => resource.storage_prefix(),
    }
}

async fn list_kvs(
    registry: &Registry,
    resource: &'static ResourceType,
    namespace: Option<&str>,
) -> ApiResult<Vec<Kv>> {
    let prefix = list_prefix(resource, namespace);
    let page = registry
        .storage()
        .list(&prefix, &crate::storage::prefix_end(&prefix), 0, 0)
        .await
        .map_err(unavailable)?;
    Ok(page.kvs)
}

/// Every object of a resource (in `namespace`, if given), read from the
/// store itself, not the watch cache, and not kept: what a quota counts.
pub(crate) async fn list_resource(
    registry: &Registry,
    resource: &'static ResourceType,
    namespace: Option<&str>,
) -> ApiResult<Vec<Value>> {
    list_kvs(registry, resource, namespace)
        .await?
        .iter()
        .map(|kv| crate::object::from_stored(resource, &kv.value, kv.mod_revision))
        .collect()
}

fn served(group: &str, version: &str, plural: &str) -> ApiResult<&'static ResourceType> {
    crate::resources::find(group, version, plural).ok_or_else(|| {
        ApiError::internal(format!(
            "admission needs {plural}.{group}/{version}, which is not served"
        ))
    })
}

pub(crate) const NAMESPACES: (&str, &str, &str) = ("", "v1", "namespaces");

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Attributes of a write of `object` to `plural` (core group) in
    /// namespace `default`.
    pub(crate) fn attrs(operation: Operation, plural: &str, object: Value) -> Attributes {
        let resource = crate::resources::all()
            .iter()
            .find(|r| r.plural == plural)
            .expect("a served resource");
        Attributes {
            operation,
            resource,
            subresource: None,
            namespace: resource.namespaced.then(|| "default".to_string()),
            name: crate::object::name(&object).to_string(),
            object: Some(object),
            old_object: None,
            dry_run: false,
            user: None,
        }
    }

    #[test]
    fn refusals_read_as_kubernetes_words_them() {
        let a = attrs(
            Operation::Create,
            "pods",
            serde_json::json!({"metadata": {"name": "web"}}),
        );
        let err = a.forbidden("no PriorityClass with name x was found");
        assert_eq!((err.code, err.reason), (403, "Forbidden"));
        assert_eq!(
            err.message,
            "pods \"web\" is forbidden: no PriorityClass with name x was found"
        );
        let err = forbidden("scheduling.k8s.io", "priorityclasses", "p", "no");
        assert_eq!(
            err.message,
            "priorityclasses.scheduling.k8s.io \"p\" is forbidden: no"
        );
    }

    #[tokio::test]
    async fn an_object_is_decoded_again_only_once_it_changed() {
        use crate::registry::{Target, Write};
        let (registry, _dir) = crate::registry::test_registry().await;
        let classes = Target {
            resource: served("scheduling.k8s.io", "v1", "priorityclasses").unwrap(),
            namespace: None,
        };
        let write = Write::new("test", false);
        let class = serde_json::json!({"metadata": {"name": "high"}, "value": 10});
        registry.create(&classes, class, &write).await.unwrap();
        const CLASSES: (&str, &str, &str) = ("scheduling.k8s.io", "v1", "priorityclasses");

        let first = read(&registry, CLASSES, None, "high")
            .await
            .unwrap()
            .unwrap();
        let again = read(&registry, CLASSES, None, "high")
            .await
            .unwrap()
            .unwrap();
        assert!(Arc::ptr_eq(&first, &again), "decoded once");
        let listed = list(&registry, CLASSES, None).await.unwrap();
        let high = listed
            .iter()
            .find(|c| c["metadata"]["name"] == "high")
            .unwrap();
        assert!(
            Arc::ptr_eq(&first, high),
            "a list shares what a read decoded"
        );

        let mut changed = (*first).clone();
        changed["description"] = serde_json::json!("for the important ones");
        registry
            .update(&classes, "high", changed, None, &write)
            .await
            .unwrap();
        let after = read(&registry, CLASSES, None, "high")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            after["description"], "for the important ones",
            "a change is seen at once"
        );
        assert_ne!(
            after["metadata"]["resourceVersion"],
            first["metadata"]["resourceVersion"]
        );

        let gone = crate::registry::DeleteOptions::default();
        registry.delete(&classes, "high", &gone).await.unwrap();
        assert!(read(&registry, CLASSES, None, "high")
            .await
            .unwrap()
            .is_none());
    }

    /// Admission reads through the watch cache: no value is read from the
    /// store, an unchanged object is not decoded again (by `read` or by
    /// `list`), and a change or a delete this API server made a moment
    /// before is seen at once.
    #[tokio::test]
    async fn admission_reads_through_the_watch_cache_and_sees_every_write() {
        use crate::registry::{Target, Write};
        let (registry, _dir) = crate::registry::test_registry().await;
        let maps = Target {
            resource: served("", "v1", "configmaps").unwrap(),
            namespace: Some("default"),
        };
        const MAPS: (&str, &str, &str) = ("", "v1", "configmaps");
        let write = Write::new("test", false);
        let map = serde_json::json!({"metadata": {"name": "m"}, "data": {"k": "1"}});
        registry.create(&maps, map, &write).await.unwrap();
        let values_read = || {
            registry
                .admission()
                .decoded
                .values_read
                .load(Ordering::Relaxed)
        };

        let first = read(&registry, MAPS, Some("default"), "m")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(first["data"]["k"], "1", "a create is seen at once");
        let again = read(&registry, MAPS, Some("default"), "m")
            .await
            .unwrap()
            .unwrap();
        assert!(Arc::ptr_eq(&first, &again), "unchanged: not decoded again");
        let listed = list(&registry, MAPS, Some("default")).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert!(Arc::ptr_eq(&first, &listed[0]));
        assert!(list(&registry, MAPS, Some("elsewhere"))
            .await
            .unwrap()
            .is_empty());

        let mut changed = (*first).clone();
        changed["data"]["k"] = serde_json::json!("2");
        registry
            .update(&maps, "m", changed, None, &write)
            .await
            .unwrap();
        let listed = list(&registry, MAPS, Some("default")).await.unwrap();
        assert_eq!(listed[0]["data"]["k"], "2", "a change is seen at once");
        let after = read(&registry, MAPS, Some("default"), "m")
            .await
            .unwrap()
            .unwrap();
        assert!(Arc::ptr_eq(&after, &listed[0]));

        let gone = crate::registry::DeleteOptions::default();
        registry.delete(&maps, "m", &gone).await.unwrap();
        assert!(
            read(&registry, MAPS, Some("default"), "m")
                .await
                .unwrap()
                .is_none(),
            "a delete is seen at once"
        );
        assert!(list(&registry, MAPS, Some("default"))
            .await
            .unwrap()
            .is_empty());
        assert_eq!(values_read(), 0, "no value was read from the store");
    }
}
