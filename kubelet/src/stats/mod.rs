//! What the node and its containers use, sampled every housekeeping
//! interval (`--housekeeping-interval`) as cAdvisor samples for the real
//! kubelet: cumulative CPU time and the memory working set, from each
//! container's cgroup v2 when it has one, else from its process tree in
//! `/proc`. The last two samples of each give the CPU rate. Served as the
//! Summary API ([`summary`]) and as resource metrics ([`resource_metrics`]).

pub mod cgroup;
pub mod proc;
pub mod resource_metrics;
pub mod sample;
pub mod summary;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use parking_lot::Mutex;

use crate::metrics::{ContainerCounts, KubeletMetrics};
use crate::pod::PodManager;
use crate::runtime::{ContainerId, LimitsEnforcement};
use proc::{HostUnits, ProcessTable};
use sample::{History, MemorySample, Sample};
use summary::{container_stats, pod_stats, NodeStats, PodReference, Summary};

/// The kubelet's default `--housekeeping-interval`.
pub const DEFAULT_HOUSEKEEPING_INTERVAL: Duration = Duration::from_secs(10);

/// One running container to measure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeasuredContainer {
    pub id: ContainerId,
    /// Its main process; the tree under it is the container's.
    pub pid: u32,
    pub started_at: Timestamp,
    pub limits: LimitsEnforcement,
}

/// One pod to measure, with its running containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeasuredPod {
    pub reference: PodReference,
    pub start_time: Timestamp,
    pub containers: Vec<MeasuredContainer>,
}

#[derive(Debug)]
struct ContainerEntry {
    name: String,
    started_at: Timestamp,
    history: History,
}

#[derive(Debug, Default)]
struct Collected {
    node: History,
    /// The pods of the latest round, in the order measured.
    pods: Vec<MeasuredPod>,
    /// By container run (pod uid, name, attempt): a restarted container
    /// is a new run whose CPU counts from zero again.
    containers: HashMap<ContainerId, ContainerEntry>,
}

/// The node's samples, kept for the kubelet's stats endpoints.
#[derive(Debug)]
pub struct StatsProvider {
    node_name: String,
    proc_dir: PathBuf,
    units: HostUnits,
    boot_time: Timestamp,
    collected: Mutex<Collected>,
}

impl StatsProvider {
    pub fn new(node_name: &str) -> StatsProvider {
        StatsProvider::with_proc(node_name, Path::new("/proc"))
    }

    /// Reading a `/proc` elsewhere (tests).
    pub fn with_proc(node_name: &str, proc_dir: &Path) -> StatsProvider {
        let boot_time = std::fs::read_to_string(proc_dir.join("stat"))
            .ok()
            .and_then(|text| proc::parse_proc_stat(&text))
            .and_then(|stat| stat.boot_time_seconds)
            .and_then(|s| Timestamp::from_second(s).ok())
            .unwrap_or(Timestamp::UNIX_EPOCH);
        StatsProvider {
            node_name: node_name.to_string(),
            proc_dir: proc_dir.to_path_buf(),
            units: HostUnits::of_this_host(),
            boot_time,
            collected: Mutex::new(Collected::default()),
        }
    }

    /// Takes one sample of the node and of every container of `pods`;
    /// containers no longer among them are forgotten.
    pub fn housekeep(&self, pods: Vec<MeasuredPod>, now: Timestamp) {
        let node = self.node_sample(now);
        let table = ProcessTable::read(&self.proc_dir).unwrap_or_else(|err| {
            tracing::warn!(error = %err, "reading the process table for container stats");
            ProcessTable::default()
        });
        let samples: Vec<(MeasuredContainer, Option<Sample>)> = pods
            .iter()
            .flat_map(|p| p.containers.iter())
            .map(|c| (c.clone(), self.container_sample(c, &table, now)))
            .collect();
        let mut collected = self.collected.lock();
        if let Some(node) = node {
            collected.node.push(node);
        }
        let mut containers = std::mem::take(&mut collected.containers);
        for (container, sample) in samples {
            let mut entry = containers.remove(&container.id).unwrap_or(ContainerEntry {
                name: container.id.container.clone(),
                started_at: container.started_at,
                history: History::default(),
            });
            // A process gone between two reads has no sample this round.
            if let Some(sample) = sample {
                entry.history.push(sample);
            }
            collected.containers.insert(container.id, entry);
        }
        collected.pods = pods;
    }

    fn node_sample(&self, now: Timestamp) -> Option<Sample> {
        let read = |name: &str| std::fs::read_to_string(self.proc_dir.join(name)).ok();
        let stat = proc::parse_proc_stat(&read("stat")?)?;
        let memory = proc::parse_meminfo(&read("meminfo")?)?;
        Some(Sample {
            time: now,
            cpu_nanos: self.units.ticks_to_nanos(stat.busy_ticks),
            memory: MemorySample {
                working_set: memory.working_set(),
                usage: Some(memory.total.saturating_sub(memory.free)),
                rss: memory.anon,
                available: Some(memory.available),
            },
        })
    }

