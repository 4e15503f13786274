//! A pod's own `/etc/hosts` and `/etc/resolv.conf`, as containers see
//! theirs: written by the kubelet when the pod's network is set up, and
//! bind-mounted over the host's in a mount namespace of each of the pod's
//! processes (containers, exec, exec probes) before they exec. They live
//! beside the namespaces: `/run/skiff-pods/<uid>/` for `/run/netns/skiff-<uid>`.
//! In the same mount namespace a container's volumes are bind-mounted at
//! their mountPaths, so that they are where the container looks and not
//! on the host.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use crate::volumes::BindMount;

/// The directory of the files of the pod whose namespace is `netns`.
pub fn dir_for(netns: &Path) -> PathBuf {
    let name = netns
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let uid = name.strip_prefix(super::NETNS_PREFIX).unwrap_or(&name);
    let parent = netns
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("/"));
    parent.join("skiff-pods").join(uid)
}

/// The pod's hosts file, as the kubelet writes it: localhost, the IPv6
/// names, the pod's own address under its hostname, then its
/// `hostAliases`.
pub fn hosts_file(pod: &Pod, ip: &str) -> String {
    let spec = pod.spec.as_ref();
    let hostname = spec
        .and_then(|s| s.hostname.clone())
        .filter(|h| !h.is_empty())
        .or_else(|| pod.metadata.name.clone())
        .unwrap_or_default();
    let mut text = String::from(
        "# Kubernetes-managed hosts file.\n\
         127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\n\
         fe00::0\tip6-mcastprefix\n\
         fe00::1\tip6-allnodes\n\
         fe00::2\tip6-allrouters\n",
    );
    text.push_str(&format!("{ip}\t{hostname}\n"));
    let aliases = spec
        .and_then(|s| s.host_aliases.clone())
        .unwrap_or_default();
    if !aliases.is_empty() {
        text.push_str("\n# Entries added by HostAliases.\n");
        for alias in aliases {
            let names = alias.hostnames.unwrap_or_default().join("\t");
            text.push_str(&format!("{}\t{names}\n", alias.ip));
        }
    }
    text
}

/// The host's resolver configuration, which pods of `dnsPolicy: Default`
/// get and the others' search paths extend.
pub const HOST_RESOLV_CONF: &str = "/etc/resolv.conf";

/// Writes the pod's files for its namespace `netns`: its hosts file, and
/// its resolver configuration by its `dnsPolicy` (the cluster DNS `dns`,
/// the host's, or only its `dnsConfig`).
pub fn write(
    netns: &Path,
    pod: &Pod,
    ip: &str,
    dns: &super::resolv::ClusterDns<'_>,
) -> io::Result<()> {
    write_in(&dir_for(netns), &hosts_file(pod, ip), pod, dns)
}

/// The host's hosts file, which pods in the host's network get.
pub const HOST_HOSTS: &str = "/etc/hosts";

/// Writes the files of a pod in the host's network into `dir`: the host's
/// hosts file, as the kubelet gives such pods, and its resolver
/// configuration by its `dnsPolicy` (`ClusterFirstWithHostNet` the cluster
/// DNS, `ClusterFirst` the host's).
pub fn write_host_network(
    dir: &Path,
    pod: &Pod,
    dns: &super::resolv::ClusterDns<'_>,
) -> io::Result<()> {
    let host = match std::fs::read_to_string(HOST_HOSTS) {
        Ok(text) => text,
        Err(err) if err.kind() == io::ErrorKind::NotFound => String::new(),
        Err(err) => return Err(err),
    };
    let hosts = format!("# Kubernetes-managed hosts file (host network).\n{host}");
    write_in(dir, &hosts, pod, dns)
}

