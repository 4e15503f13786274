//! A Service's values beyond its ports' names and numbers: cluster IPs,
//! external names, node ports, session affinity, traffic policies and IP
//! families, worded as `ValidateService` words them. Fields Kubernetes
//! drops when the type changes are left alone, since nothing here drops
//! them.

use std::collections::HashSet;
use std::net::IpAddr;

use serde_json::Value;

use super::{
    cause, field, forbidden, go_quote, go_string_slice, invalid, invalid_each,
    is_dns1123_subdomain, is_qualified_name, is_valid_port_num, items, not_supported, text,
    PORT_RANGE_ERR,
};
use crate::status::Cause;

const IP_ERR: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";

fn is_ip(value: &str) -> bool {
    value.parse::<IpAddr>().is_ok()
}

fn strings(value: &Value, name: &str) -> Vec<String> {
    items(value, name)
        .iter()
        .map(|v| v.as_str().unwrap_or_default().to_string())
        .collect()
}

/// The Service spec's values; `ports` names and numbers are checked by
/// validation.rs's `validate_service`.
pub(super) fn validate_service_fields(causes: &mut Vec<Cause>, spec: &Value) {
    let service_type = match text(spec, "type") {
        "" => "ClusterIP",
        other => other,
    };
    // Kubernetes copies clusterIP into an empty clusterIPs before
    // validating; the errors then name clusterIPs.
    let mut cluster_ips = strings(spec, "clusterIPs");
    let cluster_ip = text(spec, "clusterIP");
    if cluster_ips.is_empty() && !cluster_ip.is_empty() {
        cluster_ips.push(cluster_ip.to_string());
    }
    let headless = cluster_ips.len() == 1 && cluster_ips[0] == "None";
    match service_type {
        "ExternalName" => {
            let name = text(spec, "externalName");
            let cname = name.strip_suffix('.').unwrap_or(name);
            if !cname.is_empty() {
                let at = "spec.externalName";
                invalid_each(causes, at, cname, is_dns1123_subdomain(cname));
            }
        }
        "NodePort" | "LoadBalancer" if headless => causes.push(invalid(
            "spec.clusterIPs[0]",
            &go_quote("None"),
            &format!("may not be set to 'None' for {service_type} services"),
        )),
        _ => {}
    }
    if service_type != "ExternalName" {
        check_cluster_ips(causes, cluster_ip, &cluster_ips);
        check_ip_families(causes, spec);
    }
    check_session_affinity(causes, spec);
    for (i, ip) in strings(spec, "externalIPs").iter().enumerate() {
        if !is_ip(ip) {
            causes.push(invalid(
                format!("spec.externalIPs[{i}]"),
                &go_quote(ip),
                IP_ERR,
            ));
        }
    }
    check_node_ports(causes, spec, service_type);
    check_lb_only_fields(causes, spec, service_type);
    check_traffic_policies(causes, spec, service_type);
}

fn check_cluster_ips(causes: &mut Vec<Cause>, cluster_ip: &str, cluster_ips: &[String]) {
    const PATH: &str = "spec.clusterIPs";
    let shown = go_string_slice(cluster_ips);
    if !cluster_ip.is_empty() && cluster_ips.first().map(String::as_str) != Some(cluster_ip) {
        causes.push(invalid(PATH, &shown, "first value must match `clusterIP`"));
    }
    if cluster_ip.is_empty() && !cluster_ips.is_empty() {
        let detail = "must be empty when `clusterIP` is not specified";
        causes.push(invalid(PATH, &shown, detail));
    }
    for (i, ip) in cluster_ips.iter().enumerate() {
        if i == 0 && ip == "None" {
            if cluster_ips.len() > 1 {
                causes.push(invalid(
                    PATH,
                    &shown,
                    "'None' must be the first and only value",
                ));
            }
            continue;
        }
        if !is_ip(ip) {
            causes.push(invalid(format!("{PATH}[{i}]"), &go_quote(ip), IP_ERR));
        }
    }
    if cluster_ips.len() > 2 {
        causes.push(invalid(PATH, &shown, "may only hold up to 2 values"));
    }
}

fn check_ip_families(causes: &mut Vec<Cause>, spec: &Value) {
    let mut seen = HashSet::new();
    for (i, family) in strings(spec, "ipFamilies").iter().enumerate() {
        let at = format!("spec.ipFamilies[{i}]");
        if !matches!(family.as_str(), "IPv4" | "IPv6") {
            causes.push(not_supported(&at, family, &["IPv4", "IPv6"]));
        }
        if !seen.insert(family.clone()) {
            causes.push(super::duplicate(at, family));
        }
    }
    let policy = text(spec, "ipFamilyPolicy");
    const POLICIES: &[&str] = &["PreferDualStack", "RequireDualStack", "SingleStack"];
    if !policy.is_empty() && !POLICIES.contains(&policy) {
        causes.push(not_supported("spec.ipFamilyPolicy", policy, POLICIES));
    }
}

