//! Samples of cumulative CPU time and memory, and the last two of each
//! thing measured, from which the CPU rate (usageNanoCores) comes as
//! cAdvisor computes it: the CPU time between them over the time between
//! them.

use jiff::Timestamp;

/// Memory at one moment, in bytes; what was not measured is `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemorySample {
    pub working_set: u64,
    pub usage: Option<u64>,
    pub rss: Option<u64>,
    pub available: Option<u64>,
}

/// One measurement: cumulative CPU time and memory, at `time`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub time: Timestamp,
    pub cpu_nanos: u64,
    pub memory: MemorySample,
}

/// The latest sample of one thing and the one before it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct History {
    pub latest: Option<Sample>,
    pub previous: Option<Sample>,
}

impl History {
    pub fn push(&mut self, sample: Sample) {
        self.previous = self.latest.replace(sample);
    }

    /// CPU cores in use between the two samples, in billionths; `None`
    /// until there are two, or when the counter went back (a restart).
    pub fn usage_nano_cores(&self) -> Option<u64> {
        usage_nano_cores(self.previous.as_ref()?, self.latest.as_ref()?)
    }
}

/// The CPU rate from `earlier` to `later`, in nanocores.
pub fn usage_nano_cores(earlier: &Sample, later: &Sample) -> Option<u64> {
    let elapsed = later.time.duration_since(earlier.time).as_nanos();
    if elapsed <= 0 || later.cpu_nanos < earlier.cpu_nanos {
        return None;
    }
    let used = u128::from(later.cpu_nanos - earlier.cpu_nanos);
    u64::try_from(used * 1_000_000_000 / elapsed as u128).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64, cpu_nanos: u64) -> Sample {
        Sample {
            time: Timestamp::from_second(second).unwrap(),
            cpu_nanos,
            memory: MemorySample::default(),
        }
    }

    #[test]
    fn the_rate_is_cpu_time_over_wall_time_between_the_last_two() {
        let mut history = History::default();
        assert_eq!(history.usage_nano_cores(), None);
        history.push(at(100, 1_000_000_000));
        assert_eq!(history.usage_nano_cores(), None, "one sample has no rate");
        // 5 CPU-seconds in 10 s: half a core.
        history.push(at(110, 6_000_000_000));
        assert_eq!(history.usage_nano_cores(), Some(500_000_000));
        // Two cores busy for 10 s.
        history.push(at(120, 26_000_000_000));
        assert_eq!(history.usage_nano_cores(), Some(2_000_000_000));
        assert_eq!(history.previous.unwrap().cpu_nanos, 6_000_000_000);
    }

    #[test]
    fn a_counter_that_went_back_or_no_time_between_gives_no_rate() {
        assert_eq!(usage_nano_cores(&at(10, 500), &at(20, 100)), None);
        assert_eq!(usage_nano_cores(&at(10, 100), &at(10, 500)), None);
        assert_eq!(usage_nano_cores(&at(10, 100), &at(9, 500)), None);
    }
}
