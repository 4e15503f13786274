//! Checks of an object before it is stored: it decodes as its type (400),
//! its names, metadata and commonly-wrong fields are valid (422, worded as
//! Kubernetes words them), strict unknown fields. Not defaulting or admission.

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::resources::ResourceType;
use crate::status::{ApiError, Cause};
use skiff_machinery::quote::{go_quote, go_string_slice};
use skiff_machinery::selectors::LabelSelector;

mod cluster;
mod cron;
mod decode;
mod events;
mod network;
mod pod;
mod pod_env;
mod quantities;
mod rbac;
mod security_context;
mod service_fields;
mod storage;
mod unknown_fields;
pub mod update;
pub mod warnings;
mod webhooks;
mod workload_fields;

pub use decode::{check_decodes, check_patched};
pub(crate) use pod::VOLUME_SOURCES;
pub use unknown_fields::{prune_unknown_fields, strict_decoding_error, strict_unknown_fields};

// String formats (k8s.io/apimachinery's util/validation) are skiff-machinery's.
pub(crate) use skiff_machinery::validation::{
    is_config_map_key, is_dns1035_label, is_dns1123_label, is_dns1123_subdomain, is_qualified_name,
    is_valid_label_value, is_valid_port_name, is_valid_port_num,
};

/// The most bytes of annotations (keys and values) one object may carry.
const TOTAL_ANNOTATION_SIZE: usize = 256 * 1024;
/// The most bytes of data one ConfigMap or Secret may carry.
const MAX_SECRET_SIZE: usize = 1024 * 1024;
const PORT_RANGE_ERR: &str = "must be between 1 and 65535, inclusive";
const NEGATIVE_ERR: &str = "must be greater than or equal to 0";

// ---------------------------------------------------------------------------
// Field causes, as k8s.io/apimachinery's field errors read
// ---------------------------------------------------------------------------

fn cause(reason: &'static str, field: impl Into<String>, message: String) -> Cause {
    Cause {
        reason,
        message,
        field: field.into(),
    }
}

fn with_detail(body: String, detail: &str) -> String {
    if detail.is_empty() {
        body
    } else {
        format!("{body}: {detail}")
    }
}

/// `value` is already rendered (quoted string, number, Go struct).
fn invalid(field: impl Into<String>, value: &str, detail: &str) -> Cause {
    cause(
        "FieldValueInvalid",
        field,
        with_detail(format!("Invalid value: {value}"), detail),
    )
}

fn required(field: impl Into<String>, detail: &str) -> Cause {
    cause(
        "FieldValueRequired",
        field,
        with_detail("Required value".to_string(), detail),
    )
}

fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> Cause {
    let listed: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
    let message = format!(
        "Unsupported value: {}: supported values: {}",
        go_quote(value),
        listed.join(", ")
    );
    cause("FieldValueNotSupported", field, message)
}

fn duplicate(field: impl Into<String>, value: &str) -> Cause {
    cause(
        "FieldValueDuplicate",
        field,
        format!("Duplicate value: {}", go_quote(value)),
    )
}

fn not_found(field: impl Into<String>, value: &str) -> Cause {
    cause(
        "FieldValueNotFound",
        field,
        format!("Not found: {}", go_quote(value)),
    )
}

fn forbidden(field: impl Into<String>, detail: &str) -> Cause {
    cause(
        "FieldValueForbidden",
        field,
        with_detail("Forbidden".to_string(), detail),
    )
}

fn too_long(field: impl Into<String>, max_bytes: usize) -> Cause {
    cause(
        "FieldValueTooLong",
        field,
        format!("Too long: may not be more than {max_bytes} bytes"),
    )
}

/// One Invalid cause per message about `value` at `field`.
fn invalid_each(causes: &mut Vec<Cause>, field: &str, value: &str, messages: Vec<String>) {
    causes.extend(messages.iter().map(|m| invalid(field, &go_quote(value), m)));
}

fn non_negative(causes: &mut Vec<Cause>, parent: &Value, name: &str, path: &str) {
    if let Some(n) = parent.get(name).and_then(Value::as_i64).filter(|n| *n < 0) {
        causes.push(invalid(
            format!("{path}.{name}"),
            &n.to_string(),
            NEGATIVE_ERR,
        ));
    }
}

// ---------------------------------------------------------------------------
// JSON access
// ---------------------------------------------------------------------------

static NULL: Value = Value::Null;

fn field<'a>(value: &'a Value, name: &str) -> &'a Value {
    value.get(name).unwrap_or(&NULL)
}

fn text<'a>(value: &'a Value, name: &str) -> &'a str {
    value.get(name).and_then(Value::as_str).unwrap_or_default()
}

fn items<'a>(value: &'a Value, name: &str) -> &'a [Value] {
    value
        .get(name)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn entries<'a>(value: &'a Value, name: &str) -> impl Iterator<Item = (&'a String, &'a str)> {
    value
        .get(name)
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k, v.as_str().unwrap_or_default()))
}

// ---------------------------------------------------------------------------
// Names and metadata
// ---------------------------------------------------------------------------

/// What is wrong with `name` as a name of `resource` (a generateName
/// prefix when `prefix`): DNS subdomain for most kinds, DNS-1123 label for
/// Namespace, DNS-1035 label for Service.
fn name_messages(resource: &ResourceType, name: &str, prefix: bool) -> Vec<String> {
    let masked;
    let name = if prefix && name.len() > 1 && name.ends_with('-') && name.is_ascii() {
        // A prefix may end in '-': Kubernetes checks it with the dash masked.
        masked = format!("{}a", &name[..name.len() - 2]);
        masked.as_str()
    } else {
        name
    };
    match (resource.group, resource.kind) {
        ("", "Namespace") => is_dns1123_label(name),
        ("", "Service") => is_dns1035_label(name),
        // Event names are not checked by Kubernetes beyond being a path segment.
        ("", "Event") => path_segment_messages(name),
        // RBAC names (`system:kube-scheduler`) need only be path segments.
        ("rbac.authorization.k8s.io", _) => path_segment_messages(name),
        _ => is_dns1123_subdomain(name),
    }
}

fn path_segment_messages(name: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if name == "." || name == ".." {
        errors.push(format!("may not be '{name}'"));
    }
    for bad in ["/", "%"] {
        if name.contains(bad) {
            errors.push(format!("may not contain '{bad}'"));
        }
    }
    errors
}

/// The causes against `metadata.name` for an object of `resource`.
pub fn validate_name(resource: &ResourceType, name: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    invalid_each(
        &mut causes,
        "metadata.name",
        name,
        name_messages(resource, name, false),
    );
    // A CronJob's name is the prefix of its Jobs' names, which carry a suffix.
    if resource.group == "batch" && resource.kind == "CronJob" && name.len() > 52 {
        causes.push(invalid(
            "metadata.name",
            &go_quote(name),
            "must be no more than 52 characters",
        ));
    }
    causes
}

/// The causes against `metadata.generateName` (a prefix; it may end in '-').
pub fn validate_generate_name(resource: &ResourceType, prefix: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    invalid_each(
        &mut causes,
        "metadata.generateName",
        prefix,
        name_messages(resource, prefix, true),
    );
    causes
}

/// The causes against an object's metadata that do not depend on its kind:
/// name or generateName present, generation, label keys and values,
/// annotation keys and total size, ownerReferences, finalizers.
pub fn validate_metadata(object: &Value) -> Vec<Cause> {
    let meta = field(object, "metadata");
    let mut causes = Vec::new();
    if text(meta, "name").is_empty() && text(meta, "generateName").is_empty() {
        causes.push(required(
            "metadata.name",
            "name or generateName is required",
        ));
    }
    non_negative(&mut causes, meta, "generation", "metadata");
    validate_labels(&mut causes, meta, "labels", "metadata.labels");
    validate_annotations(&mut causes, meta, "metadata.annotations");
    validate_owner_references(&mut causes, items(meta, "ownerReferences"));
    validate_finalizers(&mut causes, items(meta, "finalizers"));
    causes
}

/// Label keys and values of the map `parent[name]`, reported at `path`.
fn validate_labels(causes: &mut Vec<Cause>, parent: &Value, name: &str, path: &str) {
    for (key, value) in entries(parent, name) {
        invalid_each(causes, path, key, is_qualified_name(key));
        invalid_each(causes, path, value, is_valid_label_value(value));
    }
}

