//! hostPath `type` checks, in the kubelet's words: the OrCreate types make
//! what is missing, the others only look.

use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Checks (or creates) `path` as hostPath type `kind` asks; the error is
/// the reason the mount failed.
pub(super) fn check(path: &Path, kind: &str) -> Result<(), String> {
    if !path.is_absolute() {
        return Err(format!(
            "hostPath {} must be an absolute path",
            path.display()
        ));
    }
    let found = std::fs::metadata(path).ok().map(|m| m.file_type());
    let mismatch = |what: &str| {
        Err(format!(
            "hostPath type check failed: {} is not {what}",
            path.display()
        ))
    };
    match (kind, found) {
        ("", _) => Ok(()),
        ("DirectoryOrCreate", None) => create_directory(path),
        ("FileOrCreate", None) => create_file(path),
        ("Directory" | "DirectoryOrCreate", Some(t)) if t.is_dir() => Ok(()),
        ("Directory" | "DirectoryOrCreate", _) => mismatch("a directory"),
        ("File" | "FileOrCreate", Some(t)) if t.is_file() => Ok(()),
        ("File" | "FileOrCreate", _) => mismatch("a file"),
        ("Socket", Some(t)) if t.is_socket() => Ok(()),
        ("Socket", _) => mismatch("a socket file"),
        ("CharDevice", Some(t)) if t.is_char_device() => Ok(()),
        ("CharDevice", _) => mismatch("a character device"),
        ("BlockDevice", Some(t)) if t.is_block_device() => Ok(()),
        ("BlockDevice", _) => mismatch("a block device"),
        (other, _) => Err(format!("invalid HostPathType {other:?}")),
    }
}

fn create_directory(path: &Path) -> Result<(), String> {
    std::fs::create_dir_all(path)
        .and_then(|()| std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)))
        .map_err(|e| format!("cannot create hostPath directory {}: {e}", path.display()))
}

/// An empty 0644 file; its parent must exist, as in Kubernetes.
fn create_file(path: &Path) -> Result<(), String> {
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(path);
    match created {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(format!(
            "cannot create hostPath file {}: its directory does not exist",
            path.display()
        )),
        Err(e) => Err(format!(
            "cannot create hostPath file {}: {e}",
            path.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_check_or_create_what_they_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let new_dir = dir.path().join("a/b");
        check(&new_dir, "DirectoryOrCreate").expect("created");
        assert!(new_dir.is_dir());
        check(&new_dir, "Directory").expect("a directory");
        let new_file = dir.path().join("f");
        check(&new_file, "FileOrCreate").expect("created");
        assert!(new_file.is_file());
        check(&new_file, "File").expect("a file");
        check(&dir.path().join("nothing"), "").expect("no type, no check");

        let err = check(&new_file, "Directory").expect_err("file is no directory");
        assert_eq!(
            err,
            format!(
                "hostPath type check failed: {} is not a directory",
                new_file.display()
            )
        );
        check(&dir.path().join("missing"), "File").expect_err("missing file");
        check(&new_dir, "Socket").expect_err("not a socket");
        check(&dir.path().join("x/y"), "FileOrCreate").expect_err("parent missing");
        check(Path::new("relative"), "").expect_err("relative path");
        check(&new_dir, "Bogus").expect_err("unknown type");
    }
}