    fn container_sample(
        &self,
        container: &MeasuredContainer,
        table: &ProcessTable,
        now: Timestamp,
    ) -> Option<Sample> {
        if let LimitsEnforcement::Applied { cgroup } = &container.limits {
            if let Some(usage) = cgroup::read_usage(cgroup) {
                return Some(Sample {
                    time: now,
                    cpu_nanos: usage.cpu_nanos,
                    memory: MemorySample {
                        working_set: usage.working_set,
                        usage: Some(usage.memory_current),
                        rss: usage.rss,
                        available: usage
                            .memory_limit
                            .map(|limit| limit.saturating_sub(usage.working_set)),
                    },
                });
            }
        }
        let (ticks, pages) = table.tree_usage(container.pid)?;
        let rss = pages.saturating_mul(self.units.page_size);
        Some(Sample {
            time: now,
            cpu_nanos: self.units.ticks_to_nanos(ticks),
            memory: MemorySample {
                working_set: rss,
                usage: None,
                rss: Some(rss),
                available: None,
            },
        })
    }

    /// The Summary from the last two rounds.
    pub fn summary(&self) -> Summary {
        let collected = self.collected.lock();
        let node = NodeStats {
            node_name: self.node_name.clone(),
            start_time: Time(self.boot_time),
            cpu: summary::CpuStats::of(&collected.node),
            memory: collected.node.latest.as_ref().map(summary::MemoryStats::of),
        };
        let pods = collected
            .pods
            .iter()
            .filter_map(|pod| {
                let containers: Vec<_> = pod
                    .containers
                    .iter()
                    .filter_map(|c| collected.containers.get(&c.id))
                    .filter(|entry| entry.history.latest.is_some())
                    .map(|entry| container_stats(&entry.name, entry.started_at, &entry.history))
                    .collect();
                (!containers.is_empty())
                    .then(|| pod_stats(pod.reference.clone(), pod.start_time, containers))
            })
            .collect();
        Summary { node, pods }
    }

    /// Samples every `interval` until the task is dropped; counts the
    /// running pods and containers for `metrics` as it goes.
    pub async fn run(
        self: Arc<Self>,
        pods: Arc<PodManager>,
        metrics: Arc<KubeletMetrics>,
        interval: Duration,
    ) {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            count_running(&pods, &metrics);
            let measured = measured_pods(&pods);
            let this = Arc::clone(&self);
            let sampled = tokio::task::spawn_blocking(move || {
                this.housekeep(measured, Timestamp::now());
            });
            if let Err(err) = sampled.await {
                tracing::warn!(error = %err, "sampling the node's stats failed");
            }
        }
    }
}

/// Sets `kubelet_running_pods` and `kubelet_running_containers` from the
/// pods of `manager` now: pods with a running container, containers
/// running or exited (their last run ended and is kept).
pub fn count_running(manager: &PodManager, metrics: &KubeletMetrics) {
    let mut pods = 0;
    let mut counts = ContainerCounts::default();
    for (_, context) in manager.pods() {
        let running = context
            .shared
            .handles()
            .iter()
            .filter(|h| h.exited().is_none())
            .count() as u64;
        let (init, containers, _) = context.shared.snapshot();
        let exited = init
            .iter()
            .chain(&containers)
            .filter(|c| c.state.as_ref().is_some_and(|s| s.terminated.is_some()))
            .count() as u64;
        pods += u64::from(running > 0);
        counts.running += running;
        counts.exited += exited;
    }
    metrics.set_running(pods, counts);
}

