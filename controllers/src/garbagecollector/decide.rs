//! The garbage collector's decisions, pure: from an object, what its owners
//! are (as the API reports them) and its dependents, to the writes to make.
//! Reading the API and writing to it is `worker`'s.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::graph::{Dependents, ObjectNode, FOREGROUND_FINALIZER, ORPHAN_FINALIZER};

/// How the API says an owner is, read live by name and compared by uid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerState {
    /// There, and not deleting its dependents.
    Present,
    /// There, marked for foreground deletion (`foregroundDeletion`).
    DeletingDependents,
    /// Not there: never created, deleted, replaced by another uid, or in
    /// another namespace than the (namespaced) dependent.
    Absent,
    /// A namespaced owner kind referenced by a cluster-scoped dependent:
    /// it can never resolve, and the dependent is never collected.
    Unresolvable,
}

/// `propagationPolicy` of a delete the collector sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

/// What to do with a dependent given its owners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DependentAction {
    /// An owner keeps it (or it has none): nothing to do.
    Keep,
    /// An ownerReference can never resolve: leave it alone.
    Unresolvable,
    /// Another owner keeps it: patch away the references to these owners
    /// (absent ones, and ones waiting for their dependents to go).
    RemoveOwnerReferences(Vec<String>),
    /// Every owner is gone or going: delete it.
    Delete {
        propagation: Propagation,
        /// Owners (uids) whose reference must first be patched to
        /// `blockOwnerDeletion: false`, so that a foreground owner does not
        /// wait on this object's own dependents (which could wait on it).
        unblock: Vec<String>,
    },
}

/// What an owner marked for foreground deletion does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForegroundAction {
    /// No dependent blocks it any more: remove `foregroundDeletion`.
    RemoveFinalizer,
    /// Blocking dependents remain; these (not yet being deleted) are to be
    /// processed, i.e. deleted unless another owner keeps them.
    WaitFor(Vec<String>),
}

/// What an owner marked for orphan deletion does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrphanPlan {
    /// Dependents (uids) to take the owner's reference off.
    pub strip_from: Vec<String>,
    /// Then `orphan` is removed from the owner.
    pub finalizer: &'static str,
}

/// The decision for `dependent` (its latest state) whose references,
/// in order, resolved to `owners`, with `dependents` of its own. As
/// kube-controller-manager's attemptToDeleteItem.
pub fn dependent(
    dependent: &ObjectNode,
    owners: &[(OwnerReference, OwnerState)],
    dependents: Dependents,
) -> DependentAction {
    if dependent.being_deleted || owners.is_empty() {
        return DependentAction::Keep;
    }
    if owners.iter().any(|(_, s)| *s == OwnerState::Unresolvable) {
        return DependentAction::Unresolvable;
    }
    let with = |state: OwnerState| -> Vec<&OwnerReference> {
        owners
            .iter()
            .filter(|(_, s)| *s == state)
            .map(|(r, _)| r)
            .collect()
    };
    let solid = with(OwnerState::Present);
    let waiting = with(OwnerState::DeletingDependents);
    let dangling = with(OwnerState::Absent);
    if !solid.is_empty() {
        if dangling.is_empty() && waiting.is_empty() {
            return DependentAction::Keep;
        }
        let uids = dangling
            .iter()
            .chain(&waiting)
            .map(|r| r.uid.clone())
            .collect();
        return DependentAction::RemoveOwnerReferences(uids);
    }
    if !waiting.is_empty() && dependents.exist {
        // Its own dependents go first (Foreground); if one of them waits
        // for its dependents too, there may be a cycle back to the owner:
        // the owner then stops waiting for this object.
        let unblock = match dependents.deleting_dependents {
            false => Vec::new(),
            true => waiting
                .iter()
                .filter(|r| r.block_owner_deletion == Some(true))
                .map(|r| r.uid.clone())
                .collect(),
        };
        return DependentAction::Delete {
            propagation: Propagation::Foreground,
            unblock,
        };
    }
    DependentAction::Delete {
        propagation: own_propagation(dependent),
        unblock: Vec::new(),
    }
}

