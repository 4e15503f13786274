//! Server-side apply and field ownership (`metadata.managedFields`): the
//! merge of an applied configuration into the live object, conflicts with
//! other managers, and the ownership every other write records. Pure
//! functions over JSON; reading, validating and storing are the registry's.
//!
//! Choices where Kubernetes leaves room or skiff differs:
//! - An explicit `null` in an applied configuration is ignored: it neither
//!   sets, removes nor owns the field (Kubernetes documents no meaning for
//!   it in apply).
//! - Keyed-list order follows structured-merge-diff: configured items in
//!   the configuration's order, other live items kept where they were.
//! - Update entries are one per (manager, subresource); Kubernetes also
//!   splits them by apiVersion. Entries are not capped in number.
//! - `.` marks keyed-list items and maps (labels, data…) a write created,
//!   not structs: Kubernetes' choice there depends on Go pointer types.

mod conflict;
mod fields;
mod fieldset;
mod managed;
mod merge;
mod node;

use serde_json::{Map, Value};

use crate::resources::ResourceType;
use crate::status::ApiError;
use fieldset::FieldSet;
use managed::{Entry, Identity, Operation};
use node::Node;

/// Who is writing: the field manager, the apiVersion the request used, and
/// the subresource ("status") if the write went through one.
pub struct Manager<'a> {
    pub name: &'a str,
    pub api_version: &'a str,
    pub subresource: Option<&'a str>,
}

impl Manager<'_> {
    fn identity(&self, operation: Operation) -> Identity<'_> {
        Identity {
            manager: self.name,
            operation,
            subresource: self.subresource,
        }
    }
}

/// Metadata the server sets; an applied configuration does not change it.
const SERVER_METADATA: &[&str] = &[
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
];

/// Metadata no manager owns, besides the server's.
const IDENTITY_METADATA: &[&str] = &["name", "namespace", "managedFields"];

/// Server-side apply of `applied` (the request body, already parsed to JSON)
/// by `manager`. `current`: the live object, or None when it does not exist
/// (then the result is the object to create). Returns the merged object
/// with `metadata.managedFields` updated (operation "Apply", time `now`,
/// RFC 3339 string). Server-owned metadata (uid, resourceVersion,
/// creationTimestamp, generation, deletionTimestamp...) is NOT this
/// function's business: return it as it is in `current`; the registry
/// overwrites it. A conflict is a 409 (see below) unless `force`.
pub fn apply(
    resource: &ResourceType,
    current: Option<&Value>,
    applied: &Value,
    manager: &Manager,
    force: bool,
    now: &str,
) -> Result<Value, ApiError> {
    check_configuration(resource, applied)?;
    let root = Node::root(resource.definition);
    let name = object_name(applied)
        .or_else(|| current.and_then(object_name))
        .unwrap_or_default();
    let configured = fields::of_config(applied, root)
        .map(|set| tracked(set, resource, manager.subresource))
        .map_err(|causes| {
            ApiError::invalid(resource.group, resource.kind, resource.plural, name, causes)
        })?;
    let empty = Value::Object(Map::new());
    let live = current.unwrap_or(&empty);
    let mut entries = managed::decode_stored(live.pointer("/metadata/managedFields"));
    let mut merged = merge::merge(Some(live), applied, root);
    keep_server_metadata(&mut merged, current);

    // The manager's Apply set becomes exactly what it applied; what it
    // applied before and now left out goes, unless someone owns it.
    let me = manager.identity(Operation::Apply);
    if let Some(previous) = replace_fields(&mut entries, manager, me, configured) {
        let owned = owned_by_anyone(&entries);
        merge::remove(&mut merged, &previous.difference(&owned), &owned, root);
    }

    let changes = changes_between(resource, manager, root, live, &merged);
    let set_by_apply = changes.set_by_write();
    let takeover = client_side_takeover(resource, manager, live, root);
    let conflicts: Vec<(&Entry, FieldSet)> = entries
        .iter()
        .filter(|e| !e.is(me))
        .map(|e| {
            let fields = e.fields.intersection(&set_by_apply);
            match e.manager == CLIENT_SIDE_APPLY {
                true => (e, fields.difference(&takeover)),
                false => (e, fields),
            }
        })
        .filter(|(_, fields)| !fields.is_empty())
        .collect();
    if !conflicts.is_empty() && !force {
        return Err(conflict::error(resource, name, &conflicts));
    }
    for entry in &mut entries {
        if entry.is(me) {
            entry.api_version = manager.api_version.to_string();
            if entry.time.is_none() || !changes.is_empty() {
                entry.time = Some(now.to_string());
            }
        } else {
            // Forced: the conflicting fields move to this manager.
            entry.fields = entry.fields.difference(&set_by_apply);
        }
        entry.fields = fields::existing(&entry.fields.difference(&changes.removed), &merged);
    }
    set_managed_fields(&mut merged, managed::encode(entries));
    Ok(merged)
}

