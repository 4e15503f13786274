//! The pure part of a Job sync: which finished pods it counts, whether
//! the Job is done (completions reached, backoffLimit, deadline,
//! podFailurePolicy), which pods it creates or deletes, and the status it
//! writes. Nothing here talks to the API.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::{Job, JobSpec, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::backoff::BackoffRecord;
use super::conditions::{self, true_condition};
use super::failure_policy::{judge, Verdict};
use super::indexes;
use super::tracking::{finish_time, has_finalizer, is_failed, is_terminating};
use crate::common::pods::{is_active, is_ready, phase};
use crate::replicaset::ranking::pods_to_delete;

/// At most this many pods are created or deleted by one sync
/// (kube's `MaxPodCreateDeletePerSync`).
pub const MAX_POD_CREATE_DELETE_PER_SYNC: usize = 500;

/// What a sync reads.
pub struct Input<'a> {
    pub job: &'a Job,
    /// The pods controlled by the Job (any phase).
    pub pods: &'a [Arc<Pod>],
    /// Pods whose finalizer this controller removed, not yet observed.
    pub removing_finalizers: &'a HashSet<String>,
    /// The last sync's creates and deletes are observed.
    pub expectations_satisfied: bool,
    pub backoff: BackoffRecord,
    pub now: Timestamp,
}

/// What a sync does, in order: write `uncounted` (when `uncounted_grew`),
/// remove finalizers, delete and create pods, write `status`.
#[derive(Debug, Default)]
pub struct Plan {
    pub uncounted: UncountedTerminatedPods,
    pub uncounted_grew: bool,
    pub remove_finalizers: Vec<Arc<Pod>>,
    /// One entry per pod to create: its completion index when Indexed.
    pub create: Vec<Option<i32>>,
    pub delete: Vec<Arc<Pod>>,
    /// The status after all of it, with `uncounted` folded into the counts.
    pub status: JobStatus,
    pub backoff: BackoffRecord,
    pub requeue_after: Option<Duration>,
}

/// The spec as the controller reads it, defaults applied.
struct Spec<'a> {
    completions: Option<i32>,
    parallelism: i32,
    backoff_limit: i32,
    indexed: bool,
    suspend: bool,
    spec: Option<&'a JobSpec>,
}

