//! What the host is and how loaded it is, read from /proc, /etc and
//! statvfs: identity and capacity for the Node, and the fresh signals the
//! pressure conditions and the eviction manager are computed from.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Why a host reading failed.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} has no readable {field}")]
    Missing { path: String, field: &'static str },
    #[error("cannot statvfs {path}: {source} (does the kubelet's root dir exist?)")]
    Statvfs {
        path: String,
        source: std::io::Error,
    },
    #[error("uname failed: {0}")]
    Uname(std::io::Error),
}

/// The host's identity and capacity: what the Node's nodeInfo and
/// status.capacity are built from. Read once at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostInfo {
    pub hostname: String,
    pub cpus: u32,
    pub memory_bytes: u64,
    /// Size of the filesystem holding the kubelet's root dir.
    pub ephemeral_storage_bytes: u64,
    pub pid_max: u64,
    pub boot_id: String,
    pub machine_id: String,
    pub system_uuid: String,
    pub kernel_version: String,
    pub os_image: String,
    /// In Kubernetes words: `amd64`, `arm64`…
    pub architecture: String,
    /// In Kubernetes words: `linux`.
    pub operating_system: String,
}

/// The fresh signals behind MemoryPressure, DiskPressure and PIDPressure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostStats {
    pub memory_total_bytes: u64,
    pub memory_available_bytes: u64,
    pub disk_total_bytes: u64,
    pub disk_available_bytes: u64,
    pub inodes_total: u64,
    pub inodes_free: u64,
    pub pid_max: u64,
    /// Processes and threads now running on the host.
    pub pids_in_use: u64,
}

/// A source of host readings: the Linux host, or a fake in tests.
pub trait HostReader: Send + Sync + 'static {
    fn info(&self) -> Result<HostInfo, HostError>;
    fn stats(&self) -> Result<HostStats, HostError>;
}

/// The host this process runs on; disk figures are those of `root_dir`.
#[derive(Debug, Clone)]
pub struct LinuxHost {
    pub root_dir: PathBuf,
}

impl LinuxHost {
    pub fn new(root_dir: impl Into<PathBuf>) -> LinuxHost {
        LinuxHost {
            root_dir: root_dir.into(),
        }
    }
}

impl HostReader for LinuxHost {
    fn info(&self) -> Result<HostInfo, HostError> {
        let uname = uname()?;
        let machine_id = read_trimmed("/etc/machine-id").unwrap_or_default();
        let system_uuid = read_trimmed("/sys/class/dmi/id/product_uuid")
            .ok()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| machine_id.clone());
        Ok(HostInfo {
            hostname: uname.nodename,
            cpus: cpu_count(),
            memory_bytes: meminfo_field(&read("/proc/meminfo")?, "MemTotal")
                .ok_or_else(|| missing("/proc/meminfo", "MemTotal"))?,
            ephemeral_storage_bytes: filesystem(&self.root_dir)?.total_bytes,
            pid_max: pid_max()?,
            boot_id: read_trimmed("/proc/sys/kernel/random/boot_id")?,
            machine_id,
            system_uuid,
            kernel_version: uname.release,
            os_image: os_image(),
            architecture: kubernetes_arch(std::env::consts::ARCH).to_string(),
            operating_system: std::env::consts::OS.to_string(),
        })
    }

    fn stats(&self) -> Result<HostStats, HostError> {
        let meminfo = read("/proc/meminfo")?;
        let fs = filesystem(&self.root_dir)?;
        Ok(HostStats {
            memory_total_bytes: meminfo_field(&meminfo, "MemTotal")
                .ok_or_else(|| missing("/proc/meminfo", "MemTotal"))?,
            memory_available_bytes: meminfo_field(&meminfo, "MemAvailable")
                .ok_or_else(|| missing("/proc/meminfo", "MemAvailable"))?,
            disk_total_bytes: fs.total_bytes,
            disk_available_bytes: fs.available_bytes,
            inodes_total: fs.inodes_total,
            inodes_free: fs.inodes_free,
            pid_max: pid_max()?,
            pids_in_use: loadavg_entities(&read("/proc/loadavg")?)
                .ok_or_else(|| missing("/proc/loadavg", "scheduling entities"))?,
        })
    }
}

fn missing(path: &str, field: &'static str) -> HostError {
    HostError::Missing {
        path: path.to_string(),
        field,
    }
}

fn read(path: &str) -> Result<String, HostError> {
    std::fs::read_to_string(path).map_err(|source| HostError::Read {
        path: path.to_string(),
        source,
    })
}

fn read_trimmed(path: &str) -> Result<String, HostError> {
    read(path).map(|s| s.trim().to_string())
}

fn cpu_count() -> u32 {
    std::thread::available_parallelism()
        .map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX))
        .unwrap_or(1)
}

fn pid_max() -> Result<u64, HostError> {
    let text = read_trimmed("/proc/sys/kernel/pid_max")?;
    text.parse()
        .map_err(|_| missing("/proc/sys/kernel/pid_max", "number"))
}

