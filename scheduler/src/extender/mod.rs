//! HTTP extenders: the `extenders` of a KubeSchedulerConfiguration, web
//! services that kube-scheduler calls after its own filters (filter), after
//! its own scoring (prioritize) and instead of its binder (bind), as
//! kube-scheduler's `HTTPExtender`.
//!
//! The wire format is kube-scheduler's `k8s.io/kube-scheduler/extender/v1`
//! types, which have no JSON tags: requests carry `Pod`, `Nodes`,
//! `NodeNames`, `PodName`… with their Go field names, and answers are read
//! as Go's decoder reads them, field names in any case (`nodenames` and
//! `NodeNames` alike).
//!
//! Each call is one HTTP/1.1 POST on its own connection (http, or https
//! over rustls), bounded as a whole by the extender's `httpTimeout`.
//! Preemption (`preemptVerb`) is parsed but not called.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::Full;
use k8s_openapi::api::core::v1::{Container, Node, Pod};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::time::Instant;

use crate::framework::{NodeInfo, NodeScore, NodeStatuses, Status, MAX_NODE_SCORE};
use crate::plugins::node_resources_fit::allocation::is_extended_resource_name;

mod tls;
mod wire;

use skiff_machinery::http_client::{self, Tls, Url};
use tls::*;
use wire::*;

/// The highest score an extender gives a node (`MaxExtenderPriority`).
pub const MAX_EXTENDER_PRIORITY: i64 = 10;

/// kube-scheduler's `DefaultExtenderTimeout`: an `httpTimeout` of zero or
/// none.
pub const DEFAULT_EXTENDER_TIMEOUT: Duration = Duration::from_secs(5);

/// The plugin name rejections by an extender carry in their [`Status`]
/// (kube-scheduler's `framework.ExtenderName`).
pub const EXTENDER_PLUGIN_NAME: &str = "Extender";

/// The largest answer read from an extender (a full node list included).
const MAX_RESPONSE_BYTES: usize = 128 * 1024 * 1024;

/// One entry of `extenders`, as KubeSchedulerConfiguration v1 spells it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ExtenderConfig {
    url_prefix: Option<String>,
    filter_verb: Option<String>,
    preempt_verb: Option<String>,
    prioritize_verb: Option<String>,
    weight: Option<i64>,
    bind_verb: Option<String>,
    #[serde(rename = "enableHTTPS")]
    enable_https: Option<bool>,
    tls_config: Option<TlsConfig>,
    http_timeout: Option<String>,
    node_cache_capable: Option<bool>,
    managed_resources: Option<Vec<ManagedResource>>,
    ignorable: Option<bool>,
}

/// `tlsConfig`: the `*Data` fields are base64, as Go encodes `[]byte`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TlsConfig {
    insecure: Option<bool>,
    server_name: Option<String>,
    cert_file: Option<String>,
    key_file: Option<String>,
    ca_file: Option<String>,
    cert_data: Option<String>,
    key_data: Option<String>,
    ca_data: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ManagedResource {
    name: Option<String>,
    ignored_by_scheduler: Option<bool>,
}

/// A configuration error: the field path under the extender, and what is
/// wrong with it.
struct ConfigError {
    field: String,
    message: String,
}

impl ConfigError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            field: field.into(),
            message: message.into(),
        }
    }

    /// `prefix.field: message`, or `prefix: message` without a field.
    fn under(&self, prefix: &str) -> String {
        match (prefix.is_empty(), self.field.is_empty()) {
            (true, true) => self.message.clone(),
            (true, false) => format!("{}: {}", self.field, self.message),
            (false, true) => format!("{prefix}: {}", self.message),
            (false, false) => format!("{prefix}.{}: {}", self.field, self.message),
        }
    }
}

/// An HTTP extender built from one `extenders` entry.
#[derive(Debug)]
pub struct Extender {
    url_prefix: String,
    filter_verb: String,
    preempt_verb: String,
    prioritize_verb: String,
    bind_verb: String,
    weight: i64,
    timeout: Duration,
    node_cache_capable: bool,
    managed_resources: BTreeSet<String>,
    /// Managed resources with `ignoredByScheduler`, in their order.
    ignored_resources: Vec<String>,
    ignorable: bool,
    /// The TLS settings for an https `urlPrefix`.
    tls: Option<Tls>,
}