fn validate_annotations(causes: &mut Vec<Cause>, meta: &Value, path: &str) {
    let mut size = 0;
    for (key, value) in entries(meta, "annotations") {
        // Annotation keys are qualified names in any case.
        invalid_each(
            causes,
            path,
            key,
            is_qualified_name(&key.to_ascii_lowercase()),
        );
        size += key.len() + value.len();
    }
    if size > TOTAL_ANNOTATION_SIZE {
        causes.push(too_long(path, TOTAL_ANNOTATION_SIZE));
    }
}

fn validate_owner_references(causes: &mut Vec<Cause>, references: &[Value]) {
    const PATH: &str = "metadata.ownerReferences";
    let mut controller: Option<String> = None;
    for reference in references {
        let api_version = text(reference, "apiVersion");
        let version = match api_version.split('/').collect::<Vec<_>>().as_slice() {
            [version] | [_, version] => *version,
            _ => "",
        };
        let checks = [
            (
                "apiVersion",
                version,
                api_version,
                "version must not be empty",
            ),
            (
                "kind",
                text(reference, "kind"),
                text(reference, "kind"),
                "kind must not be empty",
            ),
            (
                "name",
                text(reference, "name"),
                text(reference, "name"),
                "name must not be empty",
            ),
            (
                "uid",
                text(reference, "uid"),
                text(reference, "uid"),
                "uid must not be empty",
            ),
        ];
        for (name, checked, shown, detail) in checks {
            if checked.is_empty() {
                causes.push(invalid(format!("{PATH}.{name}"), &go_quote(shown), detail));
            }
        }
        if reference.get("controller").and_then(Value::as_bool) == Some(true) {
            let current = format!("{}/{}", text(reference, "kind"), text(reference, "name"));
            match &controller {
                Some(first) => causes.push(invalid(
                    PATH,
                    &Value::Array(references.to_vec()).to_string(),
                    &format!(
                        "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {current}"
                    ),
                )),
                None => controller = Some(current),
            }
        }
    }
}

fn validate_finalizers(causes: &mut Vec<Cause>, finalizers: &[Value]) {
    const PATH: &str = "metadata.finalizers";
    let names: Vec<String> = finalizers
        .iter()
        .map(|f| f.as_str().unwrap_or_default().to_string())
        .collect();
    for name in &names {
        invalid_each(causes, PATH, name, is_qualified_name(name));
    }
    if names.iter().any(|n| n == "orphan") && names.iter().any(|n| n == "foregroundDeletion") {
        let detail = "finalizer orphan and foregroundDeletion cannot be both set";
        causes.push(invalid(PATH, &go_string_slice(&names), detail));
    }
}

// ---------------------------------------------------------------------------
// The whole object
// ---------------------------------------------------------------------------

/// Checks an object of `resource` before it is stored: a 400 when it does
/// not decode as its type (a wrong JSON type), else a 422 Invalid listing
/// every cause found in its metadata and in the fields Kubernetes requires
/// of its kind. The registry calls it after filling namespace and name.
pub fn validate_object(resource: &ResourceType, object: &Value) -> Result<(), ApiError> {
    check_decodes(resource, object)?;
    let meta = field(object, "metadata");
    let name = text(meta, "name");
    let mut causes = Vec::new();
    let generate_name = text(meta, "generateName");
    if !generate_name.is_empty() {
        causes.extend(validate_generate_name(resource, generate_name));
    }
    if !name.is_empty() {
        causes.extend(validate_name(resource, name));
    }
    let namespace = text(meta, "namespace");
    if resource.namespaced && !namespace.is_empty() {
        invalid_each(
            &mut causes,
            "metadata.namespace",
            namespace,
            is_dns1123_label(namespace),
        );
    }
    causes.extend(validate_metadata(object));
    validate_kind(resource, object, &mut causes);
    if let Some(custom) = &resource.custom {
        causes.extend(crate::crd::structural::validate(&custom.schema, object));
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid(
        resource.group,
        resource.kind,
        resource.plural,
        name,
        causes,
    ))
}

fn validate_kind(resource: &ResourceType, object: &Value, causes: &mut Vec<Cause>) {
    let spec = field(object, "spec");
    match (resource.group, resource.kind) {
        ("", "Pod") => validate_pod_spec(causes, spec, "spec", &[]),
        ("", "Service") => validate_service(causes, spec),
        ("", "ConfigMap") => validate_config_map(causes, object),
        ("", "Secret") => validate_secret(causes, object),
        ("apps", kind @ ("Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet")) => {
            validate_workload(causes, kind, spec)
        }
        ("batch", "Job") => validate_job_spec(causes, spec, "spec"),
        ("", "ResourceQuota") => quantities::validate_resource_quota(causes, spec),
        ("", "LimitRange") => quantities::validate_limit_range(causes, spec),
        ("", "PersistentVolumeClaim") => quantities::validate_claim_spec(causes, spec, "spec"),
        ("", "PersistentVolume") => quantities::validate_persistent_volume(causes, spec),
        ("", "Node") => cluster::validate_node(causes, object),
        ("", "Namespace") => cluster::validate_namespace(causes, spec),
        ("scheduling.k8s.io", "PriorityClass") => cluster::validate_priority_class(causes, object),
        ("policy", "PodDisruptionBudget") => cluster::validate_pod_disruption_budget(causes, spec),
        ("coordination.k8s.io", "Lease") => cluster::validate_lease(causes, spec),
        ("", "Event") => events::validate_event(causes, object),
        ("", "Endpoints") => network::validate_endpoints(causes, object),
        ("discovery.k8s.io", "EndpointSlice") => network::validate_endpoint_slice(causes, object),
        ("storage.k8s.io", "StorageClass") => storage::validate_storage_class(causes, object),
        ("apps", "ControllerRevision") => {
            if object.get("data").is_none_or(Value::is_null) {
                causes.push(required("data", "data is mandatory"));
            }
            if let Some(n) = object
                .get("revision")
                .and_then(Value::as_i64)
                .filter(|n| *n < 0)
            {
                causes.push(invalid("revision", &n.to_string(), NEGATIVE_ERR));
            }
        }
        (
            "admissionregistration.k8s.io",
            kind @ ("MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration"),
        ) => {
            let mutating = kind == "MutatingWebhookConfiguration";
            webhooks::validate_webhook_configuration(causes, object, mutating)
        }
        ("rbac.authorization.k8s.io", kind @ ("Role" | "ClusterRole")) => {
            rbac::validate_role(causes, object, kind == "Role")
        }
        ("rbac.authorization.k8s.io", kind @ ("RoleBinding" | "ClusterRoleBinding")) => {
            rbac::validate_binding(causes, object, kind == "RoleBinding")
        }
        ("apiextensions.k8s.io", "CustomResourceDefinition") if resource.custom.is_none() => {
            causes.extend(crate::crd::validate_definition(object))
        }
        ("batch", "CronJob") => cron::validate_cron_job_spec(causes, spec),
        _ => {}
    }
}

// ---------------------------------------------------------------------------
// Pods and pod templates
// ---------------------------------------------------------------------------

/// A pod spec; `claims` are volumes its mounts may name besides
/// `volumes` (a StatefulSet's volumeClaimTemplates, added to each pod).
fn validate_pod_spec(causes: &mut Vec<Cause>, spec: &Value, path: &str, claims: &[&str]) {
    let mut volumes: HashSet<&str> = claims.iter().copied().collect();
    for (i, volume) in items(spec, "volumes").iter().enumerate() {
        let name = text(volume, "name");
        let at = format!("{path}.volumes[{i}].name");
        if name.is_empty() {
            causes.push(required(at, ""));
        } else {
            invalid_each(causes, &at, name, is_dns1123_label(name));
            if !volumes.insert(name) {
                causes.push(duplicate(at, name));
            }
        }
    }
    let containers = items(spec, "containers");
    if containers.is_empty() {
        causes.push(required(format!("{path}.containers"), ""));
    }
    let mut names = HashSet::new();
    for (i, container) in containers.iter().enumerate() {
        let at = format!("{path}.containers[{i}]");
        validate_container(causes, container, &at, &mut names, &volumes);
        pod::validate_container_fields(causes, container, &at, false);
    }
    for (i, container) in items(spec, "initContainers").iter().enumerate() {
        let at = format!("{path}.initContainers[{i}]");
        validate_container(causes, container, &at, &mut names, &volumes);
        pod::validate_container_fields(causes, container, &at, true);
    }
    let restart_policy = text(spec, "restartPolicy");
    if !restart_policy.is_empty() && !["Always", "OnFailure", "Never"].contains(&restart_policy) {
        causes.push(not_supported(
            format!("{path}.restartPolicy"),
            restart_policy,
            &["Always", "OnFailure", "Never"],
        ));
    }
    pod::validate_pod_spec_fields(causes, spec, path);
}

