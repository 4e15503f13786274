//! A pod's own `/etc/hosts` and `/etc/resolv.conf`, as containers see
//! theirs: written by the kubelet when the pod's network is set up, and
//! bind-mounted over the host's in a mount namespace of each of the pod's
//! processes (containers, exec, exec probes) before they exec. They live
//! beside the namespaces: `/run/skiff-pods/<uid>/` for `/run/netns/skiff-<uid>`.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;

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

/// Writes the pod's files for its namespace `netns`: its hosts file, and
/// the host's resolver configuration (there is no cluster DNS yet, so
/// every `dnsPolicy` resolves as `Default` does).
pub fn write(netns: &Path, pod: &Pod, ip: &str) -> io::Result<()> {
    let dir = dir_for(netns);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("hosts"), hosts_file(pod, ip))?;
    let resolv = std::fs::read("/etc/resolv.conf").unwrap_or_default();
    std::fs::write(dir.join("resolv.conf"), resolv)
}

/// Removes the pod's files; none there is nothing to do.
pub fn remove(netns: &Path) -> io::Result<()> {
    match std::fs::remove_dir_all(dir_for(netns)) {
        Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err),
        _ => Ok(()),
    }
}

/// What a process of the pod bind-mounts before it execs, prepared before
/// the fork (no allocation after it).
#[derive(Clone)]
pub struct Mounts {
    binds: Vec<(CString, CString)>,
}

/// The mounts for a process of the pod whose namespace is `netns`: each
/// of the pod's files whose target the host has. `None` when the pod has
/// no files (a sandbox of an older kubelet).
pub fn prepare(netns: &Path) -> Option<Mounts> {
    let dir = dir_for(netns);
    let binds: Vec<(CString, CString)> =
        [("hosts", "/etc/hosts"), ("resolv.conf", "/etc/resolv.conf")]
            .iter()
            .filter(|(file, target)| dir.join(file).is_file() && Path::new(target).exists())
            .filter_map(|(file, target)| {
                let source = CString::new(dir.join(file).as_os_str().as_bytes()).ok()?;
                Some((source, CString::new(*target).ok()?))
            })
            .collect();
    (!binds.is_empty()).then_some(Mounts { binds })
}

/// In a forked child before exec: a mount namespace of its own, where the
/// host's mounts no longer propagate back, with the pod's files over the
/// host's. Only unshare(2) and mount(2), which are async-signal-safe.
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::api::core::v1::{HostAlias, PodSpec};

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
}
