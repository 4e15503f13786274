//! The pod watch of `kubelet start`: each event line reduced to what pod
//! start latency needs (name, node, phase, first container ready), and the
//! first instant each pod was seen bound, Running and deleted. Not a
//! general watch decoder.

use std::collections::HashMap;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde_json::Value;

/// What a watch event says of one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEvent {
    pub deleted: bool,
    pub name: String,
    /// `spec.nodeName`, once the scheduler has bound it.
    pub node_name: Option<String>,
    /// `status.phase`.
    pub phase: Option<String>,
    /// `status.containerStatuses[0].ready`.
    pub ready: bool,
    /// The first container's waiting or terminated reason, to say why a
    /// pod does not run.
    pub reason: Option<String>,
}

impl PodEvent {
    /// Running as the pod startup SLO counts it: phase Running and its
    /// container ready.
    pub fn running(&self) -> bool {
        self.phase.as_deref() == Some("Running") && self.ready
    }

    /// A phase it never leaves: its container will not run again.
    pub fn finished(&self) -> bool {
        matches!(self.phase.as_deref(), Some("Succeeded" | "Failed"))
    }
}

/// One line of a watch response: `None` for a blank line or a bookmark,
/// an error for an ERROR event (a Status) or a line that is not an event.
pub fn parse_event(line: &[u8]) -> Result<Option<PodEvent>> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let event: Value = serde_json::from_slice(line).context("a watch line that is not JSON")?;
    let object = &event["object"];
    let deleted = match event["type"].as_str() {
        Some("ADDED" | "MODIFIED") => false,
        Some("DELETED") => true,
        Some("BOOKMARK") => return Ok(None),
        Some("ERROR") => bail!(
            "the watch sent an ERROR event: {}",
            object["message"].as_str().unwrap_or("(no message)")
        ),
        other => bail!("a watch event of unknown type {other:?}"),
    };
    let name = object["metadata"]["name"]
        .as_str()
        .context("a watch event without metadata.name")?;
    let container = &object["status"]["containerStatuses"][0];
    let state = &container["state"];
    let reason = state["waiting"]["reason"]
        .as_str()
        .or_else(|| state["terminated"]["reason"].as_str());
    let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
    Ok(Some(PodEvent {
        deleted,
        name: name.to_string(),
        node_name: text(&object["spec"]["nodeName"]),
        phase: text(&object["status"]["phase"]),
        ready: container["ready"].as_bool().unwrap_or(false),
        reason: reason.map(str::to_string),
    }))
}

/// When the watch first showed a pod in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FirstSeen {
    pub scheduled: Option<Instant>,
    pub running: Option<Instant>,
    pub deleted: Option<Instant>,
}

/// Every pod the watch showed, by name, with the counts the run waits on.
#[derive(Debug, Default)]
pub struct PodTracker {
    pods: HashMap<String, FirstSeen>,
    running: usize,
    deleted: usize,
    /// A pod seen Succeeded or Failed before it ever ran, and why.
    finished: Option<String>,
    /// The latest event of a pod not yet Running, to say where it stands.
    last_waiting: Option<PodEvent>,
}

impl PodTracker {
    /// Records `event`, which arrived at `at`; only a state's first
    /// sighting counts.
    pub fn observe(&mut self, event: &PodEvent, at: Instant) {
        let seen = self.pods.entry(event.name.clone()).or_default();
        if event.node_name.is_some() && seen.scheduled.is_none() {
            seen.scheduled = Some(at);
        }
        if event.running() && seen.running.is_none() {
            seen.running = Some(at);
            self.running += 1;
        }
        if event.deleted && seen.deleted.is_none() {
            seen.deleted = Some(at);
            self.deleted += 1;
        }
        // Once Running, a pod ending (as it does when deleted) is no failure.
        if event.finished() && seen.running.is_none() && self.finished.is_none() {
            self.finished = Some(describe(event));
        }
        if seen.running.is_none() && !event.deleted {
            self.last_waiting = Some(event.clone());
        }
    }

    pub fn get(&self, name: &str) -> Option<&FirstSeen> {
        self.pods.get(name)
    }

    /// Pods seen Running (and ready) at least once.
    pub fn running(&self) -> usize {
        self.running
    }

    pub fn deleted(&self) -> usize {
        self.deleted
    }

    pub fn scheduled(&self) -> usize {
        self.pods.values().filter(|s| s.scheduled.is_some()).count()
    }

    /// A pod that ended without ever running, described.
    pub fn finished(&self) -> Option<&str> {
        self.finished.as_deref()
    }

