//! The pod garbage collector (`podgc`): every 20 seconds, force-deletes
//! terminated pods beyond `--terminated-pod-gc-threshold`, pods of nodes
//! that no longer exist, terminating pods of out-of-service nodes and
//! terminating pods never scheduled — those that no kubelet will finish.
//! Pods that are not finished are first marked Failed (with a
//! DisruptionTarget condition for the node cases), as kube does.

pub mod plan;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Api, Client, ResourceExt};

use crate::common::informers::Informers;
use crate::manager::{Controller, Settings};
use plan::Reason;

/// The `podgc` controller of the controller-manager.
pub const CONTROLLER: Controller = Controller {
    name: "podgc",
    run: |informers, settings| Box::pin(run(informers, settings)),
};

/// How often a pass runs (kube's `gcCheckPeriod`).
pub const GC_CHECK_PERIOD: Duration = Duration::from_secs(20);

/// Why collecting a pod failed; tried again on the next pass.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action} pod {namespace}/{name}: {source}")]
    Api {
        namespace: String,
        name: String,
        action: &'static str,
        #[source]
        source: kube::Error,
    },
}

/// Caches pods and nodes and collects until aborted.
pub async fn run(informers: Arc<Informers>, settings: Arc<Settings>) {
    let client = informers.client();
    let nodes = informers.all::<Node>().await.store;
    let pods = informers.all::<Pod>().await.store;
    collect_forever(client, settings, nodes, pods).await;
}

async fn collect_forever(
    client: Client,
    settings: Arc<Settings>,
    nodes: Store<Node>,
    pods: Store<Pod>,
) {
    let mut missing_since = HashMap::new();
    loop {
        let (all_pods, all_nodes) = (pods.state(), nodes.state());
        let suspects =
            plan::missing_nodes(&all_pods, &all_nodes, &mut missing_since, Timestamp::now());
        let gone = confirmed_gone(&client, suspects).await;
        let collected = plan::collect(
            &all_pods,
            &all_nodes,
            &gone,
            settings.terminated_pod_gc_threshold,
        );
        for (pod, reason) in collected {
            if let Err(err) = collect(&client, &pod, reason).await {
                tracing::warn!(error = %err, ?reason, "pod garbage collection failed");
            }
        }
        tokio::time::sleep(GC_CHECK_PERIOD).await;
    }
}

/// The nodes the API, asked directly, does not have either (the cache may
/// lag behind a node's re-creation).
async fn confirmed_gone(client: &Client, suspects: Vec<String>) -> Vec<String> {
    let api = Api::<Node>::all(client.clone());
    let mut gone = Vec::new();
    for name in suspects {
        match api.get_opt(&name).await {
            Ok(None) => gone.push(name),
            Ok(Some(_)) => {}
            Err(err) => {
                tracing::debug!(node = %name, error = %err, "could not confirm the node is gone")
            }
        }
    }
    gone
}

/// The status patch that marks a pod Failed, with the DisruptionTarget
/// condition when the reason has one.
pub fn failed_patch(reason: Reason, now: Timestamp) -> serde_json::Value {
    let mut status = serde_json::json!({"phase": "Failed"});
    if let Some(message) = reason.disruption_message() {
        status["conditions"] = serde_json::json!([{
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "DeletionByPodGC",
            "message": message,
            "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        }]);
    }
    serde_json::json!({ "status": status })
}

/// Marks the pod Failed where the reason says so, then force-deletes it.
async fn collect(client: &Client, pod: &Pod, reason: Reason) -> Result<(), Error> {
    let namespace = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let api = Api::<Pod>::namespaced(client.clone(), &namespace);
    let failed = |action: &'static str| {
        let (namespace, name) = (namespace.clone(), name.clone());
        move |source| Error::Api {
            namespace,
            name,
            action,
            source,
        }
    };
    let finished = matches!(crate::common::pods::phase(pod), "Succeeded" | "Failed");
    if reason.marks_failed() && !finished {
        let patch = failed_patch(reason, Timestamp::now());
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
            Err(err) => return Err(failed("mark failed")(err)),
        }
    }
    let force = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    match api.delete(&name, &force).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(err) => return Err(failed("delete")(err)),
    }
    tracing::info!(pod = %format!("{namespace}/{name}"), ?reason, "pod garbage collected");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orphans_are_marked_failed_with_a_disruption_target() {
        let patch = failed_patch(Reason::Orphaned, Timestamp::from_second(0).unwrap());
        assert_eq!(patch["status"]["phase"], "Failed");
        let condition = &patch["status"]["conditions"][0];
        assert_eq!(condition["type"], "DisruptionTarget");
        assert_eq!(condition["reason"], "DeletionByPodGC");
        assert_eq!(condition["message"], "PodGC: node no longer exists");
        let plain = failed_patch(
            Reason::UnscheduledTerminating,
            Timestamp::from_second(0).unwrap(),
        );
        assert!(plain["status"].get("conditions").is_none());
    }
}
