//! ControllerRevisions (apps/v1) as kube-controller-manager's
//! `controller/history` package keeps them for DaemonSets and StatefulSets:
//! one revision per distinct pod template, named `<set>-<hash>`, numbered
//! in the order templates were rolled out, and pruned to
//! `revisionHistoryLimit`. Not a controller: the two workload controllers
//! share it.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};

use crate::common::api::status_code;
use crate::deployment::hash::{fnv32a, safe_encode, FNV32_OFFSET_BASIS};

/// The label naming the revision a pod (and a revision) belongs to.
pub const CONTROLLER_REVISION_HASH: &str = "controller-revision-hash";

/// The label every revision carries with its own hash
/// (`ControllerRevisionHashLabel`).
pub const REVISION_HASH_LABEL: &str = "controller.kubernetes.io/hash";

/// kube keeps revision names within 253 characters: a longer prefix is cut.
const MAX_PREFIX: usize = 223;

/// A revision's `data`: the set's pod template as a patch that replaces
/// the template (`getPatch` of both controllers).
pub fn template_patch(template: &PodTemplateSpec) -> Value {
    let mut template = serde_json::to_value(template).unwrap_or_else(|_| json!({}));
    if let Some(object) = template.as_object_mut() {
        object.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": template}})
}

/// The pod template a revision's `data` holds, as [`template_patch`] wrote it.
pub fn template_of(revision: &ControllerRevision) -> Option<PodTemplateSpec> {
    let mut template = revision
        .data
        .as_ref()?
        .0
        .get("spec")?
        .get("template")?
        .clone();
    if let Some(object) = template.as_object_mut() {
        object.remove("$patch");
    }
    serde_json::from_value(template).ok()
}

/// FNV-32a of the revision data (plus the collision count), in the safe
/// alphabet, as `HashControllerRevision`.
pub fn hash(data: &Value, collision_count: Option<i32>) -> String {
    let mut hash = fnv32a(FNV32_OFFSET_BASIS, data.to_string().as_bytes());
    if let Some(count) = collision_count {
        hash = fnv32a(hash, &(count as u32).to_le_bytes());
    }
    safe_encode(&hash.to_string())
}

/// `<prefix>-<hash>`, the prefix cut as kube cuts it.
pub fn revision_name(prefix: &str, hash: &str) -> String {
    let prefix = match prefix.char_indices().nth(MAX_PREFIX) {
        Some((cut, _)) => &prefix[..cut],
        None => prefix,
    };
    format!("{prefix}-{hash}")
}

/// Who a revision belongs to.
pub struct Owner<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub reference: OwnerReference,
    /// The set's template labels, which the revision carries too.
    pub labels: BTreeMap<String, String>,
}

/// The revision `number` of `template` for `owner` (`NewControllerRevision`).
pub fn new_revision(
    owner: &Owner<'_>,
    template: &PodTemplateSpec,
    number: i64,
    collision_count: Option<i32>,
) -> ControllerRevision {
    let data = template_patch(template);
    let hash = hash(&data, collision_count);
    let mut labels = owner.labels.clone();
    labels.insert(REVISION_HASH_LABEL.into(), hash.clone());
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(revision_name(owner.name, &hash)),
            namespace: Some(owner.namespace.to_string()),
            labels: Some(labels),
            owner_references: Some(vec![owner.reference.clone()]),
            ..Default::default()
        },
        data: Some(RawExtension(data)),
        revision: number,
    }
}

/// The hash a revision was named with.
pub fn hash_of(revision: &ControllerRevision) -> &str {
    let labelled = revision
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(REVISION_HASH_LABEL));
    match labelled {
        Some(hash) => hash,
        None => revision
            .metadata
            .name
            .as_deref()
            .and_then(|n| n.rsplit_once('-'))
            .map(|(_, hash)| hash)
            .unwrap_or_default(),
    }
}

/// Same template (`EqualRevision`).
pub fn equal(a: &ControllerRevision, b: &ControllerRevision) -> bool {
    a.data.as_ref().map(|d| &d.0) == b.data.as_ref().map(|d| &d.0)
}

