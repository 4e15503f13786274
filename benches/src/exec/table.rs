//! The table of `skiff-bench exec`: exec round-trip latency by phase,
//! then the port-forward's throughput beside plain loopback's, its floor.

use std::time::Duration;

use super::{ExecResult, MB};
use crate::report::{self, Latencies, Table};

/// MB (10^6 bytes) per second.
fn mb_per_second(bytes: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs <= 0.0 {
        return 0.0;
    }
    bytes as f64 / MB as f64 / secs
}

fn latency_row(label: &str, latencies: &Latencies) -> Vec<String> {
    vec![
        label.to_string(),
        report::group_digits(latencies.len() as u64),
        report::millis(latencies.percentile(50.0)),
        report::millis(latencies.percentile(99.0)),
        report::millis(latencies.max()),
        "-".into(),
        "-".into(),
        "-".into(),
    ]
}

fn transfer_row(label: &str, bytes: u64, elapsed: Duration, floor: f64) -> Vec<String> {
    let rate = mb_per_second(bytes, elapsed);
    vec![
        label.to_string(),
        format!("{} MB", report::group_digits(bytes / MB)),
        "-".into(),
        "-".into(),
        "-".into(),
        format!("{:.2}", elapsed.as_secs_f64()),
        format!("{rate:.1}"),
        report::ratio(rate, floor),
    ]
}

pub fn render(r: &ExecResult) -> String {
    let mut table = Table::new(&["", "n / size"]);
    table.group("latency ms", &["p50", "p99", "max"]);
    table.group("throughput", &["time s", "MB/s", "÷ loopback"]);
    table.row(latency_row("exec `true`: round trip", &r.exec_total));
    table.row(latency_row("  of which connect + TLS", &r.exec_connect));
    table.row(latency_row("  of which → 101 upgraded", &r.exec_upgrade));
    let floor = mb_per_second(r.config.bytes, r.loopback_transfer);
    table.row(transfer_row(
        "port-forward via the API",
        r.config.bytes,
        r.forward_transfer,
        floor,
    ));
    table.row(transfer_row(
        "loopback TCP (floor)",
        r.config.bytes,
        r.loopback_transfer,
        floor,
    ));
    table.render()
}

pub fn print(r: &ExecResult) {
    print!("{}", render(r));
    println!(
        "exec: a new TCP + TLS connection to the API, the WebSocket upgrade, then frames until the \
         error channel's Success Status and the close; the \"of which\" rows are from the same start."
    );
    println!(
        "port-forward: client → API (TLS) → kubelet (TLS) → the pod's port; time: first byte sent \
         → the sink's count read; the setup before it (connect, \
         upgrade, both channels' port frames) took {} ms.",
        report::millis(r.forward_setup)
    );
    println!(
        "CPU of skiff up (API server and kubelet, one process) during the port-forward: {:.2} s \
         ({:.1} ms per MB); pod created → Running with its sink listening: {:.1} s.",
        r.forward_cpu.as_secs_f64(),
        r.forward_cpu.as_secs_f64() * 1e3 / (r.config.bytes / MB).max(1) as f64,
        r.pod_running_in.as_secs_f64()
    );
    for note in &r.notes {
        println!("  NOTE: {note}");
    }
}

#[cfg(test)]
mod tests {
    use super::super::ExecConfig;
    use super::*;

    #[test]
    fn the_table_shows_latencies_and_rates_against_the_floor() {
        let ms = Duration::from_millis;
        let samples: Vec<Duration> = (1..=100).map(ms).collect();
        let result = ExecResult {
            config: ExecConfig {
                execs: 100,
                bytes: 100 * MB,
            },
            exec_total: Latencies::from_durations(&samples),
            exec_connect: Latencies::from_durations(&samples[..10]),
            exec_upgrade: Latencies::from_durations(&samples[..50]),
            forward_setup: ms(5),
            forward_transfer: ms(1000),
            loopback_transfer: ms(250),
            forward_cpu: ms(800),
            pod_running_in: ms(1500),
            notes: Vec::new(),
        };
        let text = render(&result);
        let rows: Vec<&str> = text.lines().skip(3).collect();
        assert_eq!(
            rows,
            [
                "exec `true`: round trip         100  50.00  99.00  100.00       -      -           -",
                "  of which connect + TLS         10   5.00  10.00   10.00       -      -           -",
                "  of which → 101 upgraded        50  25.00  50.00   50.00       -      -           -",
                "port-forward via the API     100 MB      -      -       -    1.00  100.0        0.25",
                "loopback TCP (floor)         100 MB      -      -       -    0.25  400.0        1.00",
            ],
            "{text}"
        );
        assert_eq!(mb_per_second(MB, Duration::ZERO), 0.0);
    }
}
