//! The kubeconfig `skiff up` and `skiff server` write, so that kubectl and
//! client libraries find the API with no other setup.

use std::net::SocketAddr;
use std::path::Path;

use anyhow::{Context, Result};

/// The kubeconfig text for an API at `addr`.
pub fn render(addr: SocketAddr) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: skiff
  cluster:
    server: http://{addr}
contexts:
- name: skiff
  context:
    cluster: skiff
    user: skiff
    namespace: default
current-context: skiff
preferences: {{}}
users:
- name: skiff
  user: {{}}
"
    )
}

/// Writes the kubeconfig for `addr` to `path` (through a temporary file,
/// so a reader never sees half of it).
pub fn write(path: &Path, addr: SocketAddr) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let partial = path.with_extension("partial");
    std::fs::write(&partial, render(addr))
        .and_then(|()| std::fs::rename(&partial, path))
        .with_context(|| format!("writing the kubeconfig {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubeconfig_points_at_the_api() {
        let text = render("127.0.0.1:6443".parse().unwrap());
        assert!(text.contains("server: http://127.0.0.1:6443"));
        assert!(text.contains("current-context: skiff"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/kubeconfig");
        write(&path, "127.0.0.1:1".parse().unwrap()).unwrap();
        assert!(std::fs::read_to_string(path)
            .unwrap()
            .contains("127.0.0.1:1"));
    }
}
