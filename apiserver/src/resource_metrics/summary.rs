//! The kubelet's Summary API (`GET /stats/summary`, `stats/v1alpha1`) read
//! down to what the resource metrics API reports: the node's and each
//! container's CPU (`usageNanoCores`) and memory (`workingSetBytes`), with
//! the time they were sampled; and those numbers written as metrics-server
//! writes its quantities. Not the fetching (`scrape`) nor the API objects.

use std::collections::HashMap;

use serde::Deserialize;

/// One kubelet's Summary, as much of it as is read. Every field may be
/// missing: a kubelet that has not sampled yet leaves them out.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Summary {
    #[serde(default)]
    node: NodeStats,
    #[serde(default)]
    pods: Vec<PodStats>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeStats {
    #[serde(default)]
    node_name: String,
    cpu: Option<CpuStats>,
    memory: Option<MemoryStats>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodStats {
    #[serde(default)]
    pod_ref: PodReference,
    #[serde(default)]
    containers: Vec<ContainerStats>,
}

#[derive(Debug, Default, Deserialize)]
struct PodReference {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    uid: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerStats {
    #[serde(default)]
    name: String,
    cpu: Option<CpuStats>,
    memory: Option<MemoryStats>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CpuStats {
    time: Option<String>,
    usage_nano_cores: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MemoryStats {
    time: Option<String>,
    working_set_bytes: Option<u64>,
}

/// What one sample says: CPU and memory in use, and when it was taken
/// (RFC 3339, seconds, UTC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    pub timestamp: String,
    pub cpu_nanocores: u64,
    pub memory_bytes: u64,
}

/// One pod's containers with numbers, in the kubelet's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodUsage {
    /// The pod's uid as the kubelet names it ("" if it does not).
    pub uid: String,
    /// The earliest of its containers' sample times, as metrics-server
    /// stamps a pod.
    pub timestamp: String,
    pub containers: Vec<(String, Usage)>,
}

/// One node's Summary, read: the node's usage (if it has both numbers)
/// and each pod with at least one container that has both.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeUsage {
    pub node: Option<Usage>,
    /// By (namespace, name).
    pub pods: HashMap<(String, String), PodUsage>,
}

/// A Summary that is not JSON of the expected shape.
#[derive(Debug, thiserror::Error)]
#[error("decoding the kubelet's stats summary: {0}")]
pub struct DecodeError(#[from] serde_json::Error);

/// Reads a kubelet's `/stats/summary` body. A sample without a time is
/// stamped `now` (as the fetch's time); a container or node lacking
/// either number is left out, and a pod none of whose containers has both
/// is left out, as metrics-server leaves them out.
pub fn decode(body: &[u8], now: &str) -> Result<NodeUsage, DecodeError> {
    let summary: Summary = serde_json::from_slice(body)?;
    let node_time = sample_time(summary.node.cpu.as_ref(), summary.node.memory.as_ref());
    let node = usage(
        summary.node.cpu.as_ref(),
        summary.node.memory.as_ref(),
        node_time.as_deref().unwrap_or(now),
    );
    if node.is_none() {
        tracing::debug!(node = %summary.node.node_name, "the stats summary has no complete node metric");
    }
    let mut pods = HashMap::new();
    for pod in summary.pods {
        let reference = &pod.pod_ref;
        let containers: Vec<(String, Usage)> = pod
            .containers
            .iter()
            .filter_map(|c| {
                let at = sample_time(c.cpu.as_ref(), c.memory.as_ref());
                let at = at.as_deref().or(node_time.as_deref()).unwrap_or(now);
                let usage = usage(c.cpu.as_ref(), c.memory.as_ref(), at);
                if usage.is_none() {
                    tracing::debug!(container = %c.name, pod = %reference.name, namespace = %reference.namespace, "skipped a container without complete metrics");
                }
                Some((c.name.clone(), usage?))
            })
            .collect();
        let Some(timestamp) = containers.iter().map(|(_, u)| u.timestamp.clone()).min() else {
            continue;
        };
        let key = (reference.namespace.clone(), reference.name.clone());
        // A pod listed twice: the first is kept.
        pods.entry(key).or_insert(PodUsage {
            uid: reference.uid.clone(),
            timestamp,
            containers,
        });
    }
    Ok(NodeUsage { node, pods })
}

/// Both numbers of a sample taken at `at`, or `None` if either is missing.
fn usage(cpu: Option<&CpuStats>, memory: Option<&MemoryStats>, at: &str) -> Option<Usage> {
    Some(Usage {
        timestamp: at.to_string(),
        cpu_nanocores: cpu?.usage_nano_cores?,
        memory_bytes: memory?.working_set_bytes?,
    })
}

/// When a sample was taken: its CPU time, else its memory time (the
/// kubelet samples both together), as Kubernetes writes a timestamp.
fn sample_time(cpu: Option<&CpuStats>, memory: Option<&MemoryStats>) -> Option<String> {
    [
        cpu.and_then(|c| c.time.as_deref()),
        memory.and_then(|m| m.time.as_deref()),
    ]
    .into_iter()
    .flatten()
    .find_map(|text| text.parse::<jiff::Timestamp>().ok())
    .map(|at| at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
}

/// CPU as metrics-server writes it: nanocores as a decimal quantity of
/// scale -9, in Kubernetes' canonical form (`123456789n`, `150m`, `2`).
pub fn cpu_quantity(nanocores: u64) -> String {
    decimal_quantity(u128::from(nanocores), -9)
}

/// Memory as metrics-server writes it: bytes as a binary quantity in
/// Kubernetes' canonical form (`1234Ki`, `2Gi`; `1536` when no power of
/// 1024 divides it; under 1024 as a decimal quantity, `512`, `1k`).
pub fn memory_quantity(bytes: u64) -> String {
    if bytes < 1024 {
        return decimal_quantity(u128::from(bytes), 0);
    }
    let (mut amount, mut power) = (bytes, 0);
    while amount % 1024 == 0 && power < 6 {
        amount /= 1024;
        power += 1;
    }
    let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][power];
    format!("{amount}{suffix}")
}

/// `amount × 10^exponent` in canonical decimal form: trailing zeros taken
/// into the exponent, then the exponent brought down to a multiple of 3
/// that has an SI suffix (Kubernetes' `AsCanonicalBytes`).
fn decimal_quantity(amount: u128, exponent: i32) -> String {
    if amount == 0 {
        return "0".into();
    }
    let (mut amount, mut exponent) = (amount, exponent);
    while amount % 10 == 0 {
        amount /= 10;
        exponent += 1;
    }
    match exponent.rem_euclid(3) {
        1 => (amount, exponent) = (amount * 10, exponent - 1),
        2 => (amount, exponent) = (amount * 100, exponent - 2),
        _ => {}
    }
    let suffix = match exponent {
        -9 => "n",
        -6 => "u",
        -3 => "m",
        0 => "",
        3 => "k",
        6 => "M",
        9 => "G",
        12 => "T",
        15 => "P",
        18 => "E",
        // Beyond E: the exponent form Kubernetes falls back to.
        other => return format!("{amount}e{other}"),
    };
    format!("{amount}{suffix}")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A Summary as the kubelet writes it: the node, a pod whose two
    /// containers have numbers, one whose sidecar has none, one with no
    /// container numbers at all.
    pub(crate) const FIXTURE: &str = r#"{
      "node": {
        "nodeName": "n1",
        "startTime": "2026-12-01T00:00:00Z",
        "cpu": {"time": "2026-12-07T03:00:05.123456789Z", "usageNanoCores": 123456789, "usageCoreNanoSeconds": 99999999999},
        "memory": {"time": "2026-12-07T03:00:05Z", "workingSetBytes": 1263616, "usageBytes": 2000000},
        "fs": {"availableBytes": 1}
      },
      "pods": [
        {
          "podRef": {"name": "web", "namespace": "default", "uid": "uid-web"},
          "startTime": "2026-12-07T02:00:00Z",
          "containers": [
            {"name": "app", "cpu": {"time": "2026-12-07T03:00:04Z", "usageNanoCores": 150000000}, "memory": {"time": "2026-12-07T03:00:04Z", "workingSetBytes": 10485760}},
            {"name": "proxy", "cpu": {"time": "2026-12-07T03:00:03Z", "usageNanoCores": 1000}, "memory": {"time": "2026-12-07T03:00:03Z", "workingSetBytes": 1536}}
          ]
        },
        {
          "podRef": {"name": "half", "namespace": "team", "uid": "uid-half"},
          "containers": [
            {"name": "main", "cpu": {"time": "2026-12-07T03:00:05Z", "usageNanoCores": 2000000000}, "memory": {"time": "2026-12-07T03:00:05Z", "workingSetBytes": 1073741824}},
            {"name": "starting", "cpu": {"time": "2026-12-07T03:00:05Z"}}
          ]
        },
        {
          "podRef": {"name": "empty", "namespace": "default", "uid": "uid-empty"},
          "containers": [{"name": "waiting"}]
        }
      ]
    }"#;

    #[test]
    fn a_summary_reads_as_the_node_and_each_container_with_numbers() {
        let usage = decode(FIXTURE.as_bytes(), "2026-12-07T04:00:00Z").unwrap();
        assert_eq!(
            usage.node,
            Some(Usage {
                timestamp: "2026-12-07T03:00:05Z".into(),
                cpu_nanocores: 123456789,
                memory_bytes: 1263616,
            })
        );
        let web = &usage.pods[&("default".to_string(), "web".to_string())];
        assert_eq!(web.uid, "uid-web");
        // The earliest container sample stamps the pod.
        assert_eq!(web.timestamp, "2026-12-07T03:00:03Z");
        let names: Vec<&str> = web.containers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["app", "proxy"]);
        assert_eq!(web.containers[0].1.cpu_nanocores, 150000000);
        assert_eq!(web.containers[1].1.memory_bytes, 1536);
        // A container without numbers is left out; the pod stays.
        let half = &usage.pods[&("team".to_string(), "half".to_string())];
        assert_eq!(half.containers.len(), 1);
        assert_eq!(half.containers[0].0, "main");
        // A pod with no container numbers is left out.
        assert!(!usage
            .pods
            .contains_key(&("default".to_string(), "empty".to_string())));
        assert_eq!(usage.pods.len(), 2);
    }

    #[test]
    fn missing_numbers_and_times_are_not_guessed() {
        let now = "2026-12-07T04:00:00Z";
        // No node memory: no node usage, the pods still read.
        let body = r#"{"node": {"nodeName": "n", "cpu": {"usageNanoCores": 5}},
            "pods": [{"podRef": {"name": "p", "namespace": "d"},
              "containers": [{"name": "c", "cpu": {"usageNanoCores": 1}, "memory": {"workingSetBytes": 2}}]}]}"#;
        let usage = decode(body.as_bytes(), now).unwrap();
        assert_eq!(usage.node, None);
        // No time anywhere: the fetch's.
        let pod = &usage.pods[&("d".to_string(), "p".to_string())];
        assert_eq!(pod.timestamp, now);
        // An empty object is a Summary with nothing in it.
        assert_eq!(decode(b"{}", now).unwrap(), NodeUsage::default());
        // Not a Summary: an error, never a panic.
        assert!(decode(b"not json", now).is_err());
        assert!(decode(br#"{"node": {"cpu": {"usageNanoCores": -1}}}"#, now).is_err());
    }

    #[test]
    fn cpu_is_written_in_nanocores_canonically() {
        assert_eq!(cpu_quantity(123456789), "123456789n");
        assert_eq!(cpu_quantity(150000000), "150m");
        assert_eq!(cpu_quantity(1000), "1u");
        assert_eq!(cpu_quantity(1500), "1500n");
        assert_eq!(cpu_quantity(10), "10n");
        assert_eq!(cpu_quantity(1000000000), "1");
        assert_eq!(cpu_quantity(2500000000), "2500m");
        assert_eq!(cpu_quantity(2000000000000), "2k");
        assert_eq!(cpu_quantity(0), "0");
        assert_eq!(cpu_quantity(u64::MAX), "18446744073709551615n");
    }

    #[test]
    fn memory_is_written_in_powers_of_1024() {
        assert_eq!(memory_quantity(1263616), "1234Ki");
        assert_eq!(memory_quantity(10485760), "10Mi");
        assert_eq!(memory_quantity(1073741824), "1Gi");
        assert_eq!(memory_quantity(1536), "1536");
        assert_eq!(memory_quantity(1024), "1Ki");
        assert_eq!(memory_quantity(512), "512");
        assert_eq!(memory_quantity(1000), "1k");
        assert_eq!(memory_quantity(0), "0");
        assert_eq!(memory_quantity(1 << 62), "4Ei");
    }
}
