//! Every kubectl version beside the dispatcher (kubectl.1.27 … kubectl.1.33,
//! as the Google Cloud SDK installs them) against one `skiff up`: `version`,
//! `apply` with client-side validation on, `create -f` of an object with an
//! unknown field, `explain`, and `apply` of a custom resource. 1.27 and 1.28
//! read `/openapi/v2` as protobuf for these; later ones `/openapi/v3`.
//! Then the imperative commands (`create` of each kind, `expose`, `set
//! image|env|resources`, `label`, `annotate`, `rollout restart`, `taint`,
//! `cordon`, `drain`, `uncordon`, `autoscale` refused with a 404 as
//! HorizontalPodAutoscaler is not served), which 1.32 and later send and
//! read as protobuf, and `get -w`.
//!
//! A missing binary is skipped with a note outside CI and fails under
//! CI=true. To check another command with every version, add a step to
//! [`exercise`].

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};
use skiff_tests::api_server::ApiServer;
use skiff_tests::kubectl::{Kubectl, RunningKubectl};

const MINORS: std::ops::RangeInclusive<u32> = 27..=33;
const WATCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);
const SDK_BIN: &str = "/usr/lib/google-cloud-sdk/bin";

/// The version `/version` and `kubectl version` report.
const SERVER_VERSION: &str = "v1.33.0+skiff";

const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1}
              port: {x-kubernetes-int-or-string: true}
              tags: {type: array, items: {type: string}}
              note: {type: string, nullable: true}
              extra: {type: object, x-kubernetes-preserve-unknown-fields: true}
";

/// The directories kubectl.1.NN may be in: beside the `kubectl` on PATH
/// (the dispatcher, followed through its links), then the SDK's.
fn search_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|dir| dir.join("kubectl"))
        .filter(|candidate| candidate.is_file())
        .filter_map(|candidate| std::fs::canonicalize(candidate).ok())
        .filter_map(|real| real.parent().map(Path::to_path_buf))
        .collect();
    dirs.push(PathBuf::from(SDK_BIN));
    dirs
}

/// kubectl.1.`minor`, or `None` (skipped with a note; a panic under CI).
fn kubectl_binary(minor: u32) -> Option<PathBuf> {
    let name = format!("kubectl.1.{minor}");
    let found = search_dirs()
        .into_iter()
        .map(|dir| dir.join(&name))
        .find(|candidate| candidate.is_file());
    if found.is_none() {
        let hint = "install the Google Cloud SDK's kubectl component (`apt-get install google-cloud-cli-kubectl`), which ships kubectl.1.NN beside the dispatcher";
        if std::env::var("CI").is_ok_and(|ci| ci == "true") {
            panic!("{name} is not installed, and CI must run every kubectl version: {hint}");
        }
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED kubectl {name}: not found ({hint})"
        );
    }
    found
}

fn manifests(namespace: &str) -> String {
    format!(
        "apiVersion: v1
kind: Namespace
metadata:
  name: {namespace}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: {namespace}
spec:
  replicas: 2
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        ports:
        - containerPort: 80
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: {namespace}
data: {{mode: fast}}
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: {namespace}
spec:
  selector: {{app: web}}
  ports:
  - port: 80
    targetPort: 80
"
    )
}

fn widget(namespace: &str, size: u32) -> String {
    format!(
        "apiVersion: example.com/v1
kind: Widget
metadata:
  name: gadget
  namespace: {namespace}
spec:
  size: {size}
  port: http
  tags: [a, b]
  extra: {{anything: [1, 2]}}
"
    )
}