fn validate_container<'a>(
    causes: &mut Vec<Cause>,
    container: &'a Value,
    path: &str,
    names: &mut HashSet<&'a str>,
    volumes: &HashSet<&str>,
) {
    let name = text(container, "name");
    if name.is_empty() {
        causes.push(required(format!("{path}.name"), ""));
    } else {
        invalid_each(
            causes,
            &format!("{path}.name"),
            name,
            is_dns1123_label(name),
        );
        if !names.insert(name) {
            causes.push(duplicate(format!("{path}.name"), name));
        }
    }
    let image = text(container, "image");
    if image.is_empty() {
        causes.push(required(format!("{path}.image"), ""));
    } else if image.trim() != image {
        let detail = "must not have leading or trailing whitespace";
        causes.push(invalid(format!("{path}.image"), &go_quote(image), detail));
    }
    validate_container_ports(causes, items(container, "ports"), &format!("{path}.ports"));
    quantities::validate_resource_requirements(
        causes,
        field(container, "resources"),
        &format!("{path}.resources"),
    );
    for (i, env) in items(container, "env").iter().enumerate() {
        if text(env, "name").is_empty() {
            causes.push(required(format!("{path}.env[{i}].name"), ""));
        }
    }
    validate_volume_mounts(
        causes,
        items(container, "volumeMounts"),
        &format!("{path}.volumeMounts"),
        volumes,
    );
}

fn validate_container_ports(causes: &mut Vec<Cause>, ports: &[Value], path: &str) {
    let mut names = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let name = text(port, "name");
        if !name.is_empty() {
            let messages = is_valid_port_name(name);
            if !messages.is_empty() {
                invalid_each(causes, &format!("{at}.name"), name, messages);
            } else if !names.insert(name) {
                causes.push(duplicate(format!("{at}.name"), name));
            }
        }
        match port
            .get("containerPort")
            .and_then(Value::as_i64)
            .unwrap_or(0)
        {
            0 => causes.push(required(format!("{at}.containerPort"), "")),
            n if !is_valid_port_num(n) => causes.push(invalid(
                format!("{at}.containerPort"),
                &n.to_string(),
                PORT_RANGE_ERR,
            )),
            _ => {}
        }
        match port.get("hostPort").and_then(Value::as_i64).unwrap_or(0) {
            n if n != 0 && !is_valid_port_num(n) => causes.push(invalid(
                format!("{at}.hostPort"),
                &n.to_string(),
                PORT_RANGE_ERR,
            )),
            _ => {}
        }
        check_protocol(causes, port, &at);
    }
}

fn check_protocol(causes: &mut Vec<Cause>, port: &Value, path: &str) {
    let protocol = text(port, "protocol");
    if !protocol.is_empty() && !["SCTP", "TCP", "UDP"].contains(&protocol) {
        causes.push(not_supported(
            format!("{path}.protocol"),
            protocol,
            &["SCTP", "TCP", "UDP"],
        ));
    }
}

fn validate_volume_mounts(
    causes: &mut Vec<Cause>,
    mounts: &[Value],
    path: &str,
    volumes: &HashSet<&str>,
) {
    let mut mount_paths = HashSet::new();
    for (i, mount) in mounts.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let name = text(mount, "name");
        if name.is_empty() {
            causes.push(required(format!("{at}.name"), ""));
        }
        if !volumes.contains(name) {
            causes.push(not_found(format!("{at}.name"), name));
        }
        let mount_path = text(mount, "mountPath");
        if mount_path.is_empty() {
            causes.push(required(format!("{at}.mountPath"), ""));
        }
        if !mount_paths.insert(mount_path) {
            causes.push(invalid(
                format!("{at}.mountPath"),
                &go_quote(mount_path),
                "must be unique",
            ));
        }
    }
}

/// A pod template: its labels and annotations, then its pod spec.
fn validate_pod_template(causes: &mut Vec<Cause>, template: &Value, path: &str, claims: &[&str]) {
    let meta = field(template, "metadata");
    validate_labels(causes, meta, "labels", &format!("{path}.labels"));
    validate_annotations(causes, meta, &format!("{path}.annotations"));
    let spec_path = format!("{path}.spec");
    validate_pod_spec(causes, field(template, "spec"), &spec_path, claims);
    pod::validate_template_only(causes, field(template, "spec"), &spec_path);
}

/// The template's restartPolicy, `Always` when unset (Kubernetes' default).
fn template_restart_policy(template: &Value) -> &str {
    match text(field(template, "spec"), "restartPolicy") {
        "" => "Always",
        policy => policy,
    }
}

// ---------------------------------------------------------------------------
// Workloads: Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob
// ---------------------------------------------------------------------------

fn validate_workload(causes: &mut Vec<Cause>, kind: &str, spec: &Value) {
    if kind != "DaemonSet" {
        non_negative(causes, spec, "replicas", "spec");
    }
    let selector = spec.get("selector").filter(|s| !s.is_null());
    match selector {
        None => causes.push(required("spec.selector", "")),
        Some(selector) => {
            validate_label_selector(causes, selector, "spec.selector");
            if selector_is_empty(selector) {
                // Kubernetes words the ReplicaSet case as for a deployment.
                let noun = match kind {
                    "StatefulSet" => "statefulset",
                    "DaemonSet" => "daemonset",
                    _ => "deployment",
                };
                let detail = format!("empty selector is invalid for {noun}");
                causes.push(invalid(
                    "spec.selector",
                    &go_label_selector(selector),
                    &detail,
                ));
            }
        }
    }
    let template = field(spec, "template");
    check_selector_matches_template(causes, selector, template, "spec");
    let claims: Vec<&str> = items(spec, "volumeClaimTemplates")
        .iter()
        .map(|claim| text(field(claim, "metadata"), "name"))
        .filter(|name| !name.is_empty())
        .collect();
    validate_pod_template(causes, template, "spec.template", &claims);
    let policy = template_restart_policy(template);
    if policy != "Always" {
        causes.push(not_supported(
            "spec.template.spec.restartPolicy",
            policy,
            &["Always"],
        ));
    }
    workload_fields::validate_workload_fields(causes, kind, spec);
}

/// The selector must select the template's labels; a missing selector
/// selects nothing, an empty one everything.
fn check_selector_matches_template(
    causes: &mut Vec<Cause>,
    selector: Option<&Value>,
    template: &Value,
    path: &str,
) {
    let labels = field(field(template, "metadata"), "labels");
    let empty = Map::new();
    let selects = match selector.map(LabelSelector::from_json) {
        None => false,
        Some(Ok(selector)) => {
            selector.is_empty() || selector.matches(labels.as_object().unwrap_or(&empty))
        }
        Some(Err(_)) => {
            let shown = go_label_selector(selector.unwrap_or(&NULL));
            causes.push(invalid(
                format!("{path}.selector"),
                &shown,
                "invalid label selector",
            ));
            return;
        }
    };
    if !selects {
        let detail = "`selector` does not match template `labels`";
        causes.push(invalid(
            format!("{path}.template.metadata.labels"),
            &go_string_map(labels),
            detail,
        ));
    }
}

fn selector_is_empty(selector: &Value) -> bool {
    let count = |name: &str| match selector.get(name) {
        Some(Value::Object(m)) => m.len(),
        Some(Value::Array(a)) => a.len(),
        _ => 0,
    };
    count("matchLabels") + count("matchExpressions") == 0
}

