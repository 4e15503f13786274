//! Defaults of discovery.k8s.io types, as its `SetDefaults_EndpointPort`
//! fills them in.

use serde_json::{json, Value};

use super::{each, set};

/// An EndpointSlice's ports are unnamed TCP ports unless told otherwise.
pub fn endpoint_slice(object: &mut Value) {
    each(object, "ports", |port| {
        set(port, "name", json!(""));
        set(port, "protocol", json!("TCP"));
    });
}
