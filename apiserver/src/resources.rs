//! The resource table: every built-in resource the API serves, as one entry
//! each. Names, groups, versions, kinds and scope come from `k8s-openapi`'s
//! types; a resource is a row here, not a handler of its own.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, RwLock};

use k8s_openapi::{ListableResource, NamespaceResourceScope, Resource};
use serde::de::DeserializeOwned;

use crate::conversion::ServedVersion;

/// One resource the API serves.
#[derive(Debug)]
pub struct ResourceType {
    /// `""` for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub list_kind: &'static str,
    /// The URL path segment, e.g. `pods`.
    pub plural: &'static str,
    /// The lower-case kind, e.g. `pod`.
    pub singular: String,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    /// e.g. `all` for what `kubectl get all` lists.
    pub categories: &'static [&'static str],
    /// Subresources served, e.g. `status`.
    pub subresources: &'static [&'static str],
    /// Decodes a JSON object as the k8s-openapi type, so that wrong types
    /// and missing required fields are found. `Err` holds serde's message.
    pub decode: fn(&serde_json::Value) -> Result<(), serde_json::Error>,
    /// Decodes as the k8s-openapi type and serializes the result back: the
    /// fields the type knows, which strict field validation compares with
    /// what was sent. `Err` names the path of the field that failed.
    pub roundtrip: fn(&serde_json::Value) -> Result<serde_json::Value, RoundtripError>,
    /// The OpenAPI (JSON Schema) of the type, from k8s-openapi's schemars
    /// implementation.
    pub schema: fn(&mut schemars::SchemaGenerator) -> schemars::Schema,
    /// The schema name k8s-openapi gives the type (the last path segment of
    /// its Rust path, e.g. `io.k8s.api.core.v1.Pod`).
    pub definition: &'static str,
    /// `Some` for a version served beside the storage version and
    /// converted to and from it; `None` for the storage version itself.
    pub conversion: Option<Conversion>,
    /// `Some` for a version of a custom resource (a CRD's): its schema,
    /// printer columns and subresources. `decode`, `roundtrip` and
    /// `schema` of such a row know nothing; validation, pruning, Tables
    /// and OpenAPI read this instead.
    pub custom: Option<Arc<crate::crd::CustomVersion>>,
}

/// How a served version that is not the storage version maps to it. The
/// registry sees only the storage version: the server converts request
/// bodies to it and replies (and watch events) from it.
#[derive(Debug, Clone, Copy)]
pub struct Conversion {
    pub storage_version: &'static str,
    /// Fills in this version's defaults (of a whole object, before
    /// `to_storage`).
    pub set_defaults: fn(&mut serde_json::Value),
    pub to_storage: fn(&serde_json::Value) -> serde_json::Value,
    pub from_storage: fn(&serde_json::Value) -> serde_json::Value,
    /// The text of the `Warning` header on every request at this version.
    pub deprecation: Option<&'static str>,
}

impl ResourceType {
    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `core` for the core group, else the group.
    pub fn storage_group(&self) -> &'static str {
        if self.group.is_empty() {
            "core"
        } else {
            self.group
        }
    }

    /// The store prefix of every object of this resource:
    /// `/registry/{group}/{plural}/`.
    pub fn storage_prefix(&self) -> String {
        format!("/registry/{}/{}/", self.storage_group(), self.plural)
    }

    /// The store prefix of this resource's objects in `namespace`.
    pub fn namespace_prefix(&self, namespace: &str) -> String {
        format!("{}{namespace}/", self.storage_prefix())
    }

    /// The store key of one object (`namespace` ignored when cluster-scoped).
    pub fn key(&self, namespace: Option<&str>, name: &str) -> String {
        match (self.namespaced, namespace) {
            (true, Some(namespace)) => format!("{}{namespace}/{name}", self.storage_prefix()),
            _ => format!("{}{name}", self.storage_prefix()),
        }
    }

    /// The URL path of the collection, e.g. `/api/v1/namespaces/ns/pods`.
    pub fn collection_path(&self, namespace: Option<&str>) -> String {
        let root = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        match (self.namespaced, namespace) {
            (true, Some(namespace)) => format!("{root}/namespaces/{namespace}/{}", self.plural),
            _ => format!("{root}/{}", self.plural),
        }
    }

    pub fn has_subresource(&self, name: &str) -> bool {
        self.subresources.contains(&name)
    }

    /// The row of the version objects of this resource are stored at
    /// (itself, unless it is a converted version).
    pub fn storage(&'static self) -> &'static ResourceType {
        if let Some(custom) = &self.custom {
            if custom.storage_version == self.version {
                return self;
            }
            // The CRD may have just changed; then this version is its own.
            return custom_rows()
                .into_iter()
                .find(|r| {
                    r.group == self.group
                        && r.plural == self.plural
                        && r.version == custom.storage_version
                })
                .unwrap_or(self);
        }
        match &self.conversion {
            None => self,
            Some(conversion) => all()
                .iter()
                .find(|r| {
                    r.group == self.group
                        && r.version == conversion.storage_version
                        && r.plural == self.plural
                })
                .expect("a converted version's storage version is in the table"),
        }
    }
}

