//! The table of `controllers`: a row per phase (created → available,
//! rolled to a new image), with its milestones, its rate, the bounds the
//! strategy allows against what was seen, and the CPU it took.

use std::time::Duration;

use super::rollout::{Phase, RolloutConfig, RolloutResult};
use crate::report::{self, Table};

fn seconds(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| format!("{:.2}", d.as_secs_f64()))
}

pub fn print(config: &RolloutConfig, result: &RolloutResult) {
    let mut table = Table::new(&["phase"]);
    table.group("seconds from the write", &["created", "ready", "complete"]);
    table.group(
        "replicas seen",
        &["most", "allowed", "fewest available", "allowed"],
    );
    table.group("cost", &["pods/s", "skiff up CPU s", "CPU ms/pod"]);
    let want = config.replicas;
    let row = |name: &str, phase: &Phase, rolling: bool| {
        let rate = report::per_second(u64::from(want), phase.complete);
        let per_pod = phase.skiff_cpu.as_secs_f64() * 1e3 / f64::from(want);
        let (surge, floor) = match rolling {
            true => (
                (want + config.max_surge()).to_string(),
                (want - config.max_unavailable()).to_string(),
            ),
            false => (want.to_string(), "-".into()),
        };
        vec![
            name.to_string(),
            seconds(phase.created),
            seconds(phase.ready),
            seconds(Some(phase.complete)),
            phase.max_replicas.to_string(),
            surge,
            phase.min_available.map_or("-".into(), |m| m.to_string()),
            floor,
            report::group_digits(rate),
            format!("{:.1}", phase.skiff_cpu.as_secs_f64()),
            format!("{per_pod:.1}"),
        ]
    };
    table.row(row("create → available", &result.create, false));
    table.row(row("rolling update", &result.update, true));
    table.print();
    println!(
        "{} replicas on {} simulated nodes (registered in {:.1} s); {} ReplicaSets at the end.",
        want,
        config.nodes,
        result.nodes_ready_in.as_secs_f64(),
        result.replica_sets
    );
    println!(
        "created: every replica of the current template counted in status.updatedReplicas; ready: and status.readyReplicas; \
         complete: observedGeneration current, no old replicas, every replica available (what `kubectl rollout status` waits for)."
    );
    println!(
        "replicas seen: status.replicas at its most, and status.availableReplicas at its fewest during the rollout, \
         beside what maxSurge and maxUnavailable (25% each) allow; a status poll every 100 ms can miss a brief extreme."
    );
    let mib = |bytes: Option<u64>| {
        bytes.map_or("unknown".into(), |b| {
            format!("{:.0} MiB", b as f64 / (1 << 20) as f64)
        })
    };
    println!(
        "skiff up: peak resident memory {}",
        mib(result.skiff_peak_rss)
    );
    if let Some(manager) = &result.controller_manager {
        let cpu = manager.cpu.as_secs_f64();
        println!(
            "controller-manager (a process of its own): peak resident memory {}, CPU {cpu:.1} s over the run ({:.1} ms per pod over both phases)",
            mib(manager.peak_rss),
            cpu * 1e3 / f64::from(want) / 2.0
        );
    }
    for note in &result.notes {
        println!("  NOTE: {note}");
    }
}
