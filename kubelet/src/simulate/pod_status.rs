//! The status a simulated node writes for its pods: Running with every
//! container running and ready, then Succeeded with each terminated as
//! Completed; shaped as a real kubelet writes it, so kubectl reads it.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};

/// The annotation giving how long a simulated pod runs before it
/// succeeds, as a Go duration (`5s`, `1m30s`).
pub const RUN_FOR_ANNOTATION: &str = "skiff.dev/simulate-run-for";

fn time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The fake container ID of a simulated container.
pub fn container_id(pod_uid: &str, container: &str) -> String {
    format!("skiff-sim://{pod_uid}/{container}")
}

fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

/// The PodScheduled condition's transition time, kept as the scheduler
/// wrote it.
fn scheduled_at(pod: &Pod, now: &str) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| time(t.0))
        .unwrap_or_else(|| now.to_string())
}

fn condition(type_: &str, status: bool, at: &str, reason: Option<&str>) -> Value {
    let mut c = json!({
        "type": type_,
        "status": if status { "True" } else { "False" },
        "lastProbeTime": null,
        "lastTransitionTime": at,
    });
    if let Some(reason) = reason {
        c["reason"] = json!(reason);
    }
    c
}

/// The body of a status patch moving `pod` to Running at `now`, with
/// its addresses (one a family; the first is podIP) and its node's.
pub fn running_status(pod: &Pod, pod_ips: &[String], host_ip: &str, now: Timestamp) -> Value {
    let now = time(now);
    let spec = pod.spec.clone().unwrap_or_default();
    let containers: Vec<Value> = spec
        .containers
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "image": c.image.clone().unwrap_or_default(),
                "imageID": c.image.clone().unwrap_or_default(),
                "containerID": container_id(uid(pod), &c.name),
                "ready": true,
                "started": true,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            })
        })
        .collect();
    let init: Vec<Value> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| {
            json!({
                "name": c.name,
                "image": c.image.clone().unwrap_or_default(),
                "imageID": c.image.clone().unwrap_or_default(),
                "containerID": container_id(uid(pod), &c.name),
                "ready": true,
                "started": false,
                "restartCount": 0,
                "state": {"terminated": {
                    "exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now,
                    "containerID": container_id(uid(pod), &c.name),
                }},
            })
        })
        .collect();
    let mut status = json!({
        "phase": "Running",
        "conditions": [
            condition("PodReadyToStartContainers", true, &now, None),
            condition("Initialized", true, &now, None),
            condition("Ready", true, &now, None),
            condition("ContainersReady", true, &now, None),
            condition("PodScheduled", true, &scheduled_at(pod, &now), None),
        ],
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "startTime": now,
        "containerStatuses": containers,
    });
    if let Some(first) = pod_ips.first() {
        status["podIP"] = json!(first);
        status["podIPs"] = pod_ips.iter().map(|ip| json!({ "ip": ip })).collect();
    }
    if !init.is_empty() {
        status["initContainerStatuses"] = json!(init);
    }
    json!({ "status": status })
}

/// The body of a status patch moving a running `pod` to Succeeded at
/// `now`: every container exited 0.
pub fn succeeded_status(pod: &Pod, now: Timestamp) -> Value {
    let now = time(now);
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| time(t.0))
        .unwrap_or_else(|| now.clone());
    let spec = pod.spec.clone().unwrap_or_default();
    let containers: Vec<Value> = spec
        .containers
        .iter()
        .map(|c| {
            let id = container_id(uid(pod), &c.name);
            json!({
                "name": c.name,
                "image": c.image.clone().unwrap_or_default(),
                "imageID": c.image.clone().unwrap_or_default(),
                "containerID": id,
                "ready": false,
                "started": false,
                "restartCount": 0,
                "state": {"terminated": {
                    "exitCode": 0, "reason": "Completed",
                    "startedAt": started, "finishedAt": now, "containerID": id,
                }},
            })
        })
        .collect();
    json!({"status": {
        "phase": "Succeeded",
        "conditions": [
            condition("PodReadyToStartContainers", false, &now, None),
            condition("Ready", false, &now, Some("PodCompleted")),
            condition("ContainersReady", false, &now, Some("PodCompleted")),
        ],
        "containerStatuses": containers,
    }})
}

