//! What a name inside the cluster domain asks for, as the Kubernetes DNS
//! specification lays the domain out (`<svc>.<ns>.svc.<zone>`, SRV names,
//! endpoint hostnames, `<a-b-c-d>.<ns>.pod.<zone>`), and the address-derived
//! labels that name endpoints without a hostname. Parsing only: whether a
//! Service or endpoint exists is for [`super::records`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::rr::Name;

/// The schema version the `dns-version.<zone>` TXT record gives.
pub const SCHEMA_VERSION: &str = "1.0.1";

/// A name inside the cluster domain, by what it names. Labels are
/// lowercase: comparisons with Kubernetes data are case-insensitive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterName {
    /// `<zone>` itself.
    Apex,
    /// `dns-version.<zone>`.
    Version,
    /// `svc.<zone>` or `pod.<zone>`: names below them exist.
    Suffix,
    /// `<ns>.svc.<zone>`.
    ServiceNamespace { namespace: String },
    /// `<svc>.<ns>.svc.<zone>`.
    Service { namespace: String, service: String },
    /// `<hostname>.<svc>.<ns>.svc.<zone>`: an endpoint of a headless Service.
    Endpoint {
        namespace: String,
        service: String,
        hostname: String,
    },
    /// `_<proto>.<svc>.<ns>.svc.<zone>`: the parent of SRV names.
    PortProtocol {
        namespace: String,
        service: String,
        protocol: String,
    },
    /// `_<port>._<proto>.<svc>.<ns>.svc.<zone>`.
    Port {
        namespace: String,
        service: String,
        port: String,
        protocol: String,
    },
    /// `<ns>.pod.<zone>`.
    PodNamespace,
    /// `<a-b-c-d>.<ns>.pod.<zone>`: the (deprecated) pod records, whose
    /// address is the name's.
    Pod { ip: IpAddr },
    /// Anything else under the zone: no such name.
    Unknown,
}

/// What `name` names in `zone`, or `None` when it is outside the zone.
pub fn classify(name: &Name, zone: &Name) -> Option<ClusterName> {
    if !zone.zone_of(name) {
        return None;
    }
    let labels: Vec<String> = name
        .iter()
        .map(|label| String::from_utf8_lossy(label).to_ascii_lowercase())
        .collect();
    let relative = labels.len().saturating_sub(usize::from(zone.num_labels()));
    // From the zone outwards: svc, then the namespace, the Service, …
    let mut rest: Vec<&str> = labels[..relative].iter().map(String::as_str).collect();
    rest.reverse();
    Some(match rest.as_slice() {
        [] => ClusterName::Apex,
        ["dns-version"] => ClusterName::Version,
        ["svc"] | ["pod"] => ClusterName::Suffix,
        ["svc", namespace] => ClusterName::ServiceNamespace {
            namespace: namespace.to_string(),
        },
        ["svc", namespace, service] => ClusterName::Service {
            namespace: namespace.to_string(),
            service: service.to_string(),
        },
        ["svc", namespace, service, protocol] if protocol.starts_with('_') => {
            ClusterName::PortProtocol {
                namespace: namespace.to_string(),
                service: service.to_string(),
                protocol: protocol[1..].to_string(),
            }
        }
        ["svc", namespace, service, hostname] => ClusterName::Endpoint {
            namespace: namespace.to_string(),
            service: service.to_string(),
            hostname: hostname.to_string(),
        },
        ["svc", namespace, service, protocol, port]
            if protocol.starts_with('_') && port.starts_with('_') =>
        {
            ClusterName::Port {
                namespace: namespace.to_string(),
                service: service.to_string(),
                port: port[1..].to_string(),
                protocol: protocol[1..].to_string(),
            }
        }
        ["pod", _] => ClusterName::PodNamespace,
        ["pod", _, address] => match ip_of_label(address) {
            Some(ip) => ClusterName::Pod { ip },
            None => ClusterName::Unknown,
        },
        _ => ClusterName::Unknown,
    })
}

/// The label an endpoint without a hostname goes by: its address with
/// dashes (`10-244-0-5`, `fd00--5`), as CoreDNS names them.
pub fn label_of_ip(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string().replace('.', "-"),
        IpAddr::V6(v6) => v6.to_string().replace(':', "-"),
    }
}

/// The address an address-derived label stands for.
pub fn ip_of_label(label: &str) -> Option<IpAddr> {
    if label.is_empty() || !label.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
        return None;
    }
    let dotted = label.replace('-', ".");
    if let Ok(v4) = dotted.parse::<Ipv4Addr>() {
        return Some(IpAddr::V4(v4));
    }
    label
        .replace('-', ":")
        .parse::<Ipv6Addr>()
        .ok()
        .map(IpAddr::V6)
}

