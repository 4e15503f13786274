//! Which pods the kubelet evicts first under memory or disk pressure, the
//! facts that order reads (QoS class, process-group and directory usage)
//! and the Evicted status. Not for watching thresholds or deleting pods.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod};
use skiff_machinery::quantity::Quantity;

use crate::env::container_request;

/// The resource a node is short of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvictionResource {
    Memory,
    EphemeralStorage,
}

impl EvictionResource {
    /// The resource name as pods request it.
    pub fn name(self) -> &'static str {
        match self {
            EvictionResource::Memory => "memory",
            EvictionResource::EphemeralStorage => "ephemeral-storage",
        }
    }
}

/// A running pod and what it uses now.
#[derive(Debug, Clone, Copy)]
pub struct PodUsage<'a> {
    pub pod: &'a Pod,
    pub memory_usage_bytes: u64,
    pub disk_usage_bytes: u64,
}

/// What a directory walk found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirectoryUsage {
    pub bytes: u64,
    pub entries: u64,
    /// False when the walk stopped at its entry limit (bytes is then a floor).
    pub complete: bool,
}

/// Indices of `pods`, first to evict first, as Kubernetes ranks them: pods
/// using more than they request (BestEffort always does), then lower
/// priority, then larger usage above the request. Requests that do not
/// parse count as zero.
pub fn rank_for_eviction(pods: &[PodUsage], resource: EvictionResource) -> Vec<usize> {
    let keys: Vec<(bool, i32, i128)> = pods
        .iter()
        .map(|usage| {
            let used = i128::from(match resource {
                EvictionResource::Memory => usage.memory_usage_bytes,
                EvictionResource::EphemeralStorage => usage.disk_usage_bytes,
            });
            let above_request = used - pod_request_bytes(usage.pod, resource.name());
            let priority = usage
                .pod
                .spec
                .as_ref()
                .and_then(|s| s.priority)
                .unwrap_or(0);
            (above_request > 0, priority, above_request)
        })
        .collect();
    let mut order: Vec<usize> = (0..pods.len()).collect();
    order.sort_by(|&a, &b| {
        let (exceeds_a, priority_a, above_a) = keys[a];
        let (exceeds_b, priority_b, above_b) = keys[b];
        exceeds_b
            .cmp(&exceeds_a)
            .then(priority_a.cmp(&priority_b))
            .then(above_b.cmp(&above_a))
    });
    order
}

/// The pod's QoS class: `Guaranteed` when every container has cpu and
/// memory limits and the pod's requests equal its limits, `BestEffort`
/// when nothing requests or limits cpu or memory, else `Burstable`.
/// Unset requests default to the limits, as the API server does.
pub fn qos_class(pod: &Pod) -> &'static str {
    let containers = all_containers(pod);
    let mut any_set = false;
    let mut guaranteed = !containers.is_empty();
    for resource in ["cpu", "memory"] {
        let (mut requests, mut limits) = (0i128, 0i128);
        for container in &containers {
            let limit = container_limit(container, resource);
            let request = container_request(container, resource).map_or(0, |q| q.milli.max(0));
            any_set |= limit > 0 || request > 0;
            guaranteed &= limit > 0;
            requests += request;
            limits += limit;
        }
        guaranteed &= requests == limits;
    }
    match (any_set, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

/// The reason and message of a pod evicted for `resource`, in the
/// kubelet's words; `container_usage` is (container name, bytes used), and
/// containers using more than they request are named.
pub fn eviction_status(
    resource: EvictionResource,
    threshold: Quantity,
    available_bytes: u64,
    pod: &Pod,
    container_usage: &[(String, u64)],
) -> (&'static str, String) {
    let name = resource.name();
    let mut message = format!(
        "The node was low on resource: {name}. Threshold quantity: {threshold}, available: {}. ",
        format_bytes(available_bytes)
    );
    let containers = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or(&[]);
    for (container_name, used) in container_usage {
        let Some(container) = containers.iter().find(|c| &c.name == container_name) else {
            continue;
        };
        let request = container_request(container, name).unwrap_or_default();
        if i128::from(*used) * 1000 > request.milli {
            message.push_str(&format!(
                "Container {container_name} was using {}, request is {request}, has larger consumption of {name}. ",
                format_bytes(*used)
            ));
        }
    }
    ("Evicted", message)
}

/// The resident memory of every process in process group `pgid` (a
/// container's shim starts each container as a group), or None when the
/// group has no process left.
pub fn process_memory_bytes(pgid: u32) -> Option<u64> {
    group_memory_bytes(Path::new("/proc"), pgid, page_size())
}

/// The bytes of regular files under `path` (links are not followed), walking
/// at most `max_entries` entries.
pub fn directory_usage(path: &Path, max_entries: u64) -> DirectoryUsage {
    let mut usage = DirectoryUsage {
        complete: true,
        ..DirectoryUsage::default()
    };
    let mut pending: Vec<PathBuf> = vec![path.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if usage.entries >= max_entries {
                usage.complete = false;
                return usage;
            }
            usage.entries += 1;
            let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
                continue;
            };
            if meta.is_dir() {
                pending.push(entry.path());
            } else if meta.is_file() {
                usage.bytes = usage.bytes.saturating_add(meta.len());
            }
        }
    }
    usage
}

