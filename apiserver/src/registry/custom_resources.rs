//! The CRD follower: the custom resources of every stored
//! CustomResourceDefinition are served from startup, and one made, changed
//! or deleted later is served, changed or withdrawn as the watch shows it.

use super::*;

impl Registry {
    /// Serves the custom resources of every stored CRD (at startup);
    /// returns the revision they were read at.
    pub async fn load_custom_resources(&self) -> ApiResult<i64> {
        let resource = crd_resource();
        let prefix = resource.storage_prefix();
        let page = self
            .storage
            .list(&prefix, &crate::storage::prefix_end(&prefix), 0, 0)
            .await
            .map_err(|err| ApiError::internal(format!("listing CRDs: {err:?}")))?;
        for kv in page.kvs {
            crate::crd::register(&object::from_stored(resource, &kv.value, kv.mod_revision)?);
        }
        Ok(page.revision)
    }

    /// Keeps this server's custom resources in step with the stored CRDs,
    /// those another apiserver of the cluster writes included: a list,
    /// then a watch from just after it, and again after a failure. Ends
    /// when the server stops.
    pub async fn follow_custom_resources(&self) {
        let resource = crd_resource();
        let prefix = resource.storage_prefix();
        let end = prefix_end(&prefix);
        let mut stopping = self.stopping();
        while !*stopping.borrow() {
            let followed = async {
                let from = self.load_custom_resources().await.map_err(|e| e.message)? + 1;
                let mut changes = self
                    .storage
                    // A deleted CRD is known by its previous value.
                    .watch(&prefix, &end, from, true)
                    .await
                    .map_err(|e| e.to_string())?;
                while let Some(batch) = changes.next().await {
                    for change in batch.map_err(|e| e.to_string())? {
                        match change.kind {
                            crate::storage::ChangeKind::Put => {
                                if let Ok(crd) =
                                    object::from_stored(resource, &change.value, change.revision)
                                {
                                    crate::crd::register(&crd);
                                }
                            }
                            crate::storage::ChangeKind::Delete => {
                                let gone = change.prev.as_ref().and_then(|prev| {
                                    object::from_stored(resource, prev, change.revision).ok()
                                });
                                if let Some(crd) = gone {
                                    crate::resources::unregister_custom(object::name(&crd));
                                }
                            }
                        }
                    }
                }
                Err::<(), String>("the watch of CRDs ended".into())
            };
            tokio::select! {
                result = followed => {
                    if let Err(why) = result {
                        tracing::debug!(%why, "following CRDs again in a second");
                    }
                }
                _ = stopping.changed() => return,
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    }

    /// A CRD is gone: its versions are no longer served and every object
    /// of it (all versions share one prefix) is deleted.
    pub(super) async fn remove_custom_resource(&self, crd: &Value) {
        // From the CRD itself, not its registered rows: another task (the
        // CRD follower) may have unregistered them already.
        let (Some(group), Some(plural)) = (
            crd["spec"]["group"].as_str().filter(|g| !g.is_empty()),
            crd["spec"]["names"]["plural"]
                .as_str()
                .filter(|p| !p.is_empty()),
        ) else {
            return;
        };
        let prefix = format!("/registry/{group}/{plural}/");
        crate::resources::unregister_custom(object::name(crd));
        let end = crate::storage::prefix_end(&prefix);
        match self.storage.list(&prefix, &end, 0, 0).await {
            Ok(page) => {
                for kv in page.kvs {
                    if let Err(err) = self.storage.delete(&kv.key, kv.mod_revision).await {
                        tracing::warn!(key = %kv.key, error = ?err, "deleting a custom object");
                    }
                }
            }
            Err(err) => tracing::warn!(%prefix, error = ?err, "listing custom objects"),
        }
    }

    /// The stored object and its revision, read from the store.
    pub(crate) async fn read(&self, target: &Target<'_>, name: &str) -> ApiResult<(Value, i64)> {
        let key = target.resource.key(target.namespace, name);
        match self.storage.get(&key).await {
            Ok(Some(kv)) => Ok((
                object::from_stored(target.resource, &kv.value, kv.mod_revision)?,
                kv.mod_revision,
            )),
            Ok(None) => Err(ApiError::not_found(
                target.resource.group,
                target.resource.plural,
                name,
            )),
            Err(err) => Err(storage_error(target, name, err)),
        }
    }
}

/// The CustomResourceDefinition row.
pub(super) fn crd_resource() -> &'static ResourceType {
    let (group, version, plural) = crate::crd::CRDS;
    crate::resources::find(group, version, plural).expect("CRDs are served")
}
