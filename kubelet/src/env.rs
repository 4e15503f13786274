//! A container's environment as the kubelet builds it: envFrom, then env
//! with `$(VAR)` expansion and valueFrom (ConfigMap, Secret, downward API
//! fields and resources), then skiff's own variables. Not for fetching them.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, EnvVar, EnvVarSource, ObjectFieldSelector, Pod, ResourceFieldSelector,
    Secret,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use skiff_machinery::quantity::Quantity;

use crate::volumes::PreparedVolumes;
use skiff_machinery::quote::go_quote;

/// `PATH` when the container sets none, as container images usually do.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The ConfigMaps and Secrets of the pod's namespace that the caller fetched
/// (by name; see [`referenced_config_maps`] and [`referenced_secrets`]), and
/// the Node's allocatable, which stands in for unset limits in
/// `resourceFieldRef`.
#[derive(Debug, Clone, Default)]
pub struct EnvSources {
    pub config_maps: BTreeMap<String, ConfigMap>,
    pub secrets: BTreeMap<String, Secret>,
    pub node_allocatable: BTreeMap<String, ApiQuantity>,
    /// persistentVolumeClaim volumes: claim name → its bound volume's
    /// directory, or why it has none yet.
    pub claims: BTreeMap<String, crate::volumes::ClaimVolume>,
    /// serviceAccountToken projections: their (audience, lifetime in
    /// seconds) → the token, or why there is none.
    pub tokens: BTreeMap<(String, i64), Result<String, String>>,
    /// The Services' variables (see [`crate::envvars`]), which a
    /// container's own env overrides and its values may refer to.
    pub service_env: BTreeMap<String, String>,
}

/// What the pod cannot tell about itself: where it runs and its addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    pub node_name: String,
    pub host_ip: String,
    pub host_ips: Vec<String>,
    pub pod_ip: String,
    pub pod_ips: Vec<String>,
}

impl NodeFacts {
    /// The facts as the pod's own spec and status record them.
    pub fn from_pod(pod: &Pod) -> NodeFacts {
        let status = pod.status.as_ref();
        let ips = |list: Option<Vec<String>>, single: &str| match list {
            Some(list) if !list.is_empty() => list,
            _ if single.is_empty() => Vec::new(),
            _ => vec![single.to_string()],
        };
        let host_ip = status.and_then(|s| s.host_ip.clone()).unwrap_or_default();
        let pod_ip = status.and_then(|s| s.pod_ip.clone()).unwrap_or_default();
        let host_ips = status
            .and_then(|s| s.host_ips.as_ref())
            .map(|l| l.iter().map(|ip| ip.ip.clone()).collect());
        let pod_ips = status
            .and_then(|s| s.pod_ips.as_ref())
            .map(|l| l.iter().map(|ip| ip.ip.clone()).collect());
        NodeFacts {
            node_name: pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default(),
            host_ips: ips(host_ips, &host_ip),
            pod_ips: ips(pod_ips, &pod_ip),
            host_ip,
            pod_ip,
        }
    }
}

/// Why a container's environment could not be built; the pod worker shows
/// it as `CreateContainerConfigError`, so the texts are Kubernetes' own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    #[error("configmap \"{name}\" not found")]
    ConfigMapNotFound { name: String },
    #[error("secret \"{name}\" not found")]
    SecretNotFound { name: String },
    #[error("couldn't find key {key} in ConfigMap {namespace}/{name}")]
    ConfigMapKeyNotFound {
        key: String,
        namespace: String,
        name: String,
    },
    #[error("couldn't find key {key} in Secret {namespace}/{name}")]
    SecretKeyNotFound {
        key: String,
        namespace: String,
        name: String,
    },
    #[error("unsupported fieldPath: {path}")]
    UnsupportedFieldPath { path: String },
    #[error("unsupported container resource: {resource}")]
    UnsupportedResource { resource: String },
    #[error("resourceFieldRef names container {name:?}, which is not in the pod")]
    ContainerNotFound { name: String },
    #[error("{what} {value:?} is not a valid quantity")]
    InvalidQuantity { what: String, value: String },
}

