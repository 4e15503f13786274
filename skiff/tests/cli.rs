//! The `skiff` binary's own command line, without a store: the commands it
//! offers and how it refuses bad flags. (Having an integration test also
//! makes `cargo test` build the binary, which the process tests in
//! `tests/` run.)

use std::process::{Command, Output};

fn skiff(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_skiff"))
        .args(args)
        .output()
        .expect("running skiff")
}

#[test]
fn help_lists_every_command() {
    let output = skiff(&["--help"]);
    assert_eq!(output.status.code(), Some(0));
    let help = String::from_utf8_lossy(&output.stdout);
    for command in ["store", "cluster", "member"] {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(command)),
            "{command} missing from:\n{help}"
        );
    }
    let output = skiff(&["cluster", "up", "--help"]);
    assert_eq!(output.status.code(), Some(0));
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(
        help.contains("2379/2380, 22379/22380, 32379/32380"),
        "{help}"
    );
}

#[test]
fn bad_flags_exit_1_and_say_which() {
    let output = skiff(&["store", "--client-listen"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("a value is required for '--client-listen"),
        "{stderr}"
    );
    let output = skiff(&["cluster", "up", "--members", "9"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("9 is not in 1..=7"), "{stderr}");
    let output = skiff(&["member", "remove", "n1"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("\"n1\" is not a member ID in hex"),
        "{stderr}"
    );
}
