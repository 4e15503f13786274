//! The taint eviction controller (`taint-eviction-controller`): deletes
//! the pods of a node with NoExecute taints they do not tolerate, at once,
//! or once the tolerationSeconds of their tolerations have run since the
//! taint was added. Each pod first gets the DisruptionTarget condition
//! (reason DeletionByTaintManager), as kube writes it. Which nodes get
//! tainted, and how fast, is the node lifecycle controller's.

pub mod decide;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Api, Client, ResourceExt};
use skiff_machinery::events::{Event, EventType, Recorder};

use crate::common::events::event;
use crate::common::informers::Informers;
use crate::manager::Controller;
use decide::{decide, no_execute, tainted_since, Eviction};

/// The `taint-eviction-controller` of the controller-manager.
pub const CONTROLLER: Controller = Controller {
    name: "taint-eviction-controller",
    run: |informers, _settings| Box::pin(run(informers)),
};

/// How often pods on NoExecute-tainted nodes are looked at; a pod goes at
/// most this late after its tolerationSeconds ran out.
const PASS_INTERVAL: Duration = Duration::from_secs(1);

/// Why an eviction failed; retried on the next pass.
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

/// The source of its events, as kube-controller-manager names it.
pub const COMPONENT: &str = "taint-eviction-controller";

/// Caches nodes and pods and evicts until aborted.
pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let recorder = Recorder::new(client.clone(), COMPONENT, None);
    let nodes = informers.all::<Node>().await.store;
    let pods = informers.all::<Pod>().await.store;
    evict_forever(client, recorder, nodes, pods).await;
}

async fn evict_forever(client: Client, recorder: Recorder, nodes: Store<Node>, pods: Store<Pod>) {
    let mut first_seen: HashMap<String, Timestamp> = HashMap::new();
    loop {
        let now = Timestamp::now();
        for (pod, at) in due(&nodes.state(), &pods.state(), &mut first_seen, now) {
            recorder.record(marked_for_deletion(&pod));
            if let Err(err) = evict(&client, &pod).await {
                tracing::warn!(error = %err, due = %at, "taint eviction failed");
            }
        }
        tokio::time::sleep(PASS_INTERVAL).await;
    }
}

/// The pods due for eviction at `now`, with when they were due.
/// `first_seen` remembers since when each node has NoExecute taints, for
/// taints written without the time they were added.
pub fn due(
    nodes: &[Arc<Node>],
    pods: &[Arc<Pod>],
    first_seen: &mut HashMap<String, Timestamp>,
    now: Timestamp,
) -> Vec<(Arc<Pod>, Timestamp)> {
    let mut on_node: HashMap<&str, Vec<&Arc<Pod>>> = HashMap::new();
    for pod in pods {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        if let Some(node) = node.filter(|n| !n.is_empty()) {
            on_node.entry(node).or_default().push(pod);
        }
    }
    let mut due = Vec::new();
    for node in nodes {
        let name = node.name_any();
        let all = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or_default();
        let taints = no_execute(all);
        if taints.is_empty() {
            first_seen.remove(&name);
            continue;
        }
        let seen = *first_seen.entry(name.clone()).or_insert(now);
        let since = tainted_since(&taints, seen);
        for pod in on_node.get(name.as_str()).into_iter().flatten() {
            if !is_evictable(pod) {
                continue;
            }
            if let Eviction::At(at) = decide(pod, &taints, since) {
                if at <= now {
                    due.push(((*pod).clone(), at));
                }
            }
        }
    }
    due
}

/// Not already being deleted, and not finished (the pod garbage
/// collector's).
fn is_evictable(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && !matches!(crate::common::pods::phase(pod), "Succeeded" | "Failed")
}