/// The environment of `container`, in the order Kubernetes builds it: skiff's
/// volume variables, envFrom, env (later entries win), the Services'
/// variables, then `HOSTNAME`, `PATH` and `HOME` (the pod root) where the
/// container set none.
pub fn container_env(
    pod: &Pod,
    container: &Container,
    sources: &EnvSources,
    node: &NodeFacts,
    volumes: &PreparedVolumes,
) -> Result<Vec<(String, String)>, EnvError> {
    let mut env = EnvList::default();
    for (name, value) in volumes.container_env(&container.name) {
        env.set(name, value);
    }
    add_env_from(&mut env, pod, container, sources)?;
    for var in container.env.iter().flatten() {
        if let Some(value) = env_var_value(&env, var, pod, container, sources, node)? {
            env.set(var.name.clone(), value);
        }
    }
    for (name, value) in &sources.service_env {
        env.set_default(name, value.clone());
    }
    env.set_default("HOSTNAME", pod_hostname(pod));
    env.set_default("PATH", DEFAULT_PATH.to_string());
    let home = volumes.root().map(|r| r.display().to_string());
    env.set_default("HOME", home.unwrap_or_else(|| "/".to_string()));
    Ok(env.vars)
}

/// Expands `$(VAR)` references in `input` against `env` as Kubernetes does
/// for env values, command and args: `$$` is a literal `$`, and references
/// to unknown variables stay as written.
pub fn expand_references(input: &str, env: &[(String, String)]) -> String {
    let vars: HashMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    expand_with(input, |name| vars.get(name).map(|v| v.to_string()))
}

/// ConfigMap names the pod refers to through env, envFrom and volumes.
pub fn referenced_config_maps(pod: &Pod) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for container in all_containers(pod) {
        for from in container.env_from.iter().flatten() {
            names.extend(from.config_map_ref.as_ref().map(|r| r.name.clone()));
        }
        for source in env_sources(container) {
            names.extend(source.config_map_key_ref.as_ref().map(|r| r.name.clone()));
        }
    }
    for volume in pod_volumes(pod) {
        names.extend(volume.config_map.as_ref().map(|c| c.name.clone()));
        for projection in volume
            .projected
            .iter()
            .flat_map(|p| p.sources.iter().flatten())
        {
            names.extend(projection.config_map.as_ref().map(|c| c.name.clone()));
        }
    }
    names
}

/// Secret names the pod refers to through env, envFrom and volumes.
pub fn referenced_secrets(pod: &Pod) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for container in all_containers(pod) {
        for from in container.env_from.iter().flatten() {
            names.extend(from.secret_ref.as_ref().map(|r| r.name.clone()));
        }
        for source in env_sources(container) {
            names.extend(source.secret_key_ref.as_ref().map(|r| r.name.clone()));
        }
    }
    for volume in pod_volumes(pod) {
        names.extend(volume.secret.as_ref().and_then(|s| s.secret_name.clone()));
        for projection in volume
            .projected
            .iter()
            .flat_map(|p| p.sources.iter().flatten())
        {
            names.extend(projection.secret.as_ref().map(|s| s.name.clone()));
        }
    }
    names
}

/// Whether Kubernetes accepts `name` as an environment variable name
/// (`[-._a-zA-Z][-._a-zA-Z0-9]*`, and not `.`, `..` or `..`-prefixed).
pub fn is_env_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    let valid_first = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || "-._".contains(c));
    valid_first
        && chars.all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
        && name != "."
        && !name.starts_with("..")
}

