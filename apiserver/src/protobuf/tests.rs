use serde_json::json;

use super::*;

/// A sample of every served built-in kind, with the fields whose wire form
/// is special: times, quantities, int-or-strings, bytes, raw JSON, inline
/// fields, maps, pointers to zero values.
fn samples() -> Vec<Json> {
    let meta = |name: &str| {
        json!({
            "name": name, "namespace": "default", "uid": "0b5d4f7e-1c1a-4c37-9d64-3f2f3f0e6f11",
            "resourceVersion": "42", "generation": 3,
            "creationTimestamp": "2026-12-05T10:11:12Z",
            "labels": {"app": "web", "tier": "front"}, "annotations": {"a": "b"},
            "finalizers": ["example.com/keep"],
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1",
                "uid": "7c1e2a8e-0000-4000-8000-000000000001", "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                "time": "2026-12-05T10:11:12Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}}]
        })
    };
    let pod_spec = json!({
        "containers": [{
            "name": "web", "image": "nginx:1.27", "command": ["nginx"], "args": ["-g", "daemon off;"],
            "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}],
            "env": [{"name": "A", "value": "1"},
                    {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k", "optional": false}}},
                    {"name": "C", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}}],
            "envFrom": [{"secretRef": {"name": "s"}}],
            "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "250m", "memory": "64Mi"}},
            "livenessProbe": {"httpGet": {"path": "/", "port": "http", "scheme": "HTTP"}, "periodSeconds": 10},
            "readinessProbe": {"tcpSocket": {"port": 80}, "initialDelaySeconds": 1},
            "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": true}],
            "securityContext": {"runAsUser": 0, "runAsNonRoot": false, "allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"]}},
            "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "IfNotPresent"
        }],
        "volumes": [{"name": "data", "configMap": {"name": "cm", "defaultMode": 420}},
                    {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}},
                    {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}}],
        "restartPolicy": "Always", "terminationGracePeriodSeconds": 0, "dnsPolicy": "ClusterFirst",
        "nodeSelector": {"disk": "ssd"}, "serviceAccountName": "default",
        "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 30}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms":
            [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}}}
    });
    let template = json!({"metadata": {"labels": {"app": "web"}}, "spec": pod_spec.clone()});
    let selector = json!({"matchLabels": {"app": "web"}});
    let props = json!({
        "type": "object", "description": "a widget",
        "required": ["spec"],
        "properties": {
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                "properties": {"size": {"type": "integer", "minimum": 1, "maximum": 10.5, "default": 3},
                               "port": {"x-kubernetes-int-or-string": true},
                               "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                               "mode": {"type": "string", "enum": ["a", "b"]}}},
            "extra": {"type": "object", "additionalProperties": {"type": "string"}}
        }
    });
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": meta("ns"), "spec": {"finalizers": ["kubernetes"]},
               "status": {"phase": "Active"}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta("web"), "spec": pod_spec.clone(),
               "status": {"phase": "Running", "podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}],
                 "startTime": "2026-12-05T10:11:13Z", "qosClass": "Burstable",
                 "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-05T10:11:14Z"}],
                 "containerStatuses": [{"name": "web", "ready": true, "restartCount": 0, "image": "nginx:1.27",
                   "imageID": "", "started": true,
                   "state": {"running": {"startedAt": "2026-12-05T10:11:13Z"}}}]}}),
        json!({"apiVersion": "v1", "kind": "Node", "metadata": meta("n1"),
               "spec": {"podCIDR": "10.0.1.0/24", "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}], "unschedulable": true},
               "status": {"capacity": {"cpu": "2", "memory": "24Gi", "pods": "110"},
                 "allocatable": {"cpu": "1900m", "memory": "23Gi", "pods": "110"},
                 "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                 "nodeInfo": {"machineID": "m", "systemUUID": "u", "bootID": "b", "kernelVersion": "6", "osImage": "Debian",
                   "containerRuntimeVersion": "skiff://1", "kubeletVersion": "v1.33.0", "kubeProxyVersion": "v1.33.0",
                   "operatingSystem": "linux", "architecture": "amd64"},
                 "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                 "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-12-05T10:11:14Z",
                   "lastTransitionTime": "2026-12-05T10:11:14Z", "reason": "KubeletReady", "message": "ready"}]}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": meta("web"),
               "spec": {"type": "NodePort", "selector": {"app": "web"}, "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                 "ports": [{"name": "http", "port": 80, "targetPort": "http", "nodePort": 30080, "protocol": "TCP"},
                           {"name": "alt", "port": 81, "targetPort": 8081, "protocol": "TCP"}],
                 "sessionAffinity": "None", "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                 "externalTrafficPolicy": "Cluster", "internalTrafficPolicy": "Cluster"},
               "status": {"loadBalancer": {}}}),
        json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": meta("web"),
               "subsets": [{"addresses": [{"ip": "10.0.0.5", "nodeName": "n1",
                 "targetRef": {"kind": "Pod", "name": "web", "namespace": "default"}}],
                 "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}]}),
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": meta("web-abc"),
               "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.5"], "conditions": {"ready": true, "serving": true, "terminating": false}}],
               "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}),
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": meta("fast"),
               "provisioner": "example.com/disk", "parameters": {"type": "ssd"}, "reclaimPolicy": "Delete",
               "volumeBindingMode": "WaitForFirstConsumer", "allowVolumeExpansion": true}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("cm"), "data": {"k": "v", "empty": ""},
               "binaryData": {"bin": "AAEC/w=="}, "immutable": false}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta("s"), "type": "Opaque",
               "data": {"password": "c2VjcmV0", "zero": ""}, "immutable": true}),
        json!({"apiVersion": "v1", "kind": "Event", "metadata": meta("web.1"),
               "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default", "apiVersion": "v1"},
               "reason": "Started", "message": "Started container web", "source": {"component": "kubelet", "host": "n1"},
               "firstTimestamp": "2026-12-05T10:11:13Z", "lastTimestamp": "2026-12-05T10:11:13Z", "count": 1, "type": "Normal",
               "eventTime": "2026-12-05T10:11:13.123456Z", "reportingComponent": "kubelet", "reportingInstance": "n1"}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta("default"),
               "secrets": [{"name": "tok"}], "imagePullSecrets": [{"name": "reg"}], "automountServiceAccountToken": false}),
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": meta("pv1"),
               "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/pv1", "type": ""},
                 "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "fast", "volumeMode": "Filesystem",
                 "claimRef": {"kind": "PersistentVolumeClaim", "namespace": "default", "name": "data"}},
               "status": {"phase": "Bound"}}),
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta("data"),
               "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                 "storageClassName": "fast", "volumeName": "pv1", "volumeMode": "Filesystem"},
               "status": {"phase": "Bound", "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"]}}),
        json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta("q"),
               "spec": {"hard": {"pods": "10", "requests.cpu": "4"}}, "status": {"hard": {"pods": "10"}, "used": {"pods": "1"}}}),
        json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": meta("lr"),
               "spec": {"limits": [{"type": "Container", "default": {"cpu": "500m"}, "defaultRequest": {"cpu": "100m"},
                 "max": {"memory": "1Gi"}, "min": {"memory": "4Mi"}, "maxLimitRequestRatio": {"cpu": "10"}}]}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("web"),
               "spec": {"replicas": 0, "selector": selector.clone(), "template": template.clone(),
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": 1}},
                 "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600, "paused": true},
               "status": {"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2,
                 "availableReplicas": 2, "conditions": [{"type": "Available", "status": "True",
                 "lastUpdateTime": "2026-12-05T10:11:14Z", "lastTransitionTime": "2026-12-05T10:11:14Z", "reason": "MinimumReplicasAvailable", "message": "ok"}]}}),
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta("web-1"),
               "spec": {"replicas": 2, "selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]},
                 "template": template.clone(), "minReadySeconds": 5},
               "status": {"replicas": 2, "fullyLabeledReplicas": 2, "readyReplicas": 2, "availableReplicas": 2, "observedGeneration": 1}}),
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta("agent"),
               "spec": {"selector": selector.clone(), "template": template.clone(),
                 "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}},
               "status": {"currentNumberScheduled": 1, "numberMisscheduled": 0, "desiredNumberScheduled": 1, "numberReady": 1}}),
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta("db"),
               "spec": {"replicas": 3, "selector": selector.clone(), "template": template.clone(), "serviceName": "db",
                 "podManagementPolicy": "Parallel", "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
                 "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
                   "resources": {"requests": {"storage": "1Gi"}}}}],
                 "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Delete"}},
               "status": {"replicas": 3, "readyReplicas": 3, "currentRevision": "db-1", "updateRevision": "db-1"}}),
        json!({"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": meta("db-1"),
               "data": {"spec": {"template": {"metadata": {"labels": {"app": "web"}}}}}, "revision": 1}),
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("once"),
               "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "activeDeadlineSeconds": 60,
                 "ttlSecondsAfterFinished": 0, "completionMode": "NonIndexed", "suspend": false,
                 "template": {"metadata": {}, "spec": {"containers": [{"name": "c", "image": "busybox"}], "restartPolicy": "Never"}}},
               "status": {"succeeded": 1, "startTime": "2026-12-05T10:11:13Z", "completionTime": "2026-12-05T10:11:20Z",
                 "conditions": [{"type": "Complete", "status": "True", "lastProbeTime": "2026-12-05T10:11:20Z",
                   "lastTransitionTime": "2026-12-05T10:11:20Z"}]}}),
        json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta("nightly"),
               "spec": {"schedule": "0 3 * * *", "timeZone": "Etc/UTC", "concurrencyPolicy": "Forbid",
                 "startingDeadlineSeconds": 100, "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 1, "suspend": false,
                 "jobTemplate": {"metadata": {"labels": {"a": "b"}}, "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}], "restartPolicy": "OnFailure"}}}}},
               "status": {"lastScheduleTime": "2026-12-05T03:00:00Z", "active": [{"kind": "Job", "name": "nightly-1"}]}}),
        json!({"apiVersion": "batch/v1beta1", "kind": "CronJob", "metadata": meta("nightly"),
               "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}}}),
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": meta("high"),
               "value": 1000000, "globalDefault": true, "description": "high", "preemptionPolicy": "PreemptLowerPriority"}),
        json!({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PriorityClass", "metadata": meta("low"), "value": -5}),
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta("leader"),
               "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "acquireTime": "2026-12-05T10:11:13.000001Z",
                 "renewTime": "2026-12-05T10:11:14.500000Z", "leaseTransitions": 0}}),
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta("pdb"),
               "spec": {"minAvailable": "50%", "selector": selector.clone(), "unhealthyPodEvictionPolicy": "AlwaysAllow"},
               "status": {"currentHealthy": 1, "desiredHealthy": 1, "disruptionsAllowed": 0, "expectedPods": 1,
                 "disruptedPods": {"web-x": "2026-12-05T10:11:13Z"}}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta("reader"),
               "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"], "resourceNames": ["a"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta("agg"),
               "rules": [{"nonResourceURLs": ["/healthz"], "verbs": ["get"]}],
               "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "true"}}]}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta("read"),
               "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"},
                            {"kind": "ServiceAccount", "name": "default", "namespace": "default"}],
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta("all"),
               "subjects": [{"kind": "Group", "name": "devs", "apiGroup": "rbac.authorization.k8s.io"}],
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "agg"}}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration", "metadata": meta("m"),
               "webhooks": [{"name": "m.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                 "clientConfig": {"url": "https://127.0.0.1:9443/m", "caBundle": "Y2E="},
                 "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "*"}],
                 "failurePolicy": "Fail", "timeoutSeconds": 5, "reinvocationPolicy": "Never",
                 "namespaceSelector": {}, "objectSelector": {"matchLabels": {"x": "y"}}}]}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": meta("v"),
               "webhooks": [{"name": "v.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                 "clientConfig": {"service": {"namespace": "default", "name": "hook", "path": "/v", "port": 443}},
                 "matchConditions": [{"name": "c", "expression": "true"}]}]}),
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": meta("widgets.example.com"),
               "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList", "shortNames": ["wd"]},
                 "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": props},
                   "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size"}},
                   "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}]}]},
               "status": {"acceptedNames": {"plural": "widgets", "kind": "Widget"}, "storedVersions": ["v1"],
                 "conditions": [{"type": "Established", "status": "True", "lastTransitionTime": "2026-12-05T10:11:14Z"}]}}),
    ]
}

