//! The processes `skiff up` runs for its pods, found in /proc as its
//! descendants (each container's shim and the container's own process):
//! counted by name, their CPU time summed. Read only: nothing here
//! signals a process.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// What the benchmark reads of `/proc/PID/stat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: u32,
    pub ppid: u32,
    /// The command name (`comm`), at most 15 bytes.
    pub comm: String,
    /// utime + stime, in clock ticks.
    pub cpu_ticks: u64,
    /// When it started, in clock ticks after boot: with the pid, it tells
    /// a process from a later one that reused its pid.
    pub start_ticks: u64,
}

/// One `/proc/PID/stat` line; `None` if it is not one.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let open = text.find('(')?;
    // The command name may hold spaces and parentheses: it ends at the
    // last ')'.
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let comm = text.get(open + 1..close)?.to_string();
    // Fields from the 3rd (state) on; the 4th of the line is index 1 here.
    let fields: Vec<&str> = text.get(close + 2..)?.split(' ').collect();
    let number = |i: usize| fields.get(i)?.parse::<u64>().ok();
    Some(ProcStat {
        pid,
        ppid: u32::try_from(number(1)?).ok()?,
        comm,
        cpu_ticks: number(11)? + number(12)?,
        start_ticks: number(19)?,
    })
}

fn read_stat(pid: u32) -> Option<ProcStat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Every process now alive under `root` (children, theirs, and so on),
/// not `root` itself.
pub fn descendants(root: u32) -> Vec<ProcStat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let all: Vec<ProcStat> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(read_stat)
        .collect();
    descendants_of(root, all)
}

/// The processes of `all` under `root`.
pub fn descendants_of(root: u32, all: Vec<ProcStat>) -> Vec<ProcStat> {
    let mut children: HashMap<u32, Vec<ProcStat>> = HashMap::new();
    for stat in all {
        children.entry(stat.ppid).or_default().push(stat);
    }
    let mut found = Vec::new();
    let mut visited = HashSet::from([root]);
    let mut next = vec![root];
    while let Some(parent) = next.pop() {
        for child in children.remove(&parent).unwrap_or_default() {
            if visited.insert(child.pid) {
                next.push(child.pid);
                found.push(child);
            }
        }
    }
    found
}

/// Those of `procs` named `comm`.
pub fn named<'a>(procs: &'a [ProcStat], comm: &str) -> Vec<&'a ProcStat> {
    procs.iter().filter(|p| p.comm == comm).collect()
}

/// Whether the very process `stat` describes (same pid, same start) is
/// still alive.
pub fn still_alive(stat: &ProcStat) -> bool {
    read_stat(stat.pid).is_some_and(|now| now.start_ticks == stat.start_ticks)
}

/// The CPU time of `procs` together.
pub fn cpu_time(procs: &[ProcStat]) -> Duration {
    ticks(procs.iter().map(|p| p.cpu_ticks).sum())
}

fn ticks(count: u64) -> Duration {
    // SAFETY: sysconf reads a constant of the system; no memory is touched.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    match u64::try_from(per_second) {
        Ok(per_second) if per_second > 0 => {
            Duration::from_nanos(count.saturating_mul(1_000_000_000) / per_second)
        }
        _ => Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(pid: u32, ppid: u32, comm: &str) -> ProcStat {
        ProcStat {
            pid,
            ppid,
            comm: comm.into(),
            cpu_ticks: 1,
            start_ticks: 0,
        }
    }

    #[test]
    fn stat_lines_are_parsed_past_odd_command_names() {
        let line = "4242 (skiff (shim) x) S 4000 4242 4242 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 1 0 987654 1000 10 18446744073709551615";
        let s = parse_stat(line).unwrap();
        assert_eq!((s.pid, s.ppid), (4242, 4000));
        assert_eq!(s.comm, "skiff (shim) x");
        assert_eq!(s.cpu_ticks, 10);
        assert_eq!(s.start_ticks, 987654);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn descendants_are_found_at_any_depth_and_nothing_else() {
        let all = vec![
            stat(1, 0, "init"),
            stat(10, 1, "skiff"),
            stat(11, 10, "shim"),
            stat(12, 11, "sleep"),
            stat(13, 10, "shim"),
            stat(14, 13, "sleep"),
            stat(20, 1, "sleep"),
        ];
        let mut found: Vec<u32> = descendants_of(10, all).iter().map(|p| p.pid).collect();
        found.sort_unstable();
        assert_eq!(found, vec![11, 12, 13, 14]);
    }

    #[test]
    fn this_process_is_alive_and_has_a_stat() {
        let me = read_stat(std::process::id()).unwrap();
        assert!(still_alive(&me));
        let stale = ProcStat {
            start_ticks: me.start_ticks + 1,
            ..me
        };
        assert!(!still_alive(&stale));
    }
}
