//! Where a benchmark keeps its data directories: a temporary directory
//! (under `./target` when there is one) removed afterwards, or one the user
//! names, of which only this run's subdirectories are touched.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

pub struct DataRoot {
    temp: Option<tempfile::TempDir>,
    path: PathBuf,
    /// Name prefixes of the subdirectories this run writes in a named root.
    ours: Vec<String>,
}

impl DataRoot {
    /// `requested`, or a new temporary directory named `temp_prefix…`. In a
    /// requested directory, subdirectories starting with one of `ours` are
    /// this run's: an earlier run's are refused, and they are removed at
    /// the end.
    pub fn create(requested: Option<&Path>, temp_prefix: &str, ours: &[&str]) -> Result<DataRoot> {
        let ours: Vec<String> = ours.iter().map(|p| p.to_string()).collect();
        if let Some(dir) = requested {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating the data directory {}", dir.display()))?;
            let path = dir.canonicalize()?;
            for entry in std::fs::read_dir(&path)?.filter_map(|e| e.ok()) {
                let name = entry.file_name().to_string_lossy().into_owned();
                if let Some(prefix) = ours.iter().find(|p| name.starts_with(p.as_str())) {
                    bail!(
                        "{} already holds {prefix}* directories of an earlier run; remove them or pass another --data-dir",
                        path.display()
                    );
                }
            }
            return Ok(DataRoot {
                temp: None,
                path,
                ours,
            });
        }
        let parent = if Path::new("target").is_dir() {
            PathBuf::from("target")
        } else {
            std::env::temp_dir()
        };
        let temp = tempfile::Builder::new()
            .prefix(temp_prefix)
            .tempdir_in(&parent)
            .with_context(|| format!("creating a temporary directory in {}", parent.display()))?;
        let path = temp.path().canonicalize()?;
        Ok(DataRoot {
            temp: Some(temp),
            path,
            ours,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A fresh, empty subdirectory: a benchmark never runs on old data.
    pub fn subdir(&self, name: &str) -> Result<PathBuf> {
        let dir = self.path.join(name);
        if dir.exists() && std::fs::read_dir(&dir)?.next().is_some() {
            bail!(
                "{} is not empty; remove it or pass another --data-dir",
                dir.display()
            );
        }
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(dir)
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
                    if self.ours.iter().any(|p| name.starts_with(p.as_str())) {
                        std::fs::remove_dir_all(entry.path())
                            .with_context(|| format!("removing {}", entry.path().display()))?;
                    }
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_root_keeps_what_is_not_ours() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("mine-not")).unwrap();
        let root = DataRoot::create(Some(dir.path()), "x-", &["ops"]).unwrap();
        root.subdir("ops").unwrap();
        assert!(
            DataRoot::create(Some(dir.path()), "x-", &["ops"]).is_err(),
            "an earlier run's"
        );
        root.remove().unwrap();
        assert!(!dir.path().join("ops").exists());
        assert!(dir.path().join("mine-not").exists());
    }
}
