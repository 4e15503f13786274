//! The generic registry: every verb of every resource in the table, over
//! the storage, on objects as JSON. Kubernetes' object semantics live here:
//! server-set metadata, optimistic concurrency on resourceVersion,
//! generation, finalizers and graceful deletion, namespaces that must exist.

use serde_json::{json, Value};

use crate::namespace;
use crate::object::{self, metadata_mut};
use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult};
use crate::storage::{prefix_end, Storage, StorageError};
use skiff_machinery::selectors::{FieldSelector, LabelSelector};

/// The namespaces that exist from the start.
pub const DEFAULT_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

/// The field manager of the objects the server makes itself.
pub const SERVER_MANAGER: &str = "skiff-apiserver";

/// How many keys a list reads from the store per round while filtering.
const LIST_BATCH: i64 = 500;

#[derive(Clone)]
pub struct Registry {
    storage: Storage,
    /// Set when the server stops: open watches end cleanly.
    stopping: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
    /// Serves watches, and lists and gets with a resourceVersion.
    pub(crate) cache: crate::cache::WatchCache,
    /// The admission chain every create, update and delete goes through.
    admission: std::sync::Arc<crate::admission::Admission>,
    /// Set once the default objects have been made.
    bootstrapped: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The server's authorizer, for RBAC's escalation check (weak: the
    /// authorizer holds the registry).
    authorizer: std::sync::Arc<std::sync::OnceLock<std::sync::Weak<crate::authz::Authorizer>>>,
    /// Signs ServiceAccount tokens (TokenRequest), if the server has a key.
    token_issuer: Option<std::sync::Arc<crate::authn::service_account::TokenIssuer>>,
    /// TLS for calling kubelets (`None`: plain HTTP).
    kubelet_client: Option<std::sync::Arc<rustls::ClientConfig>>,
    /// Events expire after this (`None`: they stay until deleted).
    event_ttl: Option<std::sync::Arc<crate::event_ttl::EventTtl>>,
    /// Where Services' cluster IPs and node ports come from.
    service_ranges: std::sync::Arc<crate::service_alloc::ServiceRanges>,
}

/// Which object or collection a request is about.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub resource: &'static ResourceType,
    /// The URL's namespace (`None`: cluster-wide or cluster-scoped).
    pub namespace: Option<&'a str>,
}

/// The selectors and paging of a list or watch.
#[derive(Debug, Default)]
pub struct ListOptions {
    pub labels: Option<LabelSelector>,
    pub fields: Option<FieldSelector>,
    pub limit: i64,
    pub continue_token: Option<String>,
    /// `resourceVersion` of the request ("" or "0": any/newest).
    pub resource_version: String,
    /// `resourceVersionMatch`: "", "Exact" or "NotOlderThan".
    pub resource_version_match: String,
}

impl ListOptions {
    pub fn selects(&self, object: &Value) -> bool {
        self.labels
            .as_ref()
            .is_none_or(|s| s.matches_object(object))
            && self.fields.as_ref().is_none_or(|s| s.matches(object))
    }
}

/// A PATCH request: its body, the body's media type, and a check of the
/// patched object before it is stored (field validation).
pub struct Patch<'a> {
    pub content_type: &'a str,
    pub body: &'a [u8],
    pub check: &'a (dyn Fn(&Value) -> ApiResult<()> + Sync),
    /// Server-side apply only: take fields other managers own.
    pub force: bool,
}

/// Who writes, and whether for real.
#[derive(Debug, Clone, Copy)]
pub struct Write<'a> {
    /// The field manager recorded in `managedFields` (`fieldManager`, or
    /// the client's name from its User-Agent).
    pub manager: &'a str,
    pub dry_run: bool,
    /// The subresource the write came through, when it is not the object
    /// or its status (`scale`), for `managedFields`.
    pub via: Option<&'a str>,
}

impl<'a> Write<'a> {
    pub fn new(manager: &'a str, dry_run: bool) -> Self {
        Write {
            manager,
            dry_run,
            via: None,
        }
    }
}

/// `propagationPolicy` of a delete: what happens to the object's dependents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// The object goes now; the garbage collector removes dependents after.
    Background,
    /// The object stays (`foregroundDeletion` finalizer) until the garbage
    /// collector has removed the dependents that block it.
    Foreground,
    /// The object stays (`orphan` finalizer) until the garbage collector
    /// has taken its ownerReferences off the dependents.
    Orphan,
}

impl Propagation {
    pub fn parse(value: &str) -> ApiResult<Propagation> {
        match value {
            "Background" => Ok(Propagation::Background),
            "Foreground" => Ok(Propagation::Foreground),
            "Orphan" => Ok(Propagation::Orphan),
            other => Err(ApiError::invalid(
                "meta.k8s.io",
                "DeleteOptions",
                "deleteoptions",
                "",
                vec![crate::status::Cause {
                    reason: "FieldValueNotSupported",
                    message: format!(
                        "Unsupported value: {}: supported values: \"Foreground\", \"Background\", \"Orphan\"",
                        skiff_machinery::quote::go_quote(other)
                    ),
                    field: "propagationPolicy".into(),
                }],
            )),
        }
    }

    /// The finalizer that holds the object for the garbage collector.
    fn finalizer(self) -> Option<&'static str> {
        match self {
            Propagation::Background => None,
            Propagation::Foreground => Some(FOREGROUND_FINALIZER),
            Propagation::Orphan => Some(ORPHAN_FINALIZER),
        }
    }
}

pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
pub const ORPHAN_FINALIZER: &str = "orphan";

/// How a delete goes.
#[derive(Debug, Default, Clone)]
pub struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    /// `propagationPolicy` (or the older `orphanDependents`); None: the
    /// resource's default, Background.
    pub propagation: Option<Propagation>,
    pub dry_run: bool,
    pub precondition_uid: Option<String>,
    pub precondition_resource_version: Option<String>,
}

pub fn storage_error(target: &Target, name: &str, err: StorageError) -> ApiError {
    let group = target.resource.group;
    let plural = target.resource.plural;
    match err {
        StorageError::AlreadyExists => ApiError::already_exists(group, plural, name),
        StorageError::NotFound => ApiError::not_found(group, plural, name),
        StorageError::Conflict => ApiError::conflict(group, plural, name, CONFLICT_WHY),
        StorageError::Compacted {
            requested,
            compacted,
        } => ApiError::gone(format!(
            "too old resource version: {requested} ({compacted})"
        )),
        StorageError::FutureRevision => {
            ApiError::timeout("Too large resource version: the store has not reached it yet")
        }
        StorageError::Unavailable(why) => {
            ApiError::unavailable(format!("the store is unavailable: {why}"))
        }
        StorageError::LeaseNotFound => {
            ApiError::internal("the store lost the lease of the write".to_string())
        }
        StorageError::Internal(why) => ApiError::internal(why),
    }
}

