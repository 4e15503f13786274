//! The TTL-after-finished controller: deletes a finished Job (Complete or
//! Failed) `spec.ttlSecondsAfterFinished` after it finished, in the
//! background so that the garbage collector removes its pods.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{DeleteParams, Preconditions, PropagationPolicy};
use kube::runtime::controller::{trigger_self, Action, Config};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};

use crate::common::informers::Informers;
use crate::common::workqueue;
use crate::job::conditions::finished_at;
use crate::manager::Controller;

/// The `ttl-after-finished` controller of the controller-manager.
pub const CONTROLLER: Controller = Controller {
    name: "ttl-after-finished",
    run: |informers, _settings| Box::pin(run(informers)),
};

/// Jobs handled at once (`--concurrent-ttl-after-finished-syncs`).
pub const CONCURRENT_SYNCS: u16 = 5;

/// Why a deletion failed; retried.
#[derive(Debug, thiserror::Error)]
#[error("deleting the expired Job {key}: {source}")]
pub struct Error {
    key: String,
    #[source]
    source: kube::Error,
}

/// When `job` is to be deleted: its finish time plus its TTL; `None`
/// when it has no TTL, is not finished or is already being deleted.
pub fn expires_at(job: &Job) -> Option<Timestamp> {
    if job.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let ttl = job.spec.as_ref()?.ttl_seconds_after_finished?;
    let finished = finished_at(job)?;
    finished
        .checked_add(SignedDuration::from_secs(i64::from(ttl)))
        .ok()
}

/// What to do with `job` at `now`: delete it, wait until it expires, or
/// nothing.
pub fn due(job: &Job, now: Timestamp) -> Option<Duration> {
    let at = expires_at(job)?;
    Some(Duration::try_from(at.duration_since(now)).unwrap_or_default())
}

/// Watches Jobs and deletes them as they expire, until aborted.
pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let (jobs, events) = informers.all::<Job>().await.into_parts();
    let events = events.touched_objects();
    workqueue::applier(
        informers.workqueue("ttl_jobs_to_delete"),
        |job, client| Box::pin(reconcile(job, client)),
        |_job, err: &Error, _client| {
            tracing::warn!(error = %err, "ttl-after-finished: retrying");
            Action::requeue(Duration::from_secs(1))
        },
        Arc::new(client),
        jobs,
        trigger_self(events, ()),
        Config::default().concurrency(CONCURRENT_SYNCS),
    )
    .for_each(|_| async {})
    .await;
}

async fn reconcile(job: Arc<Job>, client: Arc<Client>) -> Result<Action, Error> {
    let Some(wait) = due(&job, Timestamp::now()) else {
        return Ok(Action::await_change());
    };
    if !wait.is_zero() {
        return Ok(Action::requeue(wait));
    }
    let namespace = job.metadata.namespace.as_deref().unwrap_or_default();
    let name = job.metadata.name.as_deref().unwrap_or_default();
    let key = format!("{namespace}/{name}");
    let api: Api<Job> = Api::namespaced((*client).clone(), namespace);
    // The cache may be behind (the TTL changed, the Job was replaced): decide on a fresh read.
    let fresh = match api.get_opt(name).await {
        Ok(Some(fresh)) => fresh,
        Ok(None) => return Ok(Action::await_change()),
        Err(source) => return Err(Error { key, source }),
    };
    match due(&fresh, Timestamp::now()) {
        Some(wait) if wait.is_zero() => {}
        Some(wait) => return Ok(Action::requeue(wait)),
        None => return Ok(Action::await_change()),
    }
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        preconditions: Some(Preconditions {
            uid: fresh.metadata.uid.clone(),
            resource_version: fresh.metadata.resource_version.clone(),
        }),
        ..DeleteParams::default()
    };
    tracing::info!(job = %key, "deleting a finished Job whose TTL expired");
    match api.delete(name, &params).await {
        Ok(_) => Ok(Action::await_change()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Action::await_change()),
        Err(source) => Err(Error { key, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(ttl: Option<i32>, condition: Option<(&str, &str)>) -> Job {
        let conditions: Vec<_> = condition
            .into_iter()
            .map(|(t, at)| json!({"type": t, "status": "True", "lastTransitionTime": at}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "j", "namespace": "default"},
            "spec": {"ttlSecondsAfterFinished": ttl, "template": {}},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn finished_jobs_expire_ttl_seconds_after_they_finished() {
        let done = job(Some(30), Some(("Complete", "2025-01-01T00:00:00Z")));
        assert_eq!(expires_at(&done), Some(at("2025-01-01T00:00:30Z")));
        assert_eq!(
            due(&done, at("2025-01-01T00:00:10Z")),
            Some(Duration::from_secs(20))
        );
        assert_eq!(due(&done, at("2025-01-01T00:01:00Z")), Some(Duration::ZERO));
        let failed = job(Some(0), Some(("Failed", "2025-01-01T00:00:00Z")));
        assert_eq!(
            due(&failed, at("2025-01-01T00:00:00Z")),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn running_jobs_jobs_without_ttl_and_jobs_being_deleted_stay() {
        assert_eq!(expires_at(&job(Some(30), None)), None);
        assert_eq!(
            expires_at(&job(
                Some(30),
                Some(("FailureTarget", "2025-01-01T00:00:00Z"))
            )),
            None
        );
        assert_eq!(
            expires_at(&job(None, Some(("Complete", "2025-01-01T00:00:00Z")))),
            None
        );
        let mut deleting = job(Some(30), Some(("Complete", "2025-01-01T00:00:00Z")));
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at("2025-01-01T00:00:40Z")),
        );
        assert_eq!(expires_at(&deleting), None);
    }
}
