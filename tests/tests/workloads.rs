//! The DaemonSet and StatefulSet controllers of `skiff up`, driven with the
//! real kubectl: a DaemonSet puts a pod on every node (the real kubelet's
//! and simulated ones added later), leaves a node tainted NoExecute, and
//! rolls out a new template; a StatefulSet with a volumeClaimTemplate comes
//! up in ordinal order with its claims, scales down from the highest
//! ordinal, and a partitioned rolling update replaces only the ordinals at
//! or above the partition.

use std::collections::BTreeMap;

use anyhow::{ensure, Context, Result};
use skiff_tests::kubectl::Kubectl;
use skiff_tests::local_node::{
    apply, jsonpath, wait_for, wait_until, LocalNode, NODE, RELAXED_EVICTION,
};
use skiff_tests::skiff_process::SkiffProcess;

async fn node(test: &str) -> Result<Option<LocalNode>> {
    LocalNode::start_with(test, RELAXED_EVICTION, &["--controller-manager=true"]).await
}

/// `count` simulated nodes `sim-0…` labelled `skiff.test/simulated=true`.
fn simulated_nodes(node: &LocalNode, count: usize) -> Result<SkiffProcess> {
    let kubeconfig = node.server.kubeconfig();
    SkiffProcess::spawn(
        "simulated kubelet",
        [
            "kubelet".to_string(),
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--simulate={count}"),
            "--simulate-prefix=sim".into(),
            "--node-labels=skiff.test/simulated=true".into(),
            "--kubelet-listen=127.0.0.1:0".into(),
        ],
    )
}

/// name → `values` read by a jsonpath `range` printing `name|a|b…` lines.
fn table(
    kubectl: &Kubectl,
    kind: &str,
    selector: &str,
    fields: &str,
) -> Result<BTreeMap<String, Vec<String>>> {
    let path = format!("jsonpath={{range .items[*]}}{{.metadata.name}}|{fields}{{\"\\n\"}}{{end}}");
    let out = kubectl.ok(&["get", kind, "-l", selector, "-o", &path])?;
    Ok(out
        .lines()
        .filter(|l| !l.is_empty())
        .map(|line| {
            let mut parts = line.split('|').map(str::to_string);
            let name = parts.next().unwrap_or_default();
            (name, parts.collect())
        })
        .collect())
}