/// Writes `hosts` and the pod's resolver configuration into `dir`.
fn write_in(
    dir: &Path,
    hosts: &str,
    pod: &Pod,
    dns: &super::resolv::ClusterDns<'_>,
) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("hosts"), hosts)?;
    // No file on the host: no nameservers of its own, as with an empty one.
    let host = match std::fs::read_to_string(HOST_RESOLV_CONF) {
        Ok(text) => super::resolv::ResolverConfig::parse(&text),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Default::default(),
        Err(err) => return Err(err),
    };
    let formed = super::resolv::pod_dns(pod, &host, dns);
    for warning in &formed.warnings {
        tracing::warn!(
            pod = pod.metadata.name.as_deref().unwrap_or_default(),
            namespace = pod.metadata.namespace.as_deref().unwrap_or_default(),
            warning = %warning,
            "DNSConfigForming"
        );
    }
    std::fs::write(dir.join("resolv.conf"), formed.config.render())
}

/// Removes the pod's files (of its namespace `netns`); none there is
/// nothing to do.
pub fn remove(netns: &Path) -> io::Result<()> {
    remove_dir(&dir_for(netns))
}

/// Removes the pod's files in `dir`; none there is nothing to do.
pub fn remove_dir(dir: &Path) -> io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err),
        _ => Ok(()),
    }
}

/// What a process of the pod bind-mounts before it execs, prepared before
/// the fork (no allocation after it).
#[derive(Clone)]
pub struct Mounts {
    binds: Vec<(CString, CString)>,
    volumes: Vec<VolumeBind>,
    /// The child's copies of the volumes' sources, detached mount trees
    /// taken (open_tree(2)) before any volume is mounted, so that a volume
    /// mounted over the path of a later one's source cannot hide it. Made
    /// before the fork; the child writes its own copy of the memory.
    trees: Arc<[AtomicI32]>,
}

/// One volume bind-mounted at its mountPath.
#[derive(Clone)]
struct VolumeBind {
    source: CString,
    target: CString,
    read_only: bool,
}

/// The mounts for a process of the pod whose files are in `dir`: each of
/// them whose target the host has, and each of `volumes` at its mountPath
/// (see [`mount_point`] for where one can be). `None` when there is
/// nothing to mount (a sandbox of an older kubelet, no volumes).
pub fn prepare(dir: &Path, volumes: &[BindMount]) -> Option<Mounts> {
    let binds: Vec<(CString, CString)> =
        [("hosts", "/etc/hosts"), ("resolv.conf", "/etc/resolv.conf")]
            .iter()
            .filter(|(file, target)| dir.join(file).is_file() && Path::new(target).exists())
            .filter_map(|(file, target)| {
                let source = CString::new(dir.join(file).as_os_str().as_bytes()).ok()?;
                Some((source, CString::new(*target).ok()?))
            })
            .collect();
    let (accepted, refused) = mountable(volumes);
    for (volume, why) in refused {
        // The kubelet said so when it started the container.
        tracing::debug!(mount_path = %volume.mount_path, reason = %why, "volume not mounted at its mountPath");
    }
    let volume_binds: Vec<VolumeBind> = accepted.iter().filter_map(volume_bind).collect();
    let trees = volume_binds.iter().map(|_| AtomicI32::new(-1)).collect();
    (!binds.is_empty() || !volume_binds.is_empty()).then_some(Mounts {
        binds,
        volumes: volume_binds,
        trees,
    })
}

/// Which of a container's `volumes` (shallowest mountPath first) can be
/// mounted at their mountPaths, making their mount points as
/// [`mount_point`] does; and the others, with why not. A volume that is
/// not mounted there is still the container's through `SKIFF_VOLUME_*`
/// and the pod root.
pub fn mountable(volumes: &[BindMount]) -> (Vec<BindMount>, Vec<(BindMount, String)>) {
    let mut accepted: Vec<BindMount> = Vec::new();
    let mut refused = Vec::new();
    for volume in volumes {
        let checked = std::fs::metadata(&volume.source)
            .map_err(|e| format!("its source {}: {e}", volume.source.display()))
            .and_then(|source| mount_point(volume, source.is_dir(), &accepted));
        match checked {
            Ok(()) => accepted.push(volume.clone()),
            Err(why) => refused.push((volume.clone(), why)),
        }
    }
    (accepted, refused)
}

