//! The values of a pod spec that Kubernetes checks beyond names, images,
//! ports and mounts: policies, probes and lifecycle handlers, env names,
//! volume sources, tolerations, affinity, scheduling fields. Pods and
//! every pod template share it; fields left empty are the defaulter's to
//! fill, so only values that were sent are judged.

use serde_json::Value;

use super::{
    field, forbidden, go_quote, invalid, invalid_each, is_dns1123_label, is_dns1123_subdomain,
    is_qualified_name, is_valid_label_value, is_valid_port_name, is_valid_port_num, items,
    non_negative, not_supported, required, text, validate_label_selector, validate_labels,
    PORT_RANGE_ERR,
};
use crate::status::Cause;

const HANDLER_TYPES: &[&str] = &["exec", "httpGet", "tcpSocket", "grpc", "sleep"];

/// `field` of `parent` when it was sent as a string (an absent field and
/// an explicit `""` are the defaulter's).
fn sent<'a>(parent: &'a Value, name: &str) -> Option<&'a str> {
    parent
        .get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn check_enum(causes: &mut Vec<Cause>, parent: &Value, name: &str, path: &str, allowed: &[&str]) {
    if let Some(value) = sent(parent, name) {
        if !allowed.contains(&value) {
            causes.push(not_supported(format!("{path}.{name}"), value, allowed));
        }
    }
}

fn present(parent: &Value, name: &str) -> bool {
    parent.get(name).is_some_and(|v| !v.is_null())
}

// ---------------------------------------------------------------------------
// Containers
// ---------------------------------------------------------------------------

