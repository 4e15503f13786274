//! A new member's data directory made from a snapshot file (etcd's
//! `snapshot restore`): the state tree filled from the snapshot, the log
//! empty, and the identity of the member in its new cluster. Revisions
//! continue from the snapshot's.

use std::path::{Path, PathBuf};

use super::{read_file, Restored, SnapshotError};
use crate::node::cluster::{check_data_dir, ClusterConfig};

/// Writes the state in `file` (a snapshot of skiff or of etcd) into a new
/// data directory `data_dir` for member `cluster.name` of a new cluster
/// (`None`: a member alone). Nothing is written unless the whole file
/// reads; the directory must not exist yet.
pub fn restore_data_dir(
    file: &[u8],
    data_dir: &Path,
    cluster: Option<&ClusterConfig>,
) -> Result<Restored, SnapshotError> {
    let restored = read_file(file)?;
    let identity = cluster.map(ClusterConfig::identity).transpose()?;
    if data_dir.exists() {
        return Err(SnapshotError::Invalid(format!(
            "data directory {} already exists; restore into a new one",
            data_dir.display()
        )));
    }
    // Made aside, then moved into place: a failure leaves no half a member.
    let building = sibling(data_dir, ".restoring");
    let _ = std::fs::remove_dir_all(&building);
    let io = |what: &str| {
        let what = format!("{what} in {}", building.display());
        move |e| SnapshotError::Io(what, e)
    };
    std::fs::create_dir_all(&building).map_err(io("creating the data directory"))?;
    let result = (|| {
        write_state(&building.join(crate::node::STATE_DB), &restored)?;
        if let (Some(cluster), Some(identity)) = (cluster, &identity) {
            check_data_dir(&building, &cluster.name, identity)?;
        }
        std::fs::rename(&building, data_dir).map_err(io("moving the restored member into place"))
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&building);
    }
    result.map(|()| restored)
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

/// The state tree of a member, as `Store::open` reads it.
fn write_state(db_path: &Path, restored: &Restored) -> Result<(), SnapshotError> {
    let db = sled::Config::new()
        .path(db_path)
        .open()
        .map_err(crate::error::StoreError::from)?;
    let tree = db
        .open_tree(crate::node::STATE_TREE)
        .map_err(crate::error::StoreError::from)?;
    let mut batch = sled::Batch::default();
    for (key, value) in &restored.entries {
        batch.insert(key.as_slice(), value.as_slice());
    }
    tree.apply_batch(batch)
        .map_err(crate::error::StoreError::from)?;
    db.flush().map_err(crate::error::StoreError::from)?;
    Ok(())
}
