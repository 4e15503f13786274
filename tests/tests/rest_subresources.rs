//! Subresources over HTTP against `skiff up`, as kubectl and a scheduler
//! use them: `scale` (GET, merge PATCH, PUT with a stale resourceVersion),
//! `pods/binding` (once; a second is a 409), `pods/eviction` (429 while a
//! PodDisruptionBudget would be violated, 201 and the pod gone after), and
//! `status` (a spec change through it is ignored).

use anyhow::{ensure, Result};
use serde_json::{json, Value};
use skiff_tests::api_server::ApiServer;
use skiff_tests::kube_http::KubeHttp;

const PODS: &str = "/api/v1/namespaces/default/pods";
const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";

async fn ok(
    http: &KubeHttp,
    method: &str,
    path: &str,
    content_type: &str,
    body: &Value,
    want: u16,
) -> Result<Value> {
    let bytes = serde_json::to_vec(body)?;
    let reply = http
        .request(method, path, Some(content_type), Some(&bytes))
        .await?;
    ensure!(
        reply.status == want,
        "{method} {path}: {} {}",
        reply.status,
        reply.text()
    );
    reply.json()
}

fn pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "web"}},
           "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_binding_eviction_and_status() -> Result<()> {
    let server = ApiServer::start().await?;
    let http = server.http()?;
    let json_type = "application/json";

    // scale
    let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "api"}},
                 "template": {"metadata": {"labels": {"app": "api"}},
                              "spec": {"containers": [{"name": "api", "image": "example/api:1"}]}}}});
    ok(&http, "POST", DEPLOYS, json_type, &deploy, 201).await?;
    let scale = http.get_json(&format!("{DEPLOYS}/api/scale")).await?;
    assert_eq!(
        (scale["kind"].as_str(), scale["apiVersion"].as_str()),
        (Some("Scale"), Some("autoscaling/v1"))
    );
    assert_eq!(
        (
            scale["spec"]["replicas"].as_i64(),
            scale["status"]["selector"].as_str()
        ),
        (Some(2), Some("app=api"))
    );
    let scaled = ok(
        &http,
        "PATCH",
        &format!("{DEPLOYS}/api/scale"),
        "application/merge-patch+json",
        &json!({"spec": {"replicas": 5}}),
        200,
    )
    .await?;
    assert_eq!(scaled["spec"]["replicas"], 5);
    let object = http.get_json(&format!("{DEPLOYS}/api")).await?;
    assert_eq!(
        (
            object["spec"]["replicas"].as_i64(),
            object["metadata"]["generation"].as_i64()
        ),
        (Some(5), Some(2))
    );
    let mut stale = scale.clone();
    stale["spec"]["replicas"] = json!(1);
    ok(
        &http,
        "PUT",
        &format!("{DEPLOYS}/api/scale"),
        json_type,
        &stale,
        409,
    )
    .await?;
    assert_eq!(
        http.get_json(&format!("{DEPLOYS}/api")).await?["spec"]["replicas"],
        5,
        "a refused scale changes nothing"
    );
    let no_scale = http.get(&format!("{PODS}/x/scale")).await?;
    assert_eq!(no_scale.status, 404, "pods have no scale");

    // binding, once
    let created = ok(&http, "POST", PODS, json_type, &pod("web"), 201).await?;
    let binding = |node: &str| {
        json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "web"},
                                       "target": {"kind": "Node", "name": node}})
    };
    let bound = ok(
        &http,
        "POST",
        &format!("{PODS}/web/binding"),
        json_type,
        &binding("n1"),
        201,
    )
    .await?;
    assert_eq!(bound["status"], "Success");
    let again = ok(
        &http,
        "POST",
        &format!("{PODS}/web/binding"),
        json_type,
        &binding("n2"),
        409,
    )
    .await?;
    assert_eq!(again["reason"], "Conflict");
    let web = http.get_json(&format!("{PODS}/web")).await?;
    assert_eq!(web["spec"]["nodeName"], "n1");
    let scheduled: Vec<&Value> = web["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["type"] == "PodScheduled")
        .collect();
    assert_eq!(scheduled.len(), 1, "{web}");
    assert_eq!(
        scheduled[0]["status"], "True",
        "the binding marks the pod scheduled"
    );
    // As with kube-apiserver, the binding is not a field manager of the
    // pod: nodeName and PodScheduled belong to no one.
    assert_eq!(
        web["metadata"]["managedFields"], created["metadata"]["managedFields"],
        "the binding leaves managedFields as they were"
    );

    // status: the spec does not change through it
    let mut running = http.get_json(&format!("{PODS}/web")).await?;
    running["status"] =
        json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]});
    running["spec"]["containers"][0]["image"] = json!("busybox:9");
    ok(
        &http,
        "PUT",
        &format!("{PODS}/web/status"),
        json_type,
        &running,
        200,
    )
    .await?;
    let now = http.get_json(&format!("{PODS}/web")).await?;
    assert_eq!(now["status"]["phase"], "Running");
    assert_eq!(now["spec"]["containers"][0]["image"], "busybox:1.36");

    // eviction against a budget
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web-pdb"},
                     "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}});
    ok(
        &http,
        "POST",
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
        json_type,
        &pdb,
        201,
    )
    .await?;
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
                          "metadata": {"name": "web", "namespace": "default"}, "deleteOptions": {"gracePeriodSeconds": 0}});
    let refused = ok(
        &http,
        "POST",
        &format!("{PODS}/web/eviction"),
        json_type,
        &eviction,
        429,
    )
    .await?;
    assert_eq!(refused["reason"], "TooManyRequests");
    assert_eq!(
        refused["details"]["causes"][0]["reason"],
        "DisruptionBudget"
    );
    assert_eq!(
        http.get(&format!("{PODS}/web")).await?.status,
        200,
        "the pod stays"
    );
    let reply = http
        .delete("/apis/policy/v1/namespaces/default/poddisruptionbudgets/web-pdb")
        .await?;
    ensure!(reply.status == 200, "delete pdb: {}", reply.text());
    let evicted = ok(
        &http,
        "POST",
        &format!("{PODS}/web/eviction"),
        json_type,
        &eviction,
        201,
    )
    .await?;
    assert_eq!(evicted["status"], "Success");
    assert_eq!(
        http.get(&format!("{PODS}/web")).await?.status,
        404,
        "the pod is gone"
    );
    Ok(())
}
