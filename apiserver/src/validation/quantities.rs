//! Resource quantities and resource names: the 400 Kubernetes answers when
//! a quantity does not parse (it fails while decoding), and the 422 causes
//! of container resources, ResourceQuota, LimitRange, claims and volumes.
//! Not the admission plugins that add quantities up (admission/).

use serde_json::Value;

use super::{forbidden, invalid, invalid_each, is_qualified_name, not_supported, required};
use crate::resources::ResourceType;
use crate::schema::{fields_of, Shape};
use crate::status::Cause;
use skiff_machinery::quantity::{Quantity, QuantityError};
use skiff_machinery::quote::go_quote;

/// The schema definition every quantity field has.
const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";
const NEGATIVE_ERR: &str = super::NEGATIVE_ERR;

// ---------------------------------------------------------------------------
// Decoding: a quantity that does not parse is a 400, as kube-apiserver's
// decoder refuses it before validation runs
// ---------------------------------------------------------------------------

/// The first quantity of `object` (of the type `resource` serves) that
/// Kubernetes' decoder would refuse, and why.
pub(super) fn first_unparsable(resource: &ResourceType, object: &Value) -> Option<QuantityError> {
    if resource.custom.is_some() {
        return None;
    }
    unparsable_in(object, resource.definition)
}