fn same_spec(a: &Value, b: &Value) -> bool {
    a.get("spec") == b.get("spec")
}

mod custom_resources;
mod list;

pub use list::{ListChunks, ListJson};

impl Registry {
    pub fn new(storage: Storage) -> Registry {
        Registry {
            cache: crate::cache::WatchCache::new(
                storage.clone(),
                crate::cache::CacheConfig::from_env(),
            ),
            storage,
            stopping: std::sync::Arc::new(tokio::sync::watch::channel(false).0),
            admission: std::sync::Arc::new(crate::admission::Admission::new()),
            bootstrapped: Default::default(),
            token_issuer: None,
            kubelet_client: None,
            authorizer: Default::default(),
            event_ttl: None,
            service_ranges: Default::default(),
        }
    }

    /// Services' cluster IPs and node ports come from `ranges`
    /// (`--service-cluster-ip-range`, `--service-node-port-range`).
    pub fn with_service_ranges(mut self, ranges: crate::service_alloc::ServiceRanges) -> Registry {
        self.service_ranges = std::sync::Arc::new(ranges);
        self
    }

    pub fn service_ranges(&self) -> &crate::service_alloc::ServiceRanges {
        &self.service_ranges
    }

    /// Events written from now on expire `ttl` after their last write
    /// (kube-apiserver's `--event-ttl`).
    pub fn with_event_ttl(mut self, ttl: std::time::Duration) -> Registry {
        self.event_ttl = Some(std::sync::Arc::new(crate::event_ttl::EventTtl::new(ttl)));
        self
    }

    /// Writes `value` with `put`, given the lease an object of `resource`
    /// is attached to (0: none; Events: one that expires after the event
    /// TTL). A lease the store no longer holds is replaced once; only then
    /// is the value copied.
    async fn put_leased<F, W>(
        &self,
        resource: &ResourceType,
        value: Vec<u8>,
        put: F,
    ) -> Result<i64, StorageError>
    where
        F: Fn(Vec<u8>, i64) -> W,
        W: std::future::Future<Output = Result<i64, StorageError>>,
    {
        let Some(ttl) = self
            .event_ttl
            .as_ref()
            .filter(|_| crate::event_ttl::EventTtl::applies_to(resource))
        else {
            return put(value, 0).await;
        };
        let lease = ttl.lease(&self.storage).await?;
        match put(value.clone(), lease).await {
            Err(StorageError::LeaseNotFound) => {
                ttl.forget(lease);
                let lease = ttl.lease(&self.storage).await?;
                put(value, lease).await
            }
            written => written,
        }
    }

    /// Ends every open watch (the server is stopping).
    pub fn begin_shutdown(&self) {
        self.stopping.send_replace(true);
        // A watch that starts from here on sees `stopping` before its
        // first line; one already open finds its queue closed.
        self.cache.end_watches();
    }

