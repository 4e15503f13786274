//! The tables of `kubelet simulated` — a row per node count with
//! registration, Lease renewals (on time, late, failed, lag) and CPU; then
//! the capacity figure and each run's notes — and of `kubelet start`: pod
//! start latency percentiles, then throughput and CPU.

use std::time::Duration;

use super::simulated::NodesResult;
use super::start::{StartResult, COMMAND, NODE_NAME};
use crate::report::{self, Latencies, Table};

/// Kubernetes' pod startup SLO (SIG Scalability): p99 of creation →
/// Running seen on a watch, stateless pods, image pulls excluded.
const STARTUP_SLO: Duration = Duration::from_secs(5);

fn ms(d: Duration) -> String {
    report::group_digits((d.as_secs_f64() * 1e3).round() as u64)
}

fn cpu_percent(cpu: Duration, wall: Duration) -> String {
    if wall.is_zero() {
        return "-".into();
    }
    format!("{:.1}", cpu.as_secs_f64() * 100.0 / wall.as_secs_f64())
}

pub fn print(results: &[NodesResult], late_after: Duration) {
    let mut table = Table::new(&["nodes"]);
    table.group(
        "registration",
        &["registered", "failed", "time s", "nodes/s"],
    );
    table.group(
        "lease renewals",
        &[
            "done",
            "late",
            "failed",
            "p50 lag ms",
            "p99 lag ms",
            "max ms",
        ],
    );
    table.group("CPU % while heartbeating", &["skiff up", "simulator"]);
    for r in results {
        let s = &r.snapshot;
        let registration = s.registration_time.unwrap_or_default();
        table.row(vec![
            report::group_digits(r.nodes as u64),
            report::group_digits(s.nodes_registered),
            report::group_digits(s.registration_errors),
            format!("{:.1}", registration.as_secs_f64()),
            report::group_digits(report::per_second(s.nodes_registered, registration)),
            report::group_digits(s.renewals),
            report::group_digits(s.renewals_late),
            report::group_digits(s.renewal_errors),
            ms(s.lag_p50),
            ms(s.lag_p99),
            ms(s.lag_max),
            cpu_percent(r.skiff_cpu, r.measured),
            cpu_percent(r.simulator_cpu, r.measured),
        ]);
    }
    table.print();
    println!(
        "registration: each node's Node created (Ready) and its Lease created, 32 in flight; time: simulator start → the last node done."
    );
    println!(
        "lease renewals: PUTs of kube-node-lease/<node> from one timing wheel, spread evenly over the interval, 32 in flight; \
         lag: due time → renewal acknowledged; late: lag over {} s.",
        late_after.as_secs()
    );
    println!(
        "CPU %: CPU time over the heartbeat window ÷ its length (100 = one core); the simulator is this benchmark's process."
    );
    print_capacity(results);
    for r in results {
        for note in &r.notes {
            println!("  NOTE ({} nodes): {note}", r.nodes);
        }
    }
}

fn print_capacity(results: &[NodesResult]) {
    match results.iter().filter(|r| r.kept_up()).map(|r| r.nodes).max() {
        Some(n) => println!(
            "capacity: {} simulated nodes with every renewal on time (the largest node count run with none late or failed)",
            report::group_digits(n as u64)
        ),
        None => println!("capacity: no node count run kept every renewal on time"),
    }
}

/// The percentile columns of `kubelet start`'s latency table.
const START_PERCENTILES: [f64; 3] = [50.0, 90.0, 99.0];

fn latency_row(label: &str, latencies: &Latencies) -> Vec<String> {
    let mut row = vec![
        label.to_string(),
        report::group_digits(latencies.len() as u64),
    ];
    row.extend(
        START_PERCENTILES
            .iter()
            .map(|&p| report::millis(latencies.percentile(p))),
    );
    row.push(report::millis(latencies.max()));
    row
}

