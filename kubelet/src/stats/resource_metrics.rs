//! `GET /metrics/resource`: the Summary's CPU and memory as the kubelet's
//! resource metrics collector writes them in Prometheus text, each sample
//! with its own timestamp (ms) so scrapers compute rates over the
//! kubelet's own sampling interval.

use prometheus::proto::{Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType};
use prometheus::{Encoder, TextEncoder};

use super::summary::{CpuStats, MemoryStats, Summary};

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4";

struct Family {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
    metrics: Vec<Metric>,
}

impl Family {
    fn new(name: &'static str, help: &'static str, kind: MetricType) -> Family {
        Family {
            name,
            help,
            kind,
            metrics: Vec::new(),
        }
    }

    fn add(&mut self, labels: &[(&str, &str)], value: f64, at: Option<&jiff::Timestamp>) {
        let mut metric = Metric::default();
        metric.set_label(
            labels
                .iter()
                .map(|(name, value)| {
                    let mut pair = LabelPair::default();
                    pair.set_name(name.to_string());
                    pair.set_value(value.to_string());
                    pair
                })
                .collect(),
        );
        match self.kind {
            MetricType::COUNTER => {
                let mut counter = Counter::default();
                counter.set_value(value);
                metric.set_counter(counter);
            }
            _ => {
                let mut gauge = Gauge::default();
                gauge.set_value(value);
                metric.set_gauge(gauge);
            }
        }
        if let Some(at) = at {
            metric.set_timestamp_ms(at.as_millisecond());
        }
        self.metrics.push(metric);
    }

    fn cpu(&mut self, labels: &[(&str, &str)], cpu: Option<&CpuStats>) {
        if let Some((cpu, total)) = cpu.and_then(|c| Some((c, c.usage_core_nano_seconds?))) {
            self.add(labels, total as f64 / 1e9, Some(&cpu.time.0));
        }
    }

    fn memory(&mut self, labels: &[(&str, &str)], memory: Option<&MemoryStats>) {
        if let Some((memory, bytes)) = memory.and_then(|m| Some((m, m.working_set_bytes?))) {
            self.add(labels, bytes as f64, Some(&memory.time.0));
        }
    }

    fn into_proto(self) -> MetricFamily {
        let mut family = MetricFamily::default();
        family.set_name(self.name.to_string());
        family.set_help(self.help.to_string());
        family.set_field_type(self.kind);
        family.set_metric(self.metrics);
        family
    }
}

/// The resource metrics of `summary`; `None` (no summary) gives only
/// scrape_error 1, as the kubelet does when it cannot get one.
pub fn families(summary: Option<&Summary>) -> Vec<MetricFamily> {
    use MetricType::{COUNTER, GAUGE};
    let mut node_cpu = Family::new(
        "node_cpu_usage_seconds_total",
        "Cumulative cpu time consumed by the node in core-seconds",
        COUNTER,
    );
    let mut node_memory = Family::new(
        "node_memory_working_set_bytes",
        "Current working set of the node in bytes",
        GAUGE,
    );
    let mut container_start = Family::new(
        "container_start_time_seconds",
        "Start time of the container since unix epoch in seconds",
        GAUGE,
    );
    let mut container_cpu = Family::new(
        "container_cpu_usage_seconds_total",
        "Cumulative cpu time consumed by the container in core-seconds",
        COUNTER,
    );
    let mut container_memory = Family::new(
        "container_memory_working_set_bytes",
        "Current working set of the container in bytes",
        GAUGE,
    );
    let mut pod_cpu = Family::new(
        "pod_cpu_usage_seconds_total",
        "Cumulative cpu time consumed by the pod in core-seconds",
        COUNTER,
    );
    let mut pod_memory = Family::new(
        "pod_memory_working_set_bytes",
        "Current working set of the pod in bytes",
        GAUGE,
    );
    let help = "1 if there was an error while getting container metrics, 0 otherwise";
    let mut scrape_error = Family::new("scrape_error", help, GAUGE);
    let mut resource_scrape_error = Family::new("resource_scrape_error", help, GAUGE);
    if let Some(summary) = summary {
        node_cpu.cpu(&[], summary.node.cpu.as_ref());
        node_memory.memory(&[], summary.node.memory.as_ref());
        for pod in &summary.pods {
            let (name, namespace) = (pod.pod_ref.name.as_str(), pod.pod_ref.namespace.as_str());
            for container in &pod.containers {
                let labels = [
                    ("container", container.name.as_str()),
                    ("pod", name),
                    ("namespace", namespace),
                ];
                let started = container.start_time.0;
                if started.as_second() > 0 {
                    container_start.add(&labels, started.as_nanosecond() as f64 / 1e9, None);
                }
                container_cpu.cpu(&labels, container.cpu.as_ref());
                container_memory.memory(&labels, container.memory.as_ref());
            }
            let labels = [("pod", name), ("namespace", namespace)];
            pod_cpu.cpu(&labels, pod.cpu.as_ref());
            pod_memory.memory(&labels, pod.memory.as_ref());
        }
    }
    let failed = if summary.is_some() { 0.0 } else { 1.0 };
    scrape_error.add(&[], failed, None);
    resource_scrape_error.add(&[], failed, None);
    [
        container_cpu,
        container_memory,
        container_start,
        node_cpu,
        node_memory,
        pod_cpu,
        pod_memory,
        resource_scrape_error,
        scrape_error,
    ]
    .into_iter()
    // The encoder refuses a family without metrics.
    .filter(|f| !f.metrics.is_empty())
    .map(Family::into_proto)
    .collect()
}