/// The annotation client-side `kubectl apply` keeps its configuration in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The field manager of client-side `kubectl apply`.
const CLIENT_SIDE_APPLY: &str = "kubectl-client-side-apply";

/// Kubernetes' path from client-side to server-side apply: `kubectl`'s
/// server-side apply may take, without a conflict, the fields that its
/// client-side self configured (the last-applied annotation) and still
/// owns. Other managers, and fields others changed since, still conflict.
fn client_side_takeover(
    resource: &ResourceType,
    manager: &Manager,
    live: &Value,
    root: Node,
) -> FieldSet {
    if manager.name != "kubectl" {
        return FieldSet::default();
    }
    live.pointer("/metadata/annotations")
        .and_then(|a| a.get(LAST_APPLIED))
        .and_then(Value::as_str)
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
        .filter(Value::is_object)
        .and_then(|last| fields::of_config(&last, root).ok())
        .map(|set| tracked(set, resource, manager.subresource))
        .unwrap_or_default()
}

/// Sets the fields of the entry `who` of `manager` (adding the entry if
/// there is none); returns the fields it had.
fn replace_fields(
    entries: &mut Vec<Entry>,
    manager: &Manager,
    who: Identity,
    fields: FieldSet,
) -> Option<FieldSet> {
    if let Some(entry) = entries.iter_mut().find(|e| e.is(who)) {
        return Some(std::mem::replace(&mut entry.fields, fields));
    }
    entries.push(Entry {
        manager: manager.name.to_string(),
        operation: who.operation,
        api_version: manager.api_version.to_string(),
        time: None,
        subresource: manager.subresource.map(str::to_string),
        fields,
    });
    None
}

/// How the tracked fields of `new` differ from those of `old`.
fn changes_between(
    resource: &ResourceType,
    manager: &Manager,
    root: Node,
    old: &Value,
    new: &Value,
) -> fields::Changes {
    let tracked_fields = |object: &Value| {
        tracked(
            fields::of_object(object, root),
            resource,
            manager.subresource,
        )
    };
    fields::compare((&tracked_fields(old), old), (&tracked_fields(new), new))
}

/// After any non-apply write (create: `old` None; update/patch: `old`
/// Some), records in `new.metadata.managedFields` that `manager` now owns
/// the fields it set or changed (operation "Update"), takes those fields
/// away from other managers, drops fields that no longer exist from every
/// entry, and removes entries left empty. If the request body carried its
/// own managedFields that differ from `old`'s, Kubernetes' rules for that
/// apply (a non-empty list given by the client replaces the stored one; an
/// empty list `[]` is treated as "not given"; `[{}]` clears it) — follow
/// Kubernetes documentation. No change of fields → managedFields unchanged
/// (important: a no-op write must leave the object byte-identical so the
/// registry can skip the write; do not bump `time` when nothing changed).
pub fn record_update(
    resource: &ResourceType,
    old: Option<&Value>,
    new: &mut Value,
    manager: &Manager,
    now: &str,
) {
    if !new.is_object() {
        return;
    }
    let root = Node::root(resource.definition);
    let stored = old.and_then(|o| o.pointer("/metadata/managedFields"));
    let requested = new.pointer("/metadata/managedFields");
    let (entries, kept_stored) = starting_entries(stored, requested, manager);
    if old.is_none() && kept_stored && entries.is_empty() {
        record_create(resource, root, new, manager, now);
    } else {
        record_change(resource, root, old, new, manager, now, entries, kept_stored);
    }
}