/// What an extender's filter call answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilterOutcome {
    /// The nodes that passed, in the extender's order; all of them were
    /// among the nodes sent.
    pub passed: Vec<String>,
    /// Node → why it failed; preemption may help.
    pub failed: BTreeMap<String, String>,
    /// Node → why it failed; preemption cannot help. A node here is not
    /// also in `failed`.
    pub failed_and_unresolvable: BTreeMap<String, String>,
}

impl Extender {
    /// Builds an extender from one `extenders` entry, validated as
    /// kube-scheduler validates it (the checks across extenders are in
    /// [`extenders_from_config`]).
    pub fn from_config(value: &Value) -> Result<Extender, String> {
        Extender::build(value).map_err(|e| e.under(""))
    }

    fn build(value: &Value) -> Result<Extender, ConfigError> {
        let config: ExtenderConfig = match value {
            Value::Null => ExtenderConfig::default(),
            value => ExtenderConfig::deserialize(value)
                .map_err(|e| ConfigError::new("", e.to_string()))?,
        };
        let url_prefix = config.url_prefix.unwrap_or_default();
        if url_prefix.is_empty() {
            return Err(ConfigError::new("urlPrefix", "Required value"));
        }
        Url::parse(&url_prefix).map_err(|why| {
            ConfigError::new("urlPrefix", format!("Invalid value: {url_prefix:?}: {why}"))
        })?;
        let prioritize_verb = config.prioritize_verb.unwrap_or_default();
        let weight = config.weight.unwrap_or(0);
        if !prioritize_verb.is_empty() && weight <= 0 {
            return Err(ConfigError::new(
                "weight",
                format!("Invalid value: {weight}: must have a positive weight applied to it"),
            ));
        }
        let timeout = match config.http_timeout.as_deref() {
            None | Some("") => DEFAULT_EXTENDER_TIMEOUT,
            Some(text) => match skiff_machinery::duration::parse_signed(text) {
                Ok((_, true)) => {
                    return Err(ConfigError::new(
                        "httpTimeout",
                        format!("Invalid value: {text:?}: must not be negative"),
                    ))
                }
                Ok((duration, false)) if duration.is_zero() => DEFAULT_EXTENDER_TIMEOUT,
                Ok((duration, false)) => duration,
                Err(why) => {
                    return Err(ConfigError::new(
                        "httpTimeout",
                        format!("Invalid value: {text:?}: {why}"),
                    ))
                }
            },
        };
        let mut managed_resources = BTreeSet::new();
        let mut ignored_resources = Vec::new();
        for (i, resource) in config
            .managed_resources
            .unwrap_or_default()
            .into_iter()
            .enumerate()
        {
            let field = format!("managedResources[{i}].name");
            let name = resource.name.unwrap_or_default();
            if let Some(why) = invalid_extended_resource_name(&name) {
                return Err(ConfigError::new(
                    field,
                    format!("Invalid value: {name:?}: {why}"),
                ));
            }
            if !managed_resources.insert(name.clone()) {
                return Err(ConfigError::new(
                    field,
                    format!("Invalid value: {name:?}: duplicate extender managed resource name"),
                ));
            }
            if resource.ignored_by_scheduler.unwrap_or(false) {
                ignored_resources.push(name);
            }
        }
        // Checked even for an http URL, as kube-scheduler does.
        let tls = tls_settings(
            config.tls_config.as_ref(),
            config.enable_https.unwrap_or(false),
        )?;
        Ok(Extender {
            url_prefix,
            filter_verb: config.filter_verb.unwrap_or_default(),
            preempt_verb: config.preempt_verb.unwrap_or_default(),
            prioritize_verb,
            bind_verb: config.bind_verb.unwrap_or_default(),
            weight,
            timeout,
            node_cache_capable: config.node_cache_capable.unwrap_or(false),
            managed_resources,
            ignored_resources,
            ignorable: config.ignorable.unwrap_or(false),
            tls,
        })
    }