fn decode_as<T: DeserializeOwned>(value: &serde_json::Value) -> Result<(), serde_json::Error> {
    T::deserialize(value).map(|_: T| ())
}

/// A decode failure with the path of the field it happened at.
pub type RoundtripError = serde_path_to_error::Error<serde_json::Error>;

fn roundtrip_as<T: DeserializeOwned + serde::Serialize>(
    value: &serde_json::Value,
) -> Result<serde_json::Value, RoundtripError> {
    let typed: T = serde_path_to_error::deserialize(value)?;
    serde_path_to_error::serialize(&typed, serde_json::value::Serializer)
}

fn schema_of<T: schemars::JsonSchema>(
    generator: &mut schemars::SchemaGenerator,
) -> schemars::Schema {
    generator.subschema_for::<T>()
}

trait Scope {
    const NAMESPACED: bool;
}
impl Scope for NamespaceResourceScope {
    const NAMESPACED: bool = true;
}
impl Scope for k8s_openapi::ClusterResourceScope {
    const NAMESPACED: bool = false;
}

fn entry<T>(
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    subresources: &'static [&'static str],
    definition: &'static str,
) -> ResourceType
where
    T: Resource + ListableResource + DeserializeOwned + serde::Serialize + schemars::JsonSchema,
    T::Scope: Scope,
{
    ResourceType {
        group: T::GROUP,
        version: T::VERSION,
        kind: T::KIND,
        list_kind: T::LIST_KIND,
        plural: T::URL_PATH_SEGMENT,
        singular: T::KIND.to_ascii_lowercase(),
        namespaced: <T::Scope as Scope>::NAMESPACED,
        short_names,
        categories,
        subresources,
        decode: decode_as::<T>,
        roundtrip: roundtrip_as::<T>,
        schema: schema_of::<T>,
        definition,
        conversion: None,
        custom: None,
    }
}

fn decode_converted<C>(value: &serde_json::Value) -> Result<(), serde_json::Error>
where
    C: ServedVersion,
    C::Storage: DeserializeOwned,
{
    decode_as::<C::Storage>(&C::to_storage(value))
}

/// Known fields of the served version: the object converted, taken
/// through the storage type, and converted back. Field paths are the
/// served version's wherever the two name a field alike.
fn roundtrip_converted<C>(value: &serde_json::Value) -> Result<serde_json::Value, RoundtripError>
where
    C: ServedVersion,
    C::Storage: DeserializeOwned + serde::Serialize,
{
    let known = roundtrip_as::<C::Storage>(&C::to_storage(value))?;
    Ok(C::from_storage(&known))
}

fn schema_converted<C>(generator: &mut schemars::SchemaGenerator) -> schemars::Schema
where
    C: ServedVersion,
    C::Storage: schemars::JsonSchema,
{
    let storage = generator.subschema_for::<C::Storage>();
    C::add_definitions(generator);
    let reference = storage
        .get("$ref")
        .and_then(serde_json::Value::as_str)
        .and_then(|r| r.rsplit_once('/'))
        .map(|(path, _)| format!("{path}/{}", C::DEFINITION))
        .unwrap_or_else(|| format!("#/components/schemas/{}", C::DEFINITION));
    schemars::Schema::new_ref(reference)
}

/// The row of a version served beside `C::Storage`'s and converted to it.
fn converted<C>(
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    subresources: &'static [&'static str],
) -> ResourceType
where
    C: ServedVersion,
    C::Storage:
        Resource + ListableResource + DeserializeOwned + serde::Serialize + schemars::JsonSchema,
    <C::Storage as Resource>::Scope: Scope,
{
    type S<C> = <C as ServedVersion>::Storage;
    ResourceType {
        group: S::<C>::GROUP,
        version: C::VERSION,
        kind: S::<C>::KIND,
        list_kind: S::<C>::LIST_KIND,
        plural: S::<C>::URL_PATH_SEGMENT,
        singular: S::<C>::KIND.to_ascii_lowercase(),
        namespaced: <<S<C> as Resource>::Scope as Scope>::NAMESPACED,
        short_names,
        categories,
        subresources,
        decode: decode_converted::<C>,
        roundtrip: roundtrip_converted::<C>,
        schema: schema_converted::<C>,
        definition: C::DEFINITION,
        conversion: Some(Conversion {
            storage_version: S::<C>::VERSION,
            set_defaults: C::set_defaults,
            to_storage: C::to_storage,
            from_storage: C::from_storage,
            deprecation: C::DEPRECATION,
        }),
        custom: None,
    }
}