/// A create that names no managers of its own: the manager owns every
/// tracked field of the new object. What `record_change` finds comparing
/// the object with nothing, without the comparison (a create is most
/// writes; the comparison was a third of a pod create's CPU time).
fn record_create(
    resource: &ResourceType,
    root: Node,
    new: &mut Value,
    manager: &Manager,
    now: &str,
) {
    // Every path of the object's own field set leads to a value in it:
    // unlike an update's, a create's set needs no `existing` pass.
    let fields = tracked(fields::of_object(new, root), resource, manager.subresource);
    if fields.is_empty() {
        set_managed_fields(new, None);
        return;
    }
    let me = manager.identity(Operation::Update);
    let mut entries = Vec::new();
    replace_fields(&mut entries, manager, me, fields);
    for entry in &mut entries {
        entry.time = Some(now.to_string());
    }
    set_managed_fields(new, managed::encode(entries));
}

/// `record_update` in general: the fields that changed between `old` (or
/// nothing) and `new` go to the manager, from the `entries` the write
/// starts with.
#[allow(clippy::too_many_arguments)]
fn record_change(
    resource: &ResourceType,
    root: Node,
    old: Option<&Value>,
    new: &mut Value,
    manager: &Manager,
    now: &str,
    mut entries: Vec<Entry>,
    kept_stored: bool,
) {
    let stored = old.and_then(|o| o.pointer("/metadata/managedFields"));
    let empty = Value::Object(Map::new());
    let changes = changes_between(resource, manager, root, old.unwrap_or(&empty), new);
    if kept_stored && changes.is_empty() {
        let stored = stored.cloned();
        set_managed_fields(new, stored);
        return;
    }

    let set_by_update = changes.set_by_write();
    let me = manager.identity(Operation::Update);
    if !entries.iter().any(|e| e.is(me)) {
        replace_fields(&mut entries, manager, me, FieldSet::default());
    }
    for entry in &mut entries {
        if entry.is(me) {
            entry.fields.union(&set_by_update);
            if !changes.is_empty() {
                entry.api_version = manager.api_version.to_string();
                entry.time = Some(now.to_string());
            }
        } else {
            entry.fields = entry.fields.difference(&set_by_update);
        }
        entry.fields = fields::existing(&entry.fields.difference(&changes.removed), new);
    }
    set_managed_fields(new, managed::encode(entries));
}

/// The entries an update starts from, and whether they are the stored ones
/// unchanged. Kubernetes: a write through a subresource cannot set
/// managedFields; `[{}]` resets them; a non-empty list that reads as
/// managedFields replaces the stored ones; anything else (missing, `[]`,
/// unreadable) keeps the stored ones, so that clients unaware of the field
/// never drop it.
fn starting_entries(
    stored: Option<&Value>,
    requested: Option<&Value>,
    manager: &Manager,
) -> (Vec<Entry>, bool) {
    let keep = || (managed::decode_stored(stored), true);
    if manager.subresource.is_some() || requested == stored {
        return keep();
    }
    match requested {
        Some(Value::Array(items)) if items.len() == 1 && items[0] == Value::Object(Map::new()) => {
            (Vec::new(), false)
        }
        Some(list @ Value::Array(items)) if !items.is_empty() => match managed::decode(list) {
            Ok(entries) => (entries, false),
            Err(_) => keep(),
        },
        _ => keep(),
    }
}

