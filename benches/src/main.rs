//! skiff-bench: benchmarks that print plain-text tables, one subcommand per
//! component. Not timed tests: run them on a quiet machine and read them.

mod api;
mod controllers;
mod data_root;
mod exec;
mod faults;
mod kubelet;
mod machine;
mod proxy;
mod report;
mod scheduler;
mod store;
mod versus;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// mimalloc, as the skiff binary: the watch benchmark's client reads
/// thousands of streams, and glibc's malloc growing and trimming its heap
/// under that (page faults on every new buffer) made the client, which
/// shares the cores with the server it measures, cost more than the server.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// skiff's store against real etcd, side by side: each as its own
    /// processes (1 and 3 members) on loopback, one system at a time,
    /// driven over etcd's gRPC API by the same client and workload — put
    /// latency and throughput, range throughput, watch latency — in one
    /// table with ratios; --plot draws the latency distributions.
    Versus(versus::VersusArgs),
    /// The Kubernetes REST API of `skiff up`, over its in-process store and
    /// over real etcd (`--store-endpoints`), side by side: pod create
    /// throughput, list latency (full and by label, cached and
    /// consistent), watch fan-out latency and the API server's memory, in
    /// one table with ratios and the targets. Also `apiserver`, the name
    /// DESIGN.md gives it.
    #[command(alias = "apiserver")]
    Api(api::ApiArgs),
    /// The scheduler of `skiff up`, after kube-scheduler's scheduler_perf:
    /// plain Node objects (500 and 5 000), pods created as fast as the API
    /// takes them, pods bound per second (overall and per 1-second window)
    /// and create→bound latency for basic pods, required anti-affinity,
    /// hard topology spread, node affinity and preemption, beside
    /// kube-scheduler's published CI floors.
    Scheduler(scheduler::SchedulerArgs),
    /// skiff's kubelet: `kubelet simulated` registers thousands of
    /// simulated nodes against `skiff up` and keeps their Leases renewed,
    /// reporting registration time, renewals late or failed, renewal lag
    /// and CPU per node count, and the largest count kept on time.
    /// `kubelet start` times real pods created → scheduled → Running.
    Kubelet(kubelet::KubeletArgs),
    /// The controller-manager of `skiff up` with its scheduler, on
    /// simulated nodes: a Deployment of 1 000 replicas on 100 nodes,
    /// created → every replica available, then rolled to a new image →
    /// rollout complete, with the surge and availability seen.
    Controllers(controllers::ControllersArgs),
    /// `kubectl exec` and `kubectl port-forward` through the API server of
    /// `skiff up` with its kubelet, over TLS: exec round trips of `true`
    /// (WebSocket v5) and a port-forward transfer beside plain loopback.
    Exec(exec::ExecArgs),
    /// The service proxy: the nftables rules for 1 000 Services with
    /// 10 000 endpoints written whole and changed one Service at a time,
    /// beside an empty write; and, on `skiff up` with its pod network,
    /// a Service's create call → the first connection through its
    /// ClusterIP, beside connections to the pod's own address.
    Proxy(proxy::ProxyArgs),
    /// The fault-injection suite of the replicated store: three and five
    /// `skiff store` members, each in its own network namespace, under
    /// SIGKILLs, pauses, partitions and one-way loss picked by a seed,
    /// driven by KV, lease and watch clients; every run checked for
    /// linearizability, lost writes, the watch guarantees and early lease
    /// expiry. A table of fault kind × runs × ops × violations.
    Faults(faults::FaultsArgs),
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Store(args) => store::run(args),
        Command::Versus(args) => versus::run(args),
        Command::Api(args) => api::run(args),
        Command::Scheduler(args) => scheduler::run(args),
        Command::Kubelet(args) => kubelet::run(args),
        Command::Controllers(args) => controllers::run(args),
        Command::Exec(args) => exec::run(args),
        Command::Proxy(args) => proxy::run(args),
        Command::Faults(args) => faults::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("skiff-bench: {err:#}");
            ExitCode::FAILURE
        }
    }
}
