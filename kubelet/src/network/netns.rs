//! Network namespaces as `ip netns` keeps them: a namespace lives as long
//! as a bind mount of it at a path (`/run/netns/NAME`), so it outlives the
//! process that made it and a restarted kubelet finds it again by name.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Where `ip netns` keeps named namespaces, so that `ip netns exec` and
/// `ip netns list` see the pods' too.
pub const NETNS_DIR: &str = "/run/netns";

/// `nsfs`'s filesystem magic: what a mounted namespace file is.
const NSFS_MAGIC: i64 = 0x6e73_6673;

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
}

fn check(result: libc::c_int) -> io::Result<()> {
    match result {
        -1 => Err(io::Error::last_os_error()),
        _ => Ok(()),
    }
}

/// Bind-mounts `source` over `target`: mount(2) only, so also for a
/// forked child before exec.
pub fn bind_mount(source: &std::ffi::CStr, target: &std::ffi::CStr) -> io::Result<()> {
    check(unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    })
}

/// Makes a new, empty network namespace (only `lo`, down) and keeps it at
/// `path`; one already there is kept as it is.
pub fn create(path: &Path) -> io::Result<()> {
    if is_namespace(path) {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    File::create(path)?;
    let target = c_path(path)?;
    // unshare() moves only the calling thread: a thread of its own, which
    // ends with the namespace held by the mount alone.
    let made = std::thread::spawn(move || -> io::Result<()> {
        check(unsafe { libc::unshare(libc::CLONE_NEWNET) })?;
        bind_mount(c"/proc/thread-self/ns/net", &target)
    })
    .join()
    .unwrap_or_else(|_| Err(io::Error::other("the namespace thread panicked")));
    if made.is_err() {
        let _ = std::fs::remove_file(path);
    }
    made
}

/// Lets the namespace at `path` go (once nothing runs in it) and removes
/// the file; a path that is not there is already gone.
pub fn remove(path: &Path) -> io::Result<()> {
    let target = c_path(path)?;
    if let Err(err) = check(unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) }) {
        // EINVAL: not a mount point (never mounted); ENOENT: gone.
        if !matches!(err.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOENT)) {
            return Err(err);
        }
    }
    match std::fs::remove_file(path) {
        Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err),
        _ => Ok(()),
    }
}

/// Whether `path` holds a namespace (a mounted `nsfs` file).
pub fn is_namespace(path: &Path) -> bool {
    let Ok(target) = c_path(path) else {
        return false;
    };
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    let found = unsafe { libc::statfs(target.as_ptr(), &mut stat) };
    found == 0 && stat.f_type as i64 == NSFS_MAGIC
}

/// Runs `f` on a thread that has entered the network namespace at
/// `path`: a socket it opens lives in the pod's network (a connection to
/// the pod's `127.0.0.1`, a probe of a port it binds there).
pub fn run_in<T: Send + 'static>(
    path: &Path,
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<T> {
    let namespace = File::open(path)?;
    std::thread::spawn(move || -> io::Result<T> {
        check(unsafe { libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNET) })?;
        Ok(f())
    })
    .join()
    .unwrap_or_else(|_| Err(io::Error::other("the namespace thread panicked")))
}

/// Opens the namespace at `path` for a child process to enter before it
/// execs (see [`enter_fd`]); the file is closed on exec.
pub fn open(path: &Path) -> io::Result<std::os::fd::OwnedFd> {
    File::open(path).map(std::os::fd::OwnedFd::from)
}

/// In a forked child before exec: enters the network namespace open at
/// `fd`. Only setns(2), which is async-signal-safe.
pub fn enter_fd(fd: std::os::fd::RawFd) -> io::Result<()> {
    check(unsafe { libc::setns(fd, libc::CLONE_NEWNET) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Root, with network namespaces: else the test says it was skipped
    /// (and fails under CI=true, where they must be there).
    pub(crate) fn namespaces_or_skip(test: &str) -> bool {
        let root = unsafe { libc::geteuid() } == 0;
        let there = Path::new("/proc/self/ns/net").exists();
        if root && there {
            return true;
        }
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{test}: needs root and network namespaces, which CI must have");
        }
        eprintln!("{test}: skipped: needs root and network namespaces (run as root)");
        false
    }

    #[test]
    fn a_namespace_lives_at_its_path_until_removed() {
        if !namespaces_or_skip("a_namespace_lives_at_its_path_until_removed") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("skiff-test-ns");
        assert!(!is_namespace(&path));
        create(&path).unwrap();
        assert!(is_namespace(&path));
        // Again: the same namespace is kept.
        create(&path).unwrap();
        let inode =
            |p: &Path| std::fs::metadata(p).map(|m| std::os::unix::fs::MetadataExt::ino(&m));
        let first = inode(&path).unwrap();
        create(&path).unwrap();
        assert_eq!(inode(&path).unwrap(), first);
        // Its own network: a port bound in it answers there, not on the
        // host.
        let (port, listener) = run_in(&path, || {
            let up = std::process::Command::new("ip")
                .args(["link", "set", "lo", "up"])
                .status()
                .map(|s| s.success());
            assert!(matches!(up, Ok(true)), "ip link set lo up: {up:?}");
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            (listener.local_addr().unwrap().port(), listener)
        })
        .unwrap();
        let inside = run_in(&path, move || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(inside.unwrap(), "the port does not answer in its namespace");
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "a port bound in the namespace answered on the host"
        );
        drop(listener);
        remove(&path).unwrap();
        assert!(!path.exists());
        // Removing what is gone is fine.
        remove(&path).unwrap();
    }
}
