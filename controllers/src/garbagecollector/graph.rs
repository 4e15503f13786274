//! The garbage collector's dependency graph: every observed object by uid
//! (identity, ownerReferences, deletion state) and owner uid → dependents.
//! It only records what the watches saw; decisions live in `decide`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::discovery::ApiResource;

/// The finalizer that holds an owner until its blocking dependents are gone.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
/// The finalizer that holds an owner until its dependents are orphaned.
pub const ORPHAN_FINALIZER: &str = "orphan";

/// Who an object is: enough to find it again through the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectIdentity {
    pub api_version: String,
    pub kind: String,
    /// None for a cluster-scoped object.
    pub namespace: Option<String>,
    pub name: String,
    pub uid: String,
}

/// One observed object: its identity, owners and deletion state.
#[derive(Debug, Clone)]
pub struct ObjectNode {
    pub identity: ObjectIdentity,
    pub owner_references: Vec<OwnerReference>,
    /// `metadata.deletionTimestamp` is set.
    pub being_deleted: bool,
    pub finalizers: Vec<String>,
    /// The resource the object was watched through.
    pub resource: Arc<ApiResource>,
}

impl ObjectNode {
    /// The node of an object's metadata as watched through `resource`;
    /// None when the object has no uid or name (never true of a stored one).
    pub fn from_meta(meta: &ObjectMeta, resource: &Arc<ApiResource>) -> Option<ObjectNode> {
        Some(ObjectNode {
            identity: ObjectIdentity {
                api_version: resource.api_version.clone(),
                kind: resource.kind.clone(),
                namespace: meta.namespace.clone().filter(|ns| !ns.is_empty()),
                name: meta.name.clone()?,
                uid: meta.uid.clone()?,
            },
            owner_references: meta.owner_references.clone().unwrap_or_default(),
            being_deleted: meta.deletion_timestamp.is_some(),
            finalizers: meta.finalizers.clone().unwrap_or_default(),
            resource: resource.clone(),
        })
    }

    pub fn uid(&self) -> &str {
        &self.identity.uid
    }

    pub fn has_finalizer(&self, finalizer: &str) -> bool {
        self.finalizers.iter().any(|f| f == finalizer)
    }

    /// Foreground deletion: marked for deletion, waiting for its dependents.
    pub fn is_deleting_dependents(&self) -> bool {
        self.being_deleted && self.has_finalizer(FOREGROUND_FINALIZER)
    }

    /// Orphan deletion: marked for deletion, waiting to orphan its dependents.
    pub fn is_orphaning(&self) -> bool {
        self.being_deleted && self.has_finalizer(ORPHAN_FINALIZER)
    }

    /// Its reference to the owner `owner_uid`, if it has one.
    pub fn reference_to(&self, owner_uid: &str) -> Option<&OwnerReference> {
        self.owner_references.iter().find(|r| r.uid == owner_uid)
    }

    /// Whether this object may be owned by `owner`: a namespaced owner owns
    /// only dependents of its own namespace; a cluster-scoped one owns any.
    pub fn may_be_owned_by(&self, owner: &ObjectIdentity) -> bool {
        match &owner.namespace {
            None => true,
            Some(ns) => self.identity.namespace.as_ref() == Some(ns),
        }
    }
}

/// What depends on an object in turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dependents {
    /// Something has an ownerReference to it.
    pub exist: bool,
    /// One of those is itself in foreground deletion (a possible cycle).
    pub deleting_dependents: bool,
}

/// Every object the watches have seen, and who depends on whom.
#[derive(Debug, Default)]
pub struct Graph {
    nodes: HashMap<String, ObjectNode>,
    /// Owner uid → uids of objects with an ownerReference to it (the owner
    /// itself may be unobserved: deleted, not yet listed, or never there).
    dependents: HashMap<String, HashSet<String>>,
}

