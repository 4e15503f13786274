//! CPU time and memory from `/proc`: the node's (`/proc/stat`,
//! `/proc/meminfo`) and a process tree's (`/proc/<pid>/stat` of a
//! container's main process and every descendant), for containers
//! without a cgroup of their own. Parsers take text, so fixtures test them.

use std::collections::HashMap;
use std::path::Path;

/// The fields of `/proc/<pid>/stat` usage needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessStat {
    pub pid: u32,
    pub ppid: u32,
    /// utime + stime + cutime + cstime, in clock ticks: the process's own
    /// CPU time and that of the children it has reaped, so work done by a
    /// short-lived child is not lost when it exits.
    pub cpu_ticks: u64,
    /// Resident set size, in pages.
    pub rss_pages: u64,
}

/// Parses one `/proc/<pid>/stat` line; `None` when it is not one.
pub fn parse_process_stat(text: &str) -> Option<ProcessStat> {
    let (head, rest) = text.rsplit_once(')')?;
    let pid = head.split_once('(')?.0.trim().parse().ok()?;
    // `rest` starts at field 3 (state); field N is at index N - 3.
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    let signed = |n: usize| -> Option<u64> {
        let value: i64 = fields.get(n - 3)?.parse().ok()?;
        Some(value.max(0) as u64)
    };
    Some(ProcessStat {
        pid,
        ppid: field(4)? as u32,
        cpu_ticks: field(14)? + field(15)? + signed(16)? + signed(17)?,
        rss_pages: signed(24)?,
    })
}

/// Every process of `/proc` (or a directory laid out like it) at one
/// moment. Processes that exit while it is read are left out.
#[derive(Debug, Default, Clone)]
pub struct ProcessTable {
    by_pid: HashMap<u32, ProcessStat>,
    children: HashMap<u32, Vec<u32>>,
}

impl ProcessTable {
    pub fn read(proc_dir: &Path) -> std::io::Result<ProcessTable> {
        let mut stats = Vec::new();
        for entry in std::fs::read_dir(proc_dir)?.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            // Gone between the listing and the read: not an error.
            let Ok(text) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            if let Some(stat) = parse_process_stat(&text).filter(|s| s.pid == pid) {
                stats.push(stat);
            }
        }
        Ok(ProcessTable::from_stats(stats))
    }

    pub fn from_stats(stats: impl IntoIterator<Item = ProcessStat>) -> ProcessTable {
        let mut table = ProcessTable::default();
        for stat in stats {
            table.children.entry(stat.ppid).or_default().push(stat.pid);
            table.by_pid.insert(stat.pid, stat);
        }
        table
    }

    /// `pid` and all its descendants still running; empty when `pid` is
    /// gone.
    pub fn tree(&self, pid: u32) -> Vec<&ProcessStat> {
        let mut found = Vec::new();
        let mut pending = vec![pid];
        while let Some(pid) = pending.pop() {
            let Some(stat) = self.by_pid.get(&pid) else {
                continue;
            };
            // A pid is in the table once, so a cycle cannot loop forever;
            // still, never walk a pid twice.
            if found.iter().any(|s: &&ProcessStat| s.pid == pid) {
                continue;
            }
            found.push(stat);
            if let Some(children) = self.children.get(&pid) {
                pending.extend(children.iter().filter(|&&c| c != pid));
            }
        }
        found
    }

    /// CPU time (clock ticks) and RSS (pages) of `pid`'s tree, or `None`
    /// when `pid` is gone.
    pub fn tree_usage(&self, pid: u32) -> Option<(u64, u64)> {
        let tree = self.tree(pid);
        if tree.is_empty() {
            return None;
        }
        Some(tree.iter().fold((0, 0), |(cpu, rss), s| {
            (cpu + s.cpu_ticks, rss + s.rss_pages)
        }))
    }
}

/// The host's clock ticks per second and page size, from sysconf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostUnits {
    pub ticks_per_second: u64,
    pub page_size: u64,
}

impl HostUnits {
    pub fn of_this_host() -> HostUnits {
        // SAFETY: sysconf has no memory-safety preconditions.
        let (ticks, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        HostUnits {
            ticks_per_second: u64::try_from(ticks).ok().filter(|t| *t > 0).unwrap_or(100),
            page_size: u64::try_from(page).ok().filter(|p| *p > 0).unwrap_or(4096),
        }
    }

    pub fn ticks_to_nanos(&self, ticks: u64) -> u64 {
        (u128::from(ticks) * 1_000_000_000 / u128::from(self.ticks_per_second)) as u64
    }
}

/// The node's busy CPU time from `/proc/stat`'s `cpu` line, in clock
/// ticks: everything but idle and iowait (guest time is already in user
/// and nice, so it is not added again); and the boot time (`btime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    pub busy_ticks: u64,
    pub boot_time_seconds: Option<i64>,
}

pub fn parse_proc_stat(text: &str) -> Option<ProcStat> {
    let mut busy = None;
    let mut boot = None;
    for line in text.lines() {
        let mut words = line.split_ascii_whitespace();
        match words.next() {
            Some("cpu") => {
                let values: Vec<u64> = words.map_while(|w| w.parse().ok()).collect();
                // user nice system idle iowait irq softirq steal [guest guest_nice]
                if values.len() < 4 {
                    return None;
                }
                let at = |i: usize| values.get(i).copied().unwrap_or(0);
                busy = Some(at(0) + at(1) + at(2) + at(5) + at(6) + at(7));
            }
            Some("btime") => boot = words.next().and_then(|w| w.parse().ok()),
            _ => {}
        }
    }
    Some(ProcStat {
        busy_ticks: busy?,
        boot_time_seconds: boot,
    })
}

