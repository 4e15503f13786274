//! Compiles our copy of gnostic's OpenAPI v2 model (`proto/openapiv2/`)
//! into prost messages for the protobuf form of `/openapi/v2` (protox
//! parses the file, so no system `protoc` is needed), and passes on the
//! Kubernetes minor whose API types k8s-openapi was built with, so that
//! every version skiff reports is that one.

const PROTOS: [&str; 1] = ["proto/openapiv2/OpenAPIv2.proto"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(PROTOS, ["proto"])?;
    prost_build::Config::new().compile_fds(descriptors)?;

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
