//! CPU time and memory of a container that has a cgroup v2 of its own:
//! `cpu.stat`'s usage_usec, and `memory.current` less `inactive_file`
//! from `memory.stat` as the working set, as cAdvisor counts them.

use std::path::Path;

/// One read of a container's cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupUsage {
    pub cpu_nanos: u64,
    pub memory_current: u64,
    pub working_set: u64,
    pub rss: Option<u64>,
    /// `memory.max`, when it is not "max".
    pub memory_limit: Option<u64>,
}

/// A key of a flat-keyed cgroup file (`cpu.stat`, `memory.stat`).
pub fn stat_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// Usage from the text of `cpu.stat`, `memory.current`, `memory.stat`
/// and `memory.max`.
pub fn parse_usage(
    cpu_stat: &str,
    memory_current: &str,
    memory_stat: &str,
    memory_max: Option<&str>,
) -> Option<CgroupUsage> {
    let usage_usec = stat_value(cpu_stat, "usage_usec")?;
    let current: u64 = memory_current.trim().parse().ok()?;
    let inactive = stat_value(memory_stat, "inactive_file").unwrap_or(0);
    Some(CgroupUsage {
        cpu_nanos: usage_usec.saturating_mul(1000),
        memory_current: current,
        working_set: current.saturating_sub(inactive),
        rss: stat_value(memory_stat, "anon"),
        memory_limit: memory_max.and_then(|m| m.trim().parse().ok()),
    })
}

/// Reads the cgroup at `dir`; `None` when it is gone or unreadable.
pub fn read_usage(dir: &Path) -> Option<CgroupUsage> {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
    parse_usage(
        &read("cpu.stat")?,
        &read("memory.current")?,
        &read("memory.stat")?,
        read("memory.max").as_deref(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_files_give_cpu_time_and_the_working_set() {
        let usage = parse_usage(
            "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n",
            "10485760\n",
            "anon 4194304\nfile 6291456\ninactive_file 2097152\nactive_file 4194304\n",
            Some("max\n"),
        )
        .unwrap();
        assert_eq!(usage.cpu_nanos, 1_500_000);
        assert_eq!(usage.memory_current, 10_485_760);
        assert_eq!(usage.working_set, 10_485_760 - 2_097_152);
        assert_eq!(usage.rss, Some(4_194_304));
        assert_eq!(usage.memory_limit, None);
        let limited = parse_usage("usage_usec 1\n", "5", "", Some("1048576")).unwrap();
        assert_eq!(limited.memory_limit, Some(1_048_576));
        assert_eq!(limited.working_set, 5);
        assert_eq!(parse_usage("user_usec 1\n", "5", "", None), None);
        assert_eq!(read_usage(Path::new("/nonexistent/cgroup")), None);
    }
}