/// A `/proc/meminfo` field (`MemTotal:  16318412 kB`) in bytes.
pub fn meminfo_field(meminfo: &str, field: &str) -> Option<u64> {
    meminfo.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        let mut words = rest.split_whitespace();
        let value: u64 = words.next()?.parse().ok()?;
        match words.next() {
            Some("kB") => value.checked_mul(1024),
            None => Some(value),
            Some(_) => None,
        }
    })
}

/// The total of `/proc/loadavg`'s fourth field (`running/total`): the
/// processes and threads that exist, each holding a pid.
pub fn loadavg_entities(loadavg: &str) -> Option<u64> {
    let field = loadavg.split_whitespace().nth(3)?;
    field.split_once('/')?.1.parse().ok()
}

/// `PRETTY_NAME` of an os-release file's text, unquoted.
pub fn os_release_pretty_name(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix("PRETTY_NAME=")?.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value);
        Some(value.to_string())
    })
}

fn os_image() -> String {
    ["/etc/os-release", "/usr/lib/os-release"]
        .iter()
        .find_map(|path| os_release_pretty_name(&std::fs::read_to_string(path).ok()?))
        .unwrap_or_else(|| "Linux".to_string())
}

/// Rust's architecture names in Kubernetes (GOARCH) words.
pub fn kubernetes_arch(rust_arch: &str) -> &str {
    match rust_arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "arm" => "arm",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        other => other,
    }
}

/// Size and use of one filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilesystemStats {
    pub total_bytes: u64,
    pub available_bytes: u64,
    pub inodes_total: u64,
    pub inodes_free: u64,
}

/// statvfs of the filesystem holding `path`.
pub fn filesystem(path: &Path) -> Result<FilesystemStats, HostError> {
    let failed = |source| HostError::Statvfs {
        path: path.display().to_string(),
        source,
    };
    let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        failed(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the path holds a NUL byte",
        ))
    })?;
    // SAFETY: statvfs only writes into the zeroed struct we own, and
    // c_path is a valid NUL-terminated string for the call's duration.
    let mut raw: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), &mut raw) };
    if rc != 0 {
        return Err(failed(std::io::Error::last_os_error()));
    }
    let block = raw.f_frsize as u64;
    Ok(FilesystemStats {
        total_bytes: (raw.f_blocks as u64).saturating_mul(block),
        available_bytes: (raw.f_bavail as u64).saturating_mul(block),
        inodes_total: raw.f_files as u64,
        inodes_free: raw.f_ffree as u64,
    })
}

struct Uname {
    nodename: String,
    release: String,
}

fn uname() -> Result<Uname, HostError> {
    // SAFETY: uname fills the zeroed struct we own; its fields are
    // NUL-terminated arrays of c_char.
    let mut raw: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut raw) } != 0 {
        return Err(HostError::Uname(std::io::Error::last_os_error()));
    }
    Ok(Uname {
        nodename: c_chars(&raw.nodename),
        release: c_chars(&raw.release),
    })
}

fn c_chars(chars: &[libc::c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_host_reads_as_a_plausible_node() {
        let host = LinuxHost::new(std::env::temp_dir());
        let info = host.info().expect("host info");
        assert!(info.cpus >= 1);
        assert!(info.memory_bytes > 64 * 1024 * 1024, "{info:?}");
        assert!(info.ephemeral_storage_bytes > 0);
        assert!(info.pid_max >= 300);
        assert_eq!(info.boot_id.len(), 36, "a UUID: {}", info.boot_id);
        assert!(!info.kernel_version.is_empty());
        assert!(!info.hostname.is_empty());
        assert_eq!(info.operating_system, "linux");
        assert!(!info.architecture.contains('_'), "{}", info.architecture);
    }

    #[test]
    fn this_hosts_stats_are_within_its_totals() {
        let stats = LinuxHost::new(std::env::temp_dir())
            .stats()
            .expect("host stats");
        assert!(stats.memory_available_bytes > 0);
        assert!(stats.memory_available_bytes <= stats.memory_total_bytes);
        assert!(stats.disk_available_bytes <= stats.disk_total_bytes);
        assert!(stats.inodes_free <= stats.inodes_total);
        assert!(stats.pids_in_use >= 1 && stats.pids_in_use <= stats.pid_max);
    }

    #[test]
    fn a_missing_root_dir_is_named_in_the_error() {
        let err = filesystem(Path::new("/no/such/kubelet/dir")).unwrap_err();
        assert!(err.to_string().contains("/no/such/kubelet/dir"), "{err}");
    }

    #[test]
    fn proc_files_parse() {
        let meminfo = "MemTotal:       16318412 kB\nMemFree: 1 kB\nMemAvailable:    8000000 kB\n";
        assert_eq!(meminfo_field(meminfo, "MemTotal"), Some(16318412 * 1024));
        assert_eq!(meminfo_field(meminfo, "MemAvailable"), Some(8000000 * 1024));
        assert_eq!(meminfo_field(meminfo, "Mem"), None);
        assert_eq!(loadavg_entities("0.35 1.32 2.08 1/85 13830"), Some(85));
        assert_eq!(loadavg_entities("0.35 1.32"), None);
        let release = "NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n";
        assert_eq!(
            os_release_pretty_name(release).as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        assert_eq!(kubernetes_arch("x86_64"), "amd64");
        assert_eq!(kubernetes_arch("aarch64"), "arm64");
    }
}
