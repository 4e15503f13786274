//! Server-side printing: the `meta.k8s.io` `Table` that `kubectl get` prints
//! verbatim, with the columns and cell rules of the real apiserver's printers
//! (kubectl renders nothing itself, not even AGE). Not the place for fetching
//! objects or for negotiating any other media type. The protocol (which
//! Table a client asks for, its rows and metadata) is here; the columns and
//! cells of each resource are in [`printers`].

use axum::http::HeaderMap;
use jiff::{SignedDuration, Timestamp};
use serde_json::{json, Map, Value};

use crate::resources::ResourceType;

mod printers;

pub use printers::human_duration;
use printers::{pod_row_conditions, printer_for, Column};

/// The `meta.k8s.io` version of the Table asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableVersion {
    V1,
    V1beta1,
}

impl TableVersion {
    /// The `apiVersion` of the Table and of its `PartialObjectMetadata` rows.
    pub fn api_version(self) -> &'static str {
        match self {
            TableVersion::V1 => "meta.k8s.io/v1",
            TableVersion::V1beta1 => "meta.k8s.io/v1beta1",
        }
    }
}

/// Whether the Accept header asks for a `meta.k8s.io` Table as JSON
/// (kubectl: `application/json;as=Table;v=v1;g=meta.k8s.io,…;v=v1beta1…,
/// application/json`). v1 wins wherever it appears; v1beta1 only when it is
/// the only Table version asked for. Ranges with `q=0` are refused ones.
pub fn wants_table(headers: &HeaderMap) -> Option<TableVersion> {
    let ranges = crate::accept::json_ranges(headers);
    let offered: Vec<&str> = ranges
        .iter()
        .filter(|r| r.kind == "Table" && (r.group.is_empty() || r.group == "meta.k8s.io"))
        .map(|r| r.version.as_str())
        .collect();
    if offered.iter().any(|v| *v == "v1" || v.is_empty()) {
        Some(TableVersion::V1)
    } else if offered.contains(&"v1beta1") {
        Some(TableVersion::V1beta1)
    } else {
        None
    }
}

/// The Content-Type of a Table reply.
pub fn content_type(version: TableVersion) -> &'static str {
    match version {
        TableVersion::V1 => "application/json;as=Table;v=v1;g=meta.k8s.io",
        TableVersion::V1beta1 => "application/json;as=Table;v=v1beta1;g=meta.k8s.io",
    }
}

/// What each row carries besides its cells: the `includeObject` parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
pub enum IncludeObject {
    /// No `object`.
    None,
    /// A `PartialObjectMetadata` with the object's metadata.
    #[default]
    Metadata,
    /// The whole object (`kubectl get --sort-by` asks for it).
    Object,
}

/// An `includeObject` value that is none of the three.
#[derive(Debug, thiserror::Error)]
#[error("includeObject must be None, Metadata or Object, not {0:?}")]
pub struct InvalidIncludeObject(pub String);

impl IncludeObject {
    /// The query parameter's value; absent or empty means `Metadata`.
    pub fn from_query(value: Option<&str>) -> Result<Self, InvalidIncludeObject> {
        match value.unwrap_or_default() {
            "" | "Metadata" => Ok(IncludeObject::Metadata),
            "None" => Ok(IncludeObject::None),
            "Object" => Ok(IncludeObject::Object),
            other => Err(InvalidIncludeObject(other.to_string())),
        }
    }
}

/// The Table of `objects` (a list's items, or the one object of a GET or a
/// watch event) of `resource`. Every column is rendered, wide ones included
/// (priority 1), as the real apiserver does; kubectl hides those without
/// `-o wide`. `list_metadata` gives resourceVersion, continue and
/// remainingItemCount; without it a single object's resourceVersion is used.
pub fn table(
    resource: &ResourceType,
    objects: &[Value],
    list_metadata: Option<&Value>,
    include: IncludeObject,
    version: TableVersion,
    now: Timestamp,
) -> Value {
    let (columns, rows): (Vec<Value>, Vec<Value>) = match &resource.custom {
        // A custom resource: its version's additionalPrinterColumns.
        Some(custom) => (
            crate::crd::columns::definitions(&custom.columns),
            objects
                .iter()
                .map(|object| {
                    let cells = crate::crd::columns::cells(&custom.columns, object, now);
                    row(resource, object, cells, include, version)
                })
                .collect(),
        ),
        None => {
            let printer = printer_for(resource);
            let columns = printer.columns.iter().map(Column::to_json).collect();
            let rows = objects
                .iter()
                .map(|object| {
                    let cells = (printer.cells)(object, now);
                    debug_assert_eq!(cells.len(), printer.columns.len(), "{}", resource.plural);
                    row(resource, object, cells, include, version)
                })
                .collect();
            (columns, rows)
        }
    };
    json!({
        "kind": "Table",
        "apiVersion": version.api_version(),
        "metadata": table_metadata(objects, list_metadata),
        "columnDefinitions": columns,
        "rows": rows,
    })
}

fn table_metadata(objects: &[Value], list_metadata: Option<&Value>) -> Value {
    let mut metadata = Map::new();
    match list_metadata {
        Some(list) => {
            for field in ["resourceVersion", "continue", "remainingItemCount"] {
                if let Some(value) = list.get(field).filter(|v| !v.is_null()) {
                    metadata.insert(field.to_string(), value.clone());
                }
            }
        }
        None => {
            if let [object] = objects {
                if let Some(rv) = object.pointer("/metadata/resourceVersion") {
                    metadata.insert("resourceVersion".to_string(), rv.clone());
                }
            }
        }
    }
    Value::Object(metadata)
}

fn row(
    resource: &ResourceType,
    object: &Value,
    cells: Vec<Value>,
    include: IncludeObject,
    version: TableVersion,
) -> Value {
    let mut row = Map::new();
    row.insert("cells".to_string(), Value::Array(cells));
    if resource.group.is_empty() && resource.plural == "pods" {
        if let Some(conditions) = pod_row_conditions(object) {
            row.insert("conditions".to_string(), conditions);
        }
    }
    let carried = match include {
        IncludeObject::None => None,
        IncludeObject::Metadata => Some(json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": version.api_version(),
            "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
        })),
        IncludeObject::Object => Some(with_type_meta(resource, object)),
    };
    if let Some(carried) = carried {
        row.insert("object".to_string(), carried);
    }
    Value::Object(row)
}

/// The object with `kind` and `apiVersion` filled in when absent, so that a
/// client can decode the row's object on its own.
fn with_type_meta(resource: &ResourceType, object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(fields) = object.as_object_mut() {
        fields
            .entry("kind")
            .or_insert_with(|| Value::from(resource.kind));
        fields
            .entry("apiVersion")
            .or_insert_with(|| Value::from(resource.api_version()));
    }
    object
}
