//! `metadata.managedFields` as entries: who (manager, operation,
//! subresource) owns which field set, read from and written back to the
//! object in Kubernetes' order. Not how ownership changes (`mod.rs` does).

use serde_json::{Map, Value};

use super::fieldset::FieldSet;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One `managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Entry {
    pub(crate) manager: String,
    pub(crate) operation: Operation,
    pub(crate) api_version: String,
    /// RFC 3339, as written.
    pub(crate) time: Option<String>,
    pub(crate) subresource: Option<String>,
    pub(crate) fields: FieldSet,
}

/// What makes two entries the same entry: one Apply entry per manager and
/// one Update entry per manager, each per subresource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Identity<'a> {
    pub(crate) manager: &'a str,
    pub(crate) operation: Operation,
    pub(crate) subresource: Option<&'a str>,
}

impl Entry {
    pub(crate) fn is(&self, who: Identity) -> bool {
        self.manager == who.manager
            && self.operation == who.operation
            && self.subresource.as_deref() == who.subresource
    }

    /// The manager as Kubernetes names it in a conflict:
    /// `"kubectl"`, `"kube-scale" using apps/v1`,
    /// `"ctl" with subresource "status" using v1`.
    pub(crate) fn describe(&self) -> String {
        let mut out = quote(&self.manager);
        if let Some(subresource) = &self.subresource {
            out.push_str(&format!(" with subresource {}", quote(subresource)));
        }
        if self.operation == Operation::Update {
            out.push_str(&format!(" using {}", self.api_version));
        }
        out
    }

    fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("manager".into(), self.manager.clone().into());
        out.insert("operation".into(), self.operation.as_str().into());
        out.insert("apiVersion".into(), self.api_version.clone().into());
        if let Some(time) = &self.time {
            out.insert("time".into(), time.clone().into());
        }
        out.insert("fieldsType".into(), "FieldsV1".into());
        out.insert("fieldsV1".into(), self.fields.to_fields_v1());
        if let Some(subresource) = &self.subresource {
            out.insert("subresource".into(), subresource.clone().into());
        }
        Value::Object(out)
    }
}

fn quote(text: &str) -> String {
    Value::String(text.to_string()).to_string()
}

/// Reads a `managedFields` list the client wrote. `Err` names the first
/// entry Kubernetes would not accept.
pub(crate) fn decode(list: &Value) -> Result<Vec<Entry>, String> {
    let Value::Array(items) = list else {
        return Err("managedFields must be a list".into());
    };
    let mut entries = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let entry = decode_entry(item).map_err(|why| format!("managedFields[{index}]: {why}"))?;
        add(&mut entries, entry);
    }
    Ok(entries)
}

/// Reads the stored `managedFields` of an object; entries that cannot be
/// read are left out rather than failing the write.
pub(crate) fn decode_stored(list: Option<&Value>) -> Vec<Entry> {
    let mut entries = Vec::new();
    if let Some(Value::Array(items)) = list {
        for entry in items.iter().filter_map(|i| decode_entry(i).ok()) {
            add(&mut entries, entry);
        }
    }
    entries
}

/// Adds `entry`, merging it into an entry of the same identity.
fn add(entries: &mut Vec<Entry>, entry: Entry) {
    let who = Identity {
        manager: &entry.manager,
        operation: entry.operation,
        subresource: entry.subresource.as_deref(),
    };
    match entries.iter_mut().find(|e| e.is(who)) {
        Some(existing) => existing.fields.union(&entry.fields),
        None => entries.push(entry),
    }
}

fn decode_entry(item: &Value) -> Result<Entry, String> {
    let Value::Object(item) = item else {
        return Err("an entry must be an object".into());
    };
    let text = |name: &str| -> Result<Option<String>, String> {
        match item.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(format!("{name} must be a string, got {other}")),
        }
    };
    let operation = match text("operation")?.as_deref() {
        Some("Apply") => Operation::Apply,
        Some("Update") => Operation::Update,
        _ => return Err("operation must be `Apply` or `Update`".into()),
    };
    let api_version = text("apiVersion")?
        .filter(|v| !v.is_empty())
        .ok_or("apiVersion must not be empty")?;
    match text("fieldsType")?.as_deref() {
        None | Some("FieldsV1") => {}
        Some(other) => return Err(format!("fieldsType must be `FieldsV1`, got {other:?}")),
    }
    let fields = match item.get("fieldsV1") {
        None | Some(Value::Null) => FieldSet::default(),
        Some(fields) => {
            FieldSet::from_fields_v1(fields).map_err(|why| format!("fieldsV1: {why}"))?
        }
    };
    Ok(Entry {
        manager: text("manager")?.unwrap_or_default(),
        operation,
        api_version,
        time: text("time")?,
        subresource: text("subresource")?.filter(|s| !s.is_empty()),
        fields,
    })
}

/// The `managedFields` list of `entries` without the empty ones, in
/// Kubernetes' order (Apply before Update, then oldest first, then by
/// manager); `None` when nothing is left.
pub(crate) fn encode(mut entries: Vec<Entry>) -> Option<Value> {
    entries.retain(|e| !e.fields.is_empty());
    if entries.is_empty() {
        return None;
    }
    entries.sort_by(|a, b| {
        (
            a.operation,
            seconds(&a.time),
            &a.manager,
            &a.api_version,
            &a.subresource,
        )
            .cmp(&(
                b.operation,
                seconds(&b.time),
                &b.manager,
                &b.api_version,
                &b.subresource,
            ))
    });
    Some(Value::Array(entries.iter().map(Entry::to_json).collect()))
}

fn seconds(time: &Option<String>) -> i64 {
    time.as_deref()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map_or(0, |t| t.as_second())
}
