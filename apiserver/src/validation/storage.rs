//! StorageClasses, as storage's `ValidateStorageClass` judges them: a
//! provisioner that is a qualified name, bounded parameters, and the
//! reclaim policy and volume binding mode each one of its values.

use serde_json::Value;

use super::{
    field, go_quote, invalid, invalid_each, is_qualified_name, not_supported, required, text,
    too_long,
};
use crate::status::Cause;

/// The most parameters a StorageClass may carry, and their bytes.
const MAX_PARAMETERS: usize = 512;
const MAX_PARAMETER_BYTES: usize = 256 * 1024;

pub(super) fn validate_storage_class(causes: &mut Vec<Cause>, object: &Value) {
    let provisioner = text(object, "provisioner");
    if provisioner.is_empty() {
        causes.push(required("provisioner", ""));
    } else {
        // Kubernetes checks the provisioner lower-cased.
        let lower = provisioner.to_ascii_lowercase();
        invalid_each(causes, "provisioner", &lower, is_qualified_name(&lower));
    }
    if let Some(parameters) = field(object, "parameters").as_object() {
        if parameters.len() > MAX_PARAMETERS {
            // Kubernetes words a count of keys as a length in bytes.
            causes.push(too_long("parameters", MAX_PARAMETERS));
        } else {
            let mut size = 0;
            for (key, value) in parameters {
                if key.is_empty() {
                    let detail = "field can not be empty.";
                    causes.push(invalid("parameters", &go_quote(key), detail));
                }
                size += key.len() + value.as_str().map_or(0, str::len);
            }
            if size > MAX_PARAMETER_BYTES {
                causes.push(too_long("parameters", MAX_PARAMETER_BYTES));
            }
        }
    }
    // Both are defaulted (Delete, Immediate) before validation.
    let policy = text(object, "reclaimPolicy");
    if !policy.is_empty() && !matches!(policy, "Delete" | "Retain") {
        causes.push(not_supported(
            "reclaimPolicy",
            policy,
            &["Delete", "Retain"],
        ));
    }
    const MODES: [&str; 2] = ["Immediate", "WaitForFirstConsumer"];
    match object.get("volumeBindingMode").and_then(Value::as_str) {
        None => causes.push(required("volumeBindingMode", "")),
        Some(mode) if !MODES.contains(&mode) => {
            causes.push(not_supported("volumeBindingMode", mode, &MODES))
        }
        Some(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{invalid_lines, kind};
    use super::super::validate_object;
    use serde_json::json;

    #[test]
    fn storage_classes() {
        let resource = kind("storage.k8s.io/v1", "StorageClass");
        let class = |extra: serde_json::Value| {
            let mut object = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                "metadata": {"name": "fast"}, "provisioner": "example.com/fast-disk",
                "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"});
            for (k, v) in extra.as_object().unwrap() {
                object[k] = v.clone();
            }
            object
        };
        assert_eq!(validate_object(resource, &class(json!({}))), Ok(()));
        let good = class(json!({"provisioner": "Kubernetes.IO/No-Provisioner",
            "parameters": {"type": "ssd"}, "reclaimPolicy": "Retain",
            "volumeBindingMode": "WaitForFirstConsumer"}));
        assert_eq!(validate_object(resource, &good), Ok(()));
        assert_eq!(invalid_lines(resource, class(json!({"provisioner": "", "reclaimPolicy": "Recycle",
            "volumeBindingMode": "Later", "parameters": {"": "x"}}))), [
            "provisioner: Required value",
            "parameters: Invalid value: \"\": field can not be empty.",
            "reclaimPolicy: Unsupported value: \"Recycle\": supported values: \"Delete\", \"Retain\"",
            "volumeBindingMode: Unsupported value: \"Later\": supported values: \"Immediate\", \"WaitForFirstConsumer\"",
        ]);
        let mut unset = class(json!({"provisioner": "a/b/c"}));
        unset.as_object_mut().unwrap().remove("volumeBindingMode");
        assert_eq!(invalid_lines(resource, unset), [
            "provisioner: Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
            "volumeBindingMode: Required value",
        ]);
    }
}