/// `families` in the Prometheus text format.
pub fn encode(families: &[MetricFamily]) -> Result<String, prometheus::Error> {
    let mut buffer = Vec::new();
    TextEncoder::new().encode(families, &mut buffer)?;
    String::from_utf8(buffer).map_err(|e| prometheus::Error::Msg(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::super::summary::{ContainerStats, NodeStats, PodReference, PodStats};
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn time(ms: i64) -> Time {
        Time(jiff::Timestamp::from_millisecond(ms).unwrap())
    }

    fn cpu(ms: i64, nanos: u64) -> Option<CpuStats> {
        Some(CpuStats {
            time: time(ms),
            usage_nano_cores: Some(1),
            usage_core_nano_seconds: Some(nanos),
        })
    }

    fn memory(ms: i64, bytes: u64) -> Option<MemoryStats> {
        Some(MemoryStats {
            time: time(ms),
            available_bytes: None,
            usage_bytes: None,
            working_set_bytes: Some(bytes),
            rss_bytes: None,
        })
    }

    #[test]
    fn resource_metrics_carry_each_samples_timestamp() {
        let summary = Summary {
            node: NodeStats {
                node_name: "n1".into(),
                start_time: time(0),
                cpu: cpu(1_700_000_010_000, 12_500_000_000),
                memory: memory(1_700_000_010_000, 1_048_576),
            },
            pods: vec![PodStats {
                pod_ref: PodReference {
                    name: "web".into(),
                    namespace: "default".into(),
                    uid: "u1".into(),
                },
                start_time: time(1_700_000_000_000),
                containers: vec![ContainerStats {
                    name: "app".into(),
                    start_time: time(1_700_000_001_500),
                    cpu: cpu(1_700_000_009_000, 2_000_000_000),
                    memory: memory(1_700_000_009_000, 4096),
                }],
                cpu: cpu(1_700_000_009_000, 2_000_000_000),
                memory: memory(1_700_000_009_000, 4096),
            }],
        };
        let text = encode(&families(Some(&summary))).unwrap();
        for line in [
            "# HELP node_cpu_usage_seconds_total Cumulative cpu time consumed by the node in core-seconds",
            "# TYPE node_cpu_usage_seconds_total counter",
            "node_cpu_usage_seconds_total 12.5 1700000010000",
            "# TYPE node_memory_working_set_bytes gauge",
            "node_memory_working_set_bytes 1048576 1700000010000",
            "container_cpu_usage_seconds_total{container=\"app\",pod=\"web\",namespace=\"default\"} 2 1700000009000",
            "container_memory_working_set_bytes{container=\"app\",pod=\"web\",namespace=\"default\"} 4096 1700000009000",
            "container_start_time_seconds{container=\"app\",pod=\"web\",namespace=\"default\"} 1700000001.5",
            "pod_cpu_usage_seconds_total{pod=\"web\",namespace=\"default\"} 2 1700000009000",
            "pod_memory_working_set_bytes{pod=\"web\",namespace=\"default\"} 4096 1700000009000",
            "scrape_error 0",
            "resource_scrape_error 0",
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line:?} in:\n{text}");
        }
    }

    #[test]
    fn without_a_summary_only_the_scrape_error_is_written() {
        let text = encode(&families(None)).unwrap();
        assert!(text.lines().any(|l| l == "scrape_error 1"), "{text}");
        assert!(!text.contains("node_cpu"), "{text}");
    }
}
