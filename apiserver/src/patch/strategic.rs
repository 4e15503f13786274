//! Strategic merge patch for the built-in types: a merge patch whose lists
//! merge by the patch merge key of their type, with the directives `$patch`,
//! `$retainKeys`, `$setElementOrder/<list>` and
//! `$deleteFromPrimitiveList/<list>`. The schema says which definition each
//! field holds; `list_strategies` says how each list of a definition merges.

use serde_json::{Map, Value};

use super::list_strategies::{list_strategy, ListStrategy};
use super::PatchError;
use crate::schema::{field_of, Field, Shape};

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";

/// Applies the strategic merge `patch` to a copy of `document`, an object
/// of the definition `definition`.
pub fn apply(definition: &str, document: &Value, patch: &Value) -> Result<Value, PatchError> {
    let Value::Object(patch) = patch else {
        return Err(PatchError::Malformed(
            "a strategic merge patch must be a JSON object".into(),
        ));
    };
    if patch.get(PATCH).is_some_and(|p| p == "delete") {
        // It would leave an object with nothing but what the server fills in.
        return Err(PatchError::Unprocessable(
            "$patch: delete is not allowed at the root of a patch; delete the object with DELETE"
                .into(),
        ));
    }
    let mut doc = match document {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    merge_map(&mut doc, patch, Shape::Struct(Some(definition)))?;
    Ok(Value::Object(doc))
}

fn merge_map(
    original: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    shape: Shape,
) -> Result<(), PatchError> {
    match patch.get(PATCH) {
        None => {}
        Some(Value::String(s)) if s == "merge" => {}
        Some(Value::String(s)) if s == "delete" => {
            original.clear();
            return Ok(());
        }
        Some(Value::String(s)) if s == "replace" => {
            original.clear();
            let rest: Map<String, Value> = patch
                .iter()
                .filter(|(k, _)| *k != PATCH)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            return merge_map(original, &rest, shape);
        }
        Some(other) => {
            return Err(PatchError::Malformed(format!(
                "unknown patch type {other} in $patch: expected replace, merge or delete"
            )))
        }
    }
    if let Some(keys) = patch.get(RETAIN_KEYS) {
        retain_keys(original, patch, keys)?;
    }
    for (key, value) in patch {
        if let Some(list) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            delete_from_primitive_list(original, list, value)?;
        }
    }
    for (key, value) in patch {
        if is_directive(key) {
            continue;
        }
        let order = patch.get(&format!("{SET_ELEMENT_ORDER}{key}"));
        merge_field(original, key, value, shape, order)?;
    }
    // `$setElementOrder` for a list the patch does not otherwise touch.
    for (key, order) in patch {
        if let Some(list) = key.strip_prefix(SET_ELEMENT_ORDER) {
            if !patch.contains_key(list) {
                reorder_untouched(original, list, order, shape)?;
            }
        }
    }
    Ok(())
}

fn is_directive(key: &str) -> bool {
    key == PATCH
        || key == RETAIN_KEYS
        || key.starts_with(SET_ELEMENT_ORDER)
        || key.starts_with(DELETE_FROM_PRIMITIVE_LIST)
}

/// `$retainKeys`: every field of the original not listed is dropped; the
/// patch itself may only set listed fields.
fn retain_keys(
    original: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    keys: &Value,
) -> Result<(), PatchError> {
    let keys: Vec<&str> = match keys {
        Value::Array(items) => items.iter().map(Value::as_str).collect::<Option<_>>(),
        _ => None,
    }
    .ok_or_else(|| {
        PatchError::Malformed(
            "invalid patch format of retainKeys: expected a list of field names".into(),
        )
    })?;
    if let Some(stray) = patch
        .keys()
        .find(|k| !is_directive(k) && !keys.contains(&k.as_str()))
    {
        return Err(PatchError::Unprocessable(format!(
            "patch content doesn't match retainKeys list: \"{stray}\" is not in {keys:?}"
        )));
    }
    original.retain(|k, _| keys.contains(&k.as_str()));
    Ok(())
}

fn delete_from_primitive_list(
    original: &mut Map<String, Value>,
    list: &str,
    values: &Value,
) -> Result<(), PatchError> {
    let Value::Array(values) = values else {
        return Err(PatchError::Malformed(format!(
            "invalid patch format of primitive list: $deleteFromPrimitiveList/{list} must be a list"
        )));
    };
    if let Some(Value::Array(items)) = original.get_mut(list) {
        items.retain(|item| !values.contains(item));
    }
    Ok(())
}