/// What every version must do, in namespace `v1-NN`.
fn exercise(kubectl: &Kubectl, minor: u32) -> Result<()> {
    let ns = format!("v1-{minor}");
    let version = kubectl.ok(&["version"])?;
    // `Server Version: v1.33.0+skiff`, or the whole version.Info before 1.28.
    let server_line = version.lines().find(|l| l.starts_with("Server Version: "));
    ensure!(
        server_line.is_some_and(|line| line.contains(SERVER_VERSION)),
        "kubectl.1.{minor} version:\n{version}"
    );

    kubectl.manifest("app.yaml", &manifests(&ns))?;
    let created = kubectl.ok(&["apply", "-f", "app.yaml"])?;
    for line in [
        format!("namespace/{ns} created"),
        "deployment.apps/web created".into(),
        "configmap/settings created".into(),
        "service/web created".into(),
    ] {
        ensure!(
            created.contains(&line),
            "kubectl.1.{minor} apply:\n{created}"
        );
    }
    let again = kubectl.ok(&["apply", "-f", "app.yaml"])?;
    ensure!(
        again.contains("deployment.apps/web unchanged") && again.contains("service/web unchanged"),
        "kubectl.1.{minor} second apply:\n{again}"
    );

    let unknown = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: typo\n  namespace: {ns}\ndata: {{a: b}}\nbogus: 1\n"
    );
    kubectl.manifest("typo.yaml", &unknown)?;
    let refused = kubectl.fails(&["create", "-f", "typo.yaml"])?;
    ensure!(
        refused.contains(r#"strict decoding error: unknown field "bogus""#),
        "kubectl.1.{minor} create with an unknown field:\n{refused}"
    );
    let gone = kubectl.run(&["get", "configmap", "typo", "-n", &ns])?;
    ensure!(gone.code == Some(1), "the refused ConfigMap was stored");

    let containers = kubectl.ok(&["explain", "pods.spec.containers"])?;
    ensure!(
        containers.contains("containers <[]Container>") && containers.contains("image"),
        "kubectl.1.{minor} explain pods.spec.containers:\n{containers}"
    );
    let recursive = kubectl.ok(&["explain", "deployment", "--recursive"])?;
    let head: String = recursive.lines().take(40).collect::<Vec<_>>().join("\n");
    ensure!(
        head.contains("Deployment")
            && recursive.contains("replicas")
            && recursive.contains("containers"),
        "kubectl.1.{minor} explain deployment --recursive:\n{head}"
    );

    kubectl.manifest("widget.yaml", &widget(&ns, 3))?;
    ensure!(
        kubectl.ok(&["apply", "-f", "widget.yaml"])? == "widget.example.com/gadget created\n",
        "kubectl.1.{minor} apply of a custom resource"
    );
    kubectl.manifest("widget-4.yaml", &widget(&ns, 4))?;
    ensure!(
        kubectl.ok(&["apply", "-f", "widget-4.yaml"])? == "widget.example.com/gadget configured\n",
        "kubectl.1.{minor} apply of a changed custom resource"
    );
    let size = kubectl.ok(&[
        "get",
        "widget",
        "gadget",
        "-n",
        &ns,
        "-o",
        "jsonpath={.spec.size}",
    ])?;
    ensure!(size == "4", "the widget's size is {size}");
    imperative(kubectl, minor, &ns)
}

/// The imperative `create` commands, which kubectl 1.32 and later send as
/// protobuf bodies, and what each stored reads back as sent.
fn imperative(kubectl: &Kubectl, minor: u32, ns: &str) -> Result<()> {
    let n = ["-n", ns];
    let commands: &[(&[&str], &str)] = &[
        (&["create", "namespace", "made"], "namespace/made created"),
        (
            &[
                "create",
                "deployment",
                "made",
                "--image=nginx",
                "--replicas=2",
            ],
            "deployment.apps/made created",
        ),
        (
            &["create", "configmap", "made", "--from-literal=a=b"],
            "configmap/made created",
        ),
        (
            &["create", "secret", "generic", "made", "--from-literal=p=q"],
            "secret/made created",
        ),
        (
            &["create", "service", "clusterip", "made", "--tcp=80:8080"],
            "service/made created",
        ),
        (
            &["create", "job", "made", "--image=busybox", "--", "true"],
            "job.batch/made created",
        ),
        (
            &[
                "create",
                "cronjob",
                "made",
                "--image=busybox",
                "--schedule=*/5 * * * *",
            ],
            "cronjob.batch/made created",
        ),
        (
            &["create", "serviceaccount", "made"],
            "serviceaccount/made created",
        ),
        (
            &["create", "role", "made", "--verb=get", "--resource=pods"],
            "role.rbac.authorization.k8s.io/made created",
        ),
        (
            &[
                "create",
                "rolebinding",
                "made",
                "--role=made",
                "--user=alice",
            ],
            "rolebinding.rbac.authorization.k8s.io/made created",
        ),
        (
            &[
                "create",
                "poddisruptionbudget",
                "made",
                "--selector=app=made",
                "--min-available=1",
            ],
            "poddisruptionbudget.policy/made created",
        ),
        (
            &["create", "quota", "made", "--hard=pods=5"],
            "resourcequota/made created",
        ),
    ];
    for (args, expected) in commands {
        // The namespace is cluster-scoped and named per version.
        let (args, expected) = match args[1] {
            "namespace" => (
                vec!["create", "namespace", ns.strip_prefix("v").unwrap_or(ns)],
                format!("namespace/{} created", ns.strip_prefix("v").unwrap_or(ns)),
            ),
            _ => ([&n[..], *args].concat(), expected.to_string()),
        };
        let out = kubectl.ok(&args)?;
        ensure!(
            out.trim() == expected,
            "kubectl.1.{minor} {}: {out}",
            args.join(" ")
        );
    }
    let get = |args: &[&str]| kubectl.ok(&[args, &n[..]].concat());
    ensure!(get(&["get", "configmap", "made", "-o", "jsonpath={.data.a}"])? == "b");
    ensure!(get(&["get", "secret", "made", "-o", "jsonpath={.data.p}"])? == "cQ==");
    ensure!(
        get(&[
            "get",
            "deployment",
            "made",
            "-o",
            "jsonpath={.spec.replicas}"
        ])? == "2"
    );
    let port = get(&[
        "get",
        "service",
        "made",
        "-o",
        "jsonpath={.spec.ports[0].targetPort}",
    ])?;
    ensure!(port == "8080", "kubectl.1.{minor}: targetPort {port}");
    let schedule = get(&["get", "cronjob", "made", "-o", "jsonpath={.spec.schedule}"])?;
    ensure!(
        schedule == "*/5 * * * *",
        "kubectl.1.{minor}: schedule {schedule}"
    );
    workload_commands(kubectl, minor, ns)?;
    node_commands(kubectl, minor)
}

