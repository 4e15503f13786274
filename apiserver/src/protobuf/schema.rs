//! The protobuf schema of every built-in kind: Kubernetes' own message
//! definitions (compiled by build.rs from `proto/`), and for each message
//! how its JSON form names and omits its fields (`proto/fields.tsv`,
//! taken from the Go types' `json` tags).

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use prost_reflect::{DescriptorPool, FieldDescriptor, MessageDescriptor};

static DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kubernetes.fds"));
static FIELDS: &str = include_str!("../../proto/fields.tsv");

/// The package of the apimachinery types every group version also serves
/// (Status, DeleteOptions, WatchEvent, …).
pub const META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";

/// How one message's fields appear in JSON.
#[derive(Default)]
pub struct Layout {
    /// Fields by their JSON name.
    pub by_json: HashMap<String, FieldDescriptor>,
    /// JSON names that are not the protobuf field name, by field number.
    renamed: HashMap<u32, String>,
    /// Fields whose JSON is flattened into this message's (Go's
    /// `json:",inline"`), e.g. a Volume's VolumeSource.
    pub inline: Vec<FieldDescriptor>,
    /// Fields Go leaves out of JSON when they hold their zero value
    /// (`omitempty` on a value that is not a pointer).
    omit_zero: HashSet<u32>,
}

impl Layout {
    pub fn json_name<'a>(&'a self, field: &'a FieldDescriptor) -> &'a str {
        self.renamed
            .get(&field.number())
            .map_or(field.name(), String::as_str)
    }

    pub fn omits_zero(&self, field: &FieldDescriptor) -> bool {
        self.omit_zero.contains(&field.number())
    }
}

pub struct Schema {
    pub pool: DescriptorPool,
    layouts: HashMap<String, Layout>,
}

pub static SCHEMA: LazyLock<Schema> = LazyLock::new(|| {
    // Both inputs are compiled into the binary, so a failure here is a
    // build defect that every test would show at once.
    let pool = DescriptorPool::decode(DESCRIPTORS).expect("build.rs wrote a valid descriptor set");
    let mut rows: HashMap<&str, Vec<(u32, &str, &str)>> = HashMap::new();
    for line in FIELDS.lines().filter(|l| !l.starts_with('#')) {
        let mut parts = line.split('\t');
        if let (Some(message), Some(number), Some(json), Some(flags)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        {
            if let Ok(number) = number.parse() {
                rows.entry(message).or_default().push((number, json, flags));
            }
        }
    }
    let mut layouts = HashMap::new();
    for message in pool.all_messages() {
        let mut layout = Layout::default();
        for (number, json, flags) in rows.get(message.full_name()).into_iter().flatten() {
            let Some(field) = message.get_field(*number) else {
                continue;
            };
            if flags.contains('i') {
                layout.inline.push(field);
                continue;
            }
            if *json != "-" && *json != field.name() {
                layout.renamed.insert(*number, json.to_string());
            }
            let scalar = !field.is_list() && !field.is_map();
            if flags.contains('o') && !flags.contains('p') && scalar {
                layout.omit_zero.insert(*number);
            }
        }
        for field in message.fields() {
            if layout.inline.iter().all(|f| f.number() != field.number()) {
                let name = layout.json_name(&field).to_string();
                layout.by_json.insert(name, field);
            }
        }
        layouts.insert(message.full_name().to_string(), layout);
    }
    Schema { pool, layouts }
});

impl Schema {
    pub fn layout(&self, message: &MessageDescriptor) -> &Layout {
        static EMPTY: LazyLock<Layout> = LazyLock::new(Layout::default);
        self.layouts.get(message.full_name()).unwrap_or(&EMPTY)
    }

    pub fn message(&self, name: &str) -> Option<MessageDescriptor> {
        self.pool.get_message_by_name(name)
    }

    /// The message of a kind at an API version (`apps/v1`, `Deployment`),
    /// or `None` when the kind has no protobuf form (custom resources).
    pub fn message_for(&self, api_version: &str, kind: &str) -> Option<MessageDescriptor> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        if version.is_empty() || kind.is_empty() {
            return None;
        }
        let package = match group {
            "" => Some(format!("k8s.io.api.core.{version}")),
            "meta.k8s.io" => Some(format!("k8s.io.apimachinery.pkg.apis.meta.{version}")),
            "apiextensions.k8s.io" => Some(format!(
                "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.{version}"
            )),
            "apps" | "batch" | "policy" | "autoscaling" => {
                Some(format!("k8s.io.api.{group}.{version}"))
            }
            _ => group.strip_suffix(".k8s.io").map(|g| {
                let short = g.split('.').next().unwrap_or(g);
                format!("k8s.io.api.{short}.{version}")
            }),
        }?;
        self.message(&format!("{package}.{kind}")).or_else(|| {
            // apimachinery's kinds are registered in every group version.
            (version == "v1")
                .then(|| self.message(&format!("{META}.{kind}")))
                .flatten()
                .filter(|m| META_KINDS.contains(&m.name()))
        })
    }
}

