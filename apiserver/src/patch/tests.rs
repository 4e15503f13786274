use serde_json::{json, Value};

use super::*;
use crate::resources;

fn deployments() -> &'static ResourceType {
    resources::find("apps", "v1", "deployments").expect("deployments are served")
}

fn pods() -> &'static ResourceType {
    resources::find("", "v1", "pods").expect("pods are served")
}

fn patch(
    resource: &ResourceType,
    content_type: &str,
    current: &Value,
    body: Value,
) -> Result<Value, ApiError> {
    apply_patch(resource, content_type, current, body.to_string().as_bytes())
}

/// The Deployment of the "Update API Objects in Place Using kubectl patch" task.
fn patch_demo() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "patch-demo"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "nginx"}},
            "template": {
                "metadata": {"labels": {"app": "nginx"}},
                "spec": {
                    "containers": [{"name": "patch-demo-ctr", "image": "nginx"}],
                    "tolerations": [{"effect": "NoSchedule", "key": "dedicated", "value": "test-team"}]
                }
            }
        }
    })
}

fn pod_spec(object: &Value) -> &Value {
    &object["spec"]["template"]["spec"]
}

// --- strategic merge patch: the kubectl patch task page ---

#[test]
fn strategic_merge_adds_a_container_by_name() {
    let body = json!({"spec": {"template": {"spec": {"containers": [{"name": "patch-demo-ctr-2", "image": "redis"}]}}}});
    let out = patch(deployments(), STRATEGIC_MERGE_PATCH, &patch_demo(), body).unwrap();
    assert_eq!(
        pod_spec(&out)["containers"],
        json!([{"name": "patch-demo-ctr", "image": "nginx"}, {"name": "patch-demo-ctr-2", "image": "redis"}])
    );
    assert_eq!(out["spec"]["replicas"], 2, "untouched fields stay");
}

#[test]
fn strategic_merge_replaces_tolerations_which_have_no_merge_key() {
    let body = json!({"spec": {"template": {"spec": {"tolerations": [{"effect": "NoSchedule", "key": "disktype", "value": "ssd"}]}}}});
    let out = patch(deployments(), STRATEGIC_MERGE_PATCH, &patch_demo(), body).unwrap();
    assert_eq!(
        pod_spec(&out)["tolerations"],
        json!([{"effect": "NoSchedule", "key": "disktype", "value": "ssd"}])
    );
}

#[test]
fn json_merge_patch_replaces_the_container_list() {
    let body = json!({"spec": {"template": {"spec": {"containers": [{"name": "patch-demo-ctr-3", "image": "gcr.io/google-samples/hello-app:2.0"}]}}}});
    let out = patch(deployments(), MERGE_PATCH, &patch_demo(), body).unwrap();
    assert_eq!(
        pod_spec(&out)["containers"],
        json!([{"name": "patch-demo-ctr-3", "image": "gcr.io/google-samples/hello-app:2.0"}])
    );
}

#[test]
fn retain_keys_clears_fields_not_listed() {
    let mut current = patch_demo();
    current["spec"]["strategy"] = json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}});
    let body = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
    let out = patch(deployments(), STRATEGIC_MERGE_PATCH, &current, body).unwrap();
    assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
    // Without the directive the old rollingUpdate would have stayed.
    let body = json!({"spec": {"strategy": {"type": "Recreate"}}});
    let out = patch(deployments(), STRATEGIC_MERGE_PATCH, &current, body).unwrap();
    assert!(out["spec"]["strategy"]["rollingUpdate"].is_object());
}

#[test]
fn retain_keys_refuses_a_patch_setting_an_unlisted_field() {
    let body = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate", "rollingUpdate": {}}}});
    let err = patch(deployments(), STRATEGIC_MERGE_PATCH, &patch_demo(), body).unwrap_err();
    assert_eq!((err.code, err.reason), (422, "Invalid"));
}

// --- strategic merge patch: the design doc's directives ---

fn two_containers() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "finalizers": ["a.example/x", "b.example/y"]},
        "spec": {"containers": [
            {"name": "web", "image": "nginx", "ports": [{"containerPort": 80, "name": "http"}],
             "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
             "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
            {"name": "sidecar", "image": "busybox"}
        ]}
    })
}

