//! The controller driven against an in-memory namespace: each sync's writes
//! are applied as the apiserver would, and a stand-in ReplicaSet controller
//! turns spec.replicas into pods that become available one step later.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, ReplicaSetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{json, Value};

use super::hash::POD_TEMPLATE_HASH;
use super::plan::{plan, spec_replicas, Plan, ReplicaSetWrite};
use super::revision::{
    self, CHANGE_CAUSE, DESIRED_REPLICAS, MAX_REPLICAS, REVISION, REVISION_HISTORY,
};
use super::status::{self, available_replicas, get_condition, status_replicas};

fn deployment(replicas: i32, strategy: Value) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "d-1", "generation": 1,
                     "resourceVersion": "1",
                     "annotations": {CHANGE_CAUSE: "kubectl create deployment web --image=nginx:1"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": strategy,
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
            "template": template("nginx:1"),
        }
    }))
    .unwrap()
}

fn template(image: &str) -> Value {
    json!({"metadata": {"labels": {"app": "web"}},
           "spec": {"containers": [{"name": "web", "image": image}]}})
}

fn rolling(surge: Value, unavailable: Value) -> Value {
    json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}})
}

/// One namespace: the Deployment, its ReplicaSets, and a clock.
struct Cluster {
    d: Deployment,
    replica_sets: Vec<ReplicaSet>,
    now: Timestamp,
    resource_version: u64,
}

impl Cluster {
    fn new(d: Deployment) -> Cluster {
        Cluster {
            d,
            replica_sets: Vec::new(),
            now: Timestamp::from_second(1_700_000_000).unwrap(),
            resource_version: 10,
        }
    }

    fn next_version(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    /// One sync of the controller, its writes applied.
    fn sync(&mut self) -> Plan {
        let plan = plan(&self.d, &self.replica_sets, self.now).unwrap();
        for write in plan.replica_sets.clone() {
            self.write(write);
        }
        if let Some(status) = plan.status.clone() {
            self.d.status = Some(status);
        }
        if let Some(revision) = plan.revision.clone() {
            self.d
                .metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(REVISION.into(), revision);
        }
        plan
    }

    fn write(&mut self, write: ReplicaSetWrite) {
        match write {
            ReplicaSetWrite::Create(mut rs) => {
                assert!(
                    self.find(&rs.metadata.name.clone().unwrap()).is_none(),
                    "created twice"
                );
                rs.metadata.uid = Some(format!("rs-{}", self.replica_sets.len()));
                rs.metadata.generation = Some(1);
                rs.metadata.resource_version = Some(self.next_version());
                let order = SignedDuration::from_secs(self.replica_sets.len() as i64);
                rs.metadata.creation_timestamp = Some(Time(self.now + order));
                self.replica_sets.push(rs);
            }
            ReplicaSetWrite::Update(mut rs) => {
                let version = self.next_version();
                let current = self
                    .find(rs.metadata.name.as_deref().unwrap())
                    .expect("update of a missing ReplicaSet");
                assert_eq!(
                    current.metadata.resource_version, rs.metadata.resource_version,
                    "stale update"
                );
                if current.spec != rs.spec {
                    rs.metadata.generation = Some(current.metadata.generation.unwrap_or(0) + 1);
                }
                rs.status = current.status.clone();
                rs.metadata.resource_version = Some(version);
                *current = rs;
            }
            ReplicaSetWrite::Delete {
                name,
                resource_version,
            } => {
                let index = self
                    .replica_sets
                    .iter()
                    .position(|rs| rs.metadata.name.as_deref() == Some(&name))
                    .unwrap();
                assert_eq!(
                    self.replica_sets[index].metadata.resource_version,
                    resource_version
                );
                self.replica_sets.remove(index);
            }
        }
    }

    fn find(&mut self, name: &str) -> Option<&mut ReplicaSet> {
        self.replica_sets
            .iter_mut()
            .find(|rs| rs.metadata.name.as_deref() == Some(name))
    }

    /// The ReplicaSet controller: pods follow spec.replicas at once and
    /// become available one step after they exist.
    fn run_replica_sets(&mut self) {
        for rs in &mut self.replica_sets {
            let wanted = spec_replicas(rs);
            let existing = status_replicas(rs);
            rs.status = Some(ReplicaSetStatus {
                replicas: wanted,
                available_replicas: Some(existing.min(wanted)),
                ready_replicas: Some(existing.min(wanted)),
                observed_generation: rs.metadata.generation,
                ..Default::default()
            });
        }
    }

    /// The ReplicaSet controller of the newest revision alone.
    fn run_new_replica_set(&mut self) {
        let newest = self.replica_sets.iter().map(revision::revision).max();
        let (new, old) = std::mem::take(&mut self.replica_sets)
            .into_iter()
            .partition(|rs| Some(revision::revision(rs)) == newest);
        self.replica_sets = new;
        self.run_replica_sets();
        self.replica_sets.extend(old);
    }

    fn step(&mut self) -> Plan {
        let plan = self.sync();
        self.run_replica_sets();
        self.now += SignedDuration::from_secs(5);
        plan
    }

    /// Steps until the rollout is complete and nothing more is written.
    fn settle(&mut self, mut check: impl FnMut(&Cluster)) {
        for _ in 0..200 {
            let plan = self.step();
            check(self);
            let done =
                plan.replica_sets.is_empty() && plan.status.is_none() && plan.revision.is_none();
            if done && status::deployment_complete(&self.d, self.d.status.as_ref().unwrap()) {
                return;
            }
        }
        panic!("rollout did not finish: {:#?}", self.replica_sets);
    }

    fn change_spec(
        &mut self,
        change: impl FnOnce(&mut k8s_openapi::api::apps::v1::DeploymentSpec),
    ) {
        change(self.d.spec.as_mut().unwrap());
        let generation = self.d.metadata.generation.unwrap_or(0) + 1;
        self.d.metadata.generation = Some(generation);
    }

    fn set_image(&mut self, image: &str) {
        self.change_spec(|spec| spec.template = serde_json::from_value(template(image)).unwrap());
    }

    fn by_revision(&self, revision: i64) -> &ReplicaSet {
        self.replica_sets
            .iter()
            .find(|rs| revision::revision(rs) == revision)
            .unwrap()
    }

    fn total(&self, count: impl Fn(&ReplicaSet) -> i32) -> i32 {
        self.replica_sets.iter().map(count).sum()
    }

    fn progressing(&self) -> (String, String, String) {
        let c = get_condition(self.d.status.as_ref().unwrap(), status::PROGRESSING).unwrap();
        (
            c.status.clone(),
            c.reason.clone().unwrap(),
            c.message.clone().unwrap(),
        )
    }
}

fn annotation<'a>(object: &'a impl kube::Resource, key: &str) -> Option<&'a str> {
    object
        .meta()
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

