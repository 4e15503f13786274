//! The Events the kubelet records about pods and their containers, with
//! the reasons, types and messages of Kubernetes' kubelet (v1.33), so that
//! `kubectl describe pod` reads as it does there. Builders only: the
//! worker and the container runner decide when, and the recorder writes.

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use skiff_machinery::events::{reference, Event, EventType};

use super::shared::Slot;
use crate::probe::{ProbeKind, ProbeResult};

/// A container of `pod`, as the kubelet refers to it in events: the pod,
/// with the container's place in its spec as the field path.
pub fn container_reference(pod: &Pod, container: &str, slot: Slot) -> ObjectReference {
    let field = match slot {
        Slot::Init(_) => "spec.initContainers",
        Slot::Regular(_) => "spec.containers",
    };
    ObjectReference {
        field_path: Some(format!("{field}{{{container}}}")),
        ..reference(pod)
    }
}

fn event(regarding: ObjectReference, type_: EventType, reason: &str, message: String) -> Event {
    Event {
        regarding,
        type_,
        reason: reason.to_string(),
        message,
    }
}

/// `Pulled`: skiff runs processes and never pulls, so the image is always
/// "present".
pub fn pulled(container: ObjectReference, image: &str) -> Event {
    let message = format!(
        "Container image {} already present on machine",
        go_quote(image)
    );
    event(container, EventType::Normal, "Pulled", message)
}

pub fn created(container: ObjectReference, name: &str) -> Event {
    let message = format!("Created container: {name}");
    event(container, EventType::Normal, "Created", message)
}

pub fn started(container: ObjectReference, name: &str) -> Event {
    let message = format!("Started container {name}");
    event(container, EventType::Normal, "Started", message)
}

/// `Failed`: the container could not be configured, created or started.
pub fn failed(container: ObjectReference, why: &str) -> Event {
    event(
        container,
        EventType::Warning,
        "Failed",
        format!("Error: {why}"),
    )
}

/// Why a container is killed, for its `Killing` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillReason {
    /// The pod stops (deleted, evicted).
    Stopping,
    /// A probe failed; `restarts` when the restart policy brings it back.
    Probe { kind: ProbeKind, restarts: bool },
    /// Its postStart hook failed.
    FailedPostStartHook,
}

pub fn killing(container: ObjectReference, name: &str, slot: Slot, why: KillReason) -> Event {
    let message = match why {
        KillReason::Stopping => format!("Stopping container {name}"),
        KillReason::FailedPostStartHook => "FailedPostStartHook".to_string(),
        KillReason::Probe { kind, restarts } => {
            let probe = match kind {
                ProbeKind::Liveness => "liveness",
                ProbeKind::Startup => "startup",
                ProbeKind::Readiness => "readiness",
            };
            match slot {
                // A sidecar is started again by the init container loop.
                Slot::Init(_) => format!("Init container {name} failed {probe} probe"),
                Slot::Regular(_) if restarts => {
                    format!("Container {name} failed {probe} probe, will be restarted")
                }
                Slot::Regular(_) => format!("Container {name} failed {probe} probe"),
            }
        }
    };
    event(container, EventType::Normal, "Killing", message)
}

/// `BackOff`, while a failed container waits out its crash loop back-off;
/// `pod_label` is `name_namespace(uid)`.
pub fn back_off(container: ObjectReference, name: &str, pod_label: &str) -> Event {
    let message = format!("Back-off restarting failed container {name} in pod {pod_label}");
    event(container, EventType::Warning, "BackOff", message)
}

/// `Unhealthy` for a probe result that is not a success; `None` for a
/// success.
pub fn unhealthy(
    container: ObjectReference,
    kind: ProbeKind,
    result: &ProbeResult,
) -> Option<Event> {
    let probe = match kind {
        ProbeKind::Liveness => "Liveness",
        ProbeKind::Readiness => "Readiness",
        ProbeKind::Startup => "Startup",
    };
    let message = match result {
        ProbeResult::Success => return None,
        ProbeResult::Failure(output) => format!("{probe} probe failed: {output}"),
        ProbeResult::Unknown(why) => {
            format!("{probe} probe errored and resulted in unknown state: {why}")
        }
    };
    Some(event(container, EventType::Warning, "Unhealthy", message))
}

