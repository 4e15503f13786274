//! The service, storage, quota and disruption controllers of `skiff up`
//! with a real kubelet, driven with the real kubectl: a Service's
//! Endpoints and EndpointSlices follow its pods' scale and readiness; a
//! claim of the default class is provisioned, bound and written by a pod;
//! a quota's usage is recounted and goes down after a delete; a
//! PodDisruptionBudget reports its allowed disruptions and eviction (and
//! drain) is refused while none is allowed.

use std::path::PathBuf;

use anyhow::{ensure, Context, Result};
use skiff_tests::kubectl::Kubectl;
use skiff_tests::local_node::{
    apply, jsonpath, wait_for, wait_until, LocalNode, NODE, RELAXED_EVICTION,
};

async fn node(test: &str) -> Result<Option<LocalNode>> {
    LocalNode::start_with(test, RELAXED_EVICTION, &["--controller-manager=true"]).await
}

/// A Deployment whose pods are ready while the file `ready` exists in
/// their root (they create it when they start), serving port `http` 8080.
fn deployment(name: &str, replicas: u32) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: app
        image: busybox
        command: [sh, -c, \"touch ready; exec sleep 3600\"]
        ports: [{{name: http, containerPort: 8080}}]
        readinessProbe:
          exec: {{command: [cat, ready]}}
          periodSeconds: 1
          failureThreshold: 1
"
    )
}

const SERVICE: &str = "apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
";

/// `{.items[*]...}` of the Service's EndpointSlices.
fn slices(kubectl: &Kubectl, path: &str) -> Result<String> {
    kubectl.ok(&[
        "get",
        "endpointslices",
        "-l",
        "kubernetes.io/service-name=web",
        "-o",
        &format!("jsonpath={path}"),
    ])
}

