//! A Python that has the `kubernetes` client: `SKIFF_PYTHON` (what .ci/run
//! sets up in a virtualenv), else `python3` if it can import the package.
//! Without one: under CI=true a panic that says how to install it,
//! otherwise a clear SKIPPED note. The same for `schemathesis`, which
//! runs in a virtualenv of its own.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const INSTALL_HINT: &str = "python3 -m venv ~/.cache/skiff-ci-venv && \
     ~/.cache/skiff-ci-venv/bin/pip install kubernetes==37.0.2, then set \
     SKIFF_PYTHON=~/.cache/skiff-ci-venv/bin/python (.ci/run does this)";

/// The scripts the Python tests run (`tests/python/`).
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("python")
        .join(name)
}

fn imports_kubernetes(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "import kubernetes"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The Python to run the client with, or `None` (skipped) when there is none.
pub fn python_with_kubernetes_or_skip(test: &str) -> Option<PathBuf> {
    let from_env = std::env::var_os("SKIFF_PYTHON").map(PathBuf::from);
    if let Some(python) = &from_env {
        if imports_kubernetes(python) {
            return Some(python.clone());
        }
    }
    let fallback = PathBuf::from("python3");
    if imports_kubernetes(&fallback) {
        return Some(fallback);
    }
    let why = match from_env {
        Some(python) => format!(
            "SKIFF_PYTHON={} cannot import kubernetes, nor can python3",
            python.display()
        ),
        None => "SKIFF_PYTHON is not set and python3 cannot import kubernetes".to_string(),
    };
    if std::env::var("CI").is_ok_and(|ci| ci == "true") {
        panic!("CI must run {test}, but {why}: {INSTALL_HINT}");
    }
    // Straight to stderr: the test harness captures eprintln! of passing tests.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {why} (install it with: {INSTALL_HINT})"
    );
    None
}

const SCHEMATHESIS_HINT: &str = "python3 -m venv ~/.cache/skiff-ci-schemathesis && \
     ~/.cache/skiff-ci-schemathesis/bin/pip install schemathesis==4.32.5, then set \
     SKIFF_SCHEMATHESIS=~/.cache/skiff-ci-schemathesis/bin/schemathesis (.ci/run does this)";

fn runs_version(program: &Path) -> bool {
    Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The `schemathesis` command: `SKIFF_SCHEMATHESIS` (what .ci/run installs
/// in a virtualenv), else `schemathesis` on PATH; `None` (skipped, a panic
/// under CI=true) when there is neither.
pub fn schemathesis_or_skip(test: &str) -> Option<PathBuf> {
    let from_env = std::env::var_os("SKIFF_SCHEMATHESIS").map(PathBuf::from);
    let candidates = from_env
        .iter()
        .cloned()
        .chain([PathBuf::from("schemathesis")]);
    for program in candidates {
        if runs_version(&program) {
            return Some(program);
        }
    }
    let why = match from_env {
        Some(program) => format!(
            "SKIFF_SCHEMATHESIS={} does not run, nor does schemathesis on PATH",
            program.display()
        ),
        None => "SKIFF_SCHEMATHESIS is not set and schemathesis is not on PATH".to_string(),
    };
    if std::env::var("CI").is_ok_and(|ci| ci == "true") {
        panic!("CI must run {test}, but {why}: {SCHEMATHESIS_HINT}");
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {why} (install it with: {SCHEMATHESIS_HINT})"
    );
    None
}
