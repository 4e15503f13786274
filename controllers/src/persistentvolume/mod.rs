//! The PersistentVolume binder (`persistentvolume-binder`): binds pending
//! claims to the smallest Available volume that satisfies them, provisions
//! hostPath volumes for classes of the hostPath provisioner, keeps claim
//! and volume phases, and reclaims the volumes of deleted claims (Retain
//! or Delete). Not: Recycle, expansion, attach/detach, CSI.

mod claims;
pub mod plan;
pub mod provisioner;
mod volumes;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::PostParams;
use kube::runtime::controller::{trigger_self, trigger_with, Action, Config};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};

use crate::backoff::{key, Failures};
use crate::common::api::{api_message, status_code};
use crate::common::informers::Informers;
use crate::common::workqueue;
use crate::manager::Controller;

/// The `persistentvolume-binder` controller of the controller-manager.
pub const CONTROLLER: Controller = Controller {
    name: "persistentvolume-binder",
    run: |informers, settings| Box::pin(run(informers, settings.host_path_provisioner_dir.clone())),
};

/// How often every claim and volume is synced again
/// (`--pvclaimbinder-sync-period` default).
pub const SYNC_PERIOD: Duration = Duration::from_secs(15);

pub struct Context {
    client: Client,
    claims: Store<PersistentVolumeClaim>,
    volumes: Store<PersistentVolume>,
    classes: Store<StorageClass>,
    pods: Store<Pod>,
    /// Where provisioned hostPath volumes live.
    base_dir: PathBuf,
    failures: Failures,
}

/// Why a sync failed; each is retried with back-off.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action} {object}: {}", api_message(source))]
    Api {
        object: String,
        action: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("{action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    fn api(object: impl Into<String>, action: &'static str) -> impl FnOnce(kube::Error) -> Error {
        let object = object.into();
        move |source| Error::Api {
            object,
            action,
            source,
        }
    }
}

/// A 404 is no failure: the object went, there is nothing to write.
fn ignore_not_found<T>(result: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match result {
        Err(err) if status_code(&err) != Some(404) => Err(err),
        _ => Ok(()),
    }
}

/// Watches claims, volumes, classes and pods and syncs claims and volumes
/// until aborted.
pub async fn run(informers: Arc<Informers>, base_dir: PathBuf) {
    let client = informers.client();
    let (claims, claim_events) = informers.all::<PersistentVolumeClaim>().await.into_parts();
    let (volumes, volume_events) = informers.all::<PersistentVolume>().await.into_parts();
    let (classes, class_events) = informers.all::<StorageClass>().await.into_parts();
    let (pods, pod_events) = informers.all::<Pod>().await.into_parts();
    let ctx = Arc::new(Context {
        client: client.clone(),
        claims: claims.clone(),
        volumes: volumes.clone(),
        classes: classes.clone(),
        pods: pods.clone(),
        base_dir,
        failures: Failures::default(),
    });
    let claim_events = claim_events.touched_objects().boxed();
    let volume_events = volume_events.touched_objects().boxed();
    let class_events = class_events.touched_objects();
    let pod_events = pod_events.touched_objects();
    // Each event stream feeds both queues.
    let (claim_tx, claim_rx) = futures::channel::mpsc::channel::<PersistentVolumeClaim>(1024);
    let (volume_tx, volume_rx) = futures::channel::mpsc::channel::<PersistentVolume>(1024);
    let claim_events = forward(claim_events, claim_tx);
    let volume_events = forward(volume_events, volume_tx);
    let (pending, cached_volumes) = (claims.clone(), volumes.clone());
    let claim_queue = futures::stream::select_all([
        trigger_self(claim_events, ()).boxed(),
        trigger_with(
            volume_rx.map(Ok::<_, watcher::Error>),
            move |volume: PersistentVolume| claims_for_volume(&volume, &pending.state()),
        )
        .boxed(),
        trigger_with(class_events, {
            let claims = claims.clone();
            move |_: StorageClass| pending_claims(&claims.state())
        })
        .boxed(),
        trigger_with(pod_events, {
            let claims = claims.clone();
            move |pod: Pod| claims_of_scheduled_pod(&pod, &claims.state())
        })
        .boxed(),
    ]);
    let volume_queue = futures::stream::select(
        trigger_self(volume_events, ()),
        trigger_with(
            claim_rx.map(Ok::<_, watcher::Error>),
            move |claim: PersistentVolumeClaim| volumes_for_claim(&claim, &cached_volumes.state()),
        ),
    );
    let config = Config::default().concurrency(1);
    let claim_syncs = workqueue::applier(
        informers.workqueue("claims"),
        |claim, ctx| Box::pin(claims::reconcile(claim, ctx)),
        |claim, err, ctx| retry(&ctx, &key(&claim.metadata), err),
        ctx.clone(),
        claims,
        claim_queue,
        config.clone(),
    )
    .for_each(log_result);
    let volume_syncs = workqueue::applier(
        informers.workqueue("volumes"),
        |volume, ctx| Box::pin(volumes::reconcile(volume, ctx)),
        |volume, err, ctx| retry(&ctx, &key(&volume.metadata), err),
        ctx.clone(),
        volumes,
        volume_queue,
        config,
    )
    .for_each(log_result);
    tokio::join!(claim_syncs, volume_syncs, ensure_default_class(ctx));
}

