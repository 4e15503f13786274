//! The columns and cells of each resource's Table, as the Kubernetes
//! apiserver's printers (`pkg/printers/internalversion`) define them.

use super::*;

// ---------------------------------------------------------------------------
// Columns

/// One `TableColumnDefinition`.
#[derive(Debug)]
pub(super) struct Column {
    name: &'static str,
    r#type: &'static str,
    format: &'static str,
    description: &'static str,
    /// 0 for the default output, 1 for the `-o wide` extras.
    priority: u8,
}

impl Column {
    pub(super) fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "type": self.r#type,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        })
    }
}

const fn col(name: &'static str, r#type: &'static str, description: &'static str) -> Column {
    Column {
        name,
        r#type,
        format: "",
        description,
        priority: 0,
    }
}

const fn wide(name: &'static str, r#type: &'static str, description: &'static str) -> Column {
    Column {
        name,
        r#type,
        format: "",
        description,
        priority: 1,
    }
}

const NAME: Column = Column {
    name: "Name",
    r#type: "string",
    format: "name",
    description: "Name must be unique within a namespace.",
    priority: 0,
};
const AGE: Column = col(
    "Age",
    "string",
    "Time since the object was created (metadata.creationTimestamp).",
);
const CONTAINERS: Column = wide(
    "Containers",
    "string",
    "Names of each container in the template.",
);
const IMAGES: Column = wide(
    "Images",
    "string",
    "Images referenced by each container in the template.",
);
const SELECTOR: Column = wide(
    "Selector",
    "string",
    "Label selector for the pods this object manages.",
);

/// The columns of one resource and the function that renders a row's cells,
/// one per column in the same order.
pub(super) struct Printer {
    pub(super) columns: &'static [Column],
    pub(super) cells: RenderCells,
}

/// Renders one object's cells as of `now`.
type RenderCells = fn(&Value, Timestamp) -> Vec<Value>;

pub(super) fn printer_for(resource: &ResourceType) -> Printer {
    let (columns, cells): (&'static [Column], RenderCells) = match (resource.group, resource.plural)
    {
        ("", "pods") => (POD_COLUMNS, pod_cells),
        ("", "nodes") => (NODE_COLUMNS, node_cells),
        ("", "namespaces") => (NAMESPACE_COLUMNS, namespace_cells),
        ("", "services") => (SERVICE_COLUMNS, service_cells),
        ("", "endpoints") => (ENDPOINTS_COLUMNS, endpoints_cells),
        ("", "configmaps") => (CONFIGMAP_COLUMNS, configmap_cells),
        ("", "secrets") => (SECRET_COLUMNS, secret_cells),
        ("", "events") => (EVENT_COLUMNS, event_cells),
        ("", "serviceaccounts") => (SERVICE_ACCOUNT_COLUMNS, service_account_cells),
        ("", "persistentvolumes") => (PV_COLUMNS, pv_cells),
        ("", "persistentvolumeclaims") => (PVC_COLUMNS, pvc_cells),
        ("", "resourcequotas") => (QUOTA_COLUMNS, quota_cells),
        ("", "limitranges") => (CREATED_AT_COLUMNS, created_at_cells),
        ("apps", "deployments") => (DEPLOYMENT_COLUMNS, deployment_cells),
        ("apps", "replicasets") => (REPLICA_SET_COLUMNS, replica_set_cells),
        ("apps", "statefulsets") => (STATEFUL_SET_COLUMNS, stateful_set_cells),
        ("apps", "daemonsets") => (DAEMON_SET_COLUMNS, daemon_set_cells),
        ("batch", "jobs") => (JOB_COLUMNS, job_cells),
        ("batch", "cronjobs") => (CRON_JOB_COLUMNS, cron_job_cells),
        ("scheduling.k8s.io", "priorityclasses") => (PRIORITY_CLASS_COLUMNS, priority_class_cells),
        ("coordination.k8s.io", "leases") => (LEASE_COLUMNS, lease_cells),
        ("policy", "poddisruptionbudgets") => (PDB_COLUMNS, pdb_cells),
        ("discovery.k8s.io", "endpointslices") => (ENDPOINT_SLICE_COLUMNS, endpoint_slice_cells),
        ("storage.k8s.io", "storageclasses") => (STORAGE_CLASS_COLUMNS, storage_class_cells),
        ("rbac.authorization.k8s.io", "roles" | "clusterroles") => {
            (CREATED_AT_COLUMNS, created_at_cells)
        }
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => {
            (BINDING_COLUMNS, binding_cells)
        }
        _ => (DEFAULT_COLUMNS, default_cells),
    };
    Printer { columns, cells }
}

// ---------------------------------------------------------------------------
// Reading fields of a JSON object; absent and mistyped fields read as empty.

fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn int(object: &Value, pointer: &str) -> i64 {
    object.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn items<'a>(object: &'a Value, pointer: &str) -> &'a [Value] {
    object
        .pointer(pointer)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn entries<'a>(object: &'a Value, pointer: &str) -> Option<&'a Map<String, Value>> {
    object.pointer(pointer).and_then(Value::as_object)
}

fn count(object: &Value, pointer: &str) -> usize {
    match object.pointer(pointer) {
        Some(Value::Object(map)) => map.len(),
        Some(Value::Array(list)) => list.len(),
        _ => 0,
    }
}

fn or_none(value: &str) -> String {
    if value.is_empty() {
        "<none>".to_string()
    } else {
        value.to_string()
    }
}

/// A scalar as text: strings as they are, numbers and bools printed.
fn scalar(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn name_cell(object: &Value) -> Value {
    Value::from(text(object, "/metadata/name"))
}

// ---------------------------------------------------------------------------
// Time

fn timestamp(object: &Value, pointer: &str) -> Option<Timestamp> {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<Timestamp>().ok())
}

/// apimachinery's `duration.HumanDuration`: about two significant figures,
/// `5s` up to two minutes, `3m2s` up to ten, `5h4m` up to eight hours, then
/// `2d3h` up to eight days, `400d` up to two years, `3y20d` up to eight. Up
/// to a second in the future reads `0s`; further is `<invalid>`.
pub fn human_duration(duration: SignedDuration) -> String {
    let seconds = duration.as_secs();
    if seconds < -1 {
        return "<invalid>".to_string();
    }
    if seconds < 0 {
        return "0s".to_string();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        return match seconds % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{}d", hours / 24),
            h => format!("{}d{h}h", hours / 24),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        return match (hours / 24) % 365 {
            0 => format!("{}y", hours / 24 / 365),
            d => format!("{}y{d}d", hours / 24 / 365),
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// `HumanDuration(now - t)`, `<unknown>` without a time.
fn since(time: Option<Timestamp>, now: Timestamp) -> String {
    match time {
        Some(time) => human_duration(now.duration_since(time)),
        None => "<unknown>".to_string(),
    }
}

fn age(object: &Value, now: Timestamp) -> Value {
    Value::from(since(timestamp(object, "/metadata/creationTimestamp"), now))
}

// ---------------------------------------------------------------------------
// Shared cell formats

/// `labels.FormatLabels`: `k=v` sorted by key, `<none>` when empty.
fn format_labels(labels: Option<&Map<String, Value>>) -> String {
    let mut pairs: Vec<String> = labels
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", scalar(v)))
        .collect();
    pairs.sort();
    or_none(&pairs.join(","))
}

/// A `LabelSelector` as `LabelSelectorAsSelector(..).String()`: requirements
/// sorted by key, `k=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`; empty for
/// a nil or empty selector.
fn selector_string(selector: Option<&Value>) -> String {
    let Some(selector) = selector else {
        return String::new();
    };
    let mut requirements: Vec<(String, String)> = entries(selector, "/matchLabels")
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), format!("{k}={}", scalar(v))))
        .collect();
    for expression in items(selector, "/matchExpressions") {
        let key = text(expression, "/key");
        let mut values: Vec<String> = items(expression, "/values").iter().map(scalar).collect();
        values.sort();
        values.dedup();
        let rendered = match text(expression, "/operator") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => continue,
        };
        requirements.push((key.to_string(), rendered));
    }
    requirements.sort_by(|a, b| a.0.cmp(&b.0));
    requirements
        .into_iter()
        .map(|(_, r)| r)
        .collect::<Vec<_>>()
        .join(",")
}

/// `metav1.FormatLabelSelector`: the selector string, `<none>` when empty.
fn format_label_selector(selector: Option<&Value>) -> String {
    or_none(&selector_string(selector))
}

/// The names and the images of a pod template's containers, comma-joined.
fn containers_and_images(template_spec: Option<&Value>) -> (Value, Value) {
    let containers = template_spec.map_or(&[][..], |spec| items(spec, "/containers"));
    let names: Vec<&str> = containers.iter().map(|c| text(c, "/name")).collect();
    let images: Vec<&str> = containers.iter().map(|c| text(c, "/image")).collect();
    (Value::from(names.join(",")), Value::from(images.join(",")))
}

fn bool_or_unset(value: Option<&Value>) -> &'static str {
    match value.and_then(Value::as_bool) {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    }
}

