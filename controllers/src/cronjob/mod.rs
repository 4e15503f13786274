//! The CronJob controller: starts a Job at each time of a CronJob's cron
//! schedule (in its time zone), within its starting deadline and
//! concurrency policy, keeps its active list and last schedule and
//! success times, and prunes finished Jobs beyond its history limits.

pub mod events;
pub mod missed;
pub mod plan;
pub mod schedule;
mod sync;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::runtime::controller::{trigger_self, trigger_with, Action, Config};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::WatchStreamExt;
use kube::Client;
use parking_lot::Mutex;
use skiff_machinery::events::Recorder;

use crate::common::informers::Informers;
use crate::common::workqueue;
use crate::manager::Controller;

/// The `cronjob` controller of the controller-manager.
pub const CONTROLLER: Controller = Controller {
    name: "cronjob",
    run: |informers, _settings| Box::pin(run(informers)),
};

/// CronJobs synced at once (`--concurrent-cron-job-syncs`).
pub const CONCURRENT_SYNCS: u16 = 5;

/// The source of its events, as kube-controller-manager names it.
pub const COMPONENT: &str = "cronjob-controller";

const RETRY_BASE: Duration = Duration::from_millis(5);
const RETRY_MAX: Duration = Duration::from_secs(1000);

pub struct Context {
    client: Client,
    /// Events as `cronjob-controller`.
    recorder: Recorder,
    jobs: Store<Job>,
    failures: Mutex<HashMap<String, u32>>,
}

/// Why a sync failed; retried with back-off.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action} CronJob {key}: {source}")]
    Api {
        key: String,
        action: &'static str,
        #[source]
        source: kube::Error,
    },
}

/// `namespace/name`.
pub fn key_of(cj: &CronJob) -> String {
    format!(
        "{}/{}",
        cj.metadata.namespace.as_deref().unwrap_or_default(),
        cj.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The CronJob controlling `job`, if any.
fn cron_job_of(job: &Job) -> Option<ObjectRef<CronJob>> {
    let owner = job
        .metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))?;
    let namespace = job.metadata.namespace.as_deref().unwrap_or_default();
    (owner.kind == "CronJob" && owner.api_version.starts_with("batch/"))
        .then(|| ObjectRef::new(&owner.name).within(namespace))
}

/// Watches CronJobs and Jobs and syncs CronJobs until aborted.
pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let cron_jobs = informers.all::<CronJob>().await;
    let (jobs, job_events) = informers.all::<Job>().await.into_parts();
    let ctx = Arc::new(Context {
        client: client.clone(),
        recorder: Recorder::new(client.clone(), COMPONENT, None),
        jobs,
        failures: Mutex::new(HashMap::new()),
    });
    let cj_events = cron_jobs.events.touched_objects();
    let cron_jobs = cron_jobs.store;
    let job_events = job_events.touched_objects();
    let queue = futures::stream::select(
        trigger_self(cj_events, ()),
        trigger_with(job_events, |job: Job| cron_job_of(&job)),
    );
    workqueue::applier(
        informers.workqueue("cronjob"),
        |cj, ctx| Box::pin(reconcile(cj, ctx)),
        error_policy,
        ctx,
        cron_jobs,
        queue,
        Config::default().concurrency(CONCURRENT_SYNCS),
    )
    .for_each(|result| async move {
        if let Err(err) = result {
            tracing::debug!(error = %err, "cronjob controller");
        }
    })
    .await;
}

async fn reconcile(cj: Arc<CronJob>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = key_of(&cj);
    let result = sync::sync(&cj, &ctx, &key).await;
    if result.is_ok() {
        ctx.failures.lock().remove(&key);
    }
    result
}

fn error_policy(cj: Arc<CronJob>, err: &Error, ctx: Arc<Context>) -> Action {
    let key = key_of(&cj);
    let failures = {
        let mut failures = ctx.failures.lock();
        let count = failures.entry(key.clone()).or_insert(0);
        *count = count.saturating_add(1);
        *count
    };
    let delay = RETRY_BASE
        .saturating_mul(1 << failures.saturating_sub(1).min(31))
        .min(RETRY_MAX);
    tracing::warn!(cronjob = %key, error = %err, retry_in = ?delay, "CronJob sync failed");
    Action::requeue(delay)
}
