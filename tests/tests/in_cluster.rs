//! In-cluster clients: with the controller-manager and pods on networks
//! (and mount namespaces) of their own, a namespace gets its `default`
//! ServiceAccount and its `kube-root-ca.crt` (made again when deleted, put
//! back when changed), and a pod's container finds what client libraries'
//! in-cluster configuration reads: `KUBERNETES_SERVICE_HOST`/`_PORT` (and
//! its namespace's Services' variables, unless `enableServiceLinks` is
//! off), and the token, `ca.crt` and `namespace` at
//! /var/run/secrets/kubernetes.io/serviceaccount — in its mount namespace,
//! not on the host. The token authenticates as the pod's account while the
//! pod lives. A ConfigMap volume follows its ConfigMap while the pod runs
//! (`--sync-frequency`). A pod in the host's network gets the same files,
//! the host's hosts file, and the cluster DNS by `ClusterFirstWithHostNet`.
//! Needs root and the CNI plugins (CI installs them).

use std::path::Path;

use anyhow::{ensure, Context, Result};
use serde_json::json;
use skiff_tests::kube_http::KubeHttp;
use skiff_tests::kubectl::Kubectl;
use skiff_tests::local_node::{apply, jsonpath, pod_network_or_skip, wait_until, LocalNode};

/// The cluster CIDR of this test: none other uses it.
const CLUSTER_CIDR: &str = "10.211.0.0/16";
const MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

const WEB: &str = "apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: nothing}
  ports: [{name: http, port: 80, targetPort: 8080}]
";