/// Every field some entry owns.
fn owned_by_anyone(entries: &[Entry]) -> FieldSet {
    let mut owned = FieldSet::default();
    for entry in entries {
        owned.union(&entry.fields);
    }
    owned
}

/// `set` without the fields no manager owns: identity and server metadata,
/// and for a resource with a status subresource, `status` on writes to the
/// main resource and all but `status` and metadata on writes to status.
fn tracked(mut set: FieldSet, resource: &ResourceType, subresource: Option<&str>) -> FieldSet {
    set.remove_child("f:apiVersion");
    set.remove_child("f:kind");
    if let Some(metadata) = set.children.get_mut("f:metadata") {
        metadata.member = false;
        for name in SERVER_METADATA.iter().chain(IDENTITY_METADATA) {
            metadata.remove_child(&fieldset::field(name));
        }
    }
    if resource.has_subresource("status") {
        match subresource {
            Some("status") => set
                .children
                .retain(|element, _| element == "f:status" || element == "f:metadata"),
            _ => set.remove_child("f:status"),
        }
    }
    set.children.retain(|_, child| !child.is_empty());
    set
}

/// A 400 unless `applied` is an object of this resource's apiVersion and
/// kind, with object metadata and no managedFields.
fn check_configuration(resource: &ResourceType, applied: &Value) -> Result<(), ApiError> {
    let Value::Object(config) = applied else {
        return Err(ApiError::bad_request(format!(
            "an apply configuration must be an object (a {} with apiVersion, kind and metadata), got {}",
            resource.kind,
            json_type(applied)
        )));
    };
    let api_version = config
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = config
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let expected = resource.api_version();
    if kind != resource.kind {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        return Err(ApiError::bad_request(format!(
            "invalid object type: {group}/{version}, Kind={kind}: this endpoint applies apiVersion \"{expected}\", kind \"{}\"",
            resource.kind
        )));
    }
    if api_version != expected {
        return Err(ApiError::bad_request(format!(
            "Incorrect version specified in apply patch. Specified patch version: {api_version}, expected: {expected}"
        )));
    }
    match config.get("metadata") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(metadata)) => match metadata.get("managedFields") {
            None | Some(Value::Null) => Ok(()),
            Some(_) => Err(ApiError::bad_request(
                "metadata.managedFields must be nil: an apply configuration cannot set field ownership",
            )),
        },
        Some(other) => Err(ApiError::bad_request(format!(
            "metadata must be an object, got {}",
            json_type(other)
        ))),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

fn object_name(object: &Value) -> Option<&str> {
    object.pointer("/metadata/name").and_then(Value::as_str)
}

/// Puts the server's metadata of `current` back into `merged` (an applied
/// configuration may carry, e.g., a resourceVersion).
fn keep_server_metadata(merged: &mut Value, current: Option<&Value>) {
    let Some(Value::Object(metadata)) = merged.get_mut("metadata") else {
        return;
    };
    for name in SERVER_METADATA {
        match current.and_then(|c| c.get("metadata")?.get(name)) {
            Some(value) => metadata.insert(name.to_string(), value.clone()),
            None => metadata.remove(*name),
        };
    }
}

/// Sets (or, with `None`, removes) `metadata.managedFields` of `object`.
fn set_managed_fields(object: &mut Value, managed_fields: Option<Value>) {
    let Value::Object(object) = object else {
        return;
    };
    match managed_fields {
        Some(list) => {
            let metadata = object
                .entry("metadata")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(metadata) = metadata {
                metadata.insert("managedFields".into(), list);
            }
        }
        None => {
            if let Some(Value::Object(metadata)) = object.get_mut("metadata") {
                metadata.remove("managedFields");
            }
        }
    }
}

#[cfg(test)]
mod tests;
