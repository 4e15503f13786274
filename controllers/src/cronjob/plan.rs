//! The pure part of a CronJob sync: its active Jobs and last success,
//! the history to prune, and whether to start a Job now (schedule, time
//! zone, suspend, starting deadline, concurrency policy). Nothing here
//! talks to the API.

use std::sync::Arc;
use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job, JobTemplateSpec};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::missed::{earliest, missed, TOO_MANY_MISSED};
use super::schedule::parse;
use crate::job::conditions::{true_condition, COMPLETE, FAILED};

/// The annotation with the time a CronJob's Job was scheduled for.
pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// An event to record on the CronJob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

/// What a sync does: delete (Replace) and prune Jobs, create one, write
/// the status, record events.
#[derive(Debug, Default)]
pub struct Plan {
    pub delete_active: Vec<Arc<Job>>,
    pub prune: Vec<Arc<Job>>,
    pub create: Option<Job>,
    pub status: CronJobStatus,
    pub events: Vec<Event>,
    pub requeue_after: Option<Duration>,
}

/// Plans one sync; `jobs` are the Jobs the CronJob controls, `local` the
/// controller-manager's own zone (used when spec.timeZone is unset).
pub fn plan(cj: &CronJob, jobs: &[Arc<Job>], local: &TimeZone, now: Timestamp) -> Plan {
    let mut plan = Plan::default();
    let old = cj.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let (active, finished): (Vec<_>, Vec<_>) =
        jobs.iter().cloned().partition(|j| finish(j).is_none());
    for job in &finished {
        if let Some((true, at)) = finish(job) {
            if status
                .last_successful_time
                .as_ref()
                .is_none_or(|t| t.0 < at)
            {
                status.last_successful_time = Some(Time(at));
            }
        }
    }
    plan.prune = history_to_prune(cj, &finished);
    let mut active = active;
    let decision = decide(cj, &active, local, now, &mut plan.events);
    if let Some((scheduled, tz)) = decision.start {
        if concurrency_policy(cj) == "Replace" {
            plan.delete_active = std::mem::take(&mut active);
        }
        let job = job_for(cj, scheduled, &tz);
        active.push(Arc::new(job.clone()));
        plan.create = Some(job);
        status.last_schedule_time = Some(Time(scheduled));
    }
    status.active =
        Some(active.iter().map(|j| reference(j)).collect::<Vec<_>>()).filter(|a| !a.is_empty());
    plan.status = status;
    plan.requeue_after = decision.next.map(|next| {
        // A little after, so that the time has certainly come (as kube).
        Duration::try_from(next.duration_since(now)).unwrap_or_default()
            + Duration::from_millis(100)
    });
    plan
}

/// Whether to start a Job now (for which time, in which zone) and when
/// the next time comes.
struct Decision {
    start: Option<(Timestamp, TimeZone)>,
    next: Option<Timestamp>,
}

fn decide(
    cj: &CronJob,
    active: &[Arc<Job>],
    local: &TimeZone,
    now: Timestamp,
    events: &mut Vec<Event>,
) -> Decision {
    let none = Decision {
        start: None,
        next: None,
    };
    let Some(spec) = cj.spec.as_ref() else {
        return none;
    };
    if cj.metadata.deletion_timestamp.is_some() {
        return none;
    }
    let tz = match spec.time_zone.as_deref() {
        None => local.clone(),
        Some(name) => match TimeZone::get(name) {
            Ok(tz) => tz,
            Err(_) => {
                events.push(warning(
                    "UnknownTimeZone",
                    format!("invalid timeZone: {name:?}; use an IANA name like Europe/Paris"),
                ));
                return none;
            }
        },
    };
    let schedule = match parse(&spec.schedule) {
        Ok(schedule) => schedule,
        Err(err) => {
            events.push(warning(
                "InvalidSchedule",
                format!("invalid schedule: {}: {}", spec.schedule, err.reason),
            ));
            return none;
        }
    };
    if spec.suspend == Some(true) {
        return none;
    }
    let next = schedule.next_after(now, &tz);
    let created = cj.metadata.creation_timestamp.as_ref().map_or(now, |t| t.0);
    let last = cj
        .status
        .as_ref()
        .and_then(|s| s.last_schedule_time.as_ref())
        .map(|t| t.0);
    let from = earliest(last, created, spec.starting_deadline_seconds, now);
    let found = missed(&schedule, &tz, from, now);
    if found.count > TOO_MANY_MISSED {
        events.push(warning(
            "TooManyMissedTimes",
            format!("too many missed start times: > {TOO_MANY_MISSED}. Set or decrease .spec.startingDeadlineSeconds or check clock skew"),
        ));
    }
    let Some(scheduled) = found.most_recent else {
        return Decision { start: None, next };
    };
    let too_late = spec
        .starting_deadline_seconds
        .and_then(|s| {
            scheduled
                .checked_add(jiff::SignedDuration::from_secs(s))
                .ok()
        })
        .is_some_and(|deadline| deadline < now);
    if too_late {
        events.push(warning(
            "MissSchedule",
            format!(
                "Missed scheduled time to start a job: {}",
                rfc3339(scheduled, &tz)
            ),
        ));
        return Decision { start: None, next };
    }
    let name = job_name(cj, scheduled);
    if active
        .iter()
        .any(|j| j.metadata.name.as_deref() == Some(name.as_str()))
        || last == Some(scheduled)
    {
        return Decision { start: None, next };
    }
    if concurrency_policy(cj) == "Forbid" && !active.is_empty() {
        // Not started; the next sync at the next time tries again.
        return Decision { start: None, next };
    }
    Decision {
        start: Some((scheduled, tz)),
        next,
    }
}