/// `spec.replicas`, which the API defaults to 1.
fn desired_replicas(object: &Value) -> i64 {
    object
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

fn condition_is_true(object: &Value, pointer: &str, condition_type: &str) -> bool {
    items(object, pointer)
        .iter()
        .find(|c| text(c, "/type") == condition_type)
        .is_some_and(|c| text(c, "/status") == "True")
}

// ---------------------------------------------------------------------------
// Pods

const POD_COLUMNS: &[Column] = &[
    NAME,
    col(
        "Ready",
        "string",
        "The aggregate readiness state of this pod for accepting traffic.",
    ),
    col(
        "Status",
        "string",
        "The aggregate status of the containers in this pod.",
    ),
    col(
        "Restarts",
        "string",
        "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
    ),
    AGE,
    wide("IP", "string", "The pod's first IP address."),
    wide("Node", "string", "The node the pod is bound to."),
    wide(
        "Nominated Node",
        "string",
        "The node the scheduler nominated for the pod after preempting others.",
    ),
    wide(
        "Readiness Gates",
        "string",
        "Readiness gates whose condition is True, of all the pod's gates.",
    ),
];

/// What the READY, STATUS and RESTARTS columns of a pod say.
#[derive(Debug, PartialEq)]
struct PodSummary {
    ready: usize,
    total: usize,
    status: String,
    restarts: i64,
    last_restart: Option<Timestamp>,
}

/// The kubelet's `Terminated` state as a short reason: its reason, else the
/// signal or the exit code.
fn terminated_reason(terminated: &Value) -> String {
    match text(terminated, "/reason") {
        "" if int(terminated, "/signal") != 0 => format!("Signal:{}", int(terminated, "/signal")),
        "" => format!("ExitCode:{}", int(terminated, "/exitCode")),
        reason => reason.to_string(),
    }
}

fn later(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    a.max(b)
}

/// The printer's pod logic: the phase (or status.reason), overridden by the
/// first init container that has not finished (`Init:N/M`,
/// `Init:CrashLoopBackOff` …), else by the containers' waiting or
/// terminated reasons (`ContainerCreating`, `CrashLoopBackOff`, `Completed`
/// …), and `Terminating` once a deletion is under way. Sidecars (init
/// containers with `restartPolicy: Always`) count among the containers.
fn summarize_pod(pod: &Value) -> PodSummary {
    let init_specs = items(pod, "/spec/initContainers");
    let is_sidecar = |name: &str| {
        init_specs
            .iter()
            .any(|c| text(c, "/name") == name && text(c, "/restartPolicy") == "Always")
    };
    let sidecars = init_specs
        .iter()
        .filter(|c| text(c, "/restartPolicy") == "Always")
        .count();
    let mut summary = PodSummary {
        ready: 0,
        total: items(pod, "/spec/containers").len() + sidecars,
        status: match text(pod, "/status/reason") {
            "" => text(pod, "/status/phase").to_string(),
            reason => reason.to_string(),
        },
        restarts: 0,
        last_restart: None,
    };
    let scheduling_gated = items(pod, "/status/conditions")
        .iter()
        .any(|c| text(c, "/type") == "PodScheduled" && text(c, "/reason") == "SchedulingGated");
    if scheduling_gated {
        summary.status = "SchedulingGated".to_string();
    }

    let (mut sidecar_restarts, mut sidecar_last_restart) = (0, None);
    let mut initializing = false;
    for (index, status) in items(pod, "/status/initContainerStatuses")
        .iter()
        .enumerate()
    {
        let restarts = int(status, "/restartCount");
        let finished = timestamp(status, "/lastState/terminated/finishedAt");
        summary.restarts += restarts;
        summary.last_restart = later(summary.last_restart, finished);
        let sidecar = is_sidecar(text(status, "/name"));
        if sidecar {
            sidecar_restarts += restarts;
            sidecar_last_restart = later(sidecar_last_restart, finished);
        }
        let terminated = status.pointer("/state/terminated");
        let waiting = text(status, "/state/waiting/reason");
        if terminated.is_some_and(|t| int(t, "/exitCode") == 0) {
            continue;
        }
        if sidecar && status.get("started").and_then(Value::as_bool) == Some(true) {
            if status.get("ready").and_then(Value::as_bool) == Some(true) {
                summary.ready += 1;
            }
            continue;
        }
        summary.status = match terminated {
            Some(terminated) => format!("Init:{}", terminated_reason(terminated)),
            None if !waiting.is_empty() && waiting != "PodInitializing" => {
                format!("Init:{waiting}")
            }
            None => format!("Init:{index}/{}", init_specs.len()),
        };
        initializing = true;
        break;
    }

    if !initializing || condition_is_true(pod, "/status/conditions", "Initialized") {
        summary.restarts = sidecar_restarts;
        summary.last_restart = sidecar_last_restart;
        let mut has_running = false;
        for status in items(pod, "/status/containerStatuses").iter().rev() {
            summary.restarts += int(status, "/restartCount");
            summary.last_restart = later(
                summary.last_restart,
                timestamp(status, "/lastState/terminated/finishedAt"),
            );
            let waiting = text(status, "/state/waiting/reason");
            if !waiting.is_empty() {
                summary.status = waiting.to_string();
            } else if let Some(terminated) = status.pointer("/state/terminated") {
                summary.status = terminated_reason(terminated);
            } else if status.get("ready").and_then(Value::as_bool) == Some(true)
                && status.pointer("/state/running").is_some()
            {
                has_running = true;
                summary.ready += 1;
            }
        }
        if summary.status == "Completed" && has_running {
            summary.status = if condition_is_true(pod, "/status/conditions", "Ready") {
                "Running".to_string()
            } else {
                "NotReady".to_string()
            };
        }
    }

    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        let phase = text(pod, "/status/phase");
        if text(pod, "/status/reason") == "NodeLost" {
            summary.status = "Unknown".to_string();
        } else if phase != "Succeeded" && phase != "Failed" {
            summary.status = "Terminating".to_string();
        }
    }
    summary
}

fn pod_cells(pod: &Value, now: Timestamp) -> Vec<Value> {
    let summary = summarize_pod(pod);
    let restarts = match summary.last_restart {
        Some(last) if summary.restarts != 0 => {
            format!("{} ({} ago)", summary.restarts, since(Some(last), now))
        }
        _ => summary.restarts.to_string(),
    };
    let ip = match items(pod, "/status/podIPs").first() {
        Some(first) => text(first, "/ip"),
        None => text(pod, "/status/podIP"),
    };
    vec![
        name_cell(pod),
        Value::from(format!("{}/{}", summary.ready, summary.total)),
        Value::from(summary.status),
        Value::from(restarts),
        age(pod, now),
        Value::from(or_none(ip)),
        Value::from(or_none(text(pod, "/spec/nodeName"))),
        Value::from(or_none(text(pod, "/status/nominatedNodeName"))),
        Value::from(readiness_gates(pod)),
    ]
}

/// `true/all` of the pod's readiness gates, `<none>` without gates.
fn readiness_gates(pod: &Value) -> String {
    let gates = items(pod, "/spec/readinessGates");
    if gates.is_empty() {
        return "<none>".to_string();
    }
    let passing = gates
        .iter()
        .filter(|gate| condition_is_true(pod, "/status/conditions", text(gate, "/conditionType")))
        .count();
    format!("{passing}/{}", gates.len())
}

/// Finished pods carry a `Completed` row condition, as the real printer sets.
pub(super) fn pod_row_conditions(pod: &Value) -> Option<Value> {
    let (reason, message) = match text(pod, "/status/phase") {
        "Succeeded" => ("Succeeded", "The pod has completed successfully."),
        "Failed" => ("Failed", "The pod failed."),
        _ => return None,
    };
    Some(json!([{
        "type": "Completed",
        "status": "True",
        "reason": reason,
        "message": message,
    }]))
}

// ---------------------------------------------------------------------------
// Nodes and namespaces

const NODE_COLUMNS: &[Column] = &[
    NAME,
    col("Status", "string", "The status of the node"),
    col("Roles", "string", "The roles of the node"),
    AGE,
    col("Version", "string", "Kubelet version reported by the node."),
    wide(
        "Internal-IP",
        "string",
        "The node's first InternalIP address.",
    ),
    wide(
        "External-IP",
        "string",
        "The node's first ExternalIP address.",
    ),
    wide("OS-Image", "string", "OS image reported by the node."),
    wide(
        "Kernel-Version",
        "string",
        "Kernel version reported by the node.",
    ),
    wide(
        "Container-Runtime",
        "string",
        "Container runtime version reported by the node.",
    ),
];

fn node_cells(node: &Value, now: Timestamp) -> Vec<Value> {
    let info = |field: &str| {
        let value = text(node, &format!("/status/nodeInfo/{field}"));
        Value::from(if value.is_empty() { "<unknown>" } else { value })
    };
    vec![
        name_cell(node),
        Value::from(node_status(node)),
        Value::from(node_roles(node)),
        age(node, now),
        Value::from(text(node, "/status/nodeInfo/kubeletVersion")),
        Value::from(node_address(node, "InternalIP")),
        Value::from(node_address(node, "ExternalIP")),
        info("osImage"),
        info("kernelVersion"),
        info("containerRuntimeVersion"),
    ]
}

/// `Ready`/`NotReady`/`Unknown` from the Ready condition, plus
/// `,SchedulingDisabled` when cordoned.
fn node_status(node: &Value) -> String {
    let ready = items(node, "/status/conditions")
        .iter()
        .rev()
        .find(|c| text(c, "/type") == "Ready");
    let mut status = match ready {
        Some(c) if text(c, "/status") == "True" => "Ready".to_string(),
        Some(_) => "NotReady".to_string(),
        None => "Unknown".to_string(),
    };
    if node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push_str(",SchedulingDisabled");
    }
    status
}