/// How long `pod` runs before it succeeds, from its annotation; `None`
/// when absent or not a duration (it then runs until deleted).
pub fn run_for(pod: &Pod) -> Option<Duration> {
    let text = pod.metadata.annotations.as_ref()?.get(RUN_FOR_ANNOTATION)?;
    skiff_machinery::duration::parse(text.trim()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodStatus;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u-1",
                         "annotations": {RUN_FOR_ANNOTATION: "5s"}},
            "spec": {"nodeName": "sim-0",
                     "initContainers": [{"name": "setup", "image": "busybox"}],
                     "containers": [{"name": "app", "image": "nginx:1.27"}, {"name": "side", "image": "envoy"}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}]},
        }))
        .unwrap()
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_700_000_000).unwrap()
    }

    fn ips(ips: &[&str]) -> Vec<String> {
        ips.iter().map(|ip| ip.to_string()).collect()
    }

    #[test]
    fn running_status_reads_as_a_kubelets() {
        let patch = running_status(&pod(), &ips(&["10.244.0.7"]), "100.64.0.0", now());
        let status = &patch["status"];
        assert_eq!(status["phase"], "Running");
        assert_eq!(status["podIP"], "10.244.0.7");
        assert_eq!(status["podIPs"], json!([{"ip": "10.244.0.7"}]));
        assert_eq!(status["hostIP"], "100.64.0.0");
        assert_eq!(status["startTime"], "2023-11-14T22:13:20Z");
        let conditions = status["conditions"].as_array().unwrap();
        for type_ in ["Initialized", "ContainersReady", "Ready", "PodScheduled"] {
            let c = conditions.iter().find(|c| c["type"] == type_).unwrap();
            assert_eq!(c["status"], "True", "{type_}");
        }
        let scheduled = conditions
            .iter()
            .find(|c| c["type"] == "PodScheduled")
            .unwrap();
        assert_eq!(scheduled["lastTransitionTime"], "2024-01-01T00:00:00Z");
        let app = &status["containerStatuses"][0];
        assert_eq!(app["name"], "app");
        assert_eq!(app["containerID"], "skiff-sim://u-1/app");
        assert_eq!(app["ready"], true);
        assert_eq!(app["started"], true);
        assert_eq!(app["state"]["running"]["startedAt"], "2023-11-14T22:13:20Z");
        assert_eq!(status["containerStatuses"].as_array().unwrap().len(), 2);
        assert_eq!(
            status["initContainerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
        // And it is a valid PodStatus for the typed client.
        let typed: PodStatus = serde_json::from_value(status.clone()).unwrap();
        assert_eq!(typed.container_statuses.unwrap().len(), 2);
    }

    #[test]
    fn a_dual_stack_pod_reports_an_address_of_each_family() {
        let dual = ips(&["10.244.3.2", "fd00:10:244:3::2"]);
        let patch = running_status(&pod(), &dual, "100.64.0.3", now());
        let typed: PodStatus = serde_json::from_value(patch["status"].clone()).unwrap();
        assert_eq!(typed.pod_ip.as_deref(), Some("10.244.3.2"));
        let all: Vec<String> = typed.pod_ips.unwrap().into_iter().map(|i| i.ip).collect();
        assert_eq!(all, dual);
    }

    #[test]
    fn succeeded_status_terminates_every_container_with_exit_0() {
        let mut running = pod();
        let patch = running_status(&running, &ips(&["10.244.0.7"]), "100.64.0.0", now());
        running.status = serde_json::from_value(patch["status"].clone()).unwrap();
        let later = Timestamp::from_second(1_700_000_005).unwrap();
        let patch = succeeded_status(&running, later);
        let status = &patch["status"];
        assert_eq!(status["phase"], "Succeeded");
        let terminated = &status["containerStatuses"][1]["state"]["terminated"];
        assert_eq!(terminated["exitCode"], 0);
        assert_eq!(terminated["reason"], "Completed");
        assert_eq!(terminated["startedAt"], "2023-11-14T22:13:20Z");
        assert_eq!(terminated["finishedAt"], "2023-11-14T22:13:25Z");
        let ready = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        assert_eq!(ready["status"], "False");
        assert_eq!(ready["reason"], "PodCompleted");
        let typed: PodStatus = serde_json::from_value(status.clone()).unwrap();
        assert_eq!(typed.phase.as_deref(), Some("Succeeded"));
    }

    #[test]
    fn go_durations_parse() {
        assert_eq!(run_for(&pod()), Some(Duration::from_secs(5)));
    }
}
