//! The pure part of the Deployment controller: from a Deployment, the
//! ReplicaSets of its namespace and `now`, the writes that move its rollout
//! one step (kube-controller-manager's syncDeployment), with no I/O.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::hash::{pod_template_hash, same_template, POD_TEMPLATE_HASH};
use super::status::{self, condition, get_condition, set_condition, status_replicas};
use super::{claim, revision, strategy, PlanError};

/// What one sync of a Deployment writes, in order: ReplicaSets, then the
/// status (through the status subresource), then the revision annotation.
#[derive(Debug, Default)]
pub struct Plan {
    pub replica_sets: Vec<ReplicaSetWrite>,
    pub status: Option<DeploymentStatus>,
    /// The Deployment's new `deployment.kubernetes.io/revision`.
    pub revision: Option<String>,
    /// When to look again although nothing changes (progress deadline).
    pub requeue_after: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ReplicaSetWrite {
    Create(ReplicaSet),
    /// A full update, conditional on the object's resourceVersion.
    Update(ReplicaSet),
    Delete {
        name: String,
        resource_version: Option<String>,
    },
}

/// A ReplicaSet the Deployment manages, as this sync leaves it.
pub(super) struct Managed {
    pub rs: ReplicaSet,
    pub created: bool,
    pub changed: bool,
}

/// The state of one sync: the Deployment, its ReplicaSets being changed in
/// place, and the status being built.
pub(super) struct Rollout<'a> {
    pub d: &'a Deployment,
    pub now: Timestamp,
    /// Oldest first; a ReplicaSet created by this sync comes last.
    pub sets: Vec<Managed>,
    pub new: Option<usize>,
    pub released: Vec<ReplicaSet>,
    pub deleted: Vec<usize>,
    pub status: DeploymentStatus,
    pub requeue_after: Option<Duration>,
    revision: Option<String>,
}

/// One sync of `d` against the ReplicaSets of its namespace, at `now`.
pub fn plan(
    d: &Deployment,
    replica_sets: &[ReplicaSet],
    now: Timestamp,
) -> Result<Plan, PlanError> {
    let mut rollout = Rollout::new(d, now);
    match claim::selector(d)? {
        Some(selector) => {
            rollout.adopt(claim::claim(d, &selector, replica_sets));
            rollout.sync()?;
        }
        // A Deployment selecting every pod is left alone, as Kubernetes does.
        None => rollout.status.observed_generation = d.metadata.generation,
    }
    Ok(rollout.finish())
}

pub(super) fn spec_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0)
}

fn creation(rs: &ReplicaSet) -> (Option<Timestamp>, Option<&str>) {
    (
        rs.metadata.creation_timestamp.as_ref().map(|t| t.0),
        rs.metadata.name.as_deref(),
    )
}

fn name(rs: &ReplicaSet) -> &str {
    rs.metadata.name.as_deref().unwrap_or_default()
}