impl<'a> Spec<'a> {
    fn of(job: &'a Job) -> Spec<'a> {
        let spec = job.spec.as_ref();
        Spec {
            completions: spec.and_then(|s| s.completions),
            parallelism: spec.and_then(|s| s.parallelism).unwrap_or(1).max(0),
            backoff_limit: spec.and_then(|s| s.backoff_limit).unwrap_or(6),
            indexed: spec.and_then(|s| s.completion_mode.as_deref()) == Some("Indexed"),
            suspend: spec.and_then(|s| s.suspend).unwrap_or(false),
            spec,
        }
    }
}

/// A decided end: the condition type, reason and message.
#[derive(Debug, Clone, PartialEq)]
struct Finish {
    interim: &'static str,
    last: &'static str,
    reason: String,
    message: String,
}

fn failure(reason: &str, message: String) -> Finish {
    Finish {
        interim: conditions::FAILURE_TARGET,
        last: conditions::FAILED,
        reason: reason.into(),
        message,
    }
}

/// Plans one sync of a Job that is not finished and not being deleted.
pub fn plan(input: &Input) -> Plan {
    let job = input.job;
    let spec = Spec::of(job);
    let old = job.status.clone().unwrap_or_default();
    let mut conditions = old.conditions.clone().unwrap_or_default();
    let mut finish = decided(&conditions);
    let mut plan = Plan {
        backoff: input.backoff,
        ..Plan::default()
    };
    let mut uncounted = Uncounted::of(&old);
    let counted = count_finished(input, &spec, finish.as_ref(), &mut uncounted, &mut plan);
    plan.backoff = input
        .backoff
        .update(&counted.succeeded_at, &counted.failed_at);

    let active: Vec<Arc<Pod>> = input
        .pods
        .iter()
        .filter(|p| is_active(p))
        .cloned()
        .collect();
    let terminating = input.pods.iter().filter(|p| is_terminating(p)).count();
    let mut completed = completed_indexes(input, &spec, &old, &uncounted);
    let succeeded = match spec.indexed {
        true => completed.len() as i32,
        false => old.succeeded.unwrap_or(0) + uncounted.succeeded.len() as i32,
    };
    let failed = old.failed.unwrap_or(0) + uncounted.failed.len() as i32;

    let mut status = old.clone();
    if !spec.suspend && status.start_time.is_none() {
        status.start_time = Some(Time(input.now));
    }
    resume_or_suspend(&spec, &mut conditions, &mut status, input.now);
    if finish.is_none() {
        finish = counted.fail_job.map(|m| failure("PodFailurePolicy", m));
    }
    if finish.is_none() && !spec.suspend {
        finish = past_limits(&spec, &active, failed, &status, input.now).or_else(|| {
            completions_reached(&spec, succeeded, active.len()).then(|| Finish {
                interim: conditions::SUCCESS_CRITERIA_MET,
                last: conditions::COMPLETE,
                reason: "CompletionsReached".into(),
                message: "Reached expected number of succeeded pods".into(),
            })
        })
    }

    let mut active_count = active.len();
    if let Some(finish) = &finish {
        conditions::set(
            &mut conditions,
            finish.interim,
            "True",
            &finish.reason,
            &finish.message,
            input.now,
        );
        if active.is_empty() && terminating == 0 {
            conditions::set(
                &mut conditions,
                finish.last,
                "True",
                &finish.reason,
                &finish.message,
                input.now,
            );
            if finish.last == conditions::COMPLETE {
                status.completion_time = Some(Time(input.now));
            }
        }
        plan.delete = active.clone();
        active_count = 0;
    } else if spec.suspend {
        plan.delete = active.clone();
        active_count = 0;
    } else if input.expectations_satisfied {
        let delete = manage(input, &spec, &active, succeeded, &completed, &mut plan);
        active_count = active.len() + plan.create.len() - delete;
    }

    if spec.indexed {
        completed.retain(|i| spec.completions.is_some_and(|c| *i < c));
        status.completed_indexes = Some(indexes::format(&completed));
    }
    status.active = Some(active_count as i32).filter(|n| *n > 0);
    status.ready = Some(active.iter().filter(|p| is_ready(p)).count() as i32);
    status.terminating = Some((terminating + plan.delete.len()) as i32);
    status.succeeded = Some(succeeded).filter(|n| *n > 0);
    status.failed = Some(failed).filter(|n| *n > 0);
    status.conditions = Some(conditions).filter(|c| !c.is_empty());
    status.uncounted_terminated_pods = None;
    plan.uncounted = uncounted.into_status();
    plan.requeue_after = requeue_after(input, &spec, &status, finish.is_some(), &plan);
    plan.status = status;
    plan
}

/// The end already decided in an earlier sync, if any.
fn decided(conditions: &[k8s_openapi::api::batch::v1::JobCondition]) -> Option<Finish> {
    for (interim, last) in [
        (conditions::FAILURE_TARGET, conditions::FAILED),
        (conditions::SUCCESS_CRITERIA_MET, conditions::COMPLETE),
    ] {
        if let Some(c) = true_condition(conditions, interim) {
            return Some(Finish {
                interim,
                last,
                reason: c.reason.clone().unwrap_or_default(),
                message: c.message.clone().unwrap_or_default(),
            });
        }
    }
    None
}

/// `status.uncountedTerminatedPods` as sets.
struct Uncounted {
    succeeded: BTreeSet<String>,
    failed: BTreeSet<String>,
    grew: bool,
}

impl Uncounted {
    fn of(status: &JobStatus) -> Uncounted {
        let u = status.uncounted_terminated_pods.clone().unwrap_or_default();
        Uncounted {
            succeeded: u.succeeded.unwrap_or_default().into_iter().collect(),
            failed: u.failed.unwrap_or_default().into_iter().collect(),
            grew: false,
        }
    }

    fn contains(&self, uid: &str) -> bool {
        self.succeeded.contains(uid) || self.failed.contains(uid)
    }

