use serde_json::{json, Value};

use super::*;

const NOW: Timestamp = Timestamp::constant(1_750_000_000, 0);

fn pdb(spec: Value, status: Value) -> PodDisruptionBudget {
    let mut spec = spec;
    spec["selector"] = json!({"matchLabels": {"app": "web"}});
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default", "generation": 3},
        "spec": spec, "status": status,
    }))
    .unwrap()
}

fn pod(name: &str, ready: bool, owner: &str) -> Arc<Pod> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                                              "uid": owner, "controller": true}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        }))
        .unwrap(),
    )
}

/// A Deployment of `replicas` whose ReplicaSet has uid `rs-uid`.
fn deployment(replicas: i32) -> Controllers {
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "rs", "uid": "rs-uid", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "d-uid", "controller": true}]},
        "spec": {"replicas": 1, "selector": {}},
    }))
    .unwrap();
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "uid": "d-uid"},
        "spec": {"replicas": replicas, "selector": {}, "template": {}},
    }))
    .unwrap();
    Controllers {
        replica_sets: vec![Arc::new(rs)],
        deployments: vec![Arc::new(deployment)],
        ..Default::default()
    }
}

#[test]
fn min_available_as_a_count_counts_the_selected_pods() {
    let budget = pdb(json!({"minAvailable": 2}), json!({}));
    let pods = vec![
        pod("a", true, "rs-uid"),
        pod("b", true, "rs-uid"),
        pod("c", true, "rs-uid"),
    ];
    let (status, _) = status(&budget, &pods, &Controllers::default(), NOW);
    assert_eq!(
        (
            status.expected_pods,
            status.current_healthy,
            status.desired_healthy,
            status.disruptions_allowed
        ),
        (3, 3, 2, 1)
    );
    assert_eq!(status.observed_generation, Some(3));
    let condition = &status.conditions.as_ref().unwrap()[0];
    assert_eq!(
        (
            condition.type_.as_str(),
            condition.status.as_str(),
            condition.reason.as_str()
        ),
        ("DisruptionAllowed", "True", "SufficientPods")
    );

    let (status, _) = status_of(&budget, &pods[..2]);
    assert_eq!(status.disruptions_allowed, 0);
    assert_eq!(
        status.conditions.as_ref().unwrap()[0].reason,
        "InsufficientPods"
    );
}

fn status_of(
    budget: &PodDisruptionBudget,
    pods: &[Arc<Pod>],
) -> (PodDisruptionBudgetStatus, Option<Timestamp>) {
    status(budget, pods, &Controllers::default(), NOW)
}

#[test]
fn percentages_and_max_unavailable_scale_with_the_controller() {
    let pods = vec![
        pod("a", true, "rs-uid"),
        pod("b", true, "rs-uid"),
        pod("c", false, "rs-uid"),
    ];
    let controllers = deployment(4);
    let half = pdb(json!({"minAvailable": "50%"}), json!({}));
    let (s, _) = status(&half, &pods, &controllers, NOW);
    assert_eq!(
        (
            s.expected_pods,
            s.desired_healthy,
            s.current_healthy,
            s.disruptions_allowed
        ),
        (4, 2, 2, 0)
    );
    let one = pdb(json!({"maxUnavailable": 1}), json!({}));
    let (s, _) = status(&one, &pods, &controllers, NOW);
    assert_eq!(
        (s.expected_pods, s.desired_healthy, s.disruptions_allowed),
        (4, 3, 0)
    );
    let quarter = pdb(json!({"maxUnavailable": "25%"}), json!({}));
    let (s, _) = status(&quarter, &pods, &deployment(2), NOW);
    assert_eq!(
        (s.expected_pods, s.desired_healthy, s.disruptions_allowed),
        (2, 1, 1)
    );
}

#[test]
fn pods_without_a_known_controller_fail_a_percentage_budget() {
    let budget = pdb(json!({"maxUnavailable": 1}), json!({}));
    let pods = vec![pod("a", true, "unknown")];
    let (s, _) = status_of(&budget, &pods);
    assert_eq!(s.disruptions_allowed, 0);
    let condition = &s.conditions.as_ref().unwrap()[0];
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "SyncFailed")
    );
    assert!(
        condition
            .message
            .contains("found no controllers for pod \"a\""),
        "{}",
        condition.message
    );
}

#[test]
fn evicted_pods_do_not_count_until_they_go_or_time_out() {
    let recent = Time(NOW.checked_sub(SignedDuration::from_secs(30)).unwrap());
    let old = Time(NOW.checked_sub(SignedDuration::from_secs(300)).unwrap());
    let budget = pdb(
        json!({"minAvailable": 1}),
        json!({"disruptionsAllowed": 0, "disruptedPods": {"a": recent, "b": old, "gone": recent}}),
    );
    let pods = vec![pod("a", true, "rs-uid"), pod("b", true, "rs-uid")];
    let (s, recheck) = status_of(&budget, &pods);
    let disrupted: Vec<&String> = s.disrupted_pods.as_ref().unwrap().keys().collect();
    assert_eq!(disrupted, ["a"], "b timed out, gone went");
    assert_eq!(s.current_healthy, 1);
    assert_eq!(recheck, recent.0.checked_add(DELETION_TIMEOUT).ok());
}

#[test]
fn only_real_changes_are_written() {
    let budget = pdb(json!({"minAvailable": 1}), json!({}));
    let pods = vec![pod("a", true, "rs-uid")];
    let (first, _) = status_of(&budget, &pods);
    assert!(changed(None, &first));
    let later = NOW.checked_add(SignedDuration::from_secs(60)).unwrap();
    let (again, _) = status(&budget, &pods, &Controllers::default(), later);
    assert!(!changed(Some(&first), &again));
    assert_eq!(scaled(&IntOrString::String("33%".into()), 10), Ok(4));
    assert!(scaled(&IntOrString::String("x".into()), 10).is_err());
}