fn check_session_affinity(causes: &mut Vec<Cause>, spec: &Value) {
    let affinity = text(spec, "sessionAffinity");
    let config = spec.get("sessionAffinityConfig").filter(|c| !c.is_null());
    match affinity {
        "" => {}
        "ClientIP" => {
            let path = "spec.sessionAffinityConfig.clientIP.timeoutSeconds";
            let timeout = config
                .map(|c| field(field(c, "clientIP"), "timeoutSeconds"))
                .and_then(Value::as_i64);
            if let Some(timeout) = timeout.filter(|t| !(1..=86400).contains(t)) {
                let detail = "must be greater than 0 and less than 86400";
                causes.push(invalid(path, &timeout.to_string(), detail));
            }
        }
        "None" => {
            if config.is_some() {
                causes.push(forbidden(
                    "spec.sessionAffinityConfig",
                    "must not be set when session affinity is None",
                ));
            }
        }
        other => causes.push(not_supported(
            "spec.sessionAffinity",
            other,
            &["ClientIP", "None"],
        )),
    }
}

/// Go's `%#v` of the `core.ServicePort` key Kubernetes reports a
/// duplicate (protocol, port) pair with.
fn go_service_port_key(protocol: &str, port: i64) -> String {
    format!(
        "core.ServicePort{{Name:\"\", Protocol:{}, AppProtocol:(*string)(nil), Port:{port}, TargetPort:intstr.IntOrString{{Type:0, IntVal:0, StrVal:\"\"}}, NodePort:0}}",
        go_quote(protocol)
    )
}

fn check_node_ports(causes: &mut Vec<Cause>, spec: &Value, service_type: &str) {
    let mut node_ports = HashSet::new();
    let mut ports = HashSet::new();
    for (i, port) in items(spec, "ports").iter().enumerate() {
        let at = format!("spec.ports[{i}]");
        let protocol = match text(port, "protocol") {
            "" => "TCP",
            other => other,
        };
        let node_port = port.get("nodePort").and_then(Value::as_i64).unwrap_or(0);
        if node_port != 0 {
            if service_type == "ClusterIP" {
                causes.push(forbidden(
                    format!("{at}.nodePort"),
                    "may not be used when `type` is 'ClusterIP'",
                ));
            }
            if !is_valid_port_num(node_port) {
                let shown = node_port.to_string();
                causes.push(invalid(format!("{at}.nodePort"), &shown, PORT_RANGE_ERR));
            }
            if !node_ports.insert((protocol, node_port)) {
                let message = format!("Duplicate value: {node_port}");
                causes.push(cause(
                    "FieldValueDuplicate",
                    format!("{at}.nodePort"),
                    message,
                ));
            }
        }
        let number = port.get("port").and_then(Value::as_i64).unwrap_or(0);
        if !ports.insert((protocol, number)) {
            let message = format!("Duplicate value: {}", go_service_port_key(protocol, number));
            causes.push(cause("FieldValueDuplicate", &at, message));
        }
        if let Some(app_protocol) = port.get("appProtocol").and_then(Value::as_str) {
            let path = format!("{at}.appProtocol");
            invalid_each(causes, &path, app_protocol, is_qualified_name(app_protocol));
        }
    }
}

fn check_lb_only_fields(causes: &mut Vec<Cause>, spec: &Value, service_type: &str) {
    if service_type == "LoadBalancer" {
        return;
    }
    let detail = "may only be used when `type` is 'LoadBalancer'";
    if !items(spec, "loadBalancerSourceRanges").is_empty() {
        // Kubernetes names this field with a capital L.
        causes.push(forbidden("spec.LoadBalancerSourceRanges", detail));
    }
    if spec
        .get("allocateLoadBalancerNodePorts")
        .is_some_and(|v| !v.is_null())
    {
        causes.push(forbidden("spec.allocateLoadBalancerNodePorts", detail));
    }
}

