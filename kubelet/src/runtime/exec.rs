//! Finds the program a container runs before anything is started, so a
//! missing or non-executable program fails the start with the message
//! Kubernetes users know from runc (`executable file not found in $PATH`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::RuntimeError;

/// The PATH used when neither the container nor the kubelet has one.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Resolves `program` as the container's `execve` would: a name with a `/`
/// relative to the working directory, a bare name through the container's
/// PATH (or the kubelet's when the container sets none).
pub fn resolve_program(
    program: &str,
    env: &[(String, String)],
    working_dir: &Path,
) -> Result<PathBuf, RuntimeError> {
    if program.contains('/') {
        let path = working_dir.join(program);
        return check_executable(program, path);
    }
    let search = env
        .iter()
        .rev()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.clone())
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_else(|| DEFAULT_PATH.to_string());
    search
        .split(':')
        .map(|dir| {
            working_dir
                .join(if dir.is_empty() { "." } else { dir })
                .join(program)
        })
        .find(|candidate| is_executable_file(candidate))
        .ok_or_else(|| RuntimeError::ExecutableNotFound {
            program: program.to_string(),
        })
}

fn check_executable(program: &str, path: PathBuf) -> Result<PathBuf, RuntimeError> {
    match std::fs::metadata(&path) {
        Err(source) => Err(RuntimeError::ExecutableMissing {
            program: program.to_string(),
            path,
            source,
        }),
        Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => Ok(path),
        Ok(_) => Err(RuntimeError::NotExecutable {
            program: program.to_string(),
        }),
    }
}

fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path_env(dirs: &str) -> Vec<(String, String)> {
        vec![("PATH".to_string(), dirs.to_string())]
    }

    #[test]
    fn bare_names_are_found_through_the_containers_path() {
        let found = resolve_program("sh", &path_env("/nonexistent:/bin"), Path::new("/")).unwrap();
        assert_eq!(found, Path::new("/bin/sh"));
    }

    #[test]
    fn missing_program_says_executable_file_not_found() {
        let err =
            resolve_program("no-such-program-xyz", &path_env("/bin"), Path::new("/")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "exec: \"no-such-program-xyz\": executable file not found in $PATH"
        );
    }

    #[test]
    fn paths_are_checked_relative_to_the_working_dir() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("run.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        let err = resolve_program("./run.sh", &[], dir.path()).unwrap_err();
        assert_eq!(err.to_string(), "exec: \"./run.sh\": permission denied");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            resolve_program("./run.sh", &[], dir.path()).unwrap(),
            dir.path().join("./run.sh")
        );
        let err = resolve_program("./gone", &[], dir.path()).unwrap_err();
        assert!(
            err.to_string().starts_with("exec: \"./gone\": stat "),
            "{err}"
        );
    }

    #[test]
    fn directories_are_not_executables() {
        let err = resolve_program("/tmp", &[], Path::new("/")).unwrap_err();
        assert!(matches!(err, RuntimeError::NotExecutable { .. }));
    }
}
