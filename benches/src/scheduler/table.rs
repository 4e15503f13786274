//! The table of a scheduler run: a row per workload and node count with
//! skiff's throughput and latency, beside kube-scheduler's published CI
//! floor and the ratio; then the 3x target, met or not, and each run's
//! notes.

use std::time::Duration;

use super::workload::Workload;
use super::{PointResult, TARGET_RATIO};
use crate::report::{self, Table};

fn rate(value: f64) -> String {
    report::group_digits(value.round() as u64)
}

fn ms(d: Duration) -> String {
    report::group_digits((d.as_secs_f64() * 1e3).round() as u64)
}

/// `windows`: also each run's pods bound per second, in order.
pub fn print(results: &[PointResult], windows: bool) {
    let mut table = Table::new(&["workload"]);
    table.group("skiff up", &["nodes", "pods", "created/s"]);
    table.group(
        "pods bound per second",
        &["overall", "avg 1s", "p50 1s", "p90 1s", "p99 1s"],
    );
    table.group("create→bound", &["p50 ms", "p99 ms"]);
    table.group("kube-scheduler", &["CI floor", "ratio"]);
    for r in results {
        let t = &r.measured.throughput;
        let floor = r.point.workload.published_floor(r.point.nodes);
        table.row(vec![
            r.point.workload.describe().to_string(),
            report::group_digits(r.point.nodes as u64),
            report::group_digits(t.pods as u64),
            rate(r.measured.creates_per_second),
            rate(t.per_second()),
            rate(t.window_average()),
            rate(t.window_percentile(50.0)),
            rate(t.window_percentile(90.0)),
            rate(t.window_percentile(99.0)),
            ms(r.measured.latencies.percentile(50.0)),
            ms(r.measured.latencies.percentile(99.0)),
            floor.map(rate).unwrap_or_else(|| "-".into()),
            floor
                .map(|f| report::ratio(t.window_average(), f))
                .unwrap_or_else(|| "-".into()),
        ]);
    }
    table.print();
    println!(
        "created/s: the measured pods' creates alone (over the connections the client line names); when bound/s is close to it, the API's create rate bounds the run, not the scheduler."
    );
    println!(
        "overall: measured pods ÷ (first create sent → last binding seen by the watch); avg, p50, p90, p99 1s: of the pods bound in each second after the first create (scheduler_perf's SchedulingThroughput)."
    );
    println!(
        "CI floor: kube-scheduler's published scheduler_perf threshold on Kubernetes CI at 5 000 nodes (the average of its 1-second samples), \
         quoted for scale: NOT a side-by-side run (kube-scheduler cannot run here; other hardware, its own pod shapes); \
         \"-\": none published for that workload or node count. ratio: skiff's avg 1s ÷ that floor."
    );
    print_targets(results);
    print_notes(results, windows);
}

fn print_targets(results: &[PointResult]) {
    println!("target: avg 1s at least {TARGET_RATIO}x the published floor:");
    let mut judged = 0;
    for r in results {
        let Some(floor) = r.point.workload.published_floor(r.point.nodes) else {
            continue;
        };
        judged += 1;
        let ratio = r.measured.throughput.window_average() / floor;
        let met = if ratio >= TARGET_RATIO {
            "met"
        } else {
            "NOT MET"
        };
        println!(
            "  {} at {} nodes: {ratio:.2}x {met}",
            r.point.workload.describe(),
            report::group_digits(r.point.nodes as u64)
        );
    }
    if judged == 0 {
        println!(
            "  not judged: no workload ran at {} nodes",
            report::group_digits(super::workload::PUBLISHED_NODES as u64)
        );
    }
}

fn print_notes(results: &[PointResult], windows: bool) {
    for r in results {
        let m = &r.measured;
        let fill = match &r.fill {
            Some(fill) => format!(
                "; filled with {} low-priority pods, bound at {} pods/s",
                report::group_digits(fill.throughput.pods as u64),
                rate(fill.throughput.per_second())
            ),
            None => String::new(),
        };
        let victims = match r.point.workload {
            Workload::Preemption => format!("; {} low-priority pods preempted", m.victims),
            _ => String::new(),
        };
        println!(
            "{} at {} nodes: ready in {:.1} s; nodes created at {} /s; warm-up pod bound {:.2} s after the last node{fill}{victims}; whole run {:.1} s, load average after {}",
            r.point.workload.describe(),
            report::group_digits(r.point.nodes as u64),
            r.started_in.as_secs_f64(),
            rate(r.nodes_per_second),
            r.warm_up.as_secs_f64(),
            r.total.as_secs_f64(),
            r.load_after,
        );
        let pods = m.throughput.pods.max(1) as f64;
        println!(
            "  CPU per measured pod (create + bind): skiff up {:.2} ms, the bench client {:.2} ms",
            m.server_cpu.as_secs_f64() * 1e3 / pods,
            m.client_cpu.as_secs_f64() * 1e3 / pods
        );
        if windows {
            let series: Vec<String> = m.throughput.windows.iter().map(|&w| rate(w)).collect();
            println!("  pods bound in each second: {}", series.join(" "));
        }
        if r.point.workload == Workload::Preemption && m.victims > m.throughput.pods {
            println!(
                "  NOTE: {} more low-priority pods were preempted than high-priority pods bound: evictions nothing needed",
                m.victims - m.throughput.pods
            );
        }
        if m.reopens > 0 {
            println!("  NOTE: the pod watch was reopened {} times", m.reopens);
        }
        for note in &r.notes {
            println!("  NOTE: {note}");
        }
        for problem in &m.violations {
            println!("  ERROR: {problem}");
        }
    }
}