/// Roles from `node-role.kubernetes.io/<role>` label keys and the
/// `kubernetes.io/role` label value, sorted; `<none>` without any.
fn node_roles(node: &Value) -> String {
    let mut roles: Vec<String> = Vec::new();
    for (key, value) in entries(node, "/metadata/labels").into_iter().flatten() {
        let role = match key.strip_prefix("node-role.kubernetes.io/") {
            Some(role) => role.to_string(),
            None if key == "kubernetes.io/role" => scalar(value),
            None => continue,
        };
        if !role.is_empty() {
            roles.push(role);
        }
    }
    roles.sort();
    roles.dedup();
    or_none(&roles.join(","))
}

fn node_address(node: &Value, address_type: &str) -> String {
    items(node, "/status/addresses")
        .iter()
        .find(|a| text(a, "/type") == address_type)
        .map_or_else(|| "<none>".to_string(), |a| text(a, "/address").to_string())
}

const NAMESPACE_COLUMNS: &[Column] = &[
    NAME,
    col("Status", "string", "The status of the namespace"),
    AGE,
];

fn namespace_cells(namespace: &Value, now: Timestamp) -> Vec<Value> {
    // The API sets the phase on create; an object without it reads as the
    // phase it would have.
    let phase = match text(namespace, "/status/phase") {
        "" if namespace.pointer("/metadata/deletionTimestamp").is_some() => "Terminating",
        "" => "Active",
        phase => phase,
    };
    vec![
        name_cell(namespace),
        Value::from(phase),
        age(namespace, now),
    ]
}

// ---------------------------------------------------------------------------
// Workloads

