//! Endpoints and EndpointSlices: addresses that are IPs a client may be
//! sent to (not link-local or unspecified), hostnames and node
//! names, port names, numbers and protocols, worded as
//! `ValidateEndpoints` and discovery's `ValidateEndpointSlice` word them.

use std::collections::HashSet;
use std::net::IpAddr;

use serde_json::Value;

use super::{
    cause, duplicate, field, go_quote, invalid, invalid_each, is_dns1123_label,
    is_dns1123_subdomain, is_qualified_name, is_valid_port_num, items, not_supported, required,
    text, validate_labels, PORT_RANGE_ERR,
};
use crate::status::Cause;

const PROTOCOLS: [&str; 3] = ["SCTP", "TCP", "UDP"];
const IP_ERR: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";
/// The most addresses one endpoint of a slice may list.
const MAX_SLICE_ADDRESSES: usize = 100;
/// The most endpoints one slice may hold.
const MAX_SLICE_ENDPOINTS: usize = 1000;

/// The ranges an endpoint may not be in, as `ValidateEndpointIP` refuses
/// them; `shown` is the address as written. Loopback, which Kubernetes
/// refuses too, is allowed: a pod without a network namespace of its own
/// runs on the host network at 127.0.0.1 (and so does the API server the
/// `kubernetes` Service points at), and its Services must still have
/// endpoints.
fn special_ip_messages(ip: IpAddr, shown: &str) -> Vec<String> {
    // An IPv4 address written as IPv6 is judged as IPv4, as Go does.
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    let (link_local, link_local_multicast) = match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            (v4.is_link_local(), o[0] == 224 && o[1] == 0 && o[2] == 0)
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            (s[0] & 0xffc0 == 0xfe80, s[0] & 0xff0f == 0xff02)
        }
    };
    let mut messages = Vec::new();
    if ip.is_unspecified() {
        messages.push(format!("may not be unspecified ({shown})"));
    }
    if link_local {
        messages.push("may not be in the link-local range (169.254.0.0/16, fe80::/10)".into());
    }
    if link_local_multicast {
        messages
            .push("may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)".into());
    }
    messages
}

fn check_endpoint_ip(causes: &mut Vec<Cause>, ip: &str, path: &str) {
    match ip.parse::<IpAddr>() {
        Err(_) => causes.push(invalid(path, &go_quote(ip), IP_ERR)),
        Ok(parsed) => invalid_each(causes, path, ip, special_ip_messages(parsed, ip)),
    }
}

fn check_protocol(causes: &mut Vec<Cause>, port: &Value, path: &str) {
    match port.get("protocol").and_then(Value::as_str) {
        None | Some("") => causes.push(required(format!("{path}.protocol"), "")),
        Some(protocol) if !PROTOCOLS.contains(&protocol) => causes.push(not_supported(
            format!("{path}.protocol"),
            protocol,
            &PROTOCOLS,
        )),
        Some(_) => {}
    }
    if let Some(app) = port.get("appProtocol").and_then(Value::as_str) {
        invalid_each(
            causes,
            &format!("{path}.appProtocol"),
            app,
            is_qualified_name(app),
        );
    }
}

/// An Endpoints object's subsets.
pub(super) fn validate_endpoints(causes: &mut Vec<Cause>, object: &Value) {
    for (i, subset) in items(object, "subsets").iter().enumerate() {
        let at = format!("subsets[{i}]");
        let ready = items(subset, "addresses");
        let not_ready = items(subset, "notReadyAddresses");
        if ready.is_empty() && not_ready.is_empty() {
            let detail = "must specify `addresses` or `notReadyAddresses`";
            causes.push(required(&at, detail));
        }
        for (list, addresses) in [("addresses", ready), ("notReadyAddresses", not_ready)] {
            for (j, address) in addresses.iter().enumerate() {
                validate_endpoint_address(causes, address, &format!("{at}.{list}[{j}]"));
            }
        }
        let ports = items(subset, "ports");
        for (j, port) in ports.iter().enumerate() {
            let at = format!("{at}.ports[{j}]");
            let name = text(port, "name");
            if name.is_empty() && ports.len() > 1 {
                causes.push(required(format!("{at}.name"), ""));
            } else if !name.is_empty() {
                invalid_each(causes, &format!("{at}.name"), name, is_dns1123_label(name));
            }
            let number = port.get("port").and_then(Value::as_i64).unwrap_or(0);
            if !is_valid_port_num(number) {
                let shown = number.to_string();
                causes.push(invalid(format!("{at}.port"), &shown, PORT_RANGE_ERR));
            }
            check_protocol(causes, port, &at);
        }
    }
}

fn validate_endpoint_address(causes: &mut Vec<Cause>, address: &Value, path: &str) {
    let ip = text(address, "ip");
    let hostname = text(address, "hostname");
    if !hostname.is_empty() {
        let at = format!("{path}.hostname");
        invalid_each(causes, &at, hostname, is_dns1123_label(hostname));
    }
    if let Some(node) = address.get("nodeName").and_then(Value::as_str) {
        let at = format!("{path}.nodeName");
        invalid_each(causes, &at, node, is_dns1123_subdomain(node));
    }
    check_endpoint_ip(causes, ip, &format!("{path}.ip"));
}

