//! Compiles etcd's v3 API (our own copy in `proto/`) into Rust: messages
//! with prost, servers and clients with tonic. protox parses the files, so
//! no system `protoc` is needed.

const PROTOS: [&str; 3] = [
    "proto/mvccpb/kv.proto",
    "proto/authpb/auth.proto",
    "proto/etcdserverpb/rpc.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(PROTOS, ["proto"])?;
    tonic_prost_build::configure()
        // prost's codec but for TxnRequest, refused unread past the store's depth.
        .codec_path("crate::grpc::codec::EtcdCodec")
        .build_server(true)
        .build_client(true)
        .compile_fds(descriptors)?;
    Ok(())
}