fn warning(reason: &'static str, message: String) -> Event {
    Event {
        warning: true,
        reason,
        message,
    }
}

fn concurrency_policy(cj: &CronJob) -> &str {
    cj.spec
        .as_ref()
        .and_then(|s| s.concurrency_policy.as_deref())
        .unwrap_or("Allow")
}

/// Finished: (succeeded, when) from the Complete or Failed condition.
pub fn finish(job: &Job) -> Option<(bool, Timestamp)> {
    let status = job.status.as_ref()?;
    let conditions = status.conditions.as_deref()?;
    if let Some(c) = true_condition(conditions, COMPLETE) {
        let at = status
            .completion_time
            .as_ref()
            .or(c.last_transition_time.as_ref());
        return Some((true, at.map_or(Timestamp::UNIX_EPOCH, |t| t.0)));
    }
    let c = true_condition(conditions, FAILED)?;
    Some((
        false,
        c.last_transition_time
            .as_ref()
            .map_or(Timestamp::UNIX_EPOCH, |t| t.0),
    ))
}

/// The oldest finished Jobs beyond successfulJobsHistoryLimit and
/// failedJobsHistoryLimit, oldest first by start time.
fn history_to_prune(cj: &CronJob, finished: &[Arc<Job>]) -> Vec<Arc<Job>> {
    let spec = cj.spec.as_ref();
    let mut prune = Vec::new();
    for (succeeded, limit) in [
        (
            true,
            spec.and_then(|s| s.successful_jobs_history_limit)
                .unwrap_or(3),
        ),
        (
            false,
            spec.and_then(|s| s.failed_jobs_history_limit).unwrap_or(1),
        ),
    ] {
        let mut jobs: Vec<&Arc<Job>> = finished
            .iter()
            .filter(|j| finish(j).is_some_and(|(ok, _)| ok == succeeded))
            .collect();
        jobs.sort_by_key(|j| (started(j), j.metadata.name.clone()));
        let surplus = jobs
            .len()
            .saturating_sub(usize::try_from(limit).unwrap_or(0));
        prune.extend(jobs.into_iter().take(surplus).cloned());
    }
    prune
}

fn started(job: &Job) -> Option<Timestamp> {
    let start = job.status.as_ref().and_then(|s| s.start_time.as_ref());
    start
        .or(job.metadata.creation_timestamp.as_ref())
        .map(|t| t.0)
}

/// `<cronjob>-<scheduled time in minutes since the epoch>`.
pub fn job_name(cj: &CronJob, scheduled: Timestamp) -> String {
    format!(
        "{}-{}",
        cj.metadata.name.as_deref().unwrap_or_default(),
        scheduled.as_second().div_euclid(60)
    )
}