/// The commands that change a workload in place, each read back.
fn workload_commands(kubectl: &Kubectl, minor: u32, ns: &str) -> Result<()> {
    let n = ["-n", ns];
    let steps: &[(&[&str], &str)] = &[
        (
            &[
                "expose",
                "deployment",
                "made",
                "--name=exposed",
                "--port=80",
                "--target-port=8080",
            ],
            "service/exposed exposed",
        ),
        (
            &["set", "image", "deployment/made", "nginx=nginx:1.27"],
            "deployment.apps/made image updated",
        ),
        (
            &["set", "env", "deployment/made", "MODE=fast"],
            "deployment.apps/made env updated",
        ),
        (
            &[
                "set",
                "resources",
                "deployment",
                "made",
                "--limits=cpu=200m,memory=256Mi",
                "--requests=cpu=100m",
            ],
            "deployment.apps/made resource requirements updated",
        ),
        (
            &["label", "deployment", "made", "tier=front"],
            "deployment.apps/made labeled",
        ),
        // kubectl before 1.28 says "annotate".
        (
            &["annotate", "deployment", "made", "note=hi"],
            "deployment.apps/made annotate",
        ),
        (
            &["rollout", "restart", "deployment", "made"],
            "deployment.apps/made restarted",
        ),
    ];
    for (args, expected) in steps {
        let args = [&n[..], *args].concat();
        let out = kubectl.ok(&args)?;
        ensure!(
            out.trim().trim_end_matches('d') == expected.trim_end_matches('d'),
            "kubectl.1.{minor} {}: {out}",
            args.join(" ")
        );
    }
    let get = |path: &str| {
        kubectl.ok(&[
            &n[..],
            &[
                "get",
                "deployment",
                "made",
                "-o",
                &format!("jsonpath={path}"),
            ],
        ]
        .concat())
    };
    let container = "{.spec.template.spec.containers[0]";
    let read = [
        get(&format!("{container}.image}}"))?,
        get(&format!("{container}.env[0].value}}"))?,
        get(&format!("{container}.resources.limits.memory}}"))?,
        get(&format!("{container}.resources.requests.cpu}}"))?,
        get("{.metadata.labels.tier}")?,
        get("{.metadata.annotations.note}")?,
    ];
    ensure!(
        read == ["nginx:1.27", "fast", "256Mi", "100m", "front", "hi"],
        "kubectl.1.{minor}: the deployment reads {read:?}"
    );
    let restarted =
        get("{.spec.template.metadata.annotations.kubectl\\.kubernetes\\.io/restartedAt}")?;
    ensure!(
        !restarted.is_empty(),
        "kubectl.1.{minor}: rollout restart left no restartedAt"
    );
    let port = kubectl.ok(&[
        &n[..],
        &[
            "get",
            "service",
            "exposed",
            "-o",
            "jsonpath={.spec.selector.app} {.spec.ports[0].targetPort}",
        ],
    ]
    .concat())?;
    ensure!(
        port == "made 8080",
        "kubectl.1.{minor}: exposed service {port}"
    );
    // HorizontalPodAutoscaler is not served: a clear 404, nothing else.
    let refused = kubectl.fails(
        &[
            &n[..],
            &[
                "autoscale",
                "deployment",
                "made",
                "--min=1",
                "--max=3",
                "--cpu-percent=80",
            ],
        ]
        .concat(),
    )?;
    ensure!(
        refused.contains(
            "Error from server (NotFound): the server could not find the requested resource"
        ),
        "kubectl.1.{minor} autoscale: {refused}"
    );
    Ok(())
}

