//! The resource table: every built-in resource the API serves, as one entry
//! each. Names, groups, versions, kinds and scope come from `k8s-openapi`'s
//! types; a resource is a row here, not a handler of its own.

use std::sync::LazyLock;

use k8s_openapi::{ListableResource, NamespaceResourceScope, Resource};
use serde::de::DeserializeOwned;

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
    }
}

static TABLE: LazyLock<Vec<ResourceType>> = LazyLock::new(|| {
    use k8s_openapi::api::{apps, batch, coordination, core, policy, scheduling};
    const ALL: &[&str] = &["all"];
    const STATUS: &[&str] = &["status"];
    const NONE: &[&str] = &[];
    vec![
        entry::<core::v1::Namespace>(&["ns"], NONE, STATUS, "io.k8s.api.core.v1.Namespace"),
        entry::<core::v1::Pod>(
            &["po"],
            ALL,
            &["status", "binding", "eviction", "log"],
            "io.k8s.api.core.v1.Pod",
        ),
        entry::<core::v1::Node>(&["no"], NONE, STATUS, "io.k8s.api.core.v1.Node"),
        entry::<core::v1::Service>(&["svc"], ALL, STATUS, "io.k8s.api.core.v1.Service"),
        entry::<core::v1::Endpoints>(&["ep"], NONE, NONE, "io.k8s.api.core.v1.Endpoints"),
        entry::<core::v1::ConfigMap>(&["cm"], NONE, NONE, "io.k8s.api.core.v1.ConfigMap"),
        entry::<core::v1::Secret>(NONE, NONE, NONE, "io.k8s.api.core.v1.Secret"),
        entry::<core::v1::Event>(&["ev"], NONE, NONE, "io.k8s.api.core.v1.Event"),
        entry::<core::v1::ServiceAccount>(&["sa"], NONE, NONE, "io.k8s.api.core.v1.ServiceAccount"),
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
    ]
});

/// Every resource served, core group first.
pub fn all() -> &'static [ResourceType] {
    &TABLE
}

/// The resource at `group`/`version`/`plural`.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResourceType> {
    all()
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resource of `kind` in `api_version` (`v1`, `apps/v1`).
pub fn find_kind(api_version: &str, kind: &str) -> Option<&'static ResourceType> {
    all()
        .iter()
        .find(|r| r.kind == kind && r.api_version() == api_version)
}

/// The group-versions served, in discovery order: (group, version).
pub fn group_versions() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for r in all() {
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
        assert_eq!(all().len(), 22);
        assert!(group_versions().contains(&("policy", "v1")));
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