/// The revisions controlled by the owner with `uid`, oldest first.
pub fn owned(revisions: Vec<ControllerRevision>, uid: &str) -> Vec<ControllerRevision> {
    let mut owned: Vec<ControllerRevision> = revisions
        .into_iter()
        .filter(|r| {
            r.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .collect();
    sort(&mut owned);
    owned
}

/// By revision number, then name (`history.SortControllerRevisions`).
pub fn sort(revisions: &mut [ControllerRevision]) {
    revisions.sort_by(|a, b| (a.revision, &a.metadata.name).cmp(&(b.revision, &b.metadata.name)));
}

/// The number after the highest of `revisions` (`nextRevision`).
pub fn next_number(revisions: &[ControllerRevision]) -> i64 {
    revisions.iter().map(|r| r.revision).max().unwrap_or(0) + 1
}

/// What to do so that the owner's newest revision is `wanted`.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// The newest revision already holds the template.
    Use(ControllerRevision),
    /// An older revision holds it (a rollback): give it the next number.
    Renumber(ControllerRevision, i64),
    /// No revision holds it: create `wanted`.
    Create(ControllerRevision),
}

/// Finds the revision equal to `wanted` among `existing` (oldest first),
/// as `getStatefulSetRevisions` and `constructHistory` do.
pub fn decide(existing: &[ControllerRevision], wanted: ControllerRevision) -> Decision {
    let equal: Vec<&ControllerRevision> = existing.iter().filter(|r| equal(r, &wanted)).collect();
    let newest = existing.last();
    match equal.last() {
        Some(found) if newest.is_some_and(|n| n.metadata.name == found.metadata.name) => {
            Decision::Use((*found).clone())
        }
        Some(found) => Decision::Renumber((*found).clone(), next_number(existing)),
        None => Decision::Create(wanted),
    }
}

/// Why a revision could not be written.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("ControllerRevision {name} exists with another template; collisionCount is raised to name a new one")]
    Collision { name: String },
    #[error("writing ControllerRevision {name}: {source}")]
    Api {
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Carries out `decision`; returns the revision now current.
pub async fn apply(
    api: &Api<ControllerRevision>,
    decision: Decision,
) -> Result<ControllerRevision, HistoryError> {
    match decision {
        Decision::Use(revision) => Ok(revision),
        Decision::Renumber(revision, number) => {
            let name = revision.metadata.name.clone().unwrap_or_default();
            let patch = json!({"revision": number});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|source| HistoryError::Api { name, source })
        }
        Decision::Create(wanted) => {
            let name = wanted.metadata.name.clone().unwrap_or_default();
            match api.create(&PostParams::default(), &wanted).await {
                Ok(created) => Ok(created),
                Err(err) if status_code(&err) == Some(409) => {
                    let found = api.get(&name).await.map_err(|source| HistoryError::Api {
                        name: name.clone(),
                        source,
                    })?;
                    let ours = found.metadata.owner_references.iter().flatten().any(|o| {
                        wanted
                            .metadata
                            .owner_references
                            .iter()
                            .flatten()
                            .any(|w| w.uid == o.uid && o.controller == Some(true))
                    });
                    match ours && equal(&found, &wanted) {
                        true => Ok(found),
                        false => Err(HistoryError::Collision { name }),
                    }
                }
                Err(source) => Err(HistoryError::Api { name, source }),
            }
        }
    }
}

/// The revisions to delete so that at most `limit` revisions not in `live`
/// remain, oldest first (`truncateHistory`).
pub fn to_prune<'a>(
    revisions: &'a [ControllerRevision],
    live: &[&str],
    limit: i32,
) -> Vec<&'a ControllerRevision> {
    let history: Vec<&ControllerRevision> = revisions
        .iter()
        .filter(|r| !live.contains(&r.metadata.name.as_deref().unwrap_or_default()))
        .collect();
    let limit = usize::try_from(limit).unwrap_or(0);
    let excess = history.len().saturating_sub(limit);
    history.into_iter().take(excess).collect()
}

