//! Resource amounts as the scheduler adds them up: milli-CPU, bytes of
//! memory and ephemeral storage, a pod count, and extended resources
//! (`example.com/gpu`, `hugepages-2Mi`…) by name.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use skiff_machinery::quantity::Quantity;

/// What a container without a CPU request counts as when spreading load
/// (kube-scheduler's non-zero defaults): 0.1 CPU and 200 MiB.
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    /// On a node: how many pods it takes (`pods` in allocatable).
    pub allowed_pods: i64,
    /// Extended and hugepages resources, in their units.
    pub scalar: BTreeMap<String, i64>,
}

impl Resources {
    /// From a ResourceList (`requests`, `limits`, `allocatable`).
    pub fn from_list(list: &BTreeMap<String, ApiQuantity>) -> Resources {
        let mut out = Resources::default();
        for (name, quantity) in list {
            out.set(name, quantity_value(name, &quantity.0));
        }
        out
    }

    /// The amount of `name` (`cpu` in millis, others in units).
    pub fn get(&self, name: &str) -> i64 {
        match name {
            "cpu" => self.milli_cpu,
            "memory" => self.memory,
            "ephemeral-storage" => self.ephemeral_storage,
            "pods" => self.allowed_pods,
            other => self.scalar.get(other).copied().unwrap_or(0),
        }
    }

    pub fn set(&mut self, name: &str, value: i64) {
        match name {
            "cpu" => self.milli_cpu = value,
            "memory" => self.memory = value,
            "ephemeral-storage" => self.ephemeral_storage = value,
            "pods" => self.allowed_pods = value,
            other => {
                self.scalar.insert(other.to_string(), value);
            }
        }
    }

    pub fn add(&mut self, other: &Resources) {
        self.milli_cpu += other.milli_cpu;
        self.memory += other.memory;
        self.ephemeral_storage += other.ephemeral_storage;
        self.allowed_pods += other.allowed_pods;
        for (name, value) in &other.scalar {
            *self.scalar.entry(name.clone()).or_default() += value;
        }
    }

    pub fn sub(&mut self, other: &Resources) {
        self.milli_cpu -= other.milli_cpu;
        self.memory -= other.memory;
        self.ephemeral_storage -= other.ephemeral_storage;
        self.allowed_pods -= other.allowed_pods;
        for (name, value) in &other.scalar {
            *self.scalar.entry(name.clone()).or_default() -= value;
        }
    }

    /// Each amount the larger of the two.
    pub fn max_with(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        self.allowed_pods = self.allowed_pods.max(other.allowed_pods);
        for (name, value) in &other.scalar {
            let at = self.scalar.entry(name.clone()).or_default();
            *at = (*at).max(*value);
        }
    }
}

/// A quantity as the scheduler counts it: CPU in millicores, everything
/// else in whole units (rounded up, as Kubernetes' `Value()`).
pub fn quantity_value(name: &str, text: &str) -> i64 {
    let Some(quantity) = Quantity::parse(text) else {
        return 0;
    };
    let millis = quantity.milli;
    match name {
        "cpu" => millis.clamp(i64::MIN as i128, i64::MAX as i128) as i64,
        _ => {
            let units = millis.div_euclid(1000) + i128::from(millis.rem_euclid(1000) != 0);
            units.clamp(i64::MIN as i128, i64::MAX as i128) as i64
        }
    }
}

fn container_requests(container: &Container) -> Resources {
    container
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .map(Resources::from_list)
        .unwrap_or_default()
}

fn is_sidecar(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

/// What a pod asks of a node, as kube-scheduler computes it: the sum of its
/// containers and sidecars (restartable init containers), or more if one
/// init container (with the sidecars started before it) asks more, plus
/// the pod's overhead. `non_zero` counts a container with no CPU or
/// memory request as the defaults, for spreading.
pub fn pod_requests(pod: &Pod, non_zero: bool) -> Resources {
    let Some(spec) = pod.spec.as_ref() else {
        return Resources::default();
    };
    let requests = |c: &Container| {
        let mut r = container_requests(c);
        if non_zero {
            // Only requests left out get the defaults; an explicit 0 stays.
            let asked = c.resources.as_ref().and_then(|r| r.requests.as_ref());
            if !asked.is_some_and(|a| a.contains_key("cpu")) {
                r.milli_cpu = DEFAULT_MILLI_CPU_REQUEST;
            }
            if !asked.is_some_and(|a| a.contains_key("memory")) {
                r.memory = DEFAULT_MEMORY_REQUEST;
            }
        }
        r
    };
    let mut total = Resources::default();
    for container in &spec.containers {
        total.add(&requests(container));
    }
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for container in spec.init_containers.iter().flatten() {
        let r = requests(container);
        if is_sidecar(container) {
            sidecars.add(&r);
            init_peak.max_with(&sidecars);
        } else {
            let mut during = sidecars.clone();
            during.add(&r);
            init_peak.max_with(&during);
        }
    }
    total.add(&sidecars);
    total.max_with(&init_peak);
    if let Some(overhead) = spec.overhead.as_ref() {
        total.add(&Resources::from_list(overhead));
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    #[test]
    fn quantities_count_cpu_in_millis_and_the_rest_in_units() {
        assert_eq!(quantity_value("cpu", "250m"), 250);
        assert_eq!(quantity_value("cpu", "1.5"), 1500);
        assert_eq!(quantity_value("memory", "1Gi"), 1 << 30);
        assert_eq!(quantity_value("memory", "1.5k"), 1500);
        assert_eq!(quantity_value("memory", "100m"), 1, "rounded up");
        assert_eq!(quantity_value("example.com/gpu", "2"), 2);
        assert_eq!(quantity_value("memory", "nonsense"), 0);
    }

    #[test]
    fn init_containers_and_sidecars_count_as_kubernetes_counts_them() {
        let p = pod(json!({
            "initContainers": [
                {"name": "big-init", "image": "i", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}},
                {"name": "sidecar", "image": "i", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
                {"name": "late-init", "image": "i", "resources": {"requests": {"cpu": "1"}}},
            ],
            "containers": [
                {"name": "a", "image": "i", "resources": {"requests": {"cpu": "500m", "memory": "100Mi"}}},
                {"name": "b", "image": "i", "resources": {"requests": {"cpu": "250m", "example.com/gpu": "1"}}},
            ],
            "overhead": {"cpu": "10m"},
        }));
        let r = pod_requests(&p, false);
        // max(0.5+0.25+0.1 sidecar, 2 init, 0.1 sidecar + 1 late init) + overhead
        assert_eq!(r.milli_cpu, 2000 + 10);
        assert_eq!(r.memory, 1 << 30);
        assert_eq!(r.scalar["example.com/gpu"], 1);
        let non_zero = pod_requests(
            &pod(json!({"containers": [{"name": "a", "image": "i"}]})),
            true,
        );
        assert_eq!(
            (non_zero.milli_cpu, non_zero.memory),
            (DEFAULT_MILLI_CPU_REQUEST, DEFAULT_MEMORY_REQUEST)
        );
        let explicit_zero = pod_requests(
            &pod(json!({"containers": [{"name": "a", "image": "i",
                "resources": {"requests": {"cpu": "0"}}}]})),
            true,
        );
        assert_eq!(
            (explicit_zero.milli_cpu, explicit_zero.memory),
            (0, DEFAULT_MEMORY_REQUEST)
        );
    }
}