impl Graph {
    pub fn node(&self, uid: &str) -> Option<&ObjectNode> {
        self.nodes.get(uid)
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// What references `owner_uid` as its owner.
    pub fn dependents_summary(&self, owner_uid: &str) -> Dependents {
        let uids = self.dependents.get(owner_uid);
        Dependents {
            exist: uids.is_some_and(|d| !d.is_empty()),
            deleting_dependents: uids
                .into_iter()
                .flatten()
                .filter_map(|uid| self.nodes.get(uid))
                .any(ObjectNode::is_deleting_dependents),
        }
    }

    /// The dependents `owner` may own (same namespace, or a cluster-scoped
    /// owner), each with its reference to the owner.
    pub fn dependents_of<'a>(
        &'a self,
        owner: &'a ObjectNode,
    ) -> impl Iterator<Item = (&'a ObjectNode, &'a OwnerReference)> + 'a {
        self.dependents
            .get(owner.uid())
            .into_iter()
            .flatten()
            .filter_map(|uid| self.nodes.get(uid))
            .filter(|dependent| dependent.may_be_owned_by(&owner.identity))
            .filter_map(|dependent| Some((dependent, dependent.reference_to(owner.uid())?)))
    }

    /// Whether the graph shows `reference` of `dependent` as a live owner
    /// that keeps it: observed, a possible owner, not deleting dependents.
    pub fn is_solid_owner(&self, dependent: &ObjectNode, reference: &OwnerReference) -> bool {
        self.nodes.get(&reference.uid).is_some_and(|owner| {
            dependent.may_be_owned_by(&owner.identity) && !owner.is_deleting_dependents()
        })
    }

    /// Records an added or changed object; returns the uids to process.
    pub fn observe(&mut self, node: ObjectNode) -> Vec<String> {
        let uid = node.uid().to_string();
        let old = self.nodes.remove(&uid);
        let mut work = Vec::new();
        let refs_changed = old
            .as_ref()
            .is_none_or(|old| old.owner_references != node.owner_references);
        if refs_changed {
            if let Some(old) = &old {
                work.extend(self.owners_released(old, &node));
                self.unlink(old);
            }
            self.link(&node);
            if node
                .owner_references
                .iter()
                .any(|r| !self.is_solid_owner(&node, r))
            {
                work.push(uid.clone());
            }
        }
        let was = |test: fn(&ObjectNode) -> bool| old.as_ref().is_some_and(test);
        if node.is_deleting_dependents() && !was(ObjectNode::is_deleting_dependents) {
            // Every dependent goes; the owner waits for the blocking ones.
            work.extend(self.dependents_of(&node).map(|(d, _)| d.uid().to_string()));
            work.push(uid.clone());
        }
        if node.is_orphaning() && !was(ObjectNode::is_orphaning) {
            work.push(uid.clone());
        }
        self.nodes.insert(uid, node);
        dedup(work)
    }

    /// Forgets a deleted object; returns the uids to process: its
    /// dependents (their owner is gone) and owners waiting for it.
    pub fn forget(&mut self, uid: &str) -> Vec<String> {
        let Some(node) = self.nodes.remove(uid) else {
            return Vec::new();
        };
        self.unlink(&node);
        let mut work: Vec<String> = self
            .dependents
            .get(uid)
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        work.extend(self.waiting_owners(&node, &node.owner_references));
        dedup(work)
    }

    /// A relist of `resource` saw exactly `seen` (uids): forgets the
    /// objects of that resource deleted while the watch was down.
    pub fn relisted(&mut self, resource: &ApiResource, seen: &HashSet<String>) -> Vec<String> {
        self.forget_where(|node| *node.resource == *resource && !seen.contains(node.uid()))
    }

    /// `resource` is no longer served: forgets its objects.
    pub fn resource_removed(&mut self, resource: &ApiResource) -> Vec<String> {
        self.forget_where(|node| *node.resource == *resource)
    }

    fn forget_where(&mut self, gone: impl Fn(&ObjectNode) -> bool) -> Vec<String> {
        let uids: Vec<String> = self
            .nodes
            .values()
            .filter(|node| gone(node))
            .map(|node| node.uid().to_string())
            .collect();
        dedup(uids.iter().flat_map(|uid| self.forget(uid)).collect())
    }

    /// Owners deleting dependents that `node` no longer blocks.
    fn owners_released(&self, old: &ObjectNode, node: &ObjectNode) -> Vec<String> {
        let released: Vec<OwnerReference> = old
            .owner_references
            .iter()
            .filter(|r| r.block_owner_deletion == Some(true))
            .filter(|r| {
                node.reference_to(&r.uid)
                    .is_none_or(|now| now.block_owner_deletion != Some(true))
            })
            .cloned()
            .collect();
        self.waiting_owners(old, &released)
    }

    /// The owners among `references` of `dependent` deleting dependents.
    fn waiting_owners(&self, dependent: &ObjectNode, references: &[OwnerReference]) -> Vec<String> {
        references
            .iter()
            .filter_map(|r| self.nodes.get(&r.uid))
            .filter(|owner| {
                owner.is_deleting_dependents() && dependent.may_be_owned_by(&owner.identity)
            })
            .map(|owner| owner.uid().to_string())
            .collect()
    }

    fn link(&mut self, node: &ObjectNode) {
        for reference in &node.owner_references {
            self.dependents
                .entry(reference.uid.clone())
                .or_default()
                .insert(node.uid().to_string());
        }
    }

    fn unlink(&mut self, node: &ObjectNode) {
        for reference in &node.owner_references {
            if let Some(dependents) = self.dependents.get_mut(&reference.uid) {
                dependents.remove(node.uid());
                if dependents.is_empty() {
                    self.dependents.remove(&reference.uid);
                }
            }
        }
    }
}