#[test]
fn a_new_deployment_creates_its_replica_set_once() {
    let mut cluster = Cluster::new(deployment(3, rolling(json!("25%"), json!("25%"))));
    let plan = cluster.sync();
    let [ReplicaSetWrite::Create(rs)] = plan.replica_sets.as_slice() else {
        panic!("{plan:#?}");
    };
    let hash = rs.metadata.labels.as_ref().unwrap()[POD_TEMPLATE_HASH].clone();
    assert_eq!(
        rs.metadata.name.as_deref(),
        Some(format!("web-{hash}").as_str())
    );
    assert_eq!(rs.metadata.labels.as_ref().unwrap()["app"], "web");
    let spec = rs.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(3));
    assert_eq!(
        spec.selector.match_labels.as_ref().unwrap()[POD_TEMPLATE_HASH],
        hash
    );
    let template_labels = spec
        .template
        .as_ref()
        .unwrap()
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap();
    assert_eq!(template_labels[POD_TEMPLATE_HASH], hash);
    let owner = &rs.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("Deployment", "web", "d-1")
    );
    assert_eq!(
        (owner.controller, owner.block_owner_deletion),
        (Some(true), Some(true))
    );
    assert_eq!(annotation(rs, REVISION), Some("1"));
    assert_eq!(annotation(rs, DESIRED_REPLICAS), Some("3"));
    assert_eq!(annotation(rs, MAX_REPLICAS), Some("4"));
    assert_eq!(
        annotation(rs, CHANGE_CAUSE),
        Some("kubectl create deployment web --image=nginx:1")
    );
    assert_eq!(plan.revision.as_deref(), Some("1"));
    let name = rs.metadata.name.clone().unwrap();
    assert_eq!(
        cluster.progressing(),
        (
            "True".into(),
            "NewReplicaSetCreated".into(),
            format!("Created new replica set {name:?}")
        )
    );

    // The next sync, before any pod exists, creates nothing more.
    let again = cluster.sync();
    assert!(again.replica_sets.is_empty(), "{again:#?}");
    assert_eq!(cluster.replica_sets.len(), 1);
}