/// Passes every event on and copies the touched objects to `tx`; a full
/// channel drops the copy (the periodic sync catches up).
fn forward<K: Clone + Send + 'static>(
    events: futures::stream::BoxStream<'static, Result<K, watcher::Error>>,
    tx: futures::channel::mpsc::Sender<K>,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send {
    events.inspect(move |event| {
        if let Ok(object) = event {
            let _ = tx.clone().try_send(object.clone());
        }
    })
}

async fn log_result<T, E: std::fmt::Display>(result: Result<T, E>) {
    if let Err(err) = result {
        tracing::debug!(error = %err, "persistentvolume-binder");
    }
}

fn retry(ctx: &Context, key: &str, err: &Error) -> Action {
    let delay = ctx.failures.delay(key);
    tracing::warn!(object = key, error = %err, retry_in = ?delay, "PersistentVolume binder sync failed");
    Action::requeue(delay)
}

/// A volume's claim (by its claimRef), or every pending claim when the
/// volume is free and might satisfy one.
fn claims_for_volume(
    volume: &PersistentVolume,
    claims: &[Arc<PersistentVolumeClaim>],
) -> Vec<ObjectRef<PersistentVolumeClaim>> {
    match volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
        Some(reference) => vec![
            ObjectRef::new(reference.name.as_deref().unwrap_or_default())
                .within(reference.namespace.as_deref().unwrap_or_default()),
        ],
        None => pending_claims(claims),
    }
}

fn pending_claims(claims: &[Arc<PersistentVolumeClaim>]) -> Vec<ObjectRef<PersistentVolumeClaim>> {
    claims
        .iter()
        .filter(|c| plan::claim_phase(c) == "Pending")
        .map(|c| ObjectRef::from_obj(c.as_ref()))
        .collect()
}

fn claims_of_scheduled_pod(
    pod: &Pod,
    claims: &[Arc<PersistentVolumeClaim>],
) -> Vec<ObjectRef<PersistentVolumeClaim>> {
    if pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_none()
    {
        return Vec::new();
    }
    claims
        .iter()
        .filter(|c| {
            c.metadata.namespace == pod.metadata.namespace && plan::claim_phase(c) == "Pending"
        })
        .filter(|c| plan::uses_claim(pod, c.metadata.name.as_deref().unwrap_or_default()))
        .map(|c| ObjectRef::from_obj(c.as_ref()))
        .collect()
}

/// The volumes a claim change concerns: the one it names and those whose
/// claimRef names it.
fn volumes_for_claim(
    claim: &PersistentVolumeClaim,
    volumes: &[Arc<PersistentVolume>],
) -> Vec<ObjectRef<PersistentVolume>> {
    let named = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .filter(|n| !n.is_empty());
    let referring = volumes.iter().filter(|v| {
        let reference = v.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
        reference.is_some_and(|r| {
            r.name == claim.metadata.name && r.namespace == claim.metadata.namespace
        })
    });
    let mut refs: Vec<ObjectRef<PersistentVolume>> = named
        .iter()
        .map(|n| ObjectRef::new(n))
        .chain(referring.map(|v| ObjectRef::from_obj(v.as_ref())))
        .collect();
    refs.dedup();
    refs
}

/// Creates the `standard` StorageClass when the cluster has none (the
/// class cache is filled before the controller starts): every cluster
/// starts with a default class.
async fn ensure_default_class(ctx: Arc<Context>) {
    if !ctx.classes.is_empty() {
        return;
    }
    let api: Api<StorageClass> = Api::all(ctx.client.clone());
    let class = provisioner::default_storage_class();
    for attempt in 1..=10u32 {
        match api.create(&PostParams::default(), &class).await {
            Ok(_) => {
                tracing::info!(
                    class = provisioner::DEFAULT_CLASS,
                    "created the default StorageClass"
                );
                return;
            }
            Err(err) if status_code(&err) == Some(409) => return,
            Err(err) => {
                tracing::warn!(error = %api_message(&err), attempt, "creating the default StorageClass failed");
                tokio::time::sleep(Duration::from_secs(u64::from(attempt))).await;
            }
        }
    }
}
