//! Compiles the protobuf definitions the API speaks (protox parses them, so
//! no system `protoc` is needed):
//! - Kubernetes' own messages (the comment-free copy in `proto/k8s.io/`,
//!   written by `proto/generate.py`) into one descriptor set that the
//!   protobuf wire reads at run time;
//! - our copy of gnostic's OpenAPI v2 model (`proto/openapiv2/`) into prost
//!   messages for the protobuf form of `/openapi/v2`.
//!
//! It also passes on the Kubernetes minor whose API types k8s-openapi was
//! built with, so that every version skiff reports is that one.

use std::path::Path;

use prost::Message;

const OPENAPI_V2: [&str; 1] = ["proto/openapiv2/OpenAPIv2.proto"];

fn protos(dir: &Path, found: &mut Vec<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            protos(&path, found)?;
        } else if path.extension().is_some_and(|e| e == "proto") {
            found.push(path.to_string_lossy().into_owned());
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(OPENAPI_V2, ["proto"])?;
    prost_build::Config::new().compile_fds(descriptors)?;

    let mut files = Vec::new();
    protos(Path::new("proto/k8s.io"), &mut files)?;
    files.sort();
    let descriptors = protox::compile(&files, ["proto"])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("kubernetes.fds"), descriptors.encode_to_vec())?;

    let (major, minor) = k8s_openapi_version()?;
    println!("cargo:rustc-env=SKIFF_KUBERNETES_MAJOR={major}");
    println!("cargo:rustc-env=SKIFF_KUBERNETES_MINOR={minor}");
    Ok(())
}

/// k8s-openapi tells crates that depend on it which version its feature
/// enabled, as `DEP_K8S_OPENAPI_<its version>_VERSION`: 0x00MMmm00.
fn k8s_openapi_version() -> Result<(u32, u32), Box<dyn std::error::Error>> {
    let (_, value) = std::env::vars()
        .find(|(name, _)| name.starts_with("DEP_K8S_OPENAPI_") && name.ends_with("_VERSION"))
        .ok_or("k8s-openapi did not say which Kubernetes version it was built for")?;
    let version: u32 = value.parse()?;
    Ok(((version >> 16) & 0xff, (version >> 8) & 0xff))
}