/// The pods of `manager` with their running containers.
pub fn measured_pods(manager: &PodManager) -> Vec<MeasuredPod> {
    manager
        .pods()
        .into_iter()
        .map(|(_, context)| {
            let shared = &context.shared;
            let (_, _, facts) = shared.snapshot();
            let mut containers: Vec<MeasuredContainer> = shared
                .handles()
                .into_iter()
                .filter(|handle| handle.exited().is_none())
                .map(|handle| MeasuredContainer {
                    id: handle.id().clone(),
                    pid: handle.pid(),
                    started_at: handle.started_at(),
                    limits: handle.limits().clone(),
                })
                .collect();
            containers.sort_by(|a, b| a.id.container.cmp(&b.id.container));
            MeasuredPod {
                reference: PodReference {
                    name: shared.name.clone(),
                    namespace: shared.namespace.clone(),
                    uid: shared.uid.clone(),
                },
                start_time: facts.start_time.unwrap_or(Timestamp::UNIX_EPOCH),
                containers,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_proc(dir: &Path, busy: u64, processes: &[(u32, u32, u64, u64)]) {
        std::fs::write(
            dir.join("stat"),
            format!("cpu  {busy} 0 0 5000 100 0 0 0 0 0\nbtime 1700000000\n"),
        )
        .unwrap();
        std::fs::write(
            dir.join("meminfo"),
            "MemTotal: 1000 kB\nMemFree: 100 kB\nMemAvailable: 400 kB\nAnonPages: 300 kB\n",
        )
        .unwrap();
        for (pid, ppid, ticks, pages) in processes {
            let pid_dir = dir.join(pid.to_string());
            std::fs::create_dir_all(&pid_dir).unwrap();
            std::fs::write(
                pid_dir.join("stat"),
                format!("{pid} (app) S {ppid} 1 1 0 -1 0 0 0 0 0 {ticks} 0 0 0 20 0 1 0 100 1000 {pages} 0"),
            )
            .unwrap();
        }
    }

    fn pod(containers: &[(&str, u32)]) -> MeasuredPod {
        let start = Timestamp::from_second(1_700_000_100).unwrap();
        MeasuredPod {
            reference: PodReference {
                name: "web".into(),
                namespace: "default".into(),
                uid: "u1".into(),
            },
            start_time: start,
            containers: containers
                .iter()
                .map(|(name, pid)| MeasuredContainer {
                    id: ContainerId {
                        pod_uid: "u1".into(),
                        pod_namespace: "default".into(),
                        pod_name: "web".into(),
                        container: name.to_string(),
                        attempt: 0,
                    },
                    pid: *pid,
                    started_at: start,
                    limits: LimitsEnforcement::Skipped {
                        reason: "no cgroup v2".into(),
                    },
                })
                .collect(),
        }
    }

    #[test]
    fn two_rounds_give_rates_for_the_node_and_each_container_of_a_pod() {
        let dir = tempfile::tempdir().unwrap();
        let ticks = HostUnits::of_this_host().ticks_per_second;
        // app: pid 10 with child 11; side: pid 20; 30 is someone else's.
        fake_proc(
            dir.path(),
            1000,
            &[(10, 1, 0, 1), (11, 10, 0, 2), (20, 1, 0, 4), (30, 1, 0, 8)],
        );
        let provider = StatsProvider::with_proc("n1", dir.path());
        let at = |s| Timestamp::from_second(s).unwrap();
        provider.housekeep(vec![pod(&[("app", 10), ("side", 20)])], at(1_700_000_200));
        let first = provider.summary();
        assert_eq!(first.node.cpu.as_ref().unwrap().usage_nano_cores, None);
        assert_eq!(
            first.pods[0].containers[0]
                .cpu
                .as_ref()
                .unwrap()
                .usage_nano_cores,
            None
        );
        // 10 s later: the node was busy 5 CPU-seconds, app 2 (1 of it its
        // child's), side 1.
        fake_proc(
            dir.path(),
            1000 + 5 * ticks,
            &[
                (10, 1, ticks, 1),
                (11, 10, ticks, 2),
                (20, 1, ticks, 4),
                (30, 1, 9 * ticks, 8),
            ],
        );
        provider.housekeep(vec![pod(&[("app", 10), ("side", 20)])], at(1_700_000_210));
        let summary = provider.summary();
        let node = &summary.node;
        assert_eq!(node.start_time.0, at(1_700_000_000));
        assert_eq!(
            node.cpu.as_ref().unwrap().usage_nano_cores,
            Some(500_000_000)
        );
        assert_eq!(node.cpu.as_ref().unwrap().time.0, at(1_700_000_210));
        let memory = node.memory.as_ref().unwrap();
        assert_eq!(memory.working_set_bytes, Some(600 * 1024));
        assert_eq!(memory.available_bytes, Some(400 * 1024));
        let page = HostUnits::of_this_host().page_size;
        let web = &summary.pods[0];
        let app = &web.containers[0];
        assert_eq!(app.name, "app");
        assert_eq!(
            app.cpu.as_ref().unwrap().usage_nano_cores,
            Some(200_000_000)
        );
        assert_eq!(
            app.memory.as_ref().unwrap().working_set_bytes,
            Some(3 * page)
        );
        assert_eq!(
            web.cpu.as_ref().unwrap().usage_nano_cores,
            Some(300_000_000)
        );
        assert_eq!(
            web.memory.as_ref().unwrap().working_set_bytes,
            Some(7 * page)
        );
        // The side container's processes vanish: it has no new sample and
        // no error; once it is no longer running, it is forgotten.
        fake_proc(dir.path(), 1000 + 6 * ticks, &[(10, 1, ticks, 1)]);
        std::fs::remove_dir_all(dir.path().join("20")).unwrap();
        provider.housekeep(vec![pod(&[("app", 10), ("side", 20)])], at(1_700_000_220));
        assert_eq!(provider.summary().pods[0].containers.len(), 2);
        provider.housekeep(vec![pod(&[("app", 10)])], at(1_700_000_230));
        let names: Vec<_> = provider.summary().pods[0]
            .containers
            .iter()
            .map(|c| c.name.clone())
            .collect();
        assert_eq!(names, ["app"]);
    }
}
