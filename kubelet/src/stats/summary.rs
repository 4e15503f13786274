//! The kubelet's Summary API (`stats/v1alpha1`, k8s.io/kubelet/pkg/apis/
//! stats/v1alpha1) as JSON, with the field names the real kubelet writes:
//! the part of it skiff measures (CPU and memory), nothing else and no
//! zeros for what is not measured.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

use super::sample::{History, Sample};

/// `GET /stats/summary`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub node: NodeStats,
    pub pods: Vec<PodStats>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    pub node_name: String,
    /// When the node's aggregate stats began: the host's boot.
    pub start_time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    pub pod_ref: PodReference,
    pub start_time: Time,
    pub containers: Vec<ContainerStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodReference {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    pub name: String,
    pub start_time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    /// When the latest sample was taken.
    pub time: Time,
    /// The rate between the last two samples, in billionths of a core.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    /// Cumulative CPU time, in core-nanoseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    pub time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
}

impl CpuStats {
    /// The latest sample's CPU time with the rate since the one before.
    pub fn of(history: &History) -> Option<CpuStats> {
        let latest = history.latest.as_ref()?;
        Some(CpuStats {
            time: Time(latest.time),
            usage_nano_cores: history.usage_nano_cores(),
            usage_core_nano_seconds: Some(latest.cpu_nanos),
        })
    }
}

impl MemoryStats {
    pub fn of(sample: &Sample) -> MemoryStats {
        let memory = &sample.memory;
        MemoryStats {
            time: Time(sample.time),
            available_bytes: memory.available,
            usage_bytes: memory.usage,
            working_set_bytes: Some(memory.working_set),
            rss_bytes: memory.rss,
        }
    }
}

/// The stats of one container from its samples.
pub fn container_stats(
    name: &str,
    start_time: jiff::Timestamp,
    history: &History,
) -> ContainerStats {
    ContainerStats {
        name: name.to_string(),
        start_time: Time(start_time),
        cpu: CpuStats::of(history),
        memory: history.latest.as_ref().map(MemoryStats::of),
    }
}

/// A pod's CPU and memory: the sums of its containers', at the latest of
/// their times. A figure only some containers have is summed over those.
pub fn pod_totals(containers: &[ContainerStats]) -> (Option<CpuStats>, Option<MemoryStats>) {
    let cpus: Vec<&CpuStats> = containers.iter().filter_map(|c| c.cpu.as_ref()).collect();
    let memories: Vec<&MemoryStats> = containers
        .iter()
        .filter_map(|c| c.memory.as_ref())
        .collect();
    let sum = |values: Vec<Option<u64>>| -> Option<u64> {
        values
            .into_iter()
            .flatten()
            .reduce(|a, b| a.saturating_add(b))
    };
    let cpu = cpus
        .iter()
        .map(|c| c.time.clone())
        .max_by_key(|t| t.0)
        .map(|time| CpuStats {
            time,
            usage_nano_cores: sum(cpus.iter().map(|c| c.usage_nano_cores).collect()),
            usage_core_nano_seconds: sum(cpus.iter().map(|c| c.usage_core_nano_seconds).collect()),
        });
    let memory = memories
        .iter()
        .map(|m| m.time.clone())
        .max_by_key(|t| t.0)
        .map(|time| MemoryStats {
            time,
            available_bytes: None,
            usage_bytes: sum(memories.iter().map(|m| m.usage_bytes).collect()),
            working_set_bytes: sum(memories.iter().map(|m| m.working_set_bytes).collect()),
            rss_bytes: sum(memories.iter().map(|m| m.rss_bytes).collect()),
        });
    (cpu, memory)
}

/// A pod's stats from its containers'.
pub fn pod_stats(
    pod_ref: PodReference,
    start_time: jiff::Timestamp,
    containers: Vec<ContainerStats>,
) -> PodStats {
    let (cpu, memory) = pod_totals(&containers);
    PodStats {
        pod_ref,
        start_time: Time(start_time),
        containers,
        cpu,
        memory,
    }
}