impl<'a> Rollout<'a> {
    fn new(d: &'a Deployment, now: Timestamp) -> Rollout<'a> {
        Rollout {
            d,
            now,
            sets: Vec::new(),
            new: None,
            released: Vec::new(),
            deleted: Vec::new(),
            status: d.status.clone().unwrap_or_default(),
            requeue_after: None,
            revision: None,
        }
    }

    fn adopt(&mut self, claim: claim::Claim) {
        self.released = claim.released;
        self.sets = claim
            .owned
            .into_iter()
            .map(|(rs, adopted)| Managed {
                rs,
                created: false,
                changed: adopted,
            })
            .collect();
        self.sets
            .sort_by(|a, b| creation(&a.rs).cmp(&creation(&b.rs)));
        let template = self.d.spec.as_ref().map(|s| &s.template);
        self.new = self.sets.iter().position(|m| {
            let rs_template = m.rs.spec.as_ref().and_then(|s| s.template.as_ref());
            matches!((rs_template, template), (Some(a), Some(b)) if same_template(a, b))
        });
    }

    fn sync(&mut self) -> Result<(), PlanError> {
        if self.d.metadata.deletion_timestamp.is_some() {
            return self.sync_status();
        }
        self.check_paused_conditions();
        self.sync_revision()?;
        if strategy::is_paused(self.d) || self.is_scaling_event() {
            return self.sync_scale();
        }
        if strategy::is_recreate(self.d) {
            self.rollout_recreate()
        } else {
            self.rollout_rolling()
        }
    }

    /// Indices of the old ReplicaSets (all but the new one), oldest first.
    pub fn old(&self) -> Vec<usize> {
        (0..self.sets.len())
            .filter(|i| Some(*i) != self.new)
            .collect()
    }

    /// Indices of ReplicaSets with `spec.replicas` above zero, oldest first.
    pub fn active(&self, indices: &[usize]) -> Vec<usize> {
        indices
            .iter()
            .copied()
            .filter(|i| spec_replicas(&self.sets[*i].rs) > 0)
            .collect()
    }

    pub fn sum(&self, indices: &[usize], count: impl Fn(&ReplicaSet) -> i32) -> i32 {
        indices.iter().map(|i| count(&self.sets[*i].rs)).sum()
    }

    pub fn all(&self) -> Vec<usize> {
        (0..self.sets.len()).collect()
    }

    /// The next revision: one above every old ReplicaSet's.
    fn next_revision(&self) -> i64 {
        revision::max_revision(self.old().iter().map(|i| &self.sets[*i].rs)) + 1
    }

    /// Keeps an existing new ReplicaSet's annotations and minReadySeconds in
    /// step with the Deployment, and the Deployment's revision with it.
    fn sync_revision(&mut self) -> Result<(), PlanError> {
        let Some(new) = self.new else {
            return Ok(());
        };
        let next = self.next_revision();
        let surge = strategy::max_surge(self.d)?;
        let min_ready = strategy::min_ready_seconds(self.d);
        let managed = &mut self.sets[new];
        let spec = managed.rs.spec.get_or_insert_with(Default::default);
        let min_ready_changed = spec.min_ready_seconds.unwrap_or(0) != min_ready.unwrap_or(0);
        spec.min_ready_seconds = min_ready;
        let annotated =
            revision::set_new_replica_set_annotations(self.d, &mut managed.rs, next, true, surge);
        managed.changed |= annotated || min_ready_changed;
        self.set_deployment_revision(revision::revision(&self.sets[new].rs));
        let name = name(&self.sets[new].rs).to_string();
        if strategy::progress_deadline_seconds(self.d).is_some()
            && get_condition(&self.status, status::PROGRESSING).is_none()
        {
            let message = format!("Found new replica set {name:?}");
            set_condition(
                &mut self.status,
                condition(
                    status::PROGRESSING,
                    "True",
                    status::FOUND_NEW_REPLICA_SET,
                    message,
                    self.now,
                ),
            );
        }
        Ok(())
    }

    fn set_deployment_revision(&mut self, revision: i64) {
        let current = self
            .d
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(revision::REVISION));
        let revision = revision.to_string();
        self.revision = (current != Some(&revision)).then_some(revision);
    }

    /// Creates the new ReplicaSet `<deployment>-<pod-template-hash>` with
    /// its first replicas; a name taken by a different template bumps the
    /// collisionCount instead (the next sync tries another name).
    pub fn create_new(&mut self) -> Result<(), PlanError> {
        let rs = self.new_replica_set()?;
        if self.sets.iter().any(|m| name(&m.rs) == name(&rs)) {
            let count = self.status.collision_count.unwrap_or(0);
            self.status.collision_count = Some(count.saturating_add(1));
            return Ok(());
        }
        let created = name(&rs).to_string();
        self.set_deployment_revision(revision::revision(&rs));
        self.sets.push(Managed {
            rs,
            created: true,
            changed: true,
        });
        self.new = Some(self.sets.len() - 1);
        if strategy::progress_deadline_seconds(self.d).is_some() {
            let message = format!("Created new replica set {created:?}");
            set_condition(
                &mut self.status,
                condition(
                    status::PROGRESSING,
                    "True",
                    status::NEW_REPLICA_SET_CREATED,
                    message,
                    self.now,
                ),
            );
        }
        Ok(())
    }