/// A `metav1.LabelSelector`'s own checks: label syntax of matchLabels, and
/// operator, key and values of each matchExpression.
fn validate_label_selector(causes: &mut Vec<Cause>, selector: &Value, path: &str) {
    validate_labels(
        causes,
        selector,
        "matchLabels",
        &format!("{path}.matchLabels"),
    );
    for (i, expression) in items(selector, "matchExpressions").iter().enumerate() {
        let at = format!("{path}.matchExpressions[{i}]");
        let values = items(expression, "values");
        match text(expression, "operator") {
            "In" | "NotIn" if values.is_empty() => causes.push(required(
                format!("{at}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => causes.push(forbidden(
                format!("{at}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => causes.push(invalid(
                format!("{at}.operator"),
                &go_quote(other),
                "not a valid selector operator",
            )),
        }
        let key = text(expression, "key");
        invalid_each(causes, &format!("{at}.key"), key, is_qualified_name(key));
        for (j, value) in values.iter().enumerate() {
            let value = value.as_str().unwrap_or_default();
            invalid_each(
                causes,
                &format!("{at}.values[{j}]"),
                value,
                is_valid_label_value(value),
            );
        }
    }
}

/// A Job's spec at `path` (`spec`, or `spec.jobTemplate.spec` of a CronJob).
/// Its selector is the server's to generate, so it is optional here.
fn validate_job_spec(causes: &mut Vec<Cause>, spec: &Value, path: &str) {
    for name in ["parallelism", "completions", "backoffLimit"] {
        non_negative(causes, spec, name, path);
    }
    let template = field(spec, "template");
    if let Some(selector) = spec.get("selector").filter(|s| !s.is_null()) {
        validate_label_selector(causes, selector, &format!("{path}.selector"));
        check_selector_matches_template(causes, Some(selector), template, path);
    }
    validate_pod_template(causes, template, &format!("{path}.template"), &[]);
    let policy = template_restart_policy(template);
    if policy != "OnFailure" && policy != "Never" {
        let at = format!("{path}.template.spec.restartPolicy");
        causes.push(not_supported(at, policy, &["OnFailure", "Never"]));
    }
    workload_fields::validate_job_fields(causes, spec, path);
}

// ---------------------------------------------------------------------------
// Services, ConfigMaps, Secrets
// ---------------------------------------------------------------------------

fn validate_service(causes: &mut Vec<Cause>, spec: &Value) {
    const TYPES: [&str; 4] = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
    let service_type = text(spec, "type");
    if !service_type.is_empty() && !TYPES.contains(&service_type) {
        causes.push(not_supported("spec.type", service_type, &TYPES));
    }
    let external = service_type == "ExternalName";
    if external && text(spec, "externalName").is_empty() {
        causes.push(required("spec.externalName", ""));
    }
    let ports = items(spec, "ports");
    if ports.is_empty() && text(spec, "clusterIP") != "None" && !external {
        causes.push(required("spec.ports", ""));
    }
    let mut names = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        validate_service_port(
            causes,
            port,
            &format!("spec.ports[{i}]"),
            ports.len() > 1,
            &mut names,
        );
    }
    validate_labels(causes, spec, "selector", "spec.selector");
    service_fields::validate_service_fields(causes, spec);
}

/// One port of a Service; `name_required` when the Service has several.
fn validate_service_port<'a>(
    causes: &mut Vec<Cause>,
    port: &'a Value,
    at: &str,
    name_required: bool,
    names: &mut HashSet<&'a str>,
) {
    let name = text(port, "name");
    if name.is_empty() && name_required {
        causes.push(required(format!("{at}.name"), ""));
    } else if !name.is_empty() {
        invalid_each(causes, &format!("{at}.name"), name, is_dns1123_label(name));
        if !names.insert(name) {
            causes.push(duplicate(format!("{at}.name"), name));
        }
    }
    let number = port.get("port").and_then(Value::as_i64).unwrap_or(0);
    if !is_valid_port_num(number) {
        causes.push(invalid(
            format!("{at}.port"),
            &number.to_string(),
            PORT_RANGE_ERR,
        ));
    }
    check_protocol(causes, port, at);
    match port.get("targetPort") {
        Some(Value::Number(n)) => match n.as_i64().unwrap_or(-1) {
            0 => {}
            n if !is_valid_port_num(n) => causes.push(invalid(
                format!("{at}.targetPort"),
                &n.to_string(),
                PORT_RANGE_ERR,
            )),
            _ => {}
        },
        Some(Value::String(s)) if !s.is_empty() => invalid_each(
            causes,
            &format!("{at}.targetPort"),
            s,
            is_valid_port_name(s),
        ),
        _ => {}
    }
}

/// The bytes a base64 string decodes to (data values are base64 in JSON).
fn base64_decoded_len(encoded: &str) -> usize {
    let padding = encoded.bytes().rev().take_while(|b| *b == b'=').count();
    (encoded.len() / 4 * 3).saturating_sub(padding)
}

fn validate_data_keys(causes: &mut Vec<Cause>, object: &Value, name: &str, path: &str) {
    for (key, _) in entries(object, name) {
        invalid_each(
            causes,
            &format!("{path}[{key}]"),
            key,
            is_config_map_key(key),
        );
    }
}

fn validate_config_map(causes: &mut Vec<Cause>, object: &Value) {
    validate_data_keys(causes, object, "data", "data");
    let binary = field(object, "binaryData");
    for (key, _) in entries(object, "data") {
        if binary.get(key).is_some() {
            let detail = "duplicate of key present in binaryData";
            causes.push(invalid(format!("data[{key}]"), &go_quote(key), detail));
        }
    }
    validate_data_keys(causes, object, "binaryData", "binaryData");
    let size: usize = entries(object, "data").map(|(_, v)| v.len()).sum::<usize>()
        + entries(object, "binaryData")
            .map(|(_, v)| base64_decoded_len(v))
            .sum::<usize>();
    if size > MAX_SECRET_SIZE {
        causes.push(too_long("", MAX_SECRET_SIZE));
    }
}

