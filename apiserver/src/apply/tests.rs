use serde_json::{json, Value};

use super::*;
use crate::resources;
use crate::status::Cause;

const T1: &str = "2024-05-01T10:00:00Z";
const T2: &str = "2024-05-01T11:00:00Z";
const T3: &str = "2024-05-01T12:00:00Z";

fn deployments() -> &'static ResourceType {
    resources::find("apps", "v1", "deployments").expect("deployments are served")
}

fn configmaps() -> &'static ResourceType {
    resources::find("", "v1", "configmaps").expect("configmaps are served")
}

fn manager(name: &str) -> Manager<'_> {
    Manager {
        name,
        api_version: "apps/v1",
        subresource: None,
    }
}

fn status_manager(name: &str) -> Manager<'_> {
    Manager {
        name,
        api_version: "apps/v1",
        subresource: Some("status"),
    }
}

/// An apply configuration of the Deployment `web`.
fn web(replicas: i64, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "nginx", "image": image}]}
            }
        }
    })
}

/// A configuration that sets only the given `spec`.
fn partial(spec: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": spec
    })
}

fn apply_ok(current: Option<&Value>, config: &Value, who: &str, now: &str) -> Value {
    apply(deployments(), current, config, &manager(who), false, now)
        .unwrap_or_else(|err| panic!("apply by {who} failed: {err}"))
}

/// The managedFields entry of `who` with `operation`, if any.
fn entry<'a>(object: &'a Value, who: &str, operation: &str) -> Option<&'a Value> {
    object["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == who && e["operation"] == operation)
}

fn owned(object: &Value, who: &str, operation: &str) -> FieldSet {
    let entry = entry(object, who, operation)
        .unwrap_or_else(|| panic!("no {operation} entry of {who} in {object:#}"));
    FieldSet::from_fields_v1(&entry["fieldsV1"]).expect("stored fieldsV1 reads back")
}

fn path(elements: &[&str]) -> Vec<String> {
    elements.iter().map(|e| e.to_string()).collect()
}

fn replicas_path() -> Vec<String> {
    path(&["f:spec", "f:replicas"])
}

fn image_path() -> Vec<String> {
    path(&[
        "f:spec",
        "f:template",
        "f:spec",
        "f:containers",
        r#"k:{"name":"nginx"}"#,
        "f:image",
    ])
}

/// `object` after "kubectl-scale" (an update) set spec.replicas.
fn scaled(object: &Value, replicas: i64, now: &str) -> Value {
    let mut new = object.clone();
    new["spec"]["replicas"] = json!(replicas);
    record_update(
        deployments(),
        Some(object),
        &mut new,
        &manager("kubectl-scale"),
        now,
    );
    new
}

// --- apply: ownership and merge ---

#[test]
fn create_by_apply_owns_exactly_the_applied_fields() {
    let out = apply_ok(None, &web(3, "nginx:1.25"), "kubectl", T1);
    let entries = out["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(
        entries[0],
        json!({
            "manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1",
            "time": T1, "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {
                "f:replicas": {},
                "f:selector": {},
                "f:template": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {"f:containers": {
                        "k:{\"name\":\"nginx\"}": {".": {}, "f:image": {}, "f:name": {}}
                    }}
                }
            }}
        }),
        "name, namespace, apiVersion and kind are not owned; the selector is atomic"
    );
    let mut without_managed_fields = out.clone();
    without_managed_fields["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    assert_eq!(without_managed_fields, web(3, "nginx:1.25"));
}

