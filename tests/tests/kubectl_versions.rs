//! Every kubectl version beside the dispatcher (kubectl.1.27 … kubectl.1.33,
//! as the Google Cloud SDK installs them) against one `skiff up`: `version`,
//! `apply` with client-side validation on, `create -f` of an object with an
//! unknown field, `explain`, and `apply` of a custom resource. 1.27 and 1.28
//! read `/openapi/v2` as protobuf for these; later ones `/openapi/v3`.
//!
//! A missing binary is skipped with a note outside CI and fails under
//! CI=true. To check another command with every version, add a step to
//! [`exercise`].

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};
use skiff_tests::api_server::ApiServer;
use skiff_tests::kubectl::Kubectl;

const MINORS: std::ops::RangeInclusive<u32> = 27..=33;
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
    }
    Ok(())
}