/// The DisruptionTarget condition kube's taint manager sets before it
/// deletes a pod.
pub fn disruption_target(now: Timestamp) -> serde_json::Value {
    serde_json::json!({
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "DeletionByTaintManager",
        "message": "Taint manager: deleting due to NoExecute taint",
        "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    })
}

/// The event of `pod` being evicted (`emitPodDeletionEvent`), recorded
/// before the eviction as Kubernetes does.
pub fn marked_for_deletion(pod: &Pod) -> Event {
    let namespace = pod.namespace().unwrap_or_default();
    event(
        pod,
        EventType::Normal,
        "TaintManagerEviction",
        format!("Marking for deletion Pod {namespace}/{}", pod.name_any()),
    )
}

/// Marks the pod with DisruptionTarget, then deletes it (gracefully).
async fn evict(client: &Client, pod: &Pod) -> Result<(), Error> {
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
    let patch =
        serde_json::json!({"status": {"conditions": [disruption_target(Timestamp::now())]}});
    match api
        .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
        Err(err) => return Err(failed("mark")(err)),
    }
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(err) => return Err(failed("delete")(err)),
    }
    tracing::info!(pod = %format!("{namespace}/{name}"), node = ?pod.spec.as_ref().and_then(|s| s.node_name.as_deref()), "evicted pod from a NoExecute-tainted node");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodelifecycle::fixtures::{at, node, pod, taint, toleration};

    const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

    fn names(due: &[(Arc<Pod>, Timestamp)]) -> Vec<String> {
        let mut names: Vec<String> = due.iter().map(|(p, _)| p.name_any()).collect();
        names.sort();
        names
    }

    #[test]
    fn pods_on_tainted_nodes_go_when_their_tolerations_run_out() {
        let nodes = vec![
            Arc::new(
                node("down")
                    .taint(taint(UNREACHABLE, "NoExecute", Some(at(100))))
                    .build(),
            ),
            Arc::new(node("up").build()),
        ];
        let mut finished = pod("finished", "down", vec![]);
        finished.status.as_mut().unwrap().phase = Some("Succeeded".into());
        let pods: Vec<Arc<Pod>> = vec![
            pod("intolerant", "down", vec![]),
            pod("short", "down", vec![toleration(UNREACHABLE, Some(5))]),
            pod("default", "down", vec![toleration(UNREACHABLE, Some(300))]),
            pod("forever", "down", vec![toleration(UNREACHABLE, None)]),
            pod("elsewhere", "up", vec![]),
            finished,
        ]
        .into_iter()
        .map(Arc::new)
        .collect();
        let mut seen = HashMap::new();
        assert_eq!(
            names(&due(&nodes, &pods, &mut seen, at(101))),
            ["intolerant"]
        );
        assert_eq!(
            names(&due(&nodes, &pods, &mut seen, at(105))),
            ["intolerant", "short"]
        );
        assert_eq!(
            names(&due(&nodes, &pods, &mut seen, at(400))),
            ["default", "intolerant", "short"]
        );
    }

    #[test]
    fn unstamped_taints_count_from_when_they_were_first_seen() {
        let nodes = vec![Arc::new(
            node("down")
                .taint(taint("example.com/x", "NoExecute", None))
                .build(),
        )];
        let pods = vec![Arc::new(pod(
            "p",
            "down",
            vec![toleration("example.com/x", Some(10))],
        ))];
        let mut seen = HashMap::new();
        assert!(due(&nodes, &pods, &mut seen, at(50)).is_empty());
        assert!(due(&nodes, &pods, &mut seen, at(59)).is_empty());
        assert_eq!(names(&due(&nodes, &pods, &mut seen, at(60))), ["p"]);
        // The taint goes: its clock is forgotten.
        let healed = vec![Arc::new(node("down").build())];
        assert!(due(&healed, &pods, &mut seen, at(61)).is_empty());
        assert!(seen.is_empty());
    }

    #[test]
    fn an_evicted_pod_is_marked_for_deletion() {
        let evicted = marked_for_deletion(&pod("web-0", "n1", vec![]));
        assert_eq!(evicted.regarding.kind.as_deref(), Some("Pod"));
        assert_eq!(evicted.regarding.name.as_deref(), Some("web-0"));
        assert_eq!(
            (
                evicted.type_,
                evicted.reason.as_str(),
                evicted.message.as_str()
            ),
            (
                EventType::Normal,
                "TaintManagerEviction",
                "Marking for deletion Pod default/web-0"
            )
        );
    }
}