#[test]
fn reapplying_a_changed_field_updates_value_and_time_and_a_no_op_keeps_the_time() {
    let first = apply_ok(None, &web(3, "nginx:1.25"), "kubectl", T1);
    let second = apply_ok(Some(&first), &web(5, "nginx:1.25"), "kubectl", T2);
    assert_eq!(second["spec"]["replicas"], 5);
    let entries = second["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "one Apply entry per manager");
    assert_eq!(entries[0]["time"], T2);
    assert!(owned(&second, "kubectl", "Apply").contains(&replicas_path()));

    let third = apply_ok(Some(&second), &web(5, "nginx:1.25"), "kubectl", T3);
    assert_eq!(
        third, second,
        "re-applying the same configuration changes nothing"
    );
}

#[test]
fn a_field_dropped_from_the_configuration_and_owned_by_no_one_else_is_removed() {
    let mut config = web(3, "nginx:1.25");
    config["metadata"]["labels"] = json!({"app": "web", "tier": "front"});
    config["spec"]["template"]["spec"]["containers"] =
        json!([{"name": "nginx", "image": "nginx:1.25"}, {"name": "log", "image": "busybox"}]);
    let first = apply_ok(None, &config, "kubectl", T1);

    let out = apply_ok(Some(&first), &web(3, "nginx:1.25"), "kubectl", T2);
    assert!(
        out["metadata"].get("labels").is_none(),
        "labels left empty go: {out:#}"
    );
    assert_eq!(
        out["spec"]["template"]["spec"]["containers"],
        json!([{"name": "nginx", "image": "nginx:1.25"}])
    );
    let mine = owned(&out, "kubectl", "Apply");
    assert!(!mine.contains(&path(&["f:metadata", "f:labels", "f:tier"])));
    assert!(!mine.contains(&path(&[
        "f:spec",
        "f:template",
        "f:spec",
        "f:containers",
        r#"k:{"name":"log"}"#
    ])));

    let mut no_replicas = web(0, "nginx:1.25");
    no_replicas["spec"]
        .as_object_mut()
        .unwrap()
        .remove("replicas");
    let out = apply_ok(Some(&out), &no_replicas, "kubectl", T3);
    assert!(out["spec"].get("replicas").is_none());
}

#[test]
fn a_dropped_field_another_manager_shares_is_kept() {
    let first = apply_ok(None, &web(3, "nginx:1.25"), "alice", T1);
    let shared = apply_ok(Some(&first), &partial(json!({"replicas": 3})), "bob", T2);
    assert!(owned(&shared, "bob", "Apply").contains(&replicas_path()));
    assert!(owned(&shared, "alice", "Apply").contains(&replicas_path()));

    let mut no_replicas = web(0, "nginx:1.25");
    no_replicas["spec"]
        .as_object_mut()
        .unwrap()
        .remove("replicas");
    let out = apply_ok(Some(&shared), &no_replicas, "alice", T3);
    assert_eq!(out["spec"]["replicas"], 3, "bob still owns it");
    assert!(!owned(&out, "alice", "Apply").contains(&replicas_path()));
    assert!(owned(&out, "bob", "Apply").contains(&replicas_path()));
}

#[test]
fn changing_a_field_an_update_took_is_a_conflict() {
    let applied = apply_ok(None, &web(3, "nginx:1.25"), "kubectl", T1);
    let scaled = scaled(&applied, 5, T2);
    assert!(owned(&scaled, "kubectl-scale", "Update").contains(&replicas_path()));
    assert!(!owned(&scaled, "kubectl", "Apply").contains(&replicas_path()));

    let err = apply(
        deployments(),
        Some(&scaled),
        &web(3, "nginx:1.25"),
        &manager("kubectl"),
        false,
        T3,
    )
    .unwrap_err();
    assert_eq!((err.code, err.reason), (409, "Conflict"));
    assert_eq!(
        err.message,
        r#"Apply failed with 1 conflict: conflict with "kubectl-scale" using apps/v1: .spec.replicas"#
    );
    let details = err.details.expect("conflict details");
    assert_eq!(
        (
            details.group.as_str(),
            details.kind.as_str(),
            details.name.as_str()
        ),
        ("apps", "deployments", "web")
    );
    assert_eq!(
        details.causes,
        vec![Cause {
            reason: "FieldManagerConflict",
            message: r#"conflict with "kubectl-scale" using apps/v1"#.into(),
            field: ".spec.replicas".into(),
        }]
    );
}

#[test]
fn several_conflicts_are_listed_per_manager() {
    let applied = apply_ok(None, &web(3, "nginx:1.25"), "kubectl", T1);
    let mut edited = applied.clone();
    edited["spec"]["replicas"] = json!(4);
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.26");
    record_update(
        deployments(),
        Some(&applied),
        &mut edited,
        &manager("mgr"),
        T2,
    );
    let err = apply(
        deployments(),
        Some(&edited),
        &web(3, "nginx:1.25"),
        &manager("kubectl"),
        false,
        T3,
    )
    .unwrap_err();
    assert_eq!(
        err.message,
        "Apply failed with 2 conflicts: conflicts with \"mgr\" using apps/v1:\n- .spec.replicas\n- .spec.template.spec.containers[name=\"nginx\"].image"
    );
    let fields: Vec<&str> = err
        .details
        .as_ref()
        .unwrap()
        .causes
        .iter()
        .map(|c| c.field.as_str())
        .collect();
    assert_eq!(
        fields,
        [
            ".spec.replicas",
            ".spec.template.spec.containers[name=\"nginx\"].image"
        ]
    );
}

#[test]
fn a_conflict_with_another_applier_names_it_without_a_version() {
    let first = apply_ok(None, &web(3, "nginx:1.25"), "alice", T1);
    let err = apply(
        deployments(),
        Some(&first),
        &partial(json!({"replicas": 4})),
        &manager("bob"),
        false,
        T2,
    )
    .unwrap_err();
    assert_eq!(
        err.message,
        r#"Apply failed with 1 conflict: conflict with "alice": .spec.replicas"#
    );
}

#[test]
fn applying_the_value_another_manager_set_shares_it() {
    let applied = apply_ok(None, &web(3, "nginx:1.25"), "kubectl", T1);
    let scaled = scaled(&applied, 5, T2);
    let out = apply_ok(Some(&scaled), &web(5, "nginx:1.25"), "kubectl", T3);
    assert_eq!(out["spec"]["replicas"], 5);
    assert!(owned(&out, "kubectl", "Apply").contains(&replicas_path()));
    assert!(owned(&out, "kubectl-scale", "Update").contains(&replicas_path()));
}

#[test]
fn force_takes_the_field_from_the_other_manager() {
    let applied = apply_ok(None, &web(3, "nginx:1.25"), "kubectl", T1);
    let scaled = scaled(&applied, 5, T2);
    let out = apply(
        deployments(),
        Some(&scaled),
        &web(3, "nginx:1.25"),
        &manager("kubectl"),
        true,
        T3,
    )
    .expect("force resolves conflicts");
    assert_eq!(out["spec"]["replicas"], 3);
    assert!(owned(&out, "kubectl", "Apply").contains(&replicas_path()));
    assert!(
        entry(&out, "kubectl-scale", "Update").is_none(),
        "an entry left without fields goes"
    );
}

#[test]
fn keyed_list_items_of_two_managers_merge_by_name() {
    let first = apply_ok(None, &web(3, "nginx:1.25"), "alice", T1);
    let sidecar = partial(json!({"template": {"spec": {"containers": [
        {"name": "sidecar", "image": "busybox"}
    ]}}}));
    let both = apply_ok(Some(&first), &sidecar, "bob", T2);
    let names = |o: &Value| -> Vec<Value> {
        o["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].clone())
            .collect()
    };
    assert_eq!(names(&both), [json!("nginx"), json!("sidecar")]);
    assert_eq!(
        owned(&both, "bob", "Apply").to_fields_v1(),
        json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
            "k:{\"name\":\"sidecar\"}": {".": {}, "f:image": {}, "f:name": {}}
        }}}}})
    );

    let out = apply_ok(Some(&both), &web(3, "nginx:1.26"), "alice", T3);
    assert_eq!(names(&out), [json!("nginx"), json!("sidecar")]);
    assert_eq!(
        out["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.26"
    );
    assert_eq!(
        out["spec"]["template"]["spec"]["containers"][1]["image"],
        "busybox"
    );
}