fn unparsable_in(value: &Value, definition: &str) -> Option<QuantityError> {
    let fields = fields_of(definition)?;
    let object = value.as_object()?;
    for (name, value) in object {
        let Some(field) = fields.get(name.as_str()) else {
            continue;
        };
        let found = match (value, field.shape, field.items) {
            (Value::Array(items), _, Some(definition)) => items
                .iter()
                .find_map(|item| unparsable_in(item, definition)),
            (_, Shape::Struct(Some(QUANTITY)), _) => quantity_error(value),
            (Value::Object(map), Shape::Values(Some(QUANTITY)), _) => {
                map.values().find_map(quantity_error)
            }
            (Value::Object(_), Shape::Struct(Some(definition)), _) => {
                unparsable_in(value, definition)
            }
            (Value::Object(map), Shape::Values(Some(definition)), _) => map
                .values()
                .find_map(|item| unparsable_in(item, definition)),
            _ => None,
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

/// Kubernetes trims a quantity before parsing it; a JSON number is read
/// as its text.
fn quantity_error(value: &Value) -> Option<QuantityError> {
    let text = match value {
        Value::String(s) => s.trim().to_string(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    Quantity::parse_strict(&text).err()
}

/// A quantity already known to parse (decoding checked it); `None` when it
/// is not there.
fn quantity(value: &Value) -> Option<Quantity> {
    match value {
        Value::String(s) => Quantity::parse_strict(s.trim()).ok(),
        Value::Number(n) => Quantity::parse_strict(&n.to_string()).ok(),
        _ => None,
    }
}

/// The entries of a `ResourceList` at `parent[name]`, in key order.
fn resource_list<'a>(parent: &'a Value, name: &str) -> Vec<(&'a str, Quantity)> {
    let mut list: Vec<(&str, Quantity)> = parent
        .get(name)
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(key, value)| Some((key.as_str(), quantity(value)?)))
        .collect();
    list.sort_by(|a, b| a.0.cmp(b.0));
    list
}

fn shown(quantity: Quantity) -> String {
    go_quote(&quantity.to_string())
}

// ---------------------------------------------------------------------------
// Resource names, as k8s.io/kubernetes' core helper sorts them
// ---------------------------------------------------------------------------

const HUGE_PAGES_PREFIX: &str = "hugepages-";
const REQUESTS_HUGE_PAGES_PREFIX: &str = "requests.hugepages-";

fn is_huge_pages(name: &str) -> bool {
    name.starts_with(HUGE_PAGES_PREFIX)
}

fn is_native(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

fn is_extended(name: &str) -> bool {
    if is_native(name) || name.starts_with("requests.") {
        return false;
    }
    // Quota names it `requests.<name>`, which must be a qualified name too.
    is_qualified_name(&format!("requests.{name}")).is_empty()
}

fn is_overcommit_allowed(name: &str) -> bool {
    is_native(name) && !is_huge_pages(name)
}

fn is_integer_resource(name: &str) -> bool {
    const INTEGER: &[&str] = &[
        "pods",
        "resourcequotas",
        "services",
        "replicationcontrollers",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "services.nodeports",
        "services.loadbalancers",
    ];
    INTEGER.contains(&name) || is_extended(name)
}

const STANDARD_QUOTA: &[&str] = &[
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.storage",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "persistentvolumeclaims",
    "configmaps",
    "services.nodeports",
    "services.loadbalancers",
];

fn is_quota_huge_pages(name: &str) -> bool {
    name.starts_with(HUGE_PAGES_PREFIX) || name.starts_with(REQUESTS_HUGE_PAGES_PREFIX)
}

fn is_standard_resource(name: &str) -> bool {
    STANDARD_QUOTA.contains(&name) || name == "storage" || is_quota_huge_pages(name)
}

/// Kubernetes prints a `ResourceName` through its String method: unquoted.
fn invalid_name(causes: &mut Vec<Cause>, path: &str, name: &str, detail: &str) {
    causes.push(invalid(path, name, detail));
}

/// `validateResourceName`: a qualified name, and a standard one when it
/// has no prefix. True when it passed.
fn check_resource_name(causes: &mut Vec<Cause>, path: &str, name: &str) -> bool {
    let messages = is_qualified_name(name);
    if !messages.is_empty() {
        for message in messages {
            invalid_name(causes, path, name, &message);
        }
        return false;
    }
    if !name.contains('/') && !is_standard_resource(name) {
        let detail = "must be a standard resource type or fully qualified";
        invalid_name(causes, path, name, detail);
        return false;
    }
    true
}

/// `validateContainerResourceName`: cpu, memory, ephemeral-storage,
/// hugepages-*, or an extended resource (`example.com/gpu`).
fn check_container_resource_name(causes: &mut Vec<Cause>, path: &str, name: &str) {
    let before = causes.len();
    check_resource_name(causes, path, name);
    if !name.contains('/') {
        if !matches!(name, "cpu" | "memory" | "ephemeral-storage") && !is_huge_pages(name) {
            let detail = "must be a standard resource for containers";
            invalid_name(causes, path, name, detail);
        }
    } else if !is_native(name) && !is_extended(name) && causes.len() == before {
        let detail = "doesn't follow extended resource name standard";
        invalid_name(causes, path, name, detail);
    }
}

/// `ValidateResourceQuantityValue`: not negative, whole for countable
/// resources.
fn check_quantity_value(causes: &mut Vec<Cause>, path: &str, name: &str, value: Quantity) {
    if value.milli < 0 {
        causes.push(invalid(path, &shown(value), NEGATIVE_ERR));
    }
    if is_integer_resource(name) && value.milli % 1000 != 0 {
        causes.push(invalid(path, &shown(value), "must be an integer"));
    }
}

// ---------------------------------------------------------------------------
// Container resources
// ---------------------------------------------------------------------------

/// A container's `resources` at `path` (`spec.containers[0].resources`).
pub(super) fn validate_resource_requirements(
    causes: &mut Vec<Cause>,
    requirements: &Value,
    path: &str,
) {
    let limits_path = format!("{path}.limits");
    let requests_path = format!("{path}.requests");
    let limits = resource_list(requirements, "limits");
    let requests = resource_list(requirements, "requests");
    let mut cpu_or_memory = false;
    let mut huge_pages = false;
    for (name, value) in &limits {
        let at = format!("{limits_path}[{name}]");
        check_container_resource_name(causes, &at, name);
        check_quantity_value(causes, &at, name, *value);
        huge_pages |= is_huge_pages(name);
        cpu_or_memory |= matches!(*name, "cpu" | "memory");
    }
    for (name, value) in &requests {
        let at = format!("{requests_path}[{name}]");
        check_container_resource_name(causes, &at, name);
        check_quantity_value(causes, &at, name, *value);
        match limits.iter().find(|(limit, _)| limit == name) {
            Some((_, limit)) if value != limit && !is_overcommit_allowed(name) => {
                let detail = format!("must be equal to {name} limit of {limit}");
                causes.push(invalid(&requests_path, &shown(*value), &detail));
            }
            Some((_, limit)) if value > limit => {
                let detail = format!("must be less than or equal to {name} limit of {limit}");
                causes.push(invalid(&requests_path, &shown(*value), &detail));
            }
            Some(_) => {}
            None if !is_overcommit_allowed(name) => causes.push(required(
                &limits_path,
                "Limit must be set for non overcommitable resources",
            )),
            None => {}
        }
        huge_pages |= is_huge_pages(name);
        cpu_or_memory |= matches!(*name, "cpu" | "memory");
    }
    if huge_pages && !cpu_or_memory {
        causes.push(forbidden(path, "HugePages require cpu or memory"));
    }
}

// ---------------------------------------------------------------------------
// ResourceQuota and LimitRange
// ---------------------------------------------------------------------------

/// A ResourceQuota's `spec.hard` names and values, and its scopes.
pub(super) fn validate_resource_quota(causes: &mut Vec<Cause>, spec: &Value) {
    for (name, value) in resource_list(spec, "hard") {
        let at = format!("spec.hard[{name}]");
        check_resource_name(causes, &at, name);
        if !name.contains('/') && !STANDARD_QUOTA.contains(&name) && !is_quota_huge_pages(name) {
            invalid_name(causes, &at, name, "must be a standard resource for quota");
        }
        check_quantity_value(causes, &at, name, value);
    }
    const SCOPES: &[&str] = &[
        "Terminating",
        "NotTerminating",
        "BestEffort",
        "NotBestEffort",
        "PriorityClass",
        "CrossNamespacePodAffinity",
    ];
    let scopes: Vec<&str> = super::items(spec, "scopes")
        .iter()
        .map(|s| s.as_str().unwrap_or_default())
        .collect();
    let shown_scopes = || {
        let quoted: Vec<String> = scopes.iter().map(|s| go_quote(s)).collect();
        format!("[]core.ResourceQuotaScope{{{}}}", quoted.join(", "))
    };
    for scope in &scopes {
        if !SCOPES.contains(scope) {
            causes.push(invalid("spec.scopes", &shown_scopes(), "unsupported scope"));
        }
    }
    let has = |scope: &str| scopes.contains(&scope);
    for (a, b) in [
        ("BestEffort", "NotBestEffort"),
        ("Terminating", "NotTerminating"),
    ] {
        if has(a) && has(b) {
            causes.push(invalid(
                "spec.scopes",
                &shown_scopes(),
                "conflicting scopes",
            ));
        }
    }
}

/// The quantities of one kind (`max`, `min`…) of a LimitRange item.
struct Bounds<'a> {
    name: &'static str,
    values: Vec<(&'a str, Quantity)>,
}

impl Bounds<'_> {
    fn get(&self, resource: &str) -> Option<Quantity> {
        self.values
            .iter()
            .find(|(name, _)| *name == resource)
            .map(|(_, q)| *q)
    }
}

/// A LimitRange's `spec.limits`: type names, resource names, and that
/// min ≤ defaultRequest ≤ default ≤ max, as `ValidateLimitRange` orders
/// them. Kubernetes checks no sign here, so neither does this.
pub(super) fn validate_limit_range(causes: &mut Vec<Cause>, spec: &Value) {
    let mut types: Vec<&str> = Vec::new();
    for (i, limit) in super::items(spec, "limits").iter().enumerate() {
        let at = format!("spec.limits[{i}]");
        let kind = super::text(limit, "type");
        check_limit_type(causes, &format!("{at}.type"), kind);
        if types.contains(&kind) {
            causes.push(super::duplicate(format!("{at}.type"), kind));
        }
        types.push(kind);
        validate_limit_range_item(causes, limit, kind, &at);
    }
}

fn check_limit_type(causes: &mut Vec<Cause>, path: &str, kind: &str) {
    let messages = is_qualified_name(kind);
    if !messages.is_empty() {
        invalid_each(causes, path, kind, messages);
    } else if !kind.contains('/') && !matches!(kind, "Pod" | "Container" | "PersistentVolumeClaim")
    {
        let detail = "must be a standard limit type or fully qualified";
        causes.push(invalid(path, &go_quote(kind), detail));
    }
}

fn validate_limit_range_item(causes: &mut Vec<Cause>, limit: &Value, kind: &str, at: &str) {
    let bounds = |name: &'static str| Bounds {
        name,
        values: resource_list(limit, name),
    };
    let (max, min) = (bounds("max"), bounds("min"));
    let (mut default, mut default_request) = (bounds("default"), bounds("defaultRequest"));
    let ratio = bounds("maxLimitRequestRatio");
    let check_names = |causes: &mut Vec<Cause>, bounds: &Bounds| {
        for (name, _) in &bounds.values {
            let path = format!("{at}.{}[{name}]", bounds.name);
            if matches!(kind, "Pod" | "Container") {
                check_container_resource_name(causes, &path, name);
            } else {
                check_resource_name(causes, &path, name);
            }
        }
    };
    check_names(causes, &max);
    check_names(causes, &min);
    if kind == "Pod" {
        for bounds in [&default, &default_request] {
            if !bounds.values.is_empty() {
                let detail = "may not be specified when `type` is 'Pod'";
                causes.push(forbidden(format!("{at}.{}", bounds.name), detail));
            }
        }
        default.values.clear();
        default_request.values.clear();
    } else {
        check_names(causes, &default);
        check_names(causes, &default_request);
    }
    if kind == "PersistentVolumeClaim"
        && min.get("storage").is_none()
        && max.get("storage").is_none()
    {
        let detail =
            "either minimum or maximum storage value is required, but neither was provided";
        causes.push(required(format!("{at}.limits"), detail));
    }
    check_names(causes, &ratio);
    let mut keys: Vec<&str> = [&max, &min, &default, &default_request, &ratio]
        .iter()
        .flat_map(|b| b.values.iter().map(|(name, _)| *name))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    for key in keys {
        let order = LimitOrder {
            key,
            at,
            min: min.get(key),
            max: max.get(key),
            default: default.get(key),
            default_request: default_request.get(key),
            ratio: ratio.get(key),
        };
        order.check(causes);
    }
}

/// One resource's bounds in one LimitRange item.
struct LimitOrder<'a> {
    key: &'a str,
    at: &'a str,
    min: Option<Quantity>,
    max: Option<Quantity>,
    default: Option<Quantity>,
    default_request: Option<Quantity>,
    ratio: Option<Quantity>,
}

impl LimitOrder<'_> {
    fn path(&self, field: &str) -> String {
        format!("{}.{field}[{}]", self.at, self.key)
    }

    fn check(&self, causes: &mut Vec<Cause>) {
        let mut push = |field: &str, value: Quantity, detail: String| {
            causes.push(invalid(self.path(field), &shown(value), &detail));
        };
        if let (Some(min), Some(max)) = (self.min, self.max) {
            if min > max {
                push(
                    "min",
                    min,
                    format!("min value {min} is greater than max value {max}"),
                );
            }
        }
        if let Some(request) = self.default_request {
            if let Some(min) = self.min.filter(|min| *min > request) {
                let detail =
                    format!("min value {min} is greater than default request value {request}");
                push("defaultRequest", request, detail);
            }
            if let Some(max) = self.max.filter(|max| request > *max) {
                let detail =
                    format!("default request value {request} is greater than max value {max}");
                push("defaultRequest", request, detail);
            }
            if let Some(default) = self.default.filter(|default| request > *default) {
                let detail = format!(
                    "default request value {request} is greater than default limit value {default}"
                );
                push("defaultRequest", request, detail);
            }
        }
        if let Some(default) = self.default {
            if let Some(min) = self.min.filter(|min| *min > default) {
                let detail = format!("min value {min} is greater than default value {default}");
                push("default", min, detail);
            }
            if let Some(max) = self.max.filter(|max| default > *max) {
                let detail = format!("default value {default} is greater than max value {max}");
                push("default", max, detail);
            }
        }
        if let Some(ratio) = self.ratio {
            if ratio < Quantity::count(1) {
                push(
                    "maxLimitRequestRatio",
                    ratio,
                    format!("ratio {ratio} is less than 1"),
                );
            }
            if let (Some(min), Some(max)) = (self.min, self.max) {
                let limit = max.milli as f64 / min.milli as f64;
                if ratio.milli as f64 / 1000.0 > limit {
                    let detail = format!("ratio {ratio} is greater than max/min = {limit:.6}");
                    push("maxLimitRequestRatio", ratio, detail);
                }
            }
        }
        if let (Some(default), Some(request)) = (self.default, self.default_request) {
            if !is_overcommit_allowed(self.key) && default != request {
                let detail = format!(
                    "default value {default} must equal to defaultRequest value {request} in {}",
                    self.key
                );
                push("defaultRequest", request, detail);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// PersistentVolumeClaims and PersistentVolumes
// ---------------------------------------------------------------------------

const ACCESS_MODES: &[&str] = &[
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];

/// Access modes at `path`: at least one, each supported, and
/// ReadWriteOncePod alone.
fn check_access_modes(causes: &mut Vec<Cause>, spec: &Value, path: &str) {
    let modes = super::items(spec, "accessModes");
    if modes.is_empty() {
        causes.push(required(path, "at least 1 access mode is required"));
    }
    let (mut once_pod, mut other) = (false, false);
    for mode in modes {
        let mode = mode.as_str().unwrap_or_default();
        if !ACCESS_MODES.contains(&mode) {
            causes.push(not_supported(path, mode, ACCESS_MODES));
        } else if mode == "ReadWriteOncePod" {
            once_pod = true;
        } else {
            other = true;
        }
    }
    if once_pod && other {
        let detail = "may not use ReadWriteOncePod with other access modes";
        causes.push(forbidden(path, detail));
    }
}

fn check_volume_mode(causes: &mut Vec<Cause>, spec: &Value, path: &str) {
    let mode = super::text(spec, "volumeMode");
    if spec.get("volumeMode").is_some_and(Value::is_string)
        && !matches!(mode, "Block" | "Filesystem")
    {
        causes.push(not_supported(path, mode, &["Block", "Filesystem"]));
    }
}

/// A claim's spec at `path` (`spec`, or a StatefulSet's
/// `spec.volumeClaimTemplates[0].spec`).
pub(super) fn validate_claim_spec(causes: &mut Vec<Cause>, spec: &Value, path: &str) {
    check_access_modes(causes, spec, &format!("{path}.accessModes"));
    if let Some(selector) = spec.get("selector").filter(|s| !s.is_null()) {
        super::validate_label_selector(causes, selector, &format!("{path}.selector"));
    }
    // Kubernetes reports the storage request at `resources[storage]`.
    let storage_path = format!("{path}.resources[storage]");
    let requests = super::field(super::field(spec, "resources"), "requests");
    match requests.get("storage").and_then(quantity) {
        None => causes.push(required(&storage_path, "")),
        Some(storage) if storage.milli <= 0 => causes.push(invalid(
            &storage_path,
            &shown(storage),
            "must be greater than zero",
        )),
        Some(_) => {}
    }
    let class = super::text(spec, "storageClassName");
    if !class.is_empty() {
        invalid_each(
            causes,
            &format!("{path}.storageClassName"),
            class,
            super::is_dns1123_subdomain(class),
        );
    }
    check_volume_mode(causes, spec, &format!("{path}.volumeMode"));
}

/// The sources a PersistentVolume may have, in Kubernetes' order.
const PERSISTENT_VOLUME_SOURCES: &[&str] = &[
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "hostPath",
    "glusterfs",
    "nfs",
    "rbd",
    "quobyte",
    "cinder",
    "cephfs",
    "iscsi",
    "fc",
    "flocker",
    "flexVolume",
    "azureFile",
    "vsphereVolume",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "local",
    "storageos",
    "csi",
];

/// A PersistentVolume's capacity (storage, and only storage, positive),
/// access modes, reclaim policy and volume mode.
pub(super) fn validate_persistent_volume(causes: &mut Vec<Cause>, spec: &Value) {
    check_access_modes(causes, spec, "spec.accessModes");
    let capacity = resource_list(spec, "capacity");
    if capacity.is_empty() {
        causes.push(required("spec.capacity", ""));
    }
    if capacity.len() != 1 || capacity[0].0 != "storage" {
        // Kubernetes shows the whole ResourceList, as Go's %#v prints it.
        let shown_list = if capacity.is_empty() {
            "core.ResourceList(nil)".to_string()
        } else {
            let entries: Vec<String> = capacity
                .iter()
                .map(|(name, q)| format!("{}:{}", go_quote(name), shown(*q)))
                .collect();
            format!("core.ResourceList{{{}}}", entries.join(", "))
        };
        let message = format!("Unsupported value: {shown_list}: supported values: \"storage\"");
        causes.push(super::cause(
            "FieldValueNotSupported",
            "spec.capacity",
            message,
        ));
    }
    for (name, value) in &capacity {
        let at = format!("spec.capacity[{name}]");
        if value.milli < 0 {
            // `Value()`: whole units, rounded away from zero.
            let whole = value.milli.saturating_sub(999) / 1000;
            let detail = "must be a valid resource quantity";
            causes.push(invalid(&at, &whole.to_string(), detail));
        }
        if value.milli <= 0 {
            causes.push(invalid(&at, &shown(*value), "must be greater than zero"));
        }
    }
    let sources: Vec<&str> = PERSISTENT_VOLUME_SOURCES
        .iter()
        .copied()
        .filter(|name| spec.get(*name).is_some_and(|v| !v.is_null()))
        .collect();
    if sources.is_empty() {
        causes.push(required("spec", "must specify a volume type"));
    }
    for source in sources.iter().skip(1) {
        let detail = "may not specify more than 1 volume type";
        causes.push(forbidden(format!("spec.{source}"), detail));
    }
    let policy = super::text(spec, "persistentVolumeReclaimPolicy");
    if !policy.is_empty() && !matches!(policy, "Delete" | "Recycle" | "Retain") {
        causes.push(not_supported(
            "spec.persistentVolumeReclaimPolicy",
            policy,
            &["Delete", "Recycle", "Retain"],
        ));
    }
    check_volume_mode(causes, spec, "spec.volumeMode");
}

#[cfg(test)]
mod tests {
    use super::super::tests::{invalid_lines, kind, pod_with_container};
    use super::super::validate_object;
    use serde_json::{json, Value};

    const FORMAT_ERR: &str = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

    fn resources(resources: Value) -> Value {
        pod_with_container(json!({"name": "c", "image": "nginx", "resources": resources}))
    }

    /// An unparsable quantity anywhere — containers, init containers, a
    /// Deployment's template, a quota, a claim — is a 400 from decoding,
    /// worded as kube-apiserver words it.
    #[test]
    fn unparsable_quantities_are_bad_requests() {
        let pod = kind("v1", "Pod");
        for bad in ["1.2.3", "10Gigs", "NaN", "abc"] {
            let err =
                validate_object(pod, &resources(json!({"requests": {"cpu": bad}}))).expect_err(bad);
            assert_eq!((err.code, err.reason), (400, "BadRequest"), "{bad}");
            assert_eq!(
                err.message,
                format!("Pod in version \"v1\" cannot be handled as a Pod: {FORMAT_ERR}")
            );
        }
        let err =
            validate_object(pod, &resources(json!({"limits": {"memory": "1KK"}}))).unwrap_err();
        assert!(
            err.message.ends_with(": unable to parse quantity's suffix"),
            "{}",
            err.message
        );
        let mut init = resources(json!({}));
        init["spec"]["initContainers"] =
            json!([{"name": "i", "image": "busybox", "resources": {"limits": {"cpu": "1.2.3"}}}]);
        assert_eq!(validate_object(pod, &init).unwrap_err().code, 400);
        let cases = [
            (
                kind("apps/v1", "Deployment"),
                json!({"metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"a": "b"}},
                    "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [
                        {"name": "c", "image": "i", "resources": {"requests": {"memory": "10Gigs"}}}]}}}}),
            ),
            (
                kind("v1", "ResourceQuota"),
                json!({"metadata": {"name": "q"}, "spec": {"hard": {"pods": "NaN"}}}),
            ),
            (
                kind("v1", "PersistentVolumeClaim"),
                json!({"metadata": {"name": "c"}, "spec": {"accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1.2.3"}}}}),
            ),
            (
                kind("v1", "LimitRange"),
                json!({"metadata": {"name": "l"}, "spec": {"limits": [{"type": "Container", "max": {"cpu": "x"}}]}}),
            ),
        ];
        for (resource, object) in cases {
            let err = validate_object(resource, &object).expect_err(resource.kind);
            assert_eq!(err.code, 400, "{}: {}", resource.kind, err.message);
            assert!(err.message.ends_with(FORMAT_ERR), "{}", err.message);
        }
        // Numbers and spaced strings are read as Kubernetes reads them.
        let fine = resources(json!({"requests": {"cpu": 0.5, "memory": " 1Gi "}}));
        assert_eq!(validate_object(pod, &fine), Ok(()));
    }

    #[test]
    fn container_resource_values_and_names() {
        let pod = kind("v1", "Pod");
        let good = resources(json!({
            "requests": {"cpu": "250m", "memory": "64Mi", "ephemeral-storage": "1Gi", "example.com/gpu": "1"},
            "limits": {"cpu": "1", "memory": "128Mi", "example.com/gpu": "1"}}));
        assert_eq!(validate_object(pod, &good), Ok(()));
        let table: &[(Value, &[&str])] = &[
            (
                json!({"requests": {"cpu": "-1"}}),
                &["spec.containers[0].resources.requests[cpu]: Invalid value: \"-1\": must be greater than or equal to 0"],
            ),
            (
                json!({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}),
                &["spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1"],
            ),
            (
                json!({"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}),
                &["spec.containers[0].resources.requests: Invalid value: \"2Gi\": must be less than or equal to memory limit of 1Gi"],
            ),
            (
                json!({"limits": {"gpu": "1"}}),
                &[
                    "spec.containers[0].resources.limits[gpu]: Invalid value: gpu: must be a standard resource type or fully qualified",
                    "spec.containers[0].resources.limits[gpu]: Invalid value: gpu: must be a standard resource for containers",
                ],
            ),
            (
                json!({"limits": {"pods": "1"}}),
                &["spec.containers[0].resources.limits[pods]: Invalid value: pods: must be a standard resource for containers"],
            ),
            (
                json!({"requests": {"example.com/gpu": "500m"}, "limits": {"example.com/gpu": "1"}}),
                &[
                    "spec.containers[0].resources.requests[example.com/gpu]: Invalid value: \"500m\": must be an integer",
                    "spec.containers[0].resources.requests: Invalid value: \"500m\": must be equal to example.com/gpu limit of 1",
                ],
            ),
            (
                json!({"requests": {"example.com/gpu": "1"}}),
                &["spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources"],
            ),
            (
                json!({"limits": {"hugepages-2Mi": "2Mi"}}),
                &["spec.containers[0].resources: Forbidden: HugePages require cpu or memory"],
            ),
        ];
        for (requirements, expected) in table {
            let found = invalid_lines(pod, resources(requirements.clone()));
            assert_eq!(found, *expected, "{requirements}");
        }
        let mut init = resources(json!({}));
        init["spec"]["initContainers"] =
            json!([{"name": "i", "image": "busybox", "resources": {"limits": {"memory": "-1Mi"}}}]);
        assert_eq!(
            invalid_lines(pod, init),
            vec!["spec.initContainers[0].resources.limits[memory]: Invalid value: \"-1Mi\": must be greater than or equal to 0"]
        );
    }

    #[test]
    fn quota_hard_and_scopes() {
        let quota = kind("v1", "ResourceQuota");
        let object = |spec: Value| json!({"metadata": {"name": "q"}, "spec": spec});
        let good = object(
            json!({"hard": {"pods": "10", "requests.cpu": "4", "limits.memory": "8Gi",
            "count/deployments.apps": "3", "requests.example.com/gpu": "2"}, "scopes": ["NotTerminating"]}),
        );
        assert_eq!(validate_object(quota, &good), Ok(()));
        assert_eq!(
            invalid_lines(quota, object(json!({"hard": {"pods": "-1", "secrets": "1.5", "bogus": "1"}}))),
            vec![
                "spec.hard[bogus]: Invalid value: bogus: must be a standard resource type or fully qualified",
                "spec.hard[bogus]: Invalid value: bogus: must be a standard resource for quota",
                "spec.hard[pods]: Invalid value: \"-1\": must be greater than or equal to 0",
                "spec.hard[secrets]: Invalid value: \"1500m\": must be an integer",
            ]
        );
        assert_eq!(
            invalid_lines(quota, object(json!({"scopes": ["BestEffort", "NotBestEffort", "Sometimes"]}))),
            vec![
                "spec.scopes: Invalid value: []core.ResourceQuotaScope{\"BestEffort\", \"NotBestEffort\", \"Sometimes\"}: unsupported scope",
                "spec.scopes: Invalid value: []core.ResourceQuotaScope{\"BestEffort\", \"NotBestEffort\", \"Sometimes\"}: conflicting scopes",
            ]
        );
    }

    #[test]
    fn limit_range_order_and_names() {
        let limits = kind("v1", "LimitRange");
        let object = |items: Value| json!({"metadata": {"name": "l"}, "spec": {"limits": items}});
        let good = object(json!([
            {"type": "Container", "max": {"cpu": "2"}, "min": {"cpu": "100m"},
             "default": {"cpu": "1"}, "defaultRequest": {"cpu": "500m"}, "maxLimitRequestRatio": {"cpu": "4"}},
            {"type": "PersistentVolumeClaim", "max": {"storage": "10Gi"}}]));
        assert_eq!(validate_object(limits, &good), Ok(()));
        let bad = object(json!([
            {"type": "Container", "max": {"cpu": "1"}, "min": {"cpu": "2"},
             "defaultRequest": {"memory": "2Gi"}, "default": {"memory": "1Gi"}, "maxLimitRequestRatio": {"cpu": "500m"}},
            {"type": "Pod", "default": {"cpu": "1"}},
            {"type": "PersistentVolumeClaim"},
            {"type": "Container"},
            {"type": "Node"}]));
        assert_eq!(invalid_lines(limits, bad), vec![
            "spec.limits[0].min[cpu]: Invalid value: \"2\": min value 2 is greater than max value 1",
            "spec.limits[0].maxLimitRequestRatio[cpu]: Invalid value: \"500m\": ratio 500m is less than 1",
            "spec.limits[0].defaultRequest[memory]: Invalid value: \"2Gi\": default request value 2Gi is greater than default limit value 1Gi",
            "spec.limits[1].default: Forbidden: may not be specified when `type` is 'Pod'",
            "spec.limits[2].limits: Required value: either minimum or maximum storage value is required, but neither was provided",
            "spec.limits[3].type: Duplicate value: \"Container\"",
            "spec.limits[4].type: Invalid value: \"Node\": must be a standard limit type or fully qualified",
        ]);
    }

    /// Found beside the fuzzing of quantities: a capacity of `-1e400`
    /// (saturated to the most negative quantity) overflowed i128 when
    /// rounded to whole units for its message.
    #[test]
    fn a_negative_capacity_past_what_a_quantity_holds_is_invalid_not_an_overflow() {
        let volume = kind("v1", "PersistentVolume");
        let pv = json!({"metadata": {"name": "v"}, "spec": {"accessModes": ["ReadWriteOnce"],
            "capacity": {"storage": "-1e400"}, "hostPath": {"path": "/data"}}});
        let lines = invalid_lines(volume, pv);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].ends_with(": must be a valid resource quantity"),
            "{lines:?}"
        );
        assert!(
            lines[1].ends_with(": must be greater than zero"),
            "{lines:?}"
        );
    }

    #[test]
    fn claims_and_volumes() {
        let claim = kind("v1", "PersistentVolumeClaim");
        let object = |spec: Value| json!({"metadata": {"name": "c"}, "spec": spec});
        let good = object(
            json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}),
        );
        assert_eq!(validate_object(claim, &good), Ok(()));
        assert_eq!(
            invalid_lines(claim, object(json!({}))),
            vec![
                "spec.accessModes: Required value: at least 1 access mode is required",
                "spec.resources[storage]: Required value",
            ]
        );
        assert_eq!(
            invalid_lines(claim, object(json!({"accessModes": ["ReadWriteOncePod", "ReadWriteOnce", "ReadWriteSometimes"],
                "volumeMode": "Raw", "resources": {"requests": {"storage": "0"}}}))),
            vec![
                "spec.accessModes: Unsupported value: \"ReadWriteSometimes\": supported values: \"ReadOnlyMany\", \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\"",
                "spec.accessModes: Forbidden: may not use ReadWriteOncePod with other access modes",
                "spec.resources[storage]: Invalid value: \"0\": must be greater than zero",
                "spec.volumeMode: Unsupported value: \"Raw\": supported values: \"Block\", \"Filesystem\"",
            ]
        );
        let volume = kind("v1", "PersistentVolume");
        let pv = |spec: Value| json!({"metadata": {"name": "v"}, "spec": spec});
        let good = pv(
            json!({"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
            "hostPath": {"path": "/data"}, "persistentVolumeReclaimPolicy": "Delete"}),
        );
        assert_eq!(validate_object(volume, &good), Ok(()));
        assert_eq!(
            invalid_lines(volume, pv(json!({"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "-1Gi"},
                "hostPath": {"path": "/a"}, "nfs": {"server": "s", "path": "/"}, "persistentVolumeReclaimPolicy": "Shred"}))),
            vec![
                "spec.capacity[storage]: Invalid value: -1073741824: must be a valid resource quantity",
                "spec.capacity[storage]: Invalid value: \"-1Gi\": must be greater than zero",
                "spec.nfs: Forbidden: may not specify more than 1 volume type",
                "spec.persistentVolumeReclaimPolicy: Unsupported value: \"Shred\": supported values: \"Delete\", \"Recycle\", \"Retain\"",
            ]
        );
        assert_eq!(
            invalid_lines(volume, pv(json!({"accessModes": ["ReadWriteOnce"]}))),
            vec![
                "spec.capacity: Required value",
                "spec.capacity: Unsupported value: core.ResourceList(nil): supported values: \"storage\"",
                "spec: Required value: must specify a volume type",
            ]
        );
    }
}