    /// Flips to true when the server stops.
    pub fn stopping(&self) -> tokio::sync::watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// Creates the namespaces and system PriorityClasses every cluster
    /// has, where missing.
    pub async fn ensure_default_namespaces(&self) -> ApiResult<()> {
        // The default roles first: a client that sees the namespaces may
        // rely on them.
        crate::authz::bootstrap::ensure(self).await?;
        let resource =
            crate::resources::find("", "v1", "namespaces").expect("namespaces are served");
        let target = Target {
            resource,
            namespace: None,
        };
        for name in DEFAULT_NAMESPACES {
            let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
            match self
                .create(&target, body, &Write::new(SERVER_MANAGER, false))
                .await
            {
                Ok(_) => {}
                Err(err) if err.reason == "AlreadyExists" => {}
                Err(err) => return Err(err),
            }
        }
        // The built-in PriorityClasses, too.
        let (group, version, plural) = crate::admission::priority::PRIORITY_CLASSES;
        let classes = Target {
            resource: crate::resources::find(group, version, plural)
                .expect("priorityclasses are served"),
            namespace: None,
        };
        for class in crate::admission::priority::system_class_objects() {
            match self
                .create(&classes, class, &Write::new(SERVER_MANAGER, false))
                .await
            {
                Ok(_) => {}
                Err(err) if err.reason == "AlreadyExists" => {}
                Err(err) => return Err(err),
            }
        }
        self.load_custom_resources().await?;
        self.bootstrapped
            .store(true, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// The registry, issuing ServiceAccount tokens with `issuer`.
    pub fn with_token_issuer(
        mut self,
        issuer: std::sync::Arc<crate::authn::service_account::TokenIssuer>,
    ) -> Registry {
        self.token_issuer = Some(issuer);
        self
    }

    /// The registry, calling kubelets over TLS with `client`.
    pub fn with_kubelet_client(mut self, client: std::sync::Arc<rustls::ClientConfig>) -> Registry {
        self.kubelet_client = Some(client);
        self
    }

    /// TLS for calling kubelets, if they are called over TLS.
    pub fn kubelet_client(&self) -> Option<&std::sync::Arc<rustls::ClientConfig>> {
        self.kubelet_client.as_ref()
    }

    /// Records the server's authorizer (once).
    pub fn set_authorizer(&self, authorizer: &std::sync::Arc<crate::authz::Authorizer>) {
        let _ = self.authorizer.set(std::sync::Arc::downgrade(authorizer));
    }

    pub fn authorizer(&self) -> Option<std::sync::Arc<crate::authz::Authorizer>> {
        self.authorizer.get().and_then(std::sync::Weak::upgrade)
    }

    pub fn token_issuer(
        &self,
    ) -> Option<&std::sync::Arc<crate::authn::service_account::TokenIssuer>> {
        self.token_issuer.as_ref()
    }

    /// Whether the default namespaces, classes and roles exist (readyz).
    pub fn is_bootstrapped(&self) -> bool {
        self.bootstrapped.load(std::sync::atomic::Ordering::Acquire)
    }

    pub(crate) fn admission(&self) -> &crate::admission::Admission {
        &self.admission
    }

    pub async fn get(&self, target: &Target<'_>, name: &str) -> ApiResult<Value> {
        Ok(self.read(target, name).await?.0)
    }

    /// GET with `?resourceVersion=`: "0" (any) or N (not older than N)
    /// comes from the watch cache; none reads the store, as [`Self::get`].
    pub async fn get_at(
        &self,
        target: &Target<'_>,
        name: &str,
        resource_version: &str,
    ) -> ApiResult<Value> {
        match self.cache.get(target, name, resource_version).await? {
            Some(object) => Ok(object),
            None => self.get(target, name).await,
        }
    }

    /// POST: a new object. `dry_run`: checked as if created, not stored.
    pub async fn create(
        &self,
        target: &Target<'_>,
        object: Value,
        write: &Write<'_>,
    ) -> ApiResult<Value> {
        self.create_object(target, object, write, true).await
    }

    /// Creates `object`; `record`: its fields are the writer's in
    /// `managedFields` (not for server-side apply, which has recorded them).
    async fn create_object(
        &self,
        target: &Target<'_>,
        mut object: Value,
        write: &Write<'_>,
        record: bool,
    ) -> ApiResult<Value> {
        let dry_run = write.dry_run;
        let resource = target.resource;
        object::drop_nulls(resource, &mut object);
        object::check_type(resource, &mut object)?;
        object::check_namespace(resource, target.namespace, &mut object)?;
        {
            let meta = metadata_mut(&mut object);
            let named = meta
                .get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty());
            let generate = meta
                .get("generateName")
                .and_then(Value::as_str)
                .filter(|g| !g.is_empty())
                .map(str::to_string);
            if let (false, Some(prefix)) = (named, generate) {
                meta.insert(
                    "name".into(),
                    json!(format!("{prefix}{}", object::name_suffix())),
                );
            }
            meta.remove("resourceVersion");
            meta.remove("deletionTimestamp");
            meta.remove("deletionGracePeriodSeconds");
            meta.insert("uid".into(), json!(object::new_uid()));
            meta.insert("creationTimestamp".into(), json!(object::now()));
            if object.get("spec").is_some() {
                metadata_mut(&mut object).insert("generation".into(), json!(1));
            } else {
                metadata_mut(&mut object).remove("generation");
            }
        }
        default_status(resource, &mut object);
        if namespace::is_namespace(resource) {
            namespace::prepare_for_create(&mut object);
        }
        if is_crd(resource) {
            crate::crd::accept(&mut object);
        } else if resource.custom.is_some() && resource.has_subresource("status") {
            // As Kubernetes, a custom object's status is written through
            // /status only.
            if let Some(map) = object.as_object_mut() {
                map.remove("status");
            }
        }
        let mut attrs = crate::admission::Attributes {
            operation: crate::admission::Operation::Create,
            resource,
            subresource: None,
            namespace: target.namespace.map(str::to_string),
            name: object::name(&object).to_string(),
            object: Some(object),
            old_object: None,
            dry_run,
            user: crate::user::current(),
        };
        self.admission.mutate(self, &mut attrs).await?;
        let mut object = attrs.object.take().unwrap_or_default();
        // Again: admission (a webhook's patch among it) may have added some.
        object::drop_nulls(resource, &mut object);
        crate::validation::prune_unknown_fields(resource, &mut object);
        if record {
            crate::apply::record_update(
                resource,
                None,
                &mut object,
                &manager_of(write, &resource.api_version(), None),
                &object::now(),
            );
        }
        crate::validation::validate_object(resource, &object)?;
        for warning in crate::validation::warnings::on_create(resource, &object) {
            crate::warning::add(warning);
        }
        let name = object::name(&object).to_string();
        // NamespaceLifecycle (in the chain) refuses a missing namespace.
        attrs.object = Some(object);
        self.admission.validate(self, &attrs).await?;
        let mut object = attrs.object.take().unwrap_or_default();
        let allocated = match is_service(resource) {
            true => Some(crate::service_alloc::allocate(self, None, &mut object, dry_run).await?),
            false => None,
        };
        if dry_run {
            if self
                .storage
                .get(&resource.key(target.namespace, &name))
                .await
                .ok()
                .flatten()
                .is_some()
            {
                return Err(ApiError::already_exists(
                    resource.group,
                    resource.plural,
                    &name,
                ));
            }
            return Ok(object);
        }
        let key = resource.key(target.namespace, &name);
        let created = self
            .put_leased(resource, object::to_stored(&object), |value, lease| {
                self.storage.create(&key, value, lease)
            })
            .await;
        let revision = match created {
            Ok(revision) => revision,
            Err(err) => {
                if let Some(allocated) = &allocated {
                    crate::service_alloc::release(self, &object, allocated).await;
                }
                attrs.object = Some(object);
                self.admission.release(self, &attrs).await;
                return Err(storage_error(target, &name, err));
            }
        };
        self.admission.written(resource, revision);
        metadata_mut(&mut object).insert("resourceVersion".into(), json!(revision.to_string()));
        if is_crd(resource) {
            crate::crd::register(&object);
        }
        Ok(object)
    }

    /// PUT of the object (`subresource` None) or of its status.
    pub async fn update(
        &self,
        target: &Target<'_>,
        name: &str,
        object: Value,
        subresource: Option<&str>,
        write: &Write<'_>,
    ) -> ApiResult<Value> {
        let put = |_: &Value, _: i64| Ok(object.clone());
        self.guaranteed_update(target, name, None, subresource, write, true, put)
            .await
    }

    /// Kubernetes' GuaranteedUpdate, the one way every update, patch and
    /// subresource write stores an object: reads it (or takes `read`, just
    /// read by the caller), has `try_update` make the next object from it,
    /// and stores that at the read revision. A resourceVersion in the next
    /// object is the client's precondition, and a mismatch is a 409 at
    /// once. Without one, a write that lost a race with another writer (a
    /// controller writing the status) reads the object again and tries
    /// again; errors of `try_update` end it as they are.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn guaranteed_update(
        &self,
        target: &Target<'_>,
        name: &str,
        mut read: Option<(Value, i64)>,
        subresource: Option<&str>,
        write: &Write<'_>,
        record: bool,
        mut try_update: impl FnMut(&Value, i64) -> ApiResult<Value>,
    ) -> ApiResult<Value> {
        let mut last = None;
        let started = std::time::Instant::now();
        while last.is_none() || started.elapsed() < UPDATE_RETRY_FOR {
            let (current, revision) = match read.take() {
                Some(read) => read,
                None => self.read(target, name).await?,
            };
            let next = try_update(&current, revision)?;
            check_precondition(target, name, &next, revision)?;
            let read = Some((current, revision));
            match self
                .update_object(target, name, next, read, subresource, write, record)
                .await
            {
                Err(err) if is_write_race(&err) => last = Some(err),
                other => return other,
            }
        }
        Err(last.unwrap_or_else(|| storage_error(target, name, StorageError::Conflict)))
    }

