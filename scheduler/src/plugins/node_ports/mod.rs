//! NodePorts: a pod's host ports must be free on the node (same protocol
//! and port, on the same IP or a wildcard one, clash).

use std::sync::Arc;

use serde_json::Value;

use crate::framework::{
    CycleState, HostPort, NodeInfo, Plugin, PodInfo, Point, PreFilterResult, Snapshot, Status,
};

pub const NAME: &str = "NodePorts";

pub const ERR_REASON: &str = "node(s) didn't have free ports for the requested pod ports";

pub struct NodePorts;

pub fn new(args: &Value) -> Result<Arc<dyn Plugin>, String> {
    super::no_args(NAME, args)?;
    Ok(Arc::new(NodePorts))
}

/// Whether any of `wanted` clashes with a port already used on `node`.
pub fn conflicts(wanted: &[HostPort], node: &NodeInfo) -> bool {
    wanted
        .iter()
        .any(|want| node.used_ports.iter().any(|used| used.conflicts(want)))
}

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        NAME
    }

    fn points(&self) -> &'static [Point] {
        &[Point::PreFilter, Point::Filter]
    }

    /// A pod without host ports fits everywhere: skip Filter.
    fn pre_filter(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &Snapshot,
    ) -> (PreFilterResult, Status) {
        match pod.host_ports.is_empty() {
            true => (PreFilterResult::default(), Status::skip()),
            false => (PreFilterResult::default(), Status::success()),
        }
    }

    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match conflicts(&pod.host_ports, node) {
            true => Status::unschedulable(ERR_REASON),
            false => Status::success(),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;

    use super::*;
    use crate::framework::Code;

    /// A pod with these container ports (`[hostIP, protocol, hostPort]`,
    /// empty strings left out).
    fn pod(name: &str, ports: &[(&str, &str, i32)]) -> PodInfo {
        let ports: Vec<Value> = ports
            .iter()
            .map(|(ip, protocol, port)| {
                let mut p = json!({"containerPort": 8080, "hostPort": port});
                if !ip.is_empty() {
                    p["hostIP"] = json!(ip);
                }
                if !protocol.is_empty() {
                    p["protocol"] = json!(protocol);
                }
                p
            })
            .collect();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "i", "ports": ports}]},
        }))
        .unwrap();
        PodInfo::new(Arc::new(pod))
    }

    fn node(existing: &[(&str, &str, i32)]) -> NodeInfo {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": "n"}})).unwrap();
        let mut info = NodeInfo::new(Arc::new(node));
        info.add_pod(Arc::new(pod("existing", existing)));
        info
    }

    #[test]
    fn host_ports_must_be_free() {
        type Ports = Vec<(&'static str, &'static str, i32)>;
        let cases: Vec<(&str, Ports, Ports, bool)> = vec![
            ("nothing used", vec![("", "", 8080)], vec![], true),
            (
                "other port",
                vec![("", "", 8080)],
                vec![("", "", 9090)],
                true,
            ),
            (
                "same port",
                vec![("", "", 8080)],
                vec![("", "", 8080)],
                false,
            ),
            (
                "TCP is the default protocol",
                vec![("", "TCP", 8080)],
                vec![("", "", 8080)],
                false,
            ),
            (
                "other protocol",
                vec![("", "UDP", 8080)],
                vec![("", "TCP", 8080)],
                true,
            ),
            (
                "other IPs",
                vec![("10.0.0.1", "", 8080)],
                vec![("10.0.0.2", "", 8080)],
                true,
            ),
            (
                "same IP",
                vec![("10.0.0.1", "", 8080)],
                vec![("10.0.0.1", "", 8080)],
                false,
            ),
            (
                "wanted on every IP",
                vec![("0.0.0.0", "", 8080)],
                vec![("10.0.0.2", "", 8080)],
                false,
            ),
            (
                "used on every IP",
                vec![("10.0.0.1", "", 8080)],
                vec![("", "", 8080)],
                false,
            ),
            (
                "one of several clashes",
                vec![("", "", 80), ("", "UDP", 53)],
                vec![("", "UDP", 53)],
                false,
            ),
        ];
        for (name, wanted, used, fits) in cases {
            let status = NodePorts.filter(&CycleState::default(), &pod("p", &wanted), &node(&used));
            match fits {
                true => assert!(status.is_success(), "{name}"),
                false => {
                    assert_eq!(status.code, Code::Unschedulable, "{name}");
                    assert_eq!(status.reasons[..], vec![ERR_REASON], "{name}");
                }
            }
        }
    }

    #[test]
    fn pods_without_host_ports_skip_the_filter() {
        let mut state = CycleState::default();
        let (_, status) = NodePorts.pre_filter(&mut state, &pod("p", &[]), &Snapshot::default());
        assert_eq!(status.code, Code::Skip);
        let (_, status) =
            NodePorts.pre_filter(&mut state, &pod("p", &[("", "", 80)]), &Snapshot::default());
        assert!(status.is_success());
    }
}
