//! What `/proc/<pid>/stat` says about a process: whether it still runs and
//! when it started, so a pid reused by another process is not mistaken for it.

/// The fields of `/proc/<pid>/stat` the runtime needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// `R`, `S`, `D`, `Z` (zombie), `X` (dead), ...
    pub state: char,
    /// Field 22: start time in clock ticks since boot.
    pub start_time: u64,
}

/// Reads `/proc/<pid>/stat`; `None` if there is no such process.
pub fn stat(pid: u32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// The start time of a process (zombies included), as recorded for recovery.
pub fn start_time(pid: u32) -> Option<u64> {
    stat(pid).map(|s| s.start_time)
}

/// Whether `pid` is still the process that started at `start_time` and has
/// not exited (a zombie has exited).
pub fn is_running(pid: u32, start_time: u64) -> bool {
    stat(pid).is_some_and(|s| s.start_time == start_time && !matches!(s.state, 'Z' | 'X'))
}

fn parse_stat(text: &str) -> Option<ProcStat> {
    // The command name (field 2) is in parentheses and may hold spaces or
    // parentheses itself; the fields after it start after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    // `rest` starts at field 3; field 22 is 19 further on.
    let start_time = fields.nth(18)?.parse().ok()?;
    Some(ProcStat { state, start_time })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_name_with_spaces_and_parentheses() {
        let text = "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    1 2 0 0 20 0 1 0 987654 1000000 100 18446744073709551615";
        assert_eq!(
            parse_stat(text),
            Some(ProcStat {
                state: 'S',
                start_time: 987654
            })
        );
    }

    #[test]
    fn truncated_stat_is_none() {
        assert_eq!(parse_stat("1 (init) S 0 1"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_running_and_a_wrong_start_time_is_not() {
        let pid = std::process::id();
        let start = start_time(pid).unwrap();
        assert!(is_running(pid, start));
        assert!(!is_running(pid, start + 1));
        assert!(stat(u32::MAX).is_none());
    }
}
