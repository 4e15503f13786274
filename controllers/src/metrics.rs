//! The controller-manager's Prometheus registry: the work queues of its
//! controllers (client-go's `workqueue_*`, by kube-controller-manager's
//! queue names), `leader_election_master_status` and the process's, as
//! kube-controller-manager's secure port serves them.

use prometheus::{IntGauge, IntGaugeVec, Opts, Registry};
use skiff_machinery::metrics::{ProcessCollector, Workqueues};

/// The name kube-controller-manager's lease gives
/// `leader_election_master_status`.
const LEASE_NAME: &str = "kube-controller-manager";

/// The metrics of one controller-manager process.
#[derive(Clone)]
pub struct ManagerMetrics {
    registry: Registry,
    workqueues: Workqueues,
    leading: IntGauge,
}

impl Default for ManagerMetrics {
    fn default() -> Self {
        ManagerMetrics::new()
    }
}

impl ManagerMetrics {
    pub fn new() -> ManagerMetrics {
        let workqueues = Workqueues::new();
        let leading = IntGaugeVec::new(
            Opts::new(
                "leader_election_master_status",
                "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
            ),
            &["name"],
        )
        .expect("a valid gauge");
        let registry = Registry::new();
        for collector in [
            Box::new(workqueues.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(leading.clone()),
            Box::new(ProcessCollector::new()),
        ] {
            registry
                .register(collector)
                .expect("the controller-manager's metrics have distinct names");
        }
        ManagerMetrics {
            registry,
            workqueues,
            leading: leading.with_label_values(&[LEASE_NAME]),
        }
    }

    /// The registry to serve.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The controllers' work queues.
    pub fn workqueues(&self) -> &Workqueues {
        &self.workqueues
    }

    /// Whether this process holds the controller-manager's lease.
    pub fn set_leading(&self, leading: bool) {
        self.leading.set(i64::from(leading));
    }

    /// Every metric, in the text exposition format.
    pub fn render(&self) -> String {
        skiff_machinery::metrics::encode(&self.registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_holds_the_queues_the_lease_and_the_process() {
        let metrics = ManagerMetrics::new();
        let queue = metrics.workqueues().queue("replicaset");
        queue.add("default/web");
        metrics.set_leading(true);
        let text = metrics.render();
        assert!(
            text.contains("workqueue_depth{name=\"replicaset\"} 1"),
            "{text}"
        );
        assert!(text.contains("workqueue_adds_total{name=\"replicaset\"} 1"));
        assert!(text.contains("leader_election_master_status{name=\"kube-controller-manager\"} 1"));
        assert!(text.contains("\nprocess_cpu_seconds_total "));
        if let Some(verdict) = skiff_machinery::metrics::promtool_check(&text) {
            verdict.unwrap();
        }
    }
}