    fn new_replica_set(&self) -> Result<ReplicaSet, PlanError> {
        let spec = self.d.spec.clone().unwrap_or_default();
        let hash = pod_template_hash(&spec.template, self.status.collision_count);
        let mut template = spec.template;
        let labels = template
            .metadata
            .get_or_insert_with(Default::default)
            .labels
            .get_or_insert_with(BTreeMap::new);
        labels.insert(POD_TEMPLATE_HASH.into(), hash.clone());
        let labels = labels.clone();
        let mut selector = spec.selector;
        selector
            .match_labels
            .get_or_insert_with(BTreeMap::new)
            .insert(POD_TEMPLATE_HASH.into(), hash.clone());
        let mut rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(format!(
                    "{}-{hash}",
                    self.d.metadata.name.as_deref().unwrap_or_default()
                )),
                namespace: self.d.metadata.namespace.clone(),
                labels: Some(labels),
                owner_references: Some(vec![crate::common::owners::controller_reference(self.d)]),
                ..Default::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(0),
                min_ready_seconds: spec.min_ready_seconds,
                selector,
                template: Some(template),
            }),
            status: None,
        };
        let surge = strategy::max_surge(self.d)?;
        revision::set_new_replica_set_annotations(
            self.d,
            &mut rs,
            self.next_revision(),
            false,
            surge,
        );
        let replicas = self.new_replica_set_replicas(0)?;
        if let Some(spec) = rs.spec.as_mut() {
            spec.replicas = Some(replicas);
        }
        Ok(rs)
    }

    /// How many replicas the new ReplicaSet (now at `current`) may have:
    /// all of them for Recreate; for RollingUpdate, no more than
    /// replicas + maxSurge pods across every ReplicaSet.
    pub fn new_replica_set_replicas(&self, current: i32) -> Result<i32, PlanError> {
        let replicas = strategy::replicas(self.d);
        if strategy::is_recreate(self.d) {
            return Ok(replicas);
        }
        let max_total = replicas + strategy::max_surge(self.d)?;
        // Pods a ReplicaSet has not shed yet (its controller has not caught
        // up with a scale-down) still count against maxSurge.
        let pods = self.sum(&self.all(), |rs| spec_replicas(rs).max(status_replicas(rs)));
        if pods >= max_total {
            return Ok(current);
        }
        Ok(current + (max_total - pods).min(replicas - current))
    }

    /// Sets a ReplicaSet's replicas and its desired/max-replicas
    /// annotations; true when the size changed.
    pub fn scale(&mut self, index: usize, replicas: i32) -> Result<bool, PlanError> {
        let desired = strategy::replicas(self.d);
        let max = desired + strategy::max_surge(self.d)?;
        let managed = &mut self.sets[index];
        let resized = spec_replicas(&managed.rs) != replicas;
        let mut copy = managed.rs.clone();
        copy.spec.get_or_insert_with(Default::default).replicas = Some(replicas);
        let annotated = revision::set_replicas_annotations(&mut copy, desired, max);
        if resized || annotated {
            managed.rs = copy;
            managed.changed = true;
        }
        Ok(resized)
    }

    fn finish(self) -> Plan {
        let mut writes: Vec<ReplicaSetWrite> = self
            .released
            .into_iter()
            .map(ReplicaSetWrite::Update)
            .collect();
        for (index, managed) in self.sets.into_iter().enumerate() {
            if self.deleted.contains(&index) {
                writes.push(ReplicaSetWrite::Delete {
                    name: name(&managed.rs).to_string(),
                    resource_version: managed.rs.metadata.resource_version.clone(),
                });
            } else if managed.created {
                writes.push(ReplicaSetWrite::Create(managed.rs));
            } else if managed.changed {
                writes.push(ReplicaSetWrite::Update(managed.rs));
            }
        }
        let observed = self.d.status.clone().unwrap_or_default();
        Plan {
            replica_sets: writes,
            status: (!status::same_status(&observed, &self.status)).then_some(self.status),
            revision: self.revision,
            requeue_after: self.requeue_after,
        }
    }
}