/// The value of a downward API `fieldRef` for env: metadata fields plus
/// `spec.nodeName`, `spec.serviceAccountName`, `status.hostIP(s)` and
/// `status.podIP(s)`.
pub(crate) fn field_ref_value(
    pod: &Pod,
    selector: &ObjectFieldSelector,
    node: &NodeFacts,
) -> Result<String, EnvError> {
    let spec = pod.spec.as_ref();
    let value = match selector.field_path.as_str() {
        "spec.nodeName" => node.node_name.clone(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.hostIP" => node.host_ip.clone(),
        "status.hostIPs" => node.host_ips.join(","),
        "status.podIP" => node.pod_ip.clone(),
        "status.podIPs" => node.pod_ips.join(","),
        path => metadata_field_value(pod, path)?,
    };
    Ok(value)
}

/// The value of a metadata `fieldPath`, as env and downwardAPI volumes read
/// it; whole label and annotation maps are `key="value"` lines, sorted.
pub(crate) fn metadata_field_value(pod: &Pod, path: &str) -> Result<String, EnvError> {
    let meta = &pod.metadata;
    let from_map = |map: &Option<BTreeMap<String, String>>, key: &str| {
        map.as_ref()
            .and_then(|m| m.get(key).cloned())
            .unwrap_or_default()
    };
    if let Some(key) = subscript(path, "metadata.labels") {
        return Ok(from_map(&meta.labels, key));
    }
    if let Some(key) = subscript(path, "metadata.annotations") {
        return Ok(from_map(&meta.annotations, key));
    }
    let value = match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(meta.labels.as_ref()),
        "metadata.annotations" => format_map(meta.annotations.as_ref()),
        _ => {
            return Err(EnvError::UnsupportedFieldPath {
                path: path.to_string(),
            })
        }
    };
    Ok(value)
}

/// The value of a `resourceFieldRef`: the container's request or limit
/// (unset limits fall back to the node's allocatable) divided by the
/// divisor and rounded up, so `limits.cpu` of 250m reads `1`.
pub(crate) fn resource_field_value(
    pod: &Pod,
    default_container: &str,
    selector: &ResourceFieldSelector,
    allocatable: &BTreeMap<String, ApiQuantity>,
) -> Result<String, EnvError> {
    let name = selector
        .container_name
        .as_deref()
        .filter(|n| !n.is_empty())
        .unwrap_or(default_container);
    let container = all_containers(pod)
        .find(|c| c.name == name)
        .ok_or_else(|| EnvError::ContainerNotFound {
            name: name.to_string(),
        })?;
    let unsupported = || EnvError::UnsupportedResource {
        resource: selector.resource.clone(),
    };
    let (kind, resource) = selector.resource.split_once('.').ok_or_else(unsupported)?;
    let supported = ["cpu", "memory", "ephemeral-storage"].contains(&resource)
        || resource.starts_with("hugepages-");
    if !supported {
        return Err(unsupported());
    }
    let amount = match kind {
        "limits" => container_limit(container, resource, allocatable)?,
        "requests" => container_request(container, resource)?,
        _ => return Err(unsupported()),
    };
    let divisor = match &selector.divisor {
        Some(d) => parse_quantity(&d.0, "divisor")?,
        None => Quantity::default(),
    };
    Ok(divide_rounding_up(resource, amount, divisor).to_string())
}

/// A container's request for `resource`; unset requests default to the
/// limit, as the API server's defaulting does.
pub(crate) fn container_request(
    container: &Container,
    resource: &str,
) -> Result<Quantity, EnvError> {
    let resources = container.resources.as_ref();
    let request = resources.and_then(|r| r.requests.as_ref()?.get(resource));
    let limit = resources.and_then(|r| r.limits.as_ref()?.get(resource));
    match request.or(limit) {
        Some(q) => parse_quantity(&q.0, resource),
        None => Ok(Quantity::default()),
    }
}

fn container_limit(
    container: &Container,
    resource: &str,
    allocatable: &BTreeMap<String, ApiQuantity>,
) -> Result<Quantity, EnvError> {
    let limits = container.resources.as_ref().and_then(|r| r.limits.as_ref());
    if let Some(limit) = limits.and_then(|l| l.get(resource)) {
        let limit = parse_quantity(&limit.0, resource)?;
        if !limit.is_zero() {
            return Ok(limit);
        }
    }
    match allocatable.get(resource) {
        Some(q) => parse_quantity(&q.0, resource),
        None => Ok(Quantity::default()),
    }
}