static TABLE: LazyLock<Vec<ResourceType>> = LazyLock::new(|| {
    use k8s_openapi::api::{apps, batch, coordination, core, policy, scheduling};
    const ALL: &[&str] = &["all"];
    const STATUS: &[&str] = &["status"];
    const NONE: &[&str] = &[];
    vec![
        entry::<core::v1::Namespace>(
            &["ns"],
            NONE,
            &["status", "finalize"], "io.k8s.api.core.v1.Namespace"),
        entry::<core::v1::Pod>(
            &["po"],
            ALL,
            &["status", "binding", "eviction", "log"],
            "io.k8s.api.core.v1.Pod",
        ),
        entry::<core::v1::Node>(&["no"], NONE, &["status", "proxy"], "io.k8s.api.core.v1.Node"),
        entry::<core::v1::Service>(&["svc"], ALL, STATUS, "io.k8s.api.core.v1.Service"),
        entry::<core::v1::Endpoints>(&["ep"], NONE, NONE, "io.k8s.api.core.v1.Endpoints"),
        entry::<k8s_openapi::api::discovery::v1::EndpointSlice>(
            NONE,
            NONE,
            NONE,
            "io.k8s.api.discovery.v1.EndpointSlice",
        ),
        entry::<k8s_openapi::api::storage::v1::StorageClass>(
            &["sc"],
            NONE,
            NONE,
            "io.k8s.api.storage.v1.StorageClass",
        ),
        entry::<core::v1::ConfigMap>(&["cm"], NONE, NONE, "io.k8s.api.core.v1.ConfigMap"),
        entry::<core::v1::Secret>(NONE, NONE, NONE, "io.k8s.api.core.v1.Secret"),
        entry::<core::v1::Event>(&["ev"], NONE, NONE, "io.k8s.api.core.v1.Event"),
        entry::<core::v1::ServiceAccount>(
            &["sa"],
            NONE,
            &["token"],
            "io.k8s.api.core.v1.ServiceAccount",
        ),
        entry::<core::v1::PersistentVolume>(
            &["pv"],
            NONE,
            STATUS,
            "io.k8s.api.core.v1.PersistentVolume",
        ),
        entry::<core::v1::PersistentVolumeClaim>(
            &["pvc"],
            NONE,
            STATUS,
            "io.k8s.api.core.v1.PersistentVolumeClaim",
        ),
        entry::<core::v1::ResourceQuota>(
            &["quota"],
            NONE,
            STATUS,
            "io.k8s.api.core.v1.ResourceQuota",
        ),
        entry::<core::v1::LimitRange>(&["limits"], NONE, NONE, "io.k8s.api.core.v1.LimitRange"),
        entry::<apps::v1::Deployment>(
            &["deploy"],
            ALL,
            &["status", "scale"],
            "io.k8s.api.apps.v1.Deployment",
        ),
        entry::<apps::v1::ReplicaSet>(
            &["rs"],
            ALL,
            &["status", "scale"],
            "io.k8s.api.apps.v1.ReplicaSet",
        ),
        entry::<apps::v1::DaemonSet>(&["ds"], ALL, STATUS, "io.k8s.api.apps.v1.DaemonSet"),
        entry::<apps::v1::StatefulSet>(
            &["sts"],
            ALL,
            &["status", "scale"],
            "io.k8s.api.apps.v1.StatefulSet",
        ),
        entry::<apps::v1::ControllerRevision>(
            NONE,
            NONE,
            NONE,
            "io.k8s.api.apps.v1.ControllerRevision",
        ),
        entry::<batch::v1::Job>(NONE, ALL, STATUS, "io.k8s.api.batch.v1.Job"),
        entry::<batch::v1::CronJob>(&["cj"], ALL, STATUS, "io.k8s.api.batch.v1.CronJob"),
        entry::<scheduling::v1::PriorityClass>(
            &["pc"],
            NONE,
            NONE,
            "io.k8s.api.scheduling.v1.PriorityClass",
        ),
        entry::<coordination::v1::Lease>(NONE, NONE, NONE, "io.k8s.api.coordination.v1.Lease"),
        entry::<policy::v1::PodDisruptionBudget>(
            &["pdb"],
            NONE,
            STATUS,
            "io.k8s.api.policy.v1.PodDisruptionBudget",
        ),
        entry::<k8s_openapi::api::rbac::v1::Role>(NONE, NONE, NONE, "io.k8s.api.rbac.v1.Role"),
        entry::<k8s_openapi::api::rbac::v1::ClusterRole>(
            NONE,
            NONE,
            NONE,
            "io.k8s.api.rbac.v1.ClusterRole",
        ),
        entry::<k8s_openapi::api::rbac::v1::RoleBinding>(
            NONE,
            NONE,
            NONE,
            "io.k8s.api.rbac.v1.RoleBinding",
        ),
        entry::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>(
            NONE,
            NONE,
            NONE,
            "io.k8s.api.rbac.v1.ClusterRoleBinding",
        ),
        entry::<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration>(
            NONE,
            NONE,
            NONE,
            "io.k8s.api.admissionregistration.v1.MutatingWebhookConfiguration",
        ),
        entry::<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration>(
            NONE,
            NONE,
            NONE,
            "io.k8s.api.admissionregistration.v1.ValidatingWebhookConfiguration",
        ),
        entry::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(
            &["crd", "crds"],
            &["api-extensions"],
            STATUS,
            "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
        ),
    ]
});

