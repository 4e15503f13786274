//! Plans of whole Job syncs, driven with objects.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::backoff::BackoffRecord;
use super::conditions::true_condition;
use super::fixtures::{ago, job, pod, NOW};
use super::plan::{plan, Input, Plan};

fn run(job: &Job, pods: Vec<Pod>) -> Plan {
    run_with(job, pods, BackoffRecord::default(), &HashSet::new())
}

fn run_with(job: &Job, pods: Vec<Pod>, backoff: BackoffRecord, removing: &HashSet<String>) -> Plan {
    let pods: Vec<Arc<Pod>> = pods.into_iter().map(Arc::new).collect();
    plan(&Input {
        job,
        pods: &pods,
        removing_finalizers: removing,
        expectations_satisfied: true,
        backoff,
        now: NOW,
    })
}

fn names(pods: &[Arc<Pod>]) -> Vec<&str> {
    pods.iter()
        .map(|p| p.metadata.name.as_deref().unwrap())
        .collect()
}

fn condition<'a>(plan: &'a Plan, type_: &str) -> Option<&'a JobCondition> {
    true_condition(plan.status.conditions.as_deref().unwrap_or_default(), type_)
}

fn with_spec(mut job: Job, spec: serde_json::Value) -> Job {
    let mut value = serde_json::to_value(&job).unwrap();
    for (k, v) in spec.as_object().unwrap() {
        value["spec"][k] = v.clone();
    }
    job = serde_json::from_value(value).unwrap();
    job
}

#[test]
fn a_new_job_starts_parallelism_pods() {
    let mut j = job("pi", 5, 2);
    j.status = None;
    let plan = run(&j, vec![]);
    assert_eq!(plan.create, [None, None]);
    assert_eq!(plan.status.active, Some(2));
    assert_eq!(plan.status.start_time.as_ref().map(|t| t.0), Some(NOW));
    assert!(!plan.uncounted_grew);
    // Never more than the completions left.
    assert_eq!(run(&job("pi", 1, 4), vec![]).create, [None]);
}

#[test]
fn finished_pods_are_counted_through_uncounted_then_let_go() {
    let j = job("pi", 5, 2);
    let pods = vec![
        pod("a", &j).exited(0, 5).build(),
        pod("b", &j).exited(0, 3).build(),
        pod("c", &j).ready().build(),
    ];
    let plan = run(&j, pods);
    assert!(plan.uncounted_grew);
    assert_eq!(
        plan.uncounted.succeeded.as_deref(),
        Some(&["uid-a".to_string(), "uid-b".into()][..])
    );
    assert_eq!(names(&plan.remove_finalizers), ["a", "b"]);
    assert_eq!(plan.status.succeeded, Some(2));
    assert_eq!(plan.status.uncounted_terminated_pods, None);
    assert_eq!((plan.status.active, plan.status.ready), (Some(2), Some(1)));
    assert_eq!(plan.create, [None], "one more to reach parallelism 2");
}

#[test]
fn a_pod_is_never_counted_twice() {
    let mut j = job("pi", 5, 2);
    // Counted in an earlier sync: in uncounted, finalizer still seen.
    j.status.as_mut().unwrap().uncounted_terminated_pods =
        Some(serde_json::from_value(json!({"succeeded": ["uid-a"]})).unwrap());
    j.status.as_mut().unwrap().succeeded = Some(1);
    let pods = vec![
        pod("a", &j).exited(0, 5).build(),
        // Counted and let go: no finalizer.
        pod("old", &j).exited(0, 50).untracked().build(),
        // Finalizer removed by the last sync, the cache not caught up yet.
        pod("stale", &j).exited(0, 9).build(),
    ];
    let removing: HashSet<String> = ["uid-stale".to_string()].into();
    let plan = run_with(&j, pods, BackoffRecord::default(), &removing);
    assert!(!plan.uncounted_grew);
    assert_eq!(names(&plan.remove_finalizers), ["a"]);
    assert_eq!(plan.status.succeeded, Some(2), "1 counted + uid-a");
}

#[test]
fn reaching_completions_completes_the_job() {
    let mut j = job("pi", 2, 2);
    j.status.as_mut().unwrap().succeeded = Some(1);
    let plan = run(&j, vec![pod("b", &j).exited(0, 1).build()]);
    assert!(plan.create.is_empty() && plan.delete.is_empty());
    assert_eq!(plan.status.succeeded, Some(2));
    assert_eq!(
        condition(&plan, "SuccessCriteriaMet")
            .unwrap()
            .reason
            .as_deref(),
        Some("CompletionsReached")
    );
    assert!(condition(&plan, "Complete").is_some());
    assert_eq!(plan.status.completion_time.as_ref().map(|t| t.0), Some(NOW));
    assert_eq!(plan.status.active, None);
}