/// taint, cordon, drain (evicting a pod bound to the node) and uncordon of
/// a Node of this version's own.
fn node_commands(kubectl: &Kubectl, minor: u32) -> Result<()> {
    let node = format!("node-1-{minor}");
    let ns = format!("v1-{minor}");
    kubectl.manifest(
        "node.yaml",
        &format!(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: {node}\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: on-node\n  namespace: {ns}\nspec:\n  nodeName: {node}\n  containers: [{{name: c, image: busybox}}]\n"
        ),
    )?;
    kubectl.ok(&["apply", "-f", "node.yaml"])?;
    let steps: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["taint", "node", &node, "dedicated=ops:NoSchedule"],
            format!("node/{node} tainted"),
        ),
        (vec!["cordon", &node], format!("node/{node} cordoned")),
        // No kubelet runs on it, so the pod goes at once or never.
        (
            vec![
                "drain",
                &node,
                "--ignore-daemonsets",
                "--force",
                "--grace-period=0",
                "--timeout=30s",
            ],
            format!("node/{node} drained"),
        ),
        (vec!["uncordon", &node], format!("node/{node} uncordoned")),
    ];
    for (args, expected) in steps {
        let out = kubectl.ok(&args)?;
        ensure!(
            out.lines().last().is_some_and(|l| l.trim() == expected),
            "kubectl.1.{minor} {}: {out}",
            args.join(" ")
        );
        if args[0] == "drain" {
            ensure!(
                out.contains(&format!("pod/on-node evicted")),
                "kubectl.1.{minor} drain: {out}"
            );
        }
    }
    let taints = kubectl.ok(&["get", "node", &node, "-o", "jsonpath={.spec.taints[0].key}={.spec.taints[0].value}:{.spec.taints[0].effect} {.spec.unschedulable}"])?;
    ensure!(
        taints == "dedicated=ops:NoSchedule ",
        "kubectl.1.{minor}: node reads {taints:?}"
    );
    let gone = kubectl.run(&["get", "pod", "on-node", "-n", &ns])?;
    ensure!(
        gone.code == Some(1),
        "kubectl.1.{minor}: the drained pod is still there"
    );
    Ok(())
}

fn shows(watch: &RunningKubectl, name: &str) -> bool {
    watch
        .lines()
        .iter()
        .any(|l| l.starts_with(&format!("{name} ")))
}

/// Waits until `get -w` has printed a row for `name`.
async fn wait_for_row(watch: &RunningKubectl, minor: u32, name: &str) -> Result<()> {
    let deadline = std::time::Instant::now() + WATCH_TIMEOUT;
    while !shows(watch, name) {
        ensure!(
            std::time::Instant::now() < deadline,
            "kubectl.1.{minor} get -w does not show {name}: {:?}\n{}",
            watch.lines(),
            watch.stderr()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Ok(())
}

/// `get -w` in the default (table) form sees the objects, then a change.
async fn watch_step(kubectl: &Kubectl, minor: u32) -> Result<()> {
    let ns = format!("v1-{minor}");
    let mut watch = kubectl.spawn(&["get", "configmaps", "-n", &ns, "-w"])?;
    wait_for_row(&watch, minor, "settings").await?;
    let header = watch.lines()[0]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    ensure!(
        header == "NAME DATA AGE",
        "kubectl.1.{minor} get -w: {header}"
    );
    ensure!(!shows(&watch, "watched"));
    kubectl.ok(&[
        "create",
        "configmap",
        "watched",
        "-n",
        &ns,
        "--from-literal=x=y",
    ])?;
    wait_for_row(&watch, minor, "watched").await?;
    ensure!(watch.running()?, "kubectl.1.{minor} get -w still watches");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kubectl_version_applies_validates_and_explains() -> Result<()> {
    let binaries: Vec<(u32, PathBuf)> = MINORS
        .filter_map(|minor| kubectl_binary(minor).map(|binary| (minor, binary)))
        .collect();
    if binaries.is_empty() {
        return Ok(());
    }
    let server = ApiServer::start().await?;
    let (_, first) = &binaries[0];
    let setup = Kubectl::new(first.clone(), &server.kubeconfig())?;
    setup.manifest("crd.yaml", CRD)?;
    setup.ok(&["apply", "-f", "crd.yaml"])?;
    setup.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.com",
        "--timeout=20s",
    ])?;
    for (minor, binary) in binaries {
        let kubectl = Kubectl::new(binary, &server.kubeconfig())?;
        exercise(&kubectl, minor)
            .with_context(|| format!("kubectl.1.{minor}; skiff's log:\n{}", server.stderr()))?;
        watch_step(&kubectl, minor).await?;
    }
    Ok(())
}