#[test]
fn a_rolling_update_keeps_within_surge_and_unavailable_at_every_step() {
    let mut cluster = Cluster::new(deployment(10, rolling(json!("25%"), json!("25%"))));
    cluster.settle(|_| {});
    cluster.set_image("nginx:2");
    let (max_pods, min_available) = (10 + 3, 10 - 2);
    let mut steps = 0;
    cluster.settle(|c| {
        steps += 1;
        assert!(
            c.total(spec_replicas) <= max_pods,
            "step {steps}: {} pods wanted",
            c.total(spec_replicas)
        );
        assert!(
            c.total(status_replicas) <= max_pods,
            "step {steps}: {} pods",
            c.total(status_replicas)
        );
        assert!(
            c.total(available_replicas) >= min_available,
            "step {steps}: {} available",
            c.total(available_replicas)
        );
    });
    assert!(steps > 3, "the update took several steps ({steps})");
    assert_eq!(spec_replicas(cluster.by_revision(2)), 10);
    assert_eq!(spec_replicas(cluster.by_revision(1)), 0);
    let status = cluster.d.status.clone().unwrap();
    assert_eq!(
        (
            status.replicas,
            status.updated_replicas,
            status.available_replicas
        ),
        (Some(10), Some(10), Some(10))
    );
    assert_eq!(status.observed_generation, Some(2));
    let name = cluster.by_revision(2).metadata.name.clone().unwrap();
    assert_eq!(
        cluster.progressing(),
        (
            "True".into(),
            "NewReplicaSetAvailable".into(),
            format!("ReplicaSet {name:?} has successfully progressed.")
        )
    );
    assert_eq!(annotation(&cluster.d, REVISION), Some("2"));
}

/// The controller may sync again before the ReplicaSet controller has
/// caught up: an old ReplicaSet just scaled down still reports the pods
/// it is about to delete as available. Those must not be counted, or the
/// next sync scales down too far.
#[test]
fn stale_replica_set_status_keeps_the_rollout_within_surge_and_availability() {
    let mut cluster = Cluster::new(deployment(100, rolling(json!("25%"), json!("25%"))));
    cluster.settle(|_| {});
    cluster.set_image("nginx:2");
    let mut quiet_steps = 0;
    for step in 0..400 {
        let plan = cluster.sync();
        // What stays available once every ReplicaSet has done as told.
        let available: i32 = cluster
            .replica_sets
            .iter()
            .map(|rs| available_replicas(rs).min(spec_replicas(rs)))
            .sum();
        assert!(available >= 75, "step {step}: {available} available");
        // What exists once the new ReplicaSet has grown as told, while the
        // old ones still have the pods their status counts.
        let pods = cluster.total(|rs| spec_replicas(rs).max(status_replicas(rs)));
        assert!(pods <= 125, "step {step}: {pods} pods");
        // The new ReplicaSet's pods come up at once; the old ReplicaSets'
        // statuses catch up every fourth step only, counting meanwhile the
        // pods they were told to shed.
        if step % 4 == 3 {
            cluster.run_replica_sets();
        } else {
            cluster.run_new_replica_set();
        }
        cluster.now += SignedDuration::from_secs(1);
        let status = cluster.d.status.clone().unwrap();
        let quiet = plan.replica_sets.is_empty() && plan.status.is_none();
        quiet_steps = if quiet { quiet_steps + 1 } else { 0 };
        if quiet_steps > 4 && status::deployment_complete(&cluster.d, &status) {
            break;
        }
    }
    assert_eq!(spec_replicas(cluster.by_revision(2)), 100);
    assert_eq!(spec_replicas(cluster.by_revision(1)), 0);
}

#[test]
fn a_rolling_update_with_no_surge_never_exceeds_replicas() {
    let mut cluster = Cluster::new(deployment(4, rolling(json!(0), json!(1))));
    cluster.settle(|_| {});
    cluster.set_image("nginx:2");
    cluster.settle(|c| {
        assert!(c.total(spec_replicas) <= 4);
        assert!(c.total(available_replicas) >= 3);
    });
    assert_eq!(spec_replicas(cluster.by_revision(2)), 4);
}

#[test]
fn recreate_removes_old_pods_before_creating_new_ones() {
    let mut cluster = Cluster::new(deployment(3, json!({"type": "Recreate"})));
    cluster.settle(|_| {});
    cluster.set_image("nginx:2");
    let plan = cluster.sync();
    assert_eq!(
        plan.replica_sets.len(),
        1,
        "only the old ReplicaSet is scaled: {plan:#?}"
    );
    assert_eq!(spec_replicas(cluster.by_revision(1)), 0);
    // Its pods are still there: no new ReplicaSet yet.
    assert!(cluster.sync().replica_sets.is_empty());
    assert_eq!(cluster.replica_sets.len(), 1);
    cluster.run_replica_sets();
    cluster.sync();
    assert_eq!(cluster.replica_sets.len(), 2);
    assert_eq!(spec_replicas(cluster.by_revision(2)), 3);
    cluster.settle(|c| {
        let old = status_replicas(c.by_revision(1));
        assert!(old == 0, "old pods came back");
    });
}

