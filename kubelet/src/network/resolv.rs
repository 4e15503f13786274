//! A pod's `/etc/resolv.conf`, as the kubelet forms it from the pod's
//! `dnsPolicy` and `dnsConfig`, the cluster DNS (`--cluster-dns`,
//! `--cluster-domain`) and the host's resolver configuration, with
//! Kubernetes' limits on nameservers and search paths. Pure: reading and
//! writing the files is [`super::files`]'s.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Pod, PodDNSConfigOption};

/// At most this many nameservers: what the C library reads.
pub const MAX_NAMESERVERS: usize = 3;
/// At most this many search paths (Kubernetes' expanded DNS config).
pub const MAX_SEARCH_PATHS: usize = 32;
/// At most this many characters on the search line.
pub const MAX_SEARCH_LIST_CHARS: usize = 2048;
/// A longer search path aborts some C libraries: it is left out.
const MAX_SEARCH_PATH_LENGTH: usize = 253;
/// Options of pods that resolve through the cluster DNS.
const CLUSTER_OPTIONS: &[&str] = &["ndots:5"];

/// The resolver configuration of a resolv.conf: what the kubelet reads of
/// the host's and writes for a pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolverConfig {
    pub nameservers: Vec<String>,
    pub searches: Vec<String>,
    /// As resolv.conf writes them: `ndots:5`, `edns0`.
    pub options: Vec<String>,
}

impl ResolverConfig {
    /// A resolv.conf's text, read as the kubelet reads the host's:
    /// `nameserver` lines add up, the last `search` and `options` lines
    /// win, search domains lose a trailing dot, comments are skipped.
    pub fn parse(text: &str) -> ResolverConfig {
        let mut config = ResolverConfig::default();
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            let mut fields = line.split_whitespace();
            match fields.next() {
                Some("nameserver") => config.nameservers.extend(fields.next().map(String::from)),
                Some("search") => {
                    config.searches = fields
                        .map(|s| s.strip_suffix('.').unwrap_or(s).to_string())
                        .filter(|s| !s.is_empty())
                        .collect();
                }
                Some("options") => config.options = fields.map(String::from).collect(),
                _ => {}
            }
        }
        config
    }

    /// The file's text, as container runtimes write it for a pod.
    pub fn render(&self) -> String {
        let mut text = String::new();
        if !self.searches.is_empty() {
            text.push_str(&format!("search {}\n", self.searches.join(" ")));
        }
        for server in &self.nameservers {
            text.push_str(&format!("nameserver {server}\n"));
        }
        if !self.options.is_empty() {
            text.push_str(&format!("options {}\n", self.options.join(" ")));
        }
        text
    }
}

/// The cluster DNS a kubelet points pods at.
#[derive(Debug, Clone, Copy)]
pub struct ClusterDns<'a> {
    /// `--cluster-dns`; none: pods of the cluster's policies resolve as
    /// `Default` (with a warning).
    pub servers: &'a [IpAddr],
    /// `--cluster-domain`; empty: no cluster search paths.
    pub domain: &'a str,
}

/// A pod's resolver configuration, and what it had to leave out or fall
/// back from (the kubelet's `DNSConfigForming` and `MissingClusterDNS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDns {
    pub config: ResolverConfig,
    pub warnings: Vec<String>,
}

/// Where a pod's resolver configuration starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Base {
    Cluster,
    Host,
    Empty,
}

fn base(pod: &Pod, warnings: &mut Vec<String>) -> Base {
    let spec = pod.spec.as_ref();
    let host_network = spec.and_then(|s| s.host_network).unwrap_or(false);
    match spec
        .and_then(|s| s.dns_policy.as_deref())
        .unwrap_or("ClusterFirst")
    {
        "None" => Base::Empty,
        "ClusterFirstWithHostNet" => Base::Cluster,
        // A pod on the host's network resolves as the host does.
        "ClusterFirst" if host_network => Base::Host,
        "ClusterFirst" => Base::Cluster,
        "Default" => Base::Host,
        other => {
            warnings.push(format!(
                "invalid dnsPolicy {other:?}; resolving as ClusterFirst"
            ));
            Base::Cluster
        }
    }
}