fn daemon_set(image: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector: {{matchLabels: {{app: agent}}}}
  template:
    metadata:
      labels: {{app: agent}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: agent
        image: {image}
        command: [sleep, \"3600\"]
"
    )
}

/// Each agent pod's node and the node its affinity pins it to.
fn agent_pods(kubectl: &Kubectl) -> Result<BTreeMap<String, Vec<String>>> {
    table(
        kubectl,
        "pods",
        "app=agent",
        "{.spec.nodeName}|{.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0].values[0]}|{.metadata.labels.controller-revision-hash}|{.metadata.deletionTimestamp}",
    )
}

/// The nodes of live agent pods, sorted.
fn agent_nodes(kubectl: &Kubectl) -> Result<Vec<String>> {
    let mut nodes: Vec<String> = agent_pods(kubectl)?
        .values()
        .filter(|v| v.get(3).is_some_and(String::is_empty))
        .map(|v| v[0].clone())
        .collect();
    nodes.sort();
    Ok(nodes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_set_runs_on_every_eligible_node_and_rolls_out() -> Result<()> {
    let Some(node) = node("a_daemon_set_runs_on_every_eligible_node_and_rolls_out").await? else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    apply(kubectl, "agent-1.yaml", &daemon_set("busybox:1"))?;
    wait_for(kubectl, "daemonset", "agent", "{.status.numberReady}", "1").await?;
    ensure!(agent_nodes(kubectl)? == [NODE]);

    // Two nodes join: each gets a pod, placed by the scheduler through the
    // node affinity the controller set.
    let _simulated = simulated_nodes(&node, 2)?;
    wait_until("a daemon pod on each of the three nodes", || {
        Ok(agent_nodes(kubectl)? == [NODE, "sim-0", "sim-1"])
    })
    .await?;
    for (pod, fields) in agent_pods(kubectl)? {
        ensure!(
            fields[0] == fields[1],
            "{pod} is on {} but pinned to {}",
            fields[0],
            fields[1]
        );
    }
    let tolerations = kubectl.ok(&[
        "get",
        "pods",
        "-l",
        "app=agent",
        "-o",
        "jsonpath={.items[0].spec.tolerations[*].key}",
    ])?;
    ensure!(
        tolerations.contains("node.kubernetes.io/unschedulable"),
        "{tolerations}"
    );
    kubectl.ok(&["rollout", "status", "daemonset/agent", "--timeout=120s"])?;
    wait_for(
        kubectl,
        "daemonset",
        "agent",
        "{.status.desiredNumberScheduled}",
        "3",
    )
    .await?;

    // A NoExecute taint the pod does not tolerate takes the node away.
    kubectl.ok(&["taint", "node", "sim-1", "dedicated=infra:NoExecute"])?;
    wait_until("the daemon pod to leave the tainted node", || {
        Ok(agent_nodes(kubectl)? == [NODE, "sim-0"])
    })
    .await?;
    wait_for(
        kubectl,
        "daemonset",
        "agent",
        "{.status.desiredNumberScheduled}",
        "2",
    )
    .await?;

    // A new template rolls out, one node at a time, to every node.
    let first_hashes: Vec<String> = agent_pods(kubectl)?
        .values()
        .map(|v| v[2].clone())
        .collect();
    apply(kubectl, "agent-2.yaml", &daemon_set("busybox:2"))?;
    kubectl.ok(&["rollout", "status", "daemonset/agent", "--timeout=180s"])?;
    wait_until("only new daemon pods on both nodes", || {
        let pods = agent_pods(kubectl)?;
        Ok(pods.len() == 2
            && pods
                .values()
                .all(|v| !first_hashes.contains(&v[2]) && v[3].is_empty()))
    })
    .await?;
    ensure!(agent_nodes(kubectl)? == [NODE, "sim-0"]);
    let revisions = kubectl.ok(&[
        "get",
        "controllerrevisions",
        "-o",
        "jsonpath={.items[*].revision}",
    ])?;
    ensure!(
        revisions.split_whitespace().count() == 2,
        "revisions: {revisions}"
    );
    let history = kubectl.ok(&["rollout", "history", "daemonset/agent"])?;
    ensure!(history.contains('1') && history.contains('2'), "{history}");
    let status = jsonpath(
        kubectl,
        "daemonset",
        "agent",
        "{.status.updatedNumberScheduled}/{.status.numberAvailable}/{.status.numberMisscheduled}",
    )?;
    ensure!(
        status == "2/2/0",
        "updated/available/misscheduled: {status}"
    );
    Ok(())
}

/// The container mounts its claim `data`, as StatefulSets do: the
/// apiserver accepts a mount naming a volumeClaimTemplate.
fn stateful_set(image: &str, replicas: u32, partition: u32) -> String {
    format!(
        "apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  replicas: {replicas}
  serviceName: nginx
  selector: {{matchLabels: {{app: web}}}}
  updateStrategy:
    type: RollingUpdate
    rollingUpdate: {{partition: {partition}}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      nodeSelector: {{skiff.test/simulated: \"true\"}}
      terminationGracePeriodSeconds: 1
      containers:
      - name: web
        image: {image}
        volumeMounts: [{{name: data, mountPath: /data}}]
  volumeClaimTemplates:
  - metadata: {{name: data}}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {{requests: {{storage: 1Gi}}}}
"
    )
}

/// name → [ready, deleting, revision, created, readySince, hostname, subdomain, claim].
fn web_pods(kubectl: &Kubectl) -> Result<BTreeMap<String, Vec<String>>> {
    table(
        kubectl,
        "pods",
        "app=web",
        "{.status.conditions[?(@.type==\"Ready\")].status}|{.metadata.deletionTimestamp}|{.metadata.labels.controller-revision-hash}|{.metadata.creationTimestamp}|{.status.conditions[?(@.type==\"Ready\")].lastTransitionTime}|{.spec.hostname}|{.spec.subdomain}|{.spec.volumes[?(@.name==\"data\")].persistentVolumeClaim.claimName}",
    )
}

/// Where IPv4 `ip` lies in `cidr` (`10.244.1.0/24`): its offset from
/// the network address and the range's size; `None` outside it.
fn offset_in(ip: &str, cidr: &str) -> Option<(u64, u64)> {
    let (network, prefix) = cidr.split_once('/')?;
    let parse = |a: &str| a.parse::<std::net::Ipv4Addr>().ok().map(u32::from);
    let (ip, network, prefix) = (parse(ip)?, parse(network)?, prefix.parse::<u32>().ok()?);
    let size = 1u64 << 32u32.checked_sub(prefix)?;
    let offset = u64::from(ip).checked_sub(u64::from(network))?;
    (offset < size).then_some((offset, size))
}

/// `skiff up`'s --cluster-cidr, which the tests leave as it is.
const DEFAULT_CLUSTER_CIDR: &str = "10.244.0.0/16";

/// The `count` pods of `selector` on simulated `node` report addresses
/// of its pod CIDR (given by the node IPAM controller from the cluster
/// CIDR), each its own and none the network, gateway or broadcast address.
fn simulated_pods_have_addresses_of_their_node(
    kubectl: &Kubectl,
    node: &str,
    selector: &str,
    count: usize,
) -> Result<()> {
    let cidr = jsonpath(kubectl, "node", node, "{.spec.podCIDR}")?;
    let network = cidr.split('/').next().unwrap_or_default();
    ensure!(
        offset_in(network, DEFAULT_CLUSTER_CIDR).is_some(),
        "{node}'s pod CIDR {cidr:?} is not of the cluster CIDR {DEFAULT_CLUSTER_CIDR}"
    );
    let pods = table(
        kubectl,
        "pods",
        selector,
        "{.spec.nodeName}|{.status.podIP}|{.status.podIPs[*].ip}",
    )?;
    let mut ips: Vec<&str> = Vec::new();
    for (pod, fields) in &pods {
        let ip = fields[1].as_str();
        let usable = offset_in(ip, &cidr).is_some_and(|(at, size)| at >= 2 && at < size - 1);
        ensure!(
            fields[0] == node && usable && fields[2] == ip,
            "{pod} on {} reports {ip:?} ({:?}); {node}'s pod CIDR is {cidr:?}",
            fields[0],
            fields[2]
        );
        ips.push(ip);
    }
    ips.sort();
    ips.dedup();
    ensure!(
        ips.len() == count,
        "addresses of {selector} on {node}: {pods:?}"
    );
    Ok(())
}

fn live(pods: &BTreeMap<String, Vec<String>>, name: &str) -> bool {
    pods.get(name).is_some_and(|v| v[1].is_empty())
}

fn ready(pods: &BTreeMap<String, Vec<String>>, name: &str) -> bool {
    pods.get(name).is_some_and(|v| v[0] == "True")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateful_set_comes_up_in_order_scales_down_in_reverse_and_updates_by_partition(
) -> Result<()> {
    let test = "a_stateful_set_comes_up_in_order_scales_down_in_reverse_and_updates_by_partition";
    let Some(node) = node(test).await? else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    let _simulated = simulated_nodes(&node, 1)?;
    wait_until("the simulated node to register", || {
        Ok(jsonpath(kubectl, "node", "sim-0", "{.metadata.name}").unwrap_or_default() == "sim-0")
    })
    .await?;
    apply(kubectl, "web-1.yaml", &stateful_set("nginx:1", 3, 0))?;

    // OrderedReady: pod N+1 appears only once pod N is Ready.
    let mut out_of_order = Vec::new();
    wait_until("three ready pods", || {
        let pods = web_pods(kubectl)?;
        for n in 0..2 {
            if pods.contains_key(&format!("web-{}", n + 1)) && !ready(&pods, &format!("web-{n}")) {
                out_of_order.push(format!("web-{} before web-{n} was ready: {pods:?}", n + 1));
            }
        }
        Ok((0..3).all(|n| ready(&pods, &format!("web-{n}"))))
    })
    .await?;
    ensure!(out_of_order.is_empty(), "{out_of_order:?}");
    simulated_pods_have_addresses_of_their_node(kubectl, "sim-0", "app=web", 3)?;
    let pods = web_pods(kubectl)?;
    for n in 0..2 {
        let (this, next) = (&pods[&format!("web-{n}")], &pods[&format!("web-{}", n + 1)]);
        ensure!(
            next[3] >= this[4],
            "web-{} created at {} before web-{n} was ready at {}",
            n + 1,
            next[3],
            this[4]
        );
    }
    for n in 0..3 {
        let fields = &pods[&format!("web-{n}")];
        ensure!(
            fields[5] == format!("web-{n}") && fields[6] == "nginx",
            "{fields:?}"
        );
        ensure!(fields[7] == format!("data-web-{n}"), "{fields:?}");
    }
    let claims = kubectl.ok(&["get", "pvc", "-o", "jsonpath={.items[*].metadata.name}"])?;
    let mut claims: Vec<&str> = claims.split_whitespace().collect();
    claims.sort();
    ensure!(
        claims == ["data-web-0", "data-web-1", "data-web-2"],
        "{claims:?}"
    );
    kubectl.ok(&["rollout", "status", "statefulset/web", "--timeout=120s"])?;

    // Scale down: web-2 goes before web-1 starts to go; the claims stay.
    kubectl.ok(&["scale", "statefulset/web", "--replicas=1"])?;
    let mut reversed = Vec::new();
    wait_until("one pod left", || {
        let pods = web_pods(kubectl)?;
        if !live(&pods, "web-1") && pods.contains_key("web-2") {
            reversed.push(format!("web-1 went before web-2: {pods:?}"));
        }
        Ok(pods.len() == 1 && live(&pods, "web-0"))
    })
    .await?;
    ensure!(reversed.is_empty(), "{reversed:?}");
    let kept = kubectl.ok(&["get", "pvc", "-o", "jsonpath={.items[*].metadata.name}"])?;
    ensure!(
        kept.split_whitespace().count() == 3,
        "claims after scale-down: {kept}"
    );

    // Back to 3, then a new template with partition 2: only web-2 updates.
    kubectl.ok(&["scale", "statefulset/web", "--replicas=3"])?;
    kubectl.ok(&["rollout", "status", "statefulset/web", "--timeout=120s"])?;
    let old = jsonpath(kubectl, "statefulset", "web", "{.status.currentRevision}")?;
    apply(kubectl, "web-2.yaml", &stateful_set("nginx:2", 3, 2))?;
    kubectl.ok(&["rollout", "status", "statefulset/web", "--timeout=120s"])?;
    let new = jsonpath(kubectl, "statefulset", "web", "{.status.updateRevision}")?;
    ensure!(
        new != old && !new.is_empty(),
        "update revision {new}, current {old}"
    );
    wait_for(
        kubectl,
        "statefulset",
        "web",
        "{.status.updatedReplicas}",
        "1",
    )
    .await?;
    let revisions = |kubectl: &Kubectl| -> Result<Vec<String>> {
        let pods = web_pods(kubectl)?;
        (0..3)
            .map(|n| {
                pods.get(&format!("web-{n}"))
                    .map(|v| v[2].clone())
                    .context("a missing pod")
            })
            .collect()
    };
    ensure!(revisions(kubectl)? == [old.clone(), old.clone(), new.clone()]);
    ensure!(jsonpath(kubectl, "statefulset", "web", "{.status.currentRevision}")? == old);

    // A pod below the partition comes back at the old revision.
    kubectl.ok(&["delete", "pod", "web-0", "--wait=false"])?;
    wait_until("web-0 to come back", || {
        let pods = web_pods(kubectl)?;
        Ok(live(&pods, "web-0") && ready(&pods, "web-0"))
    })
    .await?;
    ensure!(revisions(kubectl)? == [old.clone(), old.clone(), new.clone()]);

    // Partition 0: the rest updates, and the update revision becomes current.
    apply(kubectl, "web-3.yaml", &stateful_set("nginx:2", 3, 0))?;
    kubectl.ok(&["rollout", "status", "statefulset/web", "--timeout=120s"])?;
    wait_for(
        kubectl,
        "statefulset",
        "web",
        "{.status.currentRevision}",
        &new,
    )
    .await?;
    ensure!(revisions(kubectl)? == [new.clone(), new.clone(), new.clone()]);
    Ok(())
}