const PODS: &str = "apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {greeting: hello}
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: busybox
    command: [sleep, \"3600\"]
    env: [{name: WEB_SERVICE_PORT, value: mine}]
    volumeMounts: [{name: settings, mountPath: /var/run/skiff-in-cluster-test}]
  volumes: [{name: settings, configMap: {name: settings}}]
---
apiVersion: v1
kind: Pod
metadata: {name: quiet}
spec:
  terminationGracePeriodSeconds: 1
  enableServiceLinks: false
  automountServiceAccountToken: false
  containers:
  - name: app
    image: busybox
    command: [sleep, \"3600\"]
---
apiVersion: v1
kind: Pod
metadata: {name: host}
spec:
  terminationGracePeriodSeconds: 1
  hostNetwork: true
  dnsPolicy: ClusterFirstWithHostNet
  containers:
  - name: app
    image: busybox
    command: [sleep, \"3600\"]
";

/// `sh -c script` in the pod's container.
fn sh(kubectl: &Kubectl, pod: &str, script: &str) -> Result<String> {
    kubectl.ok(&["exec", pod, "--", "sh", "-c", script])
}

async fn wait_running(kubectl: &Kubectl, pod: &str) -> Result<()> {
    let running = wait_until(&format!("pod {pod} Running"), || {
        Ok(jsonpath(kubectl, "pod", pod, "{.status.phase}").unwrap_or_default() == "Running")
    })
    .await;
    if let Err(err) = running {
        let described = kubectl.ok(&["describe", "pod", pod]).unwrap_or_default();
        anyhow::bail!("{err:#}\n{described}");
    }
    Ok(())
}

/// The root CA publisher keeps kube-root-ca.crt holding `ca`.
async fn root_ca_is_published(kubectl: &Kubectl, ca: &str) -> Result<()> {
    let published = || {
        let text = jsonpath(kubectl, "configmap", "kube-root-ca.crt", "{.data.ca\\.crt}");
        text.unwrap_or_default().trim_end().to_string()
    };
    wait_until("kube-root-ca.crt in default", || {
        Ok(published() == ca.trim_end())
    })
    .await?;
    kubectl.ok(&["delete", "configmap", "kube-root-ca.crt"])?;
    wait_until("kube-root-ca.crt made again", || {
        Ok(published() == ca.trim_end())
    })
    .await?;
    kubectl.ok(&[
        "patch",
        "configmap",
        "kube-root-ca.crt",
        "--type=merge",
        "-p",
        r#"{"data":{"ca.crt":"not the CA","extra":"x"}}"#,
    ])?;
    wait_until("kube-root-ca.crt put back", || {
        let extra =
            jsonpath(kubectl, "configmap", "kube-root-ca.crt", "{.data.extra}").unwrap_or_default();
        Ok(published() == ca.trim_end() && extra.is_empty())
    })
    .await?;
    let description = jsonpath(
        kubectl,
        "configmap",
        "kube-root-ca.crt",
        "{.metadata.annotations.kubernetes\\.io/description}",
    )?;
    ensure!(
        description.starts_with("Contains a CA bundle"),
        "{description:?}"
    );
    // Every namespace, a new one too.
    kubectl.ok(&["create", "namespace", "team"])?;
    wait_until("kube-root-ca.crt and default in a new namespace", || {
        let map = kubectl
            .ok(&[
                "get",
                "configmap",
                "kube-root-ca.crt",
                "-n",
                "team",
                "-o",
                "name",
            ])
            .unwrap_or_default();
        let account = kubectl
            .ok(&[
                "get",
                "serviceaccount",
                "default",
                "-n",
                "team",
                "-o",
                "name",
            ])
            .unwrap_or_default();
        Ok(!map.is_empty() && !account.is_empty())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_find_the_api_its_ca_and_their_token_as_in_cluster_clients_expect() -> Result<()> {
    let test = "pods_find_the_api_its_ca_and_their_token_as_in_cluster_clients_expect";
    if !pod_network_or_skip(test) {
        return Ok(());
    }
    let flags = ["--sync-frequency=2s"];
    let Some(mut node) =
        LocalNode::start_with_pod_network(test, "skc", CLUSTER_CIDR, &flags).await?
    else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    let ca_path = skiff_tests::test_pki::dir().join("ca.crt");
    let ca = std::fs::read_to_string(&ca_path)
        .with_context(|| format!("reading the cluster CA {}", ca_path.display()))?;
    root_ca_is_published(kubectl, &ca).await?;
    // The service account controller's `default`, before pods that need it.
    wait_until("the default ServiceAccount", || {
        Ok(!kubectl
            .ok(&["get", "serviceaccount", "default", "-o", "name"])
            .unwrap_or_default()
            .is_empty())
    })
    .await?;
    apply(kubectl, "web.yaml", WEB)?;
    let web_ip = jsonpath(kubectl, "service", "web", "{.spec.clusterIP}")?;
    let api_ip = jsonpath(kubectl, "service", "kubernetes", "{.spec.clusterIP}")?;
    ensure!(
        !api_ip.is_empty() && !web_ip.is_empty(),
        "{api_ip:?} {web_ip:?}"
    );
    apply(kubectl, "pods.yaml", PODS)?;
    let mut uids = Vec::new();
    for pod in ["client", "quiet", "host"] {
        wait_running(kubectl, pod).await?;
        uids.push(jsonpath(kubectl, "pod", pod, "{.metadata.uid}")?);
    }
    node.clean_up_pods(uids);
    let kubectl = &node.kubectl;

    // Admission gave the pod its token volume, mounted read-only.
    let volume = jsonpath(kubectl, "pod", "client", "{.spec.volumes[1].name}")?;
    ensure!(volume.starts_with("kube-api-access-"), "{volume:?}");
    let mount = jsonpath(
        kubectl,
        "pod",
        "client",
        "{.spec.containers[0].volumeMounts[1].mountPath} {.spec.containers[0].volumeMounts[1].readOnly}",
    )?;
    ensure!(mount == format!("{MOUNT_PATH} true"), "{mount:?}");

    // A ConfigMap volume at its mountPath, following its ConfigMap.
    let settings = "/var/run/skiff-in-cluster-test/greeting";
    let greeting = kubectl.ok(&["exec", "client", "--", "cat", settings])?;
    ensure!(greeting == "hello", "{greeting:?}");
    ensure!(
        !Path::new(settings).exists(),
        "the ConfigMap's file is on the host"
    );
    kubectl.ok(&[
        "patch",
        "configmap",
        "settings",
        "--type=merge",
        "-p",
        r#"{"data":{"greeting":"changed"}}"#,
    ])?;
    wait_until("the ConfigMap volume to follow its ConfigMap", || {
        Ok(kubectl.ok(&["exec", "client", "--", "cat", settings])? == "changed")
    })
    .await?;

    // The API's Service, and the namespace's, as variables; the
    // container's own wins.
    let env = sh(
        kubectl,
        "client",
        "echo $KUBERNETES_SERVICE_HOST $KUBERNETES_SERVICE_PORT $KUBERNETES_PORT $WEB_SERVICE_HOST $WEB_SERVICE_PORT $WEB_SERVICE_PORT_HTTP $WEB_PORT_80_TCP_ADDR",
    )?;
    ensure!(
        env.trim() == format!("{api_ip} 443 tcp://{api_ip}:443 {web_ip} mine 80 {web_ip}"),
        "the container's variables: {env:?}"
    );
    let quiet = sh(
        kubectl,
        "quiet",
        "echo \"$KUBERNETES_SERVICE_HOST|$WEB_SERVICE_HOST\"; test -e /var/run/secrets/kubernetes.io/serviceaccount/token && echo token || echo no-token",
    )?;
    ensure!(
        quiet == format!("{api_ip}|\nno-token\n"),
        "enableServiceLinks and automountServiceAccountToken off: {quiet:?}"
    );

    // The files, where client libraries read them.
    let token = kubectl.ok(&[
        "exec",
        "client",
        "--",
        "cat",
        &format!("{MOUNT_PATH}/token"),
    ])?;
    let pod_ca = kubectl.ok(&[
        "exec",
        "client",
        "--",
        "cat",
        &format!("{MOUNT_PATH}/ca.crt"),
    ])?;
    let namespace = kubectl.ok(&[
        "exec",
        "client",
        "--",
        "cat",
        &format!("{MOUNT_PATH}/namespace"),
    ])?;
    ensure!(
        token.starts_with("eyJ") && token.split('.').count() == 3,
        "token {token:?}"
    );
    ensure!(
        pod_ca.trim_end() == ca.trim_end(),
        "ca.crt is not the cluster CA: {pod_ca}"
    );
    ensure!(namespace == "default", "namespace {namespace:?}");
    let written = sh(
        kubectl,
        "client",
        &format!("echo x > {MOUNT_PATH}/token 2>/dev/null && echo written || echo refused"),
    )?;
    ensure!(
        written.trim() == "refused",
        "the token volume is writable: {written}"
    );
    // Not on the host.
    ensure!(
        !Path::new(MOUNT_PATH).join("token").exists(),
        "the token is on the host's filesystem"
    );

    // A pod in the host's network has its own mount namespace too: the
    // token where clients read it, the host's hosts file, and (by
    // ClusterFirstWithHostNet) the cluster DNS — none of it on the host.
    let host_token = kubectl.ok(&["exec", "host", "--", "cat", &format!("{MOUNT_PATH}/token")])?;
    ensure!(
        host_token.starts_with("eyJ") && host_token != token,
        "the host-network pod's token {host_token:?}"
    );
    let resolv = kubectl.ok(&["exec", "host", "--", "cat", "/etc/resolv.conf"])?;
    ensure!(
        resolv.contains("search default.svc.cluster.local svc.cluster.local cluster.local")
            && resolv.contains("options ndots:5"),
        "the host-network pod's resolv.conf:\n{resolv}"
    );
    let hosts = kubectl.ok(&["exec", "host", "--", "cat", "/etc/hosts"])?;
    ensure!(
        hosts.starts_with("# Kubernetes-managed hosts file (host network).")
            && hosts.contains("localhost"),
        "the host-network pod's hosts file:\n{hosts}"
    );
    let host_resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    ensure!(
        !host_resolv.contains("svc.cluster.local"),
        "the host's resolv.conf was changed:\n{host_resolv}"
    );

    // The token authenticates against the API, verified with the pod's CA.
    let http = KubeHttp::from_kubeconfig(&node.server.kubeconfig())?
        .with_token(&token)
        .trusting(&pod_ca);
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let reply = http
        .post("/apis/authentication.k8s.io/v1/selfsubjectreviews", &review)
        .await?;
    ensure!(reply.status == 201, "{} {}", reply.status, reply.text());
    let user = reply.json()?;
    ensure!(
        user["status"]["userInfo"]["username"] == "system:serviceaccount:default:default",
        "{user}"
    );
    // Bound to the pod: once it is gone, the token is not accepted.
    kubectl.ok(&["delete", "pod", "client", "--wait=true", "--timeout=60s"])?;
    let deadline = std::time::Instant::now() + skiff_tests::local_node::TIMEOUT;
    loop {
        let reply = http
            .post("/apis/authentication.k8s.io/v1/selfsubjectreviews", &review)
            .await?;
        if reply.status == 401 {
            break;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "the token of a deleted pod still answers {} {}",
            reply.status,
            reply.text()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    drop(node);
    Ok(())
}