/// The address a reverse name (`4.3.2.1.in-addr.arpa.`, or the nibbles
/// under `ip6.arpa.`) names; `None` for any other name, and for a reverse
/// name of a network rather than of one address.
pub fn ip_of_reverse_name(name: &Name) -> Option<IpAddr> {
    let labels: Vec<String> = name
        .iter()
        .map(|label| String::from_utf8_lossy(label).to_ascii_lowercase())
        .collect();
    match labels.as_slice() {
        [d, c, b, a, in_addr, arpa] if in_addr == "in-addr" && arpa == "arpa" => {
            let octet = |text: &str| {
                // No leading zeros: "01" is not a label of an address.
                (text == "0" || !text.starts_with('0'))
                    .then(|| text.parse::<u8>().ok())
                    .flatten()
            };
            Some(IpAddr::V4(Ipv4Addr::new(
                octet(a)?,
                octet(b)?,
                octet(c)?,
                octet(d)?,
            )))
        }
        [nibbles @ .., ip6, arpa] if ip6 == "ip6" && arpa == "arpa" && nibbles.len() == 32 => {
            let mut value: u128 = 0;
            for nibble in nibbles.iter().rev() {
                let [digit] = nibble.as_bytes() else {
                    return None;
                };
                let digit = char::from(*digit).to_digit(16)?;
                value = (value << 4) | u128::from(digit);
            }
            Some(IpAddr::V6(Ipv6Addr::from(value)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> Name {
        Name::from_ascii(text).unwrap()
    }

    fn zone() -> Name {
        name("cluster.local.")
    }

    #[test]
    fn names_of_the_zone_say_what_they_ask_for() {
        let of = |text: &str| classify(&name(text), &zone());
        assert_eq!(of("example.com."), None);
        assert_eq!(of("local."), None);
        assert_eq!(of("cluster.local."), Some(ClusterName::Apex));
        assert_eq!(of("Dns-Version.Cluster.Local."), Some(ClusterName::Version));
        assert_eq!(of("svc.cluster.local."), Some(ClusterName::Suffix));
        assert_eq!(
            of("kube-system.svc.cluster.local."),
            Some(ClusterName::ServiceNamespace {
                namespace: "kube-system".into()
            })
        );
        assert_eq!(
            of("Web.Default.svc.cluster.local."),
            Some(ClusterName::Service {
                namespace: "default".into(),
                service: "web".into()
            })
        );
        assert_eq!(
            of("web-0.web.default.svc.cluster.local."),
            Some(ClusterName::Endpoint {
                namespace: "default".into(),
                service: "web".into(),
                hostname: "web-0".into()
            })
        );
        assert_eq!(
            of("_HTTP._TCP.web.default.svc.cluster.local."),
            Some(ClusterName::Port {
                namespace: "default".into(),
                service: "web".into(),
                port: "http".into(),
                protocol: "tcp".into()
            })
        );
        assert_eq!(
            of("_tcp.web.default.svc.cluster.local."),
            Some(ClusterName::PortProtocol {
                namespace: "default".into(),
                service: "web".into(),
                protocol: "tcp".into()
            })
        );
        assert_eq!(
            of("10-244-1-7.default.pod.cluster.local."),
            Some(ClusterName::Pod {
                ip: "10.244.1.7".parse().unwrap()
            })
        );
        assert_eq!(
            of("fd00--7.default.pod.cluster.local."),
            Some(ClusterName::Pod {
                ip: "fd00::7".parse().unwrap()
            })
        );
        assert_eq!(
            of("not-an-ip.default.pod.cluster.local."),
            Some(ClusterName::Unknown)
        );
        assert_eq!(
            of("a.b.c.d.e.svc.cluster.local."),
            Some(ClusterName::Unknown)
        );
        assert_eq!(of("other.cluster.local."), Some(ClusterName::Unknown));
    }

    #[test]
    fn address_labels_go_both_ways() {
        for ip in ["10.244.0.5", "fd00::5", "2001:db8::1:0:0:1"] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(ip_of_label(&label_of_ip(ip)), Some(ip), "{ip}");
        }
        assert_eq!(label_of_ip("10.244.0.5".parse().unwrap()), "10-244-0-5");
        assert_eq!(ip_of_label("web-0"), None);
        assert_eq!(ip_of_label(""), None);
        assert_eq!(ip_of_label("1-2-3"), None);
        assert_eq!(ip_of_label("300-1-1-1"), None);
    }

    #[test]
    fn reverse_names_give_their_address() {
        assert_eq!(
            ip_of_reverse_name(&name("10.0.96.10.in-addr.arpa.")),
            Some("10.96.0.10".parse().unwrap())
        );
        assert_eq!(
            ip_of_reverse_name(&name("10.0.96.10.IN-ADDR.ARPA.")),
            Some("10.96.0.10".parse().unwrap())
        );
        assert_eq!(ip_of_reverse_name(&name("0.96.10.in-addr.arpa.")), None);
        assert_eq!(ip_of_reverse_name(&name("010.0.96.10.in-addr.arpa.")), None);
        assert_eq!(ip_of_reverse_name(&name("256.0.96.10.in-addr.arpa.")), None);
        let v6: IpAddr = "fd00::1:2".parse().unwrap();
        let IpAddr::V6(bits) = v6 else { unreachable!() };
        let nibbles: Vec<String> = format!("{:032x}", u128::from(bits))
            .chars()
            .rev()
            .map(String::from)
            .collect();
        let reverse = format!("{}.ip6.arpa.", nibbles.join("."));
        assert_eq!(ip_of_reverse_name(&name(&reverse)), Some(v6));
        assert_eq!(ip_of_reverse_name(&name("1.ip6.arpa.")), None);
        assert_eq!(ip_of_reverse_name(&name("example.com.")), None);
    }
}