pub fn print_start(r: &StartResult) {
    let mut latency = Table::new(&["pod start", "pods"]);
    latency.group("ms", &["p50", "p90", "p99", "max"]);
    latency.row(latency_row("created → scheduled", &r.to_scheduled));
    latency.row(latency_row("scheduled → Running", &r.scheduled_to_running));
    latency.row(latency_row("created → Running", &r.to_running));
    latency.row(latency_row("create call (→ 201)", &r.create_calls));
    latency.print();
    println!(
        "created: the create request sent; scheduled: the watch first shows spec.nodeName set; \
         Running: the watch first shows phase Running with the container ready."
    );
    println!(
        "reference: Kubernetes' pod startup SLO is p99 created → Running (on a watch) ≤ {} s, image pulls excluded; \
         here p99 is {} ms ({}).",
        STARTUP_SLO.as_secs(),
        report::millis(r.to_running.percentile(99.0)),
        if r.to_running.percentile(99.0) <= STARTUP_SLO {
            "within it"
        } else {
            "OVER it"
        }
    );
    println!();
    let mut totals = Table::new(&["pods", "clients"]);
    totals.group("all Running", &["time s", "pods/s"]);
    totals.group(
        "CPU s until all Running",
        &["skiff up", "pods' processes", "skiff ms/pod"],
    );
    let per_pod = r.skiff_cpu.as_secs_f64() * 1e3 / r.pods.max(1) as f64;
    totals.row(vec![
        report::group_digits(r.pods as u64),
        report::group_digits(r.clients as u64),
        format!("{:.2}", r.all_running.as_secs_f64()),
        format!(
            "{:.1}",
            r.pods as f64 / r.all_running.as_secs_f64().max(f64::EPSILON)
        ),
        format!("{:.2}", r.skiff_cpu.as_secs_f64()),
        format!("{:.2}", r.pods_cpu.as_secs_f64()),
        format!("{per_pod:.1}"),
    ]);
    totals.print();
    println!(
        "all Running: the first create sent → the last pod seen Running; pods/s: pods ÷ that time."
    );
    println!(
        "CPU: user + system time from /proc; skiff up is its one process (store, API, scheduler, kubelet); \
         pods' processes: its descendants (each container's shim and `{}`), counted whole.",
        COMMAND.join(" ")
    );
    println!(
        "processes: {} `{}` processes under skiff up once all ran; Node {NODE_NAME} Ready {:.1} s after start; \
         pods deleted (gracePeriodSeconds=0) → every process gone in {:.2} s.",
        r.processes,
        COMMAND[0],
        r.node_ready_in.as_secs_f64(),
        r.teardown.as_secs_f64()
    );
    for note in &r.notes {
        println!("  NOTE: {note}");
    }
}

/// `kubelet start` with pods on the host's network and with networks of
/// their own, side by side: what the pod network costs.
pub fn print_network_comparison(host: &StartResult, cni: &StartResult) {
    report::section("pod start with and without a network of its own");
    let mut table = Table::new(&["figure", "host network", "own network (CNI)", "ratio"]);
    let ratio = |a: f64, b: f64| match a > 0.0 {
        true => format!("{:.2}", b / a),
        false => "-".into(),
    };
    let millis = |d: Duration| d.as_secs_f64() * 1e3;
    for (name, a, b) in [
        (
            "created → Running p50 ms",
            millis(host.to_running.percentile(50.0)),
            millis(cni.to_running.percentile(50.0)),
        ),
        (
            "created → Running p99 ms",
            millis(host.to_running.percentile(99.0)),
            millis(cni.to_running.percentile(99.0)),
        ),
        (
            "scheduled → Running p50 ms",
            millis(host.scheduled_to_running.percentile(50.0)),
            millis(cni.scheduled_to_running.percentile(50.0)),
        ),
        (
            "all Running s",
            host.all_running.as_secs_f64(),
            cni.all_running.as_secs_f64(),
        ),
        (
            "skiff up CPU ms per pod",
            host.skiff_cpu.as_secs_f64() * 1e3 / host.pods.max(1) as f64,
            cni.skiff_cpu.as_secs_f64() * 1e3 / cni.pods.max(1) as f64,
        ),
        (
            "pods' processes CPU ms per pod",
            host.pods_cpu.as_secs_f64() * 1e3 / host.pods.max(1) as f64,
            cni.pods_cpu.as_secs_f64() * 1e3 / cni.pods.max(1) as f64,
        ),
        (
            "deleted → every process gone s",
            host.teardown.as_secs_f64(),
            cni.teardown.as_secs_f64(),
        ),
    ] {
        table.row(vec![
            name.to_string(),
            format!("{a:.2}"),
            format!("{b:.2}"),
            ratio(a, b),
        ]);
    }
    table.print();
    println!(
        "ratio: own network ÷ host network, one run each on the same machine one after the other; \
         the CNI plugins the kubelet runs for each pod (loopback, bridge with host-local, portmap) are short-lived processes of their own, \
         whose CPU is in neither CPU row."
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_rows_show_percentiles_in_milliseconds() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let row = latency_row("created → Running", &Latencies::from_durations(&samples));
        assert_eq!(
            row,
            vec![
                "created → Running",
                "100",
                "50.00",
                "90.00",
                "99.00",
                "100.00"
            ]
        );
    }
}