#[test]
fn keyed_list_order_follows_the_configuration_and_keeps_other_items_in_place() {
    let config = |names: &[&str]| {
        let containers: Vec<Value> = names
            .iter()
            .map(|n| json!({"name": n, "image": "busybox"}))
            .collect();
        partial(json!({"template": {"spec": {"containers": containers}}}))
    };
    let first = apply_ok(None, &config(&["a"]), "other", T1);
    let second = apply_ok(Some(&first), &config(&["b"]), "me", T2);
    let out = apply_ok(Some(&second), &config(&["c", "b"]), "me", T3);
    let names: Vec<&str> = out["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "c", "b"]);
}

#[test]
fn items_only_the_live_list_has_keep_their_place() {
    let mut live = partial(json!({"template": {"spec": {"containers": [
        {"name": "b", "image": "busybox"},
        {"name": "x", "image": "busybox"},
        {"name": "c", "image": "busybox"}
    ]}}}));
    live["metadata"]["uid"] = json!("u-1");
    let config = partial(json!({"template": {"spec": {"containers": [
        {"name": "c", "image": "busybox"},
        {"name": "b", "image": "busybox"}
    ]}}}));
    let out = apply_ok(Some(&live), &config, "me", T1);
    let names: Vec<&str> = out["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["x", "c", "b"]);
}

#[test]
fn a_dropped_item_keeps_the_fields_another_manager_owns() {
    let config = |names: &[&str]| {
        let containers: Vec<Value> = names
            .iter()
            .map(|n| json!({"name": n, "image": "busybox"}))
            .collect();
        partial(json!({"template": {"spec": {"containers": containers}}}))
    };
    let first = apply_ok(None, &config(&["main", "sidecar"]), "alice", T1);
    let mut edited = first.clone();
    edited["spec"]["template"]["spec"]["containers"][1]["image"] = json!("busybox:2");
    record_update(
        deployments(),
        Some(&first),
        &mut edited,
        &manager("editor"),
        T2,
    );

    let out = apply_ok(Some(&edited), &config(&["main"]), "alice", T3);
    assert_eq!(
        out["spec"]["template"]["spec"]["containers"],
        json!([{"name": "main", "image": "busybox"}, {"name": "sidecar", "image": "busybox:2"}]),
        "the editor still owns the sidecar's image, so the item and its key stay"
    );

    let out = apply_ok(Some(&first), &config(&["main"]), "alice", T3);
    assert_eq!(
        out["spec"]["template"]["spec"]["containers"],
        json!([{"name": "main", "image": "busybox"}]),
        "an item no one else owns goes whole"
    );
}

#[test]
fn set_lists_merge_as_a_union() {
    let finalizers = |list: Value| {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "finalizers": list}
        })
    };
    let cm = |who| Manager {
        name: who,
        api_version: "v1",
        subresource: None,
    };
    let first = apply(
        configmaps(),
        None,
        &finalizers(json!(["a"])),
        &cm("alice"),
        false,
        T1,
    )
    .unwrap();
    let both = apply(
        configmaps(),
        Some(&first),
        &finalizers(json!(["b", "a"])),
        &cm("bob"),
        false,
        T2,
    )
    .unwrap();
    assert_eq!(both["metadata"]["finalizers"], json!(["b", "a"]));
    assert_eq!(
        owned(&both, "alice", "Apply").to_fields_v1(),
        json!({"f:metadata": {"f:finalizers": {"v:\"a\"": {}}}})
    );
    let without = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"k": "v"}});
    let out = apply(configmaps(), Some(&both), &without, &cm("bob"), false, T3).unwrap();
    assert_eq!(
        out["metadata"]["finalizers"],
        json!(["a"]),
        "alice still owns a"
    );
}

