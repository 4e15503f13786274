//! Completion indexes of an Indexed Job: the index a pod carries in its
//! `batch.kubernetes.io/job-completion-index` annotation, and the
//! `status.completedIndexes` interval list ("1,3-5,7").

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;

/// The annotation (and label) holding a pod's completion index.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// The completion index of `pod`, if it has a valid one.
pub fn index_of(pod: &Pod) -> Option<i32> {
    let value = pod.metadata.annotations.as_ref()?.get(COMPLETION_INDEX)?;
    value.parse::<i32>().ok().filter(|i| *i >= 0)
}

/// Parses an interval list; indexes at or beyond `completions` and
/// malformed parts are dropped, as kube does when a Job shrinks.
pub fn parse(list: Option<&str>, completions: i32) -> BTreeSet<i32> {
    let mut indexes = BTreeSet::new();
    for part in list
        .unwrap_or_default()
        .split(',')
        .filter(|p| !p.is_empty())
    {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<i32>(), b.parse::<i32>()),
            None => (part.parse::<i32>(), part.parse::<i32>()),
        };
        let (Ok(first), Ok(last)) = (first, last) else {
            continue;
        };
        indexes.extend((first.max(0)..=last.min(completions - 1)).filter(|_| first <= last));
    }
    indexes
}

/// Formats indexes as kube does: ascending, runs of two or more
/// consecutive indexes as `first-last`.
pub fn format(indexes: &BTreeSet<i32>) -> String {
    let mut parts = Vec::new();
    let mut run: Option<(i32, i32)> = None;
    for &index in indexes {
        run = match run {
            Some((first, last)) if index == last + 1 => Some((first, index)),
            Some(done) => {
                parts.push(format_run(done));
                Some((index, index))
            }
            None => Some((index, index)),
        };
    }
    parts.extend(run.map(format_run));
    parts.join(",")
}

fn format_run((first, last): (i32, i32)) -> String {
    match first == last {
        true => first.to_string(),
        false => format!("{first}-{last}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_lists_round_trip() {
        let set = parse(Some("0,2-4,7"), 10);
        assert_eq!(set.iter().copied().collect::<Vec<_>>(), [0, 2, 3, 4, 7]);
        assert_eq!(format(&set), "0,2-4,7");
        assert_eq!(format(&BTreeSet::new()), "");
        assert_eq!(format(&[5, 6].into()), "5-6");
    }

    #[test]
    fn out_of_range_and_malformed_parts_are_dropped() {
        let set = parse(Some("1,x,3-9,5-2"), 5);
        assert_eq!(set.iter().copied().collect::<Vec<_>>(), [1, 3, 4]);
        assert!(parse(None, 3).is_empty());
    }
}