/// The pod's resolver configuration from the host's (`host`) and the
/// cluster DNS, as the kubelet forms it for `pod.spec.dnsPolicy` and
/// `pod.spec.dnsConfig`.
pub fn pod_dns(pod: &Pod, host: &ResolverConfig, cluster: &ClusterDns<'_>) -> PodDns {
    let mut warnings = Vec::new();
    let mut config = match base(pod, &mut warnings) {
        Base::Empty => ResolverConfig::default(),
        Base::Cluster if !cluster.servers.is_empty() => ResolverConfig {
            nameservers: cluster.servers.iter().map(IpAddr::to_string).collect(),
            searches: cluster_searches(pod, &host.searches, cluster.domain),
            options: CLUSTER_OPTIONS.iter().map(|o| o.to_string()).collect(),
        },
        Base::Cluster => {
            warnings.push(
                "the kubelet has no cluster DNS (--cluster-dns) for a pod of policy ClusterFirst; resolving as Default"
                    .into(),
            );
            host.clone()
        }
        Base::Host => host.clone(),
    };
    if let Some(dns_config) = pod.spec.as_ref().and_then(|s| s.dns_config.as_ref()) {
        let nameservers = dns_config.nameservers.iter().flatten().cloned();
        config.nameservers = without_duplicates(config.nameservers.into_iter().chain(nameservers));
        let searches = dns_config.searches.iter().flatten().cloned();
        config.searches = without_duplicates(config.searches.into_iter().chain(searches));
        config.options = merge_options(&config.options, dns_config.options.iter().flatten());
    }
    if config.nameservers.len() > MAX_NAMESERVERS {
        config.nameservers.truncate(MAX_NAMESERVERS);
        warnings.push(format!(
            "nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: {}",
            config.nameservers.join(" ")
        ));
    }
    let (searches, exceeded) = fit_searches(config.searches);
    config.searches = searches;
    if exceeded {
        warnings.push(format!(
            "search line limits were exceeded, some search paths have been omitted, the applied search line is: {}",
            config.searches.join(" ")
        ));
    }
    PodDns { config, warnings }
}

/// `<ns>.svc.<domain> svc.<domain> <domain>`, then the host's.
fn cluster_searches(pod: &Pod, host: &[String], domain: &str) -> Vec<String> {
    let domain = domain.trim_end_matches('.');
    if domain.is_empty() {
        return host.to_vec();
    }
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let cluster = [
        format!("{namespace}.svc.{domain}"),
        format!("svc.{domain}"),
        domain.to_string(),
    ];
    without_duplicates(cluster.into_iter().chain(host.iter().cloned()))
}

fn without_duplicates(items: impl Iterator<Item = String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    items.filter(|item| seen.insert(item.clone())).collect()
}

/// The options, with the pod's replacing those of the same name (kept in
/// their place) and added after them.
fn merge_options<'a>(
    existing: &[String],
    pod: impl Iterator<Item = &'a PodDNSConfigOption>,
) -> Vec<String> {
    let mut merged: Vec<(String, Option<String>)> = Vec::new();
    let mut set =
        |name: &str, value: Option<String>| match merged.iter_mut().find(|(n, _)| n == name) {
            Some(entry) => entry.1 = value,
            None => merged.push((name.to_string(), value)),
        };
    for option in existing {
        match option.split_once(':') {
            Some((name, value)) => set(name, Some(value.to_string())),
            None => set(option, None),
        }
    }
    for option in pod {
        let Some(name) = option.name.as_deref().filter(|n| !n.is_empty()) else {
            continue;
        };
        set(name, option.value.clone().filter(|v| !v.is_empty()));
    }
    merged
        .into_iter()
        .map(|(name, value)| match value {
            Some(value) => format!("{name}:{value}"),
            None => name,
        })
        .collect()
}