#[test]
fn explicit_null_in_a_configuration_changes_and_owns_nothing() {
    let first = apply_ok(None, &web(3, "nginx:1.25"), "kubectl", T1);
    let mut config = web(3, "nginx:1.25");
    config["spec"]["replicas"] = Value::Null;
    let out = apply_ok(Some(&first), &config, "other", T2);
    assert_eq!(out["spec"]["replicas"], 3);
    assert!(!owned(&out, "other", "Apply").contains(&replicas_path()));
}

#[test]
fn server_metadata_comes_from_the_live_object() {
    let mut live = apply_ok(None, &web(3, "nginx:1.25"), "kubectl", T1);
    live["metadata"]["uid"] = json!("u-1");
    live["metadata"]["resourceVersion"] = json!("7");
    let mut config = web(3, "nginx:1.25");
    config["metadata"]["resourceVersion"] = json!("3");
    config["metadata"]["uid"] = json!("other");
    let out = apply_ok(Some(&live), &config, "kubectl", T2);
    assert_eq!(out["metadata"]["uid"], "u-1");
    assert_eq!(out["metadata"]["resourceVersion"], "7");
}

#[test]
fn status_is_owned_only_through_the_status_subresource() {
    let mut config = web(3, "nginx:1.25");
    config["status"] = json!({"replicas": 3});
    let main = apply_ok(None, &config, "kubectl", T1);
    assert!(owned(&main, "kubectl", "Apply").children["f:spec"]
        .children
        .contains_key("f:replicas"));
    assert!(!owned(&main, "kubectl", "Apply")
        .children
        .contains_key("f:status"));

    let status = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 9},
        "status": {"readyReplicas": 3}
    });
    let out = apply(
        deployments(),
        Some(&main),
        &status,
        &status_manager("controller"),
        false,
        T2,
    )
    .unwrap();
    let controller = entry(&out, "controller", "Apply").expect("status apply entry");
    assert_eq!(controller["subresource"], "status");
    assert_eq!(
        controller["fieldsV1"],
        json!({"f:status": {"f:readyReplicas": {}}})
    );
}