#[test]
fn a_work_queue_job_completes_when_one_succeeded_and_none_run() {
    let j = with_spec(job("q", 1, 3), json!({"completions": null}));
    let plan = run(
        &j,
        vec![
            pod("a", &j).exited(0, 1).build(),
            pod("b", &j).ready().build(),
        ],
    );
    assert!(plan.create.is_empty(), "after a success, no new pods");
    assert!(condition(&plan, "Complete").is_none(), "b still runs");
    let plan = run(&j, vec![pod("a", &j).exited(0, 1).build()]);
    assert!(condition(&plan, "Complete").is_some());
}

#[test]
fn failures_beyond_the_backoff_limit_fail_the_job_after_its_pods_stop() {
    let mut j = with_spec(job("pi", 5, 2), json!({"backoffLimit": 1}));
    j.status.as_mut().unwrap().failed = Some(1);
    let pods = vec![
        pod("f", &j).exited(1, 2).build(),
        pod("r", &j).ready().build(),
    ];
    let plan = run(&j, pods);
    assert_eq!(plan.status.failed, Some(2));
    let target = condition(&plan, "FailureTarget").unwrap();
    assert_eq!(target.reason.as_deref(), Some("BackoffLimitExceeded"));
    assert!(condition(&plan, "Failed").is_none(), "r is still running");
    assert_eq!(names(&plan.delete), ["r"]);
    assert!(plan.create.is_empty());

    // Next sync: the target stands; r, stopping, counts as failed and is let go.
    let mut j2 = j.clone();
    j2.status = Some(plan.status.clone());
    let plan = run(&j2, vec![pod("r", &j).ready().terminating().build()]);
    assert_eq!(plan.status.failed, Some(3));
    assert_eq!(names(&plan.remove_finalizers), ["r"]);
    assert!(
        condition(&plan, "Failed").is_none(),
        "r is still terminating"
    );

    // Once r is gone, the Job has Failed.
    j2.status = Some(plan.status.clone());
    let plan = run(&j2, vec![]);
    let failed = condition(&plan, "Failed").unwrap();
    assert_eq!(failed.reason.as_deref(), Some("BackoffLimitExceeded"));
    assert_eq!(
        failed.message.as_deref(),
        Some("Job has reached the specified backoff limit")
    );
    assert!(plan.status.completion_time.is_none());
}

#[test]
fn restarts_of_on_failure_pods_count_against_the_backoff_limit() {
    let mut j = with_spec(job("pi", 1, 1), json!({"backoffLimit": 2}));
    j.spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .restart_policy = Some("OnFailure".into());
    assert!(condition(
        &run(&j, vec![pod("a", &j).restarts(1).build()]),
        "FailureTarget"
    )
    .is_none());
    assert!(condition(
        &run(&j, vec![pod("a", &j).restarts(2).build()]),
        "FailureTarget"
    )
    .is_some());
}

#[test]
fn replacements_wait_for_the_back_off() {
    let j = job("pi", 3, 1);
    let plan = run(&j, vec![pod("f", &j).exited(1, 3).build()]);
    assert_eq!(plan.status.failed, Some(1));
    assert!(
        plan.create.is_empty(),
        "10s back-off after the first failure"
    );
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(7)));
    assert_eq!(plan.backoff.failures_after_last_success, 1);

    // Second failure 1s ago: 20s from it.
    let mut j2 = j.clone();
    j2.status.as_mut().unwrap().failed = Some(1);
    let plan = run_with(
        &j2,
        vec![pod("g", &j).exited(1, 1).build()],
        plan.backoff,
        &HashSet::new(),
    );
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(19)));
    assert!(plan.create.is_empty());

    // Once the back-off has passed, the replacement is created.
    let record = BackoffRecord {
        failures_after_last_success: 1,
        last_failure: Some(ago(11)),
    };
    let plan = run_with(&j2, vec![], record, &HashSet::new());
    assert_eq!(plan.create, [None]);
}

#[test]
fn the_active_deadline_fails_the_job_and_stops_its_pods() {
    let j = with_spec(job("pi", 3, 1), json!({"activeDeadlineSeconds": 30}));
    let plan = run(&j, vec![pod("r", &j).ready().build()]);
    assert_eq!(
        condition(&plan, "FailureTarget").unwrap().reason.as_deref(),
        Some("DeadlineExceeded")
    );
    assert_eq!(names(&plan.delete), ["r"]);
    let j = with_spec(job("pi", 3, 1), json!({"activeDeadlineSeconds": 100}));
    let plan = run(&j, vec![pod("r", &j).ready().build()]);
    assert!(condition(&plan, "FailureTarget").is_none());
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(40)));
}

