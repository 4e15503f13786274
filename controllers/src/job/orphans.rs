//! Pods that still carry the job-tracking finalizer but whose Job is
//! gone (deleted, or replaced under the same name): nobody will count
//! them, so the finalizer comes off and they can be deleted.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client};

use super::job_of;
use super::tracking::{has_finalizer, remove_finalizer_patch};
use crate::common::pods::controller_ref;

/// How often the pod cache is swept for orphans.
const SWEEP_PERIOD: Duration = Duration::from_secs(5);

/// Sweeps until aborted.
pub async fn sweep(client: Client, jobs: Store<Job>, pods: Store<Pod>) {
    loop {
        for pod in pods.state().iter().filter(|p| has_finalizer(p)) {
            let Some(job) = job_of(pod) else { continue };
            let owner_uid = controller_ref(pod)
                .map(|o| o.uid.clone())
                .unwrap_or_default();
            let cached = jobs.get(&job);
            if cached.is_some_and(|j| j.metadata.uid.as_deref() == Some(owner_uid.as_str())) {
                continue;
            }
            if let Err(err) = release_if_orphan(&client, pod, &job, &owner_uid).await {
                tracing::debug!(pod = ?pod.metadata.name, error = %err, "releasing an orphan pod of a Job");
            }
        }
        tokio::time::sleep(SWEEP_PERIOD).await;
    }
}

/// Reads the Job (the cache may be behind) and removes the finalizer if
/// the Job is really gone.
async fn release_if_orphan(
    client: &Client,
    pod: &Pod,
    job: &ObjectRef<Job>,
    owner_uid: &str,
) -> Result<(), kube::Error> {
    let namespace = job.namespace.as_deref().unwrap_or_default();
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let current = jobs.get_opt(&job.name).await?;
    if current.is_some_and(|j| j.metadata.uid.as_deref() == Some(owner_uid)) {
        return Ok(());
    }
    let Some(patch) = remove_finalizer_patch(pod) else {
        return Ok(());
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    match pods
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        Err(err) => Err(err),
    }
}
