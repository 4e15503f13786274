//! admissionregistration.k8s.io/v1 defaults of webhook configurations.

use serde_json::{json, Value};

use super::{each, set};

pub fn webhook_configuration(kind: &str, object: &mut Value) {
    let mutating = kind == "MutatingWebhookConfiguration";
    each(object, "webhooks", |webhook| {
        set(webhook, "failurePolicy", json!("Fail"));
        set(webhook, "matchPolicy", json!("Equivalent"));
        set(webhook, "namespaceSelector", json!({}));
        set(webhook, "objectSelector", json!({}));
        set(webhook, "timeoutSeconds", json!(10));
        if mutating {
            set(webhook, "reinvocationPolicy", json!("Never"));
        }
        each(webhook, "rules", |rule| set(rule, "scope", json!("*")));
        if let Some(service) = webhook.pointer_mut("/clientConfig/service") {
            set(service, "port", json!(443));
        }
    });
}
