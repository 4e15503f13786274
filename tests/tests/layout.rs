//! The workspace's shape, as the README's layout table states it: the
//! scheduler, the controllers and the kubelet are REST clients that share
//! `skiff-machinery` with the API server and build neither the API server
//! nor the store, nor one another; machinery depends on no skiff crate.

use std::collections::BTreeMap;
use std::process::Command;

use anyhow::{Context, Result};
use serde_json::Value;

/// Each workspace package's direct skiff dependencies (normal, dev and
/// build), from `cargo metadata`.
fn skiff_dependencies() -> Result<BTreeMap<String, Vec<String>>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("the workspace root")?;
    let output = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .context("running cargo metadata")?;
    anyhow::ensure!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout)?;
    let mut found = BTreeMap::new();
    for package in metadata["packages"].as_array().context("packages")? {
        let name = package["name"].as_str().context("a package's name")?;
        let mut skiff: Vec<String> = package["dependencies"]
            .as_array()
            .context("dependencies")?
            .iter()
            .filter_map(|d| d["name"].as_str())
            .filter(|d| d.starts_with("skiff-"))
            .map(str::to_string)
            .collect();
        skiff.sort();
        skiff.dedup();
        found.insert(name.to_string(), skiff);
    }
    Ok(found)
}

#[test]
fn the_clients_build_on_machinery_alone() -> Result<()> {
    let dependencies = skiff_dependencies()?;
    for client in ["skiff-scheduler", "skiff-controllers", "skiff-kubelet"] {
        assert_eq!(
            dependencies.get(client).map(Vec::as_slice),
            Some(&["skiff-machinery".to_string()][..]),
            "{client} depends on skiff crates other than skiff-machinery"
        );
    }
    assert_eq!(
        dependencies.get("skiff-machinery").map(Vec::len),
        Some(0),
        "skiff-machinery depends on no skiff crate"
    );
    assert_eq!(
        dependencies.get("skiff-apiserver").map(Vec::as_slice),
        Some(&["skiff-machinery".to_string(), "skiff-store".to_string()][..])
    );
    Ok(())
}
