//! Compiles Kubernetes' protobuf definitions (the comment-free copy in
//! `proto/`, written by `proto/generate.py`) into one descriptor set that
//! the protobuf wire reads at run time. protox parses the files, so no
//! system `protoc` is needed.

use std::path::Path;

use prost::Message;

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
    let mut files = Vec::new();
    protos(Path::new("proto"), &mut files)?;
    files.sort();
    let descriptors = protox::compile(&files, ["proto"])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("kubernetes.fds"), descriptors.encode_to_vec())?;
    Ok(())
}