/// An EndpointSlice: its address type, endpoints and ports.
pub(super) fn validate_endpoint_slice(causes: &mut Vec<Cause>, object: &Value) {
    const TYPES: [&str; 3] = ["FQDN", "IPv4", "IPv6"];
    let address_type = text(object, "addressType");
    if address_type.is_empty() {
        causes.push(required("addressType", ""));
    } else if !TYPES.contains(&address_type) {
        causes.push(not_supported("addressType", address_type, &TYPES));
    }
    let endpoints = items(object, "endpoints");
    if endpoints.len() > MAX_SLICE_ENDPOINTS {
        causes.push(too_many("endpoints", endpoints.len(), MAX_SLICE_ENDPOINTS));
    }
    for (i, endpoint) in endpoints.iter().enumerate() {
        validate_slice_endpoint(causes, endpoint, address_type, &format!("endpoints[{i}]"));
    }
    let mut names = HashSet::new();
    for (i, port) in items(object, "ports").iter().enumerate() {
        let at = format!("ports[{i}]");
        // Defaulted to "" as Kubernetes does; two unnamed ports clash.
        let name = text(port, "name");
        if !name.is_empty() {
            invalid_each(causes, &format!("{at}.name"), name, is_dns1123_label(name));
        }
        if !names.insert(name) {
            causes.push(duplicate(format!("{at}.name"), name));
        }
        check_protocol(causes, port, &at);
    }
}

fn validate_slice_endpoint(causes: &mut Vec<Cause>, endpoint: &Value, kind: &str, path: &str) {
    let at = format!("{path}.addresses");
    let addresses = items(endpoint, "addresses");
    if addresses.is_empty() {
        causes.push(required(&at, "must contain at least 1 address"));
    } else if addresses.len() > MAX_SLICE_ADDRESSES {
        causes.push(too_many(&at, addresses.len(), MAX_SLICE_ADDRESSES));
    }
    for (i, address) in addresses.iter().enumerate() {
        let address = address.as_str().unwrap_or_default();
        let at = format!("{at}[{i}]");
        let parsed = address.parse::<IpAddr>().ok();
        match kind {
            "IPv4" if !parsed.is_some_and(|ip| ip.is_ipv4()) => causes.push(invalid(
                &at,
                &go_quote(address),
                "must be a valid IPv4 address",
            )),
            "IPv6" if !parsed.is_some_and(|ip| ip.is_ipv6()) => causes.push(invalid(
                &at,
                &go_quote(address),
                "must be a valid IPv6 address",
            )),
            "IPv4" | "IPv6" => {
                let messages = parsed.map_or_else(Vec::new, |ip| special_ip_messages(ip, address));
                invalid_each(causes, &at, address, messages);
            }
            "FQDN" => check_fqdn(causes, address, &at),
            _ => {}
        }
    }
    if let Some(node) = endpoint.get("nodeName").and_then(Value::as_str) {
        let at = format!("{path}.nodeName");
        invalid_each(causes, &at, node, is_dns1123_subdomain(node));
    }
    let topology = field(endpoint, "deprecatedTopology");
    validate_labels(
        causes,
        endpoint,
        "deprecatedTopology",
        &format!("{path}.deprecatedTopology"),
    );
    if topology.as_object().is_some_and(|m| m.len() > 16) {
        let count = topology.as_object().map_or(0, |m| m.len());
        causes.push(too_many(format!("{path}.deprecatedTopology"), count, 16));
    }
    if let Some(hostname) = endpoint.get("hostname").and_then(Value::as_str) {
        let at = format!("{path}.hostname");
        invalid_each(causes, &at, hostname, is_dns1123_label(hostname));
    }
}

/// `IsFullyQualifiedDomainName`: a subdomain of at least two labels; a
/// trailing dot allowed.
fn check_fqdn(causes: &mut Vec<Cause>, name: &str, path: &str) {
    if name.is_empty() {
        causes.push(required(path, ""));
        return;
    }
    let name = name.strip_suffix('.').unwrap_or(name);
    let messages = is_dns1123_subdomain(name);
    if !messages.is_empty() {
        causes.push(invalid(path, &go_quote(name), &messages.join(",")));
        return;
    }
    if !name.contains('.') {
        let detail = "should be a domain with at least two segments separated by dots";
        causes.push(invalid(path, &go_quote(name), detail));
        return;
    }
    for label in name.split('.') {
        let messages = is_dns1123_label(label);
        if !messages.is_empty() {
            causes.push(invalid(path, &go_quote(label), &messages.join(",")));
            return;
        }
    }
}