/// cpu counts in thousandths, everything else in whole units, as
/// Kubernetes' MilliValue and Value do; a zero divisor means 1.
fn divide_rounding_up(resource: &str, amount: Quantity, divisor: Quantity) -> i128 {
    let ceil_div = |a: i128, b: i128| (a + b - 1).div_euclid(b);
    let whole = |q: Quantity| ceil_div(q.milli, 1000);
    if resource == "cpu" {
        let divisor = if divisor.milli > 0 {
            divisor.milli
        } else {
            1000
        };
        ceil_div(amount.milli, divisor)
    } else {
        let divisor = if whole(divisor) > 0 {
            whole(divisor)
        } else {
            1
        };
        ceil_div(whole(amount), divisor)
    }
}

fn parse_quantity(text: &str, what: &str) -> Result<Quantity, EnvError> {
    Quantity::parse(text).ok_or_else(|| EnvError::InvalidQuantity {
        what: what.to_string(),
        value: text.to_string(),
    })
}

/// `metadata.labels['app']` → `app` when `path` subscripts `field`.
fn subscript<'a>(path: &'a str, field: &str) -> Option<&'a str> {
    let rest = path
        .strip_prefix(field)?
        .strip_prefix('[')?
        .strip_suffix(']')?;
    rest.strip_prefix('\'')?.strip_suffix('\'')
}

/// `key="value"` lines in key order, values quoted as Go's `%q` does.
pub(crate) fn format_map(map: Option<&BTreeMap<String, String>>) -> String {
    let lines: Vec<String> = map
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect();
    lines.join("\n")
}

fn add_env_from(
    env: &mut EnvList,
    pod: &Pod,
    container: &Container,
    sources: &EnvSources,
) -> Result<(), EnvError> {
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.as_deref().unwrap_or("");
        let mut pairs = Vec::new();
        if let Some(reference) = &from.config_map_ref {
            if let Some(map) = find_config_map(sources, &reference.name, reference.optional)? {
                pairs.extend(
                    map.data
                        .iter()
                        .flatten()
                        .map(|(k, v)| (k.clone(), v.clone())),
                );
            }
        }
        if let Some(reference) = &from.secret_ref {
            if let Some(secret) = find_secret(sources, &reference.name, reference.optional)? {
                pairs.extend(secret_entries(secret).map(|(k, v)| (k, lossy(&v))));
            }
        }
        for (key, value) in pairs {
            let name = format!("{prefix}{key}");
            if is_env_var_name(&name) {
                env.set(name, value);
            } else {
                tracing::warn!(pod = ?pod.metadata.name, container = %container.name, %name,
                    "skipping envFrom key that is not a valid environment variable name");
            }
        }
    }
    Ok(())
}

/// The value of one env entry, or None when an optional reference is
/// missing (Kubernetes then leaves the variable unset).
fn env_var_value(
    env: &EnvList,
    var: &EnvVar,
    pod: &Pod,
    container: &Container,
    sources: &EnvSources,
    node: &NodeFacts,
) -> Result<Option<String>, EnvError> {
    if let Some(value) = var.value.as_deref().filter(|v| !v.is_empty()) {
        return Ok(Some(expand_with(value, |name| {
            env.get(name)
                .or_else(|| sources.service_env.get(name).map(String::as_str))
                .map(str::to_string)
        })));
    }
    match &var.value_from {
        Some(from) => value_from(from, pod, container, sources, node),
        None => Ok(Some(String::new())),
    }
}

fn value_from(
    from: &EnvVarSource,
    pod: &Pod,
    container: &Container,
    sources: &EnvSources,
    node: &NodeFacts,
) -> Result<Option<String>, EnvError> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    if let Some(reference) = &from.config_map_key_ref {
        let Some(map) = find_config_map(sources, &reference.name, reference.optional)? else {
            return Ok(None);
        };
        let value = map.data.as_ref().and_then(|d| d.get(&reference.key));
        return match value {
            Some(v) => Ok(Some(v.clone())),
            None if reference.optional == Some(true) => Ok(None),
            None => Err(EnvError::ConfigMapKeyNotFound {
                key: reference.key.clone(),
                namespace,
                name: reference.name.clone(),
            }),
        };
    }
    if let Some(reference) = &from.secret_key_ref {
        let Some(secret) = find_secret(sources, &reference.name, reference.optional)? else {
            return Ok(None);
        };
        return match secret_value(secret, &reference.key) {
            Some(v) => Ok(Some(lossy(&v))),
            None if reference.optional == Some(true) => Ok(None),
            None => Err(EnvError::SecretKeyNotFound {
                key: reference.key.clone(),
                namespace,
                name: reference.name.clone(),
            }),
        };
    }
    if let Some(selector) = &from.field_ref {
        return field_ref_value(pod, selector, node).map(Some);
    }
    if let Some(selector) = &from.resource_field_ref {
        let allocatable = &sources.node_allocatable;
        return resource_field_value(pod, &container.name, selector, allocatable).map(Some);
    }
    Ok(Some(String::new()))
}