/// The checks of one container at `path` that validation.rs's
/// `validate_container` leaves out; `init` for an init container.
pub(super) fn validate_container_fields(
    causes: &mut Vec<Cause>,
    container: &Value,
    path: &str,
    init: bool,
) {
    check_enum(
        causes,
        container,
        "imagePullPolicy",
        path,
        &["Always", "IfNotPresent", "Never"],
    );
    check_enum(
        causes,
        container,
        "terminationMessagePolicy",
        path,
        &["File", "FallbackToLogsOnError"],
    );
    for (i, env) in items(container, "env").iter().enumerate() {
        let name = text(env, "name");
        if !name.is_empty() && !is_relaxed_env_var_name(name) {
            let detail = "a valid environment variable name must consist only of printable ASCII characters other than '='";
            causes.push(invalid(
                format!("{path}.env[{i}].name"),
                &go_quote(name),
                detail,
            ));
        }
    }
    super::pod_env::validate_env_sources(causes, container, path);
    super::security_context::validate_container_security_context(causes, container, path);
    let restart_policy = container.get("restartPolicy").filter(|p| !p.is_null());
    let restartable = init && restart_policy.and_then(Value::as_str) == Some("Always");
    match restart_policy {
        Some(_) if !init => causes.push(forbidden(
            format!("{path}.restartPolicy"),
            "may not be set for non-init containers",
        )),
        Some(policy) if !restartable => causes.push(not_supported(
            format!("{path}.restartPolicy"),
            policy.as_str().unwrap_or_default(),
            &["Always"],
        )),
        _ => {}
    }
    if init && !restartable {
        for name in [
            "lifecycle",
            "livenessProbe",
            "readinessProbe",
            "startupProbe",
        ] {
            if present(container, name) {
                causes.push(forbidden(
                    format!("{path}.{name}"),
                    "may not be set for init containers without restartPolicy=Always",
                ));
            }
        }
        return;
    }
    let lifecycle = field(container, "lifecycle");
    for hook in ["postStart", "preStop"] {
        if let Some(handler) = lifecycle.get(hook).filter(|h| !h.is_null()) {
            validate_handler(causes, handler, &format!("{path}.lifecycle.{hook}"));
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(value) = container.get(probe).filter(|p| !p.is_null()) {
            validate_probe(causes, value, probe, &format!("{path}.{probe}"));
        }
    }
}

/// `IsRelaxedEnvVarName`, which Kubernetes applies since
/// RelaxedEnvironmentVariableValidation became the default.
fn is_relaxed_env_var_name(name: &str) -> bool {
    name.bytes()
        .all(|b| (b' '..=b'~').contains(&b) && b != b'=')
}

fn validate_probe(causes: &mut Vec<Cause>, probe: &Value, kind: &str, path: &str) {
    validate_handler(causes, probe, path);
    for name in [
        "initialDelaySeconds",
        "timeoutSeconds",
        "periodSeconds",
        "successThreshold",
        "failureThreshold",
    ] {
        non_negative(causes, probe, name, path);
    }
    if let Some(grace) = probe
        .get("terminationGracePeriodSeconds")
        .and_then(Value::as_i64)
    {
        if kind == "readinessProbe" {
            let detail = "must not be set for readinessProbes";
            let at = format!("{path}.terminationGracePeriodSeconds");
            causes.push(invalid(at, &grace.to_string(), detail));
        } else if grace <= 0 {
            let at = format!("{path}.terminationGracePeriodSeconds");
            causes.push(invalid(at, &grace.to_string(), "must be greater than 0"));
        }
    }
    let success = probe.get("successThreshold").and_then(Value::as_i64);
    if kind != "readinessProbe" && success.is_some_and(|n| n != 1) {
        let at = format!("{path}.successThreshold");
        causes.push(invalid(at, &success.unwrap_or(0).to_string(), "must be 1"));
    }
}

/// A probe's or a lifecycle hook's handler: exactly one type, and that
/// type's own fields.
fn validate_handler(causes: &mut Vec<Cause>, handler: &Value, path: &str) {
    let mut found = 0;
    for kind in HANDLER_TYPES {
        let Some(action) = handler.get(*kind).filter(|a| !a.is_null()) else {
            continue;
        };
        let at = format!("{path}.{kind}");
        if found > 0 {
            causes.push(forbidden(at, "may not specify more than 1 handler type"));
            continue;
        }
        found += 1;
        match *kind {
            "exec" if items(action, "command").is_empty() => {
                causes.push(required(format!("{at}.command"), ""))
            }
            "httpGet" => {
                check_port_num_or_name(causes, field(action, "port"), &format!("{at}.port"));
                check_enum(causes, action, "scheme", &at, &["HTTP", "HTTPS"]);
            }
            "tcpSocket" | "grpc" => {
                check_port_num_or_name(causes, field(action, "port"), &format!("{at}.port"))
            }
            _ => {}
        }
    }
    if found == 0 {
        causes.push(required(path, "must specify a handler type"));
    }
}

/// `ValidatePortNumOrName`: 1-65535, or an IANA service name.
fn check_port_num_or_name(causes: &mut Vec<Cause>, port: &Value, path: &str) {
    match port {
        Value::Number(n) => {
            let n = n.as_i64().unwrap_or(-1);
            if !is_valid_port_num(n) {
                causes.push(invalid(path, &n.to_string(), PORT_RANGE_ERR));
            }
        }
        Value::String(s) => invalid_each(causes, path, s, is_valid_port_name(s)),
        _ => {}
    }
}

// ---------------------------------------------------------------------------
// The pod spec
// ---------------------------------------------------------------------------

/// The volume sources a pod volume may name, exactly one at a time.
pub(crate) const VOLUME_SOURCES: &[&str] = &[
    "hostPath",
    "emptyDir",
    "gitRepo",
    "awsElasticBlockStore",
    "gcePersistentDisk",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "persistentVolumeClaim",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "downwardAPI",
    "fc",
    "azureFile",
    "configMap",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "projected",
    "storageos",
    "csi",
    "ephemeral",
    "image",
];

/// The spec-level checks at `path` (`spec`, `spec.template.spec`).
pub(super) fn validate_pod_spec_fields(causes: &mut Vec<Cause>, spec: &Value, path: &str) {
    for (i, volume) in items(spec, "volumes").iter().enumerate() {
        // A volume without a source is defaulted to emptyDir; two are refused.
        let sources = VOLUME_SOURCES.iter().filter(|s| present(volume, s));
        for source in sources.skip(1) {
            causes.push(forbidden(
                format!("{path}.volumes[{i}].{source}"),
                "may not specify more than 1 volume type",
            ));
        }
        if let Some(ephemeral) = volume.get("ephemeral").filter(|e| !e.is_null()) {
            let at = format!("{path}.volumes[{i}].ephemeral.volumeClaimTemplate");
            match ephemeral
                .get("volumeClaimTemplate")
                .filter(|t| !t.is_null())
            {
                None => causes.push(required(at, "")),
                Some(template) => super::quantities::validate_claim_spec(
                    causes,
                    field(template, "spec"),
                    &format!("{at}.spec"),
                ),
            }
        }
    }
    if let Some(overhead) = spec.get("overhead").filter(|o| !o.is_null()) {
        // Kubernetes checks the overhead as a container's limits.
        let as_limits = serde_json::json!({ "limits": overhead });
        let at = format!("{path}.overhead");
        super::quantities::validate_resource_requirements(causes, &as_limits, &at);
    }
    check_host_ports(
        causes,
        items(spec, "containers"),
        &format!("{path}.containers"),
    );
    // Init containers run one at a time: each only against itself.
    for (i, container) in items(spec, "initContainers").iter().enumerate() {
        let at = format!("{path}.initContainers");
        check_host_ports_from(causes, std::slice::from_ref(container), &at, i);
    }
    check_enum(
        causes,
        spec,
        "dnsPolicy",
        path,
        &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
    );
    if sent(spec, "dnsPolicy") == Some("None") && !present(spec, "dnsConfig") {
        causes.push(required(
            format!("{path}.dnsConfig"),
            "must provide `dnsConfig` when `dnsPolicy` is None",
        ));
    }
    validate_labels(
        causes,
        spec,
        "nodeSelector",
        &format!("{path}.nodeSelector"),
    );
    for (name, check) in [
        (
            "serviceAccountName",
            is_dns1123_subdomain as fn(&str) -> Vec<String>,
        ),
        ("nodeName", is_dns1123_subdomain),
        ("priorityClassName", is_dns1123_subdomain),
        ("hostname", is_dns1123_label),
        ("subdomain", is_dns1123_label),
    ] {
        if let Some(value) = sent(spec, name) {
            invalid_each(causes, &format!("{path}.{name}"), value, check(value));
        }
    }
    if let Some(deadline) = spec.get("activeDeadlineSeconds").and_then(Value::as_i64) {
        if !(1..=i64::from(i32::MAX)).contains(&deadline) {
            causes.push(invalid(
                format!("{path}.activeDeadlineSeconds"),
                &deadline.to_string(),
                "must be between 1 and 2147483647, inclusive",
            ));
        }
    }
    check_enum(
        causes,
        spec,
        "preemptionPolicy",
        path,
        &["PreemptLowerPriority", "Never"],
    );
    for (i, toleration) in items(spec, "tolerations").iter().enumerate() {
        validate_toleration(causes, toleration, &format!("{path}.tolerations[{i}]"));
    }
    validate_affinity(causes, field(spec, "affinity"), &format!("{path}.affinity"));
    super::security_context::validate_pod_security_context(causes, spec, path);
    validate_dns_config(causes, spec, path);
    validate_host_aliases(causes, spec, path);
    validate_gates(causes, spec, path);
    validate_topology_spread(causes, spec, path);
    validate_os(causes, spec, path);
}

fn validate_dns_config(causes: &mut Vec<Cause>, spec: &Value, path: &str) {
    let config = field(spec, "dnsConfig");
    let at = format!("{path}.dnsConfig");
    let nameservers = items(config, "nameservers");
    if sent(spec, "dnsPolicy") == Some("None")
        && present(spec, "dnsConfig")
        && nameservers.is_empty()
    {
        causes.push(required(
            format!("{at}.nameservers"),
            "must provide at least one DNS nameserver when `dnsPolicy` is None",
        ));
        // Kubernetes says no more about this dnsConfig.
        return;
    }
    let listed: Vec<String> = nameservers
        .iter()
        .map(|n| n.as_str().unwrap_or_default().to_string())
        .collect();
    if listed.len() > 3 {
        causes.push(invalid(
            format!("{at}.nameservers"),
            &super::go_string_slice(&listed),
            "must not have more than 3 nameservers",
        ));
    }
    for (i, server) in listed.iter().enumerate() {
        check_ip(causes, server, &format!("{at}.nameservers[{i}]"));
    }
    let searches: Vec<String> = items(config, "searches")
        .iter()
        .map(|n| n.as_str().unwrap_or_default().to_string())
        .collect();
    if searches.len() > 32 {
        causes.push(invalid(
            format!("{at}.searches"),
            &super::go_string_slice(&searches),
            "must not have more than 32 search paths",
        ));
    }
    for (i, option) in items(config, "options").iter().enumerate() {
        if text(option, "name").is_empty() {
            causes.push(required(format!("{at}.options[{i}]"), "must not be empty"));
        }
    }
}

fn check_ip(causes: &mut Vec<Cause>, ip: &str, path: &str) {
    if ip.parse::<std::net::IpAddr>().is_err() {
        let detail = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";
        causes.push(invalid(path, &go_quote(ip), detail));
    }
}

fn validate_host_aliases(causes: &mut Vec<Cause>, spec: &Value, path: &str) {
    for (i, alias) in items(spec, "hostAliases").iter().enumerate() {
        let at = format!("{path}.hostAliases[{i}]");
        check_ip(causes, text(alias, "ip"), &format!("{at}.ip"));
        for (j, host) in items(alias, "hostnames").iter().enumerate() {
            let host = host.as_str().unwrap_or_default();
            let host_path = format!("{at}.hostnames[{j}]");
            invalid_each(causes, &host_path, host, is_dns1123_subdomain(host));
        }
    }
}

fn validate_gates(causes: &mut Vec<Cause>, spec: &Value, path: &str) {
    for (i, gate) in items(spec, "readinessGates").iter().enumerate() {
        let condition = text(gate, "conditionType");
        let at = format!("{path}.readinessGates[{i}].conditionType");
        invalid_each(causes, &at, condition, is_qualified_name(condition));
    }
    let mut seen = std::collections::HashSet::new();
    for (i, gate) in items(spec, "schedulingGates").iter().enumerate() {
        let name = text(gate, "name");
        let at = format!("{path}.schedulingGates[{i}]");
        invalid_each(causes, &at, name, is_qualified_name(name));
        if !seen.insert(name) {
            causes.push(super::duplicate(at, name));
        }
    }
}

fn validate_topology_spread(causes: &mut Vec<Cause>, spec: &Value, path: &str) {
    let constraints = items(spec, "topologySpreadConstraints");
    for (i, constraint) in constraints.iter().enumerate() {
        let at = format!("{path}.topologySpreadConstraints[{i}]");
        let skew = constraint
            .get("maxSkew")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if skew <= 0 {
            let detail = "must be greater than zero";
            causes.push(invalid(format!("{at}.maxSkew"), &skew.to_string(), detail));
        }
        let key = text(constraint, "topologyKey");
        if key.is_empty() {
            causes.push(required(format!("{at}.topologyKey"), "can not be empty"));
        }
        let action = text(constraint, "whenUnsatisfiable");
        if !matches!(action, "DoNotSchedule" | "ScheduleAnyway") {
            let supported = &["DoNotSchedule", "ScheduleAnyway"];
            causes.push(not_supported(
                format!("{at}.whenUnsatisfiable"),
                action,
                supported,
            ));
        }
        let repeated = constraints[i + 1..].iter().any(|other| {
            text(other, "topologyKey") == key && text(other, "whenUnsatisfiable") == action
        });
        if repeated {
            causes.push(super::duplicate(
                format!("{at}.{{topologyKey, whenUnsatisfiable}}"),
                &format!("{{{key}, {action}}}"),
            ));
        }
        if let Some(min_domains) = constraint.get("minDomains").and_then(Value::as_i64) {
            let min_path = format!("{at}.minDomains");
            if min_domains <= 0 {
                let detail = "must be greater than zero";
                causes.push(invalid(&min_path, &min_domains.to_string(), detail));
            }
            if action != "DoNotSchedule" {
                let detail = format!(
                    "can only use minDomains if whenUnsatisfiable=DoNotSchedule, not {action}"
                );
                causes.push(invalid(&min_path, &min_domains.to_string(), &detail));
            }
        }
        for name in ["nodeAffinityPolicy", "nodeTaintsPolicy"] {
            check_enum(causes, constraint, name, &at, &["Honor", "Ignore"]);
        }
        if let Some(selector) = constraint.get("labelSelector").filter(|s| !s.is_null()) {
            validate_label_selector(causes, selector, &format!("{at}.labelSelector"));
        }
    }
}

fn validate_os(causes: &mut Vec<Cause>, spec: &Value, path: &str) {
    let Some(os) = spec.get("os").filter(|o| !o.is_null()) else {
        return;
    };
    let name = text(os, "name");
    let at = format!("{path}.os");
    if name.is_empty() {
        causes.push(required(format!("{at}.name"), "cannot be empty"));
    } else if !matches!(name, "linux" | "windows") {
        causes.push(not_supported(at, name, &["linux", "windows"]));
    }
}

/// `AccumulateUniqueHostPorts`: one (protocol, hostIP, hostPort) per pod.
fn check_host_ports(causes: &mut Vec<Cause>, containers: &[Value], path: &str) {
    check_host_ports_from(causes, containers, path, 0);
}

fn check_host_ports_from(causes: &mut Vec<Cause>, containers: &[Value], path: &str, first: usize) {
    let mut seen = std::collections::HashSet::new();
    for (ci, container) in containers.iter().enumerate() {
        for (pi, port) in items(container, "ports").iter().enumerate() {
            let host_port = port.get("hostPort").and_then(Value::as_i64).unwrap_or(0);
            if host_port == 0 {
                continue;
            }
            let protocol = match text(port, "protocol") {
                "" => "TCP",
                other => other,
            };
            let key = format!("{protocol}/{}/{host_port}", text(port, "hostIP"));
            if !seen.insert(key.clone()) {
                let at = format!("{path}[{}].ports[{pi}].hostPort", first + ci);
                causes.push(super::duplicate(at, &key));
            }
        }
    }
}

fn validate_toleration(causes: &mut Vec<Cause>, toleration: &Value, at: &str) {
    let key = text(toleration, "key");
    let operator = text(toleration, "operator");
    let value = text(toleration, "value");
    let effect = text(toleration, "effect");
    if !key.is_empty() {
        invalid_each(causes, &format!("{at}.key"), key, is_qualified_name(key));
    }
    let operator_path = format!("{at}.operator");
    if key.is_empty() && operator != "Exists" {
        let detail = "operator must be Exists when `key` is empty, which means \"match all values and all keys\"";
        causes.push(invalid(&operator_path, &go_quote(operator), detail));
    }
    if present(toleration, "tolerationSeconds") && effect != "NoExecute" {
        let detail = "effect must be 'NoExecute' when `tolerationSeconds` is set";
        causes.push(invalid(format!("{at}.effect"), &go_quote(effect), detail));
    }
    match operator {
        "" | "Equal" => {
            let messages = is_valid_label_value(value);
            if !messages.is_empty() {
                let detail = messages.join(";");
                causes.push(invalid(&operator_path, &go_quote(value), &detail));
            }
        }
        "Exists" if !value.is_empty() => {
            let detail = "value must be empty when `operator` is 'Exists'";
            causes.push(invalid(&operator_path, &go_quote(value), detail));
        }
        "Exists" => {}
        other => causes.push(not_supported(&operator_path, other, &["Equal", "Exists"])),
    }
    if !effect.is_empty() {
        check_taint_effect(causes, effect, &format!("{at}.effect"));
    }
}

/// A taint's or toleration's effect.
pub(super) fn check_taint_effect(causes: &mut Vec<Cause>, effect: &str, path: &str) {
    const EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];
    if !EFFECTS.contains(&effect) {
        causes.push(not_supported(path, effect, EFFECTS));
    }
}

