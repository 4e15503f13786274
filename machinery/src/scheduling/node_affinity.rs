//! Node selectors as Kubernetes' component-helpers parse and match them:
//! terms are ORed, the requirements of a term ANDed. A term that does not
//! parse matches no node (kube's "lazy error" selector, kept so that old
//! objects with bad terms still schedule through their other terms).

use std::collections::BTreeMap;

use crate::validation::{is_qualified_name, is_valid_label_value};
use k8s_openapi::api::core::v1::{
    Node, NodeSelector as ApiNodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    PreferredSchedulingTerm,
};

/// The only field a `matchFields` requirement can select on.
pub const OBJECT_NAME_FIELD: &str = "metadata.name";

#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    GreaterThan(i64),
    LessThan(i64),
}

#[derive(Debug, Clone)]
struct LabelRequirement {
    key: String,
    operator: LabelOperator,
    values: Vec<String>,
}

impl LabelRequirement {
    /// Checks the requirement as `labels.NewRequirement` does.
    fn parse(r: &NodeSelectorRequirement, path: &str) -> Result<LabelRequirement, Vec<String>> {
        let values = r.values.clone().unwrap_or_default();
        let mut errors = Vec::new();
        let key_messages = is_qualified_name(&r.key);
        if !key_messages.is_empty() {
            errors.push(format!(
                "{path}.key: Invalid value: {:?}: {}",
                r.key,
                key_messages.join("; ")
            ));
        }
        let operator = match r.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                errors.push(format!(
                    "{path}.values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty"
                ));
                None
            }
            "In" => Some(LabelOperator::In),
            "NotIn" => Some(LabelOperator::NotIn),
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                errors.push(format!(
                    "{path}.values: Invalid value: {values:?}: values set must be empty for exists and does not exist"
                ));
                None
            }
            "Exists" => Some(LabelOperator::Exists),
            "DoesNotExist" => Some(LabelOperator::DoesNotExist),
            "Gt" | "Lt" => match values.as_slice() {
                [value] => match value.parse::<i64>() {
                    Ok(n) if r.operator == "Gt" => Some(LabelOperator::GreaterThan(n)),
                    Ok(n) => Some(LabelOperator::LessThan(n)),
                    Err(_) => {
                        errors.push(format!(
                            "{path}.values[0]: Invalid value: {value:?}: for 'Gt', 'Lt' operators, the value must be an integer"
                        ));
                        None
                    }
                },
                _ => {
                    errors.push(format!(
                        "{path}.values: Invalid value: {values:?}: for 'Gt', 'Lt' operators, exactly one value is required"
                    ));
                    None
                }
            },
            other => {
                errors.push(format!(
                    "{path}.operator: Unsupported value: {other:?}: supported values: \"In\", \"NotIn\", \"Exists\", \"DoesNotExist\", \"Gt\", \"Lt\""
                ));
                None
            }
        };
        for (i, value) in values.iter().enumerate() {
            let messages = is_valid_label_value(value);
            if !messages.is_empty() {
                errors.push(format!(
                    "{path}.values[{i}]: Invalid value: {value:?}: {}",
                    messages.join("; ")
                ));
            }
        }
        match operator {
            Some(operator) if errors.is_empty() => Ok(LabelRequirement {
                key: r.key.clone(),
                operator,
                values,
            }),
            _ => Err(errors),
        }
    }

    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let label = labels.get(&self.key);
        match &self.operator {
            LabelOperator::In => label.is_some_and(|v| self.values.contains(v)),
            LabelOperator::NotIn => label.is_none_or(|v| !self.values.contains(v)),
            LabelOperator::Exists => label.is_some(),
            LabelOperator::DoesNotExist => label.is_none(),
            LabelOperator::GreaterThan(n) => label
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *n),
            LabelOperator::LessThan(n) => label
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *n),
        }
    }
}

/// `key == value` or `key != value` on the node's fields.
#[derive(Debug, Clone)]
struct FieldRequirement {
    key: String,
    value: String,
    equal: bool,
}

impl FieldRequirement {
    fn parse(r: &NodeSelectorRequirement, path: &str) -> Result<FieldRequirement, String> {
        let values = r.values.as_deref().unwrap_or_default();
        let equal = match r.operator.as_str() {
            "In" => true,
            "NotIn" => false,
            other => {
                return Err(format!(
                    "{path}.operator: Unsupported value: {other:?}: supported values: \"In\", \"NotIn\""
                ))
            }
        };
        match values {
            [value] => Ok(FieldRequirement {
                key: r.key.clone(),
                value: value.clone(),
                equal,
            }),
            _ => Err(format!(
                "{path}.values: Invalid value: {values:?}: must have one element"
            )),
        }
    }

    /// The node's only field is `metadata.name`; others read as "".
    fn matches(&self, node_name: &str) -> bool {
        let actual = match self.key.as_str() {
            OBJECT_NAME_FIELD => node_name,
            _ => "",
        };
        (actual == self.value) == self.equal
    }
}

/// One parsed `nodeSelectorTerm`.
#[derive(Debug, Clone)]
pub struct Term {
    /// `None` when the term has no `matchExpressions`.
    labels: Option<Vec<LabelRequirement>>,
    /// `None` when the term has no `matchFields`.
    fields: Option<Vec<FieldRequirement>>,
    errors: Vec<String>,
}

impl Term {
    /// A term with neither expressions nor fields selects nothing.
    pub fn is_empty(term: &NodeSelectorTerm) -> bool {
        term.match_expressions.as_ref().is_none_or(Vec::is_empty)
            && term.match_fields.as_ref().is_none_or(Vec::is_empty)
    }

