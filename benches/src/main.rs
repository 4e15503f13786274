//! skiff-bench: benchmarks that print plain-text tables, one subcommand per
//! component. Not timed tests: run them on a quiet machine and read them.

mod machine;
mod report;
mod store;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "skiff-bench",
    version,
    about = "Benchmarks of skiff's components"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The storage engine in-process: put latency and throughput, watch
    /// latency (one member and a cluster on loopback, side by side), memory
    /// and disk footprint.
    Store(store::StoreArgs),
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Store(args) => store::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("skiff-bench: {err:#}");
            ExitCode::FAILURE
        }
    }
}
