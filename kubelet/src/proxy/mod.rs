//! The service proxy, as kube-proxy in nftables mode: a list-watch client
//! of Services and EndpointSlices that programs the kernel so that a
//! Service's cluster IPs and node ports reach its ready endpoints, from
//! pods and from the host. It runs beside every kubelet (and alone as
//! `skiff proxy`), as root, through the `nft` tool; the rules live in one
//! table of its own, written whole at start (so a restarted proxy
//! converges on what the API says) and then changed only where the
//! Services and endpoints changed; UDP flows made stale by a change are
//! deleted from connection tracking (see [`conntrack`]).

mod conntrack;
pub mod model;
pub mod rules;

use std::future::Future;
use std::time::{Duration, Instant};

use futures::{stream, StreamExt};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector;
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};

use crate::network::hostgw::run as run_tool;
pub use rules::{NodeDns, Ruleset};

/// The proxy's table unless told otherwise.
pub const DEFAULT_TABLE: &str = "skiff-proxy";
/// Changes arriving together are programmed together.
const COALESCE: Duration = Duration::from_millis(20);
/// The whole table is written again this often, whatever changed.
const FULL_SYNC: Duration = Duration::from_secs(300);
/// How often the pod bridge's `route_localnet` is checked.
const LOCALNET_CHECK: Duration = Duration::from_secs(1);
/// After a failed write, the next try (a full one) waits this long.
const RETRY: Duration = Duration::from_secs(1);

/// What one proxy programs.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The node it runs on: `Local` traffic policies keep traffic to its
    /// endpoints.
    pub node_name: String,
    /// Its nftables table (`ip` family).
    pub table: String,
    /// Interfaces where packets to 127.0.0.0/8 are routed
    /// (`route_localnet`): the pod bridge, so that pods reach endpoints on
    /// the host's loopback (the API server of `skiff up`) and the host
    /// reaches node ports on 127.0.0.1.
    pub localnet_interfaces: Vec<String>,
    /// The node's own cluster DNS, which answers the cluster DNS address.
    pub dns: Option<NodeDns>,
}

/// Why the proxy cannot program this host, or `None` when it can.
pub fn unavailable_reason() -> Option<String> {
    if unsafe { libc::geteuid() } != 0 {
        return Some("the service proxy is not running as root".into());
    }
    if run_tool("nft", &["--version"], None).is_err() {
        return Some("the service proxy needs nft (apt-get install nftables)".into());
    }
    None
}

/// What has been programmed, and how long it took: for logs and the
/// benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Synced {
    pub full: bool,
    pub service_ports: usize,
    pub took: Duration,
}

/// Writes `ruleset` to the kernel: all of it (`before` is `None`), or
/// what changed since `before`.
pub fn apply(table: &str, ruleset: &Ruleset, before: Option<&Ruleset>) -> Result<(), String> {
    let script = match before {
        Some(before) => ruleset.changes_from(before, table),
        None => ruleset.full(table),
    };
    if script.is_empty() {
        return Ok(());
    }
    run_tool("nft", &["-f", "-"], Some(&script)).map(|_| ())
}

/// Removes the proxy's table (`skiff proxy --cleanup`, tests).
pub fn remove_table(table: &str) -> Result<(), String> {
    let script = format!("add table ip {table}\ndelete table ip {table}\n");
    run_tool("nft", &["-f", "-"], Some(&script)).map(|_| ())
}

/// Sets `route_localnet` on the interfaces that exist; those that do
/// not yet (a bridge made with the first pod) are tried on the next sync.
fn route_localnet(interfaces: &[String]) {
    for interface in interfaces {
        let path = format!("/proc/sys/net/ipv4/conf/{interface}/route_localnet");
        if std::fs::read_to_string(&path).is_ok_and(|v| v.trim() != "1") {
            if let Err(err) = std::fs::write(&path, "1") {
                tracing::warn!(%interface, error = %err, "setting route_localnet for Services with endpoints on the host's loopback");
            }
        }
    }
}