    /// The extender's name: its `urlPrefix`.
    pub fn name(&self) -> &str {
        &self.url_prefix
    }

    /// Whether a failing call is skipped rather than failing the pod.
    pub fn is_ignorable(&self) -> bool {
        self.ignorable
    }

    /// Whether the extender binds pods (`bindVerb`).
    pub fn is_binder(&self) -> bool {
        !self.bind_verb.is_empty()
    }

    /// Whether the extender filters nodes (`filterVerb`).
    pub fn is_filter(&self) -> bool {
        !self.filter_verb.is_empty()
    }

    /// Whether the extender scores nodes (`prioritizeVerb`).
    pub fn is_prioritizer(&self) -> bool {
        !self.prioritize_verb.is_empty()
    }

    /// Whether `preemptVerb` is set (preemption is not called yet).
    pub fn supports_preemption(&self) -> bool {
        !self.preempt_verb.is_empty()
    }

    pub fn weight(&self) -> i64 {
        self.weight
    }

    pub fn http_timeout(&self) -> Duration {
        self.timeout
    }

    pub fn node_cache_capable(&self) -> bool {
        self.node_cache_capable
    }

    /// The managed resources with `ignoredByScheduler: true`: what
    /// NodeResourcesFit should leave to the extender.
    pub fn ignored_resources(&self) -> &[String] {
        &self.ignored_resources
    }

    /// Whether the extender is called for `pod`: always without
    /// `managedResources`, else when a container or init container requests
    /// or limits one of them.
    pub fn is_interested(&self, pod: &Pod) -> bool {
        if self.managed_resources.is_empty() {
            return true;
        }
        let Some(spec) = pod.spec.as_ref() else {
            return false;
        };
        spec.containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .any(|c| self.uses_managed_resource(c))
    }

    fn uses_managed_resource(&self, container: &Container) -> bool {
        let Some(resources) = container.resources.as_ref() else {
            return false;
        };
        resources
            .requests
            .iter()
            .chain(resources.limits.iter())
            .flat_map(|list| list.keys())
            .any(|name| self.managed_resources.contains(name))
    }

