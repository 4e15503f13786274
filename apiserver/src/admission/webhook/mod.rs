//! Admission webhooks: the MutatingWebhookConfigurations and
//! ValidatingWebhookConfigurations whose rules and selectors match a write
//! are called with an AdmissionReview, in name order. Mutating ones may
//! answer a JSON patch; a denial is the request's error; a call that fails
//! (down, error status, timeout, bad response) fails the request unless the
//! webhook's failurePolicy is Ignore.

mod client;
mod review;
mod rules;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{list, read, Attributes, NAMESPACES};
use crate::registry::Registry;
use crate::status::{ApiError, ApiResult};
use skiff_machinery::selectors::LabelSelector;

pub const GROUP: &str = "admissionregistration.k8s.io";
const MUTATING: (&str, &str, &str) = (GROUP, "v1", "mutatingwebhookconfigurations");
const VALIDATING: (&str, &str, &str) = (GROUP, "v1", "validatingwebhookconfigurations");

/// How long a read of the configurations is reused. Writes of
/// configurations through this server drop it at once; another member's
/// are seen within this time.
const CONFIGURATION_TTL: Duration = Duration::from_secs(1);

/// Calls webhooks; keeps the configurations read last.
#[derive(Default)]
pub struct Caller {
    configurations: Mutex<Option<Configurations>>,
}

#[derive(Clone)]
struct Configurations {
    read_at: Instant,
    /// The webhooks of each kind, in configuration name order.
    mutating: Vec<Value>,
    validating: Vec<Value>,
}

impl Caller {
    /// Runs the matching mutating webhooks; true when one changed the object.
    pub async fn mutate(&self, registry: &Registry, attrs: &mut Attributes) -> ApiResult<bool> {
        let webhooks = self.webhooks(registry, attrs, true).await?;
        let mut changed = false;
        for webhook in webhooks {
            if let Some(patch) = self.call(&webhook, attrs).await? {
                let Some(object) = attrs.object.as_ref() else {
                    continue;
                };
                let body = serde_json::to_vec(&patch).unwrap_or_default();
                match crate::patch::apply_patch(
                    attrs.resource,
                    crate::patch::JSON_PATCH,
                    object,
                    &body,
                ) {
                    Ok(patched) => {
                        changed |= patched != *object;
                        attrs.object = Some(patched);
                    }
                    Err(err) => {
                        let why = format!(
                            "received invalid webhook response: the patch does not apply: {}",
                            err.message
                        );
                        fail_or_ignore(&webhook, why)?;
                    }
                }
            }
        }
        Ok(changed)
    }

    /// Runs the matching validating webhooks; the first denial is the error.
    pub async fn validate(&self, registry: &Registry, attrs: &Attributes) -> ApiResult<()> {
        for webhook in self.webhooks(registry, attrs, false).await? {
            self.call(&webhook, attrs).await?;
        }
        Ok(())
    }

    /// The webhooks of one kind whose rules and selectors match the write.
    async fn webhooks(
        &self,
        registry: &Registry,
        attrs: &Attributes,
        mutating: bool,
    ) -> ApiResult<Vec<Value>> {
        if attrs.resource.group == GROUP {
            // Never called for their own configurations, so that a broken
            // webhook can always be removed.
            self.forget();
            return Ok(Vec::new());
        }
        let configurations = self.configurations(registry).await?;
        let candidates = match mutating {
            true => configurations.mutating,
            false => configurations.validating,
        };
        let mut matching = Vec::new();
        for webhook in candidates {
            if rules::matches(&webhook, attrs)
                && object_selected(&webhook, attrs)?
                && namespace_selected(registry, &webhook, attrs).await?
            {
                matching.push(webhook);
            }
        }
        Ok(matching)
    }

    pub fn forget(&self) {
        *self
            .configurations
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
    }

    async fn configurations(&self, registry: &Registry) -> ApiResult<Configurations> {
        if let Some(cached) = self
            .configurations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .filter(|c| c.read_at.elapsed() < CONFIGURATION_TTL)
        {
            return Ok(cached.clone());
        }
        let read_at = Instant::now();
        let fresh = Configurations {
            read_at,
            mutating: webhooks_of(list(registry, MUTATING, None).await?),
            validating: webhooks_of(list(registry, VALIDATING, None).await?),
        };
        *self
            .configurations
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(fresh.clone());
        Ok(fresh)
    }

