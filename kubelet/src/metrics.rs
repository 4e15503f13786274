//! The kubelet's own metrics for `GET /metrics`, named as the kubelet
//! names them (pkg/kubelet/metrics, pkg/kubelet/prober): one registry,
//! which the process may add its own collectors to.

use prometheus::{
    CounterVec, Gauge, GaugeVec, Histogram, HistogramOpts, IntCounter, IntCounterVec, Opts,
    Registry,
};

use crate::probe::{ProbeKind, ProbeResult};

/// The kubelet's buckets of pod start durations, in seconds.
pub const POD_START_DURATION_BUCKETS: [f64; 25] = [
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0,
    300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];

/// Which kind of container started, as `kubelet_started_containers_total`
/// labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerType {
    Container,
    InitContainer,
}

/// How many containers are in each state, for `kubelet_running_containers`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContainerCounts {
    pub running: u64,
    pub exited: u64,
}

#[derive(Clone)]
pub struct KubeletMetrics {
    registry: Registry,
    running_pods: Gauge,
    running_containers: GaugeVec,
    pod_start_duration: Histogram,
    probes: IntCounterVec,
    started_pods: IntCounter,
    started_containers: CounterVec,
}

impl std::fmt::Debug for KubeletMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeletMetrics").finish_non_exhaustive()
    }
}

impl KubeletMetrics {
    /// The metrics of the kubelet of node `node_name`, in a new registry.
    pub fn new(node_name: &str) -> Result<KubeletMetrics, prometheus::Error> {
        let registry = Registry::new();
        let node_name_gauge = GaugeVec::new(
            Opts::new(
                "kubelet_node_name",
                "The node's name. The count is always 1.",
            ),
            &["node"],
        )?;
        node_name_gauge.with_label_values(&[node_name]).set(1.0);
        let running_pods = Gauge::new(
            "kubelet_running_pods",
            "Number of pods that have a running pod sandbox",
        )?;
        let running_containers = GaugeVec::new(
            Opts::new(
                "kubelet_running_containers",
                "Number of containers currently running",
            ),
            &["container_state"],
        )?;
        let pod_start_duration = Histogram::with_opts(
            HistogramOpts::new(
                "kubelet_pod_start_duration_seconds",
                "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
            )
            .buckets(POD_START_DURATION_BUCKETS.to_vec()),
        )?;
        let probes = IntCounterVec::new(
            Opts::new("prober_probe_total", "Cumulative number of a liveness, readiness or startup probe for a container by result."),
            &["probe_type", "result", "container", "pod", "namespace", "pod_uid"],
        )?;
        let started_pods = IntCounter::new(
            "kubelet_started_pods_total",
            "Cumulative number of pods started",
        )?;
        let started_containers = CounterVec::new(
            Opts::new(
                "kubelet_started_containers_total",
                "Cumulative number of containers started",
            ),
            &["container_type"],
        )?;
        registry.register(Box::new(node_name_gauge))?;
        registry.register(Box::new(running_pods.clone()))?;
        registry.register(Box::new(running_containers.clone()))?;
        registry.register(Box::new(pod_start_duration.clone()))?;
        registry.register(Box::new(probes.clone()))?;
        registry.register(Box::new(started_pods.clone()))?;
        registry.register(Box::new(started_containers.clone()))?;
        registry.register(Box::new(skiff_machinery::metrics::ProcessCollector::new()))?;
        Ok(KubeletMetrics {
            registry,
            running_pods,
            running_containers,
            pod_start_duration,
            probes,
            started_pods,
            started_containers,
        })
    }

    /// The registry (shared: what is registered in a clone is served).
    pub fn registry(&self) -> Registry {
        self.registry.clone()
    }

    /// A pod ran for the first time `seconds` after the kubelet saw it.
    pub fn pod_started_running(&self, seconds: f64) {
        self.pod_start_duration.observe(seconds.max(0.0));
    }

    /// A pod's sandbox (its network and volumes) was set up.
    pub fn pod_started(&self) {
        self.started_pods.inc();
    }