/// The policy a dependent's own finalizers ask for; Background by default.
fn own_propagation(node: &ObjectNode) -> Propagation {
    if node.has_finalizer(ORPHAN_FINALIZER) {
        Propagation::Orphan
    } else if node.has_finalizer(FOREGROUND_FINALIZER) {
        Propagation::Foreground
    } else {
        Propagation::Background
    }
}

/// The next step of `owner` in foreground deletion, given its dependents
/// (each with its reference to the owner) as the graph has them.
pub fn foreground<'a>(
    dependents: impl IntoIterator<Item = (&'a ObjectNode, &'a OwnerReference)>,
) -> ForegroundAction {
    let mut blocking = false;
    let mut to_process = Vec::new();
    for (dependent, reference) in dependents {
        if reference.block_owner_deletion != Some(true) {
            continue;
        }
        blocking = true;
        if !dependent.being_deleted {
            to_process.push(dependent.uid().to_string());
        }
    }
    match blocking {
        false => ForegroundAction::RemoveFinalizer,
        true => ForegroundAction::WaitFor(to_process),
    }
}

/// What orphaning `owner`'s dependents takes.
pub fn orphan<'a>(
    dependents: impl IntoIterator<Item = (&'a ObjectNode, &'a OwnerReference)>,
) -> OrphanPlan {
    OrphanPlan {
        strip_from: dependents
            .into_iter()
            .map(|(d, _)| d.uid().to_string())
            .collect(),
        finalizer: ORPHAN_FINALIZER,
    }
}

/// `references` without those to `owners` (uids).
pub fn without_owners(references: &[OwnerReference], owners: &[String]) -> Vec<OwnerReference> {
    references
        .iter()
        .filter(|r| !owners.contains(&r.uid))
        .cloned()
        .collect()
}

/// `references` with `blockOwnerDeletion: false` on those to `owners`.
pub fn unblocked(references: &[OwnerReference], owners: &[String]) -> Vec<OwnerReference> {
    references
        .iter()
        .cloned()
        .map(|mut r| {
            if owners.contains(&r.uid) {
                r.block_owner_deletion = Some(false);
            }
            r
        })
        .collect()
}