    /// The filter call: which of `nodes` the extender lets through, and
    /// why the others fail. Without `filterVerb` every node passes. An
    /// `Error` in the answer, or a passed node that was not sent, is an
    /// error.
    pub async fn filter(
        &self,
        pod: &Pod,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<FilterOutcome, String> {
        if self.filter_verb.is_empty() {
            return Ok(FilterOutcome {
                passed: nodes.iter().map(|n| n.name().to_string()).collect(),
                ..FilterOutcome::default()
            });
        }
        let body = self.extender_args(pod, nodes)?;
        let answer = self.send(&self.filter_verb, body).await?;
        let result = FilterResult::decode(&answer)
            .map_err(|why| self.decode_error(&self.filter_verb, &why))?;
        if !result.error.is_empty() {
            return Err(result.error);
        }
        // As kube-scheduler: the names count for a node-cache-capable
        // extender that sent them, the node list otherwise; neither is no
        // node at all.
        let passed = match (self.node_cache_capable, result.node_names, result.nodes) {
            (true, Some(names), _) => names,
            (_, _, Some(nodes)) => nodes,
            _ => Vec::new(),
        };
        let sent: HashSet<&str> = nodes.iter().map(|n| n.name()).collect();
        let mut seen = HashSet::new();
        let mut kept = Vec::with_capacity(passed.len());
        for name in passed {
            if !sent.contains(name.as_str()) {
                return Err(format!(
                    "extender {:?} claims a filtered node {name:?} which is not found in the input node list",
                    self.url_prefix
                ));
            }
            if seen.insert(name.clone()) {
                kept.push(name);
            }
        }
        let failed_and_unresolvable = result.failed_and_unresolvable_nodes;
        let failed = result
            .failed_nodes
            .into_iter()
            .filter(|(node, _)| !failed_and_unresolvable.contains_key(node))
            .collect();
        Ok(FilterOutcome {
            passed: kept,
            failed,
            failed_and_unresolvable,
        })
    }

    /// The prioritize call: each node's score, already multiplied by the
    /// extender's weight and scaled from 0..=MAX_EXTENDER_PRIORITY to the
    /// framework's 0..=MAX_NODE_SCORE, as kube-scheduler adds it to the
    /// plugins' total. Without `prioritizeVerb` every node scores 0.
    pub async fn prioritize(
        &self,
        pod: &Pod,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<Vec<(String, i64)>, String> {
        if self.prioritize_verb.is_empty() {
            return Ok(nodes.iter().map(|n| (n.name().to_string(), 0)).collect());
        }
        let body = self.extender_args(pod, nodes)?;
        let answer = self.send(&self.prioritize_verb, body).await?;
        let list = decode_host_priorities(&answer)
            .map_err(|why| self.decode_error(&self.prioritize_verb, &why))?;
        Ok(list
            .into_iter()
            .map(|(host, score)| (host, scaled_score(score, self.weight)))
            .collect())
    }

    /// The bind call: the extender binds `pod` to `node`. An `Error` in
    /// the answer is an error.
    pub async fn bind(&self, pod: &Pod, node: &str) -> Result<(), String> {
        if !self.is_binder() {
            return Err("unexpected empty bindVerb in extender".to_string());
        }
        let args = BindingArgs {
            pod_name: pod.metadata.name.as_deref().unwrap_or_default(),
            pod_namespace: pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod_uid: pod.metadata.uid.as_deref().unwrap_or_default(),
            node,
        };
        let body =
            serde_json::to_vec(&args).map_err(|e| format!("encoding ExtenderBindingArgs: {e}"))?;
        let answer = self.send(&self.bind_verb, body).await?;
        let error = decode_error_field(&answer, "ExtenderBindingResult")
            .map_err(|why| self.decode_error(&self.bind_verb, &why))?;
        match error.is_empty() {
            true => Ok(()),
            false => Err(error),
        }
    }

    /// ExtenderArgs: the pod and the nodes, whole or (node cache capable)
    /// by name.
    fn extender_args(&self, pod: &Pod, nodes: &[Arc<NodeInfo>]) -> Result<Vec<u8>, String> {
        let args = match self.node_cache_capable {
            true => ExtenderArgs {
                pod,
                nodes: None,
                node_names: Some(nodes.iter().map(|n| n.name()).collect()),
            },
            false => ExtenderArgs {
                pod,
                nodes: Some(NodeList {
                    metadata: EmptyObject {},
                    items: nodes.iter().map(|n| n.node.as_ref()).collect(),
                }),
                node_names: None,
            },
        };
        serde_json::to_vec(&args).map_err(|e| format!("encoding ExtenderArgs: {e}"))
    }

    fn url(&self, verb: &str) -> String {
        format!("{}/{verb}", self.url_prefix.trim_end_matches('/'))
    }

    fn decode_error(&self, verb: &str, why: &str) -> String {
        format!(
            "failed to decode the {verb} response of extender at URL {}: {why}",
            self.url(verb)
        )
    }

    /// POSTs `body` to `urlPrefix/verb` and returns the decoded JSON of a
    /// 200 answer. The whole exchange is bounded by `httpTimeout`; errors
    /// read as Go's HTTP client words them.
    async fn send(&self, verb: &str, body: Vec<u8>) -> Result<Value, String> {
        let url = self.url(verb);
        let target = Url::parse(&url).map_err(|why| format!("Post {url:?}: {why}"))?;
        let deadline = Instant::now() + self.timeout;
        let request = hyper::Request::post(target.path.as_str())
            .header(hyper::header::HOST, target.authority.as_str())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::ACCEPT, "application/json")
            .header(hyper::header::USER_AGENT, "kube-scheduler (skiff)")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("Post {url:?}: {e}"))?;
        let call = http_client::send(&target, self.tls.as_ref(), request);
        let (response, driver) = match tokio::time::timeout_at(deadline, call).await {
            Ok(answered) => answered.map_err(|why| format!("Post {url:?}: {why}"))?,
            Err(_) => {
                return Err(format!(
                    "Post {url:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
                ))
            }
        };
        if response.status() != hyper::StatusCode::OK {
            return Err(format!(
                "failed {verb} with extender at URL {url}, code {}",
                response.status().as_u16()
            ));
        }
        let read = http_client::read_body(response.into_body(), MAX_RESPONSE_BYTES);
        let collected = match tokio::time::timeout_at(deadline, read).await {
            Ok(Ok(collected)) => collected,
            Ok(Err(e)) => return Err(format!("reading the {verb} response of extender at URL {url}: {e}")),
            Err(_) => {
                return Err(
                    "net/http: request canceled (Client.Timeout or context cancellation while reading body)"
                        .to_string(),
                )
            }
        };
        drop(driver);
        serde_json::from_slice(&collected).map_err(|e| self.decode_error(verb, &e.to_string()))
    }
}

