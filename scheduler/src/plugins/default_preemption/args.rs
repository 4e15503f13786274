//! DefaultPreemptionArgs: how many candidate nodes the dry run looks for,
//! with kube-scheduler's defaults and validation.

use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefaultPreemptionArgs {
    /// Share of the potential nodes to find candidates on (0..=100).
    pub min_candidate_nodes_percentage: i32,
    /// At least this many candidates (capped at the potential nodes).
    pub min_candidate_nodes_absolute: i32,
}

impl Default for DefaultPreemptionArgs {
    fn default() -> Self {
        DefaultPreemptionArgs {
            min_candidate_nodes_percentage: 10,
            min_candidate_nodes_absolute: 100,
        }
    }
}

const PERCENTAGE: &str = "minCandidateNodesPercentage";
const ABSOLUTE: &str = "minCandidateNodesAbsolute";

impl DefaultPreemptionArgs {
    /// From the `pluginConfig` args (`null`: the defaults).
    pub fn from_json(args: &Value) -> Result<DefaultPreemptionArgs, String> {
        let mut out = DefaultPreemptionArgs::default();
        let fields = match args {
            Value::Null => return Ok(out),
            Value::Object(fields) => fields,
            other => {
                return Err(format!(
                    "DefaultPreemptionArgs must be an object, got {other}"
                ))
            }
        };
        for (key, value) in fields {
            match key.as_str() {
                "apiVersion" | "kind" => {}
                PERCENTAGE => out.min_candidate_nodes_percentage = int32(key, value)?,
                ABSOLUTE => out.min_candidate_nodes_absolute = int32(key, value)?,
                _ => {
                    return Err(format!(
                        "DefaultPreemptionArgs: unknown field {key:?} (known: {PERCENTAGE}, {ABSOLUTE})"
                    ))
                }
            }
        }
        out.validate()?;
        Ok(out)
    }

    /// kube-scheduler's ValidateDefaultPreemptionArgs, with its wording.
    pub fn validate(&self) -> Result<(), String> {
        let (percentage, absolute) = (
            self.min_candidate_nodes_percentage,
            self.min_candidate_nodes_absolute,
        );
        let mut errors = Vec::new();
        if !(0..=100).contains(&percentage) {
            errors.push(format!(
                "{PERCENTAGE}: Invalid value: {percentage}: not in valid range [0, 100]"
            ));
        }
        if absolute < 0 {
            errors.push(format!(
                "{ABSOLUTE}: Invalid value: {absolute}: not in valid range [0, inf)"
            ));
        }
        if percentage == 0 && absolute == 0 {
            errors.push(format!(
                "{PERCENTAGE}: Invalid value: 0: cannot be zero at the same time as {ABSOLUTE}"
            ));
            errors.push(format!(
                "{ABSOLUTE}: Invalid value: 0: cannot be zero at the same time as {PERCENTAGE}"
            ));
        }
        match errors.as_slice() {
            [] => Ok(()),
            [one] => Err(one.clone()),
            _ => Err(format!("[{}]", errors.join(", "))),
        }
    }

    /// How many candidates the dry run looks for among `nodes` potential
    /// nodes: max(absolute, nodes × percentage / 100), at most `nodes`.
    pub fn num_candidates(&self, nodes: usize) -> usize {
        let percentage = usize::try_from(self.min_candidate_nodes_percentage).unwrap_or(0);
        let absolute = usize::try_from(self.min_candidate_nodes_absolute).unwrap_or(0);
        (nodes.saturating_mul(percentage) / 100)
            .max(absolute)
            .min(nodes)
    }
}

fn int32(key: &str, value: &Value) -> Result<i32, String> {
    value
        .as_i64()
        .and_then(|v| i32::try_from(v).ok())
        .ok_or_else(|| {
            format!("DefaultPreemptionArgs: {key} must be a 32-bit integer, got {value}")
        })
}