// --- record_update ---

/// A create's managedFields, found without comparing the object with
/// nothing, are what the comparison finds: for an object of every
/// built-in resource with every field set (pruned as a create would be)
/// and for a plain pod, by a main-resource and a status manager.
#[test]
fn a_create_records_what_comparing_with_nothing_records() {
    let (mut compared, mut recorded) = (0, 0);
    for (resource, mut full) in crate::validation::tests::instances() {
        crate::validation::prune_unknown_fields(resource, &mut full);
        let _ = full["metadata"]
            .as_object_mut()
            .map(|m| m.remove("managedFields"));
        let pod = json!({"apiVersion": resource.api_version(), "kind": resource.kind,
            "metadata": {"name": "a", "namespace": "default", "labels": {"app": "a"}},
            "spec": {"containers": [{"name": "c", "image": "nginx",
                "ports": [{"containerPort": 80, "protocol": "TCP"}]}]}});
        let bare = json!({"apiVersion": resource.api_version(), "kind": resource.kind,
            "metadata": {"name": "a"}});
        // Nulls, items without their key, duplicate items and set values:
        // what a create's field set must keep as the general path does.
        let odd = json!({"apiVersion": resource.api_version(), "kind": resource.kind,
            "metadata": {"name": "a", "labels": null, "annotations": {"x": null},
                "finalizers": ["f", "f", "g"], "ownerReferences": [{"kind": "K"}]},
            "spec": {"containers": [{"name": "c", "image": null}, {"name": "c"}, {"image": "x"}],
                "tolerations": [{"key": "k", "value": 1.5}]},
            "data": {"k": null}});
        for object in [full, pod, bare, odd] {
            for manager in [manager("kubectl-create"), status_manager("kubelet")] {
                let root = Node::root(resource.definition);
                let mut fast = object.clone();
                record_create(resource, root, &mut fast, &manager, T1);
                let mut general = object.clone();
                record_change(
                    resource,
                    root,
                    None,
                    &mut general,
                    &manager,
                    T1,
                    Vec::new(),
                    true,
                );
                assert_eq!(fast, general, "{} by {}", resource.plural, manager.name);
                compared += 1;
                if fast["metadata"]["managedFields"].is_array() {
                    recorded += 1;
                }
            }
        }
    }
    assert!(compared >= 240, "{compared} objects compared");
    assert!(
        recorded >= 60,
        "{recorded} of {compared} recorded any field"
    );
}

#[test]
fn an_update_that_creates_owns_every_field() {
    let mut object = web(3, "nginx:1.25");
    object["metadata"]["labels"] = json!({"app": "web"});
    record_update(
        deployments(),
        None,
        &mut object,
        &manager("kubectl-create"),
        T1,
    );
    let entries = object["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["operation"], "Update");
    assert_eq!(entries[0]["time"], T1);
    assert_eq!(
        entries[0]["fieldsV1"],
        json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {
                "f:replicas": {},
                "f:selector": {},
                "f:template": {
                    "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                    "f:spec": {"f:containers": {
                        "k:{\"name\":\"nginx\"}": {".": {}, "f:image": {}, "f:name": {}}
                    }}
                }
            }
        })
    );
}

#[test]
fn a_no_op_update_leaves_the_object_byte_identical() {
    let mut stored = web(3, "nginx:1.25");
    record_update(
        deployments(),
        None,
        &mut stored,
        &manager("kubectl-create"),
        T1,
    );
    let stored = apply_ok(
        Some(&stored),
        &partial(json!({"replicas": 3})),
        "kubectl",
        T1,
    );

    let mut without = stored.clone();
    without["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    record_update(
        deployments(),
        Some(&stored),
        &mut without,
        &manager("editor"),
        T2,
    );
    assert_eq!(without.to_string(), stored.to_string());

    let mut echoed = stored.clone();
    record_update(
        deployments(),
        Some(&stored),
        &mut echoed,
        &manager("editor"),
        T2,
    );
    assert_eq!(echoed.to_string(), stored.to_string());

    let mut empty_list = stored.clone();
    empty_list["metadata"]["managedFields"] = json!([]);
    record_update(
        deployments(),
        Some(&stored),
        &mut empty_list,
        &manager("editor"),
        T2,
    );
    assert_eq!(
        empty_list.to_string(),
        stored.to_string(),
        "[] means not given"
    );
}

