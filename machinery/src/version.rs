//! The one Kubernetes version skiff reports, wherever it reports one: the
//! API's `/version` and OpenAPI `info`, the kubelet's `nodeInfo`, its
//! probes' User-Agent. Its major and minor are those of the API types
//! skiff is built with (k8s-openapi's `v1_NN` feature, read by build.rs),
//! so the two cannot drift apart.

/// `"1"`.
pub const MAJOR: &str = env!("SKIFF_KUBERNETES_MAJOR");
/// `"33"` for the `v1_33` types. The kubectl dispatcher picks the client
/// it runs by this.
pub const MINOR: &str = env!("SKIFF_KUBERNETES_MINOR");
/// `v1.33.0+skiff`: semver build metadata rather than a pre-release tag,
/// as k3s writes `+k3s1`, so that tools comparing versions (Helm's
/// `kubeVersion`, client version checks) see a release of that minor.
pub const GIT_VERSION: &str = concat!(
    "v",
    env!("SKIFF_KUBERNETES_MAJOR"),
    ".",
    env!("SKIFF_KUBERNETES_MINOR"),
    ".0+skiff"
);

/// The User-Agent of the kubelet's HTTP probes: `kube-probe/1.33`.
pub const PROBE_USER_AGENT: &str = concat!(
    "kube-probe/",
    env!("SKIFF_KUBERNETES_MAJOR"),
    ".",
    env!("SKIFF_KUBERNETES_MINOR")
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::vec_init_then_push)]
    fn the_version_is_that_of_the_types_served() {
        // k8s-openapi compiles exactly one of its version macros to its body.
        let mut built_for: Vec<&str> = Vec::new();
        k8s_openapi::k8s_if_1_33! { built_for.push("33"); }
        k8s_openapi::k8s_if_1_34! { built_for.push("34"); }
        k8s_openapi::k8s_if_1_35! { built_for.push("35"); }
        k8s_openapi::k8s_if_1_36! { built_for.push("36"); }
        k8s_openapi::k8s_if_1_37! { built_for.push("37"); }
        assert_eq!(built_for, [MINOR]);
        assert_eq!(MAJOR, "1");
        assert_eq!(GIT_VERSION, format!("v{MAJOR}.{MINOR}.0+skiff"));
        assert_eq!(PROBE_USER_AGENT, format!("kube-probe/{MAJOR}.{MINOR}"));
    }
}