/// The apimachinery kinds a client may send or receive under any group
/// version.
const META_KINDS: &[&str] = &[
    "Status",
    "DeleteOptions",
    "CreateOptions",
    "UpdateOptions",
    "PatchOptions",
    "GetOptions",
    "ListOptions",
    "WatchEvent",
    "List",
    "APIResourceList",
    "APIGroupList",
    "APIGroup",
    "APIVersions",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_served_kind_and_its_list_has_a_message() {
        for row in crate::resources::served() {
            if row.custom.is_some() {
                continue;
            }
            let api_version = row.api_version();
            assert!(
                SCHEMA.message_for(&api_version, row.kind).is_some(),
                "{api_version} {}",
                row.kind
            );
            assert!(
                SCHEMA.message_for(&api_version, row.list_kind).is_some(),
                "{api_version} {}",
                row.list_kind
            );
        }
    }

    #[test]
    fn kinds_resolve_to_their_group_packages_only() {
        let name = |v: &str, k: &str| SCHEMA.message_for(v, k).map(|m| m.full_name().to_string());
        assert_eq!(name("v1", "Pod").as_deref(), Some("k8s.io.api.core.v1.Pod"));
        assert_eq!(
            name("rbac.authorization.k8s.io/v1", "Role").as_deref(),
            Some("k8s.io.api.rbac.v1.Role")
        );
        assert_eq!(
            name("v1", "Status").as_deref(),
            Some("k8s.io.apimachinery.pkg.apis.meta.v1.Status")
        );
        assert_eq!(
            name("apps/v1", "DeleteOptions").as_deref(),
            Some("k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions")
        );
        // A custom resource's group never borrows a built-in message.
        assert_eq!(name("apps.example.com/v1", "Deployment"), None);
        assert_eq!(name("example.com/v1", "Widget"), None);
        assert_eq!(name("v1", "ObjectMeta"), None);
    }

    #[test]
    fn go_json_names_and_inline_fields_are_known() {
        let props = SCHEMA
            .message("k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps")
            .unwrap();
        let layout = SCHEMA.layout(&props);
        assert!(layout.by_json.contains_key("$ref"));
        assert!(layout
            .by_json
            .contains_key("x-kubernetes-preserve-unknown-fields"));
        let volume = SCHEMA.message("k8s.io.api.core.v1.Volume").unwrap();
        assert_eq!(SCHEMA.layout(&volume).inline.len(), 1);
        let port = SCHEMA.message("k8s.io.api.core.v1.ServicePort").unwrap();
        let node_port = port.get_field_by_name("nodePort").unwrap();
        assert!(SCHEMA.layout(&port).omits_zero(&node_port));
        let spec = SCHEMA.message("k8s.io.api.apps.v1.DeploymentSpec").unwrap();
        let replicas = spec.get_field_by_name("replicas").unwrap();
        assert!(!SCHEMA.layout(&spec).omits_zero(&replicas), "a pointer");
    }
}