/// The ConfigMap `name`, None when it is missing and `optional`.
pub(crate) fn find_config_map<'a>(
    sources: &'a EnvSources,
    name: &str,
    optional: Option<bool>,
) -> Result<Option<&'a ConfigMap>, EnvError> {
    match sources.config_maps.get(name) {
        Some(map) => Ok(Some(map)),
        None if optional == Some(true) => Ok(None),
        None => Err(EnvError::ConfigMapNotFound {
            name: name.to_string(),
        }),
    }
}

/// The Secret `name`, None when it is missing and `optional`.
pub(crate) fn find_secret<'a>(
    sources: &'a EnvSources,
    name: &str,
    optional: Option<bool>,
) -> Result<Option<&'a Secret>, EnvError> {
    match sources.secrets.get(name) {
        Some(secret) => Ok(Some(secret)),
        None if optional == Some(true) => Ok(None),
        None => Err(EnvError::SecretNotFound {
            name: name.to_string(),
        }),
    }
}

/// A Secret's entries: `data`, with `stringData` over it as the API server
/// merges them on write (so an unmerged object reads the same).
pub(crate) fn secret_entries(secret: &Secret) -> impl Iterator<Item = (String, Vec<u8>)> {
    let mut entries: BTreeMap<String, Vec<u8>> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    for (k, v) in secret.string_data.iter().flatten() {
        entries.insert(k.clone(), v.clone().into_bytes());
    }
    entries.into_iter()
}

pub(crate) fn secret_value(secret: &Secret, key: &str) -> Option<Vec<u8>> {
    let from_string = secret.string_data.as_ref().and_then(|d| d.get(key));
    let from_data = secret.data.as_ref().and_then(|d| d.get(key));
    from_string
        .map(|s| s.clone().into_bytes())
        .or_else(|| from_data.map(|b| b.0.clone()))
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn pod_hostname(pod: &Pod) -> String {
    let hostname = pod.spec.as_ref().and_then(|s| s.hostname.clone());
    hostname
        .filter(|h| !h.is_empty())
        .or_else(|| pod.metadata.name.clone())
        .unwrap_or_default()
}

/// Init, regular and ephemeral containers, as `Container`s where they are.
pub(crate) fn all_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    let spec = pod.spec.as_ref();
    let init = spec
        .and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten();
    let regular = spec.map(|s| s.containers.iter()).into_iter().flatten();
    init.chain(regular)
}

fn env_sources(container: &Container) -> impl Iterator<Item = &EnvVarSource> {
    container
        .env
        .iter()
        .flatten()
        .filter_map(|v| v.value_from.as_ref())
}

fn pod_volumes(pod: &Pod) -> impl Iterator<Item = &k8s_openapi::api::core::v1::Volume> {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
}