#[test]
fn pod_failure_policy_fails_ignores_or_counts() {
    let policy = json!({"podFailurePolicy": {"rules": [
        {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    ]}, "podReplacementPolicy": "Failed"});
    let j = with_spec(job("pi", 3, 1), policy);
    let plan = run(&j, vec![pod("a", &j).exited(42, 1).build()]);
    let target = condition(&plan, "FailureTarget").unwrap();
    assert_eq!(target.reason.as_deref(), Some("PodFailurePolicy"));
    assert!(target
        .message
        .as_deref()
        .unwrap()
        .contains("exit code 42 matching FailJob rule at index 0"));
    assert!(condition(&plan, "Failed").is_some(), "no pod left running");

    let plan = run(
        &j,
        vec![pod("b", &j)
            .exited(137, 1)
            .condition("DisruptionTarget")
            .build()],
    );
    assert_eq!(plan.status.failed, None, "ignored");
    assert_eq!(names(&plan.remove_finalizers), ["b"]);
    assert_eq!(plan.create, [None], "replaced without back-off");

    let plan = run(&j, vec![pod("c", &j).exited(1, 1).build()]);
    assert_eq!(plan.status.failed, Some(1));
    // A pod being deleted is judged only once it has Failed.
    let plan = run(&j, vec![pod("d", &j).ready().terminating().build()]);
    assert!(plan.remove_finalizers.is_empty());
}

#[test]
fn suspending_stops_the_pods_without_counting_them_and_resuming_restarts_the_clock() {
    let j = with_spec(job("pi", 3, 2), json!({"suspend": true}));
    let plan = run(&j, vec![pod("a", &j).ready().build()]);
    assert_eq!(names(&plan.delete), ["a"]);
    assert!(plan.create.is_empty());
    assert_eq!(
        condition(&plan, "Suspended").unwrap().reason.as_deref(),
        Some("JobSuspended")
    );
    let mut suspended = j.clone();
    suspended.status = Some(plan.status.clone());
    let plan = run(&suspended, vec![pod("a", &j).ready().terminating().build()]);
    assert_eq!(names(&plan.remove_finalizers), ["a"]);
    assert_eq!(plan.status.failed, None);

    let mut resumed = with_spec(suspended, json!({"suspend": false}));
    resumed.status.as_mut().unwrap().start_time = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(ago(600)),
    );
    let plan = run(&resumed, vec![]);
    assert_eq!(plan.create.len(), 2);
    assert_eq!(plan.status.start_time.as_ref().map(|t| t.0), Some(NOW));
    let suspended = plan
        .status
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == "Suspended")
        .unwrap();
    assert_eq!(
        (suspended.status.as_str(), suspended.reason.as_deref()),
        ("False", Some("JobResumed"))
    );
}

#[test]
fn indexed_jobs_run_each_missing_index_once() {
    let j = with_spec(job("idx", 4, 2), json!({"completionMode": "Indexed"}));
    let pods = vec![
        pod("i0", &j).index(0).exited(0, 1).build(),
        pod("i1", &j).index(1).ready().build(),
        pod("i1-again", &j).index(1).build(),
        pod("i9", &j).index(9).build(),
    ];
    let plan = run(&j, pods);
    assert_eq!(plan.status.completed_indexes.as_deref(), Some("0"));
    assert_eq!(plan.status.succeeded, Some(1));
    assert_eq!(names(&plan.delete), ["i1-again", "i9"]);
    assert_eq!(plan.create, [Some(2)]);

    let mut j2 = j.clone();
    j2.status.as_mut().unwrap().completed_indexes = Some("0-1,3".into());
    let plan = run(&j2, vec![pod("i2", &j).index(2).exited(0, 1).build()]);
    assert_eq!(plan.status.completed_indexes.as_deref(), Some("0-3"));
    assert!(condition(&plan, "Complete").is_some());
}

#[test]
fn stale_expectations_hold_creations() {
    let j = job("pi", 5, 2);
    let pods: Vec<Arc<Pod>> = vec![];
    let plan = plan(&Input {
        job: &j,
        pods: &pods,
        removing_finalizers: &HashSet::new(),
        expectations_satisfied: false,
        backoff: BackoffRecord::default(),
        now: NOW,
    });
    assert!(plan.create.is_empty());
}
