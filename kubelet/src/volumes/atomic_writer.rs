//! Writes a volume's files so readers see the old set or the new, never a
//! mix: files go to a fresh `..<timestamp>` directory, then the `..data`
//! symlink swaps to it (top-level names link through it), as AtomicWriter does.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Component, Path};

/// One file of a volume: its bytes and permission bits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileEntry {
    pub data: Vec<u8>,
    pub mode: u32,
}

/// Relative path → file, the whole content of one volume.
pub(crate) type Payload = BTreeMap<String, FileEntry>;

const DATA_LINK: &str = "..data";
const DATA_LINK_NEXT: &str = "..data_tmp";

/// Makes `dir` hold exactly `payload`; does nothing when it already does.
pub(crate) fn write_payload(dir: &Path, payload: &Payload) -> io::Result<()> {
    for path in payload.keys() {
        check_relative_path(path)?;
    }
    std::fs::create_dir_all(dir)?;
    let current = std::fs::read_link(dir.join(DATA_LINK)).ok();
    let unchanged = match &current {
        Some(name) => holds_exactly(&dir.join(name), payload)?,
        None => false,
    };
    if !unchanged {
        let name = fresh_dir_name();
        write_files(&dir.join(&name), payload)?;
        swap_data_link(dir, &name)?;
    }
    link_top_level(dir, payload)?;
    if let Some(old) = current.filter(|_| !unchanged) {
        remove_old(&dir.join(old))?;
    }
    Ok(())
}

/// Rejects absolute paths and any `..` so a key cannot escape the volume.
fn check_relative_path(path: &str) -> io::Result<()> {
    let clean = Path::new(path)
        .components()
        .all(|c| matches!(c, Component::Normal(_)));
    if path.is_empty() || !clean || path.starts_with("..") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid path {path:?}: must be relative and must not contain '..'"),
        ));
    }
    Ok(())
}

fn fresh_dir_name() -> String {
    let stamp = jiff::Timestamp::now().strftime("%Y_%m_%d_%H_%M_%S");
    format!("..{stamp}.{:08x}", rand::random::<u32>())
}

fn write_files(target: &Path, payload: &Payload) -> io::Result<()> {
    std::fs::create_dir_all(target)?;
    std::fs::set_permissions(target, std::fs::Permissions::from_mode(0o755))?;
    for (path, file) in payload {
        let full = target.join(path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&full, &file.data)?;
        std::fs::set_permissions(&full, std::fs::Permissions::from_mode(file.mode & 0o7777))?;
    }
    Ok(())
}

/// Points `..data` at `name` with one rename, the atomic step.
fn swap_data_link(dir: &Path, name: &str) -> io::Result<()> {
    let next = dir.join(DATA_LINK_NEXT);
    match std::fs::remove_file(&next) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    symlink(name, &next)?;
    std::fs::rename(&next, dir.join(DATA_LINK))
}

/// `<dir>/<first component>` → `..data/<first component>` for each path,
/// and no other visible links.
fn link_top_level(dir: &Path, payload: &Payload) -> io::Result<()> {
    let wanted: BTreeSet<&str> = payload.keys().filter_map(|p| p.split('/').next()).collect();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_link = entry.file_type()?.is_symlink();
        if is_link && !name.starts_with("..") && !wanted.contains(name.as_str()) {
            std::fs::remove_file(entry.path())?;
        }
    }
    for name in wanted {
        let link = dir.join(name);
        let target = Path::new(DATA_LINK).join(name);
        if std::fs::read_link(&link).ok().as_deref() != Some(target.as_path()) {
            let _ = std::fs::remove_file(&link);
            symlink(&target, &link)?;
        }
    }
    Ok(())
}

/// Whether `dir` holds exactly the files of `payload`, bytes and modes.
fn holds_exactly(dir: &Path, payload: &Payload) -> io::Result<bool> {
    let mut found = Vec::new();
    if collect_files(dir, "", &mut found).is_err() || found.len() != payload.len() {
        return Ok(false);
    }
    for path in found {
        let Some(file) = payload.get(&path) else {
            return Ok(false);
        };
        let full = dir.join(&path);
        let mode = std::fs::metadata(&full)?.permissions().mode() & 0o7777;
        if mode != file.mode & 0o7777 || std::fs::read(&full)? != file.data {
            return Ok(false);
        }
    }
    Ok(true)
}

fn collect_files(dir: &Path, prefix: &str, found: &mut Vec<String>) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
        if entry.file_type()?.is_dir() {
            collect_files(&entry.path(), &format!("{name}/"), found)?;
        } else {
            found.push(name);
        }
    }
    Ok(())
}

fn remove_old(old: &Path) -> io::Result<()> {
    match std::fs::remove_dir_all(old) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(data: &str, mode: u32) -> FileEntry {
        FileEntry {
            data: data.as_bytes().to_vec(),
            mode,
        }
    }

    #[test]
    fn rewrites_swap_the_data_link_and_drop_stale_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = Payload::from([
            ("a".to_string(), file("1", 0o644)),
            ("sub/b".to_string(), file("2", 0o600)),
        ]);
        write_payload(dir.path(), &first).expect("first write");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("sub/b")).expect("b"),
            "2"
        );
        let mode = std::fs::metadata(dir.path().join("sub/b"))
            .expect("b")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let first_target = std::fs::read_link(dir.path().join(DATA_LINK)).expect("..data");

        write_payload(dir.path(), &first).expect("same write");
        let same_target = std::fs::read_link(dir.path().join(DATA_LINK)).expect("..data");
        assert_eq!(
            first_target, same_target,
            "unchanged content keeps its directory"
        );

        let second = Payload::from([("a".to_string(), file("3", 0o644))]);
        write_payload(dir.path(), &second).expect("second write");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a")).expect("a"),
            "3"
        );
        assert!(!dir.path().join("sub").exists(), "stale name removed");
        assert!(
            !dir.path().join(first_target).exists(),
            "old directory removed"
        );
    }

    #[test]
    fn escaping_paths_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        for bad in ["../x", "/etc/passwd", "a/../../b", "..hidden", ""] {
            let payload = Payload::from([(bad.to_string(), file("x", 0o644))]);
            let err = write_payload(dir.path(), &payload).expect_err(bad);
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{bad}");
        }
    }
}