    fn into_status(self) -> UncountedTerminatedPods {
        let list =
            |s: BTreeSet<String>| Some(s.into_iter().collect::<Vec<_>>()).filter(|l| !l.is_empty());
        UncountedTerminatedPods {
            succeeded: list(self.succeeded),
            failed: list(self.failed),
        }
    }
}

/// What counting newly finished pods found.
#[derive(Default)]
struct Counted {
    succeeded_at: Vec<Timestamp>,
    failed_at: Vec<Timestamp>,
    /// A FailJob rule matched, with its message.
    fail_job: Option<String>,
}

/// Adds the newly finished pods that carry the finalizer to `uncounted`
/// and plans the removal of their finalizers (kube's
/// `trackJobStatusAndRemoveFinalizers`). Once the Job's end is decided,
/// every pod is let go, and those not succeeded count as failed if it
/// failed. Pods deleted because the Job is suspended are not counted.
fn count_finished(
    input: &Input,
    spec: &Spec,
    finish: Option<&Finish>,
    uncounted: &mut Uncounted,
    plan: &mut Plan,
) -> Counted {
    let mut counted = Counted::default();
    let policy = spec.spec.and_then(|s| s.pod_failure_policy.as_ref());
    let failing = finish.is_some_and(|f| f.last == conditions::FAILED);
    for pod in input.pods {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if !has_finalizer(pod) || input.removing_finalizers.contains(&uid) {
            continue;
        }
        let succeeded = phase(pod) == "Succeeded";
        let failed = is_failed(pod, input.job);
        let suspended_away = spec.suspend && is_terminating(pod);
        if !(succeeded || failed || finish.is_some() || suspended_away) {
            continue;
        }
        if failed && policy.is_some() && phase(pod) != "Failed" && finish.is_none() {
            // The policy judges exit codes: wait for the pod to stop.
            continue;
        }
        plan.remove_finalizers.push(pod.clone());
        if uncounted.contains(&uid) || suspended_away {
            continue;
        }
        let finished = finish_time(pod).unwrap_or(input.now);
        if succeeded {
            if !spec.indexed || valid_index(pod, spec) {
                uncounted.succeeded.insert(uid);
                uncounted.grew = true;
                counted.succeeded_at.push(finished);
            }
            continue;
        }
        if !(failed || failing) {
            continue;
        }
        let verdict = match phase(pod) == "Failed" {
            true => judge(policy, pod),
            false => Verdict::Count,
        };
        match verdict {
            Verdict::Ignore => continue,
            Verdict::FailJob(message) => {
                counted.fail_job.get_or_insert(message);
            }
            Verdict::Count => {}
        }
        uncounted.failed.insert(uid);
        uncounted.grew = true;
        counted.failed_at.push(finished);
    }
    plan.uncounted_grew = uncounted.grew;
    counted
}

fn valid_index(pod: &Pod, spec: &Spec) -> bool {
    indexes::index_of(pod).is_some_and(|i| spec.completions.is_some_and(|c| i < c))
}

/// The completed indexes of an Indexed Job: those in its status and
/// those of succeeded pods now counted.
fn completed_indexes(
    input: &Input,
    spec: &Spec,
    old: &JobStatus,
    uncounted: &Uncounted,
) -> BTreeSet<i32> {
    if !spec.indexed {
        return BTreeSet::new();
    }
    let completions = spec.completions.unwrap_or(0);
    let mut completed = indexes::parse(old.completed_indexes.as_deref(), completions);
    for pod in input.pods {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        if uncounted.succeeded.contains(uid) {
            completed.extend(indexes::index_of(pod).filter(|i| *i < completions));
        }
    }
    completed
}

/// The `Suspended` condition and, on resume, a new startTime (so the
/// active deadline counts from the resume).
fn resume_or_suspend(
    spec: &Spec,
    conditions: &mut Vec<k8s_openapi::api::batch::v1::JobCondition>,
    status: &mut JobStatus,
    now: Timestamp,
) {
    let was_suspended = true_condition(conditions, conditions::SUSPENDED).is_some();
    if spec.suspend {
        conditions::set(
            conditions,
            conditions::SUSPENDED,
            "True",
            "JobSuspended",
            "Job suspended",
            now,
        );
    } else if was_suspended {
        conditions::set(
            conditions,
            conditions::SUSPENDED,
            "False",
            "JobResumed",
            "Job resumed",
            now,
        );
        status.start_time = Some(Time(now));
    }
}

/// The Job fails: too many failures, too many restarts of OnFailure
/// pods, or past its activeDeadlineSeconds.
fn past_limits(
    spec: &Spec,
    active: &[Arc<Pod>],
    failed: i32,
    status: &JobStatus,
    now: Timestamp,
) -> Option<Finish> {
    let on_failure = spec
        .spec
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.restart_policy.as_deref())
        == Some("OnFailure");
    let restarts: i32 = match on_failure {
        true => active.iter().map(|p| total_restarts(p)).sum(),
        false => 0,
    };
    let restarts_exceeded = on_failure
        && match spec.backoff_limit {
            0 => restarts > 0,
            limit => restarts >= limit,
        };
    if failed > spec.backoff_limit || restarts_exceeded {
        return Some(failure(
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit".into(),
        ));
    }
    let deadline = deadline(spec, status)?;
    (now >= deadline).then(|| {
        failure(
            "DeadlineExceeded",
            "Job was active longer than specified deadline".into(),
        )
    })
}