    /// Stores `object` over the current one; `record`: the fields the
    /// writer changed become its own in `managedFields`. `read`: the
    /// current object and revision if the caller has just read them
    /// (a write after a change since then fails with a conflict, as it
    /// would had they been read here); `None` reads them.
    #[allow(clippy::too_many_arguments)]
    async fn update_object(
        &self,
        target: &Target<'_>,
        name: &str,
        mut object: Value,
        read: Option<(Value, i64)>,
        subresource: Option<&str>,
        write: &Write<'_>,
        record: bool,
    ) -> ApiResult<Value> {
        let dry_run = write.dry_run;
        let resource = target.resource;
        object::drop_nulls(resource, &mut object);
        object::check_type(resource, &mut object)?;
        if subresource.is_some() || resource.has_subresource("status") {
            // Kubernetes decodes the whole body before it keeps the part
            // this endpoint may change: a wrong type in what is then
            // dropped (a status sent to the main resource, a spec sent to
            // /status) is still a 400. Otherwise validation decodes it.
            crate::validation::check_decodes(resource, &object)?;
        }
        object::check_namespace(resource, target.namespace, &mut object)?;
        name_from_url(&mut object, name)?;
        let (current, revision) = match read {
            Some(read) => read,
            None => self.read(target, name).await?,
        };
        if let Some(asked) = object::meta_str(&object, "resourceVersion").filter(|v| !v.is_empty())
        {
            if asked != revision.to_string() {
                return Err(storage_error(target, name, StorageError::Conflict));
            }
        }
        let mut next = match subresource {
            Some("status") => {
                // Only the status changes through /status. A body with no
                // status (or a null one) empties it, as Kubernetes decodes
                // it to the zero status: never a stored `status: null`,
                // which no schema allows.
                let mut next = current.clone();
                match object.get("status").filter(|status| !status.is_null()) {
                    Some(status) => next["status"] = status.clone(),
                    None if resource.custom.is_some() => {
                        if let Some(map) = next.as_object_mut() {
                            map.remove("status");
                        }
                    }
                    None => next["status"] = json!({}),
                }
                next
            }
            Some("finalize") if namespace::is_namespace(resource) => {
                namespace::finalize(&current, &object)
            }
            Some(other) => {
                return Err(ApiError::not_found(
                    resource.group,
                    &format!("{}/{other}", resource.plural),
                    name,
                ))
            }
            None => {
                // The main resource does not change the status.
                if resource.has_subresource("status") {
                    match current.get("status") {
                        Some(status) => object["status"] = status.clone(),
                        None => {
                            if let Some(map) = object.as_object_mut() {
                                map.remove("status");
                            }
                        }
                    }
                }
                if namespace::is_namespace(resource) {
                    namespace::prepare_for_update(&mut object, &current);
                }
                object
            }
        };
        check_uid(target, name, &next, &current)?;
        // What the server owns stays as it was.
        {
            let old = &current["metadata"];
            let meta = metadata_mut(&mut next);
            for field in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match old.get(field) {
                    Some(v) => {
                        meta.insert(field.into(), v.clone());
                    }
                    None => {
                        meta.remove(field);
                    }
                }
            }
            meta.insert("resourceVersion".into(), json!(revision.to_string()));
        }
        let mut attrs = crate::admission::Attributes {
            operation: crate::admission::Operation::Update,
            resource,
            subresource: subresource.or(write.via).map(str::to_string),
            namespace: target.namespace.map(str::to_string),
            name: name.to_string(),
            object: Some(next),
            old_object: Some(current),
            dry_run,
            user: crate::user::current(),
        };
        self.admission.mutate(self, &mut attrs).await?;
        let mut next = attrs.object.take().unwrap_or_default();
        let mut current = attrs.old_object.take().unwrap_or_default();
        // Again for what admission added; and an object stored with nulls
        // (by an older skiff) is compared without them, so that dropping
        // them is no change to an immutable field.
        object::drop_nulls(resource, &mut next);
        object::drop_nulls(resource, &mut current);
        if !same_spec(&current, &next) {
            let generation = current["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            metadata_mut(&mut next).insert("generation".into(), json!(generation));
        }
        crate::validation::prune_unknown_fields(resource, &mut next);
        if record {
            crate::apply::record_update(
                resource,
                Some(&current),
                &mut next,
                &manager_of(write, &resource.api_version(), subresource),
                &object::now(),
            );
        }
        if is_crd(resource) {
            crate::crd::accept(&mut next);
        }
        if is_service(resource) && subresource.is_none() {
            crate::service_alloc::drop_type_dependent_fields(&current, &mut next);
        }
        crate::validation::validate_object(resource, &next)?;
        crate::validation::update::validate_update(resource, &current, &next)?;
        for warning in crate::validation::warnings::on_update(resource, &current, &next) {
            crate::warning::add(warning);
        }
        if next == current {
            // Nothing changed: no write, the same resourceVersion.
            return Ok(current);
        }
        attrs.object = Some(next);
        attrs.old_object = Some(current);
        self.admission.validate(self, &attrs).await?;
        let mut next = attrs.object.take().unwrap_or_default();
        let current = attrs.old_object.take().unwrap_or_default();
        let allocated = match is_service(resource) && subresource.is_none() {
            true => Some(
                crate::service_alloc::allocate(self, Some(&current), &mut next, dry_run).await?,
            ),
            false => None,
        };
        if dry_run {
            return Ok(next);
        }
        let key = resource.key(target.namespace, name);
        let gone = match namespace::is_namespace(resource) {
            true => namespace::may_be_removed(&next),
            false => object::is_deleting(&next) && object::finalizers(&next).is_empty(),
        };
        let stored = match gone {
            // The last finalizer is gone: the object goes.
            true => self.storage.delete(&key, revision).await,
            false => {
                self.put_leased(resource, object::to_stored(&next), |value, lease| {
                    self.storage.update(&key, value, revision, lease)
                })
                .await
            }
        };
        let written = match stored {
            Ok(written) => written,
            Err(err) => {
                if let Some(allocated) = &allocated {
                    crate::service_alloc::release(self, &next, allocated).await;
                }
                attrs.object = Some(next);
                attrs.old_object = Some(current);
                self.admission.release(self, &attrs).await;
                return Err(storage_error(target, name, err));
            }
        };
        self.admission.written(resource, written);
        if is_service(resource) {
            // What the Service held before and holds no more.
            let kept = match gone {
                true => crate::service_alloc::Held::default(),
                false => crate::service_alloc::held(&next),
            };
            let dropped = crate::service_alloc::held(&current).minus(&kept);
            crate::service_alloc::release(self, &current, &dropped).await;
        }
        if gone {
            self.admission.removed(self, resource, &next).await;
        }
        metadata_mut(&mut next).insert("resourceVersion".into(), json!(written.to_string()));
        if is_crd(resource) {
            match gone {
                true => self.remove_custom_resource(&next).await,
                false => crate::crd::register(&next),
            }
        }
        Ok(next)
    }