    pub fn container_started(&self, kind: ContainerType) {
        let label = match kind {
            ContainerType::Container => "container",
            ContainerType::InitContainer => "init_container",
        };
        self.started_containers.with_label_values(&[label]).inc();
    }

    /// One probe's result, before thresholds weigh it.
    pub fn probe_result(
        &self,
        kind: ProbeKind,
        result: &ProbeResult,
        container: &str,
        pod: &str,
        namespace: &str,
        pod_uid: &str,
    ) {
        let probe_type = match kind {
            ProbeKind::Liveness => "liveness",
            ProbeKind::Readiness => "readiness",
            ProbeKind::Startup => "startup",
        };
        let result = match result {
            ProbeResult::Success => "successful",
            ProbeResult::Failure(_) => "failed",
            ProbeResult::Unknown(_) => "unknown",
        };
        self.probes
            .with_label_values(&[probe_type, result, container, pod, namespace, pod_uid])
            .inc();
    }

    /// The pods with a running sandbox and their containers by state, now.
    pub fn set_running(&self, pods: u64, containers: ContainerCounts) {
        self.running_pods.set(pods as f64);
        self.running_containers
            .with_label_values(&["running"])
            .set(containers.running as f64);
        self.running_containers
            .with_label_values(&["exited"])
            .set(containers.exited as f64);
    }

    /// Everything in the registry, in the Prometheus text format.
    pub fn encode(&self) -> Result<String, prometheus::Error> {
        crate::stats::resource_metrics::encode(&self.registry.gather())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubelets_metrics_have_the_kubelets_names() {
        let metrics = KubeletMetrics::new("node-1").unwrap();
        metrics.pod_started();
        metrics.container_started(ContainerType::Container);
        metrics.container_started(ContainerType::InitContainer);
        metrics.container_started(ContainerType::Container);
        metrics.pod_started_running(1.5);
        metrics.probe_result(
            ProbeKind::Readiness,
            &ProbeResult::Success,
            "app",
            "web",
            "default",
            "u1",
        );
        metrics.probe_result(
            ProbeKind::Liveness,
            &ProbeResult::Failure("refused".into()),
            "app",
            "web",
            "default",
            "u1",
        );
        metrics.set_running(
            2,
            ContainerCounts {
                running: 3,
                exited: 1,
            },
        );
        let text = metrics.encode().unwrap();
        for line in [
            "kubelet_node_name{node=\"node-1\"} 1",
            "kubelet_running_pods 2",
            "kubelet_running_containers{container_state=\"running\"} 3",
            "kubelet_running_containers{container_state=\"exited\"} 1",
            "kubelet_started_pods_total 1",
            "kubelet_started_containers_total{container_type=\"container\"} 2",
            "kubelet_started_containers_total{container_type=\"init_container\"} 1",
            "# TYPE kubelet_pod_start_duration_seconds histogram",
            "kubelet_pod_start_duration_seconds_bucket{le=\"1\"} 0",
            "kubelet_pod_start_duration_seconds_bucket{le=\"2\"} 1",
            "kubelet_pod_start_duration_seconds_bucket{le=\"3600\"} 1",
            "kubelet_pod_start_duration_seconds_count 1",
            "prober_probe_total{container=\"app\",namespace=\"default\",pod=\"web\",pod_uid=\"u1\",probe_type=\"readiness\",result=\"successful\"} 1",
            "prober_probe_total{container=\"app\",namespace=\"default\",pod=\"web\",pod_uid=\"u1\",probe_type=\"liveness\",result=\"failed\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line:?} in:\n{text}");
        }
    }

    #[test]
    fn collectors_added_to_the_registry_are_served_too() {
        let metrics = KubeletMetrics::new("n").unwrap();
        let extra = IntCounter::new("process_test_total", "a process collector").unwrap();
        metrics
            .registry()
            .register(Box::new(extra.clone()))
            .unwrap();
        extra.inc();
        assert!(metrics.encode().unwrap().contains("process_test_total 1"));
    }
}
