//! The Node's status conditions (Ready, MemoryPressure, DiskPressure,
//! PIDPressure) from a host reading and the hard eviction thresholds, with
//! transition times kept across heartbeats while a status holds.

use k8s_openapi::api::core::v1::NodeCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::config::EvictionThresholds;
use super::host::HostStats;

/// Whether the node is under each pressure, and the figures behind it:
/// what the eviction manager acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pressure {
    pub memory: bool,
    pub disk: bool,
    pub pid: bool,
    pub memory_available_bytes: u64,
    pub disk_available_bytes: u64,
    pub inodes_free: u64,
    pub pids_available: u64,
    /// What percentage thresholds are shares of.
    pub memory_total_bytes: u64,
    pub disk_total_bytes: u64,
}

impl Pressure {
    /// Each signal against its hard threshold: under pressure when what is
    /// available falls below it.
    pub fn observe(stats: &HostStats, thresholds: &EvictionThresholds) -> Pressure {
        let below = |threshold: Option<super::config::Threshold>, available: u64, total: u64| {
            threshold.is_some_and(|t| available < t.amount_of(total))
        };
        let pids_available = stats.pid_max.saturating_sub(stats.pids_in_use);
        Pressure {
            memory: below(
                thresholds.memory_available,
                stats.memory_available_bytes,
                stats.memory_total_bytes,
            ),
            disk: below(
                thresholds.nodefs_available,
                stats.disk_available_bytes,
                stats.disk_total_bytes,
            ) || below(
                thresholds.nodefs_inodes_free,
                stats.inodes_free,
                stats.inodes_total,
            ),
            pid: below(thresholds.pid_available, pids_available, stats.pid_max),
            memory_available_bytes: stats.memory_available_bytes,
            disk_available_bytes: stats.disk_available_bytes,
            inodes_free: stats.inodes_free,
            pids_available,
            memory_total_bytes: stats.memory_total_bytes,
            disk_total_bytes: stats.disk_total_bytes,
        }
    }

    /// Whether a pressure condition differs (the figures alone do not
    /// count): a status update is due at once.
    pub fn conditions_differ(&self, other: &Pressure) -> bool {
        (self.memory, self.disk, self.pid) != (other.memory, other.disk, other.pid)
    }
}

/// One condition as this kubelet computes it.
struct Observed {
    type_: &'static str,
    status: bool,
    reason: &'static str,
    message: &'static str,
}

fn observed(pressure: &Pressure) -> [Observed; 4] {
    let pick = |on: bool, yes: (&'static str, &'static str), no: (&'static str, &'static str)| {
        if on {
            yes
        } else {
            no
        }
    };
    let memory = pick(
        pressure.memory,
        (
            "KubeletHasInsufficientMemory",
            "kubelet has insufficient memory available",
        ),
        (
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
    );
    let disk = pick(
        pressure.disk,
        ("KubeletHasDiskPressure", "kubelet has disk pressure"),
        ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    );
    let pid = pick(
        pressure.pid,
        (
            "KubeletHasInsufficientPID",
            "kubelet has insufficient PID available",
        ),
        (
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
    );
    [
        ("MemoryPressure", pressure.memory, memory),
        ("DiskPressure", pressure.disk, disk),
        ("PIDPressure", pressure.pid, pid),
        (
            "Ready",
            true,
            ("KubeletReady", "kubelet is posting ready status"),
        ),
    ]
    .map(|(type_, status, (reason, message))| Observed {
        type_,
        status,
        reason,
        message,
    })
}

/// The four conditions at `now`: heartbeat now; the transition time kept
/// from `previous` when the status is unchanged, else now.
pub fn node_conditions(
    previous: &[NodeCondition],
    pressure: &Pressure,
    now: Timestamp,
) -> Vec<NodeCondition> {
    observed(pressure)
        .into_iter()
        .map(|o| {
            let status = if o.status { "True" } else { "False" };
            let transition = previous
                .iter()
                .find(|c| c.type_ == o.type_ && c.status == status)
                .and_then(|c| c.last_transition_time.clone())
                .unwrap_or(Time(now));
            NodeCondition {
                type_: o.type_.to_string(),
                status: status.to_string(),
                reason: Some(o.reason.to_string()),
                message: Some(o.message.to_string()),
                last_heartbeat_time: Some(Time(now)),
                last_transition_time: Some(transition),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats() -> HostStats {
        HostStats {
            memory_total_bytes: 16 << 30,
            memory_available_bytes: 8 << 30,
            disk_total_bytes: 100 << 30,
            disk_available_bytes: 50 << 30,
            inodes_total: 1_000_000,
            inodes_free: 900_000,
            pid_max: 32768,
            pids_in_use: 500,
        }
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).unwrap()
    }

    fn find<'a>(conditions: &'a [NodeCondition], type_: &str) -> &'a NodeCondition {
        conditions.iter().find(|c| c.type_ == type_).unwrap()
    }

    #[test]
    fn each_signal_below_its_threshold_is_pressure() {
        let thresholds = EvictionThresholds::default();
        let calm = Pressure::observe(&stats(), &thresholds);
        assert!(!calm.memory && !calm.disk && !calm.pid);
        assert_eq!(calm.pids_available, 32768 - 500);
        let mut low = stats();
        low.memory_available_bytes = 50 << 20;
        low.inodes_free = 10;
        low.pids_in_use = 32700;
        let tight = Pressure::observe(&low, &thresholds);
        assert!(tight.memory && tight.disk && tight.pid);
        assert!(tight.conditions_differ(&calm));
        let mut figures_only = calm;
        figures_only.memory_available_bytes += 1;
        assert!(!figures_only.conditions_differ(&calm));
        assert!(!Pressure::observe(&low, &EvictionThresholds::none()).memory);
    }

    #[test]
    fn transition_time_is_kept_while_a_status_holds() {
        let calm = Pressure::observe(&stats(), &EvictionThresholds::default());
        let first = node_conditions(&[], &calm, at(0));
        assert_eq!(first.len(), 4);
        let ready = find(&first, "Ready");
        assert_eq!(ready.status, "True");
        assert_eq!(ready.reason.as_deref(), Some("KubeletReady"));
        assert_eq!(
            ready.message.as_deref(),
            Some("kubelet is posting ready status")
        );
        assert_eq!(
            find(&first, "MemoryPressure").reason.as_deref(),
            Some("KubeletHasSufficientMemory")
        );

        let second = node_conditions(&first, &calm, at(10));
        let memory = find(&second, "MemoryPressure");
        assert_eq!(memory.last_heartbeat_time, Some(Time(at(10))));
        assert_eq!(memory.last_transition_time, Some(Time(at(0))));

        let pressed = Pressure {
            memory: true,
            ..calm
        };
        let third = node_conditions(&second, &pressed, at(20));
        let memory = find(&third, "MemoryPressure");
        assert_eq!(memory.status, "True");
        assert_eq!(
            memory.reason.as_deref(),
            Some("KubeletHasInsufficientMemory")
        );
        assert_eq!(memory.last_transition_time, Some(Time(at(20))));
        assert_eq!(
            find(&third, "DiskPressure").last_transition_time,
            Some(Time(at(0)))
        );
        assert_eq!(
            find(&third, "Ready").last_transition_time,
            Some(Time(at(0)))
        );
    }
}
