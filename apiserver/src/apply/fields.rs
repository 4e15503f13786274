//! The field set of an object — the paths a manager owns by writing it —
//! and the difference of two objects as added, modified and removed paths.
//! Not ownership itself: `managed` holds who owns what.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::fieldset::{self, FieldSet};
use super::node::Node;
use crate::status::Cause;

/// The fields an apply configuration sets: every leaf, every keyed-list
/// item (`.`), every set-list item. `null` fields set nothing. Keyed-list
/// items without their key, and duplicate items, are errors (one cause
/// each, with the field path).
pub(crate) fn of_config(config: &Value, root: Node) -> Result<FieldSet, Vec<Cause>> {
    let mut walker = Walker {
        config: true,
        location: Vec::new(),
        causes: Vec::new(),
    };
    let mut set = FieldSet::default();
    walker.value(config, root, &mut set);
    match walker.causes.is_empty() {
        true => Ok(set),
        false => Err(walker.causes),
    }
}

/// The fields of a stored object, as an update that wrote it owns them.
/// Never fails: a keyed list with an item lacking its key is owned whole.
/// A map (labels, data…) also marks itself (`.`), as Kubernetes records
/// a map an update created.
pub(crate) fn of_object(object: &Value, root: Node) -> FieldSet {
    let mut walker = Walker {
        config: false,
        location: Vec::new(),
        causes: Vec::new(),
    };
    let mut set = FieldSet::default();
    walker.value(object, root, &mut set);
    set
}

struct Walker {
    /// Walking an apply configuration (strict) rather than an object.
    config: bool,
    /// Where the walk is, for error messages: `spec`, `containers`, `[0]`.
    location: Vec<String>,
    causes: Vec<Cause>,
}

impl Walker {
    fn value(&mut self, value: &Value, node: Node, set: &mut FieldSet) {
        match (node, value) {
            (Node::Object(_), Value::Object(fields)) if !fields.is_empty() => {
                self.object(fields, node, set)
            }
            (Node::Keyed { key, .. }, Value::Array(items)) if !items.is_empty() => {
                self.keyed(items, key, node.item(), set)
            }
            (Node::Set, Value::Array(items)) if !items.is_empty() => self.set(items, set),
            // Scalars, atomic values, empty maps and lists, and values whose
            // JSON type is not the schema's are owned whole.
            _ => set.member = true,
        }
    }

    fn object(&mut self, fields: &Map<String, Value>, node: Node, set: &mut FieldSet) {
        if !self.config && node.is_map() {
            set.member = true;
        }
        for (name, value) in fields {
            if self.config && value.is_null() {
                continue;
            }
            let mut child = FieldSet::default();
            self.enter(|| name.clone());
            self.value(value, node.field(name), &mut child);
            self.leave();
            if !child.is_empty() {
                set.children.insert(fieldset::field(name), child);
            }
        }
    }

    fn keyed(&mut self, items: &[Value], key: &str, item: Node, set: &mut FieldSet) {
        let elements: Vec<Result<String, KeyProblem>> =
            items.iter().map(|i| item_key(i, key)).collect();
        if !self.config && elements.iter().any(Result::is_err) {
            set.member = true;
            return;
        }
        let mut seen = BTreeSet::new();
        for (index, (value, element)) in items.iter().zip(elements).enumerate() {
            self.enter(|| format!("[{index}]"));
            match element {
                Err(problem) => self.key_problem(problem, value, key),
                Ok(element) if self.config && !seen.insert(element.clone()) => {
                    let shown = element.trim_start_matches("k:").to_string();
                    self.cause("FieldValueDuplicate", format!("Duplicate value: {shown}"));
                }
                Ok(element) => {
                    let child = set.children.entry(element).or_default();
                    self.value(value, item, child);
                    child.member = true;
                }
            }
            self.leave();
        }
    }

    /// Steps into a field or item for error messages: only an apply
    /// configuration's walk reports errors, so an object's walk (every
    /// write's managedFields) skips building the path.
    fn enter(&mut self, segment: impl FnOnce() -> String) {
        if self.config {
            self.location.push(segment());
        }
    }

    fn leave(&mut self) {
        if self.config {
            self.location.pop();
        }
    }

    fn set(&mut self, items: &[Value], set: &mut FieldSet) {
        for (index, value) in items.iter().enumerate() {
            let element = fieldset::value(value);
            if self.config && set.children.contains_key(&element) {
                self.location.push(format!("[{index}]"));
                self.cause("FieldValueDuplicate", format!("Duplicate value: {value}"));
                self.location.pop();
                continue;
            }
            set.children.entry(element).or_default().member = true;
        }
    }

    fn key_problem(&mut self, problem: KeyProblem, item: &Value, key: &str) {
        match problem {
            KeyProblem::NotObject => self.cause(
                "FieldValueInvalid",
                format!("Invalid value: {item}: items of this list are objects merged by their field \"{key}\""),
            ),
            KeyProblem::Missing => {
                self.location.push(key.to_string());
                self.cause(
                    "FieldValueRequired",
                    format!("Required value: items of this list are merged by \"{key}\", which every item of an apply configuration must set"),
                );
                self.location.pop();
            }
            KeyProblem::NotScalar(value) => {
                self.location.push(key.to_string());
                self.cause(
                    "FieldValueInvalid",
                    format!("Invalid value: {value}: a merge key must be a string, number or boolean"),
                );
                self.location.pop();
            }
        }
    }

    fn cause(&mut self, reason: &'static str, message: String) {
        let mut field = String::new();
        for segment in &self.location {
            if !field.is_empty() && !segment.starts_with('[') {
                field.push('.');
            }
            field.push_str(segment);
        }
        self.causes.push(Cause {
            reason,
            message,
            field,
        });
    }
}

