//! Writing files that hold secrets: readable by their owner only, and
//! replaced whole (through a temporary file) so a reader never sees half
//! of one.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::{Context, Result};

/// Writes `contents` to `path` with mode 0600, creating its directory.
pub fn write_private(path: &Path, contents: &[u8]) -> Result<()> {
    let partial = private_partial(path, contents)?;
    std::fs::rename(&partial, path).with_context(|| format!("writing {}", path.display()))
}

/// Writes `contents` to `path` (mode 0600) unless it exists already: of
/// several processes making the same file at once, the first wins and
/// the others read what it wrote. The file's contents.
pub fn create_private(path: &Path, contents: &[u8]) -> Result<Vec<u8>> {
    let partial = private_partial(path, contents)?;
    let linked = std::fs::hard_link(&partial, path);
    let _ = std::fs::remove_file(&partial);
    match linked {
        Ok(()) => Ok(contents.to_vec()),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::read(path).with_context(|| format!("reading {}", path.display()))
        }
        Err(err) => Err(err).with_context(|| format!("writing {}", path.display())),
    }
}

/// A temporary file beside `path`, named for this process and call, with
/// `contents` synced to disk.
fn private_partial(path: &Path, contents: &[u8]) -> Result<std::path::PathBuf> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(
        ".partial-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let partial = path.with_file_name(name);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .and_then(|mut file| {
            file.write_all(contents)?;
            file.sync_all()
        })
        .with_context(|| format!("writing {}", partial.display()))?;
    Ok(partial)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn private_files_are_the_owners_alone_and_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/secret");
        write_private(&path, b"one").unwrap();
        write_private(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn the_first_to_create_a_private_file_wins() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let path = path.clone();
                std::thread::spawn(move || {
                    create_private(&path, format!("key {i}").as_bytes()).unwrap()
                })
            })
            .collect();
        let seen: Vec<Vec<u8>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let on_disk = std::fs::read(&path).unwrap();
        assert!(seen.iter().all(|s| *s == on_disk));
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