/// Builds the extenders of a configuration's `extenders`, validated as
/// kube-scheduler does: each entry, no managed resource named twice, at
/// most one binder. The ignorable ones come last, as kube-scheduler orders
/// them.
pub fn extenders_from_config(values: &[Value]) -> Result<Vec<Arc<Extender>>, String> {
    let mut extenders = Vec::with_capacity(values.len());
    let mut managed: HashSet<String> = HashSet::new();
    for (i, value) in values.iter().enumerate() {
        let prefix = format!("extenders[{i}]");
        let extender = Extender::build(value).map_err(|e| e.under(&prefix))?;
        for (j, name) in managed_resource_names(value).into_iter().enumerate() {
            if !managed.insert(name.clone()) {
                return Err(format!(
                    "{prefix}.managedResources[{j}].name: Invalid value: {name:?}: duplicate extender managed resource name"
                ));
            }
        }
        extenders.push(Arc::new(extender));
    }
    let binders = extenders.iter().filter(|e| e.is_binder()).count();
    if binders > 1 {
        return Err(format!(
            "extenders: Invalid value: \"found {binders} extenders implementing bind\": only one extender can implement bind"
        ));
    }
    let (ignorable, mut ordered): (Vec<_>, Vec<_>) =
        extenders.into_iter().partition(|e| e.is_ignorable());
    ordered.extend(ignorable);
    Ok(ordered)
}