    pub fn parse(term: &NodeSelectorTerm, path: &str) -> Term {
        let mut errors = Vec::new();
        let expressions = term.match_expressions.as_deref().unwrap_or_default();
        let labels = match expressions.is_empty() {
            true => None,
            false => {
                let mut parsed = Vec::new();
                for (i, r) in expressions.iter().enumerate() {
                    match LabelRequirement::parse(r, &format!("{path}.matchExpressions[{i}]")) {
                        Ok(r) => parsed.push(r),
                        Err(e) => errors.extend(e),
                    }
                }
                Some(parsed)
            }
        };
        let field_terms = term.match_fields.as_deref().unwrap_or_default();
        let fields = match field_terms.is_empty() {
            true => None,
            false => {
                let mut parsed = Vec::new();
                for (i, r) in field_terms.iter().enumerate() {
                    match FieldRequirement::parse(r, &format!("{path}.matchFields[{i}]")) {
                        Ok(r) => parsed.push(r),
                        Err(e) => errors.push(e),
                    }
                }
                Some(parsed)
            }
        };
        Term {
            labels,
            fields,
            errors,
        }
    }

    /// Whether `node` satisfies every requirement; a term with parse
    /// errors matches nothing. Fields are not checked on a nameless node.
    pub fn matches(&self, node: &Node) -> bool {
        if !self.errors.is_empty() {
            return false;
        }
        let labels = node_labels(node);
        if let Some(requirements) = &self.labels {
            if !requirements.iter().all(|r| r.matches(labels)) {
                return false;
            }
        }
        let name = node.metadata.name.as_deref().unwrap_or_default();
        if let Some(requirements) = &self.fields {
            if !name.is_empty() && !requirements.iter().all(|r| r.matches(name)) {
                return false;
            }
        }
        true
    }
}

fn node_labels(node: &Node) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    node.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

/// A `nodeSelector` (ORed terms); empty terms are dropped, so a selector
/// with no usable term matches no node.
#[derive(Debug, Clone)]
pub struct NodeSelector {
    terms: Vec<Term>,
}

impl NodeSelector {
    /// Keeps terms that do not parse (they match nothing).
    pub fn lazy(selector: &ApiNodeSelector) -> NodeSelector {
        let terms = selector
            .node_selector_terms
            .iter()
            .enumerate()
            .filter(|(_, term)| !Term::is_empty(term))
            .map(|(i, term)| Term::parse(term, &format!("nodeSelectorTerms[{i}]")))
            .collect();
        NodeSelector { terms }
    }

    /// Refuses a selector with a term that does not parse.
    pub fn strict(selector: &ApiNodeSelector) -> Result<NodeSelector, String> {
        let lazy = NodeSelector::lazy(selector);
        let errors: Vec<&str> = lazy
            .terms
            .iter()
            .flat_map(|t| t.errors.iter().map(String::as_str))
            .collect();
        match errors.is_empty() {
            true => Ok(lazy),
            false => Err(aggregate(&errors)),
        }
    }

    pub fn matches(&self, node: &Node) -> bool {
        self.terms.iter().any(|t| t.matches(node))
    }
}

/// Weighted `preferredDuringScheduling` terms; terms of weight 0 or with
/// no requirement are dropped.
#[derive(Debug, Clone, Default)]
pub struct PreferredTerms {
    terms: Vec<(Term, i64)>,
}

impl PreferredTerms {
    /// Any term that does not parse is an error, as kube reports it.
    pub fn parse(terms: &[PreferredSchedulingTerm]) -> Result<PreferredTerms, String> {
        let mut parsed = Vec::new();
        let mut errors: Vec<String> = Vec::new();
        for (i, term) in terms.iter().enumerate() {
            if term.weight == 0 || Term::is_empty(&term.preference) {
                continue;
            }
            let t = Term::parse(&term.preference, &format!("[{i}].preference"));
            match t.errors.is_empty() {
                true => parsed.push((t, i64::from(term.weight))),
                false => errors.extend(t.errors),
            }
        }
        match errors.is_empty() {
            true => Ok(PreferredTerms { terms: parsed }),
            false => Err(aggregate(&errors)),
        }
    }

    /// The sum of the weights of the terms `node` matches.
    pub fn score(&self, node: &Node) -> i64 {
        self.terms
            .iter()
            .filter(|(t, _)| t.matches(node))
            .map(|(_, w)| w)
            .sum()
    }
}

/// A pod's `nodeSelector` and required node affinity together: a node
/// must satisfy both.
#[derive(Debug, Clone, Default)]
pub struct RequiredNodeAffinity {
    node_selector: Option<BTreeMap<String, String>>,
    affinity: Option<NodeSelector>,
}

impl RequiredNodeAffinity {
    pub fn of_pod(pod: &Pod) -> RequiredNodeAffinity {
        let spec = pod.spec.as_ref();
        let node_selector = spec
            .and_then(|s| s.node_selector.clone())
            .filter(|s| !s.is_empty());
        let affinity = spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(NodeSelector::lazy);
        RequiredNodeAffinity {
            node_selector,
            affinity,
        }
    }

    pub fn matches(&self, node: &Node) -> bool {
        if let Some(selector) = &self.node_selector {
            let labels = node_labels(node);
            if !selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                return false;
            }
        }
        self.affinity.as_ref().is_none_or(|a| a.matches(node))
    }
}

/// Several errors as one message, as Go's aggregate prints them.
fn aggregate<S: AsRef<str>>(errors: &[S]) -> String {
    match errors {
        [one] => one.as_ref().to_string(),
        many => format!(
            "[{}]",
            many.iter()
                .map(AsRef::as_ref)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