/// The search paths within Kubernetes' limits, and whether any were cut:
/// at most [`MAX_SEARCH_PATHS`], none longer than 253 characters, and the
/// line at most [`MAX_SEARCH_LIST_CHARS`] (cut from the end).
fn fit_searches(mut searches: Vec<String>) -> (Vec<String>, bool) {
    let mut exceeded = false;
    if searches.len() > MAX_SEARCH_PATHS {
        searches.truncate(MAX_SEARCH_PATHS);
        exceeded = true;
    }
    let before = searches.len();
    searches.retain(|s| s.len() <= MAX_SEARCH_PATH_LENGTH);
    exceeded |= searches.len() != before;
    let line = |s: &[String]| s.join(" ").len();
    while line(&searches) > MAX_SEARCH_LIST_CHARS {
        searches.pop();
        exceeded = true;
    }
    (searches, exceeded)
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::api::core::v1::{PodDNSConfig, PodSpec};

    const HOST: &str = "# written by hand\n\
        nameserver 192.0.2.53\n\
        nameserver 192.0.2.54\n\
        search corp.example. lab.example\n\
        options edns0 timeout:2\n";

    fn pod(policy: Option<&str>, host_network: bool) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some("web".into());
        pod.metadata.namespace = Some("shop".into());
        pod.spec = Some(PodSpec {
            dns_policy: policy.map(String::from),
            host_network: Some(host_network),
            ..Default::default()
        });
        pod
    }

    fn cluster_ips() -> Vec<IpAddr> {
        vec!["10.96.0.10".parse().unwrap()]
    }

    fn resolve(pod: &Pod, servers: &[IpAddr]) -> PodDns {
        let host = ResolverConfig::parse(HOST);
        pod_dns(
            pod,
            &host,
            &ClusterDns {
                servers,
                domain: "cluster.local",
            },
        )
    }

    #[test]
    fn the_hosts_file_is_read_as_the_kubelet_reads_it() {
        let host = ResolverConfig::parse(
            "nameserver 1.1.1.1\nsearch a.example\nnameserver\n; note\nsearch b.example. c.example\noptions ndots:2\noptions rotate\ndomain ignored.example\n",
        );
        assert_eq!(host.nameservers, ["1.1.1.1"]);
        assert_eq!(host.searches, ["b.example", "c.example"]);
        assert_eq!(host.options, ["rotate"]);
        assert_eq!(ResolverConfig::parse(""), ResolverConfig::default());
    }

    #[test]
    fn cluster_first_pods_resolve_through_the_cluster_dns() {
        for policy in [None, Some("ClusterFirst")] {
            let dns = resolve(&pod(policy, false), &cluster_ips());
            assert!(dns.warnings.is_empty(), "{:?}", dns.warnings);
            assert_eq!(
                dns.config.render(),
                "search shop.svc.cluster.local svc.cluster.local cluster.local corp.example lab.example\n\
                 nameserver 10.96.0.10\n\
                 options ndots:5\n"
            );
        }
    }

    #[test]
    fn host_network_pods_resolve_as_the_host_unless_told_otherwise() {
        let host = resolve(&pod(Some("ClusterFirst"), true), &cluster_ips());
        assert_eq!(host.config, ResolverConfig::parse(HOST));
        assert_eq!(
            host.config.render(),
            "search corp.example lab.example\n\
             nameserver 192.0.2.53\n\
             nameserver 192.0.2.54\n\
             options edns0 timeout:2\n"
        );
        let cluster = resolve(&pod(Some("ClusterFirstWithHostNet"), true), &cluster_ips());
        assert_eq!(cluster.config.nameservers, ["10.96.0.10"]);
        assert_eq!(cluster.config.searches[0], "shop.svc.cluster.local");
        let default = resolve(&pod(Some("Default"), false), &cluster_ips());
        assert_eq!(default.config, ResolverConfig::parse(HOST));
    }

    #[test]
    fn without_a_cluster_dns_the_cluster_policies_fall_back_to_the_host() {
        let dns = resolve(&pod(None, false), &[]);
        assert_eq!(dns.config, ResolverConfig::parse(HOST));
        assert!(
            dns.warnings[0].contains("--cluster-dns"),
            "{:?}",
            dns.warnings
        );
        // An empty domain: the host's search paths only.
        let dns = pod_dns(
            &pod(None, false),
            &ResolverConfig::parse(HOST),
            &ClusterDns {
                servers: &cluster_ips(),
                domain: "",
            },
        );
        assert_eq!(dns.config.searches, ["corp.example", "lab.example"]);
        assert_eq!(dns.config.nameservers, ["10.96.0.10"]);
    }

    #[test]
    fn policy_none_takes_only_the_pods_dns_config() {
        let mut none = pod(Some("None"), false);
        none.spec.as_mut().unwrap().dns_config = Some(PodDNSConfig {
            nameservers: Some(vec!["1.2.3.4".into()]),
            searches: Some(vec![
                "ns1.svc.cluster-domain.example".into(),
                "my.dns.search.suffix".into(),
            ]),
            options: Some(vec![
                PodDNSConfigOption {
                    name: Some("ndots".into()),
                    value: Some("2".into()),
                },
                PodDNSConfigOption {
                    name: Some("edns0".into()),
                    value: None,
                },
            ]),
        });
        let dns = resolve(&none, &cluster_ips());
        assert_eq!(
            dns.config.render(),
            "search ns1.svc.cluster-domain.example my.dns.search.suffix\n\
             nameserver 1.2.3.4\n\
             options ndots:2 edns0\n"
        );
        // Nothing at all: an empty file.
        assert_eq!(
            resolve(&pod(Some("None"), false), &cluster_ips())
                .config
                .render(),
            ""
        );
    }

    #[test]
    fn dns_config_is_merged_into_the_policys_configuration() {
        let mut merged = pod(None, false);
        merged.spec.as_mut().unwrap().dns_config = Some(PodDNSConfig {
            nameservers: Some(vec!["10.96.0.10".into(), "192.0.2.1".into()]),
            searches: Some(vec!["cluster.local".into(), "extra.example".into()]),
            options: Some(vec![
                PodDNSConfigOption {
                    name: Some("ndots".into()),
                    value: Some("1".into()),
                },
                PodDNSConfigOption {
                    name: Some("single-request".into()),
                    value: None,
                },
            ]),
        });
        let dns = resolve(&merged, &cluster_ips());
        assert_eq!(dns.config.nameservers, ["10.96.0.10", "192.0.2.1"]);
        assert_eq!(
            dns.config.searches,
            [
                "shop.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "corp.example",
                "lab.example",
                "extra.example"
            ]
        );
        assert_eq!(dns.config.options, ["ndots:1", "single-request"]);
        assert!(dns.warnings.is_empty());
    }

    #[test]
    fn limits_cut_nameservers_and_search_paths_with_a_warning() {
        let mut many = pod(Some("Default"), false);
        let long = "x".repeat(254);
        let mut searches: Vec<String> = (0..40).map(|i| format!("s{i}.example")).collect();
        searches.insert(0, long.clone());
        many.spec.as_mut().unwrap().dns_config = Some(PodDNSConfig {
            nameservers: Some(vec!["192.0.2.55".into(), "192.0.2.56".into()]),
            searches: Some(searches),
            options: None,
        });
        let dns = resolve(&many, &cluster_ips());
        assert_eq!(
            dns.config.nameservers,
            ["192.0.2.53", "192.0.2.54", "192.0.2.55"]
        );
        assert_eq!(dns.config.searches.len(), MAX_SEARCH_PATHS - 1);
        assert!(!dns.config.searches.contains(&long));
        assert_eq!(dns.warnings.len(), 2, "{:?}", dns.warnings);
        assert!(dns.warnings[0].contains("nameserver limits"));
        assert!(dns.warnings[1].contains("search line limits"));

        // The line's length: cut from the end.
        let paths: Vec<String> = (0..20)
            .map(|i| format!("{i:02}{}", "y".repeat(150)))
            .collect();
        let (fitted, exceeded) = fit_searches(paths.clone());
        assert!(exceeded);
        assert!(fitted.join(" ").len() <= MAX_SEARCH_LIST_CHARS);
        assert_eq!(fitted, paths[..fitted.len()]);
        assert_eq!(fitted.len(), 13);
        assert_eq!(
            fit_searches(vec!["a".into()]),
            (vec!["a".to_string()], false)
        );
    }

    #[test]
    fn an_unknown_policy_resolves_as_cluster_first_with_a_warning() {
        let dns = resolve(&pod(Some("Sometimes"), false), &cluster_ips());
        assert_eq!(dns.config.nameservers, ["10.96.0.10"]);
        assert!(dns.warnings[0].contains("Sometimes"));
    }
}
