//! Bad input changes nothing: against one `skiff up`, several hundred
//! malformed requests — DeleteOptions of the wrong type, patches that
//! replace or remove the root, other content types, malformed query
//! parameters, changes to immutable fields, invalid values, panicking
//! inputs — each answered by a Kubernetes `Status` with a 4xx code, and a
//! dump of the store (every key under /registry with its mod revision and
//! value) the same before and after. Then valid requests change the dump,
//! so the comparison can fail.

use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};
use skiff_tests::api_server::ApiServer;
use skiff_tests::kube_http::{HttpResponse, KubeHttp};
use skiff_tests::store_client;

const NS: &str = "/api/v1/namespaces/default";
const APPS: &str = "/apis/apps/v1/namespaces/default";
const BATCH: &str = "/apis/batch/v1/namespaces/default";
const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1/namespaces/default";
const SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices";
const CLASSES: &str = "/apis/storage.k8s.io/v1/storageclasses";

/// One request and what it must answer.
struct Case {
    what: String,
    method: &'static str,
    path: String,
    content_type: Option<String>,
    body: Option<Vec<u8>>,
    /// The codes a correct server may answer; every one is a 4xx.
    codes: &'static [u16],
}

fn case(
    what: impl Into<String>,
    method: &'static str,
    path: impl Into<String>,
    content_type: Option<&str>,
    body: Option<Vec<u8>>,
    codes: &'static [u16],
) -> Case {
    Case {
        what: what.into(),
        method,
        path: path.into(),
        content_type: content_type.map(str::to_string),
        body,
        codes,
    }
}

fn json_body(value: &Value) -> Option<Vec<u8>> {
    Some(serde_json::to_vec(value).expect("JSON"))
}

fn container() -> Value {
    json!({"name": "main", "image": "busybox:1.36", "command": ["sleep", "3600"]})
}

fn pod_template(app: &str) -> Value {
    json!({"metadata": {"labels": {"app": app}}, "spec": {"containers": [container()]}})
}