/// Sum of pod-level requests: app containers added, init containers (which
/// run one at a time) as a floor, plus the pod's overhead.
fn pod_request_bytes(pod: &Pod, resource: &str) -> i128 {
    let whole =
        |c: &Container| container_request(c, resource).map_or(0, |q| (q.milli + 999) / 1000);
    let Some(spec) = pod.spec.as_ref() else {
        return 0;
    };
    let app: i128 = spec.containers.iter().map(whole).sum();
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(whole)
        .max()
        .unwrap_or(0);
    let overhead = spec.overhead.as_ref().and_then(|o| o.get(resource));
    let overhead = overhead
        .and_then(|q| Quantity::parse(&q.0))
        .map_or(0, |q| q.milli / 1000);
    app.max(init) + overhead
}

fn container_limit(container: &Container, resource: &str) -> i128 {
    let limits = container.resources.as_ref().and_then(|r| r.limits.as_ref());
    let limit = limits
        .and_then(|l| l.get(resource))
        .and_then(|q| Quantity::parse(&q.0));
    limit.map_or(0, |q| q.milli.max(0))
}

fn all_containers(pod: &Pod) -> Vec<&Container> {
    crate::env::all_containers(pod).collect()
}

/// Bytes as Kubernetes prints a binary quantity: `40Mi` when exact, else
/// the plain number.
fn format_bytes(bytes: u64) -> String {
    const SUFFIXES: [(&str, u32); 6] = [
        ("Ei", 60),
        ("Pi", 50),
        ("Ti", 40),
        ("Gi", 30),
        ("Mi", 20),
        ("Ki", 10),
    ];
    if bytes == 0 {
        return "0".to_string();
    }
    SUFFIXES
        .iter()
        .find(|(_, shift)| bytes.trailing_zeros() >= *shift)
        .map(|(suffix, shift)| format!("{}{suffix}", bytes >> shift))
        .unwrap_or_else(|| bytes.to_string())
}

fn page_size() -> u64 {
    // SAFETY: sysconf only reads a configuration value.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|s| *s > 0).unwrap_or(4096)
}

fn group_memory_bytes(proc_dir: &Path, pgid: u32, page_size: u64) -> Option<u64> {
    let mut found = false;
    let mut pages = 0u64;
    for entry in std::fs::read_dir(proc_dir).ok()?.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some((group, rss)) = parse_stat(&stat) {
            if group == pgid {
                found = true;
                pages = pages.saturating_add(rss);
            }
        }
    }
    found.then(|| pages.saturating_mul(page_size))
}

