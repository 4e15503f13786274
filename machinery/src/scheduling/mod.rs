//! What Kubernetes keeps in `k8s.io/component-helpers/scheduling/corev1`:
//! the matching of node affinity and of taints that the scheduler, the
//! DaemonSet controller and taint eviction share.

pub mod node_affinity;
pub mod taints;
