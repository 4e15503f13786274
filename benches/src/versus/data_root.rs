//! Where a versus run keeps the members' data directories: a temporary
//! directory removed afterwards, or one the user names, of which only this
//! run's subdirectories are removed.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::system::System;

/// The directory holding the members' data directories: a temporary one,
/// or the one the user named (only our subdirectories are removed).
pub struct DataRoot {
    temp: Option<tempfile::TempDir>,
    path: PathBuf,
}

impl DataRoot {
    pub fn create(requested: Option<&Path>) -> Result<DataRoot> {
        if let Some(dir) = requested {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating the data directory {}", dir.display()))?;
            let path = dir.canonicalize()?;
            for system in [System::Skiff, System::Etcd] {
                let prefix = format!("{}-", system.label());
                let taken = std::fs::read_dir(&path)?
                    .filter_map(|e| e.ok())
                    .any(|e| e.file_name().to_string_lossy().starts_with(&prefix));
                if taken {
                    bail!(
                        "{} already holds {prefix}* directories of an earlier run; remove them or pass another --data-dir",
                        path.display()
                    );
                }
            }
            return Ok(DataRoot { temp: None, path });
        }
        let parent = if Path::new("target").is_dir() {
            PathBuf::from("target")
        } else {
            std::env::temp_dir()
        };
        let temp = tempfile::Builder::new()
            .prefix("skiff-bench-versus-")
            .tempdir_in(&parent)
            .with_context(|| format!("creating a temporary directory in {}", parent.display()))?;
        let path = temp.path().canonicalize()?;
        Ok(DataRoot {
            temp: Some(temp),
            path,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes what this run wrote.
    pub fn remove(self) -> Result<()> {
        match self.temp {
            Some(temp) => temp
                .close()
                .context("removing the temporary data directory"),
            None => {
                for entry in std::fs::read_dir(&self.path)?.filter_map(|e| e.ok()) {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if name.starts_with("skiff-") || name.starts_with("etcd-") {
                        std::fs::remove_dir_all(entry.path())
                            .with_context(|| format!("removing {}", entry.path().display()))?;
                    }
                }
                Ok(())
            }
        }
    }
}