/// Kubernetes' `expansion.Expand`: `$(NAME)` is looked up, `$$` escapes,
/// any other `$` (or an unclosed `$(`) is copied as written.
fn expand_with(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if after.is_empty() {
            out.push('$');
            rest = after;
        } else if let Some(escaped) = after.strip_prefix('$') {
            out.push('$');
            rest = escaped;
        } else if let Some(reference) = after.strip_prefix('(') {
            match reference.find(')') {
                Some(close) => {
                    let name = &reference[..close];
                    out.push_str(&lookup(name).unwrap_or_else(|| format!("$({name})")));
                    rest = &reference[close + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = reference;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Variables in the order first set, where setting again replaces in place.
#[derive(Default)]
struct EnvList {
    vars: Vec<(String, String)>,
    index: HashMap<String, usize>,
}

impl EnvList {
    fn set(&mut self, name: String, value: String) {
        match self.index.get(&name) {
            Some(&at) => self.vars[at].1 = value,
            None => {
                self.index.insert(name.clone(), self.vars.len());
                self.vars.push((name, value));
            }
        }
    }

    fn set_default(&mut self, name: &str, value: String) {
        if !self.index.contains_key(name) {
            self.set(name.to_string(), value);
        }
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.index.get(name).map(|&at| self.vars[at].1.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": "web-0", "namespace": "shop", "uid": "u-1",
                "labels": {"app": "web", "tier": "front"},
                "annotations": {"note": "say \"hi\""},
            },
            "spec": spec,
            "status": {"podIP": "10.0.0.7", "hostIP": "192.168.1.2"},
        }))
        .expect("a pod")
    }

    fn one_container(container: serde_json::Value) -> Pod {
        let mut container = container;
        container["name"] = json!("app");
        pod(json!({"nodeName": "n1", "serviceAccountName": "sa", "containers": [container]}))
    }

    fn config_map(name: &str, data: serde_json::Value) -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).expect("a map")
    }

    fn secret(name: &str, data: serde_json::Value) -> Secret {
        serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).expect("a secret")
    }

    fn sources() -> EnvSources {
        let mut sources = EnvSources::default();
        let settings = config_map(
            "settings",
            json!({"MODE": "prod", "bad key": "x", "LEVEL": "3"}),
        );
        sources.config_maps.insert("settings".into(), settings);
        // "c2VjcmV0" is base64 for "secret".
        let creds = secret("creds", json!({"PASSWORD": "c2VjcmV0"}));
        sources.secrets.insert("creds".into(), creds);
        sources
            .node_allocatable
            .insert("cpu".into(), ApiQuantity("4".into()));
        sources
            .node_allocatable
            .insert("memory".into(), ApiQuantity("8Gi".into()));
        sources
    }

    fn env_of(pod: &Pod) -> Result<Vec<(String, String)>, EnvError> {
        let container = &pod.spec.as_ref().expect("spec").containers[0];
        let node = NodeFacts::from_pod(pod);
        container_env(
            pod,
            container,
            &sources(),
            &node,
            &PreparedVolumes::default(),
        )
    }

    fn lookup<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
        env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    #[test]
    fn env_from_comes_first_and_env_overrides_it() {
        let pod = one_container(json!({
            "envFrom": [
                {"configMapRef": {"name": "settings"}, "prefix": "CFG_"},
                {"secretRef": {"name": "creds"}},
                {"configMapRef": {"name": "absent", "optional": true}},
            ],
            "env": [{"name": "CFG_MODE", "value": "dev"}],
        }));
        let env = env_of(&pod).expect("env");
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names[..3],
            ["CFG_LEVEL", "CFG_MODE", "PASSWORD"],
            "envFrom in order, bad key skipped"
        );
        assert_eq!(lookup(&env, "CFG_MODE"), Some("dev"));
        assert_eq!(lookup(&env, "PASSWORD"), Some("secret"));
        assert_eq!(lookup(&env, "CFG_bad key"), None);
    }

    #[test]
    fn service_variables_come_after_the_containers_own_which_win() {
        let pod = one_container(json!({"env": [
            {"name": "WEB_SERVICE_PORT", "value": "9999"},
            {"name": "API", "value": "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"},
        ]}));
        let mut sources = sources();
        for (name, value) in [
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("WEB_SERVICE_PORT", "80"),
        ] {
            sources.service_env.insert(name.into(), value.into());
        }
        let container = &pod.spec.as_ref().expect("spec").containers[0];
        let node = NodeFacts::from_pod(&pod);
        let env = container_env(
            &pod,
            container,
            &sources,
            &node,
            &PreparedVolumes::default(),
        )
        .expect("env");
        assert_eq!(lookup(&env, "KUBERNETES_SERVICE_HOST"), Some("10.96.0.1"));
        assert_eq!(
            lookup(&env, "WEB_SERVICE_PORT"),
            Some("9999"),
            "the container's own wins"
        );
        assert_eq!(
            lookup(&env, "API"),
            Some("https://10.96.0.1:443"),
            "values refer to the Services' variables"
        );
        assert_eq!(
            env.iter().filter(|(k, _)| k == "WEB_SERVICE_PORT").count(),
            1,
            "once"
        );
    }

    #[test]
    fn values_expand_earlier_variables_with_dollar_escapes() {
        let pod = one_container(json!({"env": [
            {"name": "A", "value": "x"},
            {"name": "B", "value": "$(A)-$(LATER)-$$(A)-$$$(A)-cost $5-$(open"},
            {"name": "LATER", "value": "y"},
            {"name": "C", "value": "$(A)$(B)"},
        ]}));
        let env = env_of(&pod).expect("env");
        assert_eq!(lookup(&env, "B"), Some("x-$(LATER)-$(A)-$x-cost $5-$(open"));
        assert_eq!(
            lookup(&env, "C"),
            Some("xx-$(LATER)-$(A)-$x-cost $5-$(open")
        );
        assert_eq!(
            expand_references("$(HOME)/bin$", &[("HOME".into(), "/h".into())]),
            "/h/bin$"
        );
    }

    #[test]
    fn field_refs_read_the_pod_and_node() {
        let field = |name: &str, path: &str| json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}});
        let pod = one_container(json!({"env": [
            field("NAME", "metadata.name"), field("NS", "metadata.namespace"),
            field("UID", "metadata.uid"), field("APP", "metadata.labels['app']"),
            field("NONE", "metadata.labels['none']"), field("NOTE", "metadata.annotations['note']"),
            field("NODE", "spec.nodeName"), field("SA", "spec.serviceAccountName"),
            field("HOST", "status.hostIP"), field("IP", "status.podIP"), field("IPS", "status.podIPs"),
        ]}));
        let env = env_of(&pod).expect("env");
        let expected = [
            ("NAME", "web-0"),
            ("NS", "shop"),
            ("UID", "u-1"),
            ("APP", "web"),
            ("NONE", ""),
            ("NOTE", "say \"hi\""),
            ("NODE", "n1"),
            ("SA", "sa"),
            ("HOST", "192.168.1.2"),
            ("IP", "10.0.0.7"),
            ("IPS", "10.0.0.7"),
        ];
        for (name, value) in expected {
            assert_eq!(lookup(&env, name), Some(value), "{name}");
        }
        let labels = metadata_field_value(&pod, "metadata.labels").expect("labels");
        assert_eq!(labels, "app=\"web\"\ntier=\"front\"");
        let bad = one_container(json!({"env": [field("X", "spec.priority")]}));
        assert_eq!(
            env_of(&bad).unwrap_err().to_string(),
            "unsupported fieldPath: spec.priority"
        );
    }

    #[test]
    fn resource_field_refs_round_up_and_default_limits_to_allocatable() {
        let resource = |name: &str, res: &str, divisor: Option<&str>| {
            let mut selector = json!({"resource": res});
            if let Some(d) = divisor {
                selector["divisor"] = json!(d);
            }
            json!({"name": name, "valueFrom": {"resourceFieldRef": selector}})
        };
        let pod = one_container(json!({
            "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "1500m"}},
            "env": [
                resource("CPU_LIMIT", "limits.cpu", None),
                resource("CPU_REQUEST", "requests.cpu", None),
                resource("CPU_REQUEST_M", "requests.cpu", Some("1m")),
                resource("MEM_REQUEST", "requests.memory", None),
                resource("MEM_REQUEST_MI", "requests.memory", Some("1Mi")),
                resource("MEM_LIMIT_GI", "limits.memory", Some("1Gi")),
            ],
        }));
        let env = env_of(&pod).expect("env");
        let expected = [
            ("CPU_LIMIT", "2"),
            ("CPU_REQUEST", "1"),
            ("CPU_REQUEST_M", "250"),
            ("MEM_REQUEST", "67108864"),
            ("MEM_REQUEST_MI", "64"),
            ("MEM_LIMIT_GI", "8"),
        ];
        for (name, value) in expected {
            assert_eq!(lookup(&env, name), Some(value), "{name}");
        }
        let bad = one_container(json!({"env": [resource("X", "limits.gpu", None)]}));
        assert!(matches!(
            env_of(&bad),
            Err(EnvError::UnsupportedResource { .. })
        ));
    }

    #[test]
    fn missing_references_fail_in_kubernetes_words_unless_optional() {
        let key_ref = |kind: &str, name: &str, key: &str, optional: bool| json!({"name": "V", "valueFrom": {kind: {"name": name, "key": key, "optional": optional}}});
        let cases = [
            (
                key_ref("configMapKeyRef", "nope", "k", false),
                "configmap \"nope\" not found",
            ),
            (
                key_ref("secretKeyRef", "nope", "k", false),
                "secret \"nope\" not found",
            ),
            (
                key_ref("configMapKeyRef", "settings", "k", false),
                "couldn't find key k in ConfigMap shop/settings",
            ),
            (
                key_ref("secretKeyRef", "creds", "k", false),
                "couldn't find key k in Secret shop/creds",
            ),
        ];
        for (var, message) in cases {
            let pod = one_container(json!({"env": [var]}));
            assert_eq!(env_of(&pod).unwrap_err().to_string(), message);
        }
        let optional = one_container(json!({"env": [
            key_ref("configMapKeyRef", "nope", "k", true),
            key_ref("secretKeyRef", "creds", "k", true),
        ]}));
        assert_eq!(
            lookup(&env_of(&optional).expect("env"), "V"),
            None,
            "optional refs leave it unset"
        );
        let env_from = one_container(json!({"envFrom": [{"secretRef": {"name": "gone"}}]}));
        assert_eq!(
            env_of(&env_from).unwrap_err().to_string(),
            "secret \"gone\" not found"
        );
    }

    #[test]
    fn defaults_fill_only_what_the_container_left_unset() {
        let pod = one_container(json!({"env": [{"name": "PATH", "value": "/opt/bin"}]}));
        let env = env_of(&pod).expect("env");
        assert_eq!(lookup(&env, "PATH"), Some("/opt/bin"));
        assert_eq!(lookup(&env, "HOSTNAME"), Some("web-0"));
        assert_eq!(lookup(&env, "HOME"), Some("/"), "no pod root prepared");
        let plain = one_container(json!({}));
        assert_eq!(
            lookup(&env_of(&plain).expect("env"), "PATH"),
            Some(DEFAULT_PATH)
        );
    }

    #[test]
    fn references_cover_env_env_from_and_volumes() {
        let pod = pod(json!({
            "initContainers": [{"name": "init", "envFrom": [{"configMapRef": {"name": "init-cm"}}]}],
            "containers": [{"name": "app",
                "envFrom": [{"secretRef": {"name": "env-secret"}}],
                "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "key-cm", "key": "k"}}},
                        {"name": "B", "valueFrom": {"secretKeyRef": {"name": "key-secret", "key": "k"}}}]}],
            "volumes": [
                {"name": "v1", "configMap": {"name": "vol-cm"}},
                {"name": "v2", "secret": {"secretName": "vol-secret"}},
                {"name": "v3", "projected": {"sources": [
                    {"configMap": {"name": "proj-cm"}}, {"secret": {"name": "proj-secret"}}]}},
            ],
        }));
        let maps: Vec<String> = referenced_config_maps(&pod).into_iter().collect();
        assert_eq!(maps, ["init-cm", "key-cm", "proj-cm", "vol-cm"]);
        let secrets: Vec<String> = referenced_secrets(&pod).into_iter().collect();
        assert_eq!(
            secrets,
            ["env-secret", "key-secret", "proj-secret", "vol-secret"]
        );
    }

    #[test]
    fn env_var_names_follow_kubernetes_rules() {
        for good in ["A", "my.env-name", "_x1", "MY_ENV.NAME", "-a"] {
            assert!(is_env_var_name(good), "{good}");
        }
        for bad in ["", "1A", "a b", ".", "..", "..a", "a=b", "é"] {
            assert!(!is_env_var_name(bad), "{bad}");
        }
    }
}