fn count(text: &str) -> usize {
    text.split_whitespace().count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_and_slices_follow_the_pods_of_a_service() -> Result<()> {
    let Some(node) = node("endpoints_and_slices_follow_the_pods_of_a_service").await? else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    apply(kubectl, "web.yaml", &deployment("web", 2))?;
    apply(kubectl, "service.yaml", SERVICE)?;
    kubectl.ok(&["rollout", "status", "deployment/web", "--timeout=90s"])?;
    let ready = "{.subsets[*].addresses[*].targetRef.name}";
    wait_until("2 ready addresses", || {
        Ok(count(&jsonpath(kubectl, "endpoints", "web", ready).unwrap_or_default()) == 2)
    })
    .await?;
    let ports = jsonpath(kubectl, "endpoints", "web", "{.subsets[0].ports[0].port}")?;
    ensure!(
        ports == "8080",
        "targetPort http resolves to 8080, got {ports}"
    );
    let ip = jsonpath(kubectl, "endpoints", "web", "{.subsets[0].addresses[0].ip}")?;
    ensure!(ip == "127.0.0.1", "pods share the host's IP, got {ip}");
    let node_name = jsonpath(
        kubectl,
        "endpoints",
        "web",
        "{.subsets[0].addresses[0].nodeName}",
    )?;
    ensure!(node_name == NODE);
    let table = kubectl.ok(&["get", "endpoints", "web"])?;
    ensure!(table.contains("127.0.0.1:8080,127.0.0.1:8080"), "{table}");
    let annotations = jsonpath(kubectl, "endpoints", "web", "{.metadata.annotations}")?;
    ensure!(
        annotations.contains("endpoints.kubernetes.io/last-change-trigger-time"),
        "{annotations}"
    );

    wait_until("an EndpointSlice with 2 ready endpoints", || {
        Ok(slices(kubectl, "{.items[*].endpoints[*].conditions.ready}")? == "true true")
    })
    .await?;
    let managed = slices(
        kubectl,
        "{.items[0].metadata.labels.endpointslice\\.kubernetes\\.io/managed-by}",
    )?;
    ensure!(managed == "endpointslice-controller.k8s.io", "{managed}");
    let owner = slices(
        kubectl,
        "{.items[0].metadata.ownerReferences[0].kind}/{.items[0].metadata.ownerReferences[0].name}",
    )?;
    ensure!(owner == "Service/web", "{owner}");
    let slice_table = kubectl.ok(&["get", "endpointslices"])?;
    ensure!(
        slice_table.contains("IPv4") && slice_table.contains("8080"),
        "{slice_table}"
    );

    // Scaling to 3 adds one.
    kubectl.ok(&["scale", "deployment/web", "--replicas=3"])?;
    wait_until("3 ready addresses", || {
        Ok(count(&jsonpath(kubectl, "endpoints", "web", ready)?) == 3)
    })
    .await?;
    wait_until("3 ready endpoints in the slice", || {
        Ok(slices(kubectl, "{.items[*].endpoints[*].conditions.ready}")? == "true true true")
    })
    .await?;

    // A pod that stops being ready moves to notReadyAddresses.
    let pod = kubectl.ok(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ])?;
    let uid = jsonpath(kubectl, "pod", &pod, "{.metadata.uid}")?;
    let ready_file: PathBuf = node
        .server
        .data_dir()
        .join("kubelet/volumes")
        .join(&uid)
        .join("root/ready");
    std::fs::remove_file(&ready_file)
        .with_context(|| format!("removing {}", ready_file.display()))?;
    let not_ready = "{.subsets[*].notReadyAddresses[*].targetRef.name}";
    wait_until("the pod in notReadyAddresses", || {
        Ok(jsonpath(kubectl, "endpoints", "web", not_ready)? == pod)
    })
    .await?;
    ensure!(count(&jsonpath(kubectl, "endpoints", "web", ready)?) == 2);
    wait_until("the slice to show it not ready", || {
        let pods = slices(
            kubectl,
            "{range .items[*].endpoints[*]}{.targetRef.name}={.conditions.ready}{\"\\n\"}{end}",
        )?;
        Ok(pods.lines().any(|l| l == format!("{pod}=false")))
    })
    .await?;

    // The Service goes: its Endpoints and slices go with it.
    kubectl.ok(&["delete", "service", "web"])?;
    wait_until("the Endpoints and slices to go", || {
        let endpoints = kubectl.run(&["get", "endpoints", "web"])?;
        Ok(endpoints.code != Some(0) && slices(kubectl, "{.items[*].metadata.name}")?.is_empty())
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_is_provisioned_bound_and_written_by_a_pod() -> Result<()> {
    let Some(node) = node("a_claim_is_provisioned_bound_and_written_by_a_pod").await? else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    wait_until("the default StorageClass", || {
        Ok(kubectl
            .ok(&["get", "storageclass"])
            .unwrap_or_default()
            .contains("standard (default)"))
    })
    .await?;
    let claim = "apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
";
    let pod = "apiVersion: v1
kind: Pod
metadata:
  name: writer
spec:
  restartPolicy: Never
  containers:
  - name: app
    image: busybox
    command: [sh, -c, 'echo hi > \"$SKIFF_VOLUME_DATA/f\"']
    volumeMounts: [{name: store, mountPath: /data}]
  volumes:
  - name: store
    persistentVolumeClaim: {claimName: data}
";
    apply(kubectl, "claim.yaml", claim)?;
    // DefaultStorageClass admission names the default class.
    let named = jsonpath(kubectl, "pvc", "data", "{.spec.storageClassName}")?;
    ensure!(named == "standard", "storageClassName {named:?}");
    wait_for(kubectl, "pvc", "data", "{.status.phase}", "Bound").await?;
    let volume = jsonpath(kubectl, "pvc", "data", "{.spec.volumeName}")?;
    let uid = jsonpath(kubectl, "pvc", "data", "{.metadata.uid}")?;
    ensure!(volume == format!("pvc-{uid}"), "{volume}");
    wait_for(kubectl, "pv", &volume, "{.status.phase}", "Bound").await?;
    let class = jsonpath(kubectl, "pv", &volume, "{.spec.storageClassName}")?;
    ensure!(class == "standard", "{class}");
    let path = PathBuf::from(jsonpath(kubectl, "pv", &volume, "{.spec.hostPath.path}")?);
    let base = std::path::absolute(node.server.data_dir().join("volumes"))?;
    ensure!(
        path == base.join(&volume),
        "{} under {}",
        path.display(),
        base.display()
    );
    let annotations = jsonpath(kubectl, "pvc", "data", "{.metadata.annotations}")?;
    ensure!(
        annotations.contains("pv.kubernetes.io/bind-completed"),
        "{annotations}"
    );

    apply(kubectl, "pod.yaml", pod)?;
    wait_for(kubectl, "pod", "writer", "{.status.phase}", "Succeeded").await?;
    let written = std::fs::read_to_string(path.join("f")).context("the file in the volume")?;
    ensure!(written == "hi\n", "{written:?}");

    // The claim goes: its Delete-policy volume and directory go too.
    kubectl.ok(&["delete", "pod", "writer"])?;
    kubectl.ok(&["delete", "pvc", "data"])?;
    wait_until("the volume to be reclaimed", || {
        Ok(kubectl.run(&["get", "pv", &volume])?.code != Some(0) && !path.exists())
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_not_bound_yet_holds_its_pod_back() -> Result<()> {
    let Some(node) = node("a_claim_not_bound_yet_holds_its_pod_back").await? else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    // A class no provisioner serves: the claim stays Pending.
    let manifests = "apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: later
spec:
  storageClassName: manual
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: Pod
metadata:
  name: waiting
spec:
  containers:
  - name: app
    image: busybox
    command: [sh, -c, 'echo ok > \"$SKIFF_VOLUME_DATA/f\"; exec sleep 3600']
    volumeMounts: [{name: store, mountPath: /data}]
  volumes:
  - name: store
    persistentVolumeClaim: {claimName: later}
";
    apply(kubectl, "waiting.yaml", manifests)?;
    let message = "{.status.containerStatuses[0].state.waiting.message}";
    wait_until("the pod to wait for its claim", || {
        Ok(jsonpath(kubectl, "pod", "waiting", message)?
            .contains("PVC default/later has non-bound phase (\"Pending\")"))
    })
    .await?;
    // A matching volume appears: the claim binds and the pod starts.
    let dir = tempfile::tempdir()?;
    let volume = format!(
        "apiVersion: v1
kind: PersistentVolume
metadata:
  name: manual-1
spec:
  storageClassName: manual
  capacity: {{storage: 2Gi}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {{path: {}}}
",
        dir.path().display()
    );
    apply(kubectl, "volume.yaml", &volume)?;
    wait_for(kubectl, "pvc", "later", "{.status.phase}", "Bound").await?;
    wait_for(kubectl, "pod", "waiting", "{.status.phase}", "Running").await?;
    // Waiting for the claim was no restart.
    let restarts = jsonpath(
        kubectl,
        "pod",
        "waiting",
        "{.status.containerStatuses[0].restartCount}",
    )?;
    ensure!(restarts == "0", "restartCount {restarts}");
    wait_until("the file in the volume", || {
        Ok(dir.path().join("f").exists())
    })
    .await?;
    // Retain: the claim's deletion releases the volume and keeps it.
    kubectl.ok(&["delete", "pod", "waiting", "--wait=false"])?;
    kubectl.ok(&["delete", "pvc", "later", "--wait=false"])?;
    wait_for(kubectl, "pv", "manual-1", "{.status.phase}", "Released").await?;
    ensure!(dir.path().join("f").exists());
    Ok(())
}

/// The `used` column of `kubectl describe quota` for `resource`.
fn described_used(kubectl: &Kubectl, resource: &str) -> Result<String> {
    let text = kubectl.ok(&["describe", "quota", "q", "-n", "quota"])?;
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(resource))
        .with_context(|| format!("no {resource} line in\n{text}"))?;
    Ok(line
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_usage_is_recounted_and_released() -> Result<()> {
    let Some(node) = node("quota_usage_is_recounted_and_released").await? else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    // `kubectl create namespace|quota|configmap` post protobuf, which skiff
    // does not read (415); the same objects go in as a manifest.
    apply(
        kubectl,
        "quota.yaml",
        "apiVersion: v1
kind: Namespace
metadata: {name: quota}
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: q, namespace: quota}
spec:
  hard: {configmaps: \"5\", services: \"3\", pods: \"4\"}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: a, namespace: quota}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: b, namespace: quota}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: c, namespace: quota}
",
    )?;
    // The root CA publisher adds `kube-root-ca.crt` to every namespace; the
    // count is read once it has, so that it cannot move under the test.
    wait_until("the root CA configmap in the namespace", || {
        Ok(kubectl
            .ok(&["get", "configmap", "kube-root-ca.crt", "-n", "quota"])
            .is_ok())
    })
    .await?;
    wait_until("the four configmaps counted", || {
        Ok(described_used(kubectl, "configmaps")? == "4")
    })
    .await?;
    let base = 4;
    // Usage written wrongly is recounted from what exists.
    kubectl.ok(&[
        "patch",
        "quota",
        "q",
        "-n",
        "quota",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"used":{"configmaps":"0","services":"2"}}}"#,
    ])?;
    wait_until("the controller to recount", || {
        Ok(described_used(kubectl, "configmaps")? == base.to_string()
            && described_used(kubectl, "services")? == "0")
    })
    .await?;
    kubectl.ok(&["delete", "configmap", "a", "-n", "quota"])?;
    wait_until("usage to go down", || {
        Ok(described_used(kubectl, "configmaps")? == (base - 1).to_string())
    })
    .await?;
    let hard = kubectl.ok(&[
        "get",
        "quota",
        "q",
        "-n",
        "quota",
        "-o",
        "jsonpath={.status.hard.pods}",
    ])?;
    ensure!(hard == "4", "status.hard mirrors spec.hard, got {hard}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_reports_allowed_disruptions_and_eviction_respects_it() -> Result<()> {
    let Some(node) = node("a_budget_reports_allowed_disruptions_and_eviction_respects_it").await?
    else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    apply(kubectl, "db.yaml", &deployment("db", 2))?;
    kubectl.ok(&["rollout", "status", "deployment/db", "--timeout=90s"])?;
    let budget = |min: u32| {
        format!(
            "apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: db
spec:
  minAvailable: {min}
  selector: {{matchLabels: {{app: db}}}}
"
        )
    };
    apply(kubectl, "pdb.yaml", &budget(2))?;
    wait_for(kubectl, "pdb", "db", "{.status.currentHealthy}", "2").await?;
    let status = "{.status.expectedPods}/{.status.desiredHealthy}/{.status.disruptionsAllowed}";
    ensure!(jsonpath(kubectl, "pdb", "db", status)? == "2/2/0");
    let condition = jsonpath(
        kubectl,
        "pdb",
        "db",
        "{.status.conditions[?(@.type==\"DisruptionAllowed\")].reason}",
    )?;
    ensure!(condition == "InsufficientPods", "{condition}");
    let table = kubectl.ok(&["get", "pdb", "db"])?;
    ensure!(table.contains("ALLOWED DISRUPTIONS"), "{table}");
    let row = table
        .lines()
        .find(|l| l.starts_with("db"))
        .unwrap_or_default()
        .to_string();
    ensure!(row.split_whitespace().nth(3) == Some("0"), "{table}");

    // drain is refused: every eviction gets 429 until it times out.
    let drained = kubectl.run(&[
        "drain",
        NODE,
        "--pod-selector=app=db",
        "--ignore-daemonsets",
        "--timeout=5s",
    ])?;
    ensure!(drained.code != Some(0), "drain should fail");
    ensure!(
        drained
            .stderr
            .contains("Cannot evict pod as it would violate the pod's disruption budget"),
        "{}",
        drained.stderr
    );
    kubectl.ok(&["uncordon", NODE])?;

    // One disruption allowed: one eviction spends it.
    apply(kubectl, "pdb.yaml", &budget(1))?;
    wait_for(kubectl, "pdb", "db", "{.status.disruptionsAllowed}", "1").await?;
    let pods = kubectl.ok(&[
        "get",
        "pods",
        "-l",
        "app=db",
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ])?;
    let first = pods
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    kubectl.manifest(
        "eviction.json",
        &format!(r#"{{"apiVersion":"policy/v1","kind":"Eviction","metadata":{{"name":"{first}","namespace":"default"}}}}"#),
    )?;
    kubectl.ok(&[
        "create",
        "--raw",
        &format!("/api/v1/namespaces/default/pods/{first}/eviction"),
        "-f",
        "eviction.json",
    ])?;
    // The Deployment replaces the pod and the budget allows one again.
    kubectl.ok(&["rollout", "status", "deployment/db", "--timeout=90s"])?;
    wait_for(kubectl, "pdb", "db", "{.status.disruptionsAllowed}", "1").await?;
    Ok(())
}
