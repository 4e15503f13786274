//! The events a CronJob sync records, in the v1.33 CronJob controller's
//! words (cronjob_controllerv2.go), built for the shared recorder: the
//! plan's warnings, the Jobs it creates and deletes, and the active Jobs
//! it sees finished or gone.

use std::sync::Arc;

use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job};
use skiff_machinery::events::{Event, EventType};

use super::plan;
use crate::common::api::api_message;
use crate::common::events::event;
use crate::job::conditions::{true_condition, COMPLETE, FAILED};

/// An event the plan decided on.
pub fn planned(cj: &CronJob, planned: &plan::Event) -> Event {
    let type_ = match planned.warning {
        true => EventType::Warning,
        false => EventType::Normal,
    };
    event(cj, type_, planned.reason, planned.message.clone())
}

/// The Job `name` was created for a scheduled time.
pub fn created_job(cj: &CronJob, name: &str) -> Event {
    event(
        cj,
        EventType::Normal,
        "SuccessfulCreate",
        format!("Created job {name}"),
    )
}

/// The Job could not be created.
pub fn create_job_failed(cj: &CronJob, err: &kube::Error) -> Event {
    event(
        cj,
        EventType::Warning,
        "FailedCreate",
        format!("Error creating job: {}", api_message(err)),
    )
}

/// The Job `name` was deleted (Replace, or beyond a history limit).
pub fn deleted_job(cj: &CronJob, name: &str) -> Event {
    event(
        cj,
        EventType::Normal,
        "SuccessfulDelete",
        format!("Deleted job {name}"),
    )
}

/// A Job could not be deleted (the message as Kubernetes writes it).
pub fn delete_job_failed(cj: &CronJob, err: &kube::Error) -> Event {
    event(
        cj,
        EventType::Warning,
        "FailedDelete",
        format!("Deleted job: {}", api_message(err)),
    )
}

/// The Jobs of the CronJob's active list that leave it with `status`:
/// `SawCompletedJob` for a finished one, `MissingJob` for one that is gone.
pub fn active_jobs_left(cj: &CronJob, jobs: &[Arc<Job>], status: &CronJobStatus) -> Vec<Event> {
    let was_active = cj.status.as_ref().and_then(|s| s.active.as_ref());
    let still_active = |name: &str| {
        status
            .active
            .iter()
            .flatten()
            .any(|r| r.name.as_deref() == Some(name))
    };
    let mut events = Vec::new();
    for name in was_active
        .into_iter()
        .flatten()
        .filter_map(|r| r.name.as_deref())
    {
        if still_active(name) {
            continue;
        }
        let job = jobs
            .iter()
            .find(|j| j.metadata.name.as_deref() == Some(name));
        match job.and_then(|j| finished_condition(j)) {
            Some(condition) => events.push(event(
                cj,
                EventType::Normal,
                "SawCompletedJob",
                format!("Saw completed job: {name}, condition: {condition}"),
            )),
            None if job.is_none() => events.push(event(
                cj,
                EventType::Normal,
                "MissingJob",
                format!("Active job went missing: {name}"),
            )),
            None => {}
        }
    }
    events
}

/// `Complete` or `Failed`, when the Job has finished.
fn finished_condition(job: &Job) -> Option<&'static str> {
    let conditions = job.status.as_ref()?.conditions.as_deref()?;
    if true_condition(conditions, COMPLETE).is_some() {
        Some(COMPLETE)
    } else if true_condition(conditions, FAILED).is_some() {
        Some(FAILED)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ObjectReference;
    use serde_json::json;

    fn cron_job(active: &[&str]) -> CronJob {
        let active: Vec<_> = active
            .iter()
            .map(|n| json!({"name": n, "namespace": "default"}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "hourly", "namespace": "default", "uid": "uid-cj"},
            "spec": {"schedule": "0 * * * *", "jobTemplate": {}},
            "status": {"active": active},
        }))
        .unwrap()
    }

    fn job(name: &str, condition: Option<&str>) -> Arc<Job> {
        let conditions: Vec<_> = condition
            .into_iter()
            .map(|c| json!({"type": c, "status": "True"}))
            .collect();
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default"},
                "status": {"conditions": conditions},
            }))
            .unwrap(),
        )
    }

    fn described(events: &[Event]) -> Vec<(EventType, &str, &str)> {
        events
            .iter()
            .map(|e| (e.type_, e.reason.as_str(), e.message.as_str()))
            .collect()
    }

    #[test]
    fn jobs_created_and_deleted_are_recorded_on_the_cron_job() {
        let cj = cron_job(&[]);
        let created = created_job(&cj, "hourly-29000000");
        assert_eq!(created.regarding.kind.as_deref(), Some("CronJob"));
        let deleted = deleted_job(&cj, "hourly-28999940");
        assert_eq!(
            described(&[created, deleted]),
            [
                (
                    EventType::Normal,
                    "SuccessfulCreate",
                    "Created job hourly-29000000"
                ),
                (
                    EventType::Normal,
                    "SuccessfulDelete",
                    "Deleted job hourly-28999940"
                ),
            ]
        );
        let status = json!({"status": "Failure", "code": 403, "reason": "Forbidden",
            "message": "jobs.batch \"hourly-29000000\" is forbidden: exceeded quota: q"});
        let err = kube::Error::Api(serde_json::from_value(status).unwrap());
        assert_eq!(
            described(&[create_job_failed(&cj, &err), delete_job_failed(&cj, &err)]),
            [
                (EventType::Warning, "FailedCreate", "Error creating job: jobs.batch \"hourly-29000000\" is forbidden: exceeded quota: q"),
                (EventType::Warning, "FailedDelete", "Deleted job: jobs.batch \"hourly-29000000\" is forbidden: exceeded quota: q"),
            ]
        );
    }

    #[test]
    fn planned_warnings_keep_their_reason_and_message() {
        let cj = cron_job(&[]);
        let miss = plan::Event {
            warning: true,
            reason: "MissSchedule",
            message: "Missed scheduled time to start a job: 2025-01-01T00:00:00Z".into(),
        };
        assert_eq!(
            described(&[planned(&cj, &miss)]),
            [(
                EventType::Warning,
                "MissSchedule",
                "Missed scheduled time to start a job: 2025-01-01T00:00:00Z"
            )]
        );
    }

    #[test]
    fn finished_and_missing_active_jobs_are_recorded_as_they_leave_the_active_list() {
        let cj = cron_job(&["done", "failed", "gone", "running"]);
        let jobs = [
            job("done", Some("Complete")),
            job("failed", Some("Failed")),
            job("running", None),
        ];
        let status = CronJobStatus {
            active: Some(vec![ObjectReference {
                name: Some("running".into()),
                ..ObjectReference::default()
            }]),
            ..CronJobStatus::default()
        };
        assert_eq!(
            described(&active_jobs_left(&cj, &jobs, &status)),
            [
                (
                    EventType::Normal,
                    "SawCompletedJob",
                    "Saw completed job: done, condition: Complete"
                ),
                (
                    EventType::Normal,
                    "SawCompletedJob",
                    "Saw completed job: failed, condition: Failed"
                ),
                (
                    EventType::Normal,
                    "MissingJob",
                    "Active job went missing: gone"
                ),
            ]
        );
    }
}