fn order_list<'p>(list: &str, order: Option<&'p Value>) -> Result<Option<&'p [Value]>, PatchError> {
    match order {
        None => Ok(None),
        Some(Value::Array(items)) => Ok(Some(items)),
        Some(_) => Err(PatchError::Malformed(format!(
            "invalid patch format of setElementOrder list: $setElementOrder/{list} must be a list"
        ))),
    }
}

fn merge_field(
    original: &mut Map<String, Value>,
    key: &str,
    value: &Value,
    shape: Shape,
    order: Option<&Value>,
) -> Result<(), PatchError> {
    if value.is_null() {
        original.remove(key);
        return Ok(());
    }
    let (owner, field) = match shape {
        Shape::Struct(owner) => (owner, field_of(owner, key)),
        // A map's values are all of one definition; none is a list.
        Shape::Values(of) => (
            None,
            Field {
                shape: Shape::Struct(of),
                items: None,
            },
        ),
    };
    match value {
        Value::Object(patch) => {
            let slot = original
                .entry(key)
                .or_insert_with(|| Value::Object(Map::new()));
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
            if let Value::Object(target) = slot {
                merge_map(target, patch, field.shape)?;
            }
        }
        Value::Array(patch) => {
            let strategy = owner.and_then(|o| list_strategy(o, key));
            let order = order_list(key, order)?;
            let slot = original
                .entry(key)
                .or_insert_with(|| Value::Array(Vec::new()));
            if !slot.is_array() {
                *slot = Value::Array(Vec::new());
            }
            if let Value::Array(target) = slot {
                merge_list(target, patch, strategy, field.items, order)?;
            }
        }
        scalar => {
            original.insert(key.to_string(), scalar.clone());
        }
    }
    Ok(())
}

fn merge_list(
    original: &mut Vec<Value>,
    patch: &[Value],
    strategy: Option<ListStrategy>,
    items: Option<&str>,
    order: Option<&[Value]>,
) -> Result<(), PatchError> {
    let before = original.clone();
    match strategy {
        None => *original = cleaned(patch, items)?,
        Some(ListStrategy::SetOfPrimitives) => {
            for value in patch {
                if !original.contains(value) {
                    original.push(value.clone());
                }
            }
        }
        Some(ListStrategy::MergeByKey(key)) => merge_keyed_list(original, patch, key, items)?,
    }
    if let (Some(order), Some(strategy)) = (order, strategy) {
        let key_of = |v: &Value| identity(strategy, v);
        *original = reorder(std::mem::take(original), order, &before, &key_of);
    }
    Ok(())
}

/// The value that identifies a list element: its merge key, or itself.
fn identity(strategy: ListStrategy, value: &Value) -> Option<Value> {
    match strategy {
        ListStrategy::MergeByKey(key) => value.get(key).cloned(),
        ListStrategy::SetOfPrimitives => Some(value.clone()),
    }
}

/// A replaced list, with any directives in its objects applied to nothing.
fn cleaned(patch: &[Value], items: Option<&str>) -> Result<Vec<Value>, PatchError> {
    patch
        .iter()
        .map(|value| match value {
            Value::Object(object) => {
                let mut fresh = Map::new();
                merge_map(&mut fresh, object, Shape::Struct(items))?;
                Ok(Value::Object(fresh))
            }
            other => Ok(other.clone()),
        })
        .collect()
}

fn merge_keyed_list(
    original: &mut Vec<Value>,
    patch: &[Value],
    key: &str,
    items: Option<&str>,
) -> Result<(), PatchError> {
    let mut elements = Vec::with_capacity(patch.len());
    for element in patch {
        let Value::Object(element) = element else {
            return Err(PatchError::Malformed(format!(
                "list elements must be objects with the merge key \"{key}\", got {element}"
            )));
        };
        match element.get(PATCH) {
            None => elements.push(element),
            Some(Value::String(s)) if s == "replace" => {
                let rest: Vec<Value> = patch
                    .iter()
                    .filter(|e| e.get(PATCH).is_none())
                    .cloned()
                    .collect();
                *original = cleaned(&rest, items)?;
                return Ok(());
            }
            Some(Value::String(s)) if s == "delete" => {
                let id = merge_key(element, key)?;
                original.retain(|o| o.get(key) != Some(id));
            }
            Some(other) => {
                return Err(PatchError::Malformed(format!(
                    "unknown patch type {other} in a list element: expected replace or delete"
                )))
            }
        }
    }
    for element in elements {
        let id = merge_key(element, key)?;
        let at = original.iter().position(|o| o.get(key) == Some(id));
        let slot = match at {
            Some(at) => &mut original[at],
            None => {
                original.push(Value::Object(Map::new()));
                let last = original.len() - 1;
                &mut original[last]
            }
        };
        if !slot.is_object() {
            *slot = Value::Object(Map::new());
        }
        if let Value::Object(target) = slot {
            merge_map(target, element, Shape::Struct(items))?;
        }
    }
    Ok(())
}