#[test]
fn an_update_takes_the_fields_it_changes() {
    let applied = apply_ok(None, &web(3, "nginx:1.25"), "kubectl", T1);
    let mut edited = applied.clone();
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.26");
    record_update(
        deployments(),
        Some(&applied),
        &mut edited,
        &manager("editor"),
        T2,
    );
    let editor = entry(&edited, "editor", "Update").expect("editor entry");
    assert_eq!(editor["time"], T2);
    assert_eq!(
        editor["fieldsV1"],
        json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
            "k:{\"name\":\"nginx\"}": {"f:image": {}}
        }}}}})
    );
    let kubectl = owned(&edited, "kubectl", "Apply");
    assert!(!kubectl.contains(&image_path()));
    assert!(kubectl.contains(&replicas_path()));
    assert_eq!(entry(&edited, "kubectl", "Apply").unwrap()["time"], T1);
}

#[test]
fn an_update_removing_a_field_drops_it_from_every_entry() {
    let applied = apply_ok(None, &web(3, "nginx:1.25"), "kubectl", T1);
    let mut edited = applied.clone();
    edited["spec"].as_object_mut().unwrap().remove("replicas");
    record_update(
        deployments(),
        Some(&applied),
        &mut edited,
        &manager("editor"),
        T2,
    );
    assert!(!owned(&edited, "kubectl", "Apply").contains(&replicas_path()));
    assert!(
        entry(&edited, "editor", "Update").is_none(),
        "it set nothing"
    );
}

#[test]
fn managed_fields_in_an_update_body_follow_kubernetes_rules() {
    let applied = apply_ok(None, &web(3, "nginx:1.25"), "kubectl", T1);

    let mut reset = applied.clone();
    reset["metadata"]["managedFields"] = json!([{}]);
    reset["metadata"]["labels"] = json!({"x": "y"});
    record_update(
        deployments(),
        Some(&applied),
        &mut reset,
        &manager("editor"),
        T2,
    );
    let entries = reset["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(
        entries.len(),
        1,
        "[{{}}] clears, then the write is recorded"
    );
    assert_eq!(
        entries[0]["fieldsV1"],
        json!({"f:metadata": {"f:labels": {".": {}, "f:x": {}}}})
    );

    let mut cleared = applied.clone();
    cleared["metadata"]["managedFields"] = json!([{}]);
    record_update(
        deployments(),
        Some(&applied),
        &mut cleared,
        &manager("editor"),
        T2,
    );
    assert!(cleared["metadata"].get("managedFields").is_none());

    let mut replaced = applied.clone();
    replaced["metadata"]["managedFields"] = json!([{
        "manager": "someone", "operation": "Update", "apiVersion": "apps/v1",
        "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}
    }]);
    record_update(
        deployments(),
        Some(&applied),
        &mut replaced,
        &manager("editor"),
        T2,
    );
    let entries = replaced["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(
        entries.len(),
        1,
        "the client's list replaces the stored one"
    );
    assert_eq!(entries[0]["manager"], "someone");

    let mut garbage = applied.clone();
    garbage["metadata"]["managedFields"] = json!([{"manager": "x", "operation": "Fiddle"}]);
    record_update(
        deployments(),
        Some(&applied),
        &mut garbage,
        &manager("editor"),
        T2,
    );
    assert_eq!(garbage, applied, "an unreadable list keeps the stored one");

    let mut through_status = applied.clone();
    through_status["metadata"]["managedFields"] = json!([{}]);
    record_update(
        deployments(),
        Some(&applied),
        &mut through_status,
        &status_manager("ctl"),
        T2,
    );
    assert_eq!(
        through_status, applied,
        "subresources cannot set managedFields"
    );
}

#[test]
fn an_update_through_status_owns_only_status() {
    let applied = apply_ok(None, &web(3, "nginx:1.25"), "kubectl", T1);
    let mut new = applied.clone();
    new["status"] = json!({"readyReplicas": 3});
    record_update(
        deployments(),
        Some(&applied),
        &mut new,
        &status_manager("deployment-controller"),
        T2,
    );
    let controller = entry(&new, "deployment-controller", "Update").expect("status entry");
    assert_eq!(controller["subresource"], "status");
    assert_eq!(
        controller["fieldsV1"],
        json!({"f:status": {"f:readyReplicas": {}}})
    );

    let mut main = applied.clone();
    main["status"] = json!({"readyReplicas": 3});
    record_update(
        deployments(),
        Some(&applied),
        &mut main,
        &manager("editor"),
        T2,
    );
    assert!(
        entry(&main, "editor", "Update").is_none(),
        "status is not owned through the main resource"
    );
}