fn validate_affinity(causes: &mut Vec<Cause>, affinity: &Value, path: &str) {
    let node = field(affinity, "nodeAffinity");
    let required_path =
        format!("{path}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution");
    if let Some(selector) = node
        .get("requiredDuringSchedulingIgnoredDuringExecution")
        .filter(|s| !s.is_null())
    {
        let terms = items(selector, "nodeSelectorTerms");
        if terms.is_empty() {
            causes.push(required(
                format!("{required_path}.nodeSelectorTerms"),
                "must have at least one node selector term",
            ));
        }
        for (i, term) in terms.iter().enumerate() {
            let at = format!("{required_path}.nodeSelectorTerms[{i}]");
            validate_node_selector_term(causes, term, &at, true);
        }
    }
    let preferred_path =
        format!("{path}.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution");
    for (i, term) in items(node, "preferredDuringSchedulingIgnoredDuringExecution")
        .iter()
        .enumerate()
    {
        let at = format!("{preferred_path}[{i}]");
        check_weight(causes, term, &at);
        // Preferred terms may name values no label has.
        validate_node_selector_term(
            causes,
            field(term, "preference"),
            &format!("{at}.preference"),
            false,
        );
    }
    for kind in ["podAffinity", "podAntiAffinity"] {
        let pods = field(affinity, kind);
        let base = format!("{path}.{kind}");
        for (i, term) in items(pods, "requiredDuringSchedulingIgnoredDuringExecution")
            .iter()
            .enumerate()
        {
            let at = format!("{base}.requiredDuringSchedulingIgnoredDuringExecution[{i}]");
            validate_pod_affinity_term(causes, term, &at);
        }
        for (i, term) in items(pods, "preferredDuringSchedulingIgnoredDuringExecution")
            .iter()
            .enumerate()
        {
            let at = format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
            check_weight(causes, term, &at);
            let inner = field(term, "podAffinityTerm");
            validate_pod_affinity_term(causes, inner, &format!("{at}.podAffinityTerm"));
        }
    }
}