    /// Calls one webhook; the patch it answered, if any.
    async fn call(&self, webhook: &Value, attrs: &Attributes) -> ApiResult<Option<Value>> {
        let name = webhook_name(webhook);
        if attrs.dry_run
            && !matches!(
                webhook["sideEffects"].as_str(),
                Some("None" | "NoneOnDryRun")
            )
        {
            return Err(ApiError::bad_request(format!(
                "admission webhook {name:?} does not support dry run"
            )));
        }
        let Some(url) = webhook["clientConfig"]["url"].as_str() else {
            let service = &webhook["clientConfig"]["service"];
            let why = format!(
                "failed to call webhook: service {}/{} cannot be reached: this server calls webhooks by clientConfig.url only",
                service["namespace"].as_str().unwrap_or(""),
                service["name"].as_str().unwrap_or("")
            );
            return fail_or_ignore(webhook, why).map(|_| None);
        };
        let timeout = Duration::from_secs(
            webhook["timeoutSeconds"]
                .as_u64()
                .unwrap_or(10)
                .clamp(1, 30),
        );
        let uid = crate::object::new_uid();
        let body = serde_json::to_vec(&review::request(attrs, &uid)).unwrap_or_default();
        let ca_bundle = webhook["clientConfig"]["caBundle"].as_str();
        let answer = client::post_json(url, ca_bundle, body, timeout)
            .await
            .map_err(|e| format!("failed to call webhook: {e}"))
            .and_then(|body| review::verdict(&name, &uid, &body));
        match answer {
            Ok(review::Verdict::Allowed { patch, warnings }) => {
                for warning in warnings {
                    tracing::info!(webhook = %name, warning = %warning, "admission webhook warning");
                    crate::warning::add(warning);
                }
                Ok(patch)
            }
            Ok(review::Verdict::Denied(err)) => Err(err),
            Err(why) => fail_or_ignore(webhook, why).map(|_| None),
        }
    }
}

fn webhook_name(webhook: &Value) -> String {
    webhook["name"].as_str().unwrap_or("").to_string()
}

/// A failed call: 500 `failed calling webhook "name": why` under
/// failurePolicy Fail (the default), nothing under Ignore.
fn fail_or_ignore(webhook: &Value, why: String) -> ApiResult<()> {
    let name = webhook_name(webhook);
    if webhook["failurePolicy"] == "Ignore" {
        tracing::warn!(webhook = %name, error = %why, "admission webhook failed; ignored by its failurePolicy");
        return Ok(());
    }
    Err(ApiError::internal(format!(
        "Internal error occurred: failed calling webhook {name:?}: {why}"
    )))
}

/// Every webhook of the configurations, in configuration name order.
fn webhooks_of(mut configurations: Vec<Arc<Value>>) -> Vec<Value> {
    configurations.sort_by(|a, b| crate::object::name(a).cmp(crate::object::name(b)));
    configurations
        .into_iter()
        .flat_map(|c| match c.get("webhooks") {
            Some(Value::Array(list)) => list.clone(),
            _ => Vec::new(),
        })
        .collect()
}

fn selector(webhook: &Value, field: &str) -> ApiResult<Option<LabelSelector>> {
    match webhook.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(s) => Ok(Some(LabelSelector::from_json(s)?)),
    }
}

/// `objectSelector` matches the object or the old object.
fn object_selected(webhook: &Value, attrs: &Attributes) -> ApiResult<bool> {
    let Some(selector) = selector(webhook, "objectSelector")? else {
        return Ok(true);
    };
    if selector.is_empty() {
        return Ok(true);
    }
    Ok([&attrs.object, &attrs.old_object]
        .into_iter()
        .flatten()
        .any(|o| selector.matches_object(o)))
}

/// `namespaceSelector` matches the namespace's labels (a Namespace's own;
/// always for other cluster-scoped objects).
async fn namespace_selected(
    registry: &Registry,
    webhook: &Value,
    attrs: &Attributes,
) -> ApiResult<bool> {
    let Some(selector) = selector(webhook, "namespaceSelector")? else {
        return Ok(true);
    };
    if selector.is_empty() {
        return Ok(true);
    }
    if attrs.is_core("Namespace") {
        let own = attrs.object.as_ref().or(attrs.old_object.as_ref());
        return Ok(own.is_some_and(|o| selector.matches_object(o)));
    }
    let Some(namespace) = attrs
        .namespace
        .as_deref()
        .filter(|_| attrs.resource.namespaced)
    else {
        return Ok(true);
    };
    let found = read(registry, NAMESPACES, None, namespace).await?;
    Ok(selector.matches_object(found.as_deref().unwrap_or(&Value::Null)))
}