/// The mount of `volume` as the child makes it; `None` for a path with a
/// NUL byte, which no path on the host has.
fn volume_bind(volume: &BindMount) -> Option<VolumeBind> {
    Some(VolumeBind {
        source: CString::new(volume.source.as_os_str().as_bytes()).ok()?,
        target: CString::new(volume.mount_path.as_bytes()).ok()?,
        read_only: volume.read_only,
    })
}

/// The directories under which a missing mount point may be made on the
/// host: `/run` (`/var/run`), a tmpfs emptied at boot, where only empty
/// directories (or files) are left. Elsewhere the host's filesystem is
/// never changed.
const MOUNT_POINT_ROOT: &str = "/run";

/// Makes sure `volume`'s mountPath can be mounted on, seen from the
/// container's mount namespace once the `earlier` mounts are made: inside
/// an earlier volume (a nested mount) it is made there if missing; else
/// it must exist on the host, or lie under [`MOUNT_POINT_ROOT`], where the
/// missing directories (and a file, for a file's mount) are made empty.
/// The kind (directory or file) must match the source's.
pub fn mount_point(
    volume: &BindMount,
    source_is_dir: bool,
    earlier: &[BindMount],
) -> Result<(), String> {
    let target = Path::new(&volume.mount_path);
    let relative = target
        .strip_prefix("/")
        .map_err(|_| "the mountPath is not absolute".to_string())?;
    if relative.as_os_str().is_empty()
        || !relative
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
    {
        return Err("the mountPath must name a path below /, without '..'".into());
    }
    // The innermost earlier mount this one is nested in.
    let outer = earlier
        .iter()
        .filter(|e| target.starts_with(&e.mount_path) && target != Path::new(&e.mount_path))
        .max_by_key(|e| e.mount_path.len());
    let (host_path, may_create) = match outer {
        Some(outer) => {
            let rest = target
                .strip_prefix(&outer.mount_path)
                .map_err(|_| "a nested mountPath outside its volume".to_string())?;
            (outer.source.join(rest), true)
        }
        None => (target.to_path_buf(), false),
    };
    if let Ok(meta) = std::fs::metadata(&host_path) {
        return match (meta.is_dir(), source_is_dir) {
            (true, true) | (false, false) => Ok(()),
            (false, true) => Err(format!(
                "{} is a file and the volume a directory",
                volume.mount_path
            )),
            (true, false) => Err(format!(
                "{} is a directory and the volume a file",
                volume.mount_path
            )),
        };
    }
    if !may_create {
        let (existing, _) = existing_ancestor(&host_path)?;
        if !existing.starts_with(MOUNT_POINT_ROOT) {
            return Err(format!(
                "{} does not exist on this host, and mount points are made only under /run",
                volume.mount_path
            ));
        }
    }
    make_mount_point(&host_path, source_is_dir)
        .map_err(|e| format!("making the mount point {}: {e}", host_path.display()))
}

/// The deepest ancestor of `path` that exists, resolved (`/var/run` is
/// `/run`), and what is missing below it.
fn existing_ancestor(path: &Path) -> Result<(PathBuf, PathBuf), String> {
    let mut missing = Vec::new();
    let mut at = path;
    loop {
        if let Ok(resolved) = std::fs::canonicalize(at) {
            let rest: PathBuf = missing.iter().rev().collect();
            return Ok((resolved, rest));
        }
        let Some(name) = at.file_name() else {
            return Err(format!("no part of {} exists", path.display()));
        };
        missing.push(name.to_os_string());
        at = at
            .parent()
            .ok_or_else(|| format!("no part of {} exists", path.display()))?;
    }
}