fn check_weight(causes: &mut Vec<Cause>, term: &Value, at: &str) {
    let weight = term.get("weight").and_then(Value::as_i64).unwrap_or(0);
    if !(1..=100).contains(&weight) {
        let detail = "must be in the range 1-100";
        causes.push(invalid(format!("{at}.weight"), &weight.to_string(), detail));
    }
}

fn validate_node_selector_term(causes: &mut Vec<Cause>, term: &Value, at: &str, strict: bool) {
    for (j, requirement) in items(term, "matchExpressions").iter().enumerate() {
        let path = format!("{at}.matchExpressions[{j}]");
        let values = items(requirement, "values");
        match text(requirement, "operator") {
            "In" | "NotIn" if values.is_empty() => causes.push(required(
                format!("{path}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => causes.push(forbidden(
                format!("{path}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "Gt" | "Lt" if values.len() != 1 => causes.push(required(
                format!("{path}.values"),
                "must be specified single value when `operator` is 'Lt' or 'Gt'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" | "Gt" | "Lt" => {}
            other => causes.push(invalid(
                format!("{path}.operator"),
                &go_quote(other),
                "not a valid selector operator",
            )),
        }
        let key = text(requirement, "key");
        invalid_each(causes, &format!("{path}.key"), key, is_qualified_name(key));
        if strict {
            for (k, value) in values.iter().enumerate() {
                let value = value.as_str().unwrap_or_default();
                let at = format!("{path}.values[{k}]");
                invalid_each(causes, &at, value, is_valid_label_value(value));
            }
        }
    }
    for (j, requirement) in items(term, "matchFields").iter().enumerate() {
        let path = format!("{at}.matchFields[{j}]");
        match text(requirement, "operator") {
            "In" | "NotIn" if items(requirement, "values").len() != 1 => causes.push(required(
                format!("{path}.values"),
                "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
            )),
            "In" | "NotIn" => {}
            other => causes.push(invalid(
                format!("{path}.operator"),
                &go_quote(other),
                "not a valid selector operator",
            )),
        }
        let key = text(requirement, "key");
        if key != "metadata.name" {
            let detail = "not a valid field selector key";
            causes.push(invalid(format!("{path}.key"), &go_quote(key), detail));
        }
    }
}

fn validate_pod_affinity_term(causes: &mut Vec<Cause>, term: &Value, at: &str) {
    if let Some(selector) = term.get("labelSelector").filter(|s| !s.is_null()) {
        validate_label_selector(causes, selector, &format!("{at}.labelSelector"));
    }
    for name in items(term, "namespaces") {
        let name = name.as_str().unwrap_or_default();
        // Kubernetes reports these at `namespace`, singular.
        invalid_each(
            causes,
            &format!("{at}.namespace"),
            name,
            is_dns1123_label(name),
        );
    }
    let key = text(term, "topologyKey");
    let key_path = format!("{at}.topologyKey");
    if key.is_empty() {
        causes.push(required(&key_path, "can not be empty"));
    }
    invalid_each(causes, &key_path, key, is_qualified_name(key));
}

/// What only a pod template may not hold.
pub(super) fn validate_template_only(causes: &mut Vec<Cause>, spec: &Value, path: &str) {
    if !items(spec, "ephemeralContainers").is_empty() {
        causes.push(forbidden(
            format!("{path}.ephemeralContainers"),
            "ephemeral containers not allowed in pod template",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{invalid_lines, kind, pod_with_container};
    use super::super::validate_object;
    use serde_json::{json, Value};

    fn container(extra: Value) -> Value {
        let mut container = json!({"name": "c", "image": "nginx"});
        for (k, v) in extra.as_object().unwrap() {
            container[k] = v.clone();
        }
        pod_with_container(container)
    }

    fn pod_spec(extra: Value) -> Value {
        let mut pod = container(json!({}));
        for (k, v) in extra.as_object().unwrap() {
            pod["spec"][k] = v.clone();
        }
        pod
    }

    #[test]
    fn container_policies_probes_and_env() {
        let pod = kind("v1", "Pod");
        let good = container(json!({"imagePullPolicy": "IfNotPresent",
            "env": [{"name": "my.env-NAME", "value": "1"}],
            "livenessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 5},
            "readinessProbe": {"tcpSocket": {"port": 8080}},
            "lifecycle": {"preStop": {"exec": {"command": ["sh"]}}}}));
        assert_eq!(validate_object(pod, &good), Ok(()));
        let table: &[(Value, &[&str])] = &[
            (
                json!({"imagePullPolicy": "Sometimes"}),
                &["spec.containers[0].imagePullPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\""],
            ),
            (
                json!({"terminationMessagePolicy": "Log"}),
                &["spec.containers[0].terminationMessagePolicy: Unsupported value: \"Log\": supported values: \"File\", \"FallbackToLogsOnError\""],
            ),
            (
                json!({"env": [{"name": "A=B"}]}),
                &["spec.containers[0].env[0].name: Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='"],
            ),
            (
                json!({"livenessProbe": {"periodSeconds": -1}}),
                &[
                    "spec.containers[0].livenessProbe: Required value: must specify a handler type",
                    "spec.containers[0].livenessProbe.periodSeconds: Invalid value: -1: must be greater than or equal to 0",
                ],
            ),
            (
                json!({"readinessProbe": {"exec": {"command": ["true"]}, "httpGet": {"port": 70000}}}),
                &["spec.containers[0].readinessProbe.httpGet: Forbidden: may not specify more than 1 handler type"],
            ),
            (
                json!({"startupProbe": {"httpGet": {"port": 0, "scheme": "FTP"}, "successThreshold": 2}}),
                &[
                    "spec.containers[0].startupProbe.httpGet.port: Invalid value: 0: must be between 1 and 65535, inclusive",
                    "spec.containers[0].startupProbe.httpGet.scheme: Unsupported value: \"FTP\": supported values: \"HTTP\", \"HTTPS\"",
                    "spec.containers[0].startupProbe.successThreshold: Invalid value: 2: must be 1",
                ],
            ),
            (
                json!({"lifecycle": {"postStart": {"exec": {}}}}),
                &["spec.containers[0].lifecycle.postStart.exec.command: Required value"],
            ),
            (
                json!({"restartPolicy": "Always"}),
                &["spec.containers[0].restartPolicy: Forbidden: may not be set for non-init containers"],
            ),
        ];
        for (extra, expected) in table {
            assert_eq!(
                invalid_lines(pod, container(extra.clone())),
                *expected,
                "{extra}"
            );
        }
        let mut init = container(json!({}));
        init["spec"]["initContainers"] = json!([
            {"name": "i", "image": "busybox", "livenessProbe": {"exec": {"command": ["true"]}}},
            {"name": "s", "image": "busybox", "restartPolicy": "Always", "readinessProbe": {"exec": {"command": ["true"]}}},
            {"name": "o", "image": "busybox", "restartPolicy": "OnFailure"}]);
        assert_eq!(invalid_lines(pod, init), vec![
            "spec.initContainers[0].livenessProbe: Forbidden: may not be set for init containers without restartPolicy=Always",
            "spec.initContainers[2].restartPolicy: Unsupported value: \"OnFailure\": supported values: \"Always\"",
        ]);
    }

    #[test]
    fn spec_policies_and_scheduling_fields() {
        let pod = kind("v1", "Pod");
        let good = pod_spec(
            json!({"dnsPolicy": "ClusterFirst", "nodeSelector": {"disktype": "ssd"},
            "activeDeadlineSeconds": 60, "hostname": "web-0", "serviceAccountName": "builder",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                            {"operator": "Exists"}, {"key": "k", "value": "v", "effect": "NoSchedule"}],
            "volumes": [{"name": "a"}, {"name": "b", "emptyDir": {}}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}},
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 50, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app": "web"}}}}]}}}),
        );
        assert_eq!(validate_object(pod, &good), Ok(()));
        let table: &[(Value, &[&str])] = &[
            (
                json!({"dnsPolicy": "Google"}),
                &["spec.dnsPolicy: Unsupported value: \"Google\": supported values: \"ClusterFirstWithHostNet\", \"ClusterFirst\", \"Default\", \"None\""],
            ),
            (
                json!({"activeDeadlineSeconds": -5}),
                &["spec.activeDeadlineSeconds: Invalid value: -5: must be between 1 and 2147483647, inclusive"],
            ),
            (
                json!({"nodeSelector": {"disk": "-ssd"}}),
                &["spec.nodeSelector: Invalid value: \"-ssd\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"],
            ),
            (
                json!({"volumes": [{"name": "v", "emptyDir": {}, "hostPath": {"path": "/"}}]}),
                &["spec.volumes[0].emptyDir: Forbidden: may not specify more than 1 volume type"],
            ),
            (
                json!({"tolerations": [{"key": "k", "operator": "Bogus"}]}),
                &["spec.tolerations[0].operator: Unsupported value: \"Bogus\": supported values: \"Equal\", \"Exists\""],
            ),
            (
                json!({"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}),
                &["spec.tolerations[0].operator: Invalid value: \"v\": value must be empty when `operator` is 'Exists'"],
            ),
            (
                json!({"tolerations": [{"key": "k", "effect": "NoWay", "tolerationSeconds": 5}]}),
                &[
                    "spec.tolerations[0].effect: Invalid value: \"NoWay\": effect must be 'NoExecute' when `tolerationSeconds` is set",
                    "spec.tolerations[0].effect: Unsupported value: \"NoWay\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"",
                ],
            ),
            (
                json!({"tolerations": [{"operator": "Equal"}]}),
                &["spec.tolerations[0].operator: Invalid value: \"Equal\": operator must be Exists when `key` is empty, which means \"match all values and all keys\""],
            ),
            (
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}]},
                    "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 0, "preference": {}}]}}}),
                &[
                    "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator: Invalid value: \"Near\": not a valid selector operator",
                    "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight: Invalid value: 0: must be in the range 1-100",
                ],
            ),
            (
                json!({"overhead": {"cpu": "-250m"}, "volumes": [{"name": "scratch", "ephemeral": {}}]}),
                &[
                    "spec.volumes[0].ephemeral.volumeClaimTemplate: Required value",
                    "spec.overhead.limits[cpu]: Invalid value: \"-250m\": must be greater than or equal to 0",
                ],
            ),
            (
                json!({"volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}}]}),
                &["spec.volumes[0].ephemeral.volumeClaimTemplate.spec.resources[storage]: Required value"],
            ),
            (
                json!({"containers": [
                    {"name": "a", "image": "x", "ports": [{"containerPort": 80, "hostPort": 8080}]},
                    {"name": "b", "image": "x", "ports": [{"containerPort": 81, "hostPort": 8080}, {"containerPort": 82, "hostPort": 8080, "protocol": "UDP"}]}]}),
                &["spec.containers[1].ports[0].hostPort: Duplicate value: \"TCP//8080\""],
            ),
            (
                json!({"dnsPolicy": "None", "dnsConfig": {"options": [{"value": "2"}]}}),
                &[
                    "spec.dnsConfig.nameservers: Required value: must provide at least one DNS nameserver when `dnsPolicy` is None",
                ],
            ),
            (
                json!({"dnsConfig": {"nameservers": ["8.8.8.8", "x"], "options": [{"value": "2"}]},
                    "hostAliases": [{"ip": "1.2.3.400", "hostnames": ["Bad_Host"]}]}),
                &[
                    "spec.dnsConfig.nameservers[1]: Invalid value: \"x\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                    "spec.dnsConfig.options[0]: Required value: must not be empty",
                    "spec.hostAliases[0].ip: Invalid value: \"1.2.3.400\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                    "spec.hostAliases[0].hostnames[0]: Invalid value: \"Bad_Host\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                ],
            ),
            (
                json!({"topologySpreadConstraints": [
                    {"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                    {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                    {"maxSkew": 1, "topologyKey": "", "whenUnsatisfiable": "Whenever", "minDomains": 2}],
                    "os": {"name": "plan9"}}),
                &[
                    "spec.topologySpreadConstraints[0].maxSkew: Invalid value: 0: must be greater than zero",
                    "spec.topologySpreadConstraints[0].{topologyKey, whenUnsatisfiable}: Duplicate value: \"{zone, DoNotSchedule}\"",
                    "spec.topologySpreadConstraints[2].topologyKey: Required value: can not be empty",
                    "spec.topologySpreadConstraints[2].whenUnsatisfiable: Unsupported value: \"Whenever\": supported values: \"DoNotSchedule\", \"ScheduleAnyway\"",
                    "spec.topologySpreadConstraints[2].minDomains: Invalid value: 2: can only use minDomains if whenUnsatisfiable=DoNotSchedule, not Whenever",
                    "spec.os: Unsupported value: \"plan9\": supported values: \"linux\", \"windows\"",
                ],
            ),
            (
                json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]}}}),
                &[
                    "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: Required value: can not be empty",
                    "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: Invalid value: \"\": name part must be non-empty",
                    "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: Invalid value: \"\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
                ],
            ),
        ];
        for (extra, expected) in table {
            let found = invalid_lines(pod, pod_spec(extra.clone()));
            assert_eq!(found.len(), expected.len(), "{extra}: {found:#?}");
            for (line, want) in found.iter().zip(expected.iter()) {
                assert_eq!(line, want, "{extra}");
            }
        }
    }
}
