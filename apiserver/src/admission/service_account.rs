//! ServiceAccount: a new pod runs as the namespace's `default` account
//! unless it names one, and a named account must exist. Not tokens or
//! their volumes (no token controller yet), nor making the `default`
//! account (the service account controller's work).

use serde_json::json;

use super::{read, Attributes, Operation};
use crate::registry::Registry;
use crate::status::ApiResult;

pub const DEFAULT_ACCOUNT: &str = "default";

const SERVICE_ACCOUNTS: (&str, &str, &str) = ("", "v1", "serviceaccounts");

pub async fn admit(registry: &Registry, attrs: &mut Attributes) -> ApiResult<()> {
    if attrs.operation != Operation::Create || !attrs.is_core("Pod") || !attrs.on_object() {
        return Ok(());
    }
    let Some(spec) = attrs
        .object
        .as_mut()
        .and_then(|pod| pod.get_mut("spec"))
        .filter(|s| s.is_object())
    else {
        return Ok(());
    };
    let account = spec["serviceAccountName"]
        .as_str()
        .or_else(|| spec["serviceAccount"].as_str())
        .filter(|a| !a.is_empty())
        .unwrap_or(DEFAULT_ACCOUNT)
        .to_string();
    spec["serviceAccountName"] = json!(account);
    spec["serviceAccount"] = json!(account);
    if account == DEFAULT_ACCOUNT {
        // Made by the service account controller; until there is one, a
        // missing `default` account does not hold pods back.
        return Ok(());
    }
    let namespace = attrs.namespace.clone().unwrap_or_default();
    if read(registry, SERVICE_ACCOUNTS, Some(&namespace), &account)
        .await?
        .is_none()
    {
        return Err(attrs.forbidden(format!(
            "error looking up service account {namespace}/{account}: serviceaccount \"{account}\" not found"
        )));
    }
    Ok(())
}
