//! An external program the tests need, found on PATH: missing, under
//! CI=true a panic that says how to install it (CI must run every test);
//! otherwise a clear SKIPPED note on stderr and `None`.

use std::io::Write;
use std::path::PathBuf;

/// `name` on PATH, or `None` (skipped; a panic under CI=true) with
/// `install` as the hint.
pub fn on_path_or_skip(name: &str, test: &str, install: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    });
    if found.is_none() {
        if std::env::var("CI").is_ok_and(|ci| ci == "true") {
            panic!("{name} is not installed, and CI must run {test}: {install}");
        }
        // Straight to stderr: the test harness captures eprintln! of passing tests.
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test}: {name} is not installed (install it with `{install}`)"
        );
    }
    found
}