    /// Where the latest pod seen but not yet Running stands.
    pub fn waiting(&self) -> Option<String> {
        self.last_waiting.as_ref().map(describe)
    }
}

fn describe(event: &PodEvent) -> String {
    format!(
        "pod {} on node {}, phase {}, container ready {}{}",
        event.name,
        event.node_name.as_deref().unwrap_or("(none)"),
        event.phase.as_deref().unwrap_or("(none)"),
        event.ready,
        event
            .reason
            .as_ref()
            .map(|r| format!(", reason {r}"))
            .unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A pod's event once the kubelet has written it Running.
    fn running_line(name: &str) -> Vec<u8> {
        format!(
            r#"{{"type":"MODIFIED","object":{{"kind":"Pod","metadata":{{"name":"{name}","resourceVersion":"42"}},"spec":{{"nodeName":"bench-node","containers":[{{"name":"sleep"}}]}},"status":{{"phase":"Running","containerStatuses":[{{"name":"sleep","ready":true,"state":{{"running":{{"startedAt":"2025-01-01T00:00:00Z"}}}}}}]}}}}}}"#
        )
        .into_bytes()
    }

    fn event(line: &[u8]) -> PodEvent {
        parse_event(line).unwrap().unwrap()
    }

    #[test]
    fn a_running_pod_is_read_from_its_event() {
        let e = event(&running_line("start-00007"));
        assert_eq!(e.name, "start-00007");
        assert_eq!(e.node_name.as_deref(), Some("bench-node"));
        assert_eq!(e.phase.as_deref(), Some("Running"));
        assert!(e.ready && e.running() && !e.deleted);
    }

    #[test]
    fn a_created_pod_is_neither_scheduled_nor_running() {
        let e = event(
            br#"{"type":"ADDED","object":{"metadata":{"name":"p"},"spec":{"nodeName":""},"status":{"phase":"Pending"}}}"#,
        );
        assert_eq!(e.node_name, None);
        assert_eq!(e.phase.as_deref(), Some("Pending"));
        assert!(!e.running());
    }

    #[test]
    fn running_needs_the_container_ready() {
        let e = event(
            br#"{"type":"MODIFIED","object":{"metadata":{"name":"p"},"spec":{"nodeName":"n"},"status":{"phase":"Running","containerStatuses":[{"ready":false,"state":{"waiting":{"reason":"ContainerCreating"}}}]}}}"#,
        );
        assert!(!e.running());
        assert_eq!(e.reason.as_deref(), Some("ContainerCreating"));
    }

    #[test]
    fn bookmarks_and_blank_lines_are_skipped_and_errors_reported() {
        assert_eq!(parse_event(b"").unwrap(), None);
        assert_eq!(
            parse_event(br#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}"#)
                .unwrap(),
            None
        );
        let err = parse_event(
            br#"{"type":"ERROR","object":{"kind":"Status","message":"too old resource version"}}"#,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("too old resource version"),
            "{err}"
        );
        assert!(parse_event(b"{not json").is_err());
    }

    #[test]
    fn only_the_first_sighting_of_each_state_counts() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut tracker = PodTracker::default();
        let added = event(br#"{"type":"ADDED","object":{"metadata":{"name":"p"}}}"#);
        let mut bound = added.clone();
        bound.node_name = Some("n".into());
        let running = event(&running_line("p"));
        tracker.observe(&added, at(1));
        tracker.observe(&bound, at(2));
        tracker.observe(&running, at(5));
        tracker.observe(&running, at(9));
        assert_eq!(tracker.running(), 1);
        assert_eq!(tracker.scheduled(), 1);
        let seen = tracker.get("p").unwrap();
        assert_eq!((seen.scheduled, seen.running), (Some(at(2)), Some(at(5))));
        let mut deleted = running.clone();
        deleted.deleted = true;
        tracker.observe(&deleted, at(20));
        tracker.observe(&deleted, at(21));
        assert_eq!(tracker.deleted(), 1);
        assert_eq!(tracker.get("p").unwrap().deleted, Some(at(20)));
        assert_eq!(tracker.finished(), None);
    }

    #[test]
    fn a_failed_pod_is_reported_with_its_reason() {
        let mut tracker = PodTracker::default();
        let failed = event(
            br#"{"type":"MODIFIED","object":{"metadata":{"name":"p"},"spec":{"nodeName":"n"},"status":{"phase":"Failed","containerStatuses":[{"ready":false,"state":{"terminated":{"reason":"StartError"}}}]}}}"#,
        );
        tracker.observe(&failed, Instant::now());
        let why = tracker.finished().unwrap();
        assert!(
            why.contains("Failed") && why.contains("StartError"),
            "{why}"
        );
    }
}
