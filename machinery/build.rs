//! Passes on the Kubernetes minor whose API types k8s-openapi was built
//! with, so that every version skiff reports is that one (`version.rs`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // k8s-openapi tells crates that depend on it which version its
    // feature enabled, as `DEP_K8S_OPENAPI_<its version>_VERSION`:
    // 0x00MMmm00.
    let (_, value) = std::env::vars()
        .find(|(name, _)| name.starts_with("DEP_K8S_OPENAPI_") && name.ends_with("_VERSION"))
        .ok_or("k8s-openapi did not say which Kubernetes version it was built for")?;
    let version: u32 = value.parse()?;
    println!(
        "cargo:rustc-env=SKIFF_KUBERNETES_MAJOR={}",
        (version >> 16) & 0xff
    );
    println!(
        "cargo:rustc-env=SKIFF_KUBERNETES_MINOR={}",
        (version >> 8) & 0xff
    );
    Ok(())
}