#[test]
fn patch_delete_in_a_list_element_removes_it_by_merge_key() {
    let body = json!({"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}});
    let out = patch(pods(), STRATEGIC_MERGE_PATCH, &two_containers(), body).unwrap();
    let names: Vec<&str> = out["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["web"]);
}

#[test]
fn patch_replace_in_a_list_replaces_the_whole_list() {
    let body = json!({"spec": {"containers": [{"name": "only", "image": "redis"}, {"$patch": "replace"}]}});
    let out = patch(pods(), STRATEGIC_MERGE_PATCH, &two_containers(), body).unwrap();
    assert_eq!(
        out["spec"]["containers"],
        json!([{"name": "only", "image": "redis"}])
    );
}

#[test]
fn patch_replace_and_delete_on_maps() {
    let current = json!({"metadata": {"name": "p", "labels": {"a": "1", "b": "2"}}, "spec": {"containers": []}});
    let body = json!({"metadata": {"labels": {"$patch": "replace", "c": "3"}}});
    let out = patch(pods(), STRATEGIC_MERGE_PATCH, &current, body).unwrap();
    assert_eq!(out["metadata"]["labels"], json!({"c": "3"}));
    let body = json!({"metadata": {"labels": {"$patch": "delete"}}});
    let out = patch(pods(), STRATEGIC_MERGE_PATCH, &current, body).unwrap();
    assert_eq!(out["metadata"]["labels"], json!({}));
}

#[test]
fn nested_lists_merge_by_their_own_keys() {
    let body = json!({"spec": {"containers": [{
        "name": "web",
        "ports": [{"containerPort": 80, "name": "web"}, {"containerPort": 443}],
        "env": [{"name": "B", "value": "two"}, {"name": "A", "$patch": "delete"}],
        "volumeMounts": [{"mountPath": "/data", "readOnly": true}]
    }]}});
    let out = patch(pods(), STRATEGIC_MERGE_PATCH, &two_containers(), body).unwrap();
    let web = &out["spec"]["containers"][0];
    assert_eq!(
        web["ports"],
        json!([{"containerPort": 80, "name": "web"}, {"containerPort": 443}])
    );
    assert_eq!(web["env"], json!([{"name": "B", "value": "two"}]));
    assert_eq!(
        web["volumeMounts"],
        json!([{"name": "data", "mountPath": "/data", "readOnly": true}])
    );
    assert_eq!(web["image"], "nginx");
    assert_eq!(out["spec"]["containers"][1]["name"], "sidecar");
}

#[test]
fn service_ports_merge_by_port() {
    let services = resources::find("", "v1", "services").unwrap();
    let current =
        json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80, "targetPort": 8080}]}});
    let body = json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}, {"port": 443}]}});
    let out = patch(services, STRATEGIC_MERGE_PATCH, &current, body).unwrap();
    assert_eq!(
        out["spec"]["ports"],
        json!([{"port": 80, "targetPort": 9090}, {"port": 443}])
    );
}

#[test]
fn primitive_lists_with_merge_strategy_merge_as_sets_and_delete_from_primitive_list() {
    let body = json!({"metadata": {"finalizers": ["b.example/y", "c.example/z"]}});
    let out = patch(pods(), STRATEGIC_MERGE_PATCH, &two_containers(), body).unwrap();
    assert_eq!(
        out["metadata"]["finalizers"],
        json!(["a.example/x", "b.example/y", "c.example/z"])
    );
    let body = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.example/x"]}});
    let out = patch(pods(), STRATEGIC_MERGE_PATCH, &two_containers(), body).unwrap();
    assert_eq!(out["metadata"]["finalizers"], json!(["b.example/y"]));
}

#[test]
fn primitive_lists_without_merge_strategy_are_replaced() {
    let mut current = two_containers();
    current["spec"]["containers"][0]["args"] = json!(["-a", "-b"]);
    let body = json!({"spec": {"containers": [{"name": "web", "args": ["-c"]}]}});
    let out = patch(pods(), STRATEGIC_MERGE_PATCH, &current, body).unwrap();
    assert_eq!(out["spec"]["containers"][0]["args"], json!(["-c"]));
}

#[test]
fn set_element_order_orders_the_merged_list() {
    // What client-side `kubectl apply` sends (shared/KUBECTL.md §2).
    let current = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "a", "image": "a:1"}, {"name": "api", "image": "example/api:1.0"}
    ]}}}});
    let body = json!({"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "api"}, {"name": "a"}],
        "containers": [{"image": "example/api:2.0", "name": "api"}]
    }}}});
    let out = patch(deployments(), STRATEGIC_MERGE_PATCH, &current, body).unwrap();
    assert_eq!(
        pod_spec(&out)["containers"],
        json!([{"name": "api", "image": "example/api:2.0"}, {"name": "a", "image": "a:1"}])
    );
    assert!(pod_spec(&out).get("$setElementOrder/containers").is_none());
}

