//! The container shim as a standalone binary, for tests; the skiff binary
//! runs the same code as its hidden `kubelet-shim` subcommand.

fn main() {
    let args = std::env::args_os().skip(1).collect();
    std::process::exit(skiff_kubelet::shim::main(args));
}
