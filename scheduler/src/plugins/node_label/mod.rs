//! NodeLabel (kube-scheduler's classic plugin, removed upstream in 1.23;
//! off unless a profile names it): the profile, not the pod, says which
//! node labels must or must not be present, and which are preferred
//! present or absent. NodeAffinity is the per-pod way to the same end.

use std::sync::Arc;

use serde::Deserialize;

use crate::framework::{CycleState, NodeInfo, Plugin, PodInfo, Point, Status, MAX_NODE_SCORE};

pub const NAME: &str = "NodeLabel";

pub const ERR_REASON_PRESENCE_VIOLATED: &str = "node(s) didn't have the requested labels";

/// `NodeLabelArgs`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Args {
    #[serde(default)]
    present_labels: Vec<String>,
    #[serde(default)]
    absent_labels: Vec<String>,
    #[serde(default)]
    present_labels_preference: Vec<String>,
    #[serde(default)]
    absent_labels_preference: Vec<String>,
    #[serde(rename = "apiVersion")]
    _api_version: Option<String>,
    #[serde(rename = "kind")]
    _kind: Option<String>,
}

pub struct NodeLabel {
    present: Vec<String>,
    absent: Vec<String>,
    present_preference: Vec<String>,
    absent_preference: Vec<String>,
}

pub fn new(args: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    let args: Args = match args {
        serde_json::Value::Null => Args::default(),
        value => serde_json::from_value(value.clone())
            .map_err(|e| format!("invalid NodeLabelArgs: {e}"))?,
    };
    let mut errors = conflicts(
        &args.present_labels,
        &args.absent_labels,
        "presentLabels",
        "absentLabels",
    );
    errors.extend(conflicts(
        &args.present_labels_preference,
        &args.absent_labels_preference,
        "presentLabelsPreference",
        "absentLabelsPreference",
    ));
    if !errors.is_empty() {
        return Err(match errors.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        });
    }
    Ok(Arc::new(NodeLabel {
        present: args.present_labels,
        absent: args.absent_labels,
        present_preference: args.present_labels_preference,
        absent_preference: args.absent_labels_preference,
    }))
}

/// A label both required present and absent, as kube's validation words it.
fn conflicts(
    present: &[String],
    absent: &[String],
    present_path: &str,
    absent_path: &str,
) -> Vec<String> {
    absent
        .iter()
        .enumerate()
        .filter_map(|(i, label)| {
            let j = present.iter().rposition(|p| p == label)?;
            Some(format!(
                "{present_path}[{j}]: Invalid value: {label:?}: conflict with {absent_path}[{i}]"
            ))
        })
        .collect()
}

impl Plugin for NodeLabel {
    fn name(&self) -> &'static str {
        NAME
    }

    fn points(&self) -> &'static [Point] {
        &[Point::Filter, Point::Score]
    }

    fn filter(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        let labels = node.labels();
        let fits = self.present.iter().all(|l| labels.contains_key(l))
            && self.absent.iter().all(|l| !labels.contains_key(l));
        match fits {
            true => Status::success(),
            false => Status::unresolvable(ERR_REASON_PRESENCE_VIOLATED),
        }
    }

    /// The share of preferences the node meets, scaled to 0..=100.
    fn score(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let size = (self.present_preference.len() + self.absent_preference.len()) as i64;
        if size == 0 {
            return Ok(0);
        }
        let labels = node.labels();
        let met = self
            .present_preference
            .iter()
            .filter(|l| labels.contains_key(*l))
            .count()
            + self
                .absent_preference
                .iter()
                .filter(|l| !labels.contains_key(*l))
                .count();
        Ok(met as i64 * MAX_NODE_SCORE / size)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::{json, Value};

    use super::*;
    use crate::framework::Code;

    fn node(labels: Value) -> NodeInfo {
        let node: Node =
            serde_json::from_value(json!({"metadata": {"name": "n", "labels": labels}})).unwrap();
        NodeInfo::new(Arc::new(node))
    }

    fn pod() -> PodInfo {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        }))
        .unwrap();
        PodInfo::new(Arc::new(pod))
    }

    #[test]
    fn filter_checks_present_and_absent_labels() {
        let plugin =
            new(&json!({"presentLabels": ["zone", "disk"], "absentLabels": ["retiring"]})).unwrap();
        let cases = [
            (
                "all present, none absent",
                json!({"zone": "a", "disk": "ssd"}),
                None,
            ),
            (
                "a required label missing",
                json!({"zone": "a"}),
                Some(Code::UnschedulableAndUnresolvable),
            ),
            (
                "a forbidden label present",
                json!({"zone": "a", "disk": "ssd", "retiring": ""}),
                Some(Code::UnschedulableAndUnresolvable),
            ),
        ];
        for (name, labels, want) in cases {
            let status = plugin.filter(&CycleState::default(), &pod(), &node(labels));
            assert_eq!(
                (!status.is_success()).then_some(status.code),
                want,
                "{name}"
            );
            if want.is_some() {
                assert_eq!(status.message(), ERR_REASON_PRESENCE_VIOLATED, "{name}");
            }
        }
        let open = new(&Value::Null).unwrap();
        assert!(open
            .filter(&CycleState::default(), &pod(), &node(json!({})))
            .is_success());
    }

    #[test]
    fn score_is_the_share_of_met_preferences() {
        let plugin = new(&json!({
            "presentLabelsPreference": ["ssd", "gpu"],
            "absentLabelsPreference": ["spot"],
        }))
        .unwrap();
        let cases = [
            (json!({"ssd": "", "gpu": ""}), 100),
            (json!({"ssd": "", "gpu": "", "spot": ""}), 66),
            (json!({"ssd": ""}), 66),
            (json!({"spot": ""}), 0),
            (json!({}), 33),
        ];
        for (labels, want) in cases {
            let score = plugin
                .score(&CycleState::default(), &pod(), &node(labels.clone()))
                .unwrap();
            assert_eq!(score, want, "{labels}");
        }
        let none = new(&json!({})).unwrap();
        assert_eq!(
            none.score(&CycleState::default(), &pod(), &node(json!({"ssd": ""})))
                .unwrap(),
            0
        );
    }

    #[test]
    fn conflicting_or_unknown_args_are_refused() {
        let err = new(&json!({"presentLabels": ["a", "b"], "absentLabels": ["b"]}))
            .err()
            .unwrap();
        assert_eq!(
            err,
            "presentLabels[1]: Invalid value: \"b\": conflict with absentLabels[0]"
        );
        let err = new(&json!({"presentLabelsPreference": ["x"], "absentLabelsPreference": ["x"]}))
            .err()
            .unwrap();
        assert!(err.starts_with("presentLabelsPreference[0]"), "{err}");
        assert!(new(&json!({"presentLabel": ["a"]})).is_err());
        assert!(new(&json!({"presentLabels": "a"})).is_err());
    }
}