#[test]
fn set_element_order_alone_reorders_and_keeps_unnamed_elements_in_place() {
    let current = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "a"}, {"name": "b"}, {"name": "c"}
    ]}}}});
    let body = json!({"spec": {"template": {"spec": {"$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}]}}}});
    let out = patch(deployments(), STRATEGIC_MERGE_PATCH, &current, body).unwrap();
    assert_eq!(
        pod_spec(&out)["containers"],
        json!([{"name": "c"}, {"name": "a"}, {"name": "b"}])
    );
}

#[test]
fn null_deletes_and_directives_never_reach_the_result() {
    let body = json!({"metadata": {"finalizers": null}, "spec": {"containers": [
        {"name": "new", "image": "x", "env": [{"name": "E", "value": "1", "$patch": "delete"}]}
    ]}});
    let out = patch(pods(), STRATEGIC_MERGE_PATCH, &two_containers(), body).unwrap();
    assert!(out["metadata"].get("finalizers").is_none());
    assert!(!out.to_string().contains("$patch"));
}

#[test]
fn a_strategic_patch_that_changes_nothing_returns_the_same_object() {
    let body = json!({"spec": {"template": {"spec": {"containers": [{"name": "patch-demo-ctr", "image": "nginx"}]}}}});
    let out = patch(deployments(), STRATEGIC_MERGE_PATCH, &patch_demo(), body).unwrap();
    assert_eq!(out, patch_demo());
}

#[test]
fn a_list_element_without_its_merge_key_is_a_bad_request() {
    let body = json!({"spec": {"containers": [{"image": "no-name"}]}});
    let err = patch(pods(), STRATEGIC_MERGE_PATCH, &two_containers(), body).unwrap_err();
    assert_eq!(err.code, 400);
    assert!(
        err.message
            .contains("does not contain declared merge key: name"),
        "{}",
        err.message
    );
}

// --- where the merge keys come from ---

#[test]
fn merge_keys_come_from_the_table_and_the_table_agrees_with_the_schema() {
    assert_eq!(
        list_strategy("io.k8s.api.core.v1.PodSpec", "containers"),
        Some(ListStrategy::MergeByKey("name"))
    );
    assert_eq!(
        list_strategy("io.k8s.api.core.v1.Container", "ports"),
        Some(ListStrategy::MergeByKey("containerPort"))
    );
    assert_eq!(
        list_strategy("io.k8s.api.core.v1.Container", "volumeMounts"),
        Some(ListStrategy::MergeByKey("mountPath"))
    );
    assert_eq!(
        list_strategy(
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
            "ownerReferences"
        ),
        Some(ListStrategy::MergeByKey("uid"))
    );
    assert_eq!(
        list_strategy(
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
            "finalizers"
        ),
        Some(ListStrategy::SetOfPrimitives)
    );
    assert_eq!(
        list_strategy("io.k8s.api.core.v1.PodSpec", "tolerations"),
        None
    );
    assert_eq!(list_strategy("io.k8s.api.core.v1.NodeSpec", "taints"), None);
    strategic::check_table_against_schema().unwrap();
}

// --- JSON patch (RFC 6902 appendix A) ---

fn json_patch(current: Value, ops: Value) -> Result<Value, ApiError> {
    patch(pods(), JSON_PATCH, &current, ops)
}

#[test]
fn rfc6902_add_remove_replace_move_copy() {
    let out = json_patch(
        json!({"foo": "bar"}),
        json!([{"op": "add", "path": "/baz", "value": "qux"}]),
    )
    .unwrap();
    assert_eq!(out, json!({"foo": "bar", "baz": "qux"}));
    let out = json_patch(
        json!({"foo": ["bar", "baz"]}),
        json!([{"op": "add", "path": "/foo/1", "value": "qux"}]),
    )
    .unwrap();
    assert_eq!(out, json!({"foo": ["bar", "qux", "baz"]}));
    let out = json_patch(
        json!({"baz": "qux", "foo": "bar"}),
        json!([{"op": "remove", "path": "/baz"}]),
    )
    .unwrap();
    assert_eq!(out, json!({"foo": "bar"}));
    let out = json_patch(
        json!({"foo": ["bar", "qux", "baz"]}),
        json!([{"op": "remove", "path": "/foo/1"}]),
    )
    .unwrap();
    assert_eq!(out, json!({"foo": ["bar", "baz"]}));
    let out = json_patch(
        json!({"baz": "qux", "foo": "bar"}),
        json!([{"op": "replace", "path": "/baz", "value": "boo"}]),
    )
    .unwrap();
    assert_eq!(out, json!({"baz": "boo", "foo": "bar"}));
    let out = json_patch(
        json!({"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}}),
        json!([{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}]),
    )
    .unwrap();
    assert_eq!(
        out,
        json!({"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}})
    );
    let out = json_patch(
        json!({"foo": ["all", "grass", "cows", "eat"]}),
        json!([{"op": "move", "from": "/foo/1", "path": "/foo/3"}]),
    )
    .unwrap();
    assert_eq!(out, json!({"foo": ["all", "cows", "eat", "grass"]}));
    let out = json_patch(
        json!({"a": {"b": 1}}),
        json!([{"op": "copy", "from": "/a", "path": "/c"}]),
    )
    .unwrap();
    assert_eq!(out, json!({"a": {"b": 1}, "c": {"b": 1}}));
    let out = json_patch(
        json!({"foo": ["bar"]}),
        json!([{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}]),
    )
    .unwrap();
    assert_eq!(out, json!({"foo": ["bar", ["abc", "def"]]}));
}

#[test]
fn rfc6902_pointer_escapes_and_test() {
    let doc = json!({"/": 9, "~1": 10});
    let out = json_patch(
        doc.clone(),
        json!([{"op": "test", "path": "/~01", "value": 10}]),
    )
    .unwrap();
    assert_eq!(out, doc);
    let out = json_patch(
        json!({"metadata": {"annotations": {}}}),
        json!([
            {"op": "add", "path": "/metadata/annotations/example.com~1owner", "value": "me"}
        ]),
    )
    .unwrap();
    assert_eq!(out["metadata"]["annotations"]["example.com/owner"], "me");
    let doc = json!({"baz": "qux", "foo": ["a", 2, "c"]});
    let ok = json!([{"op": "test", "path": "/baz", "value": "qux"}, {"op": "test", "path": "/foo/1", "value": 2.0}]);
    assert_eq!(json_patch(doc.clone(), ok).unwrap(), doc);
}

#[test]
fn a_failed_test_is_422_invalid_and_nothing_is_applied() {
    let err = json_patch(
        json!({"baz": "qux"}),
        json!([
            {"op": "replace", "path": "/baz", "value": "x"},
            {"op": "test", "path": "/baz", "value": "bar"}
        ]),
    )
    .unwrap_err();
    assert_eq!((err.code, err.reason), (422, "Invalid"));
    assert!(err
        .message
        .starts_with("the server rejected our request due to an error in our request"));
    assert!(
        err.message.contains("testing value /baz failed"),
        "{}",
        err.message
    );
}

#[test]
fn operations_on_missing_paths_are_422() {
    for ops in [
        json!([{"op": "remove", "path": "/nope"}]),
        json!([{"op": "replace", "path": "/nope", "value": 1}]),
        json!([{"op": "add", "path": "/baz/bat", "value": "qux"}]),
        json!([{"op": "move", "from": "/nope", "path": "/x"}]),
        json!([{"op": "add", "path": "/list/5", "value": 1}]),
        json!([{"op": "test", "path": "/nope", "value": null}]),
    ] {
        let err = json_patch(json!({"foo": "bar", "list": []}), ops.clone()).unwrap_err();
        assert_eq!(err.code, 422, "{ops}: {err}");
    }
}

#[test]
fn malformed_json_patches_are_400() {
    for body in [
        json!({"op": "add"}),
        json!([{"op": "add", "path": "/a"}]),
        json!([{"op": "jump", "path": "/a"}]),
        json!([{"path": "/a"}]),
        json!([{"op": "add", "path": "a", "value": 1}]),
        json!([{"op": "add", "path": "/a~2", "value": 1}]),
        json!(["add"]),
    ] {
        let err = json_patch(json!({}), body.clone()).unwrap_err();
        assert_eq!(err.code, 400, "{body}: {err}");
    }
}

// --- JSON merge patch (RFC 7386) ---

#[test]
fn rfc7386_example() {
    let target = json!({"title": "Goodbye!", "author": {"givenName": "John", "familyName": "Doe"}, "tags": ["example", "sample"], "content": "This will be unchanged"});
    let body = json!({"title": "Hello!", "phoneNumber": "+01-123-456-7890", "author": {"familyName": null}, "tags": ["example"]});
    let out = patch(pods(), MERGE_PATCH, &target, body).unwrap();
    assert_eq!(
        out,
        json!({"title": "Hello!", "author": {"givenName": "John"}, "tags": ["example"], "content": "This will be unchanged", "phoneNumber": "+01-123-456-7890"})
    );
}

#[test]
fn kubectl_label_removal_is_a_merge_patch_null() {
    let current = json!({"metadata": {"name": "p", "labels": {"tier": "x", "app": "y"}}});
    let out = patch(
        pods(),
        MERGE_PATCH,
        &current,
        json!({"metadata": {"labels": {"tier": null}}}),
    )
    .unwrap();
    assert_eq!(out["metadata"]["labels"], json!({"app": "y"}));
}

// --- media types and bad bodies ---

#[test]
fn apply_patches_and_unknown_media_types_are_415_in_kubernetes_words() {
    for content_type in [APPLY_PATCH, "application/json", "text/plain", ""] {
        let err = apply_patch(pods(), content_type, &json!({}), b"{}").unwrap_err();
        assert_eq!((err.code, err.reason), (415, "UnsupportedMediaType"));
        assert_eq!(err.message, "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json");
    }
    let ok = apply_patch(
        pods(),
        "application/merge-patch+json; charset=utf-8",
        &json!({}),
        b"{\"a\":1}",
    );
    assert_eq!(ok.unwrap(), json!({"a": 1}));
}

#[test]
fn no_body_panics_and_bad_ones_are_400() {
    let current = two_containers();
    let bodies: &[&[u8]] = &[
        b"",
        b"{",
        b"null",
        b"[]",
        b"42",
        b"\"s\"",
        b"\xff\xfe",
        br#"{"spec":{"containers":"x"}}"#,
        br#"{"spec":{"containers":[1,2]}}"#,
        br#"{"spec":{"containers":[{"$patch":"merge","name":"web"}]}}"#,
        br#"{"spec":{"$patch":7}}"#,
        br#"{"spec":{"$retainKeys":"x"}}"#,
        br#"{"metadata":{"$deleteFromPrimitiveList/finalizers":"x"}}"#,
        br#"{"spec":{"$setElementOrder/containers":{}}}"#,
        br#"{"spec":{"containers":[{"name":"web","ports":[{"name":"p"}]}]}}"#,
        br#"{"metadata":{"labels":[{"$patch":"delete"}]}}"#,
        br#"[{"op":"move","from":"/spec","path":"/spec/x"}]"#,
        br#"[{"op":"add","path":"","value":[]}]"#,
        br#"[{"op":"remove","path":""}]"#,
    ];
    for body in bodies {
        for content_type in [JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH] {
            if let Err(err) = apply_patch(pods(), content_type, &current, body) {
                assert!(
                    matches!(err.code, 400 | 422),
                    "{content_type} {:?}: {err}",
                    String::from_utf8_lossy(body)
                );
            }
        }
    }
    let err = apply_patch(pods(), STRATEGIC_MERGE_PATCH, &current, b"{").unwrap_err();
    assert_eq!(err.code, 400);
    assert!(err.message.starts_with("error decoding patch"));
}

#[test]
fn too_many_json_patch_operations_are_413() {
    let ops: Vec<Value> = (0..=json_patch::MAX_OPERATIONS)
        .map(|_| json!({"op": "test", "path": "", "value": {}}))
        .collect();
    let err = json_patch(json!({}), Value::Array(ops)).unwrap_err();
    assert_eq!(err.code, 413);
}

#[test]
fn a_json_patch_of_copies_doubling_the_object_is_413_not_out_of_memory() {
    // Each copy doubles /a: 64 of them would ask for 2^64 copies of it.
    let ops: Vec<Value> = (0..64)
        .map(|i| json!({"op": "copy", "from": "/a", "path": format!("/a/b{i}")}))
        .collect();
    let current = json!({"a": {"data": "x".repeat(64)}});
    let err = json_patch(current.clone(), Value::Array(ops)).unwrap_err();
    assert_eq!((err.code, err.reason), (413, "RequestEntityTooLarge"));
    assert!(err.message.contains("copy operations"), "{}", err.message);

    // Copies that stay under the limit still apply.
    let ops = json!([{"op": "copy", "from": "/a", "path": "/a/b0"}]);
    let patched = json_patch(current, ops).unwrap();
    assert_eq!(patched["a"]["b0"]["data"], patched["a"]["data"]);
}