fn merge_key<'e>(element: &'e Map<String, Value>, key: &str) -> Result<&'e Value, PatchError> {
    element.get(key).ok_or_else(|| {
        PatchError::Malformed(format!(
            "map: {} does not contain declared merge key: {key}",
            Value::Object(element.clone())
        ))
    })
}

fn reorder_untouched(
    original: &mut Map<String, Value>,
    list: &str,
    order: &Value,
    shape: Shape,
) -> Result<(), PatchError> {
    let Shape::Struct(Some(owner)) = shape else {
        return Ok(());
    };
    let order = order_list(list, Some(order))?.unwrap_or_default();
    let Some(strategy) = list_strategy(owner, list) else {
        return Ok(());
    };
    if let Some(Value::Array(items)) = original.get_mut(list) {
        let before = items.clone();
        let key_of = |v: &Value| identity(strategy, v);
        *items = reorder(std::mem::take(items), order, &before, &key_of);
    }
    Ok(())
}

/// `$setElementOrder`, as Kubernetes does it: the elements named in `order`
/// come in that order; the others keep their places relative to the stored
/// list (`before`), and new elements not named go last.
fn reorder(
    merged: Vec<Value>,
    order: &[Value],
    before: &[Value],
    key_of: &dyn Fn(&Value) -> Option<Value>,
) -> Vec<Value> {
    let order_ids: Vec<Option<Value>> = order.iter().map(key_of).collect();
    let before_ids: Vec<Option<Value>> = before.iter().map(key_of).collect();
    let position = |ids: &[Option<Value>], v: &Value| -> Option<usize> {
        let id = key_of(v)?;
        ids.iter().position(|i| i.as_ref() == Some(&id))
    };
    let (mut named, mut others): (Vec<Value>, Vec<Value>) = merged
        .into_iter()
        .partition(|v| position(&order_ids, v).is_some());
    named.sort_by_key(|v| position(&order_ids, v));
    others.sort_by_key(|v| position(&before_ids, v).unwrap_or(usize::MAX));
    let mut out = Vec::with_capacity(named.len() + others.len());
    let (mut named, mut others) = (named.into_iter().peekable(), others.into_iter().peekable());
    while let (Some(l), Some(r)) = (named.peek(), others.peek()) {
        let take_named = match (position(&before_ids, l), position(&before_ids, r)) {
            (Some(li), Some(ri)) => li < ri,
            (Some(_), None) => true,
            (None, _) => false,
        };
        let next = if take_named {
            named.next()
        } else {
            others.next()
        };
        out.extend(next);
    }
    out.extend(named);
    out.extend(others);
    out
}

/// Every row of the strategy table whose definition is served names an
/// array field, and a merge key the items have. Rows of definitions no
/// served type uses are skipped.
#[cfg(test)]
pub(super) fn check_table_against_schema() -> Result<(), String> {
    use super::list_strategies::TABLE;
    use crate::schema::{definition_name, DEFINITIONS};
    let mut checked = 0;
    for (definition, field, strategy) in TABLE {
        let Some(owner) = DEFINITIONS.get(*definition) else {
            continue;
        };
        let property = owner
            .get("properties")
            .and_then(|p| p.get(*field))
            .ok_or_else(|| format!("{definition} has no field {field}"))?;
        if property.get("type").and_then(Value::as_str) != Some("array") {
            return Err(format!("{definition}.{field} is not a list"));
        }
        let items = property.get("items").and_then(definition_name);
        match (strategy, items) {
            (ListStrategy::MergeByKey(key), Some(items)) => {
                let has_key = DEFINITIONS
                    .get(items)
                    .and_then(|d| d.get("properties")?.get(*key))
                    .is_some();
                if !has_key {
                    return Err(format!(
                        "{items} (items of {definition}.{field}) has no merge key {key}"
                    ));
                }
            }
            (ListStrategy::SetOfPrimitives, None) => {}
            _ => {
                return Err(format!(
                    "{definition}.{field}: items do not fit {strategy:?}"
                ))
            }
        }
        checked += 1;
    }
    if checked < 30 {
        return Err(format!("only {checked} rows matched served definitions"));
    }
    Ok(())
}