// --- FieldsV1 ---

#[test]
fn fields_v1_keys_read_as_kubernetes_writes_them() {
    let written = json!({"f:spec": {"f:ports": {
        "k:{\"protocol\": \"TCP\", \"containerPort\": 80}": {".": {}, "f:containerPort": {}},
        "v:\"a\"": {}
    }}});
    let set = FieldSet::from_fields_v1(&written).unwrap();
    assert_eq!(
        set.to_fields_v1(),
        json!({"f:spec": {"f:ports": {
            "k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}},
            "v:\"a\"": {}
        }}}),
        "key JSON is compact with sorted keys"
    );
    assert_eq!(
        fieldset::display(&path(&[
            "f:spec",
            "f:ports",
            r#"k:{"containerPort":80,"protocol":"TCP"}"#,
            "f:name"
        ])),
        r#".spec.ports[containerPort=80,protocol="TCP"].name"#
    );
    assert_eq!(
        fieldset::display(&path(&["f:metadata", "f:finalizers", r#"v:"a""#])),
        r#".metadata.finalizers[="a"]"#
    );
    assert!(FieldSet::from_fields_v1(&json!({"x:y": {}})).is_err());
    assert!(FieldSet::from_fields_v1(&json!({"k:[1]": {}})).is_err());
    assert!(FieldSet::from_fields_v1(&json!("f:spec")).is_err());
}

#[test]
fn atomic_markers_name_served_definitions() {
    let served: Vec<&str> = node::atomic_definitions()
        .filter(|d| crate::schema::DEFINITIONS.contains_key(*d))
        .collect();
    assert!(served.contains(&"io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector"));
    assert!(served.contains(&"io.k8s.api.core.v1.PodSpec"));
    assert!(
        served.len() >= 8,
        "most markers match the schema: {served:?}"
    );
}

// --- bad input ---

#[test]
fn configurations_that_are_not_of_the_resource_are_bad_requests() {
    let cases = [
        (json!("a string"), "must be an object"),
        (json!([1, 2]), "must be an object"),
        (
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}}),
            "invalid object type",
        ),
        (json!({"metadata": {"name": "web"}}), "invalid object type"),
        (
            json!({"apiVersion": "apps/v2", "kind": "Deployment"}),
            "Incorrect version",
        ),
        (
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": "web"}),
            "metadata must be an object",
        ),
        (
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "managedFields": []}}),
            "managedFields must be nil",
        ),
    ];
    for (config, wanted) in cases {
        let err = apply(deployments(), None, &config, &manager("m"), false, T1).unwrap_err();
        assert_eq!((err.code, err.reason), (400, "BadRequest"), "{config}");
        assert!(err.message.contains(wanted), "{config}: {}", err.message);
    }
}

#[test]
fn keyed_list_items_without_a_usable_key_are_invalid() {
    let containers = |list: Value| partial(json!({"template": {"spec": {"containers": list}}}));
    let cases = [
        (
            json!([{"image": "nginx"}]),
            "spec.template.spec.containers[0].name",
            "FieldValueRequired",
        ),
        (
            json!(["nginx"]),
            "spec.template.spec.containers[0]",
            "FieldValueInvalid",
        ),
        (
            json!([{"name": {"a": 1}}]),
            "spec.template.spec.containers[0].name",
            "FieldValueInvalid",
        ),
        (
            json!([{"name": "a"}, {"name": "a"}]),
            "spec.template.spec.containers[1]",
            "FieldValueDuplicate",
        ),
    ];
    for (list, field, reason) in cases {
        let err = apply(
            deployments(),
            None,
            &containers(list.clone()),
            &manager("m"),
            false,
            T1,
        )
        .unwrap_err();
        assert_eq!((err.code, err.reason), (422, "Invalid"), "{list}");
        let causes = &err.details.as_ref().unwrap().causes;
        assert_eq!(
            (causes[0].field.as_str(), causes[0].reason),
            (field, reason),
            "{list}"
        );
        assert!(err.message.contains(field), "{}", err.message);
    }
    let duplicate_finalizers = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm", "finalizers": ["a", "a"]}});
    let cm = Manager {
        name: "m",
        api_version: "v1",
        subresource: None,
    };
    let err = apply(configmaps(), None, &duplicate_finalizers, &cm, false, T1).unwrap_err();
    assert_eq!(err.code, 422);
}

