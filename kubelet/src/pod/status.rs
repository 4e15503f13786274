//! A pod's status as the kubelet reports it, computed from its containers'
//! statuses: phase, conditions and addresses, by Kubernetes' rules. Pure
//! functions; the worker decides when to write the result.

use k8s_openapi::api::core::v1::{ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// What the worker knows beyond its containers.
#[derive(Debug, Clone, Default)]
pub struct PodFacts {
    pub host_ip: String,
    pub pod_ip: String,
    /// The pod's network namespace once its network is set up; `None`:
    /// the host's network (pod_ip is then the host's).
    pub netns: Option<std::path::PathBuf>,
    /// The pod's own files (hosts, resolv.conf) for its processes' mount
    /// namespace, once written; `None`: the kubelet makes none.
    pub files: Option<std::path::PathBuf>,
    pub start_time: Option<jiff::Timestamp>,
    /// The pod's volumes are ready and its containers may start.
    pub sandbox_ready: bool,
    /// Init containers all done (or the pod has none).
    pub initialized: bool,
    /// Set when the pod was evicted or otherwise failed for good: phase
    /// Failed with this reason and message.
    pub failed: Option<(String, String)>,
}

/// The status to write for `pod`, given its containers' statuses.
pub fn pod_status(
    pod: &Pod,
    init: &[ContainerStatus],
    containers: &[ContainerStatus],
    facts: &PodFacts,
    now: jiff::Timestamp,
) -> PodStatus {
    let previous = pod.status.clone().unwrap_or_default();
    let phase = match &facts.failed {
        Some(_) => "Failed",
        None => phase(restart_policy(pod), init, containers, facts.initialized),
    };
    let ready_containers = !containers.is_empty() && containers.iter().all(|c| c.ready);
    let mut status = PodStatus {
        phase: Some(phase.to_string()),
        host_ip: non_empty(&facts.host_ip),
        host_ips: non_empty(&facts.host_ip).map(|ip| vec![HostIP { ip }]),
        pod_ip: non_empty(&facts.pod_ip),
        pod_ips: non_empty(&facts.pod_ip).map(|ip| vec![PodIP { ip }]),
        start_time: previous.start_time.clone().or(facts.start_time.map(Time)),
        qos_class: Some(crate::eviction::qos_class(pod).to_string()),
        init_container_statuses: (!init.is_empty()).then(|| init.to_vec()),
        container_statuses: Some(containers.to_vec()),
        nominated_node_name: previous.nominated_node_name.clone(),
        ..Default::default()
    };
    if let Some((reason, message)) = &facts.failed {
        status.reason = Some(reason.clone());
        status.message = Some(message.clone());
    }
    let terminal = matches!(phase, "Succeeded" | "Failed");
    let mut conditions = Vec::new();
    let mut add = |kind: &str, ok: bool, reason: Option<String>, message: Option<String>| {
        conditions.push(condition(&previous, kind, ok, reason, message, now));
    };
    if let Some((_, message)) = facts.failed.as_ref().filter(|(r, _)| r == "Evicted") {
        // As the kubelet marks the pods it evicts.
        add(
            "DisruptionTarget",
            true,
            Some("TerminationByKubelet".into()),
            Some(message.clone()),
        );
    }
    add("PodReadyToStartContainers", facts.sandbox_ready, None, None);
    if facts.initialized {
        add("Initialized", true, None, None);
    } else {
        let waiting = unfinished(init, terminated_ok);
        add(
            "Initialized",
            false,
            Some("ContainersNotInitialized".into()),
            Some(format!("containers with incomplete status: [{waiting}]")),
        );
    }
    let (reason, message) = if terminal {
        (Some("PodCompleted".to_string()), None)
    } else if ready_containers {
        (None, None)
    } else {
        let unready = unfinished(containers, |c| c.ready);
        (
            Some("ContainersNotReady".to_string()),
            Some(format!("containers with unready status: [{unready}]")),
        )
    };
    let ready = ready_containers && !terminal;
    add("ContainersReady", ready, reason.clone(), message.clone());
    add("Ready", ready, reason, message);
    for kept in previous.conditions.iter().flatten() {
        if !conditions.iter().any(|c| c.type_ == kept.type_) {
            conditions.push(kept.clone());
        }
    }
    status.conditions = Some(conditions);
    status
}

/// The pod's phase by kubelet's rules: Pending until initialized and every
/// container has started once; Succeeded or Failed when all have stopped
/// and none will restart; Running otherwise.
pub fn phase(
    policy: RestartPolicyKind,
    init: &[ContainerStatus],
    containers: &[ContainerStatus],
    initialized: bool,
) -> &'static str {
    let init_failed = init.iter().any(|c| {
        terminated_exit(c).is_some_and(|code| code != 0) && policy == RestartPolicyKind::Never
    });
    if init_failed {
        return "Failed";
    }
    if !initialized {
        return "Pending";
    }
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for c in containers {
        let state = c.state.as_ref();
        if state.and_then(|s| s.running.as_ref()).is_some() {
            running += 1;
        } else if let Some(code) = terminated_exit(c) {
            stopped += 1;
            if code == 0 {
                succeeded += 1;
            }
        } else if c
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .is_some()
        {
            // Waiting to restart after a run.
            stopped += 1;
        } else {
            waiting += 1;
        }
    }
    if waiting > 0 {
        return "Pending";
    }
    if running > 0 {
        return "Running";
    }
    if stopped == 0 {
        return "Pending";
    }
    let restarting = containers.iter().any(|c| terminated_exit(c).is_none());
    match policy {
        RestartPolicyKind::Always => "Running",
        _ if restarting => "Running",
        _ if succeeded == stopped => "Succeeded",
        RestartPolicyKind::OnFailure => "Running",
        RestartPolicyKind::Never => "Failed",
    }
}