#[test]
fn a_rollback_reuses_the_old_replica_set_with_the_next_revision() {
    let mut cluster = Cluster::new(deployment(3, rolling(json!(1), json!(0))));
    cluster.settle(|_| {});
    cluster.set_image("nginx:2");
    cluster.settle(|_| {});
    let original = cluster.by_revision(1).metadata.name.clone();
    cluster.set_image("nginx:1");
    let plan = cluster.sync();
    assert!(
        !plan
            .replica_sets
            .iter()
            .any(|w| matches!(w, ReplicaSetWrite::Create(_))),
        "{plan:#?}"
    );
    cluster.settle(|_| {});
    assert_eq!(cluster.replica_sets.len(), 2);
    let reused = cluster.by_revision(3);
    assert_eq!(reused.metadata.name, original);
    assert_eq!(annotation(reused, REVISION_HISTORY), Some("1"));
    assert_eq!(spec_replicas(reused), 3);
    assert_eq!(spec_replicas(cluster.by_revision(2)), 0);
    assert_eq!(annotation(&cluster.d, REVISION), Some("3"));
}

#[test]
fn old_replica_sets_beyond_the_history_limit_are_deleted_oldest_revision_first() {
    let mut cluster = Cluster::new(deployment(2, rolling(json!(1), json!(0))));
    cluster.change_spec(|spec| spec.revision_history_limit = Some(2));
    cluster.settle(|_| {});
    for version in 2..=5 {
        cluster.set_image(&format!("nginx:{version}"));
        cluster.settle(|_| {});
    }
    // One more sync after completion runs the cleanup of the last rollout.
    cluster.step();
    let mut revisions: Vec<i64> = cluster
        .replica_sets
        .iter()
        .map(revision::revision)
        .collect();
    revisions.sort();
    assert_eq!(revisions, [3, 4, 5]);
}

#[test]
fn a_paused_deployment_scales_but_does_not_roll_out() {
    let mut cluster = Cluster::new(deployment(3, rolling(json!("25%"), json!("25%"))));
    cluster.settle(|_| {});
    cluster.change_spec(|spec| spec.paused = Some(true));
    cluster.set_image("nginx:2");
    cluster.change_spec(|spec| spec.replicas = Some(5));
    for _ in 0..5 {
        cluster.step();
    }
    assert_eq!(
        cluster.replica_sets.len(),
        1,
        "no new ReplicaSet while paused"
    );
    assert_eq!(spec_replicas(cluster.by_revision(1)), 5);
    assert_eq!(
        cluster.progressing(),
        (
            "Unknown".into(),
            "DeploymentPaused".into(),
            "Deployment is paused".into()
        )
    );

    cluster.change_spec(|spec| spec.paused = Some(false));
    cluster.sync();
    assert_eq!(cluster.replica_sets.len(), 2);
    assert_eq!(cluster.progressing().1, "NewReplicaSetCreated");
    cluster.settle(|_| {});
    assert_eq!(spec_replicas(cluster.by_revision(2)), 5);
}

#[test]
fn scaling_mid_rollout_shares_the_change_within_the_bounds() {
    let mut cluster = Cluster::new(deployment(10, rolling(json!("25%"), json!("25%"))));
    cluster.settle(|_| {});
    cluster.set_image("nginx:2");
    cluster.step();
    cluster.step();
    assert!(spec_replicas(cluster.by_revision(1)) > 0 && spec_replicas(cluster.by_revision(2)) > 0);
    let (old, new) = (
        spec_replicas(cluster.by_revision(1)),
        spec_replicas(cluster.by_revision(2)),
    );
    cluster.change_spec(|spec| spec.replicas = Some(20));
    cluster.step();
    let (old2, new2) = (
        spec_replicas(cluster.by_revision(1)),
        spec_replicas(cluster.by_revision(2)),
    );
    assert_eq!(old2 + new2, 20 + 5, "replicas + maxSurge: {old2} + {new2}");
    assert!(
        old2 > old && new2 > new,
        "both grew: {old}->{old2}, {new}->{new2}"
    );
    cluster.settle(|c| assert!(c.total(spec_replicas) <= 25));
    assert_eq!(spec_replicas(cluster.by_revision(2)), 20);
}