/// What JSON → protobuf → JSON may change: nulls, empty lists and maps
/// have no protobuf form (Go leaves them out of its JSON too).
fn normalized(value: &Json) -> Json {
    match value {
        Json::Object(map) => Json::Object(
            map.iter()
                .filter(|(_, v)| !(v.is_null() || v.as_array().is_some_and(Vec::is_empty)))
                .map(|(k, v)| (k.clone(), normalized(v)))
                .collect(),
        ),
        Json::Array(items) => Json::Array(items.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

#[test]
fn every_served_kind_round_trips_json_protobuf_json() {
    let samples = samples();
    for row in crate::resources::served() {
        if row.custom.is_some() {
            continue;
        }
        let api_version = row.api_version();
        assert!(
            samples
                .iter()
                .any(|s| s["apiVersion"] == api_version && s["kind"] == row.kind),
            "no sample of {api_version} {}: add one",
            row.kind
        );
    }
    for sample in &samples {
        let body = encode(sample).unwrap_or_else(|e| panic!("{}: {e}", sample["kind"]));
        assert!(body.starts_with(MAGIC));
        let back = decode(&body).unwrap_or_else(|e| panic!("{}: {e}", sample["kind"]));
        let (back, sample) = (normalized(&back), normalized(sample));
        assert!(
            back == sample,
            "{} {}:\n{}\n{}",
            sample["apiVersion"],
            sample["kind"],
            serde_json::to_string(&back).unwrap(),
            serde_json::to_string(&sample).unwrap()
        );
    }
}

#[test]
fn a_list_round_trips_with_its_metadata() {
    let list = json!({"apiVersion": "v1", "kind": "PodList",
        "metadata": {"resourceVersion": "7", "continue": "abc", "remainingItemCount": 3},
        "items": [{"metadata": {"name": "a", "namespace": "default"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}]});
    let back = decode(&encode(&list).unwrap()).unwrap();
    assert_eq!(back["metadata"], list["metadata"]);
    assert_eq!(back["items"][0]["spec"]["containers"][0]["image"], "i");
}

#[test]
fn go_zero_values_are_left_out_as_go_leaves_them_out() {
    // What a Go client writes for `kubectl create deployment web
    // --image=nginx`: every non-pointer field, empty or zero.
    let descriptor = SCHEMA.message("k8s.io.api.apps.v1.Deployment").unwrap();
    let sent = json!({"metadata": {"name": "web", "creationTimestamp": null},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
          "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}},
          "strategy": {}}, "status": {}});
    let mut message = json::to_message(&descriptor, &sent, "").unwrap();
    // Go's marshaller writes non-pointer scalars even when zero.
    let spec = message.get_field_by_name_mut("spec").unwrap();
    let Value::Message(spec) = spec else { panic!() };
    spec.set_field_by_name("minReadySeconds", Value::I32(0));
    spec.set_field_by_name("paused", Value::Bool(false));
    let Some(Value::Message(template)) = spec.get_field_by_name_mut("template") else {
        panic!()
    };
    let Some(Value::Message(pod_spec)) = template.get_field_by_name_mut("spec") else {
        panic!()
    };
    pod_spec.set_field_by_name("restartPolicy", Value::String(String::new()));
    pod_spec.set_field_by_name("hostNetwork", Value::Bool(false));
    let json = json::to_json(&message).unwrap();
    assert_eq!(json["spec"].get("minReadySeconds"), None);
    assert_eq!(json["spec"].get("paused"), None);
    assert_eq!(json["spec"]["template"]["spec"].get("restartPolicy"), None);
    assert_eq!(json["spec"]["template"]["spec"].get("hostNetwork"), None);
    assert_eq!(json["spec"]["replicas"], 1);
    // A pointer to zero is a value: a security context's runAsUser 0 (root).
    let pod = SCHEMA
        .message("k8s.io.api.core.v1.PodSecurityContext")
        .unwrap();
    let message =
        json::to_message(&pod, &json!({"runAsUser": 0, "runAsNonRoot": false}), "").unwrap();
    assert_eq!(
        json::to_json(&message).unwrap(),
        json!({"runAsUser": 0, "runAsNonRoot": false})
    );
}

#[test]
fn our_bytes_are_what_kubernetes_generated_types_read() {
    use prost::Message as _;
    let pod = samples().into_iter().find(|s| s["kind"] == "Pod").unwrap();
    let body = encode(&pod).unwrap();
    let envelope = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(&body[4..]).unwrap();
    let meta = envelope.type_meta.unwrap();
    assert_eq!(
        (meta.api_version.as_deref(), meta.kind.as_deref()),
        (Some("v1"), Some("Pod"))
    );
    let typed = k8s_pb::api::core::v1::Pod::decode(envelope.raw.unwrap().as_slice()).unwrap();
    let spec = typed.spec.unwrap();
    assert_eq!(spec.containers[0].image.as_deref(), Some("nginx:1.27"));
    assert_eq!(spec.termination_grace_period_seconds, Some(0));
    let limits = &spec.containers[0].resources.as_ref().unwrap().limits;
    assert_eq!(limits["cpu"].string.as_deref(), Some("500m"));
    let metadata = typed.metadata.unwrap();
    assert_eq!(
        metadata.creation_timestamp.unwrap().seconds,
        Some(1_796_465_472)
    );
    let status = typed.status.unwrap();
    assert_eq!(status.pod_ip.as_deref(), Some("10.0.0.5"));
    // And back: what the generated type writes, we read.
    let mut written = MAGIC.to_vec();
    k8s_pb::apimachinery::pkg::runtime::Unknown {
        type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
            api_version: Some("apps/v1".into()),
            kind: Some("Deployment".into()),
        }),
        raw: Some(
            k8s_pb::api::apps::v1::Deployment {
                metadata: Some(k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    name: Some("web".into()),
                    ..Default::default()
                }),
                spec: Some(k8s_pb::api::apps::v1::DeploymentSpec {
                    replicas: Some(3),
                    ..Default::default()
                }),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    }
    .encode(&mut written)
    .unwrap();
    let read = decode(&written).unwrap();
    assert_eq!(read["kind"], "Deployment");
    assert_eq!(read["metadata"]["name"], "web");
    assert_eq!(read["spec"]["replicas"], 3);
}

#[test]
fn malformed_and_foreign_bodies_are_refused_with_what_failed() {
    assert!(matches!(decode(b"{}"), Err(DecodeError::Malformed(_))));
    assert!(matches!(
        decode(b"k8s\0\xff\xff\xff"),
        Err(DecodeError::Malformed(_))
    ));
    // A valid envelope around a custom resource.
    let mut body = MAGIC.to_vec();
    body.extend([0x0a, 0x17, 0x0a, 0x0e]);
    body.extend(b"example.com/v1");
    body.extend([0x12, 0x05]);
    body.extend(b"Thing");
    assert_eq!(
        decode(&body),
        Err(DecodeError::NoProtobufForm {
            api_version: "example.com/v1".into(),
            kind: "Thing".into()
        })
    );
    // A truncated field inside a well-formed envelope names the kind.
    use prost::Message as _;
    let mut body = MAGIC.to_vec();
    k8s_pb::apimachinery::pkg::runtime::Unknown {
        type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
        }),
        raw: Some(vec![0x0a, 0x7f, 0x0a]),
        ..Default::default()
    }
    .encode(&mut body)
    .unwrap();
    let err = decode(&body).unwrap_err();
    assert!(matches!(err, DecodeError::Malformed(_)), "{err}");
    assert!(err.to_string().contains("v1 Pod"), "{err}");
    // Stored JSON that does not fit the type cannot be written.
    let unfit = json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": "nope"}});
    assert_eq!(
        encode(&unfit),
        Err(EncodeError::Unfit(
            "spec.containers: expected an array, found a string".into()
        ))
    );
}

#[test]
fn watch_frames_are_length_prefixed_events_around_whole_objects() {
    let event = json!({"type": "MODIFIED", "object": {"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm", "resourceVersion": "9"}, "data": {"k": "v"}}});
    let mut stream = watch_frame(&event).unwrap();
    stream.extend(
        watch_frame(
            &json!({"type": "BOOKMARK", "object": {"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"resourceVersion": "10"}}}),
        )
        .unwrap(),
    );
    let (kind, object, used) = read_watch_frame(&stream).unwrap().unwrap();
    assert_eq!(kind, "MODIFIED");
    assert_eq!(object, event["object"]);
    let (kind, object, rest) = read_watch_frame(&stream[used..]).unwrap().unwrap();
    assert_eq!(
        (
            kind.as_str(),
            object["metadata"]["resourceVersion"].as_str()
        ),
        ("BOOKMARK", Some("10"))
    );
    assert_eq!(used + rest, stream.len());
    assert!(
        read_watch_frame(&stream[..used - 1]).is_none(),
        "an incomplete frame waits"
    );
}