/// `spec.restartPolicy`, Always by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicyKind {
    Always,
    OnFailure,
    Never,
}

impl RestartPolicyKind {
    pub fn of(policy: Option<&String>) -> RestartPolicyKind {
        match policy.map(String::as_str) {
            Some("Never") => RestartPolicyKind::Never,
            Some("OnFailure") => RestartPolicyKind::OnFailure,
            _ => RestartPolicyKind::Always,
        }
    }

    /// Whether a container that exited with `exit_code` runs again.
    pub fn restarts(self, exit_code: i32) -> bool {
        match self {
            RestartPolicyKind::Always => true,
            RestartPolicyKind::OnFailure => exit_code != 0,
            RestartPolicyKind::Never => false,
        }
    }
}

pub fn restart_policy(pod: &Pod) -> RestartPolicyKind {
    RestartPolicyKind::of(pod.spec.as_ref().and_then(|s| s.restart_policy.as_ref()))
}

/// The exit code of a container whose current state is terminated.
fn terminated_exit(status: &ContainerStatus) -> Option<i32> {
    status
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .map(|t| t.exit_code)
}

fn terminated_ok(status: &ContainerStatus) -> bool {
    terminated_exit(status) == Some(0)
}

/// Names of the containers not passing `done`, space-separated.
fn unfinished(statuses: &[ContainerStatus], done: impl Fn(&ContainerStatus) -> bool) -> String {
    statuses
        .iter()
        .filter(|c| !done(c))
        .map(|c| c.name.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

/// A condition, keeping the previous transition time when its status is
/// unchanged.
fn condition(
    previous: &PodStatus,
    kind: &str,
    ok: bool,
    reason: Option<String>,
    message: Option<String>,
    now: jiff::Timestamp,
) -> PodCondition {
    let status = if ok { "True" } else { "False" };
    let before = previous
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == kind);
    let transition = match before {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => None,
    };
    PodCondition {
        type_: kind.to_string(),
        status: status.to_string(),
        reason,
        message,
        last_probe_time: None,
        last_transition_time: Some(transition.unwrap_or(Time(now))),
        ..Default::default()
    }
}

fn non_empty(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    };

    fn running(name: &str, ready: bool) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            ready,
            state: Some(ContainerState {
                running: Some(ContainerStateRunning::default()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn exited(name: &str, code: i32) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: code,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn waiting(name: &str, restarted: bool) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("CrashLoopBackOff".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            last_state: restarted.then(|| ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 1,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    use RestartPolicyKind::*;

    #[test]
    fn phases_follow_the_kubelet_rules() {
        assert_eq!(phase(Always, &[], &[running("a", true)], false), "Pending");
        assert_eq!(phase(Always, &[], &[running("a", true)], true), "Running");
        assert_eq!(phase(Always, &[], &[waiting("a", false)], true), "Pending");
        assert_eq!(phase(Always, &[], &[waiting("a", true)], true), "Running");
        assert_eq!(phase(Never, &[], &[exited("a", 0)], true), "Succeeded");
        assert_eq!(phase(Never, &[], &[exited("a", 2)], true), "Failed");
        assert_eq!(
            phase(Never, &[], &[exited("a", 0), running("b", true)], true),
            "Running"
        );
        assert_eq!(phase(OnFailure, &[], &[exited("a", 0)], true), "Succeeded");
        assert_eq!(
            phase(OnFailure, &[], &[waiting("a", true)], true),
            "Running"
        );
        assert_eq!(phase(Never, &[exited("init", 1)], &[], false), "Failed");
        assert_eq!(phase(Always, &[exited("init", 1)], &[], false), "Pending");
    }

    #[test]
    fn restart_policies_decide_restarts() {
        assert!(Always.restarts(0));
        assert!(OnFailure.restarts(1) && !OnFailure.restarts(0));
        assert!(!Never.restarts(1));
        assert_eq!(RestartPolicyKind::of(None), Always);
    }

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"}
            ]}
        }))
        .unwrap()
    }

    #[test]
    fn conditions_name_the_unready_containers_and_keep_transition_times() {
        let facts = PodFacts {
            host_ip: "127.0.0.1".into(),
            pod_ip: "127.0.0.1".into(),
            sandbox_ready: true,
            initialized: true,
            ..Default::default()
        };
        let now: jiff::Timestamp = "2026-02-02T00:00:00Z".parse().unwrap();
        let containers = [running("a", true), running("b", false)];
        let status = pod_status(&pod(), &[], &containers, &facts, now);
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.pod_ip.as_deref(), Some("127.0.0.1"));
        let conditions = status.conditions.unwrap();
        let ready = conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.status, "False");
        assert_eq!(
            ready.message.as_deref(),
            Some("containers with unready status: [b]")
        );
        assert_eq!(
            ready.last_transition_time.as_ref().unwrap().0.to_string(),
            "2026-01-01T00:00:00Z"
        );
        assert!(conditions.iter().any(|c| c.type_ == "PodScheduled"));

        let all_ready = [running("a", true), running("b", true)];
        let status = pod_status(&pod(), &[], &all_ready, &facts, now);
        let conditions = status.conditions.unwrap();
        let ready = conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.status, "True");
        assert_eq!(ready.last_transition_time.as_ref().unwrap().0, now);
    }

    #[test]
    fn an_evicted_pod_is_failed_with_its_reason() {
        let facts = PodFacts {
            initialized: true,
            failed: Some((
                "Evicted".into(),
                "The node was low on resource: memory.".into(),
            )),
            ..Default::default()
        };
        let now = jiff::Timestamp::now();
        let status = pod_status(&pod(), &[], &[exited("a", 137)], &facts, now);
        assert_eq!(status.phase.as_deref(), Some("Failed"));
        assert_eq!(status.reason.as_deref(), Some("Evicted"));
        let conditions = status.conditions.unwrap();
        let ready = conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.reason.as_deref(), Some("PodCompleted"));
        let disruption = conditions
            .iter()
            .find(|c| c.type_ == "DisruptionTarget")
            .unwrap();
        assert_eq!(disruption.reason.as_deref(), Some("TerminationByKubelet"));
    }
}
