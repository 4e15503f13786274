//! The table of `kubelet simulated`: a row per node count with
//! registration, Lease renewals (on time, late, failed, lag) and CPU; then
//! the capacity figure and each run's notes.

use std::time::Duration;

use super::simulated::NodesResult;
use crate::report::{self, Table};

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