/// `finalizers` without `finalizer`.
pub fn without_finalizer(finalizers: &[String], finalizer: &str) -> Vec<String> {
    finalizers
        .iter()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::garbagecollector::graph::tests::{deleting, object, owned_by};
    use crate::garbagecollector::graph::Graph;
    use OwnerState::*;

    const NONE: Dependents = Dependents {
        exist: false,
        deleting_dependents: false,
    };

    fn rs(name: &str, uid: &str) -> ObjectNode {
        object("ReplicaSet", Some("default"), name, uid)
    }

    fn pod_of(owners: &[&ObjectNode], block: bool) -> ObjectNode {
        let pod = object("Pod", Some("default"), "web-a", "pod-1");
        owners
            .iter()
            .fold(pod, |pod, owner| owned_by(pod, owner, block))
    }

    fn resolved(pod: &ObjectNode, states: &[OwnerState]) -> Vec<(OwnerReference, OwnerState)> {
        pod.owner_references
            .iter()
            .cloned()
            .zip(states.iter().copied())
            .collect()
    }

    fn delete(propagation: Propagation) -> DependentAction {
        DependentAction::Delete {
            propagation,
            unblock: vec![],
        }
    }

    #[test]
    fn dependents_by_the_state_of_their_owners() {
        let (a, b) = (rs("a", "rs-a"), rs("b", "rs-b"));
        let pod = pod_of(&[&a, &b], true);
        let remove = |uids: &[&str]| {
            DependentAction::RemoveOwnerReferences(uids.iter().map(|u| u.to_string()).collect())
        };
        let table: &[(&[OwnerState], DependentAction)] = &[
            (&[Present, Present], DependentAction::Keep),
            (&[Absent, Absent], delete(Propagation::Background)),
            (&[Present, Absent], remove(&["rs-b"])),
            (&[Absent, Present], remove(&["rs-a"])),
            (&[DeletingDependents, Present], remove(&["rs-a"])),
            (
                &[DeletingDependents, Absent],
                delete(Propagation::Background),
            ),
            (
                &[DeletingDependents, DeletingDependents],
                delete(Propagation::Background),
            ),
            (&[Absent, Unresolvable], DependentAction::Unresolvable),
            (&[Present, Unresolvable], DependentAction::Unresolvable),
        ];
        for (states, want) in table {
            assert_eq!(
                dependent(&pod, &resolved(&pod, states), NONE),
                *want,
                "{states:?}"
            );
        }
    }

    /// The owner states a live read would give, taken from the graph: an
    /// owner absent from it is absent from the API.
    fn states_in(graph: &Graph, node: &ObjectNode) -> Vec<(OwnerReference, OwnerState)> {
        let state = |r: &OwnerReference| match graph.node(&r.uid) {
            Some(owner) if !node.may_be_owned_by(&owner.identity) => Absent,
            Some(owner) if owner.is_deleting_dependents() => DeletingDependents,
            Some(_) => Present,
            None => Absent,
        };
        node.owner_references
            .iter()
            .map(|r| (r.clone(), state(r)))
            .collect()
    }

    fn decide_queued(graph: &Graph, uids: &[String]) -> Vec<(String, DependentAction)> {
        let mut decided: Vec<(String, DependentAction)> = uids
            .iter()
            .filter_map(|uid| graph.node(uid))
            .map(|node| {
                let action = dependent(
                    node,
                    &states_in(graph, node),
                    graph.dependents_summary(node.uid()),
                );
                (node.uid().to_string(), action)
            })
            .collect();
        decided.sort_by(|a, b| a.0.cmp(&b.0));
        decided
    }

    #[test]
    fn an_owner_deleted_in_the_background_takes_its_sole_dependents_only() {
        let mut graph = Graph::default();
        let (a, b) = (rs("a", "rs-a"), rs("b", "rs-b"));
        graph.observe(a.clone());
        graph.observe(b.clone());
        graph.observe(owned_by(
            object("Pod", Some("default"), "p1", "pod-1"),
            &a,
            true,
        ));
        let shared = owned_by(object("Pod", Some("default"), "p2", "pod-2"), &a, true);
        graph.observe(owned_by(shared, &b, false));
        graph.observe(owned_by(
            object("Pod", Some("default"), "p3", "pod-3"),
            &b,
            true,
        ));
        let queued = graph.forget("rs-a");
        assert_eq!(
            decide_queued(&graph, &queued),
            [
                ("pod-1".to_string(), delete(Propagation::Background)),
                (
                    "pod-2".to_string(),
                    DependentAction::RemoveOwnerReferences(vec!["rs-a".into()])
                ),
            ]
        );
    }

    #[test]
    fn a_reference_to_an_owner_that_never_existed_is_dangling() {
        let mut graph = Graph::default();
        let ghost = rs("ghost", "rs-never");
        let pod = owned_by(object("Pod", Some("default"), "p1", "pod-1"), &ghost, false);
        let queued = graph.observe(pod);
        assert_eq!(queued, ["pod-1"]);
        assert_eq!(
            decide_queued(&graph, &queued),
            [("pod-1".to_string(), delete(Propagation::Background))]
        );
    }

    #[test]
    fn an_owner_in_another_namespace_counts_as_absent() {
        let mut graph = Graph::default();
        let owner = object("ReplicaSet", Some("other"), "a", "rs-a");
        graph.observe(owner.clone());
        let queued = graph.observe(owned_by(
            object("Pod", Some("default"), "p1", "pod-1"),
            &owner,
            true,
        ));
        assert_eq!(
            decide_queued(&graph, &queued),
            [("pod-1".to_string(), delete(Propagation::Background))]
        );
        // A cluster-scoped owner keeps namespaced dependents.
        let node = object("Node", None, "n1", "node-1");
        graph.observe(node.clone());
        let lease = owned_by(
            object("Lease", Some("default"), "n1", "lease-1"),
            &node,
            false,
        );
        assert!(graph.observe(lease.clone()).is_empty());
        let action = dependent(&lease, &states_in(&graph, &lease), NONE);
        assert_eq!(action, DependentAction::Keep);
    }

    #[test]
    fn a_foreground_owner_deletes_every_dependent_not_kept_by_another_owner() {
        let mut graph = Graph::default();
        let (a, b) = (rs("a", "rs-a"), rs("b", "rs-b"));
        graph.observe(a.clone());
        graph.observe(b.clone());
        graph.observe(owned_by(
            object("Pod", Some("default"), "p1", "pod-1"),
            &a,
            true,
        ));
        graph.observe(owned_by(
            object("Pod", Some("default"), "p2", "pod-2"),
            &a,
            false,
        ));
        let shared = owned_by(object("Pod", Some("default"), "p3", "pod-3"), &a, true);
        graph.observe(owned_by(shared, &b, false));
        let mut queued = graph.observe(deleting(a, Some(FOREGROUND_FINALIZER)));
        assert!(
            queued.contains(&"rs-a".to_string()),
            "the owner is queued too"
        );
        queued.retain(|uid| uid != "rs-a");
        assert_eq!(
            decide_queued(&graph, &queued),
            [
                ("pod-1".to_string(), delete(Propagation::Background)),
                ("pod-2".to_string(), delete(Propagation::Background)),
                (
                    "pod-3".to_string(),
                    DependentAction::RemoveOwnerReferences(vec!["rs-a".into()])
                ),
            ]
        );
        let owner = graph.node("rs-a").unwrap().clone();
        let ForegroundAction::WaitFor(mut blocking) = foreground(graph.dependents_of(&owner))
        else {
            panic!("blocking dependents remain");
        };
        blocking.sort();
        assert_eq!(blocking, ["pod-1", "pod-3"]);
        // Once they are gone (pod-3 dropped its reference), it is released.
        graph.forget("pod-1");
        graph.forget("pod-2");
        graph.observe(owned_by(
            object("Pod", Some("default"), "p3", "pod-3"),
            &b,
            false,
        ));
        assert_eq!(
            foreground(graph.dependents_of(&owner)),
            ForegroundAction::RemoveFinalizer
        );
    }

    #[test]
    fn objects_without_owners_or_already_going_are_kept() {
        let pod = object("Pod", Some("default"), "lone", "pod-9");
        assert_eq!(dependent(&pod, &[], NONE), DependentAction::Keep);
        let owner = rs("a", "rs-a");
        let going = deleting(pod_of(&[&owner], true), None);
        assert_eq!(
            dependent(&going, &resolved(&going, &[Absent]), NONE),
            DependentAction::Keep
        );
    }

    #[test]
    fn a_dependent_with_dependents_of_a_foreground_owner_goes_in_the_foreground() {
        let (a, b) = (rs("a", "rs-a"), rs("b", "rs-b"));
        let pod = owned_by(pod_of(&[&a], true), &b, false);
        let owners = resolved(&pod, &[DeletingDependents, Absent]);
        let has = |deleting_dependents| Dependents {
            exist: true,
            deleting_dependents,
        };
        let foreground = |unblock: &[&str]| DependentAction::Delete {
            propagation: Propagation::Foreground,
            unblock: unblock.iter().map(|u| u.to_string()).collect(),
        };
        // The owner keeps waiting for it while its dependents go.
        assert_eq!(dependent(&pod, &owners, has(false)), foreground(&[]));
        // One of its dependents waits on its own: a possible cycle, so the
        // owner's blocking reference is loosened first.
        assert_eq!(dependent(&pod, &owners, has(true)), foreground(&["rs-a"]));
        // Without dependents of its own, the default policy.
        assert_eq!(
            dependent(&pod, &owners, NONE),
            delete(Propagation::Background)
        );
    }

    #[test]
    fn a_foreground_owner_is_released_when_no_blocking_dependent_remains() {
        let mut graph = Graph::default();
        let owner = deleting(rs("a", "rs-a"), Some(FOREGROUND_FINALIZER));
        graph.observe(owner.clone());
        assert_eq!(
            foreground(graph.dependents_of(&owner)),
            ForegroundAction::RemoveFinalizer
        );

        let mut loose = owned_by(
            object("Pod", Some("default"), "loose", "pod-2"),
            &owner,
            false,
        );
        graph.observe(loose.clone());
        assert_eq!(
            foreground(graph.dependents_of(&owner)),
            ForegroundAction::RemoveFinalizer
        );

        let blocking = owned_by(object("Pod", Some("default"), "b", "pod-1"), &owner, true);
        graph.observe(blocking.clone());
        assert_eq!(
            foreground(graph.dependents_of(&owner)),
            ForegroundAction::WaitFor(vec!["pod-1".into()])
        );
        // Being deleted (a pod terminating on its node) still blocks.
        graph.observe(deleting(blocking, None));
        assert_eq!(
            foreground(graph.dependents_of(&owner)),
            ForegroundAction::WaitFor(vec![])
        );
        graph.forget("pod-1");
        loose.finalizers.push("example.com/keep".into());
        graph.observe(loose);
        assert_eq!(
            foreground(graph.dependents_of(&owner)),
            ForegroundAction::RemoveFinalizer
        );
    }

    #[test]
    fn a_foreground_owner_does_not_wait_for_objects_of_another_namespace() {
        let mut graph = Graph::default();
        let owner = deleting(rs("a", "rs-a"), Some(FOREGROUND_FINALIZER));
        graph.observe(owner.clone());
        graph.observe(owned_by(
            object("Pod", Some("other"), "x", "pod-x"),
            &owner,
            true,
        ));
        assert_eq!(
            foreground(graph.dependents_of(&owner)),
            ForegroundAction::RemoveFinalizer
        );
    }

    #[test]
    fn an_orphaning_owner_strips_its_references_then_its_finalizer() {
        let mut graph = Graph::default();
        let owner = deleting(rs("a", "rs-a"), Some(ORPHAN_FINALIZER));
        let other = rs("b", "rs-b");
        graph.observe(owner.clone());
        graph.observe(other.clone());
        graph.observe(owned_by(
            object("Pod", Some("default"), "p1", "pod-1"),
            &owner,
            true,
        ));
        let shared = owned_by(object("Pod", Some("default"), "p2", "pod-2"), &owner, false);
        graph.observe(owned_by(shared, &other, true));
        graph.observe(owned_by(
            object("Pod", Some("other"), "px", "pod-x"),
            &owner,
            true,
        ));
        let mut plan = orphan(graph.dependents_of(&owner));
        plan.strip_from.sort();
        assert_eq!(
            plan.strip_from,
            ["pod-1", "pod-2"],
            "not the other namespace's"
        );
        assert_eq!(plan.finalizer, "orphan");
        assert!(orphan(graph.dependents_of(&other)).strip_from == ["pod-2"]);
    }

    #[test]
    fn patches_edit_only_the_named_owners() {
        let (a, b) = (rs("a", "rs-a"), rs("b", "rs-b"));
        let pod = pod_of(&[&a, &b], true);
        let kept = without_owners(&pod.owner_references, &["rs-a".into()]);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].uid, "rs-b");
        let loosened = unblocked(&pod.owner_references, &["rs-b".into()]);
        assert_eq!(loosened[0].block_owner_deletion, Some(true));
        assert_eq!(loosened[1].block_owner_deletion, Some(false));
        let finalizers = vec!["orphan".to_string(), "example.com/x".to_string()];
        assert_eq!(without_finalizer(&finalizers, "orphan"), ["example.com/x"]);
    }
}
