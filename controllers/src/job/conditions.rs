//! A Job's conditions: `Complete`/`Failed` (final), `SuccessCriteriaMet`/
//! `FailureTarget` (decided, pods still terminating), `Suspended`.

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

pub const COMPLETE: &str = "Complete";
pub const FAILED: &str = "Failed";
pub const SUCCESS_CRITERIA_MET: &str = "SuccessCriteriaMet";
pub const FAILURE_TARGET: &str = "FailureTarget";
pub const SUSPENDED: &str = "Suspended";

/// The condition of `type_` with status True, if any.
pub fn true_condition<'a>(conditions: &'a [JobCondition], type_: &str) -> Option<&'a JobCondition> {
    conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

/// The Job is finished: Complete or Failed is True.
pub fn is_finished(job: &Job) -> bool {
    finished_at(job).is_some()
}

/// When the Job finished: the lastTransitionTime of its True Complete or
/// Failed condition.
pub fn finished_at(job: &Job) -> Option<Timestamp> {
    let conditions = job.status.as_ref()?.conditions.as_deref()?;
    let done = true_condition(conditions, COMPLETE).or(true_condition(conditions, FAILED))?;
    Some(
        done.last_transition_time
            .as_ref()
            .map_or(Timestamp::UNIX_EPOCH, |t| t.0),
    )
}

/// Sets a condition; its lastTransitionTime changes only with its status.
/// Returns whether anything changed.
pub fn set(
    conditions: &mut Vec<JobCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> bool {
    let wanted = JobCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) if existing.status == status => {
            let same = existing.reason.as_deref() == Some(reason)
                && existing.message.as_deref() == Some(message);
            if !same {
                existing.reason = wanted.reason;
                existing.message = wanted.message;
                existing.last_probe_time = wanted.last_probe_time;
            }
            !same
        }
        Some(existing) => {
            *existing = wanted;
            true
        }
        None => {
            conditions.push(wanted);
            true
        }
    }
}
