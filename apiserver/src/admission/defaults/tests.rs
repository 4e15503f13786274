use serde_json::json;

use super::*;
use crate::resources::find;

fn defaulted(group: &str, version: &str, plural: &str, mut object: Value) -> Value {
    apply(find(group, version, plural).unwrap(), &mut object);
    object
}

#[test]
fn a_minimal_pod_gets_what_kubectl_users_see() {
    let pod = defaulted(
        "",
        "v1",
        "pods",
        json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "c", "image": "nginx", "ports": [{"containerPort": 80}],
             "resources": {"limits": {"cpu": "1"}}}
        ]}}),
    );
    let spec = &pod["spec"];
    assert_eq!(spec["restartPolicy"], "Always");
    assert_eq!(spec["dnsPolicy"], "ClusterFirst");
    assert_eq!(spec["terminationGracePeriodSeconds"], 30);
    assert_eq!(spec["schedulerName"], "default-scheduler");
    assert_eq!(spec["securityContext"], json!({}));
    assert_eq!(spec["enableServiceLinks"], true);
    let c = &spec["containers"][0];
    assert_eq!(c["imagePullPolicy"], "Always");
    assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(c["terminationMessagePolicy"], "File");
    assert_eq!(c["ports"][0]["protocol"], "TCP");
    assert_eq!(
        c["resources"]["requests"]["cpu"], "1",
        "requests from limits"
    );
}

#[test]
fn defaults_keep_what_the_client_set() {
    let pod = defaulted(
        "",
        "v1",
        "pods",
        json!({"spec": {"restartPolicy": "Never", "containers": [
            {"name": "c", "image": "nginx:1.25", "imagePullPolicy": "Never"}]}}),
    );
    assert_eq!(pod["spec"]["restartPolicy"], "Never");
    assert_eq!(pod["spec"]["containers"][0]["imagePullPolicy"], "Never");
}

#[test]
fn image_pull_policy_follows_the_tag() {
    assert_eq!(image_pull_policy("nginx"), "Always");
    assert_eq!(image_pull_policy("nginx:latest"), "Always");
    assert_eq!(image_pull_policy("nginx:1.25"), "IfNotPresent");
    assert_eq!(image_pull_policy("registry:5000/nginx"), "Always");
    assert_eq!(image_pull_policy("registry:5000/nginx:1"), "IfNotPresent");
    assert_eq!(image_pull_policy("nginx@sha256:abc"), "IfNotPresent");
}