fn dedup(mut uids: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    uids.retain(|uid| seen.insert(uid.clone()));
    uids
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn resource(api_version: &str, kind: &str, plural: &str) -> Arc<ApiResource> {
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), api_version.to_string()),
        };
        Arc::new(ApiResource {
            group,
            version,
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            plural: plural.to_string(),
        })
    }

    /// An object of `kind` (ReplicaSet, Pod, Node, Namespace, ...).
    pub fn object(kind: &str, namespace: Option<&str>, name: &str, uid: &str) -> ObjectNode {
        let (api_version, plural) = match kind {
            "ReplicaSet" => ("apps/v1", "replicasets"),
            "Deployment" => ("apps/v1", "deployments"),
            "Pod" => ("v1", "pods"),
            "Node" => ("v1", "nodes"),
            "Namespace" => ("v1", "namespaces"),
            _ => ("example.com/v1", "widgets"),
        };
        ObjectNode {
            identity: ObjectIdentity {
                api_version: api_version.into(),
                kind: kind.into(),
                namespace: namespace.map(str::to_string),
                name: name.into(),
                uid: uid.into(),
            },
            owner_references: Vec::new(),
            being_deleted: false,
            finalizers: Vec::new(),
            resource: resource(api_version, kind, plural),
        }
    }

    pub fn owned_by(mut node: ObjectNode, owner: &ObjectNode, block: bool) -> ObjectNode {
        node.owner_references.push(OwnerReference {
            api_version: owner.identity.api_version.clone(),
            kind: owner.identity.kind.clone(),
            name: owner.identity.name.clone(),
            uid: owner.identity.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(block),
        });
        node
    }

    pub fn deleting(mut node: ObjectNode, finalizer: Option<&str>) -> ObjectNode {
        node.being_deleted = true;
        node.finalizers.extend(finalizer.map(str::to_string));
        node
    }

    fn sorted(mut uids: Vec<String>) -> Vec<String> {
        uids.sort();
        uids
    }

    #[test]
    fn a_dependent_of_an_observed_owner_needs_no_work() {
        let mut graph = Graph::default();
        let rs = object("ReplicaSet", Some("default"), "web", "rs-1");
        assert!(graph.observe(rs.clone()).is_empty());
        let pod = owned_by(object("Pod", Some("default"), "web-a", "pod-1"), &rs, true);
        assert!(graph.observe(pod).is_empty());
        assert!(graph.dependents_summary("rs-1").exist);
        let dependents: Vec<&str> = graph.dependents_of(&rs).map(|(d, _)| d.uid()).collect();
        assert_eq!(dependents, ["pod-1"]);
    }

    #[test]
    fn a_dependent_of_an_unobserved_owner_is_checked() {
        let mut graph = Graph::default();
        let rs = object("ReplicaSet", Some("default"), "web", "rs-1");
        let pod = owned_by(object("Pod", Some("default"), "web-a", "pod-1"), &rs, true);
        assert_eq!(graph.observe(pod.clone()), ["pod-1"]);
        // An unrelated change (same owners) is not work again.
        assert!(graph.observe(pod).is_empty());
    }

    #[test]
    fn deleting_an_owner_queues_its_dependents() {
        let mut graph = Graph::default();
        let rs = object("ReplicaSet", Some("default"), "web", "rs-1");
        graph.observe(rs.clone());
        graph.observe(owned_by(
            object("Pod", Some("default"), "a", "pod-1"),
            &rs,
            true,
        ));
        graph.observe(owned_by(
            object("Pod", Some("default"), "b", "pod-2"),
            &rs,
            false,
        ));
        assert_eq!(sorted(graph.forget("rs-1")), ["pod-1", "pod-2"]);
        assert!(graph.node("rs-1").is_none());
        assert!(
            graph.forget("rs-1").is_empty(),
            "forgetting twice is no work"
        );
    }

    #[test]
    fn foreground_marking_queues_the_owner_and_every_dependent() {
        let mut graph = Graph::default();
        let rs = object("ReplicaSet", Some("default"), "web", "rs-1");
        graph.observe(rs.clone());
        graph.observe(owned_by(
            object("Pod", Some("default"), "a", "pod-1"),
            &rs,
            true,
        ));
        graph.observe(owned_by(
            object("Pod", Some("default"), "b", "pod-2"),
            &rs,
            false,
        ));
        let work = graph.observe(deleting(rs.clone(), Some(FOREGROUND_FINALIZER)));
        assert_eq!(sorted(work), ["pod-1", "pod-2", "rs-1"]);
        // The same mark seen again is not new work.
        assert!(graph
            .observe(deleting(rs, Some(FOREGROUND_FINALIZER)))
            .is_empty());
    }

    #[test]
    fn a_blocking_dependent_going_away_queues_its_waiting_owner() {
        let mut graph = Graph::default();
        let rs = object("ReplicaSet", Some("default"), "web", "rs-1");
        graph.observe(deleting(rs.clone(), Some(FOREGROUND_FINALIZER)));
        let pod = owned_by(object("Pod", Some("default"), "a", "pod-1"), &rs, true);
        graph.observe(pod.clone());
        assert_eq!(graph.forget("pod-1"), ["rs-1"]);
        // Dropping blockOwnerDeletion releases the owner too.
        graph.observe(pod.clone());
        let unblocked = owned_by(object("Pod", Some("default"), "a", "pod-1"), &rs, false);
        assert!(graph.observe(unblocked).contains(&"rs-1".to_string()));
    }

    #[test]
    fn orphan_marking_queues_the_owner() {
        let mut graph = Graph::default();
        let rs = object("ReplicaSet", Some("default"), "web", "rs-1");
        graph.observe(rs.clone());
        assert_eq!(
            graph.observe(deleting(rs, Some(ORPHAN_FINALIZER))),
            ["rs-1"]
        );
    }

    #[test]
    fn dependents_in_another_namespace_are_not_the_owners() {
        let mut graph = Graph::default();
        let rs = object("ReplicaSet", Some("default"), "web", "rs-1");
        let node = object("Node", None, "n1", "node-1");
        graph.observe(rs.clone());
        graph.observe(node.clone());
        let foreign = owned_by(object("Pod", Some("other"), "a", "pod-1"), &rs, true);
        assert_eq!(
            graph.observe(foreign.clone()),
            ["pod-1"],
            "checked: its owner is absent"
        );
        assert_eq!(graph.dependents_of(&rs).count(), 0);
        assert!(!graph.is_solid_owner(&foreign, &foreign.owner_references[0]));
        // A cluster-scoped owner may own namespaced dependents.
        let lease = owned_by(
            object("Lease", Some("other"), "n1", "lease-1"),
            &node,
            false,
        );
        assert!(graph.observe(lease).is_empty());
        assert_eq!(graph.dependents_of(&node).count(), 1);
    }

    #[test]
    fn a_relist_forgets_objects_deleted_while_unwatched() {
        let mut graph = Graph::default();
        let rs = object("ReplicaSet", Some("default"), "web", "rs-1");
        graph.observe(rs.clone());
        graph.observe(owned_by(
            object("Pod", Some("default"), "a", "pod-1"),
            &rs,
            true,
        ));
        let work = graph.relisted(&rs.resource, &HashSet::new());
        assert_eq!(work, ["pod-1"]);
        assert!(graph.node("pod-1").is_some());
        assert_eq!(graph.len(), 1);
        let work = graph.resource_removed(&graph.node("pod-1").unwrap().resource.clone());
        assert!(work.is_empty());
        assert!(graph.is_empty());
    }
}