fn total_restarts(pod: &Pod) -> i32 {
    let Some(status) = &pod.status else { return 0 };
    let init = status.init_container_statuses.iter().flatten();
    let main = status.container_statuses.iter().flatten();
    init.chain(main).map(|c| c.restart_count).sum()
}

/// startTime + activeDeadlineSeconds.
fn deadline(spec: &Spec, status: &JobStatus) -> Option<Timestamp> {
    let seconds = spec.spec?.active_deadline_seconds?;
    let start = status.start_time.as_ref()?.0;
    start.checked_add(SignedDuration::from_secs(seconds)).ok()
}

/// Every completion is done: `completions` succeeded (or indexes
/// completed); without completions, one success and nothing running.
fn completions_reached(spec: &Spec, succeeded: i32, active: usize) -> bool {
    match spec.completions {
        Some(completions) => succeeded >= completions,
        None => succeeded > 0 && active == 0,
    }
}

/// Brings the active pods to what is wanted; fills `plan.create` and
/// `plan.delete`, returns how many active pods are deleted.
fn manage(
    input: &Input,
    spec: &Spec,
    active: &[Arc<Pod>],
    succeeded: i32,
    completed: &BTreeSet<i32>,
    plan: &mut Plan,
) -> usize {
    let (surplus, missing) = match spec.indexed {
        true => indexed_changes(spec, active, completed),
        false => {
            let want = match spec.completions {
                None if succeeded > 0 => active.len() as i32,
                None => spec.parallelism,
                Some(c) => (c - succeeded).clamp(0, spec.parallelism),
            } as usize;
            let surplus = pods_to_delete(active, active.len().saturating_sub(want));
            (surplus, vec![None; want.saturating_sub(active.len())])
        }
    };
    let deleted = surplus.len().min(MAX_POD_CREATE_DELETE_PER_SYNC);
    plan.delete = surplus.into_iter().take(deleted).collect();
    if !missing.is_empty() && plan.backoff.remaining(input.now).is_zero() {
        plan.create = missing
            .into_iter()
            .take(MAX_POD_CREATE_DELETE_PER_SYNC)
            .collect();
    }
    deleted
}

/// For an Indexed Job: the active pods to delete (index invalid, already
/// completed or duplicated, or over parallelism) and the lowest missing
/// indexes to create.
fn indexed_changes(
    spec: &Spec,
    active: &[Arc<Pod>],
    completed: &BTreeSet<i32>,
) -> (Vec<Arc<Pod>>, Vec<Option<i32>>) {
    let completions = spec.completions.unwrap_or(0);
    let mut running = BTreeSet::new();
    let mut keep = Vec::new();
    let mut surplus = Vec::new();
    for pod in active {
        match indexes::index_of(pod) {
            Some(i) if i < completions && !completed.contains(&i) && running.insert(i) => {
                keep.push(pod.clone())
            }
            _ => surplus.push(pod.clone()),
        }
    }
    let over = keep.len().saturating_sub(spec.parallelism as usize);
    surplus.extend(pods_to_delete(&keep, over));
    let room = (spec.parallelism as usize).saturating_sub(keep.len() - over);
    let missing = (0..completions)
        .filter(|i| !completed.contains(i) && !running.contains(i))
        .take(room)
        .map(Some)
        .collect();
    (surplus, missing)
}

/// When to look again without an event: at the active deadline, or when
/// the back-off lets a replacement be created.
fn requeue_after(
    input: &Input,
    spec: &Spec,
    status: &JobStatus,
    finishing: bool,
    plan: &Plan,
) -> Option<Duration> {
    if finishing || spec.suspend {
        return None;
    }
    let until_deadline = deadline(spec, status)
        .map(|d| Duration::try_from(d.duration_since(input.now)).unwrap_or_default());
    let backoff = Some(plan.backoff.remaining(input.now)).filter(|d| !d.is_zero());
    until_deadline.into_iter().chain(backoff).min()
}