/// The managed resources' names of one (already validated) entry, in order.
fn managed_resource_names(value: &Value) -> Vec<String> {
    value
        .get("managedResources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("name").and_then(Value::as_str))
        .map(str::to_string)
        .collect()
}

/// Every extender's managed resources with `ignoredByScheduler: true`:
/// kube-scheduler sets them as NodeResourcesFit's `ignoredResources` in
/// every profile.
pub fn ignored_resources(extenders: &[Arc<Extender>]) -> Vec<String> {
    extenders
        .iter()
        .flat_map(|e| e.ignored_resources.iter().cloned())
        .collect()
}

/// kube-scheduler's findNodesThatPassExtenders: each interested extender
/// in turn filters what the ones before let through. Nodes an extender
/// rejects get an Unschedulable status (UnschedulableAndUnresolvable for
/// `failedAndUnresolvableNodes`) with its reason. A failing extender is
/// skipped when ignorable, else the cycle fails with an Error status.
pub async fn run_extenders_filter(
    extenders: &[Arc<Extender>],
    pod: &Pod,
    feasible: Vec<Arc<NodeInfo>>,
    statuses: &mut NodeStatuses,
) -> Result<Vec<Arc<NodeInfo>>, Status> {
    let mut feasible = feasible;
    for extender in extenders {
        if feasible.is_empty() {
            break;
        }
        if !extender.is_interested(pod) {
            continue;
        }
        let outcome = match extender.filter(pod, &feasible).await {
            Ok(outcome) => outcome,
            Err(error) if extender.is_ignorable() => {
                tracing::info!(extender = extender.name(), %error, "skipping extender as it returned error and has ignorable flag set");
                continue;
            }
            Err(error) => return Err(Status::error(error)),
        };
        let by_name: HashMap<&str, &Arc<NodeInfo>> =
            feasible.iter().map(|n| (n.name(), n)).collect();
        for (node, reason) in &outcome.failed_and_unresolvable {
            if by_name.contains_key(node.as_str()) {
                statuses.insert(
                    node.clone(),
                    Status::unresolvable(reason.clone()).with_plugin(EXTENDER_PLUGIN_NAME),
                );
            }
        }
        for (node, reason) in &outcome.failed {
            if by_name.contains_key(node.as_str()) {
                statuses.insert(
                    node.clone(),
                    Status::unschedulable(reason.clone()).with_plugin(EXTENDER_PLUGIN_NAME),
                );
            }
        }
        let passed: Vec<Arc<NodeInfo>> = outcome
            .passed
            .iter()
            .filter_map(|name| by_name.get(name.as_str()).map(|n| Arc::clone(n)))
            .collect();
        feasible = passed;
    }
    Ok(feasible)
}

/// kube-scheduler's extender part of prioritizeNodes: the interested
/// extenders are called together and each node's weighted, scaled scores
/// are added to its total in `totals` (matched by name). A failing
/// prioritize call only leaves that extender's scores out.
pub async fn run_extenders_prioritize(
    extenders: &[Arc<Extender>],
    pod: &Pod,
    nodes: &[Arc<NodeInfo>],
    totals: &mut [NodeScore],
) {
    if nodes.is_empty() {
        return;
    }
    let calls = extenders
        .iter()
        .filter(|e| e.is_interested(pod))
        .map(|extender| async move { (extender, extender.prioritize(pod, nodes).await) });
    let mut sums: HashMap<String, i64> = HashMap::new();
    for (extender, result) in futures::future::join_all(calls).await {
        match result {
            Ok(scores) => {
                for (host, score) in scores {
                    let sum = sums.entry(host).or_default();
                    *sum = sum.saturating_add(score);
                }
            }
            Err(error) => {
                tracing::debug!(extender = extender.name(), %error, "failed to run extender's priority function; no score given by this extender")
            }
        }
    }
    for total in totals.iter_mut() {
        if let Some(sum) = sums.get(total.name.as_ref()) {
            total.score = total.score.saturating_add(*sum);
        }
    }
}

/// kube-scheduler's extendersBinding: the first binder extender
/// interested in the pod binds it. `None`: no extender took the binding,
/// the Bind plugins should. A failing ignorable extender passes to the
/// next one.
pub async fn run_extenders_bind(
    extenders: &[Arc<Extender>],
    pod: &Pod,
    node: &str,
) -> Option<Status> {
    for extender in extenders {
        if !extender.is_binder() || !extender.is_interested(pod) {
            continue;
        }
        match extender.bind(pod, node).await {
            Ok(()) => return Some(Status::success()),
            Err(error) if extender.is_ignorable() => {
                tracing::info!(extender = extender.name(), %error, "skipping extender in bind as it returned error and has ignorable flag set");
            }
            Err(error) => return Some(Status::error(error)),
        }
    }
    None
}

/// An extender score (0..=MAX_EXTENDER_PRIORITY) times the weight, in the
/// framework's range.
fn scaled_score(score: i64, weight: i64) -> i64 {
    score
        .saturating_mul(weight)
        .saturating_mul(MAX_NODE_SCORE / MAX_EXTENDER_PRIORITY)
}

/// Why `name` is not a valid managed resource (an extended resource
/// name: `example.com/foo`), as kube-scheduler's validation says it.
fn invalid_extended_resource_name(name: &str) -> Option<String> {
    let errors = skiff_machinery::validation::is_qualified_name(name);
    if !errors.is_empty() {
        return Some(errors.join(", "));
    }
    (!is_extended_resource_name(name)).then(|| "is an invalid extended resource name".to_string())
}

#[cfg(test)]
mod tests;
