//! The real kubectl (v1.32) against `skiff up`, reached only through the
//! kubeconfig it writes: `create -f` and `apply -f` with validation on (a
//! Deployment, a Pod, a ConfigMap, a multi-document file with its own
//! namespace), `get` as JSON, YAML, jsonpath, across namespaces, by label
//! and in pages of one, `get -w` seeing changes made while it runs,
//! `delete`, and the errors for a missing and an existing object. Without
//! kubectl the tests are skipped (under CI=true they fail).

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use serde_json::Value;
use skiff_tests::api_server::{ApiServer, Backend};
use skiff_tests::kubectl::{kubectl_or_skip, Kubectl};

const WATCH_TIMEOUT: Duration = Duration::from_secs(15);

const DEPLOYMENT: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {suite: kubectl}
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.27
";

const POD: &str = "\
apiVersion: v1
kind: Pod
metadata:
  name: solo
  labels: {app: x}
spec:
  containers:
  - name: main
    image: busybox:1.36
";

const CONFIG_MAP: &str = "\
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  labels: {tier: conf}
data:
  mode: fast
";

/// A namespace and three objects in it, one document each.
const MULTI: &str = "\
apiVersion: v1
kind: Namespace
metadata:
  name: shop
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: shop
  labels: {tier: conf}
data:
  mode: slow
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
  namespace: shop
  labels: {suite: kubectl}
spec:
  replicas: 1
  selector:
    matchLabels: {app: api}
  template:
    metadata:
      labels: {app: api}
    spec:
      containers:
      - name: api
        image: example/api:1.0
---
apiVersion: v1
kind: Pod
metadata:
  name: worker
  namespace: shop
  labels: {app: x}
spec:
  containers:
  - name: main
    image: busybox:1.36
";

async fn session(test: &str, backend: Backend) -> Result<Option<(ApiServer, Kubectl)>> {
    let Some(binary) = kubectl_or_skip(test) else {
        return Ok(None);
    };
    let Some(server) = ApiServer::start_on(backend, test).await? else {
        return Ok(None);
    };
    let kubectl = Kubectl::new(binary, &server.kubeconfig())?;
    Ok(Some((server, kubectl)))
}

async fn create_and_apply_then_get_in_every_form(backend: Backend) -> Result<()> {
    let Some((_server, kubectl)) =
        session("create_and_apply_then_get_in_every_form", backend).await?
    else {
        return Ok(());
    };
    kubectl.manifest("deploy.yaml", DEPLOYMENT)?;
    kubectl.manifest("pod.yaml", POD)?;
    kubectl.manifest("cm.yaml", CONFIG_MAP)?;
    kubectl.manifest("multi.yaml", MULTI)?;

    for (file, printed) in [
        ("deploy.yaml", "deployment.apps/web created\n"),
        ("pod.yaml", "pod/solo created\n"),
        ("cm.yaml", "configmap/settings created\n"),
    ] {
        assert_eq!(
            kubectl.ok(&["create", "-f", file])?,
            printed,
            "create -f {file}"
        );
    }
    assert_eq!(
        kubectl.ok(&["apply", "-f", "multi.yaml"])?,
        "namespace/shop created\nconfigmap/settings created\ndeployment.apps/api created\npod/worker created\n",
        "apply -f of a new multi-document file creates each object, the namespace first"
    );
    assert_eq!(
        kubectl.ok(&["apply", "-f", "multi.yaml"])?,
        "namespace/shop unchanged\nconfigmap/settings unchanged\ndeployment.apps/api unchanged\npod/worker unchanged\n",
        "apply -f again finds the objects as it left them"
    );
    let applied = kubectl.ok(&[
        "get",
        "cm",
        "settings",
        "-n",
        "shop",
        "-o",
        r"jsonpath={.metadata.annotations.kubectl\.kubernetes\.io/last-applied-configuration}",
    ])?;
    let applied: Value = serde_json::from_str(&applied)
        .with_context(|| format!("last-applied-configuration: {applied}"))?;
    assert_eq!(applied["data"]["mode"], "slow");
    assert_eq!(applied["metadata"]["namespace"], "shop");

    get_as_json(&kubectl)?;
    get_as_yaml(&kubectl)?;
    get_with_jsonpath_across_namespaces_and_labels(&kubectl)?;
    get_in_pages_of_one(&kubectl)?;
    Ok(())
}