/// The objects the requests aim at: (collection, object).
fn seeds() -> Vec<(String, Value)> {
    vec![
        (
            format!("{NS}/configmaps"),
            json!({"metadata": {"name": "cm",
            "labels": {"app": "web"}, "annotations": {"note": "keep"},
            "finalizers": ["example.com/keep"]}, "data": {"mode": "on"}}),
        ),
        (
            format!("{NS}/configmaps"),
            json!({"metadata": {"name": "frozen"},
            "immutable": true, "data": {"mode": "fixed"}}),
        ),
        (
            format!("{NS}/secrets"),
            json!({"metadata": {"name": "sec"}, "type": "Opaque",
            "data": {"password": "c2VjcmV0"}}),
        ),
        (
            format!("{NS}/pods"),
            json!({"metadata": {"name": "p", "labels": {"app": "web"}},
            "spec": {"restartPolicy": "Always", "containers": [container()]}}),
        ),
        (
            format!("{NS}/services"),
            json!({"metadata": {"name": "svc"},
            "spec": {"clusterIP": "10.96.0.50", "selector": {"app": "web"},
                     "ports": [{"port": 80, "targetPort": 8080}]}}),
        ),
        (
            format!("{NS}/persistentvolumeclaims"),
            json!({"metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}}),
        ),
        (
            format!("{NS}/resourcequotas"),
            json!({"metadata": {"name": "q"},
            "spec": {"hard": {"pods": "10", "requests.cpu": "4"}}}),
        ),
        (
            format!("{NS}/limitranges"),
            json!({"metadata": {"name": "lr"},
            "spec": {"limits": [{"type": "Container", "default": {"cpu": "500m"},
                                 "defaultRequest": {"cpu": "100m"}}]}}),
        ),
        (
            format!("{APPS}/deployments"),
            json!({"metadata": {"name": "web"},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                     "template": pod_template("web")}}),
        ),
        (
            format!("{APPS}/statefulsets"),
            json!({"metadata": {"name": "db"},
            "spec": {"replicas": 0, "serviceName": "db",
                     "selector": {"matchLabels": {"app": "db"}}, "template": pod_template("db")}}),
        ),
        (
            format!("{BATCH}/jobs"),
            json!({"metadata": {"name": "j"},
            "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never",
                     "containers": [container()]}}}}),
        ),
        (
            format!("{NS}/endpoints"),
            json!({"metadata": {"name": "ep"}, "subsets": [{"addresses": [{"ip": "10.1.2.3"}],
                   "ports": [{"port": 80, "protocol": "TCP"}]}]}),
        ),
        (
            SLICES.to_string(),
            json!({"metadata": {"name": "es"}, "addressType": "IPv4",
                   "endpoints": [{"addresses": ["10.1.2.3"]}], "ports": [{"name": "http", "port": 80}]}),
        ),
        (
            CLASSES.to_string(),
            json!({"metadata": {"name": "fast"}, "provisioner": "example.com/fast-disk",
                   "parameters": {"type": "ssd"}}),
        ),
        (
            format!("{BATCH}/cronjobs"),
            // Suspended and yearly: the controller starts nothing meanwhile.
            json!({"metadata": {"name": "cron"}, "spec": {"schedule": "@yearly", "suspend": true,
                   "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never",
                   "containers": [container()]}}}}}}),
        ),
        (
            format!("{NS}/events"),
            json!({"metadata": {"name": "ev"}, "reason": "Started", "message": "started", "type": "Normal",
                   "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"}}),
        ),
        (
            format!("{RBAC}/roles"),
            json!({"metadata": {"name": "r"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
        ),
        (
            format!("{RBAC}/rolebindings"),
            json!({"metadata": {"name": "rb"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
            "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]}),
        ),
    ]
}

fn object_path(collection: &str, object: &Value) -> String {
    format!(
        "{collection}/{}",
        object["metadata"]["name"].as_str().unwrap_or("")
    )
}

/// DELETEs whose options are malformed: each would, read leniently, be a
/// real delete.
fn bad_deletes(path: &str, cases: &mut Vec<Case>) {
    let bodies: &[(&str, &[u16])] = &[
        (r#"{"dryRun":"All"}"#, &[400]),
        (r#"{"dryRun":["All", 7]}"#, &[400]),
        (r#"{"dryRun":["Al"]}"#, &[422]),
        (r#"{"preconditions":{"uid":12345}}"#, &[400]),
        (r#"{"preconditions":"uid"}"#, &[400]),
        (r#"{"gracePeriodSeconds":"soon"}"#, &[400]),
        (r#"{"gracePeriodSeconds":1.5}"#, &[400]),
        (r#"{"kind":"Pod","apiVersion":"v1"}"#, &[400]),
        (r#"{"propagationPolicy":"Sideways"}"#, &[422]),
        (r#"{"propagationPolicy":["Orphan"]}"#, &[400]),
        (r#"{"orphanDependents":"yes"}"#, &[400]),
        (
            r#"{"orphanDependents":true,"propagationPolicy":"Orphan"}"#,
            &[422],
        ),
        (r#"{"preconditions":{"uid":"not-the-uid"}}"#, &[409]),
        (r#"{"preconditions":{"resourceVersion":"1"}}"#, &[409]),
        (r#"[]"#, &[400]),
        (r#""All""#, &[400]),
        (r#"{"dryRun":"#, &[400]),
    ];
    for (body, codes) in bodies {
        cases.push(case(
            format!("DELETE {path} with {body}"),
            "DELETE",
            path,
            Some("application/json"),
            Some(body.as_bytes().to_vec()),
            codes,
        ));
    }
    for query in [
        "dryRun=all",
        "dryRun=true",
        "gracePeriodSeconds=soon",
        "propagationPolicy=Sideways",
        "orphanDependents=perhaps",
    ] {
        cases.push(case(
            format!("DELETE {path}?{query}"),
            "DELETE",
            format!("{path}?{query}"),
            None,
            None,
            &[400, 422],
        ));
    }
}

/// Patches that would take the object's root, identity or server-set
/// fields, in every patch type.
fn bad_patches(path: &str, cases: &mut Vec<Case>) {
    const JSON_PATCH: &str = "application/json-patch+json";
    const MERGE: &str = "application/merge-patch+json";
    const STRATEGIC: &str = "application/strategic-merge-patch+json";
    let mut patches: Vec<(&str, Value, &[u16])> = vec![
        (
            JSON_PATCH,
            json!([{"op": "replace", "path": "", "value": null}]),
            &[400, 422],
        ),
        (
            JSON_PATCH,
            json!([{"op": "replace", "path": "", "value": [1, 2]}]),
            &[400, 422],
        ),
        (
            JSON_PATCH,
            json!([{"op": "replace", "path": "", "value": "x"}]),
            &[400, 422],
        ),
        (
            JSON_PATCH,
            json!([{"op": "replace", "path": "", "value": {}}]),
            &[400, 422],
        ),
        (
            JSON_PATCH,
            json!([{"op": "remove", "path": ""}]),
            &[400, 422],
        ),
        (
            JSON_PATCH,
            json!([{"op": "add", "path": "", "value": {"a": 1}}]),
            &[400, 422],
        ),
        (
            JSON_PATCH,
            json!([{"op": "move", "from": "", "path": "/x"}]),
            &[400, 422],
        ),
        (
            JSON_PATCH,
            json!([{"op": "remove", "path": "/metadata"}]),
            &[400],
        ),
        (
            JSON_PATCH,
            json!([{"op": "replace", "path": "/metadata/name", "value": "other"}]),
            &[400],
        ),
        (
            JSON_PATCH,
            json!([{"op": "replace", "path": "/metadata/uid", "value": "u-2"}]),
            &[409],
        ),
        (
            JSON_PATCH,
            json!([{"op": "remove", "path": "/nothing/here"}]),
            &[422],
        ),
        (JSON_PATCH, json!([{"op": "launch"}]), &[400]),
        (
            JSON_PATCH,
            json!({"op": "remove", "path": "/metadata"}),
            &[400],
        ),
        (MERGE, json!(null), &[400]),
        (MERGE, json!([]), &[400]),
        (MERGE, json!("x"), &[400]),
        (MERGE, json!({"metadata": null}), &[400]),
        (MERGE, json!({"metadata": {"name": "other"}}), &[400]),
        (
            MERGE,
            json!({"metadata": {"uid": "another-object"}}),
            &[409],
        ),
        (MERGE, json!({"metadata": {"resourceVersion": "1"}}), &[409]),
        (
            MERGE,
            json!({"metadata": {"labels": {"bad key!": "x"}}}),
            &[422],
        ),
        (MERGE, json!({"metadata": {"finalizers": [7]}}), &[400, 422]),
        (STRATEGIC, json!({"$patch": "delete"}), &[422]),
        (STRATEGIC, json!([]), &[400]),
        (STRATEGIC, json!({"metadata": {"name": "other"}}), &[400]),
        (
            STRATEGIC,
            json!({"metadata": {"uid": "another-object"}}),
            &[409],
        ),
    ];
    if path.contains("/namespaces/") {
        // Kubernetes clears a namespace sent for a cluster-scoped object.
        patches.push((
            MERGE,
            json!({"metadata": {"namespace": "kube-system"}}),
            &[400],
        ));
    }
    for (content_type, patch, codes) in patches {
        cases.push(case(
            format!("PATCH {path} ({content_type}) with {patch}"),
            "PATCH",
            path,
            Some(content_type),
            json_body(&patch),
            codes,
        ));
    }
    for content_type in ["text/plain", "application/xml", "application/json"] {
        cases.push(case(
            format!("PATCH {path} as {content_type}"),
            "PATCH",
            path,
            Some(content_type),
            json_body(&json!({"metadata": {"labels": {"changed": "yes"}}})),
            &[415],
        ));
    }
    cases.push(case(
        format!("PATCH {path}?force=true, not an apply"),
        "PATCH",
        format!("{path}?force=true"),
        Some(MERGE),
        json_body(&json!({"metadata": {"labels": {"changed": "yes"}}})),
        &[422],
    ));
    cases.push(case(
        format!("PATCH {path}?dryRun=yes"),
        "PATCH",
        format!("{path}?dryRun=yes"),
        Some(MERGE),
        json_body(&json!({"metadata": {"labels": {"changed": "yes"}}})),
        &[422],
    ));
}

/// A Kubernetes protobuf body: the magic, then a runtime.Unknown of
/// typeMeta {apiVersion, kind} and raw, written field by field.
fn protobuf_envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    fn field(number: u8, bytes: &[u8]) -> Vec<u8> {
        assert!(bytes.len() < 128, "short fields only");
        let mut out = vec![number << 3 | 2, bytes.len() as u8];
        out.extend_from_slice(bytes);
        out
    }
    let type_meta = [field(1, api_version.as_bytes()), field(2, kind.as_bytes())].concat();
    [b"k8s\0".to_vec(), field(1, &type_meta), field(2, raw)].concat()
}

/// Protobuf bodies that cannot be read: a 400 naming what failed, or a
/// 415 for a kind that has no protobuf form.
fn bad_protobuf(collection: &str, path: &str, cases: &mut Vec<Case>) {
    let protobuf = "application/vnd.kubernetes.protobuf";
    let bodies: [(&str, Vec<u8>, &'static [u16]); 6] = [
        ("no magic", b"\x0a\x02\x0a\x00".to_vec(), &[400]),
        (
            "a truncated envelope",
            b"k8s\0\x0a\x7f\x0a".to_vec(),
            &[400],
        ),
        (
            "an envelope naming no kind",
            protobuf_envelope("", "", b""),
            &[400],
        ),
        (
            "a truncated object",
            protobuf_envelope("v1", "ConfigMap", b"\x0a\x7f\x0a"),
            &[400],
        ),
        (
            "a field of the wrong wire type",
            protobuf_envelope("v1", "ConfigMap", b"\x0d\x01\x02\x03\x04"),
            &[400],
        ),
        (
            "a custom resource, which has no protobuf form",
            protobuf_envelope("example.com/v1", "Widget", b""),
            &[415],
        ),
    ];
    for (what, body, codes) in bodies {
        cases.push(case(
            format!("POST {collection} as protobuf: {what}"),
            "POST",
            collection,
            Some(protobuf),
            Some(body.clone()),
            codes,
        ));
        cases.push(case(
            format!("PUT {path} as protobuf: {what}"),
            "PUT",
            path,
            Some(protobuf),
            Some(body),
            codes,
        ));
    }
}

/// Creates and replacements in a media type Kubernetes does not read, and
/// bodies that are not one object.
fn bad_bodies(collection: &str, path: &str, object: &Value, cases: &mut Vec<Case>) {
    bad_protobuf(collection, path, cases);
    let mut renamed = object.clone();
    renamed["metadata"] = json!({"name": "should-not-exist"});
    for content_type in [
        "text/plain",
        "application/xml",
        "application/x-www-form-urlencoded",
    ] {
        cases.push(case(
            format!("POST {collection} as {content_type}"),
            "POST",
            collection,
            Some(content_type),
            json_body(&renamed),
            &[415],
        ));
        cases.push(case(
            format!("PUT {path} as {content_type}"),
            "PUT",
            path,
            Some(content_type),
            json_body(object),
            &[415],
        ));
    }
    for (body, codes) in [
        ("[]", &[400u16][..]),
        ("\"x\"", &[400]),
        ("{", &[400]),
        (r#"{"metadata": "x"}"#, &[400]),
        (r#"{"metadata": {"name": 5}}"#, &[400]),
        (
            r#"{"kind": 5, "metadata": {"name": "should-not-exist"}}"#,
            &[400],
        ),
    ] {
        cases.push(case(
            format!("POST {collection} with {body}"),
            "POST",
            collection,
            Some("application/json"),
            Some(body.as_bytes().to_vec()),
            codes,
        ));
    }
    for query in ["dryRun=all", "dryRun=yes", "fieldValidation=Sometimes"] {
        cases.push(case(
            format!("POST {collection}?{query}"),
            "POST",
            format!("{collection}?{query}"),
            Some("application/json"),
            json_body(&renamed),
            &[400, 422],
        ));
    }
}

/// Lists and watches with malformed parameters (they change nothing by
/// nature, but must be refused, not guessed at).
fn bad_queries(collection: &str, cases: &mut Vec<Case>) {
    for (query, codes) in [
        ("limit=-1", &[400u16][..]),
        ("limit=ten", &[400]),
        ("watch=maybe", &[400]),
        ("watch=true&timeoutSeconds=soon", &[400]),
        ("watch=true&allowWatchBookmarks=perhaps", &[400]),
        ("resourceVersion=1&resourceVersionMatch=Sometimes", &[422]),
        ("resourceVersionMatch=Exact", &[422]),
        ("resourceVersion=0&resourceVersionMatch=Exact", &[422]),
        ("sendInitialEvents=true", &[422]),
        ("watch=true&sendInitialEvents=true", &[422]),
        ("watch=true&resourceVersionMatch=NotOlderThan", &[422]),
        ("continue=not-a-token", &[400, 410]),
        ("labelSelector=a%20in%20(", &[400]),
        ("fieldSelector=%C3%A9%3Dx", &[400]),
        ("fieldSelector=metadata.name%3D%3D%3D", &[400]),
    ] {
        cases.push(case(
            format!("GET {collection}?{query}"),
            "GET",
            format!("{collection}?{query}"),
            None,
            None,
            codes,
        ));
    }
}

/// Updates Kubernetes refuses because the field is immutable, each as a
/// merge patch (the path every client takes).
fn immutable_changes(cases: &mut Vec<Case>) {
    let changes: Vec<(String, Value)> = vec![
        (
            format!("{NS}/configmaps/frozen"),
            json!({"data": {"mode": "thawed"}}),
        ),
        (
            format!("{NS}/configmaps/frozen"),
            json!({"immutable": false}),
        ),
        (format!("{NS}/configmaps/frozen"), json!({"data": null})),
        (
            format!("{NS}/secrets/sec"),
            json!({"type": "kubernetes.io/tls"}),
        ),
        (
            format!("{NS}/pods/p"),
            json!({"spec": {"restartPolicy": "Never"}}),
        ),
        (
            format!("{NS}/pods/p"),
            json!({"spec": {"containers": [{"name": "other", "image": "x"}]}}),
        ),
        (
            format!("{NS}/pods/p"),
            json!({"spec": {"nodeName": "somewhere"}}),
        ),
        (
            format!("{NS}/services/svc"),
            json!({"spec": {"clusterIP": "10.96.0.51"}}),
        ),
        (
            format!("{NS}/persistentvolumeclaims/data"),
            json!({"spec": {"accessModes": ["ReadWriteMany"]}}),
        ),
        (
            format!("{APPS}/deployments/web"),
            json!({"spec": {"selector": {"matchLabels": {"app": "other"}}}}),
        ),
        (
            format!("{APPS}/statefulsets/db"),
            json!({"spec": {"serviceName": "elsewhere"}}),
        ),
        (
            format!("{BATCH}/jobs/j"),
            json!({"spec": {"completions": 5}}),
        ),
        (
            format!("{RBAC}/rolebindings/rb"),
            json!({"roleRef": {"name": "admin"}}),
        ),
        (
            format!("{CLASSES}/fast"),
            json!({"provisioner": "example.com/slow-disk"}),
        ),
        (
            format!("{CLASSES}/fast"),
            json!({"parameters": {"type": "hdd"}}),
        ),
        (
            format!("{CLASSES}/fast"),
            json!({"reclaimPolicy": "Retain"}),
        ),
        (
            format!("{CLASSES}/fast"),
            json!({"volumeBindingMode": "WaitForFirstConsumer"}),
        ),
        (format!("{SLICES}/es"), json!({"addressType": "IPv6"})),
        (
            format!("{BATCH}/cronjobs/cron"),
            json!({"spec": {"schedule": "TZ=UTC 0 * * * *"}}),
        ),
        (
            format!("{RBAC}/rolebindings/rb"),
            json!({"roleRef": {"kind": "ClusterRole", "name": "cluster-admin"}}),
        ),
    ];
    for (path, patch) in changes {
        cases.push(case(
            format!("PATCH {path} with {patch}"),
            "PATCH",
            path,
            Some("application/merge-patch+json"),
            json_body(&patch),
            &[422],
        ));
    }
}

/// Objects that must not be stored: values Kubernetes' validation
/// refuses, under names that do not exist.
fn invalid_creates(cases: &mut Vec<Case>) {
    let pod_with = |resources: Value| {
        json!({"metadata": {"name": "bad-pod"}, "spec": {"containers": [
            {"name": "main", "image": "busybox", "resources": resources}]}})
    };
    let mut creates: Vec<(String, Value)> = Vec::new();
    for quantity in ["1.2.3", "10Gigs", "-1", "NaN", "", "1e", "--1"] {
        creates.push((
            format!("{NS}/pods"),
            pod_with(json!({"requests": {"cpu": quantity}})),
        ));
        creates.push((
            format!("{NS}/resourcequotas"),
            json!({"metadata": {"name": "bad-quota"}, "spec": {"hard": {"pods": quantity}}}),
        ));
        // A negative bound is a valid LimitRange in Kubernetes; others are not.
        creates.extend((quantity != "-1").then(|| {
            (
                format!("{NS}/limitranges"),
                json!({"metadata": {"name": "bad-lr"}, "spec": {"limits": [
                {"type": "Container", "max": {"memory": quantity}}]}}),
            )
        }));
        creates.push((
            format!("{NS}/persistentvolumeclaims"),
            json!({"metadata": {"name": "bad-claim"}, "spec": {"accessModes": ["ReadWriteOnce"],
                   "resources": {"requests": {"storage": quantity}}}}),
        ));
    }
    creates.extend([
        (format!("{NS}/pods"), pod_with(json!({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}))),
        (format!("{NS}/pods"), json!({"metadata": {"name": "bad-pod"}, "spec": {
            "containers": [container()], "tolerations": [{"key": "k", "operator": "Bogus"}]}})),
        (format!("{NS}/pods"), json!({"metadata": {"name": "bad-pod"}, "spec": {
            "containers": [container()]}, "status": "running"})),
        (format!("{NS}/pods"), json!({"metadata": {"name": "bad-pod"}, "spec": {
            "containers": [container()]}, "status": [1]})),
        (format!("{NS}/pods"), json!({"metadata": {"name": "bad-pod"}, "spec": {
            "restartPolicy": "Sometimes", "containers": [container()]}})),
        (format!("{APPS}/deployments"), json!({"metadata": {"name": "bad-deploy"}, "spec": {
            "selector": {"matchLabels": {"app": "x"}}, "template": pod_template("x"),
            "strategy": {"type": "Sideways"}}})),
        (format!("{APPS}/deployments"), json!({"metadata": {"name": "bad-deploy"}, "spec": {
            "replicas": -1, "selector": {"matchLabels": {"app": "x"}}, "template": pod_template("x")}})),
        (format!("{APPS}/deployments"), json!({"metadata": {"name": "bad-deploy"}, "spec": {
            "selector": {"matchLabels": {"app": "x"}}, "template": pod_template("y")}})),
        (format!("{NS}/services"), json!({"metadata": {"name": "bad-svc"}, "spec": {
            "clusterIP": "not-an-ip", "ports": [{"port": 80}]}})),
        (format!("{NS}/services"), json!({"metadata": {"name": "bad-svc"}, "spec": {
            "type": "NodePort", "ports": [{"port": 80, "nodePort": 99999}]}})),
        (format!("{NS}/services"), json!({"metadata": {"name": "bad-svc"}, "spec": {
            "ports": [{"port": 0}]}})),
        (format!("{RBAC}/roles"), json!({"metadata": {"name": "bad-role"}, "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": []}]})),
        (format!("{RBAC}/rolebindings"), json!({"metadata": {"name": "bad-binding"},
            "subjects": [{"kind": "User", "name": "u", "apiGroup": "rbac.authorization.k8s.io"}]})),
        (format!("{RBAC}/rolebindings"), json!({"metadata": {"name": "bad-binding"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
            "subjects": [{"kind": "Alien", "name": "u"}]})),
        (format!("{NS}/configmaps"), json!({"metadata": {"name": "Bad_Name"}})),
        (format!("{NS}/configmaps"), json!({"metadata": {"name": "bad-cm"}, "data": {"k": 5}})),
        (format!("{NS}/configmaps"), json!({"metadata": {"name": "bad-cm"}, "data": {"bad key": "v"}})),
        (format!("{BATCH}/jobs"), json!({"metadata": {"name": "bad-job"}, "spec": {
            "parallelism": -1, "template": {"spec": {"restartPolicy": "Never", "containers": [container()]}}}})),
        (format!("{BATCH}/jobs"), json!({"metadata": {"name": "bad-job"}, "spec": {
            "template": {"spec": {"restartPolicy": "Always", "containers": [container()]}}}})),
    ]);
    creates.extend(invalid_new_kinds());
    creates.extend([(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions".into(),
        json!({"metadata": {"name": "widgets.example.com"}, "spec": {
                "group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                              "schema": {"openAPIV3Schema": {"type": "nonsense"}}}]}}),
    )]);
    for (collection, object) in creates {
        cases.push(case(
            format!("POST {collection} with {object}"),
            "POST",
            collection,
            Some("application/json"),
            json_body(&object),
            &[400, 422],
        ));
    }
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
                         "target": {"kind": "Pod", "name": "elsewhere"}});
    cases.push(case(
        "a Binding to a Pod",
        "POST",
        format!("{NS}/pods/p/binding"),
        Some("application/json"),
        json_body(&binding),
        &[422],
    ));
    let status =
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "status": "up"});
    cases.push(case(
        "PUT pods/p/status with a status that is not an object",
        "PUT",
        format!("{NS}/pods/p/status"),
        Some("application/json"),
        json_body(&status),
        &[400, 422],
    ));
    cases.push(case(
        "PATCH pods/p/status with a status that is not an object",
        "PATCH",
        format!("{NS}/pods/p/status"),
        Some("application/merge-patch+json"),
        json_body(&json!({"status": [1]})),
        &[400, 422],
    ));
}

/// Invalid Events, Endpoints, EndpointSlices, StorageClasses, CronJobs and
/// ControllerRevisions, each under a name that does not exist.
fn invalid_new_kinds() -> Vec<(String, Value)> {
    let event = |extra: Value| {
        let mut event = json!({"metadata": {"name": "bad-ev"}, "reason": "R",
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"}});
        for (k, v) in extra.as_object().into_iter().flatten() {
            event[k] = v.clone();
        }
        (format!("{NS}/events"), event)
    };
    let endpoints = |subsets: Value| {
        (
            format!("{NS}/endpoints"),
            json!({"metadata": {"name": "bad-ep"}, "subsets": subsets}),
        )
    };
    let slice = |extra: Value| {
        let mut slice = json!({"metadata": {"name": "bad-es"}, "addressType": "IPv4"});
        for (k, v) in extra.as_object().into_iter().flatten() {
            slice[k] = v.clone();
        }
        (SLICES.to_string(), slice)
    };
    let class = |extra: Value| {
        let mut class = json!({"metadata": {"name": "bad-class"}, "provisioner": "example.com/x"});
        for (k, v) in extra.as_object().into_iter().flatten() {
            class[k] = v.clone();
        }
        (CLASSES.to_string(), class)
    };
    let cron = |extra: Value| {
        let mut spec = json!({"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": {
            "spec": {"restartPolicy": "Never", "containers": [container()]}}}}});
        for (k, v) in extra.as_object().into_iter().flatten() {
            spec[k] = v.clone();
        }
        (
            format!("{BATCH}/cronjobs"),
            json!({"metadata": {"name": "bad-cron"}, "spec": spec}),
        )
    };
    let mut creates = vec![
        event(json!({"involvedObject": {"kind": "Pod", "name": "p", "namespace": "kube-system"}})),
        event(json!({"eventTime": "2026-01-01T00:00:00.000000Z"})),
        event(
            json!({"eventTime": "2026-01-01T00:00:00.000000Z", "reportingComponent": "c",
            "reportingInstance": "i", "action": "a".repeat(129)}),
        ),
        event(json!({"eventTime": "soon"})),
        endpoints(json!([{}])),
        endpoints(json!([{"addresses": [{"ip": "not-an-ip"}]}])),
        endpoints(json!([{"addresses": [{"ip": "0.0.0.0"}]}])),
        endpoints(json!([{"addresses": [{"ip": "10.0.0.1", "hostname": "Not_A_Label"}]}])),
        endpoints(json!([{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 0}]}])),
        endpoints(json!([{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 99999}]}])),
        endpoints(
            json!([{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80, "protocol": "HTTP"}]}]),
        ),
        endpoints(
            json!([{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}, {"port": 81}]}]),
        ),
        endpoints(json!([{"addresses": [{"ip": 10}]}])),
        slice(json!({"addressType": "IPv5"})),
        slice(json!({"addressType": null})),
        slice(json!({"endpoints": [{"addresses": []}]})),
        slice(json!({"endpoints": [{"addresses": ["2001:db8::1"]}]})),
        slice(json!({"endpoints": [{"addresses": ["169.254.0.1"]}]})),
        slice(json!({"addressType": "FQDN", "endpoints": [{"addresses": ["localhost"]}]})),
        slice(json!({"ports": [{"port": 80}, {"port": 81}]})),
        slice(json!({"ports": [{"name": "a", "protocol": "HTTP"}]})),
        class(json!({"provisioner": ""})),
        class(json!({"provisioner": "a/b/c"})),
        class(json!({"reclaimPolicy": "Recycle"})),
        class(json!({"volumeBindingMode": "Later"})),
        class(json!({"parameters": {"": "x"}})),
        class(json!({"parameters": {"k": 5}})),
        cron(json!({"schedule": ""})),
        cron(json!({"schedule": "61 * * * *"})),
        cron(json!({"schedule": "* * * *"})),
        cron(json!({"schedule": "@fortnightly"})),
        cron(json!({"schedule": "TZ=UTC * * * * *"})),
        cron(json!({"timeZone": "Mars/Olympus_Mons"})),
        cron(json!({"timeZone": ""})),
        cron(json!({"timeZone": "Local"})),
        cron(json!({"concurrencyPolicy": "Sometimes"})),
        cron(json!({"startingDeadlineSeconds": -1})),
        cron(json!({"successfulJobsHistoryLimit": -1})),
        cron(json!({"failedJobsHistoryLimit": -1})),
        cron(
            json!({"jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Always",
            "containers": [container()]}}}}}),
        ),
        cron(
            json!({"jobTemplate": {"spec": {"selector": {"matchLabels": {"a": "b"}},
            "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"restartPolicy": "Never",
            "containers": [container()]}}}}}),
        ),
        (
            "/apis/apps/v1/namespaces/default/controllerrevisions".to_string(),
            json!({"metadata": {"name": "bad-rev"}, "revision": -1, "data": {}}),
        ),
        (
            "/apis/apps/v1/namespaces/default/controllerrevisions".to_string(),
            json!({"metadata": {"name": "bad-rev"}, "revision": 1}),
        ),
    ];
    // A name the CronJob's Jobs could not carry.
    creates.push((
        format!("{BATCH}/cronjobs"),
        json!({"metadata": {"name": "c".repeat(53)}, "spec": cron(json!({})).1["spec"].clone()}),
    ));
    creates
}

/// PUTs and patches whose result has a field of the wrong JSON type — in
/// the spec, or in a status the main resource would drop — in every
/// write path: each must be refused as Kubernetes' decoder refuses it.
fn wrong_typed_writes(seeds: &[(String, Value)], cases: &mut Vec<Case>) {
    const MERGE: &str = "application/merge-patch+json";
    const STRATEGIC: &str = "application/strategic-merge-patch+json";
    const JSON_PATCH: &str = "application/json-patch+json";
    const APPLY: &str = "application/apply-patch+yaml";
    let wrong: [(&str, Value); 5] = [
        ("status", json!("x")),
        ("status", json!([1])),
        ("status", json!({"replicas": "many"})),
        ("spec", json!({"replicas": "3"})),
        ("metadata", json!({"labels": {"app": 5}})),
    ];
    let (collection, deployment) = seeds
        .iter()
        .find(|(c, _)| c.ends_with("/deployments"))
        .expect("a Deployment seed");
    let path = object_path(collection, deployment);
    for (name, value) in &wrong {
        let mut replaced = deployment.clone();
        match (name, &mut replaced[*name]) {
            (&"status", slot) => *slot = value.clone(),
            (_, Value::Object(fields)) => {
                for (k, v) in value.as_object().into_iter().flatten() {
                    fields.insert(k.clone(), v.clone());
                }
            }
            (_, slot) => *slot = value.clone(),
        }
        cases.push(case(
            format!("PUT {path} with {name}: {value}"),
            "PUT",
            &path,
            Some("application/json"),
            json_body(&replaced),
            &[400],
        ));
        let patch = json!({ *name: value });
        for content_type in [MERGE, STRATEGIC] {
            cases.push(case(
                format!("PATCH {path} ({content_type}) with {patch}"),
                "PATCH",
                &path,
                Some(content_type),
                json_body(&patch),
                &[422],
            ));
        }
        let mut applied = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"}});
        applied[*name] = value.clone();
        if *name == "metadata" {
            applied["metadata"]["name"] = json!("web");
        }
        cases.push(case(
            format!("apply to {path} with {name}: {value}"),
            "PATCH",
            // Forced, so that no conflict is found before the type.
            format!("{path}?fieldManager=bad-input&force=true"),
            Some(APPLY),
            json_body(&applied),
            &[400, 422],
        ));
    }
    cases.push(case(
        format!("PATCH {path} (json patch) adding a status that is a string"),
        "PATCH",
        &path,
        Some(JSON_PATCH),
        json_body(&json!([{"op": "add", "path": "/status", "value": "x"}])),
        &[422],
    ));
    cases.push(case(
        "PUT pods/p/status with a spec that is not an object",
        "PUT",
        format!("{NS}/pods/p/status"),
        Some("application/json"),
        json_body(
            &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": "x", "status": {"phase": "Running"}}),
        ),
        &[400],
    ));
    cases.push(case(
        "PUT configmaps/cm with a number for a value",
        "PUT",
        format!("{NS}/configmaps/cm"),
        Some("application/json"),
        json_body(
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"},
            "data": {"mode": 1}}),
        ),
        &[400],
    ));
}

/// Every case, sent; the failures as one report each.
async fn run(http: &KubeHttp, cases: &[Case]) -> Vec<String> {
    let mut failures = Vec::new();
    for case in cases {
        let reply = http
            .request(
                case.method,
                &case.path,
                case.content_type.as_deref(),
                case.body.as_deref(),
            )
            .await;
        let reply = match reply {
            Ok(reply) => reply,
            // A handler that panics drops the connection: no reply at all.
            Err(err) => {
                failures.push(format!("{}: no reply: {err:#}", case.what));
                continue;
            }
        };
        if let Err(why) = check_status(&reply, case.codes) {
            failures.push(format!("{}: {why}", case.what));
        }
    }
    failures
}

/// The reply is a Kubernetes Status whose code is its HTTP status, one of
/// `codes`.
fn check_status(reply: &HttpResponse, codes: &[u16]) -> Result<(), String> {
    let status: Value = serde_json::from_slice(&reply.body).map_err(|_| {
        format!(
            "HTTP {} with a body that is not JSON: {}",
            reply.status,
            reply.text()
        )
    })?;
    let is_status = status["kind"] == "Status"
        && status["apiVersion"] == "v1"
        && status["status"] == "Failure"
        && status["code"] == reply.status;
    if !is_status {
        return Err(format!(
            "HTTP {}, not a failure Status: {status}",
            reply.status
        ));
    }
    if !codes.contains(&reply.status) {
        return Err(format!(
            "wanted {codes:?}, got {} {}",
            reply.status, status["message"]
        ));
    }
    Ok(())
}

/// The stored objects, but for Leases, which the API server renews by
/// itself while the requests run.
async fn dump(server: &ApiServer) -> Result<Vec<(String, i64, Vec<u8>)>> {
    let mut dump = store_client::dump(server.client_addr(), "/registry/").await?;
    dump.retain(|(key, _, _)| !key.starts_with("/registry/leases/"));
    Ok(dump)
}

/// Keys that differ between two dumps, for the failure message.
fn differences(before: &[(String, i64, Vec<u8>)], after: &[(String, i64, Vec<u8>)]) -> Vec<String> {
    let mut out = Vec::new();
    for entry in after {
        match before.iter().find(|b| b.0 == entry.0) {
            None => out.push(format!("{} appeared", entry.0)),
            Some(b) if b != entry => out.push(format!(
                "{} changed: {} -> {}",
                entry.0,
                String::from_utf8_lossy(&b.2),
                String::from_utf8_lossy(&entry.2)
            )),
            Some(_) => {}
        }
    }
    for entry in before {
        if !after.iter().any(|a| a.0 == entry.0) {
            out.push(format!("{} disappeared", entry.0));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_refused_with_a_status_and_change_nothing() -> Result<()> {
    let server = ApiServer::start().await?;
    let http = server.http()?;
    let seeds = seeds();
    for (collection, object) in &seeds {
        let reply = http.post(collection, object).await?;
        ensure!(
            reply.status == 201,
            "seeding {collection}: {} {}",
            reply.status,
            reply.text()
        );
    }

    let mut cases = Vec::new();
    for (collection, object) in &seeds {
        let path = object_path(collection, object);
        bad_deletes(&path, &mut cases);
        bad_patches(&path, &mut cases);
        bad_bodies(collection, &path, object, &mut cases);
        bad_queries(collection, &mut cases);
    }
    immutable_changes(&mut cases);
    invalid_creates(&mut cases);
    wrong_typed_writes(&seeds, &mut cases);
    ensure!(cases.len() >= 300, "only {} cases", cases.len());

    let before = dump(&server).await?;
    let failures = run(&http, &cases).await;
    let after = dump(&server).await?;
    let changed = differences(&before, &after);
    ensure!(
        failures.is_empty() && changed.is_empty(),
        "{} of {} malformed requests were not refused as they should be:\n{}\n\nthe store changed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n"),
        changed.join("\n")
    );

    // The server still serves, and a valid change shows in the dump.
    let reply = http
        .request(
            "PATCH",
            &format!("{NS}/configmaps/cm"),
            Some("application/merge-patch+json"),
            json_body(&json!({"data": {"mode": "off"}})).as_deref(),
        )
        .await?;
    ensure!(
        reply.status == 200,
        "a valid patch: {} {}",
        reply.status,
        reply.text()
    );
    let later = dump(&server).await?;
    ensure!(
        differences(&after, &later)
            == [format!(
                "/registry/core/configmaps/default/cm changed: {} -> {}",
                String::from_utf8_lossy(
                    &after
                        .iter()
                        .find(|e| e.0 == "/registry/core/configmaps/default/cm")
                        .context("cm stored")?
                        .2
                ),
                String::from_utf8_lossy(
                    &later
                        .iter()
                        .find(|e| e.0 == "/registry/core/configmaps/default/cm")
                        .context("cm stored")?
                        .2
                )
            )],
        "a valid patch changes exactly the ConfigMap"
    );
    Ok(())
}

/// A negative grace period is not refused: Kubernetes stores it, warns of
/// it in a `Warning` header, and treats it as 1 second when deleting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_grace_periods_are_warned_of_and_treated_as_one_second() -> Result<()> {
    const WARNING: &str = "must be >= 0; negative values are invalid and will be treated as 1";
    let server = ApiServer::start().await?;
    let http = server.http()?;
    let pod = json!({"metadata": {"name": "graceless"}, "spec": {"nodeName": "somewhere",
        "terminationGracePeriodSeconds": -5, "containers": [container()]}});
    let reply = http.post(&format!("{NS}/pods"), &pod).await?;
    ensure!(reply.status == 201, "{} {}", reply.status, reply.text());
    ensure!(
        reply.header("warning")
            == Some(format!("299 - \"spec.terminationGracePeriodSeconds: {WARNING}\"").as_str()),
        "warning: {:?}",
        reply.header("warning")
    );
    ensure!(reply.json()?["spec"]["terminationGracePeriodSeconds"] == -5);

    let mut deployment = json!({"metadata": {"name": "graceless"}, "spec": {"replicas": 0,
        "selector": {"matchLabels": {"app": "g"}}, "template": pod_template("g")}});
    deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(-1);
    let reply = http
        .post(&format!("{APPS}/deployments"), &deployment)
        .await?;
    ensure!(reply.status == 201, "{} {}", reply.status, reply.text());
    ensure!(
        reply.header("warning")
            == Some(
                format!("299 - \"spec.template.spec.terminationGracePeriodSeconds: {WARNING}\"")
                    .as_str()
            ),
        "warning: {:?}",
        reply.header("warning")
    );
    // An unchanged template is not warned of again.
    let reply = http
        .request(
            "PATCH",
            &format!("{APPS}/deployments/graceless"),
            Some("application/merge-patch+json"),
            json_body(&json!({"metadata": {"labels": {"x": "y"}}})).as_deref(),
        )
        .await?;
    ensure!(reply.status == 200 && reply.header("warning").is_none());

    // The pod is bound, so its delete is graceful: 1 second, not -5, and
    // not an immediate removal for a negative period asked in the delete.
    let reply = http
        .request(
            "DELETE",
            &format!("{NS}/pods/graceless?gracePeriodSeconds=-3"),
            None,
            None,
        )
        .await?;
    ensure!(reply.status == 200, "{} {}", reply.status, reply.text());
    let marked = reply.json()?;
    ensure!(
        marked["metadata"]["deletionGracePeriodSeconds"] == 1,
        "{marked}"
    );
    Ok(())
}