    /// PATCH of the object or its status: the patch is applied to the
    /// current object and the result stored as by [`Self::update`]. A
    /// resourceVersion in the patch is a precondition; without one, a
    /// write that raced with another is patched again on the new object.
    /// A server-side apply to a missing object creates it. Returns the
    /// object and whether it was created.
    pub async fn patch(
        &self,
        target: &Target<'_>,
        name: &str,
        patch: &Patch<'_>,
        subresource: Option<&str>,
        write: &Write<'_>,
    ) -> ApiResult<(Value, bool)> {
        let apply = crate::patch::is_apply(patch.content_type);
        let applied = match apply {
            true => {
                // Field validation looks at the configuration as sent.
                let mut applied = crate::patch::decode_apply(patch.body)?;
                (patch.check)(&applied)?;
                crate::validation::prune_unknown_fields(target.resource, &mut applied);
                Some(applied)
            }
            false => None,
        };
        let read = match self.read(target, name).await {
            Err(err) if err.code == 404 => match &applied {
                Some(applied) => {
                    return self
                        .apply_create(target, name, applied, patch, subresource, write)
                        .await
                        .map(|created| (created, !write.dry_run));
                }
                None => return Err(err),
            },
            other => Some(other?),
        };
        let resource = target.resource;
        let patched = match &applied {
            // Server-side apply records its own managed fields.
            Some(applied) => {
                let api_version = resource.api_version();
                let manager = manager_of(write, &api_version, subresource);
                let merge = |current: &Value, revision: i64| {
                    let merged = crate::apply::apply(
                        resource,
                        Some(current),
                        applied,
                        &manager,
                        patch.force,
                        &object::now(),
                    )?;
                    check_precondition(target, name, applied, revision)?;
                    Ok(merged)
                };
                self.guaranteed_update(target, name, read, subresource, write, false, merge)
                    .await
            }
            None => {
                let apply_patch = |current: &Value, _: i64| {
                    let patched = crate::patch::apply_patch(
                        resource,
                        patch.content_type,
                        current,
                        patch.body,
                    )?;
                    let strategic = patch.content_type == crate::patch::STRATEGIC_MERGE_PATCH;
                    let sent: Value = match strategic {
                        true => serde_json::from_slice(patch.body).unwrap_or(Value::Null),
                        false => Value::Null,
                    };
                    crate::validation::check_patched(target.resource, strategic, &sent, &patched)?;
                    check_identity(target, name, &patched)?;
                    (patch.check)(&patched)?;
                    Ok(patched)
                };
                self.guaranteed_update(target, name, read, subresource, write, true, apply_patch)
                    .await
            }
        };
        patched.map(|object| (object, false))
    }

    /// Server-side apply to a missing object: the applied configuration,
    /// owned by its manager, is created.
    async fn apply_create(
        &self,
        target: &Target<'_>,
        name: &str,
        applied: &Value,
        patch: &Patch<'_>,
        subresource: Option<&str>,
        write: &Write<'_>,
    ) -> ApiResult<Value> {
        if subresource.is_some() {
            return Err(ApiError::not_found(
                target.resource.group,
                target.resource.plural,
                name,
            ));
        }
        if object::meta_str(applied, "resourceVersion").is_some_and(|v| !v.is_empty()) {
            // A precondition on an object that does not exist.
            return Err(ApiError::not_found(
                target.resource.group,
                target.resource.plural,
                name,
            ));
        }
        let mut object = crate::apply::apply(
            target.resource,
            None,
            applied,
            &manager_of(write, &target.resource.api_version(), None),
            patch.force,
            &object::now(),
        )?;
        name_from_url(&mut object, name)?;
        self.create_object(target, object, write, false).await
    }

