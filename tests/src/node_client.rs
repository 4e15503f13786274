//! Node.js with the `@kubernetes/client-node` client: `SKIFF_NODE_MODULES`
//! (the node_modules directory .ci/run installs it in), else
//! `~/.cache/skiff-ci-node/node_modules`. Without it: under CI=true a
//! panic that says how to install it, otherwise a clear SKIPPED note.

use std::io::Write;
use std::path::{Path, PathBuf};

const INSTALL_HINT: &str = "mkdir -p ~/.cache/skiff-ci-node && cd ~/.cache/skiff-ci-node && \
     npm install @kubernetes/client-node@1.4.0 (.ci/run does this), with Node.js 20 or later";

/// The scripts the Node tests run (`tests/node/`).
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("node")
        .join(name)
}

/// The node_modules directory holding the client, or `None` (skipped).
pub fn node_client_or_skip(test: &str) -> Option<PathBuf> {
    let modules = std::env::var_os("SKIFF_NODE_MODULES")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|home| PathBuf::from(home).join(".cache/skiff-ci-node/node_modules"))
        });
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let found = modules
        .filter(|m| m.join("@kubernetes/client-node/package.json").is_file())
        .filter(|_| node);
    if found.is_none() {
        if std::env::var("CI").is_ok_and(|ci| ci == "true") {
            panic!("CI must run {test}, but node or @kubernetes/client-node is missing: {INSTALL_HINT}");
        }
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test}: node or @kubernetes/client-node is missing (install it with: {INSTALL_HINT})"
        );
    }
    found
}