/// Creates `path` (its parents as directories) as an empty directory or
/// an empty file.
fn make_mount_point(path: &Path, directory: bool) -> io::Result<()> {
    if directory {
        return std::fs::create_dir_all(path);
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map(drop)
}

/// What [`open_tree`] answers when the kernel has no open_tree(2).
const NO_OPEN_TREE: i32 = -2;

/// A detached copy of the mount tree at `path` (open_tree(2) with
/// `OPEN_TREE_CLONE | AT_RECURSIVE`, closed on exec); [`NO_OPEN_TREE`]
/// when the kernel lacks the call. A raw system call only.
fn open_tree(path: &std::ffi::CStr) -> io::Result<i32> {
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    let flags =
        OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | libc::AT_RECURSIVE as libc::c_uint;
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, path.as_ptr(), flags) };
    if fd >= 0 {
        return Ok(fd as i32);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::ENOSYS) => Ok(NO_OPEN_TREE),
        _ => Err(err),
    }
}

/// Attaches the detached tree `tree` at `target` (move_mount(2)). A raw
/// system call only.
fn move_mount(tree: i32, target: &std::ffi::CStr) -> io::Result<()> {
    const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 4;
    let moved = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree,
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    match moved {
        -1 => Err(io::Error::last_os_error()),
        _ => Ok(()),
    }
}

