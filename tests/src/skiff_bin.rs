//! Finds the `skiff` binary for process tests. A test executable lives in
//! `<target>/<profile>/deps/`, the binary in `<target>/<profile>/skiff`;
//! if it is missing or older than its sources, it is built once with
//! `cargo build -p skiff --bin skiff` for the same profile and target dir.
//! `SKIFF_BIN` names another binary.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::SystemTime;

use anyhow::{bail, ensure, Context, Result};

/// What the binary is built from, relative to the workspace root.
const SOURCES: [&str; 17] = [
    // The workspace manifest: dependency versions and features.
    "Cargo.toml",
    "skiff/src",
    "skiff/Cargo.toml",
    "apiserver/src",
    "apiserver/Cargo.toml",
    "apiserver/build.rs",
    "apiserver/proto",
    "scheduler/src",
    "scheduler/Cargo.toml",
    "controllers/src",
    "controllers/Cargo.toml",
    "kubelet/src",
    "kubelet/Cargo.toml",
    "store/src",
    "store/proto",
    "store/Cargo.toml",
    "Cargo.lock",
];

/// The `skiff` binary; panics with the reason if it cannot be had.
pub fn skiff_bin() -> &'static Path {
    static SKIFF: OnceLock<PathBuf> = OnceLock::new();
    SKIFF.get_or_init(|| {
        locate_or_build().unwrap_or_else(|err| panic!("no skiff binary to test: {err:#}"))
    })
}

fn workspace_root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn locate_or_build() -> Result<PathBuf> {
    if let Some(binary) = std::env::var_os("SKIFF_BIN") {
        let binary = PathBuf::from(binary);
        ensure!(
            binary.is_file(),
            "SKIFF_BIN={} is not a file",
            binary.display()
        );
        return Ok(binary);
    }
    let test_exe = std::env::current_exe().context("finding the test executable")?;
    let profile_dir = test_exe
        .parent()
        .and_then(Path::parent)
        .with_context(|| format!("{} is not in <target>/<profile>/deps", test_exe.display()))?;
    let binary = profile_dir.join("skiff");
    match built_at(&binary) {
        Some(built) if newest_source()? <= built => return Ok(binary),
        Some(_) => eprintln!(
            "{} is older than its sources: building it",
            binary.display()
        ),
        None => eprintln!("{} is missing: building it", binary.display()),
    }
    build(profile_dir)?;
    ensure!(
        binary.is_file(),
        "cargo built skiff but {} is not there",
        binary.display()
    );
    Ok(binary)
}

fn built_at(binary: &Path) -> Option<SystemTime> {
    binary.metadata().and_then(|m| m.modified()).ok()
}

/// The latest modification time of any file the binary is built from.
fn newest_source() -> Result<SystemTime> {
    let mut newest = SystemTime::UNIX_EPOCH;
    let mut pending: Vec<PathBuf> = SOURCES.iter().map(|s| workspace_root().join(s)).collect();
    while let Some(path) = pending.pop() {
        let meta =
            std::fs::metadata(&path).with_context(|| format!("reading {}", path.display()))?;
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path)? {
                pending.push(entry?.path());
            }
        } else {
            newest = newest.max(meta.modified()?);
        }
    }
    Ok(newest)
}

/// `cargo build -p skiff --bin skiff` into the target dir the tests run from.
fn build(profile_dir: &Path) -> Result<()> {
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev",
        Some(name) => name,
        None => bail!("no profile in {}", profile_dir.display()),
    };
    let target_dir = profile_dir
        .parent()
        .with_context(|| format!("no target dir above {}", profile_dir.display()))?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "-p",
            "skiff",
            "--bin",
            "skiff",
            "--profile",
            profile,
        ])
        .arg("--target-dir")
        .arg(target_dir)
        .current_dir(workspace_root())
        .status()
        .context("running cargo build -p skiff")?;
    ensure!(status.success(), "cargo build -p skiff failed ({status})");
    Ok(())
}
