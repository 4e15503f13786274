//! A set of field paths, as `managedFields[].fieldsV1` stores it: a trie
//! whose keys are path elements (`f:name`, `k:{"name":"x"}`, `v:"x"`,
//! `i:0`) and whose `.` marks a path that is itself in the set. Knows the
//! format and the set algebra, not the schema.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// One node of the trie: the set of paths below some path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FieldSet {
    /// The path that leads to this node is in the set (a leaf, or `.`).
    pub(crate) member: bool,
    /// By canonical path element.
    pub(crate) children: BTreeMap<String, FieldSet>,
}

/// The path element of the struct field or map key `name`.
pub(crate) fn field(name: &str) -> String {
    format!("f:{name}")
}

/// The path element of a keyed-list item: the JSON of its key fields.
pub(crate) fn key(fields: &Map<String, Value>) -> String {
    format!("k:{}", Value::Object(fields.clone()))
}

/// The path element of a set-list item: the JSON of the item.
pub(crate) fn value(item: &Value) -> String {
    format!("v:{item}")
}

impl FieldSet {
    pub(crate) fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }

    /// Adds `path` (a list of path elements) to the set.
    pub(crate) fn insert(&mut self, path: &[String]) {
        let mut node = self;
        for element in path {
            node = node.children.entry(element.clone()).or_default();
        }
        node.member = true;
    }

    #[cfg(test)]
    pub(crate) fn contains(&self, path: &[String]) -> bool {
        let mut node = self;
        for element in path {
            match node.children.get(element) {
                Some(child) => node = child,
                None => return false,
            }
        }
        node.member
    }

    pub(crate) fn union(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (element, theirs) in &other.children {
            self.children
                .entry(element.clone())
                .or_default()
                .union(theirs);
        }
    }

    /// The paths of `self` that are not in `other`.
    pub(crate) fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && !other.member,
            children: BTreeMap::new(),
        };
        for (element, mine) in &self.children {
            let rest = match other.children.get(element) {
                Some(theirs) => mine.difference(theirs),
                None => mine.clone(),
            };
            if !rest.is_empty() {
                out.children.insert(element.clone(), rest);
            }
        }
        out
    }

    /// The paths in both `self` and `other`.
    pub(crate) fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && other.member,
            children: BTreeMap::new(),
        };
        for (element, mine) in &self.children {
            if let Some(theirs) = other.children.get(element) {
                let both = mine.intersection(theirs);
                if !both.is_empty() {
                    out.children.insert(element.clone(), both);
                }
            }
        }
        out
    }

    /// Removes `element` and everything below it from this node.
    pub(crate) fn remove_child(&mut self, element: &str) {
        self.children.remove(element);
    }

    /// Every path in the set, in element order.
    pub(crate) fn paths(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        if self.member && !prefix.is_empty() {
            out.push(prefix.clone());
        }
        for (element, child) in &self.children {
            prefix.push(element.clone());
            child.collect_paths(prefix, out);
            prefix.pop();
        }
    }

    /// The FieldsV1 JSON of the set.
    pub(crate) fn to_fields_v1(&self) -> Value {
        let mut out = Map::new();
        if self.member && !self.children.is_empty() {
            out.insert(".".into(), Value::Object(Map::new()));
        }
        for (element, child) in &self.children {
            out.insert(element.clone(), child.to_fields_v1());
        }
        Value::Object(out)
    }

    /// Reads FieldsV1 JSON. Element keys are made canonical (`k:` and `v:`
    /// JSON re-serialized), so that sets written by clients compare equal
    /// to the sets the server computes. `Err` says what is malformed.
    pub(crate) fn from_fields_v1(fields: &Value) -> Result<FieldSet, String> {
        let Value::Object(map) = fields else {
            return Err(format!("expected an object, got {fields}"));
        };
        let mut out = FieldSet::default();
        for (element, child) in map {
            if element == "." {
                out.member = true;
                continue;
            }
            let element = canonical(element)?;
            let mut child = FieldSet::from_fields_v1(child)?;
            if child.children.is_empty() {
                child.member = true;
            }
            out.children.entry(element).or_default().union(&child);
        }
        Ok(out)
    }
}

fn canonical(element: &str) -> Result<String, String> {
    let Some((kind, rest)) = element.split_once(':') else {
        return Err(format!("unknown path element {element:?}"));
    };
    let json = |text: &str| {
        serde_json::from_str::<Value>(text)
            .map_err(|err| format!("path element {element:?} holds no JSON value: {err}"))
    };
    match kind {
        "f" => Ok(element.to_string()),
        "i" => rest
            .parse::<usize>()
            .map(|i| format!("i:{i}"))
            .map_err(|_| format!("path element {element:?} holds no list index")),
        "v" => Ok(value(&json(rest)?)),
        "k" => match json(rest)? {
            Value::Object(fields) => Ok(key(&fields)),
            _ => Err(format!("path element {element:?} holds no key object")),
        },
        _ => Err(format!("unknown path element {element:?}")),
    }
}

/// A path as Kubernetes prints it in conflicts:
/// `.spec.containers[name="nginx"].image`, `.metadata.finalizers[="a"]`.
pub(crate) fn display(path: &[String]) -> String {
    let mut out = String::new();
    for element in path {
        let (kind, rest) = element.split_once(':').unwrap_or(("f", element));
        match kind {
            "k" => {
                let fields = match serde_json::from_str::<Value>(rest) {
                    Ok(Value::Object(fields)) => fields
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(","),
                    _ => rest.to_string(),
                };
                out.push_str(&format!("[{fields}]"));
            }
            "v" => out.push_str(&format!("[={rest}]")),
            "i" => out.push_str(&format!("[{rest}]")),
            _ => {
                out.push('.');
                out.push_str(rest);
            }
        }
    }
    out
}