/// The versions served beside a storage version, converted to it; their
/// objects live under the storage version's keys.
static CONVERTED: LazyLock<Vec<ResourceType>> = LazyLock::new(|| {
    use crate::conversion::{cron_job::CronJobV1beta1, priority_class::PriorityClassV1beta1};
    const ALL: &[&str] = &["all"];
    const STATUS: &[&str] = &["status"];
    const NONE: &[&str] = &[];
    vec![
        converted::<CronJobV1beta1>(&["cj"], ALL, STATUS),
        converted::<PriorityClassV1beta1>(&["pc"], NONE, NONE),
    ]
});

/// Every resource stored, at its storage version, core group first: one
/// row per kind of object in the store.
pub fn all() -> &'static [ResourceType] {
    &TABLE
}

/// The rows of custom resources, one per served version of each CRD.
///
/// Rows are leaked (`Box::leak`) so that they are `&'static` like the
/// built-in ones and requests holding one stay valid: every write of a CRD
/// leaks its new rows (and their strings). This is a bounded leak, a few
/// hundred bytes per CRD change, which CRDs (rarely written) can afford.
static CUSTOM: RwLock<Vec<&'static ResourceType>> = RwLock::new(Vec::new());

fn custom_rows() -> Vec<&'static ResourceType> {
    CUSTOM.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Serves `rows` for the CRD `crd` in place of what it served before.
pub fn register_custom(crd: &str, rows: Vec<ResourceType>) {
    let mut table = CUSTOM.write().unwrap_or_else(|e| e.into_inner());
    table.retain(|r| r.custom.as_ref().is_none_or(|c| c.crd != crd));
    for row in rows {
        table.push(Box::leak(Box::new(row)));
    }
}

/// Stops serving the versions of the CRD `crd`.
pub fn unregister_custom(crd: &str) {
    register_custom(crd, Vec::new());
}

/// The storage-version rows of the custom resources served.
pub fn custom_storage_rows() -> Vec<&'static ResourceType> {
    custom_rows()
        .into_iter()
        .filter(|r| {
            r.custom
                .as_ref()
                .is_some_and(|c| c.storage_version == r.version)
        })
        .collect()
}

/// Every resource at every version served: the storage versions, then the
/// converted ones, then the custom resources' versions.
pub fn served() -> impl Iterator<Item = &'static ResourceType> {
    TABLE.iter().chain(CONVERTED.iter()).chain(custom_rows())
}

/// The built-in resources by plural (a few share one, in other groups or
/// versions), in the order [`find`] prefers them: every request finds its
/// resource, and a scan of the table compared strings for each row.
static BY_PLURAL: LazyLock<HashMap<&'static str, Vec<&'static ResourceType>>> =
    LazyLock::new(|| {
        let mut by_plural: HashMap<&'static str, Vec<&'static ResourceType>> = HashMap::new();
        for r in TABLE.iter().chain(CONVERTED.iter()) {
            by_plural.entry(r.plural).or_default().push(r);
        }
        by_plural
    });

/// The resource served at `group`/`version`/`plural`.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResourceType> {
    let matches =
        |r: &&ResourceType| r.group == group && r.version == version && r.plural == plural;
    BY_PLURAL
        .get(plural)
        .and_then(|rows| rows.iter().copied().find(matches))
        .or_else(|| custom_rows().into_iter().find(matches))
}