/// Deletes `revisions`; one already gone is fine.
pub async fn prune(
    api: &Api<ControllerRevision>,
    revisions: &[&ControllerRevision],
) -> Result<(), HistoryError> {
    for revision in revisions {
        let name = revision.metadata.name.clone().unwrap_or_default();
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(err) if status_code(&err) == Some(404) => {}
            Err(source) => return Err(HistoryError::Api { name, source }),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> Owner<'static> {
        Owner {
            name: "web",
            namespace: "default",
            reference: OwnerReference {
                api_version: "apps/v1".into(),
                kind: "StatefulSet".into(),
                name: "web".into(),
                uid: "uid-web".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
            labels: [("app".to_string(), "web".to_string())].into(),
        }
    }

    fn template(image: &str) -> PodTemplateSpec {
        serde_json::from_value(json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": image}]}
        }))
        .unwrap()
    }

    #[test]
    fn revisions_are_named_by_the_hash_of_their_template() {
        let one = new_revision(&owner(), &template("nginx:1"), 1, None);
        let again = new_revision(&owner(), &template("nginx:1"), 7, None);
        let two = new_revision(&owner(), &template("nginx:2"), 2, None);
        let name = one.metadata.name.clone().unwrap();
        assert!(name.starts_with("web-"), "{name}");
        assert_eq!(one.metadata.name, again.metadata.name);
        assert_ne!(one.metadata.name, two.metadata.name);
        assert_eq!(format!("web-{}", hash_of(&one)), name);
        assert_eq!(one.metadata.labels.as_ref().unwrap()["app"], "web");
        let collided = new_revision(&owner(), &template("nginx:1"), 1, Some(1));
        assert_ne!(collided.metadata.name, one.metadata.name);
        assert!(equal(&collided, &one));
        assert_eq!(template_of(&one), Some(template("nginx:1")));
        assert_eq!(
            one.data.as_ref().unwrap().0["spec"]["template"]["$patch"],
            "replace"
        );
    }

    #[test]
    fn the_newest_equal_revision_is_used_an_older_one_renumbered() {
        let one = new_revision(&owner(), &template("nginx:1"), 1, None);
        let two = new_revision(&owner(), &template("nginx:2"), 2, None);
        let existing = vec![one.clone(), two.clone()];
        assert_eq!(
            decide(
                &existing,
                new_revision(&owner(), &template("nginx:2"), 3, None)
            ),
            Decision::Use(two.clone())
        );
        assert_eq!(
            decide(
                &existing,
                new_revision(&owner(), &template("nginx:1"), 3, None)
            ),
            Decision::Renumber(one, 3)
        );
        let three = new_revision(&owner(), &template("nginx:3"), 3, None);
        assert_eq!(decide(&existing, three.clone()), Decision::Create(three));
        assert_eq!(next_number(&existing), 3);
        assert_eq!(next_number(&[]), 1);
    }

    #[test]
    fn history_beyond_the_limit_is_pruned_oldest_first_sparing_live_revisions() {
        let revisions: Vec<ControllerRevision> = (1..=5)
            .map(|n| new_revision(&owner(), &template(&format!("nginx:{n}")), n, None))
            .collect();
        let name = |i: usize| revisions[i].metadata.name.clone().unwrap();
        let live = [name(0).clone(), name(4).clone()];
        let live: Vec<&str> = live.iter().map(String::as_str).collect();
        let pruned: Vec<String> = to_prune(&revisions, &live, 1)
            .iter()
            .map(|r| r.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(pruned, [name(1), name(2)]);
        assert!(to_prune(&revisions, &live, 10).is_empty());
    }

    #[test]
    fn only_revisions_the_owner_controls_are_its_own() {
        let mut theirs = new_revision(&owner(), &template("nginx:1"), 1, None);
        theirs.metadata.owner_references.as_mut().unwrap()[0].uid = "other".into();
        let two = new_revision(&owner(), &template("nginx:2"), 2, None);
        let one = new_revision(&owner(), &template("nginx:3"), 1, None);
        let owned = owned(vec![two.clone(), theirs, one.clone()], "uid-web");
        assert_eq!(owned, vec![one, two]);
    }
}
