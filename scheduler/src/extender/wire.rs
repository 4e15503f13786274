//! The extender wire format (`k8s.io/kube-scheduler/extender/v1`): the
//! arguments sent and the results read back.

use super::*;

#[derive(Serialize)]
pub(super) struct ExtenderArgs<'a> {
    #[serde(rename = "Pod")]
    pub(super) pod: &'a Pod,
    #[serde(rename = "Nodes")]
    pub(super) nodes: Option<NodeList<'a>>,
    #[serde(rename = "NodeNames")]
    pub(super) node_names: Option<Vec<&'a str>>,
}

/// A v1.NodeList as Go writes one: `{"metadata":{},"items":[…]}`.
#[derive(Serialize)]
pub(super) struct NodeList<'a> {
    pub(super) metadata: EmptyObject,
    pub(super) items: Vec<&'a Node>,
}

#[derive(Serialize)]
pub(super) struct EmptyObject {}

#[derive(Serialize)]
pub(super) struct BindingArgs<'a> {
    #[serde(rename = "PodName")]
    pub(super) pod_name: &'a str,
    #[serde(rename = "PodNamespace")]
    pub(super) pod_namespace: &'a str,
    #[serde(rename = "PodUID")]
    pub(super) pod_uid: &'a str,
    #[serde(rename = "Node")]
    pub(super) node: &'a str,
}

/// ExtenderFilterResult, the node list reduced to the nodes' names.
#[derive(Debug, Default)]
pub(super) struct FilterResult {
    pub(super) nodes: Option<Vec<String>>,
    pub(super) node_names: Option<Vec<String>>,
    pub(super) failed_nodes: BTreeMap<String, String>,
    pub(super) failed_and_unresolvable_nodes: BTreeMap<String, String>,
    pub(super) error: String,
}

impl FilterResult {
    pub(super) fn decode(value: &Value) -> Result<FilterResult, String> {
        const TYPE: &str = "ExtenderFilterResult";
        let Some(object) = object_of(value, TYPE, "v1.ExtenderFilterResult")? else {
            return Ok(FilterResult::default());
        };
        let field_of = |name: &str| (field(object, name), format!("{TYPE}.{name}"));
        let (nodes, path) = field_of("Nodes");
        let nodes = match nodes {
            None | Some(Value::Null) => None,
            Some(list) => Some(node_list_names(list, &path)?),
        };
        let (names, path) = field_of("NodeNames");
        let node_names = match names {
            None | Some(Value::Null) => None,
            Some(names) => Some(string_list(names, &path)?),
        };
        let (failed, path) = field_of("FailedNodes");
        let failed_nodes = string_map(failed, &path)?;
        let (unresolvable, path) = field_of("FailedAndUnresolvableNodes");
        let failed_and_unresolvable_nodes = string_map(unresolvable, &path)?;
        let (error, path) = field_of("Error");
        let error = string_of(error, &path)?;
        Ok(FilterResult {
            nodes,
            node_names,
            failed_nodes,
            failed_and_unresolvable_nodes,
            error,
        })
    }
}

/// A HostPriorityList: `[{"Host": …, "Score": …}]`.
pub(super) fn decode_host_priorities(value: &Value) -> Result<Vec<(String, i64)>, String> {
    let items = match value {
        Value::Null => return Ok(Vec::new()),
        Value::Array(items) => items,
        other => {
            return Err(format!(
                "json: cannot unmarshal {} into Go value of type v1.HostPriorityList",
                json_kind(other)
            ))
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let Some(object) = object_of(item, "HostPriorityList", "v1.HostPriority")? else {
            out.push((String::new(), 0));
            continue;
        };
        let host = string_of(field(object, "Host"), "HostPriority.Host")?;
        let score = match field(object, "Score") {
            None | Some(Value::Null) => 0,
            Some(Value::Number(n)) => n.as_i64().ok_or_else(|| {
                format!("json: cannot unmarshal number {n} into Go struct field HostPriority.Score of type int64")
            })?,
            Some(other) => {
                return Err(format!(
                    "json: cannot unmarshal {} into Go struct field HostPriority.Score of type int64",
                    json_kind(other)
                ))
            }
        };
        out.push((host, score));
    }
    Ok(out)
}

/// The `Error` of an ExtenderBindingResult.
pub(super) fn decode_error_field(value: &Value, type_name: &str) -> Result<String, String> {
    match object_of(value, type_name, &format!("v1.{type_name}"))? {
        None => Ok(String::new()),
        Some(object) => string_of(field(object, "Error"), &format!("{type_name}.Error")),
    }
}

/// A field as Go's decoder finds it: by its exact name, else by a name
/// equal but for case.
pub(super) fn field<'a>(object: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    object.get(name).or_else(|| {
        object
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value)
    })
}

pub(super) fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// An object, `None` for null.
pub(super) fn object_of<'a>(
    value: &'a Value,
    path: &str,
    go_type: &str,
) -> Result<Option<&'a Map<String, Value>>, String> {
    match value {
        Value::Null => Ok(None),
        Value::Object(object) => Ok(Some(object)),
        other => Err(format!(
            "json: cannot unmarshal {} into Go value of type {go_type} ({path})",
            json_kind(other)
        )),
    }
}

pub(super) fn string_of(value: Option<&Value>, path: &str) -> Result<String, String> {
    match value {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(format!(
            "json: cannot unmarshal {} into Go struct field {path} of type string",
            json_kind(other)
        )),
    }
}

pub(super) fn string_list(value: &Value, path: &str) -> Result<Vec<String>, String> {
    let Value::Array(items) = value else {
        return Err(format!(
            "json: cannot unmarshal {} into Go struct field {path} of type []string",
            json_kind(value)
        ));
    };
    items
        .iter()
        .map(|item| string_of(Some(item), path))
        .collect()
}

pub(super) fn string_map(
    value: Option<&Value>,
    path: &str,
) -> Result<BTreeMap<String, String>, String> {
    match value {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(object)) => object
            .iter()
            .map(|(key, reason)| Ok((key.clone(), string_of(Some(reason), path)?)))
            .collect(),
        Some(other) => Err(format!(
            "json: cannot unmarshal {} into Go struct field {path} of type v1.FailedNodesMap",
            json_kind(other)
        )),
    }
}

/// The names of the nodes of a v1.NodeList.
pub(super) fn node_list_names(value: &Value, path: &str) -> Result<Vec<String>, String> {
    let Some(list) = object_of(value, path, "v1.NodeList")? else {
        return Ok(Vec::new());
    };
    let items = match field(list, "items") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(format!(
                "json: cannot unmarshal {} into Go struct field NodeList.items of type []v1.Node",
                json_kind(other)
            ))
        }
    };
    let mut names = Vec::with_capacity(items.len());
    for item in items {
        let name = match object_of(item, "NodeList.items", "v1.Node")? {
            None => String::new(),
            Some(node) => match field(node, "metadata") {
                None | Some(Value::Null) => String::new(),
                Some(Value::Object(metadata)) => string_of(field(metadata, "name"), "Node.metadata.name")?,
                Some(other) => {
                    return Err(format!(
                        "json: cannot unmarshal {} into Go struct field Node.metadata of type v1.ObjectMeta",
                        json_kind(other)
                    ))
                }
            },
        };
        names.push(name);
    }
    Ok(names)
}