/// The Job for `scheduled`: the template's metadata and spec, the
/// scheduled-timestamp annotation, the CronJob as controller.
pub fn job_for(cj: &CronJob, scheduled: Timestamp, tz: &TimeZone) -> Job {
    let template: JobTemplateSpec = cj
        .spec
        .as_ref()
        .map(|s| s.job_template.clone())
        .unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    // kube formats it in spec.timeZone, UTC when unset.
    let annotation_tz = match cj.spec.as_ref().and_then(|s| s.time_zone.as_ref()) {
        Some(_) => tz.clone(),
        None => TimeZone::UTC,
    };
    annotations.insert(
        SCHEDULED_TIMESTAMP.into(),
        rfc3339(scheduled, &annotation_tz),
    );
    Job {
        metadata: ObjectMeta {
            name: Some(job_name(cj, scheduled)),
            namespace: cj.metadata.namespace.clone(),
            labels: meta.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![crate::common::owners::controller_reference(cj)]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    }
}

/// RFC 3339 as Go's time.RFC3339 writes it ("Z" for UTC).
fn rfc3339(at: Timestamp, tz: &TimeZone) -> String {
    let zoned = at.to_zoned(tz.clone());
    match zoned.offset().seconds() {
        0 => zoned.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        _ => zoned.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string(),
    }
}

/// An entry of `status.active`.
fn reference(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn cron_job(spec: serde_json::Value) -> CronJob {
        let mut value = json!({
            "apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "tick", "namespace": "default", "uid": "uid-tick",
                         "creationTimestamp": "2025-01-01T00:00:00Z"},
            "spec": {"schedule": "*/5 * * * *", "concurrencyPolicy": "Allow", "suspend": false,
                     "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 1,
                     "jobTemplate": {"metadata": {"labels": {"app": "tick"}},
                                     "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}},
        });
        for (k, v) in spec.as_object().unwrap() {
            value["spec"][k] = v.clone();
        }
        serde_json::from_value(value).unwrap()
    }

    /// A Job of the CronJob named for `minute` (minutes since the epoch),
    /// running, or finished ok / failed at `finished`.
    fn job(minute: i64, outcome: Option<(bool, &str)>) -> Arc<Job> {
        let start = Timestamp::from_second(minute * 60).unwrap();
        let mut status = json!({"startTime": start.to_string()});
        if let Some((ok, finished)) = outcome {
            let type_ = if ok { "Complete" } else { "Failed" };
            status["conditions"] =
                json!([{"type": type_, "status": "True", "lastTransitionTime": finished}]);
            if ok {
                status["completionTime"] = json!(finished);
            }
        }
        Arc::new(serde_json::from_value(json!({
            "metadata": {"name": format!("tick-{minute}"), "namespace": "default", "uid": format!("uid-{minute}")},
            "status": status,
        })).unwrap())
    }

    const MIN_0005: i64 = 1_735_689_900 / 60; // 2025-01-01T00:05:00Z

    #[test]
    fn a_due_time_creates_a_named_annotated_owned_job() {
        let cj = cron_job(json!({}));
        let plan = plan(&cj, &[], &TimeZone::UTC, at("2025-01-01T00:06:10Z"));
        let job = plan.create.unwrap();
        assert_eq!(job.metadata.name.as_deref(), Some("tick-28928165"));
        assert_eq!(
            job.metadata.annotations.as_ref().unwrap()[SCHEDULED_TIMESTAMP],
            "2025-01-01T00:05:00Z"
        );
        assert_eq!(job.metadata.labels.as_ref().unwrap()["app"], "tick");
        let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("CronJob", Some(true))
        );
        assert_eq!(
            plan.status.last_schedule_time.map(|t| t.0),
            Some(at("2025-01-01T00:05:00Z"))
        );
        assert_eq!(
            plan.status.active.unwrap()[0].name.as_deref(),
            Some("tick-28928165")
        );
        // Next at 00:10, plus 100ms.
        assert_eq!(plan.requeue_after, Some(Duration::from_millis(230_100)));
    }

    #[test]
    fn nothing_is_due_before_the_first_time_or_twice_for_one_time() {
        let cj = cron_job(json!({}));
        let plan = plan(&cj, &[], &TimeZone::UTC, at("2025-01-01T00:04:00Z"));
        assert!(plan.create.is_none());
        assert_eq!(plan.requeue_after, Some(Duration::from_millis(60_100)));
        let mut done = cron_job(json!({}));
        done.status = Some(
            serde_json::from_value(json!({"lastScheduleTime": "2025-01-01T00:05:00Z"})).unwrap(),
        );
        assert!(plan_at(&done, &[], "2025-01-01T00:07:00Z").create.is_none());
        assert!(plan_at(
            &cron_job(json!({})),
            &[job(MIN_0005, None)],
            "2025-01-01T00:07:00Z"
        )
        .create
        .is_none());
    }

    fn plan_at(cj: &CronJob, jobs: &[Arc<Job>], now: &str) -> Plan {
        plan(cj, jobs, &TimeZone::UTC, at(now))
    }

    #[test]
    fn concurrency_policies() {
        let mut cj = cron_job(json!({"concurrencyPolicy": "Forbid"}));
        cj.status = Some(
            serde_json::from_value(json!({"lastScheduleTime": "2025-01-01T00:05:00Z"})).unwrap(),
        );
        let running = [job(MIN_0005, None)];
        let plan = plan_at(&cj, &running, "2025-01-01T00:10:30Z");
        assert!(plan.create.is_none(), "Forbid: one is still running");
        assert_eq!(plan.status.active.unwrap().len(), 1);

        cj.spec.as_mut().unwrap().concurrency_policy = Some("Replace".into());
        let plan = plan_at(&cj, &running, "2025-01-01T00:10:30Z");
        assert_eq!(plan.delete_active.len(), 1);
        assert_eq!(
            plan.create.unwrap().metadata.name.as_deref(),
            Some("tick-28928170")
        );
        assert_eq!(plan.status.active.unwrap().len(), 1, "only the new one");

        cj.spec.as_mut().unwrap().concurrency_policy = Some("Allow".into());
        let plan = plan_at(&cj, &running, "2025-01-01T00:10:30Z");
        assert!(plan.delete_active.is_empty());
        assert!(plan.create.is_some());
        assert_eq!(plan.status.active.unwrap().len(), 2);
    }

    #[test]
    fn the_starting_deadline_skips_a_time_too_long_ago() {
        let cj = cron_job(json!({"startingDeadlineSeconds": 30}));
        let plan = plan_at(&cj, &[], "2025-01-01T00:06:10Z");
        assert!(plan.create.is_none());
        let plan2 = plan_at(
            &cron_job(json!({"startingDeadlineSeconds": 100})),
            &[],
            "2025-01-01T00:06:10Z",
        );
        assert!(plan2.create.is_some());
        // With a deadline, only the window before now is searched: no miss recorded.
        assert!(plan.events.is_empty(), "{:?}", plan.events);
        let late = cron_job(json!({"startingDeadlineSeconds": 10, "schedule": "5 0 * * *"}));
        let plan = plan_at(&late, &[], "2025-01-01T00:05:20Z");
        assert!(plan.create.is_none());
        assert!(plan.events.iter().all(|e| e.reason != "MissSchedule"));
    }

    #[test]
    fn too_many_missed_times_warn_and_run_the_latest() {
        let cj = cron_job(json!({"schedule": "* * * * *"}));
        let plan = plan_at(&cj, &[], "2025-01-02T00:00:30Z");
        assert!(plan.events.iter().any(|e| e.reason == "TooManyMissedTimes"));
        assert_eq!(
            plan.status.last_schedule_time.map(|t| t.0),
            Some(at("2025-01-02T00:00:00Z"))
        );
    }

    #[test]
    fn suspend_an_unknown_zone_or_a_bad_schedule_start_nothing() {
        assert!(plan_at(
            &cron_job(json!({"suspend": true})),
            &[],
            "2025-01-01T00:06:00Z"
        )
        .create
        .is_none());
        let plan = plan_at(
            &cron_job(json!({"timeZone": "Mars/Olympus"})),
            &[],
            "2025-01-01T00:06:00Z",
        );
        assert!(plan.create.is_none() && plan.requeue_after.is_none());
        assert_eq!(plan.events[0].reason, "UnknownTimeZone");
        let plan = plan_at(
            &cron_job(json!({"schedule": "61 * * * *"})),
            &[],
            "2025-01-01T00:06:00Z",
        );
        assert_eq!(plan.events[0].reason, "InvalidSchedule");
    }

    #[test]
    fn time_zones_shift_the_schedule_and_the_annotation() {
        // 09:00 in Tokyo is 00:00 UTC.
        let cj = cron_job(json!({"schedule": "0 9 * * *", "timeZone": "Asia/Tokyo"}));
        assert!(plan_at(&cj, &[], "2025-01-01T23:59:30Z").create.is_none());
        let plan = plan_at(&cj, &[], "2025-01-02T00:00:30Z");
        let job = plan.create.unwrap();
        assert_eq!(
            job.metadata.annotations.unwrap()[SCHEDULED_TIMESTAMP],
            "2025-01-02T09:00:00+09:00"
        );
    }

    #[test]
    fn history_beyond_the_limits_is_pruned_oldest_first() {
        let cj = cron_job(json!({"successfulJobsHistoryLimit": 1, "failedJobsHistoryLimit": 1}));
        let jobs = [
            job(MIN_0005 - 20, Some((true, "2025-01-01T00:00:00Z"))),
            job(MIN_0005 - 10, Some((true, "2025-01-01T00:01:00Z"))),
            job(MIN_0005 - 15, Some((false, "2025-01-01T00:02:00Z"))),
            job(MIN_0005 - 5, Some((false, "2025-01-01T00:03:00Z"))),
            job(MIN_0005, None),
        ];
        let plan = plan_at(&cj, &jobs, "2025-01-01T00:05:30Z");
        let pruned: Vec<_> = plan
            .prune
            .iter()
            .map(|j| j.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(
            pruned,
            [
                format!("tick-{}", MIN_0005 - 20),
                format!("tick-{}", MIN_0005 - 15)
            ]
        );
        assert_eq!(
            plan.status.last_successful_time.map(|t| t.0),
            Some(at("2025-01-01T00:01:00Z"))
        );
        assert_eq!(plan.status.active.unwrap().len(), 1);
    }
}