fn check_traffic_policies(causes: &mut Vec<Cause>, spec: &Value, service_type: &str) {
    let external_ips = !items(spec, "externalIPs").is_empty();
    let accessible = matches!(service_type, "NodePort" | "LoadBalancer")
        || (service_type == "ClusterIP" && external_ips);
    let policy = text(spec, "externalTrafficPolicy");
    if !policy.is_empty() {
        if !accessible {
            causes.push(invalid(
                "spec.externalTrafficPolicy",
                &go_quote(policy),
                "may only be set for externally-accessible services",
            ));
        } else if !matches!(policy, "Cluster" | "Local") {
            let at = "spec.externalTrafficPolicy";
            causes.push(not_supported(at, policy, &["Cluster", "Local"]));
        }
    }
    let internal = text(spec, "internalTrafficPolicy");
    if !internal.is_empty() && !matches!(internal, "Cluster" | "Local") {
        let at = "spec.internalTrafficPolicy";
        causes.push(not_supported(at, internal, &["Cluster", "Local"]));
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{invalid_lines, kind};
    use super::super::validate_object;
    use serde_json::{json, Value};

    fn service(spec: Value) -> Value {
        let mut full = json!({"ports": [{"port": 80}]});
        for (k, v) in spec.as_object().unwrap() {
            full[k] = v.clone();
        }
        json!({"metadata": {"name": "web"}, "spec": full})
    }

    #[test]
    fn service_values() {
        let resource = kind("v1", "Service");
        let table: &[(Value, &[&str])] = &[
            (json!({"clusterIP": "10.96.0.10", "type": "NodePort", "externalTrafficPolicy": "Local",
                "ports": [{"port": 80, "nodePort": 30080}], "sessionAffinity": "ClientIP",
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}}}), &[]),
            (json!({"clusterIP": "None"}), &[]),
            (json!({"type": "ExternalName", "externalName": "db.example.com."}), &[]),
            (json!({"clusterIP": "not-an-ip"}), &[
                "spec.clusterIPs[0]: Invalid value: \"not-an-ip\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            ]),
            (json!({"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.2"]}), &[
                "spec.clusterIPs: Invalid value: []string{\"10.0.0.2\"}: first value must match `clusterIP`",
            ]),
            (json!({"clusterIP": "None", "type": "NodePort"}), &[
                "spec.clusterIPs[0]: Invalid value: \"None\": may not be set to 'None' for NodePort services",
            ]),
            (json!({"type": "ExternalName", "externalName": "Not A Host"}), &[
                "spec.externalName: Invalid value: \"Not A Host\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            ]),
            (json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 99999}, {"port": 80, "nodePort": 99999}]}), &[
                "spec.ports[0].name: Required value",
                "spec.ports[1].name: Required value",
                "spec.ports[0].nodePort: Invalid value: 99999: must be between 1 and 65535, inclusive",
                "spec.ports[1].nodePort: Invalid value: 99999: must be between 1 and 65535, inclusive",
                "spec.ports[1].nodePort: Duplicate value: 99999",
                "spec.ports[1]: Duplicate value: core.ServicePort{Name:\"\", Protocol:\"TCP\", AppProtocol:(*string)(nil), Port:80, TargetPort:intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}, NodePort:0}",
            ]),
            (json!({"ports": [{"port": 80, "nodePort": 30080}]}), &[
                "spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'",
            ]),
            (json!({"sessionAffinity": "Sticky", "externalTrafficPolicy": "Local", "internalTrafficPolicy": "Nearby"}), &[
                "spec.sessionAffinity: Unsupported value: \"Sticky\": supported values: \"ClientIP\", \"None\"",
                "spec.externalTrafficPolicy: Invalid value: \"Local\": may only be set for externally-accessible services",
                "spec.internalTrafficPolicy: Unsupported value: \"Nearby\": supported values: \"Cluster\", \"Local\"",
            ]),
            (json!({"type": "LoadBalancer", "externalTrafficPolicy": "Global", "sessionAffinity": "ClientIP",
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 0}}}), &[
                "spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 0: must be greater than 0 and less than 86400",
                "spec.externalTrafficPolicy: Unsupported value: \"Global\": supported values: \"Cluster\", \"Local\"",
            ]),
            (json!({"externalIPs": ["1.2.3"], "loadBalancerSourceRanges": ["10.0.0.0/8"],
                "ipFamilies": ["IPv5"], "ipFamilyPolicy": "Both"}), &[
                "spec.ipFamilies[0]: Unsupported value: \"IPv5\": supported values: \"IPv4\", \"IPv6\"",
                "spec.ipFamilyPolicy: Unsupported value: \"Both\": supported values: \"PreferDualStack\", \"RequireDualStack\", \"SingleStack\"",
                "spec.externalIPs[0]: Invalid value: \"1.2.3\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                "spec.LoadBalancerSourceRanges: Forbidden: may only be used when `type` is 'LoadBalancer'",
            ]),
        ];
        for (spec, expected) in table {
            let object = service(spec.clone());
            if expected.is_empty() {
                assert_eq!(validate_object(resource, &object), Ok(()), "{spec}");
            } else {
                assert_eq!(invalid_lines(resource, object), *expected, "{spec}");
            }
        }
    }
}