/// The hook's output stays out of the event, as the kubelet keeps it out
/// (it may hold secrets).
pub fn failed_post_start_hook(container: ObjectReference) -> Event {
    let message = "PostStartHook failed".to_string();
    event(
        container,
        EventType::Warning,
        "FailedPostStartHook",
        message,
    )
}

pub fn failed_pre_stop_hook(container: ObjectReference) -> Event {
    let message = "PreStopHook failed".to_string();
    event(container, EventType::Warning, "FailedPreStopHook", message)
}

/// `FailedMount` on the pod: its volumes could not be set up.
pub fn failed_mount(pod: &Pod, message: &str) -> Event {
    event(
        reference(pod),
        EventType::Warning,
        "FailedMount",
        message.to_string(),
    )
}

/// `FailedCreatePodSandBox` on the pod: its network could not be set up.
pub fn failed_create_pod_sandbox(pod: &Pod, why: &str) -> Event {
    let message = format!("Failed to create pod sandbox: {why}");
    event(
        reference(pod),
        EventType::Warning,
        "FailedCreatePodSandBox",
        message,
    )
}

/// `Evicted` on the pod, with the message its status gets.
pub fn evicted(pod: &Pod, message: &str) -> Event {
    event(
        reference(pod),
        EventType::Warning,
        "Evicted",
        message.to_string(),
    )
}