#[cfg(test)]
mod tests {
    use super::super::sample::MemorySample;
    use super::*;
    use serde_json::json;

    fn sample(second: i64, cpu_nanos: u64, working_set: u64) -> Sample {
        Sample {
            time: jiff::Timestamp::from_second(second).unwrap(),
            cpu_nanos,
            memory: MemorySample {
                working_set,
                rss: Some(working_set),
                ..MemorySample::default()
            },
        }
    }

    fn history(samples: &[Sample]) -> History {
        let mut history = History::default();
        for s in samples {
            history.push(*s);
        }
        history
    }

    #[test]
    fn the_summary_is_written_with_the_kubelets_field_names() {
        let start = jiff::Timestamp::from_second(1_700_000_000).unwrap();
        let app = history(&[
            sample(1_700_000_100, 1_000_000_000, 0),
            sample(1_700_000_110, 3_000_000_000, 4096),
        ]);
        let sidecar = history(&[sample(1_700_000_105, 0, 1024)]);
        let pod = pod_stats(
            PodReference {
                name: "web".into(),
                namespace: "default".into(),
                uid: "u1".into(),
            },
            start,
            vec![
                container_stats("app", start, &app),
                container_stats("sidecar", start, &sidecar),
            ],
        );
        let summary = Summary {
            node: NodeStats {
                node_name: "n1".into(),
                start_time: Time(start),
                cpu: CpuStats::of(&app),
                memory: None,
            },
            pods: vec![pod],
        };
        let written = serde_json::to_value(&summary).unwrap();
        assert_eq!(
            written,
            json!({
                "node": {
                    "nodeName": "n1",
                    "startTime": "2023-11-14T22:13:20Z",
                    "cpu": {"time": "2023-11-14T22:15:10Z", "usageNanoCores": 200_000_000u64,
                            "usageCoreNanoSeconds": 3_000_000_000u64},
                },
                "pods": [{
                    "podRef": {"name": "web", "namespace": "default", "uid": "u1"},
                    "startTime": "2023-11-14T22:13:20Z",
                    "containers": [
                        {"name": "app", "startTime": "2023-11-14T22:13:20Z",
                         "cpu": {"time": "2023-11-14T22:15:10Z", "usageNanoCores": 200_000_000u64,
                                 "usageCoreNanoSeconds": 3_000_000_000u64},
                         "memory": {"time": "2023-11-14T22:15:10Z", "workingSetBytes": 4096, "rssBytes": 4096}},
                        {"name": "sidecar", "startTime": "2023-11-14T22:13:20Z",
                         "cpu": {"time": "2023-11-14T22:15:05Z", "usageCoreNanoSeconds": 0},
                         "memory": {"time": "2023-11-14T22:15:05Z", "workingSetBytes": 1024, "rssBytes": 1024}},
                    ],
                    "cpu": {"time": "2023-11-14T22:15:10Z", "usageNanoCores": 200_000_000u64,
                            "usageCoreNanoSeconds": 3_000_000_000u64},
                    "memory": {"time": "2023-11-14T22:15:10Z", "workingSetBytes": 5120, "rssBytes": 5120},
                }],
            })
        );
        let read: Summary = serde_json::from_value(written).unwrap();
        assert_eq!(read, summary);
    }

    #[test]
    fn a_pod_without_samples_has_no_totals() {
        let start = jiff::Timestamp::from_second(1).unwrap();
        let pod = pod_stats(
            PodReference {
                name: "p".into(),
                namespace: "ns".into(),
                uid: "u".into(),
            },
            start,
            vec![container_stats("c", start, &History::default())],
        );
        assert_eq!((pod.cpu, pod.memory), (None, None));
        let written = serde_json::to_value(&pod.containers[0]).unwrap();
        assert_eq!(
            written,
            json!({"name": "c", "startTime": "1970-01-01T00:00:01Z"})
        );
    }
}
