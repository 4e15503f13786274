//! Defaults of storage.k8s.io types, as its `SetDefaults_StorageClass`
//! fills them in.

use serde_json::{json, Value};

use super::set;

/// A StorageClass deletes its volumes and binds them at once unless told
/// otherwise.
pub fn storage_class(object: &mut Value) {
    set(object, "reclaimPolicy", json!("Delete"));
    set(object, "volumeBindingMode", json!("Immediate"));
}