/// What the node's memory figures come from in `/proc/meminfo`, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemInfo {
    pub total: u64,
    pub free: u64,
    pub available: u64,
    /// Anonymous memory: the node's RSS.
    pub anon: Option<u64>,
}

impl MemInfo {
    /// Total minus available: what the node could not give back.
    pub fn working_set(&self) -> u64 {
        self.total.saturating_sub(self.available)
    }
}

pub fn parse_meminfo(text: &str) -> Option<MemInfo> {
    let mut fields: HashMap<&str, u64> = HashMap::new();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let mut words = value.split_ascii_whitespace();
        let Some(number) = words.next().and_then(|n| n.parse::<u64>().ok()) else {
            continue;
        };
        let scale = match words.next() {
            Some("kB") => 1024,
            _ => 1,
        };
        fields.insert(key.trim(), number * scale);
    }
    Some(MemInfo {
        total: *fields.get("MemTotal")?,
        free: *fields.get("MemFree")?,
        available: *fields.get("MemAvailable")?,
        anon: fields.get("AnonPages").copied(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (my (odd) cmd) S 17 4242 4242 0 -1 4194560 100 0 0 0 \
                        250 50 7 3 20 0 1 0 987654 1000000 300 18446744073709551615";

    #[test]
    fn a_process_stat_gives_its_parent_cpu_time_and_rss() {
        let stat = parse_process_stat(STAT).unwrap();
        assert_eq!(
            stat,
            ProcessStat {
                pid: 4242,
                ppid: 17,
                cpu_ticks: 250 + 50 + 7 + 3,
                rss_pages: 300,
            }
        );
        assert_eq!(parse_process_stat("12 (sh) S 1 12"), None);
        assert_eq!(parse_process_stat("nonsense"), None);
    }

    #[test]
    fn a_tree_sums_the_process_and_every_descendant_only() {
        let stat = |pid, ppid, cpu, rss| ProcessStat {
            pid,
            ppid,
            cpu_ticks: cpu,
            rss_pages: rss,
        };
        let table = ProcessTable::from_stats([
            stat(1, 0, 1000, 1000),
            stat(10, 1, 5, 10),
            stat(11, 10, 7, 20),
            stat(12, 11, 1, 30),
            stat(20, 1, 100, 100),
        ]);
        assert_eq!(table.tree_usage(10), Some((13, 60)));
        assert_eq!(table.tree_usage(12), Some((1, 30)));
        assert_eq!(table.tree_usage(99), None, "a gone process is no error");
    }

    #[test]
    fn a_real_process_tree_is_found_through_proc() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 5 & sleep 5"])
            .spawn()
            .unwrap();
        let pid = child.id();
        // The shell starts its two sleeps in a moment.
        let mut found = 0;
        for _ in 0..100 {
            let table = ProcessTable::read(Path::new("/proc")).unwrap();
            found = table.tree(pid).len();
            if found >= 3 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let table = ProcessTable::read(Path::new("/proc")).unwrap();
        let (_, rss) = table.tree_usage(pid).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        // The shell and its sleeps (a shell may exec its last command
        // itself, leaving two processes).
        assert!(found >= 2, "found {found} processes of the tree");
        assert!(rss > 0);
        assert!(
            table.tree(std::process::id()).len() > 3,
            "this test's process holds the tree"
        );
    }

    #[test]
    fn proc_stat_gives_busy_time_without_idle_iowait_or_guest() {
        let text = "cpu  100 20 30 1000 50 5 6 7 40 2\n\
                    cpu0 50 10 15 500 25 2 3 3 20 1\n\
                    intr 1 2 3\nbtime 1700000000\n";
        let stat = parse_proc_stat(text).unwrap();
        assert_eq!(stat.busy_ticks, 100 + 20 + 30 + 5 + 6 + 7);
        assert_eq!(stat.boot_time_seconds, Some(1_700_000_000));
        assert_eq!(parse_proc_stat("intr 1\n"), None);
    }

    #[test]
    fn meminfo_gives_bytes_and_the_working_set() {
        let text = "MemTotal:       16000000 kB\nMemFree:         2000000 kB\n\
                    MemAvailable:   10000000 kB\nBuffers:  1 kB\nAnonPages: 3000000 kB\n";
        let info = parse_meminfo(text).unwrap();
        assert_eq!(info.total, 16_000_000 * 1024);
        assert_eq!(info.working_set(), 6_000_000 * 1024);
        assert_eq!(info.anon, Some(3_000_000 * 1024));
        assert_eq!(parse_meminfo("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn ticks_become_nanoseconds() {
        let units = HostUnits {
            ticks_per_second: 100,
            page_size: 4096,
        };
        assert_eq!(units.ticks_to_nanos(250), 2_500_000_000);
        let here = HostUnits::of_this_host();
        assert!(here.ticks_per_second > 0 && here.page_size >= 4096);
    }
}