/// Runs the proxy until `stop` resolves; `synced` hears of every write.
pub async fn run_proxy(
    client: Client,
    config: ProxyConfig,
    stop: impl Future<Output = ()>,
    synced: Option<tokio::sync::mpsc::UnboundedSender<Synced>>,
) {
    let (services, services_writer) = reflector::store::<Service>();
    let (slices, slices_writer) = reflector::store::<EndpointSlice>();
    let service_events = reflector::reflector(
        services_writer,
        watcher(
            Api::<Service>::all(client.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .map(|e| (0usize, e.map(|e| matches!(e, Event::InitDone))));
    let slice_events = reflector::reflector(
        slices_writer,
        watcher(
            Api::<EndpointSlice>::all(client),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .map(|e| (1usize, e.map(|e| matches!(e, Event::InitDone))));
    let mut events = stream::select(service_events.boxed(), slice_events.boxed());
    let mut stop = std::pin::pin!(stop);
    let mut listed = [false, false];
    let mut dirty = false;
    let mut applied: Option<Ruleset> = None;
    // The ports the rules were last written for, to find stale UDP flows.
    let mut applied_ports: Vec<model::ServicePort> = Vec::new();
    let conntrack = conntrack::available();
    if !conntrack {
        tracing::warn!("the conntrack tool (conntrack-tools) is not installed: UDP flows to endpoints that left are not deleted, and keep going there while their clients send");
    }
    let mut last_full = Instant::now();
    // The pod bridge appears with the first pod, whenever that is.
    let mut localnet = tokio::time::interval(LOCALNET_CHECK);
    localnet.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let wait = match (dirty && listed.iter().all(|l| *l), applied.is_some()) {
            (true, _) => COALESCE,
            (false, true) => FULL_SYNC.saturating_sub(last_full.elapsed()),
            (false, false) => RETRY,
        };
        tokio::select! {
            _ = &mut stop => return,
            event = events.next() => {
                let Some((which, event)) = event else { return };
                match event {
                    Ok(init_done) => {
                        listed[which] |= init_done;
                        dirty = true;
                    }
                    Err(err) => tracing::debug!(error = %err, "watching Services and EndpointSlices"),
                }
                continue;
            }
            _ = localnet.tick() => {
                route_localnet(&config.localnet_interfaces);
                continue;
            }
            _ = tokio::time::sleep(wait) => {}
        }
        if !listed.iter().all(|l| *l) {
            continue;
        }
        let full = applied.is_none() || last_full.elapsed() >= FULL_SYNC;
        if !dirty && !full {
            continue;
        }
        let started = Instant::now();
        let ports = model::service_ports(
            services.state().iter().map(|s| s.as_ref()),
            slices.state().iter().map(|s| s.as_ref()),
        );
        let ruleset = Ruleset::build(&ports, &config.node_name, config.dns);
        let before = if full { None } else { applied.take() };
        let table = config.table.clone();
        let interfaces = config.localnet_interfaces.clone();
        let stale = match conntrack {
            true => conntrack::stale(&applied_ports, &ports, &config.node_name),
            false => Default::default(),
        };
        let written = tokio::task::spawn_blocking(move || {
            route_localnet(&interfaces);
            let result = apply(&table, &ruleset, before.as_ref());
            if result.is_ok() {
                if let Err(err) = conntrack::delete(&stale) {
                    tracing::warn!(error = %err, "deleting stale UDP flows");
                }
            }
            (ruleset, result)
        })
        .await;
        dirty = false;
        match written {
            Ok((ruleset, Ok(()))) => {
                let done = Synced {
                    full,
                    service_ports: ports.len(),
                    took: started.elapsed(),
                };
                if full {
                    last_full = Instant::now();
                    tracing::info!(table = %config.table, service_ports = done.service_ports, took = ?done.took, "service proxy wrote its rules");
                } else {
                    tracing::debug!(table = %config.table, service_ports = done.service_ports, took = ?done.took, "service proxy changed its rules");
                }
                applied = Some(ruleset);
                applied_ports = ports;
                if let Some(synced) = synced.as_ref() {
                    let _ = synced.send(done);
                }
            }
            Ok((_, Err(err))) => {
                tracing::warn!(table = %config.table, error = %err, "service proxy could not write its rules; writing them whole again");
                applied = None;
                dirty = true;
            }
            Err(err) => {
                tracing::warn!(error = %err, "service proxy's writer failed");
                applied = None;
                dirty = true;
            }
        }
        if applied.is_none() {
            tokio::select! {
                _ = &mut stop => return,
                _ = tokio::time::sleep(RETRY) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports(endpoints: &[&str], affinity: bool) -> Vec<model::ServicePort> {
        let mut spec = serde_json::json!({"clusterIP": "10.96.0.20", "type": "NodePort",
            "ports": [{"name": "http", "port": 80, "nodePort": 30080},
                      {"name": "dns", "port": 53, "protocol": "UDP"}]});
        if affinity {
            spec["sessionAffinity"] = "ClientIP".into();
        }
        let service: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default"}, "spec": spec}))
        .unwrap();
        let kube_dns: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kube-dns", "namespace": "kube-system"},
            "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}})).unwrap();
        let addresses: Vec<serde_json::Value> = endpoints
            .iter()
            .map(|ip| serde_json::json!({"addresses": [ip], "nodeName": "a"}))
            .collect();
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080}, {"name": "dns", "port": 5353, "protocol": "UDP"}],
            "endpoints": addresses})).unwrap();
        model::service_ports(&[service, kube_dns], &[slice])
    }

    /// The rules as the kernel takes them: written whole, changed step by
    /// step, in a network namespace of the test's own.
    #[test]
    fn the_kernel_takes_the_rules_whole_and_changed() {
        let test = "the_kernel_takes_the_rules_whole_and_changed";
        if let Some(why) = unavailable_reason() {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{test}: {why}; CI must be able to");
            }
            eprintln!("{test}: skipped: {why}");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let ns = dir.path().join("host");
        crate::network::netns::create(&ns).unwrap();
        let outcome = crate::network::netns::run_in(&ns, || {
            let dns = Some(NodeDns {
                cluster_ip: "10.96.0.10".parse().unwrap(),
                listen: "127.0.0.1:5353".parse().unwrap(),
            });
            let steps = [
                Ruleset::build(&ports(&["10.244.0.2", "10.244.0.3"], true), "a", dns),
                Ruleset::build(&ports(&["10.244.0.2"], true), "a", dns),
                Ruleset::build(&ports(&["10.244.0.2"], false), "a", dns),
                Ruleset::build(&ports(&[], false), "a", dns),
                Ruleset::build(&ports(&["10.244.0.4"], true), "a", None),
            ];
            let mut listed = Vec::new();
            let mut before: Option<&Ruleset> = None;
            for step in &steps {
                apply("skt-proxy", step, before)?;
                listed.push(run_tool(
                    "nft",
                    &["list", "table", "ip", "skt-proxy"],
                    None,
                )?);
                before = Some(step);
            }
            // A restart: written whole over what is there.
            apply("skt-proxy", &steps[0], None)?;
            listed.push(run_tool(
                "nft",
                &["list", "table", "ip", "skt-proxy"],
                None,
            )?);
            Ok::<_, String>(listed)
        });
        crate::network::netns::remove(&ns).unwrap();
        let listed = outcome.unwrap().unwrap();
        assert!(listed[0].contains("10.244.0.3:8080"), "{}", listed[0]);
        assert!(listed[0].contains("affinity-default/web/tcp/http__10.244.0.2/8080"));
        assert!(listed[0].contains("10.96.0.10 . udp . 53 : goto cluster-dns"));
        assert!(!listed[1].contains("10.244.0.3"), "{}", listed[1]);
        assert!(!listed[2].contains("affinity-"), "{}", listed[2]);
        assert!(
            listed[3].contains("10.96.0.20 . tcp . 80 : goto reject-chain"),
            "{}",
            listed[3]
        );
        assert!(!listed[3].contains("dnat to 10.244"), "{}", listed[3]);
        assert!(!listed[4].contains("cluster-dns"), "{}", listed[4]);
        assert!(listed[4].contains("10.244.0.4:8080"), "{}", listed[4]);
        assert_eq!(listed[5], listed[0], "a rewrite gives the same table");
    }
}