#[test]
fn status_reports_availability_and_a_missed_progress_deadline() {
    let mut cluster = Cluster::new(deployment(4, rolling(json!(1), json!(1))));
    cluster.sync();
    let available = |c: &Cluster| {
        let cond = get_condition(c.d.status.as_ref().unwrap(), status::AVAILABLE)
            .unwrap()
            .clone();
        (cond.status, cond.reason.unwrap())
    };
    assert_eq!(
        available(&cluster),
        ("False".into(), "MinimumReplicasUnavailable".into())
    );
    // Pods that never become available: no progress past the deadline.
    let mut plan = cluster.sync();
    assert!(
        plan.requeue_after.is_some(),
        "a rollout in progress is looked at again by its deadline"
    );
    cluster.now += SignedDuration::from_secs(601);
    plan = cluster.sync();
    let name = cluster.replica_sets[0].metadata.name.clone().unwrap();
    assert_eq!(
        cluster.progressing(),
        (
            "False".into(),
            "ProgressDeadlineExceeded".into(),
            format!("ReplicaSet {name:?} has timed out progressing.")
        )
    );
    assert_eq!(plan.requeue_after, None);
    cluster.settle(|_| {});
    assert_eq!(
        available(&cluster),
        ("True".into(), "MinimumReplicasAvailable".into())
    );
    assert_eq!(cluster.progressing().1, "NewReplicaSetAvailable");
    let status = cluster.d.status.clone().unwrap();
    assert_eq!(
        (status.ready_replicas, status.unavailable_replicas),
        (Some(4), Some(0))
    );
}

#[test]
fn a_name_taken_by_another_template_raises_the_collision_count() {
    let mut cluster = Cluster::new(deployment(1, rolling(json!(1), json!(0))));
    let plan = cluster.sync();
    let ReplicaSetWrite::Create(mut squatter) = plan.replica_sets[0].clone() else {
        panic!()
    };
    cluster.replica_sets.clear();
    squatter.spec.as_mut().unwrap().template = serde_json::from_value(template("other")).ok();
    cluster.write(ReplicaSetWrite::Create(squatter.clone()));
    let plan = cluster.sync();
    assert!(plan
        .replica_sets
        .iter()
        .all(|w| !matches!(w, ReplicaSetWrite::Create(_))));
    assert_eq!(cluster.d.status.as_ref().unwrap().collision_count, Some(1));
    let plan = cluster.sync();
    let Some(ReplicaSetWrite::Create(rs)) = plan
        .replica_sets
        .iter()
        .find(|w| matches!(w, ReplicaSetWrite::Create(_)))
    else {
        panic!("{plan:#?}")
    };
    assert_ne!(rs.metadata.name, squatter.metadata.name);
}

#[test]
fn an_orphan_matching_the_template_is_adopted_not_duplicated() {
    let mut cluster = Cluster::new(deployment(2, rolling(json!(1), json!(0))));
    let plan = cluster.sync();
    let ReplicaSetWrite::Create(mut orphan) = plan.replica_sets[0].clone() else {
        panic!()
    };
    cluster.replica_sets.clear();
    orphan.metadata.owner_references = None;
    cluster.write(ReplicaSetWrite::Create(orphan));
    let plan = cluster.sync();
    let [ReplicaSetWrite::Update(adopted)] = plan.replica_sets.as_slice() else {
        panic!("{plan:#?}")
    };
    assert_eq!(
        adopted.metadata.owner_references.as_ref().unwrap()[0].uid,
        "d-1"
    );
    cluster.settle(|_| {});
    assert_eq!(cluster.replica_sets.len(), 1);
}

#[test]
fn a_deployment_being_deleted_only_reports_status() {
    let mut cluster = Cluster::new(deployment(2, rolling(json!(1), json!(0))));
    cluster.settle(|_| {});
    cluster.set_image("nginx:2");
    cluster.d.metadata.deletion_timestamp = Some(Time(cluster.now));
    let plan = cluster.sync();
    assert!(plan.replica_sets.is_empty(), "{plan:#?}");
    assert_eq!(
        cluster.d.status.as_ref().unwrap().observed_generation,
        Some(2)
    );
}

#[test]
fn resuming_a_stalled_rollout_says_so() {
    let mut cluster = Cluster::new(deployment(2, rolling(json!(1), json!(0))));
    cluster.settle(|_| {});
    cluster.set_image("nginx:2");
    cluster.sync();
    cluster.change_spec(|spec| spec.paused = Some(true));
    cluster.sync();
    assert_eq!(cluster.progressing().1, "DeploymentPaused");
    cluster.change_spec(|spec| spec.paused = Some(false));
    cluster.sync();
    assert_eq!(
        cluster.progressing(),
        (
            "Unknown".into(),
            "DeploymentResumed".into(),
            "Deployment is resumed".into()
        )
    );
}