    /// DELETE: removes the object, or marks it when finalizers (or a pod's
    /// graceful termination on its node) must run first. Returns the object
    /// as deleted or as marked.
    pub async fn delete(
        &self,
        target: &Target<'_>,
        name: &str,
        options: &DeleteOptions,
    ) -> ApiResult<Value> {
        let resource = target.resource;
        let (current, revision) = self.read(target, name).await?;
        if let Some(uid) = &options.precondition_uid {
            if object::meta_str(&current, "uid") != Some(uid.as_str()) {
                return Err(ApiError::conflict(
                    resource.group,
                    resource.plural,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        object::meta_str(&current, "uid").unwrap_or("")
                    ),
                ));
            }
        }
        if let Some(rv) = &options.precondition_resource_version {
            if *rv != revision.to_string() {
                return Err(ApiError::conflict(
                    resource.group,
                    resource.plural,
                    name,
                    &format!("Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {revision}"),
                ));
            }
        }
        let mut attrs = crate::admission::Attributes {
            operation: crate::admission::Operation::Delete,
            resource,
            subresource: None,
            namespace: target.namespace.map(str::to_string),
            name: name.to_string(),
            object: None,
            old_object: Some(current.clone()),
            dry_run: options.dry_run,
            user: crate::user::current(),
        };
        self.admission.mutate(self, &mut attrs).await?;
        self.admission.validate(self, &attrs).await?;
        if namespace::is_namespace(resource) {
            return self
                .delete_namespace(target, name, current, revision, options)
                .await;
        }
        let grace = self.grace_period(resource, &current, options);
        let held_by = options.propagation.and_then(Propagation::finalizer);
        let must_wait = !object::finalizers(&current).is_empty() || grace > 0 || held_by.is_some();
        if must_wait {
            let mut marked = current.clone();
            if let Some(finalizer) = held_by {
                // The garbage collector finishes the delete; the policy
                // asked now replaces one asked before.
                let mut finalizers = object::finalizers(&current);
                finalizers.retain(|f| f != FOREGROUND_FINALIZER && f != ORPHAN_FINALIZER);
                finalizers.push(finalizer.to_string());
                metadata_mut(&mut marked).insert("finalizers".into(), json!(finalizers));
            }
            if !object::is_deleting(&current) {
                let meta = metadata_mut(&mut marked);
                meta.insert("deletionTimestamp".into(), json!(object::now_plus(grace)));
                meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
            }
            return self
                .store_marked(target, name, &current, marked, revision, options.dry_run)
                .await;
        }
        self.remove(target, name, current, revision, options.dry_run)
            .await
    }

    /// DELETE of a namespace (its own REST storage in kube-apiserver): the
    /// first request marks it Terminating, so that nothing new is created
    /// in it (NamespaceLifecycle) while the namespace controller empties
    /// it; it goes once no finalizer is left, in spec or metadata.
    async fn delete_namespace(
        &self,
        target: &Target<'_>,
        name: &str,
        current: Value,
        revision: i64,
        options: &DeleteOptions,
    ) -> ApiResult<Value> {
        let mut marked = current.clone();
        if !object::is_deleting(&current) {
            if let Some(finalizer) = options.propagation.and_then(Propagation::finalizer) {
                let mut finalizers = object::finalizers(&current);
                finalizers.retain(|f| f != FOREGROUND_FINALIZER && f != ORPHAN_FINALIZER);
                finalizers.push(finalizer.to_string());
                metadata_mut(&mut marked).insert("finalizers".into(), json!(finalizers));
            }
        }
        namespace::mark_terminating(&mut marked);
        if namespace::may_be_removed(&marked) {
            return self
                .remove(target, name, marked, revision, options.dry_run)
                .await;
        }
        self.store_marked(target, name, &current, marked, revision, options.dry_run)
            .await
    }

    /// Writes `marked` (deletion under way) over `current`, unless it is
    /// already so.
    async fn store_marked(
        &self,
        target: &Target<'_>,
        name: &str,
        current: &Value,
        mut marked: Value,
        revision: i64,
        dry_run: bool,
    ) -> ApiResult<Value> {
        if marked == *current || dry_run {
            // Already marked as asked.
            return Ok(marked);
        }
        let key = target.resource.key(target.namespace, name);
        let written = self
            .put_leased(
                target.resource,
                object::to_stored(&marked),
                |value, lease| self.storage.update(&key, value, revision, lease),
            )
            .await
            .map_err(|err| storage_error(target, name, err))?;
        self.admission.written(target.resource, written);
        metadata_mut(&mut marked).insert("resourceVersion".into(), json!(written.to_string()));
        Ok(marked)
    }

    /// Removes the object from the store, if it is still at `revision`.
    async fn remove(
        &self,
        target: &Target<'_>,
        name: &str,
        current: Value,
        revision: i64,
        dry_run: bool,
    ) -> ApiResult<Value> {
        if dry_run {
            return Ok(current);
        }
        let resource = target.resource;
        let key = resource.key(target.namespace, name);
        let deleted = self
            .storage
            .delete(&key, revision)
            .await
            .map_err(|err| storage_error(target, name, err))?;
        self.admission.written(resource, deleted);
        self.admission.removed(self, resource, &current).await;
        if is_service(resource) {
            let held = crate::service_alloc::held(&current);
            crate::service_alloc::release(self, &current, &held).await;
        }
        if is_crd(resource) {
            self.remove_custom_resource(&current).await;
        }
        let mut gone = current;
        metadata_mut(&mut gone).insert("resourceVersion".into(), json!(deleted.to_string()));
        Ok(gone)
    }

    /// Seconds a delete waits: for a pod bound to a node, its grace period
    /// (the kubelet stops it and deletes it with 0); otherwise none.
    fn grace_period(
        &self,
        resource: &ResourceType,
        current: &Value,
        options: &DeleteOptions,
    ) -> i64 {
        if resource.kind != "Pod" || !resource.group.is_empty() {
            return 0;
        }
        let bound = current["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| !n.is_empty());
        let running = !matches!(
            current["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        );
        if !bound || !running {
            return 0;
        }
        let grace = options
            .grace_period_seconds
            .or_else(|| current["spec"]["terminationGracePeriodSeconds"].as_i64())
            .unwrap_or(30);
        // As Kubernetes: a negative period (asked, or the pod's own) is
        // treated as 1 second, not as an immediate delete.
        match grace {
            ..0 => 1,
            seconds => seconds,
        }
    }

    /// Starts the watch cache of every built-in resource (custom ones start
    /// on first use). On the in-process store each starts from the oldest
    /// revision the store still has and replays what followed into its
    /// ring, so that a client resuming a watch across an apiserver restart
    /// misses nothing the store kept. Over etcd each starts at the newest
    /// revision, as kube-apiserver's do: etcd 3.4 answers a progress
    /// request for a watch still replaying history with its newest
    /// revision, which would make the cache claim changes it has not seen.
    pub fn start_watch_caches(&self) {
        let start_at = match self.storage.local_store() {
            Some(_) => 1,
            None => 0,
        };
        for resource in crate::resources::all() {
            self.cache.resource(resource, start_at);
        }
    }

    /// DELETE of a collection: every matching object, as [`Self::delete`].
    pub async fn delete_collection(
        &self,
        target: &Target<'_>,
        list: &ListOptions,
        options: &DeleteOptions,
    ) -> ApiResult<Value> {
        let listed = self.list(target, list).await?;
        let mut deleted = Vec::new();
        for item in listed["items"].as_array().cloned().unwrap_or_default() {
            let name = object::name(&item).to_string();
            let namespace = object::meta_str(&item, "namespace").map(str::to_string);
            let one = Target {
                resource: target.resource,
                namespace: namespace.as_deref().or(target.namespace),
            };
            match self.delete(&one, &name, options).await {
                Ok(object) => deleted.push(object),
                Err(err) if err.code == 404 => {}
                Err(err) => return Err(err),
            }
        }
        Ok(json!({
            "kind": target.resource.list_kind,
            "apiVersion": target.resource.api_version(),
            "metadata": {"resourceVersion": listed["metadata"]["resourceVersion"]},
            "items": deleted,
        }))
    }
}

/// An object written to a name's URL has that name: given it when it has
/// none, refused (400) when it has another.
fn name_from_url(object: &mut Value, name: &str) -> ApiResult<()> {
    match object::meta_str(object, "name") {
        None | Some("") => {
            metadata_mut(object).insert("name".into(), json!(name));
            Ok(())
        }
        Some(n) if n == name => Ok(()),
        Some(n) => Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        ))),
    }
}

/// A list's metadata: its resourceVersion and, when more follows, where.
/// The managedFields writer of a write.
fn manager_of<'a>(
    write: &Write<'a>,
    api_version: &'a str,
    subresource: Option<&'a str>,
) -> crate::apply::Manager<'a> {
    crate::apply::Manager {
        name: write.manager,
        api_version,
        subresource: write.via.or(subresource),
    }
}

/// A resourceVersion in a patch is a precondition on the object.
fn check_precondition(
    target: &Target<'_>,
    name: &str,
    patched: &Value,
    revision: i64,
) -> ApiResult<()> {
    match object::meta_str(patched, "resourceVersion") {
        Some(rv) if !rv.is_empty() && rv != revision.to_string() => {
            Err(storage_error(target, name, StorageError::Conflict))
        }
        _ => Ok(()),
    }
}

/// A patched object is still the object of the URL: a patch that takes
/// or changes its name or namespace is refused (400), as Kubernetes'
/// patch handler checks the result.
fn check_identity(target: &Target<'_>, name: &str, patched: &Value) -> ApiResult<()> {
    if !patched.is_object() {
        return Err(ApiError::bad_request(
            "the patched object is not a JSON object",
        ));
    }
    let patched_name = object::meta_str(patched, "name").unwrap_or("");
    if patched_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({patched_name}) does not match the name on the URL ({name})"
        )));
    }
    let patched_namespace = object::meta_str(patched, "namespace").unwrap_or("");
    match target.namespace {
        Some(namespace) if !patched_namespace.is_empty() && patched_namespace != namespace => {
            Err(ApiError::bad_request(format!(
                "the namespace of the object ({patched_namespace}) does not match the namespace on the request ({namespace})"
            )))
        }
        _ => Ok(()),
    }
}

