//! `process_*`, as Prometheus' client libraries export them, read from
//! `/proc/self` when the metrics are gathered: CPU time, memory, start
//! time and file descriptors. Not for the Go runtime's `go_*`.

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Counter, Gauge, Opts};

/// The collector; register one per registry.
pub struct ProcessCollector {
    cpu: Counter,
    resident: Gauge,
    virtual_bytes: Gauge,
    start_time: Gauge,
    open_fds: Gauge,
    max_fds: Gauge,
}

impl Default for ProcessCollector {
    fn default() -> Self {
        ProcessCollector::new()
    }
}

impl ProcessCollector {
    pub fn new() -> ProcessCollector {
        let gauge = |name: &str, help: &str| {
            Gauge::with_opts(Opts::new(name, help)).expect("a valid gauge")
        };
        ProcessCollector {
            cpu: Counter::with_opts(Opts::new(
                "process_cpu_seconds_total",
                "Total user and system CPU time spent in seconds.",
            ))
            .expect("a valid counter"),
            resident: gauge(
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
            ),
            virtual_bytes: gauge(
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
            ),
            start_time: gauge(
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
            ),
            open_fds: gauge("process_open_fds", "Number of open file descriptors."),
            max_fds: gauge(
                "process_max_fds",
                "Maximum number of open file descriptors.",
            ),
        }
    }

    fn metrics(&self) -> [&dyn Collector; 6] {
        [
            &self.cpu,
            &self.resident,
            &self.virtual_bytes,
            &self.start_time,
            &self.open_fds,
            &self.max_fds,
        ]
    }

    /// Reads `/proc/self` into the metrics; what cannot be read keeps its
    /// last value.
    fn refresh(&self) {
        if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
            let boot = std::fs::read_to_string("/proc/stat")
                .ok()
                .and_then(|text| boot_time(&text));
            if let Some(stat) = Stat::parse(&stat, boot) {
                // A counter only grows: add what was spent since.
                let spent = stat.cpu_seconds - self.cpu.get();
                if spent > 0.0 {
                    self.cpu.inc_by(spent);
                }
                self.resident.set(stat.resident_bytes);
                self.virtual_bytes.set(stat.virtual_bytes);
                if let Some(start) = stat.start_time_seconds {
                    self.start_time.set(start);
                }
            }
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            self.open_fds.set(fds.count() as f64);
        }
        if let Some(max) = max_fds() {
            self.max_fds.set(max);
        }
    }
}

impl Collector for ProcessCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.metrics().into_iter().flat_map(|m| m.desc()).collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.refresh();
        self.metrics()
            .into_iter()
            .flat_map(|m| m.collect())
            .collect()
    }
}

/// What `/proc/self/stat` says, in the units of the metrics.
#[derive(Debug, PartialEq)]
struct Stat {
    cpu_seconds: f64,
    virtual_bytes: f64,
    resident_bytes: f64,
    start_time_seconds: Option<f64>,
}

impl Stat {
    /// `boot`: the boot time (`/proc/stat`'s btime), which the start
    /// time counts from.
    fn parse(stat: &str, boot: Option<f64>) -> Option<Stat> {
        // SAFETY: sysconf has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        // SAFETY: as above.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as f64;
        Stat::parse_with(stat, boot, ticks, page)
    }

    fn parse_with(stat: &str, boot: Option<f64>, ticks: f64, page: f64) -> Option<Stat> {
        if ticks <= 0.0 {
            return None;
        }
        // The command may hold spaces and parentheses: the fields start
        // after its last `)`, with the state, field 3.
        let (_, rest) = stat.rsplit_once(')')?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<f64>().ok());
        Some(Stat {
            cpu_seconds: (field(14)? + field(15)?) / ticks,
            virtual_bytes: field(23)?,
            resident_bytes: field(24)? * page,
            start_time_seconds: boot
                .zip(field(22))
                .map(|(boot, start)| boot + start / ticks),
        })
    }
}

/// The boot time in `/proc/stat`, seconds since the epoch.
fn boot_time(proc_stat: &str) -> Option<f64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|b| b.trim().parse().ok())
}

/// The soft limit of open files.
fn max_fds() -> Option<f64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only into the rlimit it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    Some(limit.rlim_cur as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_after_the_command() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt
        // cminflt majflt cmajflt utime stime cutime cstime priority nice
        // threads itrealvalue starttime vsize rss
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 150 0 0 20 0 4 0 1000 8192000 300 18446744073709551615";
        let parsed = Stat::parse_with(stat, Some(1_700_000_000.0), 100.0, 4096.0).unwrap();
        assert_eq!(
            parsed,
            Stat {
                cpu_seconds: 4.0,
                virtual_bytes: 8_192_000.0,
                resident_bytes: 300.0 * 4096.0,
                start_time_seconds: Some(1_700_000_010.0),
            }
        );
        assert!(Stat::parse_with("42 (x) S 1", None, 100.0, 4096.0).is_none());
        assert!(Stat::parse_with("no parenthesis", None, 100.0, 4096.0).is_none());
        assert_eq!(
            boot_time("cpu 1 2\nbtime 1700000000\n"),
            Some(1_700_000_000.0)
        );
    }

    #[test]
    fn the_process_metrics_are_gathered_under_client_libraries_names() {
        let registry = prometheus::Registry::new();
        registry
            .register(Box::new(ProcessCollector::new()))
            .unwrap();
        let text = super::super::encode(&registry);
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_virtual_memory_bytes",
            "process_start_time_seconds",
            "process_open_fds",
            "process_max_fds",
        ] {
            let value: f64 = text
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .unwrap_or_else(|| panic!("{name} missing from {text}"))
                .parse()
                .unwrap();
            assert!(value >= 0.0, "{name} {value}");
        }
        assert!(text.contains("# TYPE process_cpu_seconds_total counter"));
        let resident: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(resident > 0.0);
        if let Some(verdict) = super::super::promtool_check(&text) {
            verdict.unwrap();
        }
    }
}
