//! The service account controller (`serviceaccount`): every active
//! namespace has a `default` ServiceAccount, made again when deleted, so
//! that pods (which run as `default` unless they name another account) get
//! a token. Not tokens themselves: the kubelet asks the TokenRequest API.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{PostParams, ResourceExt};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client};

use crate::common::api::{api_message, status_code};
use crate::common::informers::Informers;
use crate::common::per_namespace::sync_every_namespace;
use crate::manager::Controller;

/// The `serviceaccount` controller of the controller-manager.
pub const CONTROLLER: Controller = Controller {
    name: "serviceaccount",
    run: |informers, _settings| Box::pin(run(informers)),
};

/// The accounts every namespace has.
pub const ACCOUNTS: &[&str] = &["default"];

/// Namespaces synced at once (`--concurrent-serviceaccount-syncs`).
const CONCURRENT_SYNCS: u16 = 1;

/// Why an account could not be made; retried.
#[derive(Debug, thiserror::Error)]
#[error(
    "creating ServiceAccount {namespace}/{account}: {}",
    api_message(source)
)]
pub struct Error {
    namespace: String,
    account: &'static str,
    #[source]
    source: kube::Error,
}

struct Context {
    client: Client,
    accounts: Store<ServiceAccount>,
}

/// Makes the accounts of every namespace until aborted.
pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    sync_every_namespace(
        CONTROLLER.name,
        "serviceaccount",
        &informers,
        |account: &ServiceAccount| ACCOUNTS.contains(&account.name_any().as_str()),
        |accounts| Context { client, accounts },
        reconcile,
        CONCURRENT_SYNCS,
    )
    .await;
}

/// The accounts `namespace` lacks, given the ones the cache has: none
/// for a namespace that is not active.
pub fn missing(namespace: &Namespace, accounts: &Store<ServiceAccount>) -> Vec<&'static str> {
    let phase = namespace.status.as_ref().and_then(|s| s.phase.as_deref());
    let active =
        namespace.metadata.deletion_timestamp.is_none() && matches!(phase, None | Some("Active"));
    if !active {
        return Vec::new();
    }
    let name = namespace.name_any();
    ACCOUNTS
        .iter()
        .copied()
        .filter(|account| {
            let key = ObjectRef::<ServiceAccount>::new(account).within(&name);
            accounts.get(&key).is_none()
        })
        .collect()
}

async fn reconcile(namespace: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = namespace.name_any();
    let api: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), &name);
    for account in missing(&namespace, &ctx.accounts) {
        let mut object = ServiceAccount::default();
        object.metadata.name = Some(account.to_string());
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => {
                tracing::info!(namespace = %name, account, "created the namespace's service account")
            }
            // There already (the cache is behind), or the namespace is gone
            // or going.
            Err(err) if matches!(status_code(&err), Some(403 | 404 | 409)) => {}
            Err(source) => {
                return Err(Error {
                    namespace: name,
                    account,
                    source,
                })
            }
        }
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher::Event;

    fn namespace(name: &str, phase: Option<&str>) -> Namespace {
        let mut ns = Namespace::default();
        ns.metadata.name = Some(name.into());
        ns.status = phase.map(|p| k8s_openapi::api::core::v1::NamespaceStatus {
            phase: Some(p.into()),
            ..Default::default()
        });
        ns
    }

    fn account(namespace: &str, name: &str) -> ServiceAccount {
        let mut account = ServiceAccount::default();
        account.metadata.name = Some(name.into());
        account.metadata.namespace = Some(namespace.into());
        account
    }

    #[test]
    fn an_active_namespace_without_default_lacks_it() {
        let mut writer = Writer::<ServiceAccount>::default();
        writer.apply_watcher_event(&Event::Apply(account("has", "default")));
        writer.apply_watcher_event(&Event::Apply(account("other", "builder")));
        let store = writer.as_reader();
        assert_eq!(
            missing(&namespace("other", Some("Active")), &store),
            ["default"]
        );
        assert_eq!(missing(&namespace("new", None), &store), ["default"]);
        assert!(missing(&namespace("has", Some("Active")), &store).is_empty());
        assert!(missing(&namespace("going", Some("Terminating")), &store).is_empty());
        writer.apply_watcher_event(&Event::Delete(account("has", "default")));
        assert_eq!(
            missing(&namespace("has", Some("Active")), &writer.as_reader()),
            ["default"],
            "a deleted default account is made again"
        );
    }
}
