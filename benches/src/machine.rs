//! What the numbers depend on: the machine (CPUs, kernel, memory), the
//! filesystem under the data directory, and this process's resident memory
//! and disk use, read from /proc and the directory tree (Linux only).

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

/// Lines describing the machine, for the top of a report.
pub fn describe() -> Vec<String> {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let mut lines = vec![format!("nproc:   {cpus}"), format!("kernel:  {}", kernel())];
    if let Some(model) = cpu_model() {
        lines.push(format!("cpu:     {model}"));
    }
    if let Some(kib) = proc_kib("/proc/meminfo", "MemTotal:") {
        lines.push(format!("memory:  {}", crate::report::mib(kib * 1024)));
    }
    lines
}

fn kernel() -> String {
    let uname = Command::new("uname")
        .arg("-srvm")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok());
    match uname {
        Some(s) => s.trim().to_string(),
        None => fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| format!("Linux {}", s.trim()))
            .unwrap_or_else(|_| "unknown".into()),
    }
}

fn cpu_model() -> Option<String> {
    let info = fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, model)| model.trim().to_string())
}

/// The mount holding `path` as "fstype on device (mount point)": fsync cost
/// depends on it, and a tmpfs makes durable-write numbers meaningless.
pub fn filesystem_of(path: &Path) -> String {
    let Ok(path) = path.canonicalize() else {
        return "unknown".into();
    };
    let Ok(mounts) = fs::read_to_string("/proc/mounts") else {
        return "unknown".into();
    };
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let device = fields.next()?;
            let mount_point = fields.next()?.replace("\\040", " ");
            let fstype = fields.next()?;
            path.starts_with(&mount_point)
                .then(|| (mount_point, fstype.to_string(), device.to_string()))
        })
        .max_by_key(|(mount_point, _, _)| mount_point.len())
        .map(|(mount_point, fstype, device)| format!("{fstype} on {device} ({mount_point})"))
        .unwrap_or_else(|| "unknown".into())
}

/// Resident memory of this process (VmRSS), in bytes.
pub fn resident_bytes() -> io::Result<u64> {
    proc_kib("/proc/self/status", "VmRSS:")
        .map(|kib| kib * 1024)
        .ok_or_else(|| io::Error::other("VmRSS not found in /proc/self/status"))
}

/// Resident memory (VmRSS) of process `pid`, in bytes; `None` once it is
/// gone.
pub fn resident_bytes_of(pid: u32) -> Option<u64> {
    proc_kib(&format!("/proc/{pid}/status"), "VmRSS:").map(|kib| kib * 1024)
}

/// Peak resident memory (VmHWM) of process `pid`, in bytes; `None` once
/// it is gone.
pub fn peak_resident_bytes_of(pid: u32) -> Option<u64> {
    proc_kib(&format!("/proc/{pid}/status"), "VmHWM:").map(|kib| kib * 1024)
}

/// Peak resident memory of this process (VmHWM), in bytes.
pub fn peak_resident_bytes() -> Option<u64> {
    proc_kib("/proc/self/status", "VmHWM:").map(|kib| kib * 1024)
}

/// A "Name:   1234 kB" field of a /proc file.
fn proc_kib(file: &str, field: &str) -> Option<u64> {
    let text = fs::read_to_string(file).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// Space taken by a directory tree.
#[derive(Debug, Clone, Copy, Default)]
pub struct DiskUsage {
    /// Sum of file lengths.
    pub apparent: u64,
    /// Blocks actually allocated (`st_blocks * 512`): counts preallocation,
    /// not holes.
    pub allocated: u64,
    pub files: u64,
}

impl std::ops::AddAssign for DiskUsage {
    fn add_assign(&mut self, other: DiskUsage) {
        self.apparent += other.apparent;
        self.allocated += other.allocated;
        self.files += other.files;
    }
}

pub fn disk_usage(dir: &Path) -> io::Result<DiskUsage> {
    let mut usage = DiskUsage::default();
    if !dir.exists() {
        return Ok(usage);
    }
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_dir() {
            usage += disk_usage(&entry.path())?;
        } else {
            usage += DiskUsage {
                apparent: meta.len(),
                allocated: meta.blocks() * 512,
                files: 1,
            };
        }
    }
    Ok(usage)
}

/// The opening lines of every benchmark's output: what ran, on which
/// machine, with its data where.
pub fn print_header(benchmark: &str, data: &Path) {
    let args: Vec<String> = std::env::args().collect();
    println!("skiff-bench {benchmark}");
    println!("command: {}", args.join(" "));
    for line in describe() {
        println!("{line}");
    }
    println!("data:    {} [{}]", data.display(), filesystem_of(data));
}
