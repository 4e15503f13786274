//! Which resources the garbage collector watches (API discovery: every
//! resource that can be listed, watched and deleted) and the metadata-only
//! watch of each, feeding the graph.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::discovery::{verbs, ApiCapabilities, ApiResource, Discovery, Scope};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;

use super::graph::ObjectNode;
use super::GarbageCollector;
use crate::common::informers::map_event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Resources never watched, as kube-controller-manager ignores them:
/// events are many, short-lived and never owners.
const IGNORED_RESOURCES: &[(&str, &str)] = &[("", "events"), ("events.k8s.io", "events")];

/// A served resource and its scope.
#[derive(Debug, Clone)]
pub struct ServedResource {
    pub resource: Arc<ApiResource>,
    pub namespaced: bool,
}

/// What discovery found: how to reach every kind an ownerReference may
/// name, and which resources to watch.
#[derive(Debug, Default)]
pub struct Catalog {
    /// (apiVersion, kind) → resource, at every served version.
    by_kind: HashMap<(String, String), ServedResource>,
    /// The resources watched: preferred versions that can be listed,
    /// watched and deleted.
    pub watched: Vec<ServedResource>,
}

impl Catalog {
    /// The resource an ownerReference's apiVersion and kind name.
    pub fn resolve(&self, api_version: &str, kind: &str) -> Option<&ServedResource> {
        self.by_kind
            .get(&(api_version.to_string(), kind.to_string()))
    }

    fn add_version(&mut self, resources: Vec<(ApiResource, ApiCapabilities)>) {
        for (resource, caps) in resources {
            let served = ServedResource {
                resource: Arc::new(resource.clone()),
                namespaced: caps.scope == Scope::Namespaced,
            };
            self.by_kind
                .insert((resource.api_version, resource.kind), served);
        }
    }

    fn add_watched(&mut self, resources: Vec<(ApiResource, ApiCapabilities)>) {
        for (resource, caps) in resources {
            if !is_collectable(&resource, &caps) {
                continue;
            }
            self.watched.push(ServedResource {
                namespaced: caps.scope == Scope::Namespaced,
                resource: Arc::new(resource),
            });
        }
    }
}

/// Whether objects of `resource` are watched for ownerReferences.
fn is_collectable(resource: &ApiResource, caps: &ApiCapabilities) -> bool {
    let ignored = IGNORED_RESOURCES
        .iter()
        .any(|(group, plural)| resource.group == *group && resource.plural == *plural);
    !ignored
        && [verbs::LIST, verbs::WATCH, verbs::DELETE]
            .iter()
            .all(|v| caps.supports_operation(v))
}

/// Discovers the served resources (aggregated discovery, or group by group
/// when the server does not offer it).
pub async fn discover(client: &Client) -> Result<Catalog, kube::Error> {
    let discovery = match Discovery::new(client.clone()).run_aggregated().await {
        Ok(discovery) => discovery,
        Err(err) => {
            tracing::debug!(error = %err, "aggregated discovery failed; discovering group by group");
            Discovery::new(client.clone()).run().await?
        }
    };
    let mut catalog = Catalog::default();
    for group in discovery.groups() {
        for version in group.versions() {
            catalog.add_version(group.versioned_resources(version));
        }
        catalog.add_watched(group.recommended_resources());
    }
    Ok(catalog)
}

/// Watches the metadata of every object of `served` into the collector's
/// graph until aborted (through the controllers' informer of the resource
/// where there is one); marks the resource synced after its first list.
pub async fn monitor(collector: Arc<GarbageCollector>, served: ServedResource) {
    let resource = served.resource;
    let mut events = match collector.informers.metadata(&resource).await {
        Some(events) => events,
        None => {
            let api: Api<PartialObjectMeta<DynamicObject>> =
                Api::all_with(collector.client.clone(), &*resource);
            watcher(api, watcher::Config::default())
                .default_backoff()
                .map(|event| event.map(|event| map_event(event, |object| object.metadata)))
                .boxed()
        }
    };
    let mut relist: Option<HashSet<String>> = None;
    while let Some(event) = events.next().await {
        let work = match event {
            Ok(watcher::Event::Apply(object)) => observe(&collector, &resource, &object),
            Ok(watcher::Event::Delete(object)) => match object.uid.as_deref() {
                Some(uid) => collector.graph.lock().forget(uid),
                None => Vec::new(),
            },
            Ok(watcher::Event::Init) => {
                relist = Some(HashSet::new());
                Vec::new()
            }
            Ok(watcher::Event::InitApply(object)) => {
                if let (Some(seen), Some(uid)) = (relist.as_mut(), object.uid.clone()) {
                    seen.insert(uid);
                }
                observe(&collector, &resource, &object)
            }
            Ok(watcher::Event::InitDone) => {
                let seen = relist.take().unwrap_or_default();
                let work = collector.graph.lock().relisted(&resource, &seen);
                collector.synced.lock().insert((*resource).clone());
                work
            }
            Err(err) => {
                tracing::warn!(resource = %resource.plural, api_version = %resource.api_version, error = %err, "garbage collector watch failed; retrying");
                Vec::new()
            }
        };
        for uid in work {
            collector.queue.add(uid);
        }
    }
}

fn observe(
    collector: &GarbageCollector,
    resource: &Arc<ApiResource>,
    object: &ObjectMeta,
) -> Vec<String> {
    match ObjectNode::from_meta(object, resource) {
        Some(node) => collector.graph.lock().observe(node),
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(scope: Scope, operations: &[&str]) -> ApiCapabilities {
        ApiCapabilities {
            scope,
            subresources: Vec::new(),
            operations: operations.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
        let api_version = match group {
            "" => version.to_string(),
            _ => format!("{group}/{version}"),
        };
        ApiResource {
            group: group.into(),
            version: version.into(),
            api_version,
            kind: kind.into(),
            plural: plural.into(),
        }
    }

    #[test]
    fn resources_that_cannot_be_listed_watched_and_deleted_or_events_are_not_watched() {
        let all = &[verbs::LIST, verbs::WATCH, verbs::DELETE, verbs::GET];
        let mut catalog = Catalog::default();
        let served = vec![
            (
                resource("apps", "v1", "ReplicaSet", "replicasets"),
                caps(Scope::Namespaced, all),
            ),
            (
                resource("", "v1", "Event", "events"),
                caps(Scope::Namespaced, all),
            ),
            (
                resource("", "v1", "Binding", "bindings"),
                caps(Scope::Namespaced, &[verbs::CREATE]),
            ),
            (
                resource("", "v1", "Node", "nodes"),
                caps(Scope::Cluster, all),
            ),
        ];
        catalog.add_version(served.clone());
        catalog.add_watched(served);
        let watched: Vec<&str> = catalog
            .watched
            .iter()
            .map(|s| s.resource.plural.as_str())
            .collect();
        assert_eq!(watched, ["replicasets", "nodes"]);
        let node = catalog.resolve("v1", "Node").unwrap();
        assert!(!node.namespaced);
        assert!(catalog.resolve("apps/v1", "ReplicaSet").unwrap().namespaced);
        assert!(catalog.resolve("apps/v1beta1", "ReplicaSet").is_none());
    }
}