fn get_as_json(kubectl: &Kubectl) -> Result<()> {
    let text = kubectl.ok(&["get", "deployment", "web", "-o", "json"])?;
    let web: Value = serde_json::from_str(&text)?;
    assert_eq!(web["kind"], "Deployment");
    assert_eq!(web["apiVersion"], "apps/v1");
    assert_eq!(web["metadata"]["name"], "web");
    assert_eq!(web["metadata"]["namespace"], "default");
    assert_eq!(web["metadata"]["generation"], 1);
    assert_eq!(web["metadata"]["labels"]["suite"], "kubectl");
    assert_eq!(web["spec"]["replicas"], 2);
    assert_eq!(
        web["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.27"
    );
    let uid = web["metadata"]["uid"].as_str().unwrap_or_default();
    assert_eq!(uid.len(), 36, "a UUID: {uid:?}");
    let rv = web["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default();
    ensure!(
        rv.parse::<i64>().is_ok_and(|r| r > 0),
        "resourceVersion {rv:?}"
    );

    let list: Value =
        serde_json::from_str(&kubectl.ok(&["get", "pods", "-n", "shop", "-o", "json"])?)?;
    assert_eq!(list["kind"], "List", "kubectl wraps lists as List");
    let names: Vec<&str> = items(&list)
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(names, ["worker"]);
    assert_eq!(items(&list)[0]["kind"], "Pod");
    assert_eq!(items(&list)[0]["status"]["phase"], "Pending");
    Ok(())
}

fn get_as_yaml(kubectl: &Kubectl) -> Result<()> {
    let json: Value =
        serde_json::from_str(&kubectl.ok(&["get", "configmap", "settings", "-o", "json"])?)?;
    let meta = &json["metadata"];
    let expected = format!(
        "apiVersion: v1
data:
  mode: fast
kind: ConfigMap
metadata:
  creationTimestamp: \"{}\"
  labels:
    tier: conf
  name: settings
  namespace: default
  resourceVersion: \"{}\"
  uid: {}
",
        meta["creationTimestamp"].as_str().unwrap_or_default(),
        meta["resourceVersion"].as_str().unwrap_or_default(),
        meta["uid"].as_str().unwrap_or_default()
    );
    assert_eq!(
        kubectl.ok(&["get", "configmap", "settings", "-o", "yaml"])?,
        expected
    );
    let created = meta["creationTimestamp"].as_str().unwrap_or_default();
    ensure!(
        created.len() == 20 && created.ends_with('Z'),
        "creationTimestamp is RFC 3339 in UTC: {created:?}"
    );
    Ok(())
}

fn get_with_jsonpath_across_namespaces_and_labels(kubectl: &Kubectl) -> Result<()> {
    let each = r#"jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {end}"#;
    assert_eq!(
        kubectl.ok(&["get", "pods", "-A", "-l", "app=x", "-o", each])?,
        "default/solo shop/worker ",
        "-A lists every namespace"
    );
    assert_eq!(
        kubectl.ok(&["get", "pods", "-l", "app=x", "-o", each])?,
        "default/solo ",
        "without -A only the kubeconfig's namespace"
    );
    assert_eq!(
        kubectl.ok(&[
            "get",
            "deployments",
            "-A",
            "-l",
            "suite=kubectl",
            "-o",
            each
        ])?,
        "default/web shop/api "
    );
    assert_eq!(
        kubectl.ok(&[
            "get",
            "configmaps",
            "-A",
            "-l",
            "tier in (conf),tier!=other",
            "-o",
            each
        ])?,
        "default/settings shop/settings "
    );
    assert_eq!(
        kubectl.ok(&["get", "pods", "-A", "-l", "app=nothing", "-o", each])?,
        "",
        "a selector nothing matches"
    );
    assert_eq!(
        kubectl.ok(&[
            "get",
            "configmap",
            "settings",
            "-n",
            "shop",
            "-o",
            "jsonpath={.data.mode}"
        ])?,
        "slow"
    );
    assert_eq!(
        kubectl.ok(&["get", "pods", "-n", "shop", "-o", "name"])?,
        "pod/worker\n"
    );
    Ok(())
}

fn get_in_pages_of_one(kubectl: &Kubectl) -> Result<()> {
    let documents: Vec<String> = (1..=5)
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: chunk-{i}\n  labels: {{batch: chunk}}\ndata:\n  n: \"{i}\"\n"
            )
        })
        .collect();
    kubectl.manifest("chunks.yaml", &documents.join("---\n"))?;
    kubectl.ok(&["create", "-f", "chunks.yaml"])?;
    let output = kubectl.run(&[
        "get",
        "configmaps",
        "-l",
        "batch=chunk",
        "--chunk-size=1",
        "-o",
        "name",
        "-v=6",
    ])?;
    assert_eq!(output.code, Some(0), "stderr:\n{}", output.stderr);
    assert_eq!(
        output.stdout,
        "configmap/chunk-1\nconfigmap/chunk-2\nconfigmap/chunk-3\nconfigmap/chunk-4\nconfigmap/chunk-5\n"
    );
    let pages: Vec<&str> = output
        .stderr
        .lines()
        // `GET https://…` up to kubectl 1.32, `verb="GET" url="https://…"` after.
        .filter(|l| {
            (l.contains("GET http") || l.contains(r#"verb="GET""#)) && l.contains("/configmaps?")
        })
        .collect();
    ensure!(
        pages.len() >= 5 && pages.iter().all(|l| l.contains("limit=1")),
        "kubectl fetched one object per request: {pages:#?}"
    );
    assert_eq!(
        pages.iter().filter(|l| l.contains("continue=")).count(),
        pages.len() - 1,
        "every request after the first continues the list: {pages:#?}"
    );
    Ok(())
}

fn items(list: &Value) -> &[Value] {
    list["items"].as_array().map(Vec::as_slice).unwrap_or(&[])
}

async fn get_watch_sees_changes_made_meanwhile(backend: Backend) -> Result<()> {
    let Some((server, kubectl)) = session("get_watch_sees_changes_made_meanwhile", backend).await?
    else {
        return Ok(());
    };
    let pod = |name: &str, step: &str| {
        format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","labels":{{"app":"watch","step":"{step}"}}}},"spec":{{"containers":[{{"name":"main","image":"busybox:1.36"}}]}}}}"#
        )
    };
    kubectl.manifest("w1.json", &pod("w1", "one"))?;
    kubectl.manifest("w2.json", &pod("w2", "one"))?;
    kubectl.manifest(
        "other.json",
        &pod("other", "one").replace("watch", "elsewhere"),
    )?;
    let rv_of = |out: String| -> Result<i64> {
        out.trim()
            .parse::<i64>()
            .with_context(|| format!("a resourceVersion: {out:?}"))
    };
    let rv = "jsonpath={.metadata.resourceVersion}";
    let created = rv_of(kubectl.ok(&["create", "-f", "w1.json", "-o", rv])?)?;
    // A replacement is the object as stored with one change: a pod's spec
    // as first written lacks what admission added (its service account's
    // token volume), and Kubernetes refuses to change a pod's spec.
    let mut two: Value = serde_json::from_str(&kubectl.ok(&["get", "pod", "w1", "-o", "json"])?)?;
    two["metadata"]["labels"]["step"] = "two".into();
    kubectl.manifest("w1-two.json", &two.to_string())?;

    // On a cluster the watch goes to another member than the writes.
    let watcher = kubectl.with_kubeconfig(&server.watch_kubeconfig())?;
    let mut watch = watcher.spawn(&[
        "get",
        "pods",
        "-l",
        "app=watch",
        "-w",
        "--output-watch-events",
        "-o",
        r#"jsonpath={.type} {.object.metadata.name} {.object.metadata.labels.step} {.object.metadata.resourceVersion}{"\n"}"#,
    ])?;
    // The list comes first, as an ADDED.
    let lines = watch.wait_for_lines(1, WATCH_TIMEOUT).await?;
    assert_eq!(lines, [format!("ADDED w1 one {created}")]);

    let replaced = rv_of(kubectl.ok(&["replace", "-f", "w1-two.json", "-o", rv])?)?;
    kubectl.ok(&["create", "-f", "other.json"])?;
    let added = rv_of(kubectl.ok(&["create", "-f", "w2.json", "-o", rv])?)?;
    assert_eq!(
        kubectl.ok(&["delete", "pod", "w1"])?,
        "pod \"w1\" deleted\n"
    );

    let lines = watch.wait_for_lines(4, WATCH_TIMEOUT).await?;
    assert_eq!(
        lines[..3],
        [
            format!("ADDED w1 one {created}"),
            format!("MODIFIED w1 two {replaced}"),
            format!("ADDED w2 one {added}"),
        ],
        "stderr:\n{}",
        watch.stderr()
    );
    let deleted: Vec<&str> = lines[3].split(' ').collect();
    assert_eq!(deleted[..3], ["DELETED", "w1", "two"], "{lines:?}");
    ensure!(
        deleted[3].parse::<i64>().is_ok_and(|r| r > added),
        "the deletion has the newest resourceVersion: {lines:?}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(watch.lines().len(), 4, "nothing else: {:?}", watch.lines());
    ensure!(watch.running()?, "get -w still watches");
    Ok(())
}

async fn delete_and_the_errors_for_missing_and_existing_objects(backend: Backend) -> Result<()> {
    let Some((_server, kubectl)) = session(
        "delete_and_the_errors_for_missing_and_existing_objects",
        backend,
    )
    .await?
    else {
        return Ok(());
    };
    kubectl.manifest("pod.yaml", POD)?;
    kubectl.manifest("both.yaml", &format!("{CONFIG_MAP}---\n{DEPLOYMENT}"))?;
    assert_eq!(
        kubectl.ok(&["create", "-f", "pod.yaml"])?,
        "pod/solo created\n"
    );
    assert_eq!(
        kubectl.fails(&["create", "-f", "pod.yaml"])?,
        "Error from server (AlreadyExists): error when creating \"pod.yaml\": pods \"solo\" already exists\n"
    );
    assert_eq!(
        kubectl.fails(&["get", "pod", "missing"])?,
        "Error from server (NotFound): pods \"missing\" not found\n"
    );
    assert_eq!(
        kubectl.fails(&["delete", "pod", "missing"])?,
        "Error from server (NotFound): pods \"missing\" not found\n"
    );
    assert_eq!(
        kubectl.fails(&["get", "deployment", "missing", "-n", "kube-system"])?,
        "Error from server (NotFound): deployments.apps \"missing\" not found\n"
    );

    assert_eq!(
        kubectl.ok(&["delete", "pod", "solo"])?,
        "pod \"solo\" deleted\n"
    );
    assert_eq!(
        kubectl.fails(&["get", "pod", "solo"])?,
        "Error from server (NotFound): pods \"solo\" not found\n"
    );
    assert_eq!(
        kubectl.ok(&["get", "pods", "-o", "name"])?,
        "",
        "the pod is gone from the list too"
    );

    assert_eq!(
        kubectl.ok(&["create", "-f", "both.yaml"])?,
        "configmap/settings created\ndeployment.apps/web created\n"
    );
    assert_eq!(
        kubectl.ok(&["delete", "-f", "both.yaml"])?,
        "configmap \"settings\" deleted\ndeployment.apps \"web\" deleted\n"
    );
    assert_eq!(
        kubectl.fails(&["get", "-f", "both.yaml"])?,
        "Error from server (NotFound): configmaps \"settings\" not found\n\
         Error from server (NotFound): deployments.apps \"web\" not found\n"
    );
    assert_eq!(
        kubectl.ok(&["delete", "pod", "solo", "--ignore-not-found"])?,
        ""
    );
    Ok(())
}

skiff_tests::on_every_backend!(
    create_and_apply_then_get_in_every_form,
    get_watch_sees_changes_made_meanwhile,
    delete_and_the_errors_for_missing_and_existing_objects
);
