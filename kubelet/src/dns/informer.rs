//! The list-watch of Services and discovery.k8s.io/v1 EndpointSlices that
//! keeps the [`ClusterRecords`] the server answers from, and says when
//! both first lists are in (before that, cluster names get SERVFAIL).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use parking_lot::RwLock;

use super::records::ClusterRecords;

/// The records, and whether each resource has been listed once.
#[derive(Debug)]
pub struct Informed {
    pub records: RwLock<ClusterRecords>,
    services_synced: AtomicBool,
    slices_synced: AtomicBool,
}

impl Default for Informed {
    fn default() -> Self {
        Informed {
            records: RwLock::new(ClusterRecords::new()),
            services_synced: AtomicBool::new(false),
            slices_synced: AtomicBool::new(false),
        }
    }
}

impl Informed {
    /// Records as if both lists had given them.
    #[cfg(test)]
    pub(crate) fn listed(records: ClusterRecords) -> Informed {
        Informed {
            records: RwLock::new(records),
            services_synced: AtomicBool::new(true),
            slices_synced: AtomicBool::new(true),
        }
    }

    /// Whether both lists are in: only then are names answered.
    pub fn synced(&self) -> bool {
        self.services_synced.load(Ordering::Acquire) && self.slices_synced.load(Ordering::Acquire)
    }
}

/// How one resource's events change the records.
struct Resource<K> {
    what: &'static str,
    apply: fn(&mut ClusterRecords, &K),
    delete: fn(&mut ClusterRecords, &K),
    replace: fn(&mut ClusterRecords, &[K]),
}

/// Follows Services and EndpointSlices into `informed` until dropped.
pub async fn run(client: Client, informed: Arc<Informed>) {
    let services = follow(
        Api::<Service>::all(client.clone()),
        &informed,
        &informed.services_synced,
        Resource {
            what: "services",
            apply: ClusterRecords::apply_service,
            delete: ClusterRecords::delete_service,
            replace: ClusterRecords::replace_services,
        },
    );
    let slices = follow(
        Api::<EndpointSlice>::all(client),
        &informed,
        &informed.slices_synced,
        Resource {
            what: "endpointslices",
            apply: ClusterRecords::apply_slice,
            delete: ClusterRecords::delete_slice,
            replace: ClusterRecords::replace_slices,
        },
    );
    futures::join!(services, slices);
}

async fn follow<K>(api: Api<K>, informed: &Informed, synced: &AtomicBool, resource: Resource<K>)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    // What a (re)list has given so far: it replaces the records when done.
    let mut listing: Option<Vec<K>> = None;
    while let Some(event) = events.next().await {
        match event {
            Ok(Event::Init) => listing = Some(Vec::new()),
            Ok(Event::InitApply(object)) => match listing.as_mut() {
                Some(listing) => listing.push(object),
                None => (resource.apply)(&mut informed.records.write(), &object),
            },
            Ok(Event::InitDone) => {
                let listed = listing.take().unwrap_or_default();
                (resource.replace)(&mut informed.records.write(), &listed);
                if !synced.swap(true, Ordering::AcqRel) {
                    tracing::info!(
                        resource = resource.what,
                        count = listed.len(),
                        "cluster DNS listed"
                    );
                }
            }
            Ok(Event::Apply(object)) => (resource.apply)(&mut informed.records.write(), &object),
            Ok(Event::Delete(object)) => (resource.delete)(&mut informed.records.write(), &object),
            Err(err) => {
                tracing::debug!(resource = resource.what, error = %err, "cluster DNS watch failed; the watcher retries");
            }
        }
    }
}
