//! The Job controller: runs a Job's pods to `spec.completions` with at
//! most `spec.parallelism` at once (NonIndexed or Indexed), replaces
//! failed pods with back-off up to `backoffLimit`, applies
//! `podFailurePolicy`, `activeDeadlineSeconds` and `suspend`, and reports
//! it all in the Job's status. Pods are counted through the job-tracking
//! finalizer ([`tracking`]). Deleting finished Jobs is ttlafterfinished's.

pub mod backoff;
pub mod conditions;
pub mod events;
pub mod failure_policy;
#[cfg(test)]
mod fixtures;
pub mod indexes;
mod orphans;
pub mod plan;
pub mod pod_template;
mod sync;
#[cfg(test)]
mod tests;
pub mod tracking;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::{trigger_self, trigger_with, Action, Config};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use parking_lot::Mutex;
use skiff_machinery::events::Recorder;

use crate::backoff::Failures;
use crate::common::expectations::Expectations;
use crate::common::informers::Informers;
use crate::common::pods::controller_ref;
use crate::common::workqueue;
use crate::manager::Controller;
use backoff::BackoffRecord;
use tracking::has_finalizer;

/// The `job` controller of the controller-manager.
pub const CONTROLLER: Controller = Controller {
    name: "job",
    run: |informers, _settings| Box::pin(run(informers)),
};

/// Jobs synced at once (kube-controller-manager's `--concurrent-job-syncs`).
pub const CONCURRENT_SYNCS: u16 = 5;

/// The source of its events, as kube-controller-manager names it.
pub const COMPONENT: &str = "job-controller";

/// What every sync shares.
pub struct Context {
    client: Client,
    /// Events as `job-controller`.
    recorder: Recorder,
    pods: Store<Pod>,
    expectations: Mutex<Expectations>,
    /// Per Job key: UIDs of pods whose finalizer was removed, until a pod
    /// event shows it gone (kube's finalizer expectations).
    removing_finalizers: Mutex<HashMap<String, HashSet<String>>>,
    backoff: Mutex<HashMap<String, BackoffRecord>>,
    failures: Failures,
}

/// Why a sync failed; each is retried with back-off.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action} Job {key}: {}", api_message(source))]
    Api {
        key: String,
        action: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("Job {key} could not create or delete pods: {message}")]
    Manage { key: String, message: String },
}

fn status_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

fn api_message(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
        other => other.to_string(),
    }
}

/// `namespace/name`.
pub fn key_of(job: &Job) -> String {
    format!(
        "{}/{}",
        job.metadata.namespace.as_deref().unwrap_or_default(),
        job.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The Job controlling `pod`, if its controller is a Job.
pub fn job_of(pod: &Pod) -> Option<ObjectRef<Job>> {
    let owner = controller_ref(pod)?;
    let is_job = owner.kind == "Job" && owner.api_version.starts_with("batch/");
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    is_job.then(|| ObjectRef::new(&owner.name).within(namespace))
}

/// Watches Jobs and pods and syncs Jobs until aborted.
pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let jobs = informers.all::<Job>().await;
    let (pods, pod_events) = informers.all::<Pod>().await.into_parts();
    let ctx = Arc::new(Context {
        client: client.clone(),
        recorder: Recorder::new(client.clone(), COMPONENT, None),
        pods: pods.clone(),
        expectations: Mutex::new(Expectations::default()),
        removing_finalizers: Mutex::new(HashMap::new()),
        backoff: Mutex::new(HashMap::new()),
        failures: Failures::default(),
    });
    let job_ctx = ctx.clone();
    let job_events = jobs
        .events
        .inspect(move |event| {
            if let Ok(watcher::Event::Delete(job)) = event {
                job_ctx.forget(&key_of(job));
            }
        })
        .touched_objects();
    let pod_ctx = ctx.clone();
    let pod_events = pod_events
        .inspect(move |event| pod_ctx.observe(event))
        .touched_objects();
    let queue = futures::stream::select(
        trigger_self(job_events, ()),
        trigger_with(pod_events, |pod: Pod| job_of(&pod)),
    );
    let jobs = jobs.store;
    let sweeper = tokio::spawn(orphans::sweep(client, jobs.clone(), pods));
    let config = Config::default().concurrency(CONCURRENT_SYNCS);
    workqueue::applier(
        informers.workqueue("job"),
        |job, ctx| Box::pin(reconcile(job, ctx)),
        error_policy,
        ctx,
        jobs,
        queue,
        config,
    )
    .for_each(|result| async move {
        if let Err(err) = result {
            tracing::debug!(error = %err, "job controller");
        }
    })
    .await;
    sweeper.abort();
}

impl Context {
    /// Tells expectations about a pod event from the watch.
    fn observe(&self, event: &Result<watcher::Event<Pod>, watcher::Error>) {
        let (pod, gone) = match event {
            Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => (pod, false),
            Ok(watcher::Event::Delete(pod)) => (pod, true),
            _ => return,
        };
        let deleting = gone || pod.metadata.deletion_timestamp.is_some();
        self.expectations.lock().observe(pod, deleting);
        if gone || !has_finalizer(pod) {
            let (Some(job), Some(uid)) = (job_of(pod), pod.metadata.uid.as_deref()) else {
                return;
            };
            let key = format!(
                "{}/{}",
                job.namespace.as_deref().unwrap_or_default(),
                job.name
            );
            let mut removing = self.removing_finalizers.lock();
            if let Some(uids) = removing.get_mut(&key) {
                uids.remove(uid);
                if uids.is_empty() {
                    removing.remove(&key);
                }
            }
        }
    }

    fn forget(&self, key: &str) {
        self.expectations.lock().forget(key);
        self.removing_finalizers.lock().remove(key);
        self.backoff.lock().remove(key);
    }
}

async fn reconcile(job: Arc<Job>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = key_of(&job);
    let result = sync::sync(&job, &ctx, &key).await;
    if result.is_ok() {
        ctx.failures.forget(&key);
    }
    result
}

/// Retries a failed sync after 5ms, 10ms, 20ms, … up to 1000s.
fn error_policy(job: Arc<Job>, err: &Error, ctx: Arc<Context>) -> Action {
    let key = key_of(&job);
    let delay = ctx.failures.delay(&key);
    match err {
        Error::Api { source, .. } if status_code(source) == Some(409) => {
            tracing::debug!(job = %key, error = %err, retry_in = ?delay, "Job sync conflicted")
        }
        _ => tracing::warn!(job = %key, error = %err, retry_in = ?delay, "Job sync failed"),
    }
    Action::requeue(delay)
}