const DEPLOYMENT_COLUMNS: &[Column] = &[
    NAME,
    col("Ready", "string", "Number of the pod with ready state"),
    col(
        "Up-to-date",
        "string",
        "Total number of pods targeted by this deployment that have the desired template.",
    ),
    col(
        "Available",
        "string",
        "Total number of available pods targeted by this deployment.",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    SELECTOR,
];

fn deployment_cells(deployment: &Value, now: Timestamp) -> Vec<Value> {
    let (containers, images) = containers_and_images(deployment.pointer("/spec/template/spec"));
    vec![
        name_cell(deployment),
        Value::from(format!(
            "{}/{}",
            int(deployment, "/status/readyReplicas"),
            desired_replicas(deployment)
        )),
        Value::from(int(deployment, "/status/updatedReplicas")),
        Value::from(int(deployment, "/status/availableReplicas")),
        age(deployment, now),
        containers,
        images,
        Value::from(selector_string(deployment.pointer("/spec/selector"))),
    ]
}

const REPLICA_SET_COLUMNS: &[Column] = &[
    NAME,
    col("Desired", "integer", "Number of desired pods."),
    col("Current", "integer", "Number of pods that exist."),
    col("Ready", "integer", "Number of pods that are ready."),
    AGE,
    CONTAINERS,
    IMAGES,
    SELECTOR,
];

fn replica_set_cells(set: &Value, now: Timestamp) -> Vec<Value> {
    let (containers, images) = containers_and_images(set.pointer("/spec/template/spec"));
    vec![
        name_cell(set),
        Value::from(desired_replicas(set)),
        Value::from(int(set, "/status/replicas")),
        Value::from(int(set, "/status/readyReplicas")),
        age(set, now),
        containers,
        images,
        Value::from(format_label_selector(set.pointer("/spec/selector"))),
    ]
}

const STATEFUL_SET_COLUMNS: &[Column] = &[
    NAME,
    col("Ready", "string", "Number of the pod with ready state"),
    AGE,
    CONTAINERS,
    IMAGES,
];

fn stateful_set_cells(set: &Value, now: Timestamp) -> Vec<Value> {
    let (containers, images) = containers_and_images(set.pointer("/spec/template/spec"));
    vec![
        name_cell(set),
        Value::from(format!(
            "{}/{}",
            int(set, "/status/readyReplicas"),
            desired_replicas(set)
        )),
        age(set, now),
        containers,
        images,
    ]
}

const DAEMON_SET_COLUMNS: &[Column] = &[
    NAME,
    col(
        "Desired",
        "integer",
        "Number of nodes that should be running the daemon pod.",
    ),
    col(
        "Current",
        "integer",
        "Number of nodes running at least one daemon pod that should.",
    ),
    col(
        "Ready",
        "integer",
        "Number of nodes with a ready daemon pod.",
    ),
    col(
        "Up-to-date",
        "integer",
        "Number of nodes running the updated daemon pod.",
    ),
    col(
        "Available",
        "integer",
        "Number of nodes with an available daemon pod.",
    ),
    col(
        "Node Selector",
        "string",
        "The node selector of the pod template.",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    SELECTOR,
];

fn daemon_set_cells(set: &Value, now: Timestamp) -> Vec<Value> {
    let (containers, images) = containers_and_images(set.pointer("/spec/template/spec"));
    vec![
        name_cell(set),
        Value::from(int(set, "/status/desiredNumberScheduled")),
        Value::from(int(set, "/status/currentNumberScheduled")),
        Value::from(int(set, "/status/numberReady")),
        Value::from(int(set, "/status/updatedNumberScheduled")),
        Value::from(int(set, "/status/numberAvailable")),
        Value::from(format_labels(entries(
            set,
            "/spec/template/spec/nodeSelector",
        ))),
        age(set, now),
        containers,
        images,
        Value::from(format_label_selector(set.pointer("/spec/selector"))),
    ]
}

const JOB_COLUMNS: &[Column] = &[
    NAME,
    col("Status", "string", "Status of the job."),
    col(
        "Completions",
        "string",
        "Succeeded pods of the completions wanted.",
    ),
    col("Duration", "string", "Time required to complete the job."),
    AGE,
    CONTAINERS,
    IMAGES,
    SELECTOR,
];

fn job_cells(job: &Value, now: Timestamp) -> Vec<Value> {
    let succeeded = int(job, "/status/succeeded");
    let completions = match job.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(wanted) => format!("{succeeded}/{wanted}"),
        None => match int(job, "/spec/parallelism") {
            parallelism if parallelism > 1 => format!("{succeeded}/1 of {parallelism}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let duration = match (
        timestamp(job, "/status/startTime"),
        timestamp(job, "/status/completionTime"),
    ) {
        (None, _) => String::new(),
        (Some(start), None) => human_duration(now.duration_since(start)),
        (Some(start), Some(end)) => human_duration(end.duration_since(start)),
    };
    let (containers, images) = containers_and_images(job.pointer("/spec/template/spec"));
    vec![
        name_cell(job),
        Value::from(job_status(job)),
        Value::from(completions),
        Value::from(duration),
        age(job, now),
        containers,
        images,
        Value::from(format_label_selector(job.pointer("/spec/selector"))),
    ]
}

fn job_status(job: &Value) -> &'static str {
    let has = |condition| condition_is_true(job, "/status/conditions", condition);
    if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else if job.pointer("/metadata/deletionTimestamp").is_some() {
        "Terminating"
    } else if has("Suspended") {
        "Suspended"
    } else if has("FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    }
}

const CRON_JOB_COLUMNS: &[Column] = &[
    NAME,
    col("Schedule", "string", "The schedule in Cron format."),
    col("Timezone", "string", "The time zone of the schedule."),
    col(
        "Suspend",
        "boolean",
        "Whether subsequent executions are suspended.",
    ),
    col("Active", "integer", "Number of running jobs."),
    col(
        "Last Schedule",
        "string",
        "Time since a job was last scheduled.",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    SELECTOR,
];

fn cron_job_cells(cron_job: &Value, now: Timestamp) -> Vec<Value> {
    let last_schedule = match timestamp(cron_job, "/status/lastScheduleTime") {
        Some(time) => since(Some(time), now),
        None => "<none>".to_string(),
    };
    let template = cron_job.pointer("/spec/jobTemplate/spec");
    let (containers, images) =
        containers_and_images(template.and_then(|t| t.pointer("/template/spec")));
    vec![
        name_cell(cron_job),
        Value::from(text(cron_job, "/spec/schedule")),
        Value::from(or_none(text(cron_job, "/spec/timeZone"))),
        Value::from(bool_or_unset(cron_job.pointer("/spec/suspend"))),
        Value::from(items(cron_job, "/status/active").len()),
        Value::from(last_schedule),
        age(cron_job, now),
        containers,
        images,
        Value::from(format_label_selector(
            template.and_then(|t| t.pointer("/selector")),
        )),
    ]
}

// ---------------------------------------------------------------------------
// Services and endpoints

const SERVICE_COLUMNS: &[Column] = &[
    NAME,
    col(
        "Type",
        "string",
        "How the service is exposed: ClusterIP, NodePort, LoadBalancer or ExternalName.",
    ),
    col("Cluster-IP", "string", "The service's cluster IP."),
    col(
        "External-IP",
        "string",
        "External IPs or load-balancer ingress of the service.",
    ),
    col("Port(s)", "string", "The ports the service exposes."),
    AGE,
    wide(
        "Selector",
        "string",
        "The labels of the pods the service routes to.",
    ),
];

fn service_cells(service: &Value, now: Timestamp) -> Vec<Value> {
    let service_type = match text(service, "/spec/type") {
        "" => "ClusterIP",
        other => other,
    };
    let cluster_ip = match items(service, "/spec/clusterIPs").first() {
        Some(ip) => scalar(ip),
        None => text(service, "/spec/clusterIP").to_string(),
    };
    vec![
        name_cell(service),
        Value::from(service_type),
        Value::from(or_none(&cluster_ip)),
        Value::from(service_external_ip(service, service_type)),
        Value::from(or_none(&service_ports(service))),
        age(service, now),
        Value::from(format_labels(entries(service, "/spec/selector"))),
    ]
}

fn service_external_ip(service: &Value, service_type: &str) -> String {
    let external: Vec<String> = items(service, "/spec/externalIPs")
        .iter()
        .map(scalar)
        .collect();
    match service_type {
        "ClusterIP" | "NodePort" => or_none(&external.join(",")),
        "LoadBalancer" => {
            let mut ingress: Vec<String> = items(service, "/status/loadBalancer/ingress")
                .iter()
                .map(|i| match text(i, "/ip") {
                    "" => text(i, "/hostname").to_string(),
                    ip => ip.to_string(),
                })
                .filter(|s| !s.is_empty())
                .collect();
            ingress.sort();
            ingress.dedup();
            ingress.extend(external);
            if ingress.is_empty() {
                "<pending>".to_string()
            } else {
                ingress.join(",")
            }
        }
        "ExternalName" => text(service, "/spec/externalName").to_string(),
        _ => "<unknown>".to_string(),
    }
}

/// `80/TCP,443:30443/TCP`.
fn service_ports(service: &Value) -> String {
    items(service, "/spec/ports")
        .iter()
        .map(|port| {
            let protocol = match text(port, "/protocol") {
                "" => "TCP",
                protocol => protocol,
            };
            match int(port, "/nodePort") {
                0 => format!("{}/{protocol}", int(port, "/port")),
                node_port => format!("{}:{node_port}/{protocol}", int(port, "/port")),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

const ENDPOINT_SLICE_COLUMNS: &[Column] = &[
    NAME,
    col(
        "AddressType",
        "string",
        "The type of addresses in the slice (IPv4, IPv6, FQDN).",
    ),
    col("Ports", "string", "The ports of the endpoints."),
    col(
        "Endpoints",
        "string",
        "The first addresses of the endpoints.",
    ),
    AGE,
];

/// kube's printer: ports as `p1,p2` (`<unset>` for a port-less slice), up
/// to three addresses then ` + N more...`.
fn endpoint_slice_cells(slice: &Value, now: Timestamp) -> Vec<Value> {
    let ports = items(slice, "/ports");
    let ports = match ports.is_empty() {
        true => "<unset>".to_string(),
        false => ports
            .iter()
            .map(|p| match p.pointer("/port").and_then(Value::as_i64) {
                Some(port) => port.to_string(),
                None => "<unset>".to_string(),
            })
            .collect::<Vec<_>>()
            .join(","),
    };
    let addresses: Vec<&str> = items(slice, "/endpoints")
        .iter()
        .flat_map(|e| items(e, "/addresses"))
        .filter_map(Value::as_str)
        .collect();
    let shown = match addresses.len() {
        0 => "<none>".to_string(),
        n if n > 3 => format!("{} + {} more...", addresses[..3].join(","), n - 3),
        _ => addresses.join(","),
    };
    vec![
        name_cell(slice),
        Value::from(text(slice, "/addressType")),
        Value::from(ports),
        Value::from(shown),
        age(slice, now),
    ]
}

const STORAGE_CLASS_COLUMNS: &[Column] = &[
    NAME,
    col("Provisioner", "string", "The provisioner of the class."),
    col(
        "ReclaimPolicy",
        "string",
        "What happens to released volumes.",
    ),
    col(
        "VolumeBindingMode",
        "string",
        "When volumes are bound and provisioned.",
    ),
    col("AllowVolumeExpansion", "string", "Whether claims may grow."),
    AGE,
];

/// kube's printer: the default class's name followed by ` (default)`.
fn storage_class_cells(class: &Value, now: Timestamp) -> Vec<Value> {
    let name = text(class, "/metadata/name");
    let annotations = class.pointer("/metadata/annotations");
    let is_default = [
        "storageclass.kubernetes.io/is-default-class",
        "storageclass.beta.kubernetes.io/is-default-class",
    ]
    .iter()
    .any(|k| annotations.and_then(|a| a.get(*k)).and_then(Value::as_str) == Some("true"));
    let name = match is_default {
        true => format!("{name} (default)"),
        false => name.to_string(),
    };
    let or = |pointer: &str, default: &str| match text(class, pointer) {
        "" => default.to_string(),
        value => value.to_string(),
    };
    let expansion = class
        .pointer("/allowVolumeExpansion")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    vec![
        Value::from(name),
        Value::from(text(class, "/provisioner")),
        Value::from(or("/reclaimPolicy", "Delete")),
        Value::from(or("/volumeBindingMode", "Immediate")),
        Value::from(expansion.to_string()),
        age(class, now),
    ]
}

const ENDPOINTS_COLUMNS: &[Column] = &[
    NAME,
    col(
        "Endpoints",
        "string",
        "The first addresses and ports of the endpoints.",
    ),
    AGE,
];

fn endpoints_cells(endpoints: &Value, now: Timestamp) -> Vec<Value> {
    vec![
        name_cell(endpoints),
        Value::from(format_endpoints(endpoints)),
        age(endpoints, now),
    ]
}

/// Up to three `ip:port` (or bare ip for port-less subsets), then
/// ` + N more...`; `<none>` without subsets.
fn format_endpoints(endpoints: &Value) -> String {
    const SHOWN: usize = 3;
    let subsets = items(endpoints, "/subsets");
    if subsets.is_empty() {
        return "<none>".to_string();
    }
    let mut shown: Vec<String> = Vec::new();
    let mut total = 0;
    for subset in subsets {
        let ips: Vec<&str> = items(subset, "/addresses")
            .iter()
            .map(|a| text(a, "/ip"))
            .collect();
        let ports = items(subset, "/ports");
        if ports.is_empty() {
            total += ips.len();
            shown.extend(
                ips.iter()
                    .take(SHOWN - shown.len())
                    .map(|ip| ip.to_string()),
            );
            continue;
        }
        for port in ports {
            total += ips.len();
            let port = int(port, "/port");
            for ip in &ips {
                if shown.len() == SHOWN {
                    break;
                }
                shown.push(if ip.contains(':') {
                    format!("[{ip}]:{port}")
                } else {
                    format!("{ip}:{port}")
                });
            }
        }
    }
    let joined = shown.join(",");
    if total > SHOWN {
        format!("{joined} + {} more...", total - SHOWN)
    } else {
        joined
    }
}

// ---------------------------------------------------------------------------
// Configuration and identity

const CONFIGMAP_COLUMNS: &[Column] = &[
    NAME,
    col("Data", "string", "Number of keys in data and binaryData."),
    AGE,
];

fn configmap_cells(config_map: &Value, now: Timestamp) -> Vec<Value> {
    let keys = count(config_map, "/data") + count(config_map, "/binaryData");
    vec![
        name_cell(config_map),
        Value::from(keys),
        age(config_map, now),
    ]
}

const SECRET_COLUMNS: &[Column] = &[
    NAME,
    col("Type", "string", "The type of the secret."),
    col("Data", "string", "Number of keys in data."),
    AGE,
];

fn secret_cells(secret: &Value, now: Timestamp) -> Vec<Value> {
    let secret_type = match text(secret, "/type") {
        "" => "Opaque",
        other => other,
    };
    vec![
        name_cell(secret),
        Value::from(secret_type),
        Value::from(count(secret, "/data")),
        age(secret, now),
    ]
}

const SERVICE_ACCOUNT_COLUMNS: &[Column] = &[
    NAME,
    col("Secrets", "string", "Number of secrets listed."),
    AGE,
];

fn service_account_cells(account: &Value, now: Timestamp) -> Vec<Value> {
    vec![
        name_cell(account),
        Value::from(count(account, "/secrets")),
        age(account, now),
    ]
}

// ---------------------------------------------------------------------------
// Events

const EVENT_COLUMNS: &[Column] = &[
    col("Last Seen", "string", "Time since the event was last seen."),
    col("Type", "string", "Normal or Warning."),
    col("Reason", "string", "Why the event happened, in one word."),
    col("Object", "string", "The object the event is about."),
    wide(
        "Subobject",
        "string",
        "The field path of the part of the object, e.g. a container.",
    ),
    wide("Source", "string", "The component that reported the event."),
    col("Message", "string", "A human-readable description."),
    wide(
        "First Seen",
        "string",
        "Time since the event was first seen.",
    ),
    wide("Count", "string", "How many times the event happened."),
    Column {
        priority: 1,
        ..NAME
    },
];

fn event_cells(event: &Value, now: Timestamp) -> Vec<Value> {
    let first_seen = timestamp(event, "/firstTimestamp").or_else(|| timestamp(event, "/eventTime"));
    let mut last_seen = timestamp(event, "/lastTimestamp").or(first_seen);
    let mut times = int(event, "/count");
    if let Some(series) = event.get("series").filter(|s| s.is_object()) {
        last_seen = timestamp(series, "/lastObservedTime");
        times = int(series, "/count");
    } else if times == 0 {
        times = 1;
    }
    let kind = text(event, "/involvedObject/kind").to_ascii_lowercase();
    let object = match text(event, "/involvedObject/name") {
        "" => kind,
        name => format!("{kind}/{name}"),
    };
    let component = first_non_empty(
        text(event, "/source/component"),
        text(event, "/reportingComponent"),
    );
    let instance = first_non_empty(
        text(event, "/source/host"),
        text(event, "/reportingInstance"),
    );
    let source = match instance {
        "" => component.to_string(),
        instance => format!("{component}, {instance}"),
    };
    vec![
        Value::from(since(last_seen, now)),
        Value::from(text(event, "/type")),
        Value::from(text(event, "/reason")),
        Value::from(object),
        Value::from(text(event, "/involvedObject/fieldPath")),
        Value::from(source),
        Value::from(text(event, "/message").trim()),
        Value::from(since(first_seen, now)),
        Value::from(times),
        name_cell(event),
    ]
}

fn first_non_empty<'a>(a: &'a str, b: &'a str) -> &'a str {
    if a.is_empty() {
        b
    } else {
        a
    }
}

// ---------------------------------------------------------------------------
// Storage

const PV_COLUMNS: &[Column] = &[
    NAME,
    col("Capacity", "string", "The storage capacity of the volume."),
    col("Access Modes", "string", "How the volume can be mounted."),
    col(
        "Reclaim Policy",
        "string",
        "What happens to the volume when released from its claim.",
    ),
    col("Status", "string", "The phase of the volume."),
    col("Claim", "string", "The claim bound to the volume."),
    col("StorageClass", "string", "StorageClass of the pv"),
    col(
        "VolumeAttributesClass",
        "string",
        "VolumeAttributesClass of the pv",
    ),
    col("Reason", "string", "Why the volume is in its phase."),
    AGE,
    wide("VolumeMode", "string", "Filesystem or Block."),
];

fn pv_cells(volume: &Value, now: Timestamp) -> Vec<Value> {
    let claim = match volume.pointer("/spec/claimRef") {
        Some(claim) => format!("{}/{}", text(claim, "/namespace"), text(claim, "/name")),
        None => String::new(),
    };
    let class = volume
        .pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class")
        .map_or_else(
            || text(volume, "/spec/storageClassName").to_string(),
            scalar,
        );
    vec![
        name_cell(volume),
        Value::from(text(volume, "/spec/capacity/storage")),
        Value::from(access_modes(items(volume, "/spec/accessModes"))),
        Value::from(text(volume, "/spec/persistentVolumeReclaimPolicy")),
        Value::from(phase_or_terminating(volume)),
        Value::from(claim),
        Value::from(class),
        Value::from(or_unset(text(volume, "/spec/volumeAttributesClassName"))),
        Value::from(text(volume, "/status/reason")),
        age(volume, now),
        Value::from(or_unset(text(volume, "/spec/volumeMode"))),
    ]
}

const PVC_COLUMNS: &[Column] = &[
    NAME,
    col("Status", "string", "The phase of the claim."),
    col("Volume", "string", "The volume bound to the claim."),
    col("Capacity", "string", "The capacity of the bound volume."),
    col(
        "Access Modes",
        "string",
        "How the bound volume can be mounted.",
    ),
    col("StorageClass", "string", "StorageClass of the pvc"),
    col(
        "VolumeAttributesClass",
        "string",
        "VolumeAttributesClass of the pvc",
    ),
    AGE,
    wide("VolumeMode", "string", "Filesystem or Block."),
];

fn pvc_cells(claim: &Value, now: Timestamp) -> Vec<Value> {
    let volume = text(claim, "/spec/volumeName");
    let (capacity, modes) = if volume.is_empty() {
        (String::new(), String::new())
    } else {
        (
            text(claim, "/status/capacity/storage").to_string(),
            access_modes(items(claim, "/status/accessModes")),
        )
    };
    let class = claim
        .pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class")
        .map_or_else(|| text(claim, "/spec/storageClassName").to_string(), scalar);
    vec![
        name_cell(claim),
        Value::from(phase_or_terminating(claim)),
        Value::from(volume),
        Value::from(capacity),
        Value::from(modes),
        Value::from(class),
        Value::from(or_unset(text(
            claim,
            "/status/currentVolumeAttributesClassName",
        ))),
        age(claim, now),
        Value::from(or_unset(text(claim, "/spec/volumeMode"))),
    ]
}

fn or_unset(value: &str) -> String {
    if value.is_empty() {
        "<unset>".to_string()
    } else {
        value.to_string()
    }
}

fn phase_or_terminating(object: &Value) -> String {
    if object.pointer("/metadata/deletionTimestamp").is_some() {
        "Terminating".to_string()
    } else {
        text(object, "/status/phase").to_string()
    }
}

/// `RWO,ROX,RWX,RWOP`, in that order, each once.
fn access_modes(modes: &[Value]) -> String {
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(mode, _)| modes.iter().any(|m| m.as_str() == Some(mode)))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

// ---------------------------------------------------------------------------
// Policy, scheduling, coordination

const QUOTA_COLUMNS: &[Column] = &[
    NAME,
    col(
        "Request",
        "string",
        "Used and hard amounts of the quota's requests.",
    ),
    col(
        "Limit",
        "string",
        "Used and hard amounts of the quota's limits.",
    ),
    AGE,
];

/// `resource: used/hard` for every hard limit, sorted by resource name;
/// `limits.*` go to the LIMIT column, the rest to REQUEST.
fn quota_cells(quota: &Value, now: Timestamp) -> Vec<Value> {
    let mut resources: Vec<(&String, &Value)> = entries(quota, "/status/hard")
        .into_iter()
        .flatten()
        .collect();
    resources.sort_by(|a, b| a.0.cmp(b.0));
    let (mut requests, mut limits) = (Vec::new(), Vec::new());
    for (resource, hard) in resources {
        let used = entries(quota, "/status/used")
            .and_then(|used| used.get(resource))
            .map_or_else(|| "0".to_string(), scalar);
        let entry = format!("{resource}: {used}/{}", scalar(hard));
        if resource.starts_with("limits.") {
            limits.push(entry);
        } else {
            requests.push(entry);
        }
    }
    vec![
        name_cell(quota),
        Value::from(requests.join(", ")),
        Value::from(limits.join(", ")),
        age(quota, now),
    ]
}

const PRIORITY_CLASS_COLUMNS: &[Column] = &[
    NAME,
    col("Value", "integer", "The priority of pods of this class."),
    col(
        "Global-Default",
        "boolean",
        "Whether pods without a class get this one.",
    ),
    AGE,
    col(
        "PreemptionPolicy",
        "string",
        "Whether pods of this class may preempt lower-priority ones.",
    ),
];

fn priority_class_cells(class: &Value, now: Timestamp) -> Vec<Value> {
    let policy = match text(class, "/preemptionPolicy") {
        "" => "PreemptLowerPriority",
        policy => policy,
    };
    vec![
        name_cell(class),
        Value::from(int(class, "/value")),
        Value::from(
            class
                .get("globalDefault")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        ),
        age(class, now),
        Value::from(policy),
    ]
}

const LEASE_COLUMNS: &[Column] = &[
    NAME,
    col("Holder", "string", "The current holder of the lease."),
    AGE,
];

fn lease_cells(lease: &Value, now: Timestamp) -> Vec<Value> {
    vec![
        name_cell(lease),
        Value::from(text(lease, "/spec/holderIdentity")),
        age(lease, now),
    ]
}

const PDB_COLUMNS: &[Column] = &[
    NAME,
    col(
        "Min Available",
        "string",
        "The minimum number of pods that must be available.",
    ),
    col(
        "Max Unavailable",
        "string",
        "The maximum number of pods that may be unavailable.",
    ),
    col(
        "Allowed Disruptions",
        "integer",
        "Calculated number of pods that may be disrupted at this time.",
    ),
    AGE,
];

fn pdb_cells(budget: &Value, now: Timestamp) -> Vec<Value> {
    let int_or_string = |pointer: &str| {
        budget
            .pointer(pointer)
            .filter(|v| !v.is_null())
            .map_or_else(|| "N/A".to_string(), scalar)
    };
    vec![
        name_cell(budget),
        Value::from(int_or_string("/spec/minAvailable")),
        Value::from(int_or_string("/spec/maxUnavailable")),
        Value::from(int(budget, "/status/disruptionsAllowed")),
        age(budget, now),
    ]
}

const BINDING_COLUMNS: &[Column] = &[
    NAME,
    col("Role", "string", "The role the binding grants (kind/name)."),
    AGE,
    wide(
        "Users",
        "string",
        "The users the binding grants the role to.",
    ),
    wide(
        "Groups",
        "string",
        "The groups the binding grants the role to.",
    ),
    wide(
        "ServiceAccounts",
        "string",
        "The service accounts (namespace/name) the binding grants the role to.",
    ),
];

fn binding_cells(binding: &Value, now: Timestamp) -> Vec<Value> {
    let subjects = items(binding, "/subjects");
    let of_kind = |kind: &str| {
        subjects
            .iter()
            .filter(|s| text(s, "/kind") == kind)
            .map(|s| match kind {
                "ServiceAccount" => format!("{}/{}", text(s, "/namespace"), text(s, "/name")),
                _ => text(s, "/name").to_string(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    vec![
        name_cell(binding),
        Value::from(format!(
            "{}/{}",
            text(binding, "/roleRef/kind"),
            text(binding, "/roleRef/name")
        )),
        age(binding, now),
        Value::from(of_kind("User")),
        Value::from(of_kind("Group")),
        Value::from(of_kind("ServiceAccount")),
    ]
}

// ---------------------------------------------------------------------------
// Resources without a printer of their own

/// What the real apiserver shows for a type without a printer (LimitRange):
/// the name and the creation time as RFC 3339.
const CREATED_AT_COLUMNS: &[Column] = &[
    NAME,
    col(
        "Created At",
        "date",
        "When the object was created (metadata.creationTimestamp).",
    ),
];

fn created_at_cells(object: &Value, _now: Timestamp) -> Vec<Value> {
    vec![
        name_cell(object),
        Value::from(text(object, "/metadata/creationTimestamp")),
    ]
}

const DEFAULT_COLUMNS: &[Column] = &[NAME, AGE];

fn default_cells(object: &Value, now: Timestamp) -> Vec<Value> {
    vec![name_cell(object), age(object, now)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources;
    use axum::http::header;
    use axum::http::HeaderValue;

    const NOW: &str = "2025-01-01T12:00:00Z";

    fn now() -> Timestamp {
        NOW.parse().unwrap()
    }

    /// `now - seconds` as the API writes times.
    fn ago(seconds: i64) -> String {
        (now() - SignedDuration::from_secs(seconds)).to_string()
    }

    fn resource(group: &str, plural: &str) -> &'static ResourceType {
        resources::all()
            .iter()
            .find(|r| r.group == group && r.plural == plural)
            .unwrap()
    }

    /// The header kubectl prints: column names in upper case, the wide ones
    /// only with `-o wide`.
    fn header(group: &str, plural: &str, wide: bool) -> String {
        printer_for(resource(group, plural))
            .columns
            .iter()
            .filter(|c| wide || c.priority == 0)
            .map(|c| c.name.to_uppercase())
            .collect::<Vec<_>>()
            .join(" | ")
    }

    fn cells(group: &str, plural: &str, object: Value) -> Vec<Value> {
        let table = table(
            resource(group, plural),
            &[object],
            None,
            IncludeObject::None,
            TableVersion::V1,
            now(),
        );
        table["rows"][0]["cells"].as_array().unwrap().clone()
    }

    fn accept(value: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_static(value));
        headers
    }

    #[test]
    fn bindings_show_their_role_and_subjects() {
        let binding = serde_json::json!({
            "metadata": {"name": "b", "creationTimestamp": "2026-11-27T00:00:00Z"},
            "roleRef": {"kind": "ClusterRole", "name": "view"},
            "subjects": [
                {"kind": "User", "name": "alice"}, {"kind": "User", "name": "bob"},
                {"kind": "Group", "name": "qa"},
                {"kind": "ServiceAccount", "name": "bot", "namespace": "ci"}
            ]
        });
        let now: Timestamp = "2026-11-27T00:05:00Z".parse().unwrap();
        let cells = binding_cells(&binding, now);
        assert_eq!(cells[1], "ClusterRole/view");
        assert_eq!(cells[3], "alice, bob");
        assert_eq!(cells[4], "qa");
        assert_eq!(cells[5], "ci/bot");
        assert_eq!(cells.len(), BINDING_COLUMNS.len());
    }

    #[test]
    fn human_duration_follows_apimachinery_boundaries() {
        let cases = [
            (-2, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (5, "5s"),
            (119, "119s"),
            (120, "2m"),
            (182, "3m2s"),
            (599, "9m59s"),
            (600, "10m"),
            (3 * 3600 - 1, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60, "3h1m"),
            (8 * 3600 - 1, "7h59m"),
            (8 * 3600, "8h"),
            (5 * 3600 + 30 * 60, "5h30m"),
            (48 * 3600 - 1, "47h"),
            (48 * 3600, "2d"),
            (51 * 3600, "2d3h"),
            (8 * 86400 - 1, "7d23h"),
            (8 * 86400, "8d"),
            (10 * 86400, "10d"),
            (730 * 86400 - 1, "729d"),
            (730 * 86400, "2y"),
            (750 * 86400, "2y20d"),
            (8 * 365 * 86400, "8y"),
            (10 * 365 * 86400 + 86400, "10y"),
        ];
        for (seconds, want) in cases {
            assert_eq!(
                human_duration(SignedDuration::from_secs(seconds)),
                want,
                "{seconds}s"
            );
        }
        // Go truncates toward zero: a second and a half ahead is still "now".
        assert_eq!(human_duration(SignedDuration::from_millis(-1500)), "0s");
    }

    #[test]
    fn accept_negotiation() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(wants_table(&accept(kubectl)), Some(TableVersion::V1));
        assert_eq!(
            wants_table(&accept("application/json;as=Table;v=v1beta1;g=meta.k8s.io")),
            Some(TableVersion::V1beta1)
        );
        assert_eq!(
            wants_table(&accept(
                "application/json;as=Table;v=v1beta1;g=meta.k8s.io, application/json; as=Table; v=v1; g=meta.k8s.io"
            )),
            Some(TableVersion::V1)
        );
        assert_eq!(wants_table(&accept("application/json")), None);
        assert_eq!(wants_table(&HeaderMap::new()), None);
        assert_eq!(
            wants_table(&accept("application/json;as=Table;v=v1;g=meta.k8s.io;q=0")),
            None
        );
        assert_eq!(
            wants_table(&accept(
                "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io"
            )),
            None
        );
        assert_eq!(
            wants_table(&accept("application/json;as=Table;v=v1;g=other.io")),
            None
        );
        assert_eq!(
            content_type(TableVersion::V1),
            "application/json;as=Table;v=v1;g=meta.k8s.io"
        );
    }

    #[test]
    fn include_object_from_query() {
        assert_eq!(
            IncludeObject::from_query(None).unwrap(),
            IncludeObject::Metadata
        );
        assert_eq!(
            IncludeObject::from_query(Some("None")).unwrap(),
            IncludeObject::None
        );
        assert_eq!(
            IncludeObject::from_query(Some("Object")).unwrap(),
            IncludeObject::Object
        );
        let err = IncludeObject::from_query(Some("All")).unwrap_err();
        assert!(
            err.to_string().contains("None, Metadata or Object"),
            "{err}"
        );
    }

    #[test]
    fn endpoint_slices_and_storage_classes_print_as_kubectl_shows_them() {
        let slice = json!({"metadata": {"name": "web-abc"}, "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080}],
            "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"]},
                          {"addresses": ["10.0.0.3"]}, {"addresses": ["10.0.0.4"]}]});
        let row = cells("discovery.k8s.io", "endpointslices", slice);
        assert_eq!(row[1], "IPv4");
        assert_eq!(row[2], "8080");
        assert_eq!(row[3], "10.0.0.1,10.0.0.2,10.0.0.3 + 1 more...");
        let class = json!({"metadata": {"name": "standard",
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "skiff.dev/host-path"});
        let row = cells("storage.k8s.io", "storageclasses", class);
        assert_eq!(row[0], "standard (default)");
        assert_eq!(row[2], "Delete");
        assert_eq!(row[3], "Immediate");
    }

    #[test]
    fn column_sets_are_the_ones_kubectl_users_know() {
        assert_eq!(
            header("", "pods", false),
            "NAME | READY | STATUS | RESTARTS | AGE"
        );
        assert_eq!(
            header("", "pods", true),
            "NAME | READY | STATUS | RESTARTS | AGE | IP | NODE | NOMINATED NODE | READINESS GATES"
        );
        assert_eq!(
            header("apps", "deployments", true),
            "NAME | READY | UP-TO-DATE | AVAILABLE | AGE | CONTAINERS | IMAGES | SELECTOR"
        );
        assert_eq!(
            header("apps", "replicasets", false),
            "NAME | DESIRED | CURRENT | READY | AGE"
        );
        assert_eq!(header("apps", "statefulsets", false), "NAME | READY | AGE");
        assert_eq!(
            header("apps", "daemonsets", false),
            "NAME | DESIRED | CURRENT | READY | UP-TO-DATE | AVAILABLE | NODE SELECTOR | AGE"
        );
        assert_eq!(
            header("batch", "jobs", false),
            "NAME | STATUS | COMPLETIONS | DURATION | AGE"
        );
        assert_eq!(
            header("batch", "cronjobs", false),
            "NAME | SCHEDULE | TIMEZONE | SUSPEND | ACTIVE | LAST SCHEDULE | AGE"
        );
        assert_eq!(
            header("", "services", false),
            "NAME | TYPE | CLUSTER-IP | EXTERNAL-IP | PORT(S) | AGE"
        );
        assert_eq!(
            header("", "nodes", false),
            "NAME | STATUS | ROLES | AGE | VERSION"
        );
        assert_eq!(
            header("", "nodes", true),
            "NAME | STATUS | ROLES | AGE | VERSION | INTERNAL-IP | EXTERNAL-IP | OS-IMAGE | KERNEL-VERSION | CONTAINER-RUNTIME"
        );
        assert_eq!(header("", "namespaces", false), "NAME | STATUS | AGE");
        assert_eq!(header("", "configmaps", false), "NAME | DATA | AGE");
        assert_eq!(header("", "secrets", false), "NAME | TYPE | DATA | AGE");
        assert_eq!(
            header("", "events", false),
            "LAST SEEN | TYPE | REASON | OBJECT | MESSAGE"
        );
        assert_eq!(header("", "serviceaccounts", false), "NAME | SECRETS | AGE");
        assert_eq!(header("", "endpoints", false), "NAME | ENDPOINTS | AGE");
        assert_eq!(
            header("discovery.k8s.io", "endpointslices", false),
            "NAME | ADDRESSTYPE | PORTS | ENDPOINTS | AGE"
        );
        assert_eq!(
            header("storage.k8s.io", "storageclasses", false),
            "NAME | PROVISIONER | RECLAIMPOLICY | VOLUMEBINDINGMODE | ALLOWVOLUMEEXPANSION | AGE"
        );
        assert_eq!(header("", "limitranges", false), "NAME | CREATED AT");
        assert_eq!(
            header("policy", "poddisruptionbudgets", false),
            "NAME | MIN AVAILABLE | MAX UNAVAILABLE | ALLOWED DISRUPTIONS | AGE"
        );
        let pods = printer_for(resource("", "pods"));
        assert_eq!(pods.columns[0].format, "name");
    }

    #[test]
    fn every_served_resource_renders_one_cell_per_column() {
        let bare = json!({"metadata": {"name": "x", "creationTimestamp": ago(5)}});
        for resource in resources::all() {
            let table = table(
                resource,
                std::slice::from_ref(&bare),
                None,
                IncludeObject::None,
                TableVersion::V1,
                now(),
            );
            let columns = table["columnDefinitions"].as_array().unwrap();
            let cells = table["rows"][0]["cells"].as_array().unwrap();
            assert_eq!(cells.len(), columns.len(), "{}", resource.plural);
            let names: Vec<&str> = columns
                .iter()
                .map(|c| c["name"].as_str().unwrap())
                .collect();
            assert!(names.contains(&"Name"), "{}", resource.plural);
        }
    }

    fn container_status(name: &str, state: Value, ready: bool, restarts: i64) -> Value {
        json!({"name": name, "state": state, "ready": ready, "restartCount": restarts, "image": "busybox", "imageID": ""})
    }

    fn pod(containers: &[&str], status: Value) -> Value {
        let containers: Vec<Value> = containers
            .iter()
            .map(|c| json!({"name": c, "image": "busybox"}))
            .collect();
        json!({
            "metadata": {"name": "web", "namespace": "default", "creationTimestamp": ago(45)},
            "spec": {"containers": containers},
            "status": status,
        })
    }

    /// READY, STATUS, RESTARTS of the pod's row.
    fn pod_columns(pod: Value) -> (String, String, String) {
        let cells = cells("", "pods", pod);
        let s = |i: usize| cells[i].as_str().unwrap().to_string();
        (s(1), s(2), s(3))
    }

    #[test]
    fn pending_pods() {
        let unscheduled = pod(&["app"], json!({"phase": "Pending"}));
        assert_eq!(
            pod_columns(unscheduled.clone()),
            ("0/1".into(), "Pending".into(), "0".into())
        );
        let creating = pod(
            &["app"],
            json!({"phase": "Pending", "containerStatuses": [
                container_status("app", json!({"waiting": {"reason": "ContainerCreating"}}), false, 0)
            ]}),
        );
        assert_eq!(pod_columns(creating).1, "ContainerCreating");
        let cells = cells("", "pods", unscheduled);
        assert_eq!(cells[0], "web");
        assert_eq!(cells[4], "45s");
        assert_eq!(&cells[5..], &["<none>", "<none>", "<none>", "<none>"]);
    }

    #[test]
    fn running_pod_with_one_of_two_ready() {
        let running = pod(
            &["app", "sidecar"],
            json!({
                "phase": "Running",
                "podIP": "10.244.0.7",
                "podIPs": [{"ip": "10.244.0.7"}],
                "containerStatuses": [
                    container_status("app", json!({"running": {"startedAt": ago(40)}}), true, 0),
                    container_status("sidecar", json!({"running": {"startedAt": ago(40)}}), false, 0),
                ],
            }),
        );
        let mut running = running;
        running["spec"]["nodeName"] = json!("node-1");
        assert_eq!(
            pod_columns(running.clone()),
            ("1/2".into(), "Running".into(), "0".into())
        );
        let cells = cells("", "pods", running);
        assert_eq!(cells[5], "10.244.0.7");
        assert_eq!(cells[6], "node-1");
    }

    #[test]
    fn crash_looping_pod_shows_the_waiting_reason_and_last_restart() {
        let mut status = container_status(
            "app",
            json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}),
            false,
            5,
        );
        status["lastState"] =
            json!({"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": ago(30)}});
        let crashing = pod(
            &["app"],
            json!({"phase": "Running", "containerStatuses": [status]}),
        );
        assert_eq!(
            pod_columns(crashing),
            (
                "0/1".into(),
                "CrashLoopBackOff".into(),
                "5 (30s ago)".into()
            )
        );
    }

    #[test]
    fn terminating_and_finished_pods() {
        let mut terminating = pod(
            &["app"],
            json!({"phase": "Running", "containerStatuses": [
                container_status("app", json!({"running": {}}), true, 0)
            ]}),
        );
        terminating["metadata"]["deletionTimestamp"] = json!(ago(1));
        assert_eq!(pod_columns(terminating).1, "Terminating");

        let succeeded = pod(
            &["app"],
            json!({"phase": "Succeeded", "containerStatuses": [
                container_status("app", json!({"terminated": {"exitCode": 0, "reason": "Completed"}}), false, 0)
            ]}),
        );
        assert_eq!(
            pod_columns(succeeded.clone()),
            ("0/1".into(), "Completed".into(), "0".into())
        );
        let table = table(
            resource("", "pods"),
            std::slice::from_ref(&succeeded),
            None,
            IncludeObject::None,
            TableVersion::V1,
            now(),
        );
        assert_eq!(table["rows"][0]["conditions"][0]["reason"], "Succeeded");

        // A finished pod being deleted keeps its final status.
        let mut deleted = succeeded;
        deleted["metadata"]["deletionTimestamp"] = json!(ago(1));
        assert_eq!(pod_columns(deleted).1, "Completed");

        let killed = pod(
            &["app"],
            json!({"phase": "Failed", "containerStatuses": [
                container_status("app", json!({"terminated": {"exitCode": 137, "signal": 9}}), false, 0)
            ]}),
        );
        assert_eq!(pod_columns(killed).1, "Signal:9");
    }

    #[test]
    fn initializing_pods() {
        let mut initializing = pod(
            &["app"],
            json!({"phase": "Pending", "initContainerStatuses": [
                container_status("setup", json!({"terminated": {"exitCode": 0, "reason": "Completed"}}), false, 0),
                container_status("migrate", json!({"running": {}}), false, 0),
            ]}),
        );
        initializing["spec"]["initContainers"] = json!([{"name": "setup"}, {"name": "migrate"}]);
        assert_eq!(pod_columns(initializing.clone()).1, "Init:1/2");

        initializing["status"]["initContainerStatuses"][1]["state"] =
            json!({"waiting": {"reason": "CrashLoopBackOff"}});
        initializing["status"]["initContainerStatuses"][1]["restartCount"] = json!(3);
        assert_eq!(
            pod_columns(initializing.clone()),
            ("0/1".into(), "Init:CrashLoopBackOff".into(), "3".into())
        );

        initializing["status"]["initContainerStatuses"][1]["state"] =
            json!({"terminated": {"exitCode": 2}});
        assert_eq!(pod_columns(initializing).1, "Init:ExitCode:2");
    }

    #[test]
    fn sidecars_count_among_the_containers() {
        let mut with_sidecar = pod(
            &["app"],
            json!({"phase": "Running",
                "initContainerStatuses": [{
                    "name": "proxy", "state": {"running": {}}, "ready": true, "started": true, "restartCount": 1
                }],
                "containerStatuses": [container_status("app", json!({"running": {}}), true, 0)],
                "conditions": [{"type": "Initialized", "status": "True"}]}),
        );
        with_sidecar["spec"]["initContainers"] =
            json!([{"name": "proxy", "restartPolicy": "Always"}]);
        assert_eq!(
            pod_columns(with_sidecar),
            ("2/2".into(), "Running".into(), "1".into())
        );
    }

    #[test]
    fn readiness_gates_count_true_conditions() {
        let mut gated = pod(
            &["app"],
            json!({"phase": "Running", "conditions": [
                {"type": "example.com/lb", "status": "True"},
                {"type": "example.com/dns", "status": "False"},
            ]}),
        );
        gated["spec"]["readinessGates"] =
            json!([{"conditionType": "example.com/lb"}, {"conditionType": "example.com/dns"}]);
        assert_eq!(cells("", "pods", gated)[8], "1/2");
    }

    #[test]
    fn row_object_follows_include_object() {
        let pods = [pod(&["app"], json!({"phase": "Pending"}))];
        let list = json!({"resourceVersion": "117", "continue": "abc"});
        let render = |include| {
            table(
                resource("", "pods"),
                &pods,
                Some(&list),
                include,
                TableVersion::V1,
                now(),
            )
        };

        let none = render(IncludeObject::None);
        assert!(none["rows"][0].get("object").is_none());
        assert_eq!(
            none["metadata"],
            json!({"resourceVersion": "117", "continue": "abc"})
        );
        assert_eq!(none["kind"], "Table");
        assert_eq!(none["apiVersion"], "meta.k8s.io/v1");

        let metadata = render(IncludeObject::Metadata);
        assert_eq!(
            metadata["rows"][0]["object"],
            json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": pods[0]["metadata"],
            })
        );

        let object = render(IncludeObject::Object);
        let row_object = &object["rows"][0]["object"];
        assert_eq!(row_object["kind"], "Pod");
        assert_eq!(row_object["apiVersion"], "v1");
        assert_eq!(row_object["spec"], pods[0]["spec"]);
    }

    #[test]
    fn single_object_tables_carry_its_resource_version() {
        let mut one = pod(&["app"], json!({}));
        one["metadata"]["resourceVersion"] = json!("42");
        let table = table(
            resource("", "pods"),
            &[one],
            None,
            IncludeObject::Metadata,
            TableVersion::V1beta1,
            now(),
        );
        assert_eq!(table["metadata"], json!({"resourceVersion": "42"}));
        assert_eq!(table["apiVersion"], "meta.k8s.io/v1beta1");
        assert_eq!(
            table["rows"][0]["object"]["apiVersion"],
            "meta.k8s.io/v1beta1"
        );
    }

    #[test]
    fn deployment_row() {
        let deployment = json!({
            "metadata": {"name": "web", "creationTimestamp": ago(3 * 60 + 2)},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}, "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["front", "back"]},
                    {"key": "canary", "operator": "DoesNotExist"},
                ]},
                "template": {"spec": {"containers": [
                    {"name": "nginx", "image": "nginx:1.27"},
                    {"name": "log", "image": "busybox"},
                ]}},
            },
            "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2},
        });
        assert_eq!(
            cells("apps", "deployments", deployment),
            vec![
                json!("web"),
                json!("2/3"),
                json!(3),
                json!(2),
                json!("3m2s"),
                json!("nginx,log"),
                json!("nginx:1.27,busybox"),
                json!("app=web,!canary,tier in (back,front)"),
            ]
        );
    }

    #[test]
    fn node_rows() {
        let node = json!({
            "metadata": {"name": "n1", "creationTimestamp": ago(5 * 3600), "labels": {
                "node-role.kubernetes.io/control-plane": "",
                "node-role.kubernetes.io/worker": "",
                "kubernetes.io/hostname": "n1",
            }},
            "spec": {"unschedulable": true},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Debian"},
            },
        });
        let cells = cells("", "nodes", node.clone());
        assert_eq!(
            &cells[..7],
            &[
                "n1",
                "Ready,SchedulingDisabled",
                "control-plane,worker",
                "5h",
                "v1.32.0",
                "10.0.0.1",
                "<none>"
            ]
        );
        assert_eq!(&cells[7..], &["Debian", "<unknown>", "<unknown>"]);

        let mut bare = node;
        bare["metadata"]["labels"] = json!({});
        bare["spec"] = json!({});
        bare["status"]["conditions"][0]["status"] = json!("Unknown");
        let cells = self::cells("", "nodes", bare);
        assert_eq!(&cells[1..3], &["NotReady", "<none>"]);
    }

    #[test]
    fn service_rows() {
        let service = json!({
            "metadata": {"name": "web", "creationTimestamp": ago(10)},
            "spec": {
                "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                "ports": [{"port": 80, "protocol": "TCP"}, {"port": 443, "nodePort": 30443}],
                "selector": {"app": "web"},
            },
        });
        assert_eq!(
            cells("", "services", service.clone()),
            vec![
                json!("web"),
                json!("ClusterIP"),
                json!("10.96.0.10"),
                json!("<none>"),
                json!("80/TCP,443:30443/TCP"),
                json!("10s"),
                json!("app=web"),
            ]
        );
        let mut balanced = service;
        balanced["spec"]["type"] = json!("LoadBalancer");
        assert_eq!(cells("", "services", balanced.clone())[3], "<pending>");
        balanced["status"] = json!({"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}});
        assert_eq!(cells("", "services", balanced)[3], "1.2.3.4");
    }

    #[test]
    fn other_rows() {
        let job = json!({
            "metadata": {"name": "pi", "creationTimestamp": ago(100)},
            "spec": {"completions": 1},
            "status": {"succeeded": 1, "startTime": ago(100), "completionTime": ago(80),
                "conditions": [{"type": "Complete", "status": "True"}]},
        });
        assert_eq!(
            &cells("batch", "jobs", job)[..5],
            &["pi", "Complete", "1/1", "20s", "100s"]
        );

        let cron = json!({
            "metadata": {"name": "tick", "creationTimestamp": ago(7200)},
            "spec": {"schedule": "*/1 * * * *", "suspend": false},
            "status": {"active": [{"name": "tick-1"}], "lastScheduleTime": ago(30)},
        });
        assert_eq!(
            &cells("batch", "cronjobs", cron)[..7],
            &[
                json!("tick"),
                json!("*/1 * * * *"),
                json!("<none>"),
                json!("False"),
                json!(1),
                json!("30s"),
                json!("120m")
            ]
        );

        let config = json!({"metadata": {"name": "cfg"}, "data": {"a": "1", "b": "2"}, "binaryData": {"c": ""}});
        assert_eq!(
            cells("", "configmaps", config),
            vec![json!("cfg"), json!(3), json!("<unknown>")]
        );

        let event = json!({
            "metadata": {"name": "web.1"},
            "involvedObject": {"kind": "Pod", "name": "web"},
            "type": "Normal", "reason": "Scheduled", "message": "Assigned default/web to n1\n",
            "source": {"component": "default-scheduler"},
            "firstTimestamp": ago(60), "lastTimestamp": ago(30),
        });
        assert_eq!(
            cells("", "events", event),
            vec![
                json!("30s"),
                json!("Normal"),
                json!("Scheduled"),
                json!("pod/web"),
                json!(""),
                json!("default-scheduler"),
                json!("Assigned default/web to n1"),
                json!("60s"),
                json!(1),
                json!("web.1"),
            ]
        );

        let endpoints = json!({"metadata": {"name": "web"}, "subsets": [{
            "addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}, {"ip": "10.0.0.3"}, {"ip": "10.0.0.4"}],
            "ports": [{"port": 80}],
        }]});
        assert_eq!(
            cells("", "endpoints", endpoints)[1],
            "10.0.0.1:80,10.0.0.2:80,10.0.0.3:80 + 1 more..."
        );

        let budget = json!({"metadata": {"name": "pdb"}, "spec": {"minAvailable": 1}, "status": {"disruptionsAllowed": 0}});
        assert_eq!(
            &cells("policy", "poddisruptionbudgets", budget)[..4],
            &[json!("pdb"), json!("1"), json!("N/A"), json!(0)]
        );
    }

    /// Pods in the states kubectl users meet, for the run against kubectl.
    fn sample_pods() -> Vec<Value> {
        let mut running = pod(
            &["app", "log"],
            json!({"phase": "Running", "podIPs": [{"ip": "10.244.0.7"}], "containerStatuses": [
                container_status("app", json!({"running": {}}), true, 0),
                container_status("log", json!({"running": {}}), false, 0),
            ]}),
        );
        running["metadata"]["name"] = json!("web-1");
        running["metadata"]["labels"] = json!({"app": "web"});
        running["spec"]["nodeName"] = json!("node-1");
        let mut crashing = pod(
            &["app"],
            json!({"phase": "Running", "containerStatuses": [
                container_status("app", json!({"waiting": {"reason": "CrashLoopBackOff"}}), false, 4),
            ]}),
        );
        crashing["status"]["containerStatuses"][0]["lastState"] =
            json!({"terminated": {"exitCode": 1, "finishedAt": ago(75)}});
        crashing["metadata"]["name"] = json!("web-2");
        crashing["metadata"]["creationTimestamp"] = json!(ago(3 * 86400 + 7200));
        let mut pending = pod(&["app"], json!({"phase": "Pending"}));
        pending["metadata"]["name"] = json!("web-3");
        vec![running, crashing, pending]
    }

    /// Serves discovery and a Table of `sample_pods` and runs the real
    /// kubectl: `cargo test -p skiff-apiserver table -- --ignored --nocapture`.
    #[tokio::test]
    #[ignore = "runs the kubectl binary on PATH"]
    async fn real_kubectl_prints_the_table() {
        use axum::{extract::Path, routing::get, Router};

        fn reply(
            headers: &HeaderMap,
            pods: &[Value],
            list: Option<&Value>,
        ) -> ([(header::HeaderName, &'static str); 1], String) {
            match wants_table(headers) {
                Some(version) => {
                    let body = table(
                        resource("", "pods"),
                        pods,
                        list,
                        IncludeObject::Metadata,
                        version,
                        now(),
                    );
                    (
                        [(header::CONTENT_TYPE, content_type(version))],
                        body.to_string(),
                    )
                }
                None => (
                    [(header::CONTENT_TYPE, "application/json")],
                    json!({
                        "kind": "PodList", "apiVersion": "v1", "metadata": list, "items": pods,
                    })
                    .to_string(),
                ),
            }
        }
        let app = Router::new()
            .route(
                "/api/v1/namespaces/default/pods",
                get(|headers: HeaderMap| async move {
                    reply(
                        &headers,
                        &sample_pods(),
                        Some(&json!({"resourceVersion": "117"})),
                    )
                }),
            )
            .route(
                "/api/v1/namespaces/default/pods/{name}",
                get(|headers: HeaderMap, Path(name): Path<String>| async move {
                    let pods: Vec<Value> = sample_pods()
                        .into_iter()
                        .filter(|p| p["metadata"]["name"] == name.as_str())
                        .collect();
                    reply(&headers, &pods, None)
                }),
            )
            .merge(crate::discovery::router());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });

        let home = tempfile::tempdir().unwrap();
        let mut outputs = Vec::new();
        for args in [
            &["get", "pods"][..],
            &["get", "pods", "-o", "wide"],
            &["get", "pod", "web-2"],
            &["get", "pods", "--show-labels"],
        ] {
            let output = tokio::process::Command::new("kubectl")
                .env("HOME", home.path())
                .arg("--server")
                .arg(&server)
                .arg("--cache-dir")
                .arg(home.path().join("cache"))
                .args(args)
                .output()
                .await
                .unwrap();
            let stdout = String::from_utf8_lossy(&output.stdout).to_string();
            println!(
                "$ kubectl {}\n{stdout}{}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr)
            );
            assert!(output.status.success(), "kubectl {args:?} failed");
            outputs.push(stdout);
        }
        let header: Vec<&str> = outputs[0]
            .lines()
            .next()
            .unwrap()
            .split_whitespace()
            .collect();
        assert_eq!(header, ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
        assert!(outputs[0].contains("CrashLoopBackOff"), "{}", outputs[0]);
        assert!(
            outputs[1]
                .lines()
                .next()
                .unwrap()
                .contains("NOMINATED NODE"),
            "{}",
            outputs[1]
        );
        assert!(outputs[3].contains("app=web"), "{}", outputs[3]);
    }
}