#[test]
fn a_deployment_gets_its_strategy_and_its_template_pod_defaults() {
    let d = defaulted(
        "apps",
        "v1",
        "deployments",
        json!({"spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "c", "image": "a:1"}]}}}}),
    );
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(
        d["spec"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
    );
    assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(d["spec"]["progressDeadlineSeconds"], 600);
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Always");
    assert_eq!(pod["containers"][0]["imagePullPolicy"], "IfNotPresent");
    let recreate = defaulted(
        "apps",
        "v1",
        "deployments",
        json!({"spec": {"strategy": {"type": "Recreate"}}}),
    );
    assert_eq!(recreate["spec"]["strategy"], json!({"type": "Recreate"}));
}

#[test]
fn a_service_targets_its_port_over_tcp() {
    let s = defaulted(
        "",
        "v1",
        "services",
        json!({"spec": {"ports": [{"port": 80}, {"port": 53, "protocol": "UDP", "targetPort": "dns"}]}}),
    );
    assert_eq!(s["spec"]["type"], "ClusterIP");
    assert_eq!(s["spec"]["sessionAffinity"], "None");
    assert_eq!(s["spec"]["ipFamilyPolicy"], "SingleStack");
    assert_eq!(s["spec"]["ports"][0]["protocol"], "TCP");
    assert_eq!(s["spec"]["ports"][0]["targetPort"], 80);
    assert_eq!(s["spec"]["ports"][1]["targetPort"], "dns");
}

#[test]
fn jobs_and_cronjobs_get_their_policies() {
    let j = defaulted("batch", "v1", "jobs", json!({"spec": {"template": {}}}));
    assert_eq!(
        (
            &j["spec"]["completions"],
            &j["spec"]["parallelism"],
            &j["spec"]["backoffLimit"]
        ),
        (&json!(1), &json!(1), &json!(6))
    );
    let mut job =
        json!({"metadata": {"name": "j", "uid": "u1"}, "spec": {"template": {"spec": {}}}});
    prepare_for_create(find("batch", "v1", "jobs").unwrap(), &mut job);
    assert_eq!(
        job["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
        "u1"
    );
    assert_eq!(
        job["spec"]["template"]["metadata"]["labels"]["job-name"],
        "j"
    );
    let c = defaulted("batch", "v1", "cronjobs", json!({"spec": {}}));
    assert_eq!(c["spec"]["concurrencyPolicy"], "Allow");
    assert_eq!(c["spec"]["successfulJobsHistoryLimit"], 3);
}

#[test]
fn limit_range_defaults_flow_from_max_to_default_to_request() {
    let l = defaulted(
        "",
        "v1",
        "limitranges",
        json!({"spec": {"limits": [{"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "1Mi"}}]}}),
    );
    let item = &l["spec"]["limits"][0];
    assert_eq!(item["default"], json!({"cpu": "2"}));
    assert_eq!(item["defaultRequest"], json!({"cpu": "2", "memory": "1Mi"}));
}

#[test]
fn strange_shapes_are_left_to_validation() {
    for bad in [
        json!({"spec": "x"}),
        json!({"spec": {"template": 3, "strategy": "x"}}),
    ] {
        defaulted("apps", "v1", "deployments", bad);
    }
    defaulted("", "v1", "pods", json!({"spec": {"containers": ["x", 1]}}));
}

#[test]
fn qos_classes_as_kubernetes_computes_them() {
    let spec = |resources: Value| json!({"containers": [{"name": "c", "resources": resources}]});
    assert_eq!(qos_class(&spec(json!({}))), "BestEffort");
    assert_eq!(
        qos_class(&spec(json!({"requests": {"cpu": "1"}}))),
        "Burstable"
    );
    let equal = json!({"cpu": "1", "memory": "1Gi"});
    assert_eq!(
        qos_class(&spec(json!({"requests": equal, "limits": equal}))),
        "Guaranteed"
    );
}

#[test]
fn claims_and_volumes_start_pending_and_keep_a_phase_they_have() {
    let claim = defaulted(
        "",
        "v1",
        "persistentvolumeclaims",
        json!({"metadata": {"name": "c"}, "spec": {"accessModes": ["ReadWriteOnce"]}}),
    );
    assert_eq!(claim["status"]["phase"], "Pending");
    assert_eq!(claim["spec"]["volumeMode"], "Filesystem");
    let volume = defaulted(
        "",
        "v1",
        "persistentvolumes",
        json!({"metadata": {"name": "v"}, "spec": {}, "status": {"phase": "Bound"}}),
    );
    assert_eq!(volume["status"]["phase"], "Bound");
    assert_eq!(volume["spec"]["persistentVolumeReclaimPolicy"], "Retain");
}

#[test]
fn a_secret_stores_its_string_data_as_data() {
    let secret = defaulted(
        "",
        "v1",
        "secrets",
        json!({"metadata": {"name": "s"},
               "data": {"kept": "a2VwdA==", "password": "b2xk"},
               "stringData": {"password": "new", "user": "admin"}}),
    );
    assert_eq!(secret["type"], "Opaque");
    assert!(secret.get("stringData").is_none(), "{secret}");
    assert_eq!(
        secret["data"],
        json!({"kept": "a2VwdA==", "password": "bmV3", "user": "YWRtaW4="})
    );
    let only_strings = defaulted(
        "",
        "v1",
        "secrets",
        json!({"metadata": {"name": "s"}, "type": "kubernetes.io/basic-auth",
               "stringData": {"username": "u"}}),
    );
    assert_eq!(only_strings["data"], json!({"username": "dQ=="}));
    assert_eq!(only_strings["type"], "kubernetes.io/basic-auth");
}

#[test]
fn storage_classes_and_endpoint_slice_ports_get_kubernetes_defaults() {
    let class = defaulted(
        "storage.k8s.io",
        "v1",
        "storageclasses",
        json!({"metadata": {"name": "s"}, "provisioner": "example.com/disk"}),
    );
    assert_eq!(class["reclaimPolicy"], "Delete");
    assert_eq!(class["volumeBindingMode"], "Immediate");
    let kept = defaulted(
        "storage.k8s.io",
        "v1",
        "storageclasses",
        json!({"metadata": {"name": "s"}, "reclaimPolicy": "Retain", "volumeBindingMode": "WaitForFirstConsumer"}),
    );
    assert_eq!(kept["reclaimPolicy"], "Retain");
    assert_eq!(kept["volumeBindingMode"], "WaitForFirstConsumer");
    let slice = defaulted(
        "discovery.k8s.io",
        "v1",
        "endpointslices",
        json!({"metadata": {"name": "e"}, "addressType": "IPv4",
               "ports": [{"port": 80}, {"name": "dns", "protocol": "UDP"}]}),
    );
    assert_eq!(
        slice["ports"],
        json!([{"name": "", "port": 80, "protocol": "TCP"}, {"name": "dns", "protocol": "UDP"}])
    );
}