/// A string quoted as Go's `%q` quotes it (double quotes, backslash
/// escapes).
fn go_quote(s: &str) -> String {
    format!("{s:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u-1", "resourceVersion": "7"},
            "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}
        }))
        .unwrap()
    }

    fn app() -> ObjectReference {
        container_reference(&pod(), "app", Slot::Regular(0))
    }

    fn said(e: &Event) -> (EventType, &str, &str) {
        (e.type_, e.reason.as_str(), e.message.as_str())
    }

    #[test]
    fn container_events_refer_to_the_pod_and_the_container_field() {
        let r = app();
        assert_eq!(r.kind.as_deref(), Some("Pod"));
        assert_eq!(r.api_version.as_deref(), Some("v1"));
        assert_eq!(
            (r.namespace.as_deref(), r.name.as_deref(), r.uid.as_deref()),
            (Some("shop"), Some("web"), Some("u-1"))
        );
        assert_eq!(r.field_path.as_deref(), Some("spec.containers{app}"));
        let init = container_reference(&pod(), "setup", Slot::Init(0));
        assert_eq!(
            init.field_path.as_deref(),
            Some("spec.initContainers{setup}")
        );
    }

    #[test]
    fn a_container_start_is_pulled_created_started() {
        use EventType::*;
        assert_eq!(
            said(&pulled(app(), "nginx:1.27")),
            (
                Normal,
                "Pulled",
                "Container image \"nginx:1.27\" already present on machine"
            )
        );
        assert_eq!(
            said(&created(app(), "app")),
            (Normal, "Created", "Created container: app")
        );
        assert_eq!(
            said(&started(app(), "app")),
            (Normal, "Started", "Started container app")
        );
        let e = failed(app(), "configmap \"cfg\" not found");
        assert_eq!(
            said(&e),
            (Warning, "Failed", "Error: configmap \"cfg\" not found")
        );
        assert_eq!(
            e.regarding.field_path.as_deref(),
            Some("spec.containers{app}")
        );
    }

    #[test]
    fn killing_says_why() {
        let kill = |slot, why| killing(app(), "app", slot, why).message;
        assert_eq!(
            kill(Slot::Regular(0), KillReason::Stopping),
            "Stopping container app"
        );
        let liveness = KillReason::Probe {
            kind: ProbeKind::Liveness,
            restarts: true,
        };
        assert_eq!(
            kill(Slot::Regular(0), liveness),
            "Container app failed liveness probe, will be restarted"
        );
        let startup_never = KillReason::Probe {
            kind: ProbeKind::Startup,
            restarts: false,
        };
        assert_eq!(
            kill(Slot::Regular(0), startup_never),
            "Container app failed startup probe"
        );
        assert_eq!(
            kill(Slot::Init(0), startup_never),
            "Init container app failed startup probe"
        );
        assert_eq!(
            kill(Slot::Regular(0), KillReason::FailedPostStartHook),
            "FailedPostStartHook"
        );
        let e = killing(app(), "app", Slot::Regular(0), KillReason::Stopping);
        assert_eq!((e.type_, e.reason.as_str()), (EventType::Normal, "Killing"));
    }

    #[test]
    fn back_off_names_the_container_and_the_pod() {
        let e = back_off(app(), "app", "web_shop(u-1)");
        assert_eq!(
            said(&e),
            (
                EventType::Warning,
                "BackOff",
                "Back-off restarting failed container app in pod web_shop(u-1)"
            )
        );
    }

    #[test]
    fn failed_probes_are_unhealthy_with_their_output() {
        let failure = ProbeResult::Failure("HTTP probe failed with statuscode: 500".into());
        let cases = [
            (
                ProbeKind::Liveness,
                "Liveness probe failed: HTTP probe failed with statuscode: 500",
            ),
            (
                ProbeKind::Readiness,
                "Readiness probe failed: HTTP probe failed with statuscode: 500",
            ),
            (
                ProbeKind::Startup,
                "Startup probe failed: HTTP probe failed with statuscode: 500",
            ),
        ];
        for (kind, message) in cases {
            let e = unhealthy(app(), kind, &failure).unwrap();
            assert_eq!(said(&e), (EventType::Warning, "Unhealthy", message));
            assert_eq!(
                e.regarding.field_path.as_deref(),
                Some("spec.containers{app}")
            );
        }
        let unknown = ProbeResult::Unknown("gRPC probes are not supported".into());
        assert_eq!(
            unhealthy(app(), ProbeKind::Liveness, &unknown)
                .unwrap()
                .message,
            "Liveness probe errored and resulted in unknown state: gRPC probes are not supported"
        );
        assert!(unhealthy(app(), ProbeKind::Readiness, &ProbeResult::Success).is_none());
    }

    #[test]
    fn hooks_fail_without_their_output() {
        assert_eq!(
            said(&failed_post_start_hook(app())),
            (
                EventType::Warning,
                "FailedPostStartHook",
                "PostStartHook failed"
            )
        );
        assert_eq!(
            said(&failed_pre_stop_hook(app())),
            (
                EventType::Warning,
                "FailedPreStopHook",
                "PreStopHook failed"
            )
        );
    }

    #[test]
    fn pod_events_refer_to_the_pod_itself() {
        let mount = failed_mount(
            &pod(),
            "MountVolume.SetUp failed for volume \"cfg\" : configmap \"cfg\" not found",
        );
        assert_eq!(
            said(&mount),
            (
                EventType::Warning,
                "FailedMount",
                "MountVolume.SetUp failed for volume \"cfg\" : configmap \"cfg\" not found"
            )
        );
        assert_eq!(mount.regarding.field_path, None);
        assert_eq!(mount.regarding.name.as_deref(), Some("web"));
        let sandbox = failed_create_pod_sandbox(&pod(), "no pod CIDR yet");
        assert_eq!(
            said(&sandbox),
            (
                EventType::Warning,
                "FailedCreatePodSandBox",
                "Failed to create pod sandbox: no pod CIDR yet"
            )
        );
        let evicted = evicted(&pod(), "The node was low on resource: memory.");
        assert_eq!(
            said(&evicted),
            (
                EventType::Warning,
                "Evicted",
                "The node was low on resource: memory."
            )
        );
        assert_eq!(evicted.regarding.field_path, None);
    }
}