/// In a forked child before exec: a mount namespace of its own, where the
/// host's mounts no longer propagate back, with the pod's files over the
/// host's and its volumes at their mountPaths (read-only where asked).
/// Only unshare(2), mount(2), open_tree(2), move_mount(2) and close(2),
/// which allocate nothing.
pub fn enter(mounts: &Mounts) -> io::Result<()> {
    let check = |result: libc::c_int| match result {
        -1 => Err(io::Error::last_os_error()),
        _ => Ok(()),
    };
    check(unsafe { libc::unshare(libc::CLONE_NEWNS) })?;
    check(unsafe {
        libc::mount(
            c"none".as_ptr(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        )
    })?;
    for (source, target) in &mounts.binds {
        super::netns::bind_mount(source, target)?;
    }
    // Every source first, then every target: a volume at /tmp must not
    // hide the source of one at /etc/config that lives under /tmp.
    for (volume, tree) in mounts.volumes.iter().zip(mounts.trees.iter()) {
        tree.store(open_tree(&volume.source)?, Ordering::Relaxed);
    }
    for (volume, tree) in mounts.volumes.iter().zip(mounts.trees.iter()) {
        let tree = tree.load(Ordering::Relaxed);
        match tree {
            // Without open_tree(2) (Linux before 5.2): a bind mount of the
            // source's path, which an earlier volume may hide.
            NO_OPEN_TREE => check(unsafe {
                libc::mount(
                    volume.source.as_ptr(),
                    volume.target.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                )
            })?,
            tree => {
                let moved = move_mount(tree, &volume.target);
                unsafe { libc::close(tree) };
                moved?;
            }
        }
        if volume.read_only {
            check(unsafe {
                libc::mount(
                    std::ptr::null(),
                    volume.target.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY,
                    std::ptr::null(),
                )
            })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::api::core::v1::{HostAlias, PodSpec};

    fn bind(source: &Path, mount_path: &str, read_only: bool) -> BindMount {
        BindMount {
            source: source.to_path_buf(),
            mount_path: mount_path.into(),
            read_only,
        }
    }

    /// A directory of this test's own under /run, removed when dropped.
    struct RunDir(PathBuf);

    impl RunDir {
        fn new(test: &str) -> Option<RunDir> {
            let dir = PathBuf::from(format!("/run/skiff-test-{test}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).ok()?;
            Some(RunDir(dir))
        }

        fn path(&self, rest: &str) -> String {
            format!("{}/{rest}", self.0.display())
        }
    }

    impl Drop for RunDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn mount_points_are_made_only_under_run_or_inside_an_earlier_volume() {
        let volume = tempfile::tempdir().unwrap();
        let file = volume.path().join("file");
        std::fs::write(&file, "x").unwrap();
        // There on the host: nothing to make; of the wrong kind: refused.
        assert_eq!(
            mount_point(&bind(volume.path(), "/tmp", false), true, &[]),
            Ok(())
        );
        let wrong = mount_point(&bind(&file, "/tmp", false), false, &[]).unwrap_err();
        assert!(
            wrong.contains("is a directory and the volume a file"),
            "{wrong}"
        );
        // Missing outside /run: refused, and nothing is made.
        let outside = format!("/skiff-no-such-dir-{}/config", std::process::id());
        let refused = mount_point(&bind(volume.path(), &outside, false), true, &[]).unwrap_err();
        assert!(
            refused.contains("mount points are made only under /run"),
            "{refused}"
        );
        assert!(!Path::new(&outside).parent().unwrap().exists());
        let relative = mount_point(&bind(volume.path(), "etc/x", false), true, &[]).unwrap_err();
        assert!(relative.contains("not absolute"), "{relative}");
        let dots = mount_point(&bind(volume.path(), "/run/../etc", false), true, &[]).unwrap_err();
        assert!(dots.contains("without '..'"), "{dots}");
        // Nested in an earlier volume: made inside that volume.
        let outer = bind(volume.path(), "/data", false);
        let nested = bind(volume.path(), "/data/sub/dir", false);
        assert_eq!(
            mount_point(&nested, true, std::slice::from_ref(&outer)),
            Ok(())
        );
        assert!(volume.path().join("sub/dir").is_dir());
        // A mount nested in one that cannot be made is not made either,
        // and nothing is made for it.
        let missing_outer = bind(volume.path(), &outside, false);
        let inside_missing = bind(volume.path(), &format!("{outside}/inner"), false);
        let there = bind(volume.path(), "/tmp", false);
        let (accepted, refused) = mountable(&[there.clone(), missing_outer, inside_missing]);
        assert_eq!(accepted, [there]);
        assert_eq!(refused.len(), 2, "{refused:?}");
        assert!(!volume.path().join("inner").exists());

        // Under /run (through /var/run too): made, empty.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("mount points under /run: skipped, needs root");
            return;
        }
        let Some(run) = RunDir::new("points") else {
            eprintln!("mount points under /run: skipped, /run is not writable");
            return;
        };
        let dir_point = run.path("secrets/kubernetes.io/serviceaccount");
        let via_var = format!("/var{dir_point}");
        let target = if Path::new("/var/run").canonicalize().ok() == Some(PathBuf::from("/run")) {
            via_var
        } else {
            dir_point.clone()
        };
        assert_eq!(
            mount_point(&bind(volume.path(), &target, true), true, &[]),
            Ok(())
        );
        assert!(Path::new(&dir_point).is_dir());
        assert_eq!(std::fs::read_dir(&dir_point).unwrap().count(), 0, "empty");
        let file_point = run.path("config/app.conf");
        assert_eq!(
            mount_point(&bind(&file, &file_point, false), false, &[]),
            Ok(())
        );
        assert_eq!(std::fs::read(&file_point).unwrap(), b"", "an empty file");
    }

    #[test]
    fn a_process_sees_its_volumes_at_their_mount_paths_and_the_host_does_not() {
        use std::os::unix::process::CommandExt;
        let test = "a_process_sees_its_volumes_at_their_mount_paths_and_the_host_does_not";
        if unsafe { libc::geteuid() } != 0 || !Path::new("/proc/self/ns/mnt").exists() {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{test}: needs root and mount namespaces, which CI must have");
            }
            eprintln!("{test}: skipped: needs root and mount namespaces (run as root)");
            return;
        }
        let Some(run) = RunDir::new("binds") else {
            panic!("{test}: /run is not writable");
        };
        let volume = tempfile::tempdir().unwrap();
        std::fs::write(volume.path().join("token"), "secret-token").unwrap();
        let writable = tempfile::tempdir().unwrap();
        let target = run.path("secrets/kubernetes.io/serviceaccount");
        let scratch = run.path("scratch");
        // A volume mounted over the directory of a later volume's source
        // does not hide that source.
        let hidden = run.path("hide");
        std::fs::create_dir_all(format!("{hidden}/src")).unwrap();
        std::fs::write(format!("{hidden}/src/deep"), "deep").unwrap();
        let later = run.path("later");
        let volumes = [
            bind(volume.path(), &target, true),
            bind(writable.path(), &scratch, false),
            bind(writable.path(), &hidden, false),
            bind(Path::new(&format!("{hidden}/src")), &later, false),
        ];
        let no_pod = Path::new("/nonexistent/netns/skiff-none");
        let mounts = prepare(no_pod, &volumes).expect("volumes to mount");
        let script = format!(
            "cat {target}/token; echo; if echo x > {target}/new 2>/dev/null; then echo writable; else echo read-only; fi; echo kept > {scratch}/out; cat {later}/deep"
        );
        let entered = mounts.clone();
        let mut command = std::process::Command::new("sh");
        command.args(["-c", &script]);
        // SAFETY: unshare(2) and mount(2) only, on what prepare made.
        unsafe {
            command.pre_exec(move || enter(&entered));
        }
        let output = command.output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{stdout} {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(stdout, "secret-token\nread-only\ndeep");
        // The host has the mount point, empty, and none of the files.
        assert!(Path::new(&target).is_dir());
        assert!(!Path::new(&target).join("token").exists());
        assert!(!volume.path().join("new").exists());
        // Writes through a writable mount land in the volume.
        assert_eq!(
            std::fs::read_to_string(writable.path().join("out")).unwrap(),
            "kept\n"
        );
        assert!(!Path::new(&scratch).join("out").exists());
    }

    #[test]
    fn files_live_beside_the_namespaces() {
        assert_eq!(
            dir_for(Path::new("/run/netns/skiff-1234")),
            PathBuf::from("/run/skiff-pods/1234")
        );
    }

    #[test]
    fn the_hosts_file_names_the_pod_and_its_aliases() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("web-1".into());
        pod.spec = Some(PodSpec {
            host_aliases: Some(vec![HostAlias {
                ip: "10.1.2.3".into(),
                hostnames: Some(vec!["foo.local".into(), "bar.local".into()]),
            }]),
            ..Default::default()
        });
        let text = hosts_file(&pod, "10.244.0.7");
        assert!(text.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"));
        assert!(text.contains("\n10.244.0.7\tweb-1\n"), "{text}");
        assert!(
            text.ends_with("# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\n"),
            "{text}"
        );
        pod.spec.as_mut().unwrap().hostname = Some("named".into());
        assert!(hosts_file(&pod, "10.244.0.7").contains("\n10.244.0.7\tnamed\n"));
    }

    #[test]
    fn a_host_network_pod_gets_the_hosts_file_of_the_host_and_dns_by_its_policy() {
        let dir = tempfile::tempdir().unwrap();
        let servers = ["10.96.0.10".parse().unwrap()];
        let dns = super::super::resolv::ClusterDns {
            servers: &servers,
            domain: "cluster.local",
        };
        let pod = |policy: &str| Pod {
            metadata: kube::api::ObjectMeta {
                name: Some("agent".into()),
                namespace: Some("kube-system".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                host_network: Some(true),
                dns_policy: Some(policy.into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        write_host_network(dir.path(), &pod("ClusterFirstWithHostNet"), &dns).unwrap();
        let hosts = std::fs::read_to_string(dir.path().join("hosts")).unwrap();
        let host = std::fs::read_to_string(HOST_HOSTS).unwrap_or_default();
        assert_eq!(
            hosts,
            format!("# Kubernetes-managed hosts file (host network).\n{host}")
        );
        let resolv = std::fs::read_to_string(dir.path().join("resolv.conf")).unwrap();
        assert!(resolv.contains("nameserver 10.96.0.10"), "{resolv}");
        assert!(
            resolv.contains("search kube-system.svc.cluster.local svc.cluster.local cluster.local"),
            "{resolv}"
        );
        // ClusterFirst in the host's network resolves as the host does.
        write_host_network(dir.path(), &pod("ClusterFirst"), &dns).unwrap();
        let resolv = std::fs::read_to_string(dir.path().join("resolv.conf")).unwrap();
        assert!(!resolv.contains("10.96.0.10"), "{resolv}");
        remove_dir(dir.path()).unwrap();
        assert!(!dir.path().exists());
        remove_dir(dir.path()).unwrap();
    }
}
