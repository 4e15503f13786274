//! What simulated pods use, since they run nothing: each container of a
//! running simulated pod uses a CPU and memory that wander smoothly
//! between 40 % and 100 % of its requests (1m CPU and 8Mi without
//! requests), on waves seeded by the pod's uid, so the same pod reports
//! the same usage at the same age in every run; the node uses the sum and
//! a small baseline. Served as the Summary API of each node.

use std::collections::HashMap;
use std::f64::consts::TAU;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use parking_lot::Mutex;
use skiff_machinery::quantity::Quantity;

use crate::stats::sample::{usage_nano_cores, MemorySample, Sample};
use crate::stats::summary::{
    pod_stats, ContainerStats, CpuStats, MemoryStats, NodeStats, PodReference, Summary,
};

/// A container without a CPU request uses about this much (millicores).
pub const BASELINE_CPU_MILLIS: u64 = 1;
/// A container without a memory request uses about this much.
pub const BASELINE_MEMORY_BYTES: u64 = 8 << 20;
/// What a simulated node uses with no pods: its system daemons.
pub const NODE_CPU_MILLIS: u64 = 50;
pub const NODE_MEMORY_BYTES: u64 = 256 << 20;
/// How far apart the two samples of a simulated Summary are, as the
/// kubelet's default housekeeping interval.
pub const SAMPLE_INTERVAL: Duration = crate::stats::DEFAULT_HOUSEKEEPING_INTERVAL;

/// One wave: a fraction between 0.4 and 1.0 of a request at each age.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Wave {
    period_seconds: f64,
    phase: f64,
}

impl Wave {
    fn seeded(seed: u64) -> Wave {
        // Periods of one to six minutes; any phase.
        Wave {
            period_seconds: 60.0 + (seed % 300) as f64,
            phase: ((seed >> 16) % 10_000) as f64 / 10_000.0 * TAU,
        }
    }

    fn angle(&self, age: f64) -> f64 {
        TAU * age / self.period_seconds + self.phase
    }

    /// The fraction of the request in use at `age` seconds.
    fn fraction(&self, age: f64) -> f64 {
        0.7 + 0.3 * self.angle(age).sin()
    }

    /// The integral of `fraction` from age 0 to `age`, in seconds.
    fn integral(&self, age: f64) -> f64 {
        let scale = self.period_seconds / TAU;
        0.7 * age + 0.3 * scale * (self.phase.cos() - self.angle(age).cos())
    }
}

