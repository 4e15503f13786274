//! `DIR/cluster.json`: what a local cluster is made of (names, pids,
//! client and peer addresses), for people and scripts, and for `cluster up`
//! to restart the same cluster on the same data.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

pub const FILE_NAME: &str = "cluster.json";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterManifest {
    /// Every member answers and a leader is elected.
    pub ready: bool,
    /// Every member's client address, comma-separated, for `--endpoints`.
    pub endpoints: String,
    pub members: Vec<ManifestMember>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestMember {
    pub name: String,
    /// The member's process; null once the cluster is stopped.
    pub pid: Option<u32>,
    /// etcd v3 gRPC API, host:port.
    pub client: String,
    /// Raft peer transport, host:port.
    pub peer: String,
    /// The member's Kubernetes API, host:port.
    pub api: Option<String>,
    pub data_dir: PathBuf,
    /// The member's stdout and stderr.
    pub log: PathBuf,
}

pub fn path(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

/// The manifest in `dir`, if a cluster was ever started there.
pub fn load(dir: &Path) -> Result<Option<ClusterManifest>> {
    let path = path(dir);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err).with_context(|| format!("reading {}", path.display())),
    };
    let manifest = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a cluster manifest; remove it or choose another --data-dir",
            path.display()
        )
    })?;
    Ok(Some(manifest))
}

/// Writes the manifest whole or not at all (a reader never sees half).
pub fn save(dir: &Path, manifest: &ClusterManifest) -> Result<()> {
    let path = path(dir);
    let partial = dir.join(format!("{FILE_NAME}.tmp"));
    let mut text = serde_json::to_string_pretty(manifest).context("encoding cluster.json")?;
    text.push('\n');
    std::fs::write(&partial, text)
        .and_then(|()| std::fs::rename(&partial, &path))
        .with_context(|| format!("writing {}", path.display()))
}