/// (pgrp, rss pages) from `/proc/<pid>/stat`; the command name may hold
/// spaces and parentheses, so fields are counted after the last `)`.
fn parse_stat(stat: &str) -> Option<(u32, u64)> {
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    // fields[0] is field 3 (state): pgrp is field 5, rss field 24.
    let group = fields.get(2)?.parse().ok()?;
    let rss = fields.get(21)?.parse().ok()?;
    Some((group, rss))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(priority: i32, containers: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"priority": priority, "containers": containers},
        }))
        .expect("a pod")
    }

    fn with_memory(priority: i32, request: Option<&str>) -> Pod {
        let resources = match request {
            Some(r) => json!({"requests": {"memory": r}}),
            None => json!({}),
        };
        pod(priority, json!([{"name": "app", "resources": resources}]))
    }

    const MI: u64 = 1 << 20;

    #[test]
    fn memory_ranking_follows_kubernetes_order() {
        let pods = [
            with_memory(0, Some("100Mi")),   // 0: under its request
            with_memory(0, None),            // 1: BestEffort, small
            with_memory(1000, Some("10Mi")), // 2: over, high priority
            with_memory(0, Some("10Mi")),    // 3: over by 40Mi
            with_memory(0, Some("10Mi")),    // 4: over by 90Mi
            with_memory(-5, Some("100Mi")),  // 5: under, low priority
        ];
        let used = [50, 5, 500, 50, 100, 10];
        let usage: Vec<PodUsage> = pods
            .iter()
            .zip(used)
            .map(|(pod, mi)| PodUsage {
                pod,
                memory_usage_bytes: mi * MI,
                disk_usage_bytes: 0,
            })
            .collect();
        assert_eq!(
            rank_for_eviction(&usage, EvictionResource::Memory),
            [4, 3, 1, 2, 5, 0]
        );
    }

    #[test]
    fn disk_ranking_reads_disk_usage_and_ephemeral_storage_requests() {
        let requesting = pod(
            0,
            json!([{"name": "a", "resources": {"requests": {"ephemeral-storage": "1Gi"}}}]),
        );
        let best_effort = pod(0, json!([{"name": "a"}]));
        let usage = [
            PodUsage {
                pod: &requesting,
                memory_usage_bytes: 10_000 * MI,
                disk_usage_bytes: 512 * MI,
            },
            PodUsage {
                pod: &best_effort,
                memory_usage_bytes: 0,
                disk_usage_bytes: MI,
            },
        ];
        assert_eq!(
            rank_for_eviction(&usage, EvictionResource::EphemeralStorage),
            [1, 0]
        );
        assert_eq!(rank_for_eviction(&usage, EvictionResource::Memory), [0, 1]);
    }

    #[test]
    fn qos_classes_follow_kubernetes_rules() {
        let both = |cpu: &str, memory: &str| json!({"cpu": cpu, "memory": memory});
        let cases = [
            (json!([{"name": "a"}]), "BestEffort"),
            (
                json!([{"name": "a", "resources": {"limits": both("1", "1Gi")}}]),
                "Guaranteed",
            ),
            (
                json!([{"name": "a", "resources": {"limits": both("1", "1Gi"), "requests": both("1", "1Gi")}},
                    {"name": "b", "resources": {"limits": both("500m", "64Mi")}}]),
                "Guaranteed",
            ),
            (
                json!([{"name": "a", "resources": {"limits": both("1", "1Gi"), "requests": both("500m", "1Gi")}}]),
                "Burstable",
            ),
            (
                json!([{"name": "a", "resources": {"limits": {"cpu": "1"}}}]),
                "Burstable",
            ),
            (
                json!([{"name": "a", "resources": {"limits": both("1", "1Gi")}}, {"name": "b"}]),
                "Burstable",
            ),
            (
                json!([{"name": "a", "resources": {"requests": {"memory": "1Mi"}}}]),
                "Burstable",
            ),
            (
                json!([{"name": "a", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]),
                "BestEffort",
            ),
        ];
        for (containers, class) in cases {
            assert_eq!(
                qos_class(&pod(0, containers.clone())),
                class,
                "{containers}"
            );
        }
    }

    #[test]
    fn eviction_messages_name_containers_over_their_request() {
        let pod = pod(
            0,
            json!([
                {"name": "x"},
                {"name": "y", "resources": {"requests": {"memory": "64Mi"}}},
            ]),
        );
        let threshold = Quantity::parse("100Mi").expect("quantity");
        let usage = [("x".to_string(), 40 * MI), ("y".to_string(), 10 * MI)];
        let (reason, message) =
            eviction_status(EvictionResource::Memory, threshold, 50 * MI, &pod, &usage);
        assert_eq!(reason, "Evicted");
        assert_eq!(
            message,
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. \
             Container x was using 40Mi, request is 0, has larger consumption of memory. "
        );
        assert_eq!(format_bytes(1500), "1500");
        assert_eq!(format_bytes(3 << 30), "3Gi");
    }

    #[test]
    fn stat_lines_with_odd_command_names_parse() {
        let stat = "4242 (my (odd) cmd) S 1 4200 4200 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 300 10000000 2560 18446744073709551615";
        assert_eq!(parse_stat(stat), Some((4200, 2560)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn a_process_group_has_resident_memory() {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .expect("sleep");
        // Until the child has exec'd `sleep` and touched its pages it may
        // count none of its own (a vfork shares its parent's; a sandboxed
        // kernel reports resident pages lazily): give it two seconds.
        let mut memory = None;
        for _ in 0..400 {
            memory = process_memory_bytes(child.id());
            if memory.is_some_and(|bytes| bytes > 0) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(memory.is_some_and(|bytes| bytes > 0), "{memory:?}");
        assert_eq!(process_memory_bytes(u32::MAX - 1), None);
    }

    #[test]
    fn directory_usage_sums_files_without_following_links() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("outside");
        std::fs::write(outside.path().join("big"), vec![0u8; 100_000]).expect("big");
        std::fs::create_dir(dir.path().join("sub")).expect("sub");
        std::fs::write(dir.path().join("a"), vec![0u8; 1000]).expect("a");
        std::fs::write(dir.path().join("sub/b"), vec![0u8; 234]).expect("b");
        std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).expect("link");
        let usage = directory_usage(dir.path(), 100);
        assert_eq!(
            usage,
            DirectoryUsage {
                bytes: 1234,
                entries: 4,
                complete: true
            }
        );
        assert!(!directory_usage(dir.path(), 2).complete);
    }
}