/// Why a keyed-list item has no usable key.
pub(crate) enum KeyProblem {
    NotObject,
    Missing,
    NotScalar(Value),
}

/// The path element (`k:{"name":"x"}`) of an item of a list merged by `key`.
pub(crate) fn item_key(item: &Value, key: &str) -> Result<String, KeyProblem> {
    let Value::Object(fields) = item else {
        return Err(KeyProblem::NotObject);
    };
    match fields.get(key) {
        None | Some(Value::Null) => Err(KeyProblem::Missing),
        Some(value @ (Value::Object(_) | Value::Array(_))) => {
            Err(KeyProblem::NotScalar(value.clone()))
        }
        Some(value) => {
            let mut only = Map::new();
            only.insert(key.to_string(), value.clone());
            Ok(fieldset::key(&only))
        }
    }
}

/// A path element, parsed.
enum Element {
    Field(String),
    Key(Map<String, Value>),
    Item(Value),
    Index(usize),
}

fn parse(element: &str) -> Option<Element> {
    let (kind, rest) = element.split_once(':')?;
    match kind {
        "f" => Some(Element::Field(rest.to_string())),
        "k" => match serde_json::from_str(rest).ok()? {
            Value::Object(fields) => Some(Element::Key(fields)),
            _ => None,
        },
        "v" => serde_json::from_str(rest).ok().map(Element::Item),
        "i" => rest.parse().ok().map(Element::Index),
        _ => None,
    }
}

impl Element {
    fn matches(&self, item: &Value) -> bool {
        match self {
            Element::Key(fields) => fields.iter().all(|(k, v)| item.get(k) == Some(v)),
            Element::Item(value) => item == value,
            Element::Field(_) | Element::Index(_) => false,
        }
    }
}

/// The value at one path element below `value`, if there is one.
pub(crate) fn child_value<'v>(value: &'v Value, element: &str) -> Option<&'v Value> {
    match parse(element)? {
        Element::Field(name) => value.as_object()?.get(&name),
        Element::Index(index) => value.as_array()?.get(index),
        list_item => value.as_array()?.iter().find(|i| list_item.matches(i)),
    }
}

/// Where the value at `element` is below `value`: a map key, or the
/// positions of the list items it names (several when a stored list has
/// duplicates).
pub(crate) enum Place {
    Key(String),
    Items(Vec<usize>),
}

pub(crate) fn place(value: &Value, element: &str) -> Option<Place> {
    match parse(element)? {
        Element::Field(name) => value
            .as_object()?
            .contains_key(&name)
            .then_some(Place::Key(name)),
        Element::Index(index) => {
            (index < value.as_array()?.len()).then(|| Place::Items(vec![index]))
        }
        list_item => {
            let at: Vec<usize> = value
                .as_array()?
                .iter()
                .enumerate()
                .filter(|(_, i)| list_item.matches(i))
                .map(|(at, _)| at)
                .collect();
            (!at.is_empty()).then_some(Place::Items(at))
        }
    }
}

/// The paths of `set` that still lead to a value in `object`.
pub(crate) fn existing(set: &FieldSet, object: &Value) -> FieldSet {
    let mut out = FieldSet {
        member: set.member,
        children: Default::default(),
    };
    for (element, child) in &set.children {
        if let Some(value) = child_value(object, element) {
            let kept = existing(child, value);
            if !kept.is_empty() {
                out.children.insert(element.clone(), kept);
            }
        }
    }
    out
}

/// How one object differs from another, in field paths.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    pub(crate) added: FieldSet,
    pub(crate) modified: FieldSet,
    pub(crate) removed: FieldSet,
}

impl Changes {
    pub(crate) fn is_empty(&self) -> bool {
        self.added.is_empty() && self.modified.is_empty() && self.removed.is_empty()
    }

    /// The paths a write set: added or given another value.
    pub(crate) fn set_by_write(&self) -> FieldSet {
        let mut out = self.added.clone();
        out.union(&self.modified);
        out
    }
}

/// Compares two objects through their field sets (`of_object`, limited to
/// the tracked fields): a path in one set only is added or removed; a leaf
/// in both whose value differs is modified.
pub(crate) fn compare(old: (&FieldSet, &Value), new: (&FieldSet, &Value)) -> Changes {
    let mut changes = Changes::default();
    diff(Some(old), Some(new), &mut Vec::new(), &mut changes);
    changes
}

type Side<'a> = Option<(&'a FieldSet, &'a Value)>;

fn diff(old: Side, new: Side, path: &mut Vec<String>, changes: &mut Changes) {
    match (old, new) {
        (Some((o, _)), None) if o.member => changes.removed.insert(path),
        (None, Some((n, _))) if n.member => changes.added.insert(path),
        (Some((o, _)), Some((n, _))) if o.member && !n.member => changes.removed.insert(path),
        (Some((o, _)), Some((n, _))) if !o.member && n.member => changes.added.insert(path),
        (Some((o, ov)), Some((n, nv)))
            if o.member && o.children.is_empty() && n.children.is_empty() && ov != nv =>
        {
            changes.modified.insert(path)
        }
        _ => {}
    }
    let mut elements: BTreeSet<&String> = BTreeSet::new();
    for side in [old, new].into_iter().flatten() {
        elements.extend(side.0.children.keys());
    }
    for element in elements {
        path.push(element.clone());
        diff(down(old, element), down(new, element), path, changes);
        path.pop();
    }
}

fn down<'a>(side: Side<'a>, element: &str) -> Side<'a> {
    let (set, value) = side?;
    Some((set.children.get(element)?, child_value(value, element)?))
}
