//! The workloads, after kube-scheduler's scheduler_perf: what each pod
//! asks of the scheduler, and the throughput kube-scheduler's CI publishes
//! as its floor for it at 5 000 nodes (a published figure, not a run here).

/// Nodes at which kube-scheduler's published floors are measured.
pub const PUBLISHED_NODES: usize = 5000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// Pods asking only for resources.
    Basic,
    /// Required pod anti-affinity to the pod's own group on
    /// kubernetes.io/hostname.
    AntiAffinity,
    /// maxSkew 1 on topology.kubernetes.io/zone, DoNotSchedule.
    TopologySpread,
    /// Required nodeAffinity In on a label half the nodes carry.
    NodeAffinity,
    /// High-priority pods that must each evict a low-priority one.
    Preemption,
}

impl Workload {
    pub const ALL: [Workload; 5] = [
        Workload::Basic,
        Workload::AntiAffinity,
        Workload::TopologySpread,
        Workload::NodeAffinity,
        Workload::Preemption,
    ];

    /// The name on the command line and in the pods' `workload` label.
    pub fn id(self) -> &'static str {
        match self {
            Workload::Basic => "basic",
            Workload::AntiAffinity => "anti-affinity",
            Workload::TopologySpread => "topology-spread",
            Workload::NodeAffinity => "node-affinity",
            Workload::Preemption => "preemption",
        }
    }

    /// The table's name for it.
    pub fn describe(self) -> &'static str {
        match self {
            Workload::Basic => "basic pods",
            Workload::AntiAffinity => "required pod anti-affinity",
            Workload::TopologySpread => "hard topology spread",
            Workload::NodeAffinity => "required node affinity",
            Workload::Preemption => "preemption (high priority)",
        }
    }

    /// kube-scheduler's floor in pods/s (the average of its 1-second
    /// throughput samples) on its CI at 5 000 nodes, where one is published.
    pub fn published_floor(self, nodes: usize) -> Option<f64> {
        if nodes != PUBLISHED_NODES {
            return None;
        }
        match self {
            Workload::Basic => Some(680.0),
            Workload::TopologySpread => Some(460.0),
            Workload::NodeAffinity => Some(220.0),
            Workload::AntiAffinity => Some(60.0),
            Workload::Preemption => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_are_published_for_5000_nodes_only() {
        assert_eq!(Workload::Basic.published_floor(5000), Some(680.0));
        assert_eq!(Workload::Basic.published_floor(500), None);
        assert_eq!(Workload::Preemption.published_floor(5000), None);
    }
}