/// FNV-1a: a stable hash (std's changes between releases and runs).
fn seed(parts: &[&str]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.bytes().chain([0]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

/// One simulated container: its requests and the waves of its usage.
#[derive(Debug, Clone, PartialEq)]
pub struct SimContainer {
    pub name: String,
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    cpu: Wave,
    memory: Wave,
}

impl SimContainer {
    pub fn new(
        pod_uid: &str,
        name: &str,
        cpu_millis: Option<u64>,
        memory_bytes: Option<u64>,
    ) -> SimContainer {
        SimContainer {
            name: name.to_string(),
            cpu_millis: cpu_millis.filter(|m| *m > 0).unwrap_or(BASELINE_CPU_MILLIS),
            memory_bytes: memory_bytes
                .filter(|b| *b > 0)
                .unwrap_or(BASELINE_MEMORY_BYTES),
            cpu: Wave::seeded(seed(&[pod_uid, name, "cpu"])),
            memory: Wave::seeded(seed(&[pod_uid, name, "memory"])),
        }
    }

    /// CPU time used from its start to `age` seconds, in nanoseconds.
    pub fn cpu_nanos(&self, age: f64) -> u64 {
        let nanocores = self.cpu_millis as f64 * 1e6;
        (nanocores * self.cpu.integral(age.max(0.0))).max(0.0) as u64
    }

    /// Memory in use at `age` seconds, in bytes.
    pub fn working_set(&self, age: f64) -> u64 {
        (self.memory_bytes as f64 * self.memory.fraction(age.max(0.0))) as u64
    }
}

/// One running simulated pod.
#[derive(Debug, Clone, PartialEq)]
pub struct SimPod {
    pub reference: PodReference,
    pub start_time: Timestamp,
    pub containers: Vec<SimContainer>,
}

impl SimPod {
    /// A running pod as the API has it: started at its status'
    /// startTime, each container with its requests.
    pub fn of(pod: &Pod) -> Option<SimPod> {
        let status = pod.status.as_ref()?;
        let start_time = status.start_time.as_ref()?.0;
        let uid = pod.metadata.uid.clone()?;
        let spec = pod.spec.as_ref()?;
        let containers = spec
            .containers
            .iter()
            .map(|c| {
                let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
                let request = |name: &str| {
                    requests
                        .and_then(|r| r.get(name))
                        .and_then(|q| Quantity::parse(&q.0))
                        .and_then(|q| u64::try_from(q.milli).ok())
                };
                SimContainer::new(
                    &uid,
                    &c.name,
                    request("cpu"),
                    request("memory").map(|milli| milli / 1000),
                )
            })
            .collect();
        Some(SimPod {
            reference: PodReference {
                name: pod.metadata.name.clone()?,
                namespace: pod
                    .metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".into()),
                uid,
            },
            start_time,
            containers,
        })
    }

    fn age(&self, at: Timestamp) -> f64 {
        at.duration_since(self.start_time).as_secs_f64()
    }

    /// CPU used since the start, at `at`, in nanoseconds.
    pub fn cpu_nanos(&self, at: Timestamp) -> u64 {
        let age = self.age(at);
        self.containers.iter().map(|c| c.cpu_nanos(age)).sum()
    }

    fn stats(&self, previous: Timestamp, latest: Timestamp) -> crate::stats::summary::PodStats {
        let containers = self
            .containers
            .iter()
            .map(|c| {
                let sample = |at: Timestamp| Sample {
                    time: at,
                    cpu_nanos: c.cpu_nanos(self.age(at)),
                    memory: MemorySample {
                        working_set: c.working_set(self.age(at)),
                        usage: Some(c.working_set(self.age(at))),
                        rss: Some(c.working_set(self.age(at))),
                        available: None,
                    },
                };
                let (earlier, later) = (sample(previous.max(self.start_time)), sample(latest));
                ContainerStats {
                    name: c.name.clone(),
                    start_time: Time(self.start_time),
                    cpu: Some(CpuStats {
                        time: Time(latest),
                        usage_nano_cores: usage_nano_cores(&earlier, &later),
                        usage_core_nano_seconds: Some(later.cpu_nanos),
                    }),
                    memory: Some(MemoryStats::of(&later)),
                }
            })
            .collect();
        pod_stats(self.reference.clone(), self.start_time, containers)
    }
}

/// One simulated node's running pods, and the CPU time of pods that have
/// ended (so the node's counter never goes back).
#[derive(Debug)]
struct NodeUsage {
    started: Timestamp,
    memory_capacity: Option<u64>,
    ended_cpu_nanos: u64,
    pods: HashMap<String, SimPod>,
}

/// The usage of every node of a simulation.
#[derive(Debug)]
pub struct SimulatedUsage {
    nodes: HashMap<String, Mutex<NodeUsage>>,
}

impl SimulatedUsage {
    /// For `nodes`, started at `started`, each with `memory_capacity`.
    pub fn new<'a>(
        nodes: impl IntoIterator<Item = &'a str>,
        memory_capacity: Option<u64>,
        started: Timestamp,
    ) -> SimulatedUsage {
        SimulatedUsage {
            nodes: nodes
                .into_iter()
                .map(|name| {
                    let usage = NodeUsage {
                        started,
                        memory_capacity,
                        ended_cpu_nanos: 0,
                        pods: HashMap::new(),
                    };
                    (name.to_string(), Mutex::new(usage))
                })
                .collect(),
        }
    }

    /// `pod` as last seen on `node` at `now`: counted while Running, not
    /// after.
    pub fn observe(&self, node: &str, pod: &Pod, now: Timestamp) {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        match (phase, SimPod::of(pod)) {
            (Some("Running"), Some(sim)) if pod.metadata.deletion_timestamp.is_none() => {
                if let Some(usage) = self.nodes.get(node) {
                    usage.lock().pods.entry(uid.to_string()).or_insert(sim);
                }
            }
            _ => self.pod_gone(node, uid, now),
        }
    }

    /// The pod `uid` no longer runs on `node`, from `now`.
    pub fn pod_gone(&self, node: &str, uid: &str, now: Timestamp) {
        let Some(usage) = self.nodes.get(node) else {
            return;
        };
        let mut usage = usage.lock();
        if let Some(pod) = usage.pods.remove(uid) {
            usage.ended_cpu_nanos += pod.cpu_nanos(now);
        }
    }

    /// Keeps only the pods `keep` says yes to, on every node.
    pub fn retain(&self, mut keep: impl FnMut(&str) -> bool, now: Timestamp) {
        for usage in self.nodes.values() {
            let mut usage = usage.lock();
            let gone: Vec<String> = usage
                .pods
                .keys()
                .filter(|uid| !keep(uid))
                .cloned()
                .collect();
            for uid in gone {
                if let Some(pod) = usage.pods.remove(&uid) {
                    usage.ended_cpu_nanos += pod.cpu_nanos(now);
                }
            }
        }
    }

    /// The Summary of `node` at `now`: samples on the housekeeping grid
    /// (the latest at or before `now`, the one before it an interval
    /// earlier), so repeated reads agree. `None` for a node not simulated
    /// here.
    pub fn summary(&self, node: &str, now: Timestamp) -> Option<Summary> {
        let usage = self.nodes.get(node)?.lock();
        let step = SAMPLE_INTERVAL.as_secs() as i64;
        let latest = Timestamp::from_second(now.as_second().div_euclid(step) * step).ok()?;
        let previous = latest.checked_sub(SAMPLE_INTERVAL).ok()?;
        let mut pods: Vec<_> = usage
            .pods
            .values()
            .filter(|pod| pod.start_time < latest)
            .map(|pod| pod.stats(previous, latest))
            .collect();
        pods.sort_by(|a, b| {
            (&a.pod_ref.namespace, &a.pod_ref.name).cmp(&(&b.pod_ref.namespace, &b.pod_ref.name))
        });
        let node_sample = |at: Timestamp, pods_cpu: u64, pods_memory: u64| {
            let up = at.duration_since(usage.started).as_secs_f64().max(0.0);
            let working_set = NODE_MEMORY_BYTES + pods_memory;
            Sample {
                time: at,
                cpu_nanos: usage.ended_cpu_nanos
                    + (NODE_CPU_MILLIS as f64 * 1e6 * up) as u64
                    + pods_cpu,
                memory: MemorySample {
                    working_set,
                    usage: Some(working_set),
                    rss: Some(working_set),
                    available: usage.memory_capacity.map(|c| c.saturating_sub(working_set)),
                },
            }
        };
        let sum = |f: &dyn Fn(&crate::stats::summary::PodStats) -> Option<u64>| -> u64 {
            pods.iter().filter_map(f).sum()
        };
        let cpu_now = sum(&|p| p.cpu.as_ref()?.usage_core_nano_seconds);
        let memory_now = sum(&|p| p.memory.as_ref()?.working_set_bytes);
        let cpu_before: u64 = usage
            .pods
            .values()
            .filter(|pod| pod.start_time < latest)
            .map(|pod| pod.cpu_nanos(previous.max(pod.start_time)))
            .sum();
        let later = node_sample(latest, cpu_now, memory_now);
        let earlier = node_sample(previous, cpu_before, memory_now);
        Some(Summary {
            node: NodeStats {
                node_name: node.to_string(),
                start_time: Time(usage.started),
                cpu: Some(CpuStats {
                    time: Time(latest),
                    usage_nano_cores: usage_nano_cores(&earlier, &later),
                    usage_core_nano_seconds: Some(later.cpu_nanos),
                }),
                memory: Some(MemoryStats::of(&later)),
            },
            pods,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(uid: &str, phase: &str, requests: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": format!("pod-{uid}"), "namespace": "default", "uid": uid},
            "spec": {"nodeName": "sim-0", "containers": [
                {"name": "app", "resources": {"requests": requests}},
                {"name": "bare"},
            ]},
            "status": {"phase": phase, "startTime": "2026-01-01T00:00:00Z"},
        }))
        .unwrap()
    }

    #[test]
    fn usage_stays_between_40_and_100_percent_of_the_requests() {
        let container = SimContainer::new("uid-1", "app", Some(500), Some(256 << 20));
        let mut last_cpu = 0;
        for second in (0..3600).step_by(7) {
            let age = second as f64;
            let memory = container.working_set(age) as f64 / (256u64 << 20) as f64;
            assert!((0.4..=1.0).contains(&memory), "memory {memory} at {age}");
            let cpu = container.cpu_nanos(age);
            assert!(cpu >= last_cpu, "CPU time only grows");
            let rate = (container.cpu_nanos(age + 1.0) - cpu) as f64 / 0.5e9;
            assert!(
                (0.399..=1.001).contains(&rate),
                "CPU {rate} of the request at {age}"
            );
            last_cpu = cpu;
        }
        let bare = SimContainer::new("uid-1", "bare", None, None);
        assert_eq!((bare.cpu_millis, bare.memory_bytes), (1, 8 << 20));
    }

    #[test]
    fn the_same_pod_uses_the_same_and_another_pod_differently() {
        let a = SimContainer::new("uid-1", "app", Some(500), Some(1 << 30));
        let again = SimContainer::new("uid-1", "app", Some(500), Some(1 << 30));
        let other = SimContainer::new("uid-2", "app", Some(500), Some(1 << 30));
        assert_eq!(a, again);
        assert_eq!(a.cpu_nanos(1234.5), again.cpu_nanos(1234.5));
        assert_ne!(a.working_set(100.0), other.working_set(100.0));
    }

    #[test]
    fn a_nodes_summary_has_its_running_pods_and_their_sum_plus_a_baseline() {
        let started = "2026-01-01T00:00:00Z".parse().unwrap();
        let usage = SimulatedUsage::new(["sim-0"], Some(8 << 30), started);
        let now: Timestamp = "2026-01-01T00:10:07Z".parse().unwrap();
        let running = pod("u1", "Running", json!({"cpu": "200m", "memory": "64Mi"}));
        usage.observe("sim-0", &running, now);
        usage.observe("sim-0", &pod("u2", "Pending", json!({})), now);
        usage.observe("sim-9", &pod("u3", "Running", json!({})), now);
        let summary = usage.summary("sim-0", now).unwrap();
        assert!(usage.summary("sim-9", now).is_none());
        assert_eq!(summary.pods.len(), 1);
        let stats = &summary.pods[0];
        assert_eq!(stats.pod_ref.uid, "u1");
        let app = &stats.containers[0];
        let cpu = app.cpu.as_ref().unwrap();
        assert_eq!(cpu.time.0, "2026-01-01T00:10:00Z".parse().unwrap());
        let nano_cores = cpu.usage_nano_cores.unwrap();
        assert!(
            (80_000_000..=200_000_000).contains(&nano_cores),
            "{nano_cores}"
        );
        let bytes = app.memory.as_ref().unwrap().working_set_bytes.unwrap();
        assert!(
            ((64u64 << 20) * 4 / 10..=64 << 20).contains(&bytes),
            "{bytes}"
        );
        let node = &summary.node;
        let node_cores = node.cpu.as_ref().unwrap().usage_nano_cores.unwrap();
        let pod_cores = stats.cpu.as_ref().unwrap().usage_nano_cores.unwrap();
        assert_eq!(node_cores, pod_cores + NODE_CPU_MILLIS * 1_000_000);
        let node_memory = node.memory.as_ref().unwrap();
        let pod_memory = stats.memory.as_ref().unwrap().working_set_bytes.unwrap();
        assert_eq!(
            node_memory.working_set_bytes,
            Some(NODE_MEMORY_BYTES + pod_memory)
        );
        assert_eq!(
            node_memory.available_bytes,
            Some((8u64 << 30) - NODE_MEMORY_BYTES - pod_memory)
        );
        // The same moment reads the same; the pod's end keeps the
        // node's CPU time from going back.
        assert_eq!(usage.summary("sim-0", now), Some(summary.clone()));
        let before = summary.node.cpu.unwrap().usage_core_nano_seconds.unwrap();
        let later: Timestamp = "2026-01-01T00:10:17Z".parse().unwrap();
        usage.observe("sim-0", &pod("u1", "Succeeded", json!({})), later);
        let after = usage.summary("sim-0", later).unwrap();
        assert!(after.pods.is_empty());
        assert!(after.node.cpu.unwrap().usage_core_nano_seconds.unwrap() >= before);
    }
}
