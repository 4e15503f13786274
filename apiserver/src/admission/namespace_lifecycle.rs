//! NamespaceLifecycle: no new objects in a namespace that does not exist or
//! is being terminated, and the system namespaces may not be deleted. Not
//! the emptying of a terminating namespace (the namespace controller).

use serde_json::Value;

use super::{read, Attributes, Operation, NAMESPACES};
use crate::registry::Registry;
use crate::status::{ApiError, ApiResult, Cause};

/// Namespaces that always exist.
pub const IMMORTAL: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

pub async fn validate(registry: &Registry, attrs: &Attributes) -> ApiResult<()> {
    match attrs.operation {
        Operation::Delete
            if attrs.is_core("Namespace") && IMMORTAL.contains(&attrs.name.as_str()) =>
        {
            Err(attrs.forbidden("this namespace may not be deleted"))
        }
        Operation::Create if attrs.resource.namespaced => {
            let Some(namespace) = attrs.namespace.as_deref() else {
                return Ok(());
            };
            match read(registry, NAMESPACES, None, namespace).await? {
                None => Err(ApiError::not_found("", "namespaces", namespace)),
                Some(found) if is_terminating(&found) => Err(terminating(attrs, namespace)),
                Some(_) => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

/// A namespace being deleted: `status.phase: Terminating` or a deletion
/// timestamp.
pub fn is_terminating(namespace: &Value) -> bool {
    namespace["status"]["phase"] == "Terminating" || crate::object::is_deleting(namespace)
}

fn terminating(attrs: &Attributes, namespace: &str) -> ApiError {
    let mut err = attrs.forbidden(format!(
        "unable to create new content in namespace {namespace} because it is being terminated"
    ));
    if let Some(details) = err.details.as_mut() {
        details.causes.push(Cause {
            reason: "NamespaceTerminating",
            message: format!("namespace {namespace} is being terminated"),
            field: "metadata.namespace".into(),
        });
    }
    err
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_namespace_terminates_by_phase_or_deletion_timestamp() {
        assert!(!is_terminating(&json!({"status": {"phase": "Active"}})));
        assert!(is_terminating(&json!({"status": {"phase": "Terminating"}})));
        assert!(is_terminating(
            &json!({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}})
        ));
    }
}