/// A uid in the object written is a precondition: a write meant for an
/// object of the same name that was deleted and created again fails
/// (409) rather than landing on the new one.
fn check_uid(target: &Target<'_>, name: &str, next: &Value, current: &Value) -> ApiResult<()> {
    let current_uid = object::meta_str(current, "uid").unwrap_or("");
    match object::meta_str(next, "uid") {
        Some(uid) if !uid.is_empty() && uid != current_uid => Err(ApiError::conflict(
            target.resource.group,
            target.resource.plural,
            name,
            &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {current_uid}"),
        )),
        _ => Ok(()),
    }
}

/// Whether a 409 is the store's "modified meanwhile" (worth trying
/// again), not a precondition or apply conflict the client must see.
fn is_write_race(err: &ApiError) -> bool {
    err.code == 409 && err.reason == "Conflict" && err.message.ends_with(CONFLICT_WHY)
}

/// How long [`Registry::guaranteed_update`] keeps trying a write that
/// keeps losing races before it answers 409. Kubernetes retries for as
/// long as the request lives; a busy controller writing the same object
/// must not make a `scale` or a status write without a resourceVersion
/// fail after a fixed number of lost races.
const UPDATE_RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(10);

const CONFLICT_WHY: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

/// Whether `resource` is core v1 Services, whose addresses are allocated.
fn is_service(resource: &ResourceType) -> bool {
    resource.group.is_empty() && resource.plural == "services"
}

fn is_crd(resource: &ResourceType) -> bool {
    resource.custom.is_none()
        && (resource.group, resource.plural) == (crate::crd::CRDS.0, crate::crd::CRDS.2)
}

/// What a new object's status starts as, where Kubernetes sets one.
fn default_status(resource: &ResourceType, object: &mut Value) {
    let phase = match (resource.group, resource.kind) {
        ("", "Namespace") => "Active",
        ("", "Pod") => "Pending",
        _ => return,
    };
    // A status that is not an object is left as sent: decoding refuses
    // it (400), as Kubernetes does.
    let Some(object) = object.as_object_mut() else {
        return;
    };
    match object.get_mut("status") {
        None | Some(Value::Null) => {
            object.insert("status".into(), json!({ "phase": phase }));
        }
        Some(Value::Object(status)) if status.get("phase").is_none_or(Value::is_null) => {
            status.insert("phase".into(), json!(phase));
        }
        Some(_) => {}
    }
}