/// The resource of `kind` served in `api_version` (`v1`, `apps/v1`).
pub fn find_kind(api_version: &str, kind: &str) -> Option<&'static ResourceType> {
    served().find(|r| r.kind == kind && r.api_version() == api_version)
}

/// The group-versions served, in discovery order: (group, version).
pub fn group_versions() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for r in served() {
        if !out.contains(&(r.group, r.version)) {
            out.push((r.group, r.version));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_row_is_found_as_a_scan_finds_it() {
        let rows: Vec<&ResourceType> = TABLE.iter().chain(CONVERTED.iter()).collect();
        for row in &rows {
            let scanned = rows
                .iter()
                .find(|r| (r.group, r.version, r.plural) == (row.group, row.version, row.plural))
                .unwrap();
            let found = find(row.group, row.version, row.plural).unwrap();
            assert!(std::ptr::eq(found, *scanned), "{}", row.plural);
        }
        assert!(find("", "v1", "widgets").is_none());
        assert!(find("apps", "v2", "deployments").is_none());
    }

    #[test]
    fn the_table_comes_from_k8s_openapi() {
        let pod = find("", "v1", "pods").unwrap();
        assert_eq!(
            (pod.kind, pod.list_kind, pod.namespaced),
            ("Pod", "PodList", true)
        );
        assert_eq!(pod.api_version(), "v1");
        assert_eq!(
            pod.key(Some("default"), "web"),
            "/registry/core/pods/default/web"
        );
        let node = find("", "v1", "nodes").unwrap();
        assert!(!node.namespaced);
        assert_eq!(node.key(Some("ignored"), "n1"), "/registry/core/nodes/n1");
        let deploy = find_kind("apps/v1", "Deployment").unwrap();
        assert_eq!(
            deploy.collection_path(Some("ns")),
            "/apis/apps/v1/namespaces/ns/deployments"
        );
        assert_eq!(all().len(), 32);
        assert!(group_versions().contains(&("policy", "v1")));
    }

    #[test]
    fn converted_versions_share_the_storage_versions_keys() {
        let beta = find("batch", "v1beta1", "cronjobs").unwrap();
        let v1 = find("batch", "v1", "cronjobs").unwrap();
        assert!(std::ptr::eq(beta.storage(), v1));
        assert!(std::ptr::eq(v1.storage(), v1));
        assert_eq!(beta.key(Some("ns"), "a"), v1.key(Some("ns"), "a"));
        assert_eq!(
            (beta.kind, beta.list_kind, beta.namespaced),
            ("CronJob", "CronJobList", true)
        );
        assert_eq!(beta.api_version(), "batch/v1beta1");
        assert!(find_kind("scheduling.k8s.io/v1beta1", "PriorityClass").is_some());
        // The store holds one row per resource.
        assert!(all().iter().all(|r| r.conversion.is_none()));
        let versions = group_versions();
        assert!(versions.contains(&("batch", "v1beta1")));
        assert!(versions.contains(&("scheduling.k8s.io", "v1beta1")));
        for r in served().filter(|r| r.conversion.is_some()) {
            assert!(
                r.conversion.unwrap().deprecation.is_some(),
                "{}",
                r.api_version()
            );
        }
    }

    #[test]
    fn converted_versions_decode_and_report_unknown_fields_at_their_own_paths() {
        let beta = find("batch", "v1beta1", "cronjobs").unwrap();
        let good = serde_json::json!({
            "apiVersion": "batch/v1beta1", "kind": "CronJob", "metadata": {"name": "a"},
            "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}}},
        });
        assert!((beta.decode)(&good).is_ok());
        let mut unknown = good.clone();
        unknown["spec"]["jobTemplate"]["spec"]["bogus"] = serde_json::json!(1);
        assert_eq!(
            crate::validation::strict_unknown_fields(beta, &unknown),
            ["spec.jobTemplate.spec.bogus"]
        );
        let mut wrong = good;
        wrong["spec"]["schedule"] = serde_json::json!(5);
        assert!((beta.decode)(&wrong).is_err());
    }

    #[test]
    fn decoding_finds_wrong_types() {
        let pod = find("", "v1", "pods").unwrap();
        let good =
            serde_json::json!({"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c"}]}});
        assert!((pod.decode)(&good).is_ok());
        let bad = serde_json::json!({"metadata": {"name": "a"}, "spec": {"containers": "no"}});
        assert!((pod.decode)(&bad).is_err());
    }
}