fn validate_secret(causes: &mut Vec<Cause>, object: &Value) {
    // stringData is merged into data before Kubernetes validates.
    validate_data_keys(causes, object, "data", "data");
    validate_data_keys(causes, object, "stringData", "data");
    let size: usize = entries(object, "data")
        .map(|(_, v)| base64_decoded_len(v))
        .sum::<usize>()
        + entries(object, "stringData")
            .map(|(_, v)| v.len())
            .sum::<usize>();
    if size > MAX_SECRET_SIZE {
        causes.push(too_long("data", MAX_SECRET_SIZE));
    }
    let has = |key: &str| {
        field(object, "data").get(key).is_some() || field(object, "stringData").get(key).is_some()
    };
    let need = |causes: &mut Vec<Cause>, key: &str| {
        if !has(key) {
            causes.push(required(format!("data[{key}]"), ""));
        }
    };
    match text(object, "type") {
        "kubernetes.io/service-account-token" => {
            let annotation = "kubernetes.io/service-account.name";
            if text(field(field(object, "metadata"), "annotations"), annotation).is_empty() {
                causes.push(required(format!("metadata.annotations[{annotation}]"), ""));
            }
        }
        "kubernetes.io/dockercfg" => need(causes, ".dockercfg"),
        "kubernetes.io/dockerconfigjson" => need(causes, ".dockerconfigjson"),
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            need(causes, "username");
            need(causes, "password");
        }
        "kubernetes.io/ssh-auth" => need(causes, "ssh-privatekey"),
        "kubernetes.io/tls" => {
            need(causes, "tls.crt");
            need(causes, "tls.key");
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------
// Go's rendering of maps and selectors in messages
// ---------------------------------------------------------------------------

/// A `map[string]string` as Go's `%#v` prints it, keys sorted.
fn go_string_map(map: &Value) -> String {
    let Some(map) = map.as_object() else {
        return "map[string]string(nil)".to_string();
    };
    let mut pairs: Vec<(&String, &Value)> = map.iter().collect();
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    let shown: Vec<String> = pairs
        .iter()
        .map(|(k, v)| {
            format!(
                "{}:{}",
                go_quote(k),
                go_quote(v.as_str().unwrap_or_default())
            )
        })
        .collect();
    format!("map[string]string{{{}}}", shown.join(", "))
}

/// A `metav1.LabelSelector` as Go's `%#v` prints it.
fn go_label_selector(selector: &Value) -> String {
    let expressions = match selector.get("matchExpressions").and_then(Value::as_array) {
        None => "[]v1.LabelSelectorRequirement(nil)".to_string(),
        Some(list) => {
            let shown: Vec<String> = list
                .iter()
                .map(|e| {
                    let values = match e.get("values").and_then(Value::as_array) {
                        None => "[]string(nil)".to_string(),
                        Some(v) => go_string_slice(
                            &v.iter()
                                .map(|s| s.as_str().unwrap_or_default().to_string())
                                .collect::<Vec<_>>(),
                        ),
                    };
                    format!(
                        "v1.LabelSelectorRequirement{{Key:{}, Operator:{}, Values:{values}}}",
                        go_quote(text(e, "key")),
                        go_quote(text(e, "operator"))
                    )
                })
                .collect();
            format!("[]v1.LabelSelectorRequirement{{{}}}", shown.join(", "))
        }
    };
    format!(
        "v1.LabelSelector{{MatchLabels:{}, MatchExpressions:{expressions}}}",
        go_string_map(field(selector, "matchLabels"))
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::unknown_fields::{prune_by_roundtrip, prune_struct};
    use super::*;
    use crate::resources::{find, find_kind};
    use serde_json::json;

    fn pod() -> &'static ResourceType {
        find("", "v1", "pods").unwrap()
    }

    pub(crate) fn kind(api_version: &str, kind: &str) -> &'static ResourceType {
        find_kind(api_version, kind).unwrap()
    }

    /// The `field: message` lines of the causes.
    fn lines(causes: &[Cause]) -> Vec<String> {
        causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    /// A Pod named `p` with this one container.
    pub(crate) fn pod_with_container(container: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [container]}})
    }

    /// The `field: message` lines of the 422 that `object` must draw.
    pub(crate) fn invalid_lines(resource: &ResourceType, object: Value) -> Vec<String> {
        let err = validate_object(resource, &object).expect_err("should be invalid");
        assert_eq!((err.code, err.reason), (422, "Invalid"), "{}", err.message);
        lines(&err.details.expect("details").causes)
    }

    #[test]
    fn unknown_fields_are_pruned_known_ones_kept_as_sent() {
        let mut object = good_pod();
        object["spec"]["foo"] = json!(1);
        object["spec"]["containers"][0]["bar"] = json!({"x": 1});
        object["metadata"]["labels"] = json!({"any-key": "kept"});
        let mut expected = object.clone();
        prune_unknown_fields(pod(), &mut object);
        expected["spec"].as_object_mut().unwrap().remove("foo");
        expected["spec"]["containers"][0]
            .as_object_mut()
            .unwrap()
            .remove("bar");
        assert_eq!(object, expected);
        let mut broken = json!({"spec": {"containers": 3}, "extra": 1});
        prune_unknown_fields(pod(), &mut broken);
        assert_eq!(broken, json!({"spec": {"containers": 3}}));
    }

    /// A value of every field the schema has (lists of one item, maps of
    /// one key; a definition inside itself is left empty), with an unknown
    /// field beside the known ones of every object. `inside`: the
    /// definitions being generated.
    pub(crate) fn instance(schema: &Value, inside: &mut Vec<String>) -> Value {
        if let Some(name) = crate::schema::definition_name(schema) {
            // Types that read several JSON shapes (apiextensions').
            if name.ends_with("OrBool") {
                return json!(true);
            }
            if name.ends_with("OrStringArray") {
                return json!(["1"]);
            }
            if name.ends_with("OrArray") {
                return json!({"type": "string"});
            }
            let Some(definition) = crate::schema::DEFINITIONS.get(name) else {
                return json!("1");
            };
            if inside.iter().any(|d| d == name) {
                return json!({});
            }
            inside.push(name.to_string());
            let value = instance(definition, inside);
            inside.pop();
            return value;
        }
        match schema.get("type").and_then(Value::as_str) {
            Some("object") => {
                if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                    let nested = inside.len() > 1;
                    let mut object: serde_json::Map<String, Value> = properties
                        .iter()
                        // A nested object's apiVersion and kind may have
                        // to be its type's own: left out.
                        .filter(|(name, _)| {
                            !(nested && matches!(name.as_str(), "apiVersion" | "kind"))
                        })
                        .map(|(name, field)| (name.clone(), instance(field, inside)))
                        .collect();
                    object.insert("zzUnknown".into(), json!({"a": 1}));
                    Value::Object(object)
                } else if let Some(values) = schema.get("additionalProperties") {
                    match values {
                        Value::Bool(_) => json!({"free": {"form": [1]}}),
                        values => json!({"key": instance(values, inside)}),
                    }
                } else {
                    json!({"free": {"form": [1]}})
                }
            }
            Some("array") => match schema.get("items") {
                Some(items) => json!([instance(items, inside)]),
                None => json!([]),
            },
            Some("integer") | Some("number") => json!(1),
            Some("boolean") => json!(true),
            Some("string") => match schema.get("format").and_then(Value::as_str) {
                Some("date-time") => json!("2024-01-01T00:00:00Z"),
                Some("byte") => json!("aGk="),
                _ => json!("1"),
            },
            _ => json!("1"),
        }
    }

    /// Every built-in resource served at its storage version, with an
    /// object of it that sets every field ([`instance`]), its apiVersion
    /// and kind.
    pub(crate) fn instances(
    ) -> impl Iterator<Item = (&'static crate::resources::ResourceType, Value)> {
        crate::resources::served()
            .filter(|r| r.custom.is_none() && r.conversion.is_none())
            .map(|resource| {
                let definition = &crate::schema::DEFINITIONS[resource.definition];
                let mut object = instance(definition, &mut vec![resource.definition.to_string()]);
                object["apiVersion"] = json!(resource.api_version());
                object["kind"] = json!(resource.kind);
                (resource, object)
            })
    }

    /// Pruning by the schema keeps exactly what the typed round trip
    /// keeps, for an object of every built-in resource with every field
    /// set and unknown fields at every level.
    #[test]
    fn pruning_by_the_schema_agrees_with_the_typed_round_trip() {
        let mut compared = Vec::new();
        let mut unreadable = Vec::new();
        for (resource, object) in instances() {
            if (resource.roundtrip)(&object).is_err() {
                unreadable.push(resource.plural);
                continue;
            }
            let mut by_schema = object.clone();
            prune_struct(&mut by_schema, resource.definition);
            let mut by_type = object.clone();
            prune_by_roundtrip(resource, &mut by_type);
            assert_ne!(by_type, object, "{}: nothing was pruned", resource.plural);
            assert_eq!(by_schema, by_type, "{}", resource.plural);
            compared.push(resource.plural);
        }
        assert!(
            compared.len() >= 30 && unreadable.is_empty(),
            "compared {compared:?}; the generated object was unreadable for {unreadable:?}"
        );
    }

    fn good_pod() -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx"}]}})
    }

    const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

    #[test]
    fn subdomain_names() {
        assert!(validate_name(pod(), "web").is_empty());
        assert!(validate_name(pod(), "web.example-1.com").is_empty());
        assert!(validate_name(pod(), &"a".repeat(253)).is_empty());
        assert_eq!(
            lines(&validate_name(pod(), &"a".repeat(254))),
            vec![format!(
                "metadata.name: Invalid value: \"{}\": must be no more than 253 characters",
                "a".repeat(254)
            )]
        );
        assert_eq!(
            lines(&validate_name(pod(), "Bad_Name")),
            vec![format!(
                "metadata.name: Invalid value: \"Bad_Name\": {SUBDOMAIN_MSG}"
            )]
        );
        for bad in [
            "-web", "web-", "web.", ".web", "a..b", "UPPER", "sp ace", "é",
        ] {
            assert_eq!(validate_name(pod(), bad).len(), 1, "{bad}");
        }
        let cause = &validate_name(pod(), "Bad")[0];
        assert_eq!(
            (cause.reason, cause.field.as_str()),
            ("FieldValueInvalid", "metadata.name")
        );
    }

    #[test]
    fn label_names_for_namespaces_and_services() {
        let namespace = find("", "v1", "namespaces").unwrap();
        assert!(validate_name(namespace, "kube-system").is_empty());
        assert_eq!(
            lines(&validate_name(namespace, "a.b")),
            vec!["metadata.name: Invalid value: \"a.b\": must not contain dots"]
        );
        assert_eq!(validate_name(namespace, &"n".repeat(63)).len(), 0);
        assert_eq!(
            lines(&validate_name(namespace, &"n".repeat(64)))[0],
            format!(
                "metadata.name: Invalid value: \"{}\": must be no more than 63 characters",
                "n".repeat(64)
            )
        );
        assert_eq!(
            lines(&validate_name(namespace, "Bad")),
            vec!["metadata.name: Invalid value: \"Bad\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"]
        );
        let service = find("", "v1", "services").unwrap();
        assert!(validate_name(service, "web-1").is_empty());
        assert_eq!(
            lines(&validate_name(service, "1web")),
            vec!["metadata.name: Invalid value: \"1web\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"]
        );
        let cronjob = kind("batch/v1", "CronJob");
        assert!(validate_name(cronjob, &"c".repeat(52)).is_empty());
        assert!(lines(&validate_name(cronjob, &"c".repeat(53)))[0]
            .ends_with("must be no more than 52 characters"));
    }

    #[test]
    fn generate_name_prefixes() {
        assert!(validate_generate_name(pod(), "web-").is_empty());
        assert!(validate_generate_name(find("", "v1", "services").unwrap(), "svc-").is_empty());
        let causes = validate_generate_name(pod(), "Web-");
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "metadata.generateName");
        assert!(causes[0]
            .message
            .starts_with("Invalid value: \"Web-\": a lowercase RFC 1123 subdomain"));
        // In a name (not a prefix) a trailing dash is an error.
        assert_eq!(validate_name(pod(), "web-").len(), 1);
    }

    #[test]
    fn metadata_rules() {
        assert_eq!(
            lines(&validate_metadata(&json!({"metadata": {}}))),
            vec!["metadata.name: Required value: name or generateName is required"]
        );
        assert_eq!(
            validate_metadata(&json!({"metadata": {}}))[0].reason,
            "FieldValueRequired"
        );
        assert!(validate_metadata(&json!({"metadata": {"generateName": "web-"}})).is_empty());
        let bad_labels = validate_metadata(
            &json!({"metadata": {"name": "a", "labels": {"Bad Key": "ok", "ok": "bad value"}}}),
        );
        assert_eq!(lines(&bad_labels), vec![
            "metadata.labels: Invalid value: \"Bad Key\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".to_string(),
            "metadata.labels: Invalid value: \"bad value\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".to_string(),
        ]);
        assert!(validate_metadata(
            &json!({"metadata": {"name": "a", "labels": {"example.com/app": "", "a": "B_1.x"}}})
        )
        .is_empty());
        assert_eq!(
            validate_metadata(&json!({"metadata": {"name": "a", "labels": {"a": "v".repeat(64)}}}))
                .len(),
            1
        );
        assert!(lines(&validate_metadata(
            &json!({"metadata": {"name": "a", "labels": {"/a": "v"}}})
        ))[0]
            .contains("prefix part must be non-empty"));
        // Annotation keys are checked without regard to case; values are free.
        assert!(validate_metadata(
            &json!({"metadata": {"name": "a", "annotations": {"Example.COM/Note": "any thing!"}}})
        )
        .is_empty());
        assert_eq!(
            validate_metadata(&json!({"metadata": {"name": "a", "annotations": {"bad key": "x"}}}))
                [0]
            .field,
            "metadata.annotations"
        );
        let big = json!({"metadata": {"name": "a", "annotations": {"a": "x".repeat(256 * 1024)}}});
        assert_eq!(
            lines(&validate_metadata(&big)),
            vec!["metadata.annotations: Too long: may not be more than 262144 bytes"]
        );
        let just_fits =
            json!({"metadata": {"name": "a", "annotations": {"a": "x".repeat(256 * 1024 - 1)}}});
        assert!(validate_metadata(&just_fits).is_empty());
    }

    #[test]
    fn owner_references_finalizers_generation() {
        let object = json!({"metadata": {"name": "a", "generation": -1,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs"}],
            "finalizers": ["bad finalizer", "example.com/ok"]}});
        let found = lines(&validate_metadata(&object));
        assert!(found.contains(
            &"metadata.generation: Invalid value: -1: must be greater than or equal to 0"
                .to_string()
        ));
        assert!(found.contains(
            &"metadata.ownerReferences.uid: Invalid value: \"\": uid must not be empty".to_string()
        ));
        assert!(found
            .iter()
            .any(|l| l
                .starts_with("metadata.finalizers: Invalid value: \"bad finalizer\": name part")));
        assert_eq!(found.len(), 3);
        let two_controllers = json!({"metadata": {"name": "a", "ownerReferences": [
            {"apiVersion": "v1", "kind": "A", "name": "a", "uid": "1", "controller": true},
            {"apiVersion": "v1", "kind": "B", "name": "b", "uid": "2", "controller": true}]}});
        let found = lines(&validate_metadata(&two_controllers));
        assert_eq!(found.len(), 1);
        assert!(found[0].ends_with("Only one reference can have Controller set to true. Found \"true\" in references for A/a and B/b"));
        let no_version = json!({"metadata": {"name": "a", "ownerReferences": [{"apiVersion": "apps/", "kind": "K", "name": "n", "uid": "u"}]}});
        assert_eq!(lines(&validate_metadata(&no_version)), vec!["metadata.ownerReferences.apiVersion: Invalid value: \"apps/\": version must not be empty"]);
        let both =
            json!({"metadata": {"name": "a", "finalizers": ["orphan", "foregroundDeletion"]}});
        assert_eq!(
            lines(&validate_metadata(&both)),
            vec!["metadata.finalizers: Invalid value: []string{\"orphan\", \"foregroundDeletion\"}: finalizer orphan and foregroundDeletion cannot be both set"]
        );
    }

    #[test]
    fn a_valid_pod_passes_and_errors_read_as_kubernetes() {
        assert_eq!(validate_object(pod(), &good_pod()), Ok(()));
        let mut bad = good_pod();
        bad["metadata"]["name"] = json!("Bad_Name");
        let err = validate_object(pod(), &bad).unwrap_err();
        assert_eq!(err.message, format!("Pod \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": {SUBDOMAIN_MSG}"));
        let mut bad_namespace = good_pod();
        bad_namespace["metadata"]["namespace"] = json!("Bad");
        assert_eq!(
            invalid_lines(pod(), bad_namespace)[0].split(':').next(),
            Some("metadata.namespace")
        );
        let mut unnamed = good_pod();
        unnamed["metadata"] = json!({"namespace": "default"});
        assert_eq!(
            invalid_lines(pod(), unnamed),
            vec!["metadata.name: Required value: name or generateName is required"]
        );
    }

    #[test]
    fn wrong_json_types_are_bad_requests() {
        let mut bad = good_pod();
        bad["spec"]["containers"] = json!("nginx");
        let err = validate_object(pod(), &bad).unwrap_err();
        assert_eq!((err.code, err.reason), (400, "BadRequest"));
        assert!(
            err.message == "Pod in version \"v1\" cannot be handled as a Pod: json: cannot unmarshal string into Go struct field PodSpec.spec.containers of type []v1.Container",
            "{}",
            err.message
        );
        let mut nested = good_pod();
        nested["spec"]["containers"][0]["ports"] = json!([{"containerPort": "80"}]);
        let err = validate_object(pod(), &nested).unwrap_err();
        assert!(
            err.message.ends_with(
                "json: cannot unmarshal string into Go struct field ContainerPort.spec.containers.ports.containerPort of type int32"
            ),
            "{}",
            err.message
        );
        let deployment = kind("apps/v1", "Deployment");
        let err = validate_object(
            deployment,
            &json!({"metadata": {"name": "d"}, "spec": {"replicas": "3"}}),
        )
        .unwrap_err();
        assert!(err.message.starts_with(
            "Deployment in version \"v1\" cannot be handled as a Deployment: json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas"
        ));
        // A type that decodes itself (a time) keeps serde's words.
        let mut stamped = good_pod();
        stamped["metadata"]["creationTimestamp"] = json!(5);
        let err = validate_object(pod(), &stamped).unwrap_err();
        assert!(
            err.message
                .contains("metadata.creationTimestamp: invalid type"),
            "{}",
            err.message
        );
    }

    #[test]
    fn pod_spec_rules() {
        let no_containers = json!({"metadata": {"name": "p"}, "spec": {"containers": []}});
        assert_eq!(
            invalid_lines(pod(), no_containers),
            vec!["spec.containers: Required value"]
        );
        assert_eq!(
            invalid_lines(pod(), json!({"metadata": {"name": "p"}})),
            vec!["spec.containers: Required value"]
        );
        let no_image = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}});
        let err = validate_object(pod(), &no_image).unwrap_err();
        assert_eq!(
            err.message,
            "Pod \"p\" is invalid: spec.containers[0].image: Required value"
        );
        assert_eq!(err.details.unwrap().causes[0].reason, "FieldValueRequired");
        let found = invalid_lines(
            pod(),
            json!({"metadata": {"name": "p"}, "spec": {
            "restartPolicy": "Sometimes",
            "volumes": [{"name": "data", "emptyDir": {}}],
            "initContainers": [{"name": "a", "image": "busybox"}],
            "containers": [
                {"image": "x"},
                {"name": "Bad_C", "image": " x"},
                {"name": "a", "image": "x", "env": [{"value": "1"}],
                 "ports": [{"containerPort": 70000}, {"containerPort": 80, "protocol": "tcp"}],
                 "volumeMounts": [{"name": "logs", "mountPath": "/l"}, {"name": "data", "mountPath": "/d"}]}
            ]}}),
        );
        let expected = [
            "spec.containers[0].name: Required value",
            "spec.containers[1].name: Invalid value: \"Bad_C\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
            "spec.containers[1].image: Invalid value: \" x\": must not have leading or trailing whitespace",
            "spec.containers[2].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
            "spec.containers[2].ports[1].protocol: Unsupported value: \"tcp\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
            "spec.containers[2].env[0].name: Required value",
            "spec.containers[2].volumeMounts[0].name: Not found: \"logs\"",
            "spec.initContainers[0].name: Duplicate value: \"a\"",
            "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
        ];
        assert_eq!(found, expected);
    }

    fn deployment(spec: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"}, "spec": spec})
    }

    fn template() -> Value {
        json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}})
    }

    #[test]
    fn workload_selectors_and_templates() {
        let resource = kind("apps/v1", "Deployment");
        let good = deployment(
            json!({"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": template()}),
        );
        assert_eq!(validate_object(resource, &good), Ok(()));
        let err =
            validate_object(resource, &deployment(json!({"template": template()}))).unwrap_err();
        assert_eq!(
            err.message,
            "Deployment.apps \"web\" is invalid: [spec.selector: Required value, spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`]"
        );
        let mismatch =
            deployment(json!({"selector": {"matchLabels": {"app": "db"}}, "template": template()}));
        assert_eq!(
            invalid_lines(resource, mismatch),
            vec!["spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`"]
        );
        let expressions = deployment(
            json!({"selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}]}, "template": template()}),
        );
        assert_eq!(validate_object(resource, &expressions), Ok(()));
        let empty = deployment(json!({"selector": {}, "template": template()}));
        assert_eq!(
            invalid_lines(resource, empty),
            vec!["spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid for deployment"]
        );
        let bad_operator = deployment(
            json!({"selector": {"matchExpressions": [{"key": "app", "operator": "Is", "values": ["web"]}]}, "template": template()}),
        );
        let found = invalid_lines(resource, bad_operator);
        assert_eq!(found[0], "spec.selector.matchExpressions[0].operator: Invalid value: \"Is\": not a valid selector operator");
        assert!(found[1].starts_with("spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement{v1.LabelSelectorRequirement{Key:\"app\", Operator:\"Is\", Values:[]string{\"web\"}}}}: invalid label selector"));
        let no_values = deployment(
            json!({"selector": {"matchExpressions": [{"key": "app", "operator": "In"}]}, "template": template()}),
        );
        assert!(invalid_lines(resource, no_values)[0]
            .starts_with("spec.selector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"));
        let mut never = template();
        never["spec"]["restartPolicy"] = json!("Never");
        let restart = deployment(
            json!({"replicas": -1, "selector": {"matchLabels": {"app": "web"}}, "template": never}),
        );
        assert_eq!(invalid_lines(resource, restart), vec![
            "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
            "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
        ]);
        let mut bad_label = template();
        bad_label["metadata"]["labels"]["x"] = json!("-bad");
        let found = invalid_lines(
            resource,
            deployment(json!({"selector": {"matchLabels": {"app": "web"}}, "template": bad_label})),
        );
        assert!(
            found[0].starts_with("spec.template.labels: Invalid value: \"-bad\""),
            "{found:?}"
        );
        let mut no_image = template();
        no_image["spec"]["containers"][0]
            .as_object_mut()
            .unwrap()
            .remove("image");
        let found = invalid_lines(
            resource,
            deployment(json!({"selector": {"matchLabels": {"app": "web"}}, "template": no_image})),
        );
        assert_eq!(
            found,
            vec!["spec.template.spec.containers[0].image: Required value"]
        );
    }

    #[test]
    fn other_workloads() {
        let statefulset = kind("apps/v1", "StatefulSet");
        let found = invalid_lines(
            statefulset,
            json!({"metadata": {"name": "s"}, "spec": {"selector": {"matchLabels": {}}, "template": template()}}),
        );
        assert_eq!(found, vec!["spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid for statefulset"]);
        let daemonset = kind("apps/v1", "DaemonSet");
        assert_eq!(
            invalid_lines(
                daemonset,
                json!({"metadata": {"name": "d"}, "spec": {"template": template()}})
            )[0],
            "spec.selector: Required value"
        );
        let replicaset = kind("apps/v1", "ReplicaSet");
        let good = json!({"metadata": {"name": "r"}, "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template()}});
        assert_eq!(validate_object(replicaset, &good), Ok(()));
    }

    /// A StatefulSet's pods mount its volumeClaimTemplates by name, which
    /// are not among the template's volumes; other names still must be.
    #[test]
    fn statefulset_mounts_may_name_its_claim_templates() {
        let statefulset = kind("apps/v1", "StatefulSet");
        let with_mounts = |mounts: Value| {
            let mut template = template();
            template["spec"]["containers"][0]["volumeMounts"] = mounts;
            json!({"metadata": {"name": "s"}, "spec": {
                "selector": {"matchLabels": {"app": "web"}}, "template": template,
                "volumeClaimTemplates": [{"metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}],
            }})
        };
        let good = with_mounts(json!([{"name": "data", "mountPath": "/data"}]));
        assert_eq!(validate_object(statefulset, &good), Ok(()));
        let bad = with_mounts(json!([{"name": "logs", "mountPath": "/logs"}]));
        assert_eq!(
            invalid_lines(statefulset, bad),
            vec!["spec.template.spec.containers[0].volumeMounts[0].name: Not found: \"logs\""]
        );
    }

    #[test]
    fn jobs_and_cronjobs() {
        let job = kind("batch/v1", "Job");
        let found = invalid_lines(
            job,
            json!({"metadata": {"name": "j"}, "spec": {"template": template()}}),
        );
        assert_eq!(found, vec!["spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\""]);
        let mut never = template();
        never["spec"]["restartPolicy"] = json!("Never");
        assert_eq!(
            validate_object(
                job,
                &json!({"metadata": {"name": "j"}, "spec": {"template": never.clone(), "backoffLimit": 4}})
            ),
            Ok(())
        );
        let found = invalid_lines(
            job,
            json!({"metadata": {"name": "j"}, "spec": {"template": never.clone(), "parallelism": -2}}),
        );
        assert_eq!(
            found,
            vec!["spec.parallelism: Invalid value: -2: must be greater than or equal to 0"]
        );
        let cronjob = kind("batch/v1", "CronJob");
        let found = invalid_lines(
            cronjob,
            json!({"metadata": {"name": "c"}, "spec": {"jobTemplate": {"spec": {"template": template()}}}}),
        );
        assert_eq!(found, vec![
            "spec.schedule: Required value",
            "spec.jobTemplate.spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\"",
        ]);
        let good = json!({"metadata": {"name": "c"}, "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": never}}}});
        assert_eq!(validate_object(cronjob, &good), Ok(()));
    }

    fn service(spec: Value) -> Value {
        json!({"metadata": {"name": "web"}, "spec": spec})
    }

    #[test]
    fn service_ports() {
        let resource = find("", "v1", "services").unwrap();
        assert_eq!(
            validate_object(
                resource,
                &service(
                    json!({"ports": [{"port": 80, "targetPort": "http"}], "selector": {"app": "web"}})
                )
            ),
            Ok(())
        );
        assert_eq!(
            validate_object(resource, &service(json!({"clusterIP": "None"}))),
            Ok(())
        );
        assert_eq!(
            validate_object(
                resource,
                &service(json!({"type": "ExternalName", "externalName": "db.example.com"}))
            ),
            Ok(())
        );
        assert_eq!(
            invalid_lines(resource, service(json!({}))),
            vec!["spec.ports: Required value"]
        );
        let found = invalid_lines(
            resource,
            service(json!({"type": "Magic", "ports": [
            {"name": "a", "port": 0},
            {"port": 70000, "targetPort": 70000, "protocol": "HTTP"},
            {"name": "a", "port": 80, "targetPort": "Bad--"}]})),
        );
        assert_eq!(found, vec![
            "spec.type: Unsupported value: \"Magic\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\"",
            "spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive",
            "spec.ports[1].name: Required value",
            "spec.ports[1].port: Invalid value: 70000: must be between 1 and 65535, inclusive",
            "spec.ports[1].protocol: Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
            "spec.ports[1].targetPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
            "spec.ports[2].name: Duplicate value: \"a\"",
            "spec.ports[2].targetPort: Invalid value: \"Bad--\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
            "spec.ports[2].targetPort: Invalid value: \"Bad--\": must not contain consecutive hyphens",
            "spec.ports[2].targetPort: Invalid value: \"Bad--\": must not begin or end with a hyphen",
        ]);
        assert_eq!(
            invalid_lines(resource, service(json!({"type": "ExternalName"}))),
            vec!["spec.externalName: Required value"]
        );
    }

    #[test]
    fn config_map_and_secret_keys() {
        let config_map = find("", "v1", "configmaps").unwrap();
        let good = json!({"metadata": {"name": "c"}, "data": {"app.properties": "x", "KEY_1-a": ""}, "binaryData": {"b.bin": "AAEC"}});
        assert_eq!(validate_object(config_map, &good), Ok(()));
        let err = validate_object(
            config_map,
            &json!({"metadata": {"name": "settings"}, "data": {"a b": "x"}}),
        )
        .unwrap_err();
        assert_eq!(
            err.message,
            "ConfigMap \"settings\" is invalid: data[a b]: Invalid value: \"a b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
        );
        let found = invalid_lines(
            config_map,
            json!({"metadata": {"name": "c"}, "data": {"..": "x", "k": "v"}, "binaryData": {"k": "AA=="}}),
        );
        assert_eq!(
            found,
            vec![
                "data[..]: Invalid value: \"..\": must not be '..'",
                "data[k]: Invalid value: \"k\": duplicate of key present in binaryData",
            ]
        );
        let huge = json!({"metadata": {"name": "c"}, "data": {"k": "x".repeat(1024 * 1024 + 1)}});
        assert_eq!(
            invalid_lines(config_map, huge),
            vec![": Too long: may not be more than 1048576 bytes"]
        );
        let secret = find("", "v1", "secrets").unwrap();
        assert_eq!(
            validate_object(
                secret,
                &json!({"metadata": {"name": "s"}, "type": "Opaque", "data": {"password": "cGFzcw=="}})
            ),
            Ok(())
        );
        let tls = json!({"metadata": {"name": "s"}, "type": "kubernetes.io/tls", "stringData": {"tls.crt": "pem", "bad key": "x"}});
        assert_eq!(invalid_lines(secret, tls), vec![
            "data[bad key]: Invalid value: \"bad key\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
            "data[tls.key]: Required value",
        ]);
        let token =
            json!({"metadata": {"name": "s"}, "type": "kubernetes.io/service-account-token"});
        assert_eq!(
            invalid_lines(secret, token),
            vec!["metadata.annotations[kubernetes.io/service-account.name]: Required value"]
        );
        let basic = json!({"metadata": {"name": "s"}, "type": "kubernetes.io/basic-auth", "stringData": {"password": "p"}});
        assert_eq!(validate_object(secret, &basic), Ok(()));
        let bad_base64 = json!({"metadata": {"name": "s"}, "data": {"k": "not base64!"}});
        assert_eq!(validate_object(secret, &bad_base64).unwrap_err().code, 400);
    }

    #[test]
    fn unknown_fields_for_strict_validation() {
        let mut object = good_pod();
        object["spec"]["foo"] = json!(1);
        object["spec"]["containers"][0]["bar"] = json!({"x": 1});
        object["metadata"]["labelz"] = json!({});
        object["spec"]["nodeName"] = Value::Null;
        object["status"] = json!({"phase": "Pending", "extra": true});
        let unknown = strict_unknown_fields(pod(), &object);
        assert_eq!(
            unknown,
            vec![
                "metadata.labelz",
                "spec.containers[0].bar",
                "spec.foo",
                "status.extra"
            ]
        );
        // Maps keep every key; quantities and int-or-strings are leaves.
        let mut known = good_pod();
        known["metadata"]["annotations"] = json!({"any/key": "v"});
        known["spec"]["containers"][0]["resources"] =
            json!({"limits": {"cpu": 1, "memory": "1Gi"}});
        known["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80, "name": "http"}]);
        known["spec"]["nodeSelector"] = json!({"disk": "ssd"});
        assert!(strict_unknown_fields(pod(), &known).is_empty());
        let deployment = kind("apps/v1", "Deployment");
        let mut rollout = deployment_with_strategy();
        assert!(strict_unknown_fields(deployment, &rollout).is_empty());
        rollout["spec"]["strategy"]["rollingUpdate"]["maxSpeed"] = json!(1);
        assert_eq!(
            strict_unknown_fields(deployment, &rollout),
            vec!["spec.strategy.rollingUpdate.maxSpeed"]
        );
        let worded: Vec<String> = unknown[1..3]
            .iter()
            .map(|f| format!("unknown field {}", go_quote(f)))
            .collect();
        let err = strict_decoding_error(pod(), &worded);
        assert_eq!((err.code, err.reason), (400, "BadRequest"));
        assert_eq!(
            err.message,
            "Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: unknown field \"spec.containers[0].bar\", unknown field \"spec.foo\""
        );
        let mut broken = good_pod();
        broken["spec"]["containers"] = json!(3);
        assert!(strict_unknown_fields(pod(), &broken).is_empty());
    }

    fn deployment_with_strategy() -> Value {
        deployment(
            json!({"selector": {"matchLabels": {"app": "web"}}, "template": template(),
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}}}),
        )
    }

    #[test]
    fn string_formats() {
        assert!(is_qualified_name("a").is_empty());
        assert!(is_qualified_name("kubernetes.io/metadata.name").is_empty());
        assert_eq!(is_qualified_name("a/b/c").len(), 1);
        assert_eq!(is_qualified_name("").len(), 2);
        assert!(is_valid_label_value("").is_empty());
        assert_eq!(is_valid_label_value("-a").len(), 1);
        assert!(is_dns1123_label("0abc").is_empty());
        assert_eq!(is_dns1035_label("0abc").len(), 1);
        assert_eq!(is_dns1035_label("").len(), 1);
        assert_eq!(is_dns1123_subdomain("").len(), 1);
        assert_eq!(
            is_config_map_key(&"k".repeat(254)),
            vec!["must be no more than 253 characters"]
        );
        assert_eq!(is_config_map_key(".a"), Vec::<String>::new());
        assert_eq!(is_config_map_key("..a"), vec!["must not start with '..'"]);
        assert_eq!(base64_decoded_len("AAEC"), 3);
        assert_eq!(base64_decoded_len("AA=="), 1);
    }
}
