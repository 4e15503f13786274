//! The day-to-day kubectl workflow against `skiff up`: apply that creates,
//! leaves unchanged and configures; patch of every type, and "(no change)"
//! for a patch that changes nothing; scale; label and annotate; the table
//! columns of `get` and `get -o wide`.

use anyhow::Result;
use skiff_tests::api_server::ApiServer;
use skiff_tests::kubectl::{kubectl_or_skip, Kubectl};

const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
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
        ports:
        - containerPort: 80
      - name: sidecar
        image: busybox:1.36
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_patch_scale_label_and_tables() -> Result<()> {
    let Some(binary) = kubectl_or_skip("apply_patch_scale_label_and_tables") else {
        return Ok(());
    };
    let server = ApiServer::start().await?;
    let kubectl = Kubectl::new(binary, &server.kubeconfig())?;
    kubectl.manifest("web.yaml", DEPLOYMENT)?;
    kubectl.manifest(
        "web-2.yaml",
        &DEPLOYMENT.replace("nginx:1.27", "nginx:1.28"),
    )?;

    // apply: created, unchanged, configured (client-side, last-applied kept).
    assert_eq!(
        kubectl.ok(&["apply", "-f", "web.yaml"])?,
        "deployment.apps/web created\n"
    );
    assert_eq!(
        kubectl.ok(&["apply", "-f", "web.yaml"])?,
        "deployment.apps/web unchanged\n"
    );
    assert_eq!(
        kubectl.ok(&["apply", "-f", "web-2.yaml"])?,
        "deployment.apps/web configured\n"
    );
    let images = "jsonpath={.spec.template.spec.containers[*].image}";
    assert_eq!(
        kubectl.ok(&["get", "deploy", "web", "-o", images])?,
        "nginx:1.28 busybox:1.36"
    );
    let generation = kubectl.ok(&[
        "get",
        "deploy",
        "web",
        "-o",
        "jsonpath={.metadata.generation}",
    ])?;
    assert_eq!(generation, "2");

    // Strategic merge: the container named web changes, the sidecar stays.
    let strategic =
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx:1.29"}]}}}}"#;
    assert_eq!(
        kubectl.ok(&["patch", "deploy", "web", "-p", strategic])?,
        "deployment.apps/web patched\n"
    );
    assert_eq!(
        kubectl.ok(&["get", "deploy", "web", "-o", images])?,
        "nginx:1.29 busybox:1.36"
    );
    // The same patch again changes nothing: same resourceVersion, "(no change)".
    let rv = kubectl.ok(&[
        "get",
        "deploy",
        "web",
        "-o",
        "jsonpath={.metadata.resourceVersion}",
    ])?;
    assert_eq!(
        kubectl.ok(&["patch", "deploy", "web", "-p", strategic])?,
        "deployment.apps/web patched (no change)\n"
    );
    assert_eq!(
        kubectl.ok(&[
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.metadata.resourceVersion}"
        ])?,
        rv
    );
    // Merge patch replaces the list; JSON patch edits by path.
    let merge =
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"only","image":"busybox:1.37"}]}}}}"#;
    kubectl.ok(&["patch", "deploy", "web", "--type=merge", "-p", merge])?;
    assert_eq!(
        kubectl.ok(&["get", "deploy", "web", "-o", images])?,
        "busybox:1.37"
    );
    let json_patch = r#"[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"busybox:1.38"}]"#;
    kubectl.ok(&["patch", "deploy", "web", "--type=json", "-p", json_patch])?;
    assert_eq!(
        kubectl.ok(&["get", "deploy", "web", "-o", images])?,
        "busybox:1.38"
    );
    let failing = r#"[{"op":"test","path":"/spec/replicas","value":7}]"#;
    let refused = kubectl.fails(&["patch", "deploy", "web", "--type=json", "-p", failing])?;
    assert!(
        refused.contains("Invalid") || refused.contains("invalid"),
        "{refused}"
    );

    // scale, label, annotate.
    assert_eq!(
        kubectl.ok(&["scale", "deploy", "web", "--replicas=4"])?,
        "deployment.apps/web scaled\n"
    );
    assert_eq!(
        kubectl.ok(&["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"])?,
        "4"
    );
    assert_eq!(
        kubectl.ok(&["label", "deploy", "web", "tier=front"])?,
        "deployment.apps/web labeled\n"
    );
    assert_eq!(
        kubectl.ok(&["annotate", "deploy", "web", "note=hi"])?,
        "deployment.apps/web annotated\n"
    );
    let meta = kubectl.ok(&[
        "get",
        "deploy",
        "web",
        "-o",
        "jsonpath={.metadata.labels.tier} {.metadata.annotations.note}",
    ])?;
    assert_eq!(meta, "front hi");

    // Tables: the columns kubectl users know.
    let table = kubectl.ok(&["get", "deploy"])?;
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        "{table}"
    );
    assert!(
        table
            .lines()
            .nth(1)
            .is_some_and(|row| row.starts_with("web ") && row.contains("0/4")),
        "{table}"
    );
    kubectl.manifest(
        "pod.json",
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"solo"},"spec":{"containers":[{"name":"c","image":"busybox:1.36"}]}}"#,
    )?;
    kubectl.ok(&["create", "-f", "pod.json"])?;
    let pods = kubectl.ok(&["get", "pods", "-o", "wide"])?;
    let header: Vec<&str> = pods
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "IP",
            "NODE",
            "NOMINATED",
            "NODE",
            "READINESS",
            "GATES"
        ],
        "{pods}"
    );
    let row: Vec<&str> = pods
        .lines()
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(&row[..4], ["solo", "0/1", "Pending", "0"], "{pods}");
    let namespaces = kubectl.ok(&["get", "ns", "default"])?;
    assert!(
        namespaces
            .lines()
            .nth(1)
            .is_some_and(|r| r.starts_with("default") && r.contains("Active")),
        "{namespaces}"
    );
    drop(server);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_conflicts_and_force() -> Result<()> {
    let Some(binary) = kubectl_or_skip("server_side_apply_conflicts_and_force") else {
        return Ok(());
    };
    let server = ApiServer::start().await?;
    let kubectl = Kubectl::new(binary, &server.kubeconfig())?;
    kubectl.manifest("web.yaml", DEPLOYMENT)?;
    kubectl.manifest(
        "web-2.yaml",
        &DEPLOYMENT.replace("nginx:1.27", "nginx:1.28"),
    )?;
    // Another team's configuration: only the replica count.
    kubectl.manifest(
        "replicas.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 5\n",
    )?;
    // The first configuration without its sidecar.
    let without_sidecar =
        DEPLOYMENT.replace("      - name: sidecar\n        image: busybox:1.36\n", "");
    kubectl.manifest("web-solo.yaml", &without_sidecar)?;

    let applied = "deployment.apps/web serverside-applied\n";
    assert_eq!(
        kubectl.ok(&["apply", "--server-side", "-f", "web.yaml"])?,
        applied
    );
    assert_eq!(
        kubectl.ok(&["apply", "--server-side", "-f", "web-2.yaml"])?,
        applied
    );
    let images = "jsonpath={.spec.template.spec.containers[*].image}";
    assert_eq!(
        kubectl.ok(&["get", "deploy", "web", "-o", images])?,
        "nginx:1.28 busybox:1.36"
    );
    let managers = "jsonpath={.metadata.managedFields[*].manager}";
    assert_eq!(
        kubectl.ok(&["get", "deploy", "web", "-o", managers])?,
        "kubectl"
    );

    // The replica count belongs to kubectl's configuration: a conflict.
    let conflict = kubectl.fails(&[
        "apply",
        "--server-side",
        "--field-manager=autoscaler",
        "-f",
        "replicas.yaml",
    ])?;
    assert!(
        conflict.contains(
            "error: Apply failed with 1 conflict: conflict with \"kubectl\": .spec.replicas"
        ),
        "{conflict}"
    );
    assert!(conflict.contains("--force-conflicts"), "{conflict}");
    let replicas = "jsonpath={.spec.replicas}";
    assert_eq!(kubectl.ok(&["get", "deploy", "web", "-o", replicas])?, "2");

    // --force-conflicts takes the field over.
    assert_eq!(
        kubectl.ok(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=autoscaler",
            "-f",
            "replicas.yaml",
        ])?,
        applied
    );
    assert_eq!(kubectl.ok(&["get", "deploy", "web", "-o", replicas])?, "5");
    let mut both: Vec<String> = kubectl
        .ok(&["get", "deploy", "web", "-o", managers])?
        .split(' ')
        .map(str::to_string)
        .collect();
    both.sort();
    assert_eq!(both, ["autoscaler", "kubectl"]);
    // kubectl now conflicts with the autoscaler in turn.
    let conflict = kubectl.fails(&["apply", "--server-side", "-f", "web.yaml"])?;
    assert!(
        conflict.contains("conflict with \"autoscaler\": .spec.replicas"),
        "{conflict}"
    );

    // A configuration that drops the sidecar (and the replicas, no longer
    // kubectl's) removes the sidecar and leaves the count alone.
    let solo = without_sidecar.replace("  replicas: 2\n", "");
    kubectl.manifest("web-solo.yaml", &solo)?;
    assert_eq!(
        kubectl.ok(&["apply", "--server-side", "-f", "web-solo.yaml"])?,
        applied
    );
    assert_eq!(
        kubectl.ok(&["get", "deploy", "web", "-o", images])?,
        "nginx:1.27"
    );
    assert_eq!(kubectl.ok(&["get", "deploy", "web", "-o", replicas])?, "5");
    drop(server);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_takes_over_from_client_side_apply() -> Result<()> {
    let Some(binary) = kubectl_or_skip("server_side_apply_takes_over_from_client_side_apply")
    else {
        return Ok(());
    };
    let server = ApiServer::start().await?;
    let kubectl = Kubectl::new(binary, &server.kubeconfig())?;
    kubectl.manifest("web.yaml", DEPLOYMENT)?;
    kubectl.manifest(
        "web-2.yaml",
        &DEPLOYMENT.replace("nginx:1.27", "nginx:1.28"),
    )?;
    assert_eq!(
        kubectl.ok(&["apply", "-f", "web.yaml"])?,
        "deployment.apps/web created\n"
    );
    // The image kubectl's client-side apply set is kubectl's to change
    // server-side: no conflict with "kubectl-client-side-apply".
    assert_eq!(
        kubectl.ok(&["apply", "--server-side", "-f", "web-2.yaml"])?,
        "deployment.apps/web serverside-applied\n"
    );
    let images = "jsonpath={.spec.template.spec.containers[*].image}";
    assert_eq!(
        kubectl.ok(&["get", "deploy", "web", "-o", images])?,
        "nginx:1.28 busybox:1.36"
    );
    // kubectl moved the client-side manager's fields over to itself (its
    // migration orders the entries by time, so the order varies).
    let managers = "jsonpath={.metadata.managedFields[*].manager}";
    let listed = kubectl.ok(&["get", "deploy", "web", "-o", managers])?;
    let mut listed: Vec<&str> = listed.split(' ').collect();
    listed.sort();
    assert_eq!(listed, ["kubectl", "kubectl-last-applied"]);
    // A field another writer changed since is a conflict all the same.
    assert_eq!(
        kubectl.ok(&["scale", "deploy", "web", "--replicas=4"])?,
        "deployment.apps/web scaled\n"
    );
    kubectl.manifest(
        "web-3.yaml",
        &DEPLOYMENT.replace("replicas: 2", "replicas: 3"),
    )?;
    let conflict = kubectl.fails(&["apply", "--server-side", "-f", "web-3.yaml"])?;
    assert!(
        conflict.contains(
            "conflict with \"kubectl\" with subresource \"scale\" using apps/v1: .spec.replicas"
        ),
        "{conflict}"
    );
    drop(server);
    Ok(())
}