fn too_many(path: impl Into<String>, count: usize, max: usize) -> Cause {
    let message = format!("Too many: {count}: must have at most {max} items");
    cause("FieldValueTooMany", path, message)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{invalid_lines, kind};
    use super::super::validate_object;
    use serde_json::{json, Value};

    fn check(api_version: &str, kind_name: &str, table: &[(Value, &[&str])]) {
        let resource = kind(api_version, kind_name);
        for (body, expected) in table {
            let mut object = body.clone();
            object["metadata"] = json!({"name": "web", "namespace": "default"});
            if expected.is_empty() {
                assert_eq!(validate_object(resource, &object), Ok(()), "{body}");
            } else {
                assert_eq!(invalid_lines(resource, object), *expected, "{body}");
            }
        }
    }

    #[test]
    fn endpoints() {
        check("v1", "Endpoints", &[
            (json!({"subsets": [{"addresses": [{"ip": "10.0.0.1", "hostname": "a", "nodeName": "node-1"}],
                "notReadyAddresses": [{"ip": "2001:db8::1"}],
                "ports": [{"name": "http", "port": 80, "protocol": "TCP"}, {"name": "dns", "port": 53, "protocol": "UDP", "appProtocol": "dns"}]}]}), &[]),
            (json!({"subsets": [{}]}), &[
                "subsets[0]: Required value: must specify `addresses` or `notReadyAddresses`",
            ]),
            (json!({"subsets": [{"addresses": [{"ip": "127.0.0.1"}, {"ip": "::1"}]}]}), &[]),
            (json!({"subsets": [{"addresses": [{"ip": "not-an-ip"}, {"ip": "fe80::1"}, {"ip": "169.254.1.1"}, {"ip": "0.0.0.0"}],
                "notReadyAddresses": [{"ip": "224.0.0.5", "hostname": "A_B", "nodeName": "Node!"}]}]}), &[
                "subsets[0].addresses[0].ip: Invalid value: \"not-an-ip\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                "subsets[0].addresses[1].ip: Invalid value: \"fe80::1\": may not be in the link-local range (169.254.0.0/16, fe80::/10)",
                "subsets[0].addresses[2].ip: Invalid value: \"169.254.1.1\": may not be in the link-local range (169.254.0.0/16, fe80::/10)",
                "subsets[0].addresses[3].ip: Invalid value: \"0.0.0.0\": may not be unspecified (0.0.0.0)",
                "subsets[0].notReadyAddresses[0].hostname: Invalid value: \"A_B\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                "subsets[0].notReadyAddresses[0].nodeName: Invalid value: \"Node!\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                "subsets[0].notReadyAddresses[0].ip: Invalid value: \"224.0.0.5\": may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)",
            ]),
            (json!({"subsets": [{"addresses": [{"ip": "10.0.0.1"}],
                "ports": [{"port": 0, "protocol": "TCP"}, {"name": "b", "port": 99999, "protocol": "HTTP"}, {"name": "c", "port": 1}]}]}), &[
                "subsets[0].ports[0].name: Required value",
                "subsets[0].ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive",
                "subsets[0].ports[1].port: Invalid value: 99999: must be between 1 and 65535, inclusive",
                "subsets[0].ports[1].protocol: Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
                "subsets[0].ports[2].protocol: Required value",
            ]),
        ]);
    }

    #[test]
    fn endpoint_slices() {
        check("discovery.k8s.io/v1", "EndpointSlice", &[
            (json!({"addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"], "hostname": "a", "nodeName": "n1"}],
                "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}), &[]),
            (json!({"addressType": "FQDN", "endpoints": [{"addresses": ["example.com."]}]}), &[]),
            (json!({"endpoints": []}), &["addressType: Required value"]),
            (json!({"addressType": "IPv5"}), &[
                "addressType: Unsupported value: \"IPv5\": supported values: \"FQDN\", \"IPv4\", \"IPv6\"",
            ]),
            (json!({"addressType": "IPv4", "endpoints": [{"addresses": ["127.0.0.1"]}]}), &[]),
            (json!({"addressType": "IPv4", "endpoints": [{"addresses": []}, {"addresses": ["2001:db8::1"]}, {"addresses": ["0.0.0.0"]}]}), &[
                "endpoints[0].addresses: Required value: must contain at least 1 address",
                "endpoints[1].addresses[0]: Invalid value: \"2001:db8::1\": must be a valid IPv4 address",
                "endpoints[2].addresses[0]: Invalid value: \"0.0.0.0\": may not be unspecified (0.0.0.0)",
            ]),
            (json!({"addressType": "IPv6", "endpoints": [{"addresses": ["10.0.0.1"]}]}), &[
                "endpoints[0].addresses[0]: Invalid value: \"10.0.0.1\": must be a valid IPv6 address",
            ]),
            (json!({"addressType": "FQDN", "endpoints": [{"addresses": ["localhost"]}]}), &[
                "endpoints[0].addresses[0]: Invalid value: \"localhost\": should be a domain with at least two segments separated by dots",
            ]),
            (json!({"addressType": "IPv4", "ports": [{"protocol": "TCP"}, {"protocol": "TCP"}, {"name": "Web", "appProtocol": "a/b/c"}]}), &[
                "ports[1].name: Duplicate value: \"\"",
                "ports[2].name: Invalid value: \"Web\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                "ports[2].protocol: Required value",
                "ports[2].appProtocol: Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
            ]),
        ]);
    }
}