/// A registry over a new store in a temporary directory (kept alive by
/// the second half), with the default namespaces.
#[cfg(test)]
pub(crate) async fn test_registry() -> (Registry, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = skiff_store::Store::open(skiff_store::StoreConfig::new(dir.path()))
        .await
        .unwrap();
    let registry = Registry::new(crate::Storage::local(store));
    registry.ensure_default_namespaces().await.unwrap();
    (registry, dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn target(plural: &str) -> Target<'static> {
        Target {
            resource: crate::resources::find("", "v1", plural).unwrap(),
            namespace: Some("default"),
        }
    }

    /// Reads `name` until it is gone; whether it went within `within`.
    async fn gone_within(registry: &Registry, plural: &str, name: &str, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        while tokio::time::Instant::now() < deadline {
            match registry.get(&target(plural), name).await {
                Err(err) if err.code == 404 => return true,
                Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                Err(err) => panic!("reading {plural}/{name}: {err:?}"),
            }
        }
        false
    }

    /// Stores `key: value` in ConfigMap `name`'s data from another writer,
    /// in the middle of a synchronous closure (the runtime is
    /// multi-threaded).
    fn write_meanwhile(registry: &Registry, name: &str, key: &str, value: &str) {
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(async {
                let mut other = registry.get(&target("configmaps"), name).await.unwrap();
                other["data"][key] = json!(value);
                let write = Write::new("other", false);
                registry
                    .update_object(&target("configmaps"), name, other, None, None, &write, true)
                    .await
                    .unwrap();
            })
        });
    }

    async fn config_map(registry: &Registry, name: &str) {
        let map = json!({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": name, "namespace": "default"},
                         "data": {"start": "yes"}});
        let write = Write::new("test", false);
        registry
            .create(&target("configmaps"), map, &write)
            .await
            .unwrap();
    }

    /// schemathesis' response_schema_conformance: a PUT to a Service's
    /// /status with a body of `{}` stored and answered `"status": null`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_status_update_without_a_status_stores_an_empty_one_not_null() {
        let (registry, _dir) = test_registry().await;
        let service = json!({"apiVersion": "v1", "kind": "Service",
                             "metadata": {"name": "web", "namespace": "default"},
                             "spec": {"ports": [{"port": 80}]}});
        let write = Write::new("test", false);
        registry
            .create(&target("services"), service, &write)
            .await
            .unwrap();
        for body in [json!({}), json!({"status": null})] {
            let updated = registry
                .update(&target("services"), "web", body, Some("status"), &write)
                .await
                .unwrap();
            assert_eq!(updated["status"], json!({}));
            let read = registry.get(&target("services"), "web").await.unwrap();
            assert_eq!(read["status"], json!({}));
        }
    }

    /// schemathesis' response_schema_conformance: a JSON null sent for a
    /// field was stored and answered (`"spec": null` in a PUT of a Lease,
    /// a `selfLink` cleared to null, `"data": null`, `"labels": null`),
    /// where Kubernetes decodes null as absent and omits the field.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn json_nulls_sent_in_a_write_are_not_stored_or_answered() {
        let (registry, _dir) = test_registry().await;
        let write = Write::new("test", false);
        let map = json!({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "nulls", "namespace": "default",
                                      "labels": null, "selfLink": null,
                                      "annotations": {"a": "1", "b": null}},
                         "data": null, "binaryData": null});
        let created = registry
            .create(&target("configmaps"), map, &write)
            .await
            .unwrap();
        let read = registry.get(&target("configmaps"), "nulls").await.unwrap();
        for object in [&created, &read] {
            assert!(object.get("data").is_none(), "{object}");
            assert!(object.get("binaryData").is_none(), "{object}");
            assert!(object["metadata"].get("labels").is_none(), "{object}");
            assert!(object["metadata"].get("selfLink").is_none(), "{object}");
            assert_eq!(object["metadata"]["annotations"], json!({"a": "1"}));
        }

        let leases = Target {
            resource: crate::resources::find("coordination.k8s.io", "v1", "leases").unwrap(),
            namespace: Some("default"),
        };
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                           "metadata": {"name": "held", "namespace": "default"},
                           "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}});
        registry.create(&leases, lease, &write).await.unwrap();
        let cleared = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                             "metadata": {"name": "held", "namespace": "default"},
                             "spec": null});
        let updated = registry
            .update(&leases, "held", cleared, None, &write)
            .await
            .unwrap();
        let read = registry.get(&leases, "held").await.unwrap();
        for object in [&updated, &read] {
            assert!(object.get("spec").is_none(), "{object}");
        }
    }

    /// The Job controller's removal of its finalizer from a pod was
    /// refused as a change of the pod's spec: admission had stored
    /// `"initContainers": null` (indexing a missing list), which the update
    /// then dropped. Nothing admission adds is stored as null, and an
    /// object stored with nulls before is compared without them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pod_updated_after_admission_keeps_its_spec_without_nulls() {
        let (registry, _dir) = test_registry().await;
        let write = Write::new("test", false);
        // The account, so that the ServiceAccount admission mounts its token.
        let account = json!({"apiVersion": "v1", "kind": "ServiceAccount",
                             "metadata": {"name": "default", "namespace": "default"}});
        registry
            .create(&target("serviceaccounts"), account, &write)
            .await
            .unwrap();
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": "p", "namespace": "default",
                                      "finalizers": ["example.com/keep"]},
                         "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
        let created = registry.create(&target("pods"), pod, &write).await.unwrap();
        fn has_null(value: &Value) -> bool {
            match value {
                Value::Null => true,
                Value::Object(map) => map.values().any(has_null),
                Value::Array(items) => items.iter().any(has_null),
                _ => false,
            }
        }
        assert!(!has_null(&created), "{created}");
        assert!(created["spec"]["volumes"][0]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("kube-api-access-")));
        let mut next = created.clone();
        next["metadata"]["finalizers"] = json!([]);
        next["spec"]["initContainers"] = Value::Null;
        let updated = registry
            .update(&target("pods"), "p", next, None, &write)
            .await
            .unwrap();
        assert_eq!(updated["metadata"]["finalizers"], json!([]));
        assert!(!has_null(&updated), "{updated}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_update_that_lost_a_race_is_made_again_on_the_new_object() {
        let (registry, _dir) = test_registry().await;
        config_map(&registry, "raced").await;
        let write = Write::new("test", false);
        let mut attempts = 0;
        let updated = registry
            .guaranteed_update(
                &target("configmaps"),
                "raced",
                None,
                None,
                &write,
                true,
                |current, _| {
                    attempts += 1;
                    if attempts == 1 {
                        write_meanwhile(&registry, "raced", "theirs", "1");
                    }
                    let mut next = current.clone();
                    next["data"]["mine"] = json!("2");
                    Ok(next)
                },
            )
            .await
            .expect("no conflict without a resourceVersion of the client's");
        assert_eq!(attempts, 2, "the first write conflicted and was made again");
        assert_eq!(
            updated["data"],
            json!({"start": "yes", "theirs": "1", "mine": "2"})
        );
        let stored = registry.get(&target("configmaps"), "raced").await.unwrap();
        assert_eq!(stored["data"], updated["data"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_clients_resource_version_is_a_precondition_and_not_retried() {
        let (registry, _dir) = test_registry().await;
        config_map(&registry, "held").await;
        let write = Write::new("test", false);
        let mut attempts = 0;
        let mut asked: Option<Value> = None;
        let err = registry
            .guaranteed_update(
                &target("configmaps"),
                "held",
                None,
                None,
                &write,
                true,
                |current, _| {
                    attempts += 1;
                    // The client read the object once and sends its version.
                    let asked =
                        asked.get_or_insert_with(|| current["metadata"]["resourceVersion"].clone());
                    if attempts == 1 {
                        write_meanwhile(&registry, "held", "theirs", "1");
                    }
                    let mut next = current.clone();
                    next["metadata"]["resourceVersion"] = asked.clone();
                    next["data"]["mine"] = json!("2");
                    Ok(next)
                },
            )
            .await
            .expect_err("the object changed since the client read it");
        assert_eq!((err.code, err.reason), (409, "Conflict"));
        assert_eq!(attempts, 2, "read again once, then the precondition failed");
        let stored = registry.get(&target("configmaps"), "held").await.unwrap();
        assert_eq!(stored["data"], json!({"start": "yes", "theirs": "1"}));
    }

    #[tokio::test]
    async fn events_expire_after_the_event_ttl_and_an_update_starts_it_again() {
        let (registry, _dir) = test_registry().await;
        let registry = registry.with_event_ttl(Duration::from_secs(1));
        let write = Write::new("test", false);
        let event = |name: &str| {
            json!({"apiVersion": "v1", "kind": "Event",
                   "metadata": {"name": name, "namespace": "default"},
                   "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
                   "reason": "Tested", "message": "first", "type": "Normal"})
        };
        let started = tokio::time::Instant::now();
        registry
            .create(&target("events"), event("old"), &write)
            .await
            .unwrap();
        let kept = json!({"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "kept", "namespace": "default"}});
        registry
            .create(&target("configmaps"), kept, &write)
            .await
            .unwrap();
        // An update after a second attaches the event to a newer lease.
        registry
            .create(&target("events"), event("updated"), &write)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let mut updated = registry.get(&target("events"), "updated").await.unwrap();
        updated["message"] = json!("second");
        let updated_at = tokio::time::Instant::now();
        registry
            .update(&target("events"), "updated", updated, None, &write)
            .await
            .unwrap();
        assert!(gone_within(&registry, "events", "old", Duration::from_secs(10)).await);
        let old_lived = started.elapsed();
        // The store's shortest lease is 2 s: the TTL of 1 s plus the reuse
        // window, rounded up, is raised to it.
        assert!(
            old_lived >= Duration::from_secs(1),
            "gone after {old_lived:?}"
        );
        assert!(gone_within(&registry, "events", "updated", Duration::from_secs(10)).await);
        assert!(updated_at.elapsed() >= Duration::from_secs(1));
        registry
            .get(&target("configmaps"), "kept")
            .await
            .expect("a ConfigMap does not expire");
    }

    #[tokio::test]
    async fn without_an_event_ttl_events_stay() {
        let (registry, _dir) = test_registry().await;
        let event = json!({"apiVersion": "v1", "kind": "Event",
                           "metadata": {"name": "stays", "namespace": "default"},
                           "involvedObject": {"kind": "Pod", "name": "p"}});
        registry
            .create(&target("events"), event, &Write::new("test", false))
            .await
            .unwrap();
        assert!(!gone_within(&registry, "events", "stays", Duration::from_secs(3)).await);
        assert_eq!(registry.storage.requests().total("lease"), 0);
    }
}
