//! The two edits apply makes to the live object: merging the applied
//! configuration in, and removing the fields its manager stopped applying.
//! Who owns what is decided by the caller; this module only edits values.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::fields::{self, place, Place};
use super::fieldset::{self, FieldSet};
use super::node::Node;

/// `live` with `config` merged in: objects merge field by field, keyed
/// lists item by item on their key, set lists as a union; anything else
/// (scalars, atomic lists and structs, values whose JSON type changed) is
/// replaced by the configuration's value. `null` fields of the
/// configuration change nothing.
pub(crate) fn merge(live: Option<&Value>, config: &Value, node: Node) -> Value {
    match (node, config) {
        (Node::Object(_), Value::Object(fields)) => {
            let mut out = match live {
                Some(Value::Object(live)) => live.clone(),
                _ => Map::new(),
            };
            for (name, value) in fields {
                if value.is_null() {
                    continue;
                }
                let merged = merge(out.get(name), value, node.field(name));
                out.insert(name.clone(), merged);
            }
            Value::Object(out)
        }
        (Node::Keyed { key, .. }, Value::Array(items)) => {
            let identity = |item: &Value| fields::item_key(item, key).ok();
            Value::Array(merge_list(live_items(live), items, &identity, node.item()))
        }
        (Node::Set, Value::Array(items)) => {
            let identity = |item: &Value| Some(fieldset::value(item));
            Value::Array(merge_list(live_items(live), items, &identity, Node::Atomic))
        }
        _ => config.clone(),
    }
}

fn live_items(live: Option<&Value>) -> &[Value] {
    match live {
        Some(Value::Array(items)) => items,
        _ => &[],
    }
}

/// Merges two lists whose items have an identity (merge key or value).
///
/// Order: the items the configuration names come in its order; an item
/// only the live list has keeps its place among them (it stays before the
/// configured item that followed it in the live list); a live item the
/// configuration names again is merged with its configured value (live
/// duplicates of it are dropped). This is the order Kubernetes'
/// structured-merge-diff produces, so that re-applying one manager's items
/// does not reorder another manager's.
fn merge_list(
    live: &[Value],
    config: &[Value],
    identity: &dyn Fn(&Value) -> Option<String>,
    item: Node,
) -> Vec<Value> {
    let live_ids: Vec<Option<String>> = live.iter().map(identity).collect();
    let config_ids: Vec<Option<String>> = config.iter().map(identity).collect();
    let configured: BTreeSet<&String> = config_ids.iter().flatten().collect();
    // The live items the configuration names, in the configuration's order.
    let shared: Vec<&String> = config_ids
        .iter()
        .flatten()
        .filter(|id| live_ids.iter().flatten().any(|l| l == *id))
        .collect();
    let mut next_shared = 0;
    let mut emitted: BTreeSet<&String> = BTreeSet::new();
    let mut out = Vec::with_capacity(live.len() + config.len());
    let (mut l, mut r) = (0, 0);
    while l < live.len() || r < config.len() {
        if let Some(id) = live_ids.get(l) {
            let keep_live = match id {
                None => true,
                Some(id) => !configured.contains(id),
            };
            if keep_live {
                out.push(live[l].clone());
                l += 1;
                continue;
            }
            let id = id.as_ref().filter(|id| !emitted.contains(id));
            let waiting = id.is_some_and(|id| shared.get(next_shared) != Some(&id));
            if id.is_none() || waiting {
                // Already merged, or merged later where the configuration puts it.
                l += 1;
                continue;
            }
        }
        let Some(value) = config.get(r) else {
            l += 1;
            continue;
        };
        let counterpart = config_ids[r].as_ref().and_then(|id| {
            let at = live_ids.iter().position(|l| l.as_ref() == Some(id))?;
            Some(&live[at])
        });
        out.push(merge(counterpart, value, item));
        if let Some(id) = &config_ids[r] {
            emitted.insert(id);
            if shared.get(next_shared) == Some(&id) {
                next_shared += 1;
            }
        }
        r += 1;
    }
    out
}

/// Removes from `object` every path of `doomed`, except what is still
/// owned (`owned`) below it: a field or list item goes whole when no
/// manager owns anything under it; otherwise only its doomed parts go.
/// A map, struct or list left empty by the removal goes too, unless
/// someone owns it. The merge key of a keyed-list item is removed only with the item.
pub(crate) fn remove(object: &mut Value, doomed: &FieldSet, owned: &FieldSet, node: Node) {
    let nothing = FieldSet::default();
    for (element, doomed_child) in &doomed.children {
        let Some(at) = place(object, element) else {
            continue;
        };
        let owned_child = owned.children.get(element).unwrap_or(&nothing);
        let whole = doomed_child.member && owned_child.is_empty();
        let child_node = match &at {
            Place::Key(name) => node.field(name),
            Place::Items(_) => node.item(),
        };
        let mut doomed_child = doomed_child.clone();
        if let (Node::Keyed { key, .. }, Place::Items(_)) = (node, &at) {
            doomed_child.remove_child(&fieldset::field(key));
        }
        match (&mut *object, at) {
            (Value::Object(map), Place::Key(name)) => {
                if whole {
                    map.remove(&name);
                } else if let Some(value) = map.get_mut(&name) {
                    if remove_within(value, &doomed_child, owned_child, child_node) {
                        map.remove(&name);
                    }
                }
            }
            (Value::Array(items), Place::Items(at)) => {
                let mut gone = BTreeSet::new();
                for index in at {
                    if whole
                        || remove_within(&mut items[index], &doomed_child, owned_child, child_node)
                    {
                        gone.insert(index);
                    }
                }
                let mut index = 0;
                items.retain(|_| {
                    index += 1;
                    !gone.contains(&(index - 1))
                });
            }
            _ => {}
        }
    }
}

/// Removes the doomed paths below `value`; true when that emptied a map,
/// struct or list nobody owns, which should then go as well.
fn remove_within(value: &mut Value, doomed: &FieldSet, owned: &FieldSet, node: Node) -> bool {
    if doomed.children.is_empty() {
        return false;
    }
    let was_empty = is_empty_container(value);
    remove(value, doomed, owned, node);
    !was_empty && !owned.member && is_empty_container(value)
}

fn is_empty_container(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.is_empty(),
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}