#[test]
fn odd_shapes_never_panic() {
    let live = apply_ok(None, &web(3, "nginx:1.25"), "kubectl", T1);
    let odd = [
        partial(json!("not an object")),
        partial(json!({"template": {"spec": {"containers": {"name": "x"}}}})),
        partial(json!({"template": {"spec": {"containers": []}}})),
        partial(json!({"replicas": {"nested": [1, {"a": null}]}})),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "finalizers": "x", "labels": [1]}}),
    ];
    for config in &odd {
        for current in [None, Some(&live)] {
            for force in [false, true] {
                let _ = apply(deployments(), current, config, &manager("m"), force, T2);
            }
        }
    }
    // Broken stored objects and managedFields.
    let mut broken = live.clone();
    broken["spec"]["template"]["spec"]["containers"] = json!([{"image": "no-name"}, 7]);
    broken["metadata"]["managedFields"] = json!([1, {"operation": "Apply"}, {"manager": "m",
        "operation": "Apply", "apiVersion": "apps/v1", "fieldsV1": {"k:oops": {}}}]);
    let out = apply(
        deployments(),
        Some(&broken),
        &web(3, "nginx:1.25"),
        &manager("kubectl"),
        false,
        T2,
    )
    .expect("a readable configuration applies over a broken object");
    assert_eq!(
        out["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    for new in [
        json!("x"),
        json!({"metadata": 5}),
        json!({"metadata": {"managedFields": "x"}}),
        broken.clone(),
    ] {
        let mut new = new;
        record_update(deployments(), Some(&live), &mut new, &manager("m"), T2);
        let mut created = new.clone();
        record_update(deployments(), None, &mut created, &manager("m"), T2);
    }
}

// --- from client-side to server-side apply ---

/// `web` as client-side `kubectl apply` creates it: owned by an update of
/// "kubectl-client-side-apply", its configuration in the annotation.
fn created_client_side(replicas: i64, image: &str) -> Value {
    let config = web(replicas, image);
    let mut object = config.clone();
    object["metadata"]["annotations"] = json!({LAST_APPLIED: config.to_string()});
    record_update(
        deployments(),
        None,
        &mut object,
        &manager("kubectl-client-side-apply"),
        T1,
    );
    object
}

#[test]
fn kubectl_takes_over_what_its_client_side_apply_set() {
    let live = created_client_side(2, "nginx:1.25");
    let config = web(2, "nginx:1.26");
    // kubectl's server-side apply takes over its client-side fields, as in
    // Kubernetes; they are no longer the client-side manager's.
    let upgraded = apply(
        deployments(),
        Some(&live),
        &config,
        &manager("kubectl"),
        false,
        T2,
    )
    .expect("kubectl takes over its client-side fields");
    assert_eq!(
        upgraded["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.26"
    );
    assert!(owned(&upgraded, "kubectl", "Apply").contains(&image_path()));
    assert!(!owned(&upgraded, "kubectl-client-side-apply", "Update").contains(&image_path()));
    // Only kubectl: another manager still gets the conflict.
    let err = apply(
        deployments(),
        Some(&live),
        &config,
        &manager("ops"),
        false,
        T2,
    )
    .expect_err("ops conflicts");
    assert!(conflict::is_conflict(&err));
}

#[test]
fn the_client_side_takeover_still_conflicts_where_others_wrote_since() {
    let live = scaled(&created_client_side(2, "nginx:1.25"), 5, T2);
    let err = apply(
        deployments(),
        Some(&live),
        &web(3, "nginx:1.26"),
        &manager("kubectl"),
        false,
        T3,
    )
    .expect_err("the scaler's replica count conflicts");
    let fields: Vec<&str> = err
        .details
        .as_ref()
        .unwrap()
        .causes
        .iter()
        .map(|c| c.field.as_str())
        .collect();
    assert_eq!(fields, [".spec.replicas"], "the image is kubectl's to take");
    // Without a last-applied annotation there is nothing to take over.
    let mut bare = created_client_side(2, "nginx:1.25");
    bare["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    let err = apply(
        deployments(),
        Some(&bare),
        &web(2, "nginx:1.26"),
        &manager("kubectl"),
        false,
        T3,
    )
    .expect_err("a conflict with kubectl-client-side-apply");
    assert!(conflict::is_conflict(&err));
}
