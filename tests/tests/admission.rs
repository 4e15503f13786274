//! The built-in admission plugins against `skiff up`, as users meet them
//! through kubectl and curl: the defaults `kubectl get -o json` shows after
//! a minimal create, NamespaceLifecycle's refusals, Priority classes,
//! the default ServiceAccount, LimitRange defaults and bounds, and
//! ResourceQuota usage with its 403.

use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};
use skiff_tests::api_server::ApiServer;
use skiff_tests::kubectl::Kubectl;

const PODS: &str = "/api/v1/namespaces/default/pods";

use skiff_tests::api_server::with_kubectl as session;

fn get_json(kubectl: &Kubectl, args: &[&str]) -> Result<Value> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let text = kubectl.ok(&all)?;
    serde_json::from_str(&text).with_context(|| format!("kubectl {args:?} -o json: {text}"))
}

use skiff_tests::kube_http::expect_status as status_of;

fn pod(name: &str, spec: Value) -> Value {
    let mut spec = spec;
    if spec.get("containers").is_none() {
        spec["containers"] = json!([{"name": "c", "image": "busybox"}]);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

const MINIMAL: &str = "apiVersion: v1
kind: Pod
metadata: {name: tiny}
spec:
  containers:
  - name: web
    image: nginx
    ports: [{containerPort: 80}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: 'nginx:1.27'}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80}]
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_shows_the_defaults_of_a_minimal_pod_deployment_and_service() -> Result<()> {
    let Some((_server, kubectl)) =
        session("kubectl_shows_the_defaults_of_a_minimal_pod_deployment_and_service").await?
    else {
        return Ok(());
    };
    kubectl.manifest("minimal.yaml", MINIMAL)?;
    kubectl.ok(&["apply", "-f", "minimal.yaml"])?;

    let pod = get_json(&kubectl, &["get", "pod", "tiny"])?;
    let spec = &pod["spec"];
    for (field, want) in [
        ("restartPolicy", json!("Always")),
        ("dnsPolicy", json!("ClusterFirst")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("schedulerName", json!("default-scheduler")),
        ("securityContext", json!({})),
        ("enableServiceLinks", json!(true)),
        ("priority", json!(0)),
        ("preemptionPolicy", json!("PreemptLowerPriority")),
        ("serviceAccountName", json!("default")),
        ("serviceAccount", json!("default")),
    ] {
        assert_eq!(spec[field], want, "pod spec.{field}: {pod}");
    }
    let container = &spec["containers"][0];
    assert_eq!(container["imagePullPolicy"], "Always", "untagged image");
    assert_eq!(container["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(container["terminationMessagePolicy"], "File");
    assert_eq!(container["resources"], json!({}));
    assert_eq!(container["ports"][0]["protocol"], "TCP");
    assert_eq!(
        spec["tolerations"],
        json!([
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        ]),
        "DefaultTolerationSeconds"
    );
    assert_eq!(pod["status"]["qosClass"], "BestEffort");

    let deploy = get_json(&kubectl, &["get", "deployment", "web"])?;
    let spec = &deploy["spec"];
    assert_eq!(spec["replicas"], 1);
    assert_eq!(
        spec["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
    );
    assert_eq!(spec["revisionHistoryLimit"], 10);
    assert_eq!(spec["progressDeadlineSeconds"], 600);
    let template = &spec["template"]["spec"];
    assert_eq!(template["restartPolicy"], "Always");
    assert_eq!(template["containers"][0]["imagePullPolicy"], "IfNotPresent");

    let service = get_json(&kubectl, &["get", "service", "web"])?;
    let spec = &service["spec"];
    assert_eq!(spec["type"], "ClusterIP");
    assert_eq!(spec["sessionAffinity"], "None");
    assert_eq!(spec["ipFamilyPolicy"], "SingleStack");
    assert_eq!(
        spec["ports"][0],
        json!({"port": 80, "protocol": "TCP", "targetPort": 80})
    );

    // A second apply of the same manifest changes nothing: defaults are
    // not a difference.
    let again = kubectl.ok(&["apply", "-f", "minimal.yaml"])?;
    ensure!(again.lines().all(|l| l.ends_with("unchanged")), "{again}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_lifecycle_refuses_missing_terminating_and_system_namespaces() -> Result<()> {
    let server = ApiServer::start().await?;
    let http = server.http()?;

    let reply = http
        .post(
            "/api/v1/namespaces/nowhere/configmaps",
            &json!({"metadata": {"name": "a"}}),
        )
        .await?;
    let status = status_of(&reply, 404, "create in a missing namespace")?;
    assert_eq!(status["message"], "namespaces \"nowhere\" not found");

    // A namespace held by a finalizer stays Terminating once deleted.
    let namespace = json!({"metadata": {"name": "closing", "finalizers": ["example.com/hold"]}});
    status_of(
        &http.post("/api/v1/namespaces", &namespace).await?,
        201,
        "namespace",
    )?;
    let created = http.get_json("/api/v1/namespaces/closing").await?;
    assert_eq!(
        created["metadata"]["labels"]["kubernetes.io/metadata.name"], "closing",
        "{created}"
    );
    let marked = status_of(
        &http.delete("/api/v1/namespaces/closing").await?,
        200,
        "delete namespace",
    )?;
    assert_eq!(marked["status"]["phase"], "Terminating", "{marked}");
    let reply = http
        .post(
            "/api/v1/namespaces/closing/configmaps",
            &json!({"metadata": {"name": "a"}}),
        )
        .await?;
    let status = status_of(&reply, 403, "create in a terminating namespace")?;
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        "configmaps \"a\" is forbidden: unable to create new content in namespace closing because it is being terminated"
    );

    for system in ["default", "kube-system", "kube-public"] {
        let reply = http.delete(&format!("/api/v1/namespaces/{system}")).await?;
        let status = status_of(&reply, 403, "delete a system namespace")?;
        assert_eq!(
            status["message"],
            format!("namespaces \"{system}\" is forbidden: this namespace may not be deleted")
        );
    }
    Ok(())
}

const CLASSES: &str = "apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: usual}
value: 7
globalDefault: true
preemptionPolicy: Never
";

const UNKNOWN_CLASS: &str = "apiVersion: v1
kind: Pod
metadata: {name: vip}
spec:
  priorityClassName: platinum
  containers: [{name: c, image: busybox}]
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_classes_set_pod_priority_and_unknown_ones_are_refused() -> Result<()> {
    let Some((server, kubectl)) =
        session("priority_classes_set_pod_priority_and_unknown_ones_are_refused").await?
    else {
        return Ok(());
    };
    let http = server.http()?;
    let system = get_json(&kubectl, &["get", "priorityclass", "system-node-critical"])?;
    assert_eq!(system["value"], 2_000_001_000);
    let system = get_json(
        &kubectl,
        &["get", "priorityclass", "system-cluster-critical"],
    )?;
    assert_eq!(system["value"], 2_000_000_000);
    let refused = kubectl.fails(&["delete", "priorityclass", "system-node-critical"])?;
    ensure!(
        refused.contains(
            "priorityclasses.scheduling.k8s.io \"system-node-critical\" is forbidden: this is a system priority class and cannot be deleted"
        ),
        "{refused}"
    );

    kubectl.manifest("unknown.yaml", UNKNOWN_CLASS)?;
    let refused = kubectl.fails(&["create", "-f", "unknown.yaml"])?;
    ensure!(
        refused.contains(
            "Error from server (Forbidden): error when creating \"unknown.yaml\": pods \"vip\" is forbidden: no PriorityClass with name platinum was found"
        ),
        "{refused}"
    );

    let critical = pod(
        "critical",
        json!({"priorityClassName": "system-node-critical"}),
    );
    let created = status_of(&http.post(PODS, &critical).await?, 201, "critical pod")?;
    assert_eq!(created["spec"]["priority"], 2_000_001_000);

    kubectl.manifest("classes.yaml", CLASSES)?;
    kubectl.ok(&["apply", "-f", "classes.yaml"])?;
    let high = status_of(
        &http
            .post(PODS, &pod("high", json!({"priorityClassName": "high"})))
            .await?,
        201,
        "high pod",
    )?;
    assert_eq!(
        (&high["spec"]["priority"], &high["spec"]["preemptionPolicy"]),
        (&json!(1000), &json!("PreemptLowerPriority"))
    );
    let plain = status_of(
        &http.post(PODS, &pod("plain", json!({}))).await?,
        201,
        "plain pod",
    )?;
    assert_eq!(
        plain["spec"]["priorityClassName"], "usual",
        "the global default"
    );
    assert_eq!(plain["spec"]["priority"], 7);
    assert_eq!(plain["spec"]["preemptionPolicy"], "Never");

    let reply = http
        .post(
            PODS,
            &pod(
                "forged",
                json!({"priorityClassName": "high", "priority": 5}),
            ),
        )
        .await?;
    let status = status_of(&reply, 403, "a pod with its own priority")?;
    ensure!(
        status["message"].as_str().is_some_and(|m| m.contains(
            "the integer value of priority (5) must not be provided in pod spec; priority admission controller computed 1000"
        )),
        "{status}"
    );

    let second = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "other"}, "value": 3, "globalDefault": true});
    let reply = http
        .post("/apis/scheduling.k8s.io/v1/priorityclasses", &second)
        .await?;
    let status = status_of(&reply, 403, "a second global default")?;
    assert_eq!(
        status["message"],
        "priorityclasses.scheduling.k8s.io \"other\" is forbidden: PriorityClass usual is already marked as default. Only one default can exist"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_run_as_the_default_service_account_or_an_existing_one() -> Result<()> {
    let server = ApiServer::start().await?;
    let http = server.http()?;
    let plain = status_of(
        &http.post(PODS, &pod("plain", json!({}))).await?,
        201,
        "pod",
    )?;
    assert_eq!(plain["spec"]["serviceAccountName"], "default");

    let named = pod("robot", json!({"serviceAccountName": "builder"}));
    let status = status_of(&http.post(PODS, &named).await?, 403, "a missing account")?;
    assert_eq!(
        status["message"],
        "pods \"robot\" is forbidden: error looking up service account default/builder: serviceaccount \"builder\" not found"
    );
    let account = json!({"metadata": {"name": "builder"}});
    status_of(
        &http
            .post("/api/v1/namespaces/default/serviceaccounts", &account)
            .await?,
        201,
        "service account",
    )?;
    let created = status_of(&http.post(PODS, &named).await?, 201, "pod with its account")?;
    assert_eq!(created["spec"]["serviceAccount"], "builder");
    Ok(())
}

const LIMITS: &str = "apiVersion: v1
kind: LimitRange
metadata: {name: sizes}
spec:
  limits:
  - type: Container
    default: {cpu: 500m, memory: 256Mi}
    defaultRequest: {cpu: 100m, memory: 128Mi}
    max: {cpu: '1', memory: 1Gi}
";

const GREEDY: &str = "apiVersion: v1
kind: Pod
metadata: {name: greedy}
spec:
  containers:
  - name: c
    image: busybox
    resources: {limits: {cpu: '2'}}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_ranges_default_container_resources_and_bound_them() -> Result<()> {
    let Some((_server, kubectl)) =
        session("limit_ranges_default_container_resources_and_bound_them").await?
    else {
        return Ok(());
    };
    kubectl.manifest("limits.yaml", LIMITS)?;
    kubectl.ok(&["apply", "-f", "limits.yaml"])?;
    let range = get_json(&kubectl, &["get", "limitrange", "sizes"])?;
    assert_eq!(range["spec"]["limits"][0]["type"], "Container");

    kubectl.ok(&["run", "small", "--image=busybox", "--restart=Never"])?;
    let small = get_json(&kubectl, &["get", "pod", "small"])?;
    assert_eq!(
        small["spec"]["containers"][0]["resources"],
        json!({"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "100m", "memory": "128Mi"}})
    );
    assert_eq!(
        small["metadata"]["annotations"]["kubernetes.io/limit-ranger"],
        "LimitRanger plugin set: cpu, memory request for container small; cpu, memory limit for container small"
    );
    assert_eq!(small["status"]["qosClass"], "Burstable");

    kubectl.manifest("greedy.yaml", GREEDY)?;
    let refused = kubectl.fails(&["create", "-f", "greedy.yaml"])?;
    ensure!(
        refused.contains(
            "pods \"greedy\" is forbidden: maximum cpu usage per Container is 1, but limit is 2"
        ),
        "{refused}"
    );
    Ok(())
}

const QUOTA: &str = "apiVersion: v1
kind: ResourceQuota
metadata: {name: q}
spec:
  hard: {pods: '2', count/configmaps: '5', requests.cpu: '1'}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_quota_tracks_usage_and_refuses_what_exceeds_it() -> Result<()> {
    let Some((server, kubectl)) =
        session("resource_quota_tracks_usage_and_refuses_what_exceeds_it").await?
    else {
        return Ok(());
    };
    let http = server.http()?;
    let with_cpu = |name: &str, cpu: &str| {
        pod(
            name,
            json!({"containers": [{"name": "c", "image": "busybox",
                "resources": {"requests": {"cpu": cpu}}}]}),
        )
    };
    // One pod before the quota: the quota counts it when made.
    status_of(
        &http.post(PODS, &with_cpu("a", "100m")).await?,
        201,
        "pod a",
    )?;
    kubectl.manifest("quota.yaml", QUOTA)?;
    kubectl.ok(&["apply", "-f", "quota.yaml"])?;
    let quota = get_json(&kubectl, &["get", "resourcequota", "q"])?;
    assert_eq!(
        quota["status"]["used"],
        json!({"pods": "1", "count/configmaps": "0", "requests.cpu": "100m"}),
        "{quota}"
    );
    assert_eq!(quota["status"]["hard"], quota["spec"]["hard"]);

    status_of(
        &http.post(PODS, &with_cpu("b", "200m")).await?,
        201,
        "pod b",
    )?;
    let quota = get_json(&kubectl, &["get", "resourcequota", "q"])?;
    assert_eq!(quota["status"]["used"]["pods"], "2");
    assert_eq!(quota["status"]["used"]["requests.cpu"], "300m");

    let reply = http.post(PODS, &with_cpu("c", "100m")).await?;
    let status = status_of(&reply, 403, "a third pod")?;
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        "pods \"c\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2"
    );
    // kubectl prints the same message.
    kubectl.manifest("c.yaml", &serde_json::to_string(&with_cpu("c", "100m"))?)?;
    let refused = kubectl.fails(&["create", "-f", "c.yaml"])?;
    ensure!(
        refused.contains("Error from server (Forbidden): error when creating \"c.yaml\": pods \"c\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2"),
        "{refused}"
    );

    // Deleting a pod gives its usage back.
    status_of(&http.delete(&format!("{PODS}/a")).await?, 200, "delete a")?;
    let quota = get_json(&kubectl, &["get", "resourcequota", "q"])?;
    assert_eq!(quota["status"]["used"]["pods"], "1");
    assert_eq!(quota["status"]["used"]["requests.cpu"], "200m");
    let reply = http.post(PODS, &with_cpu("big", "900m")).await?;
    let status = status_of(&reply, 403, "a pod over the cpu quota")?;
    assert_eq!(
        status["message"],
        "pods \"big\" is forbidden: exceeded quota: q, requested: requests.cpu=900m, used: requests.cpu=200m, limited: requests.cpu=1"
    );
    let reply = http.post(PODS, &pod("nocpu", json!({}))).await?;
    let status = status_of(&reply, 403, "a pod without a cpu request")?;
    assert_eq!(
        status["message"],
        "pods \"nocpu\" is forbidden: failed quota: q: must specify requests.cpu for: c"
    );
    status_of(
        &http.post(PODS, &with_cpu("c", "100m")).await?,
        201,
        "pod c after a delete",
    )?;

    // A dry run checks without charging.
    let reply = http
        .request(
            "POST",
            &format!("{PODS}?dryRun=All"),
            Some("application/json"),
            Some(&serde_json::to_vec(&with_cpu("d", "1m"))?),
        )
        .await?;
    status_of(&reply, 403, "a dry run over the quota")?;

    for name in ["one", "two"] {
        let map = json!({"metadata": {"name": name}});
        status_of(
            &http
                .post("/api/v1/namespaces/default/configmaps", &map)
                .await?,
            201,
            "configmap",
        )?;
    }
    let quota = get_json(&kubectl, &["get", "resourcequota", "q"])?;
    assert_eq!(quota["status"]["used"]["count/configmaps"], "2");
    assert_eq!(quota["status"]["used"]["pods"], "2");
    Ok(())
}
