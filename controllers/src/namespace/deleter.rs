//! One deletion pass over a terminating namespace through the API:
//! discovery, then for each resource `deletecollection` (or list and
//! delete), then a list of what is left.

use jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::core::PartialObjectMeta;
use kube::discovery::Discovery;
use kube::Client;

use super::content::{content_resources, ContentResource, Pass};

/// Deletes what is in `namespace` and reports what is left.
pub async fn delete_content(client: &Client, namespace: &str) -> Pass {
    let mut pass = Pass::default();
    let found = match discover(client).await {
        Ok(found) => found,
        Err(err) => {
            pass.discovery_errors.push(err.to_string());
            return pass;
        }
    };
    for resource in content_resources(found) {
        if let Err(err) = delete_all(client, namespace, &resource).await {
            tracing::debug!(namespace, resource = %resource.label(), error = %err, "deleting namespace content failed");
            pass.content_errors
                .push(format!("{}: {}", resource.label(), err));
            continue;
        }
        match remaining(client, namespace, &resource).await {
            Ok(left) => pass.observe_remaining(&resource, &left, Timestamp::now()),
            Err(err) => pass
                .content_errors
                .push(format!("{}: {}", resource.label(), err)),
        }
    }
    pass
}

/// The preferred version of every served resource.
async fn discover(
    client: &Client,
) -> Result<
    Vec<(
        kube::discovery::ApiResource,
        kube::discovery::ApiCapabilities,
    )>,
    kube::Error,
> {
    let discovery = match Discovery::new(client.clone()).run_aggregated().await {
        Ok(discovery) => discovery,
        Err(err) => {
            tracing::debug!(error = %err, "aggregated discovery failed; discovering group by group");
            Discovery::new(client.clone()).run().await?
        }
    };
    Ok(discovery
        .groups()
        .flat_map(|group| group.recommended_resources())
        .collect())
}

fn api(client: &Client, namespace: &str, resource: &ContentResource) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &resource.resource)
}

/// Deletes every object of `resource` in `namespace` (in the background:
/// their dependents are the garbage collector's).
async fn delete_all(
    client: &Client,
    namespace: &str,
    resource: &ContentResource,
) -> Result<(), kube::Error> {
    let api = api(client, namespace, resource);
    let params = DeleteParams::background();
    if resource.delete_collection {
        match api.delete_collection(&params, &ListParams::default()).await {
            Ok(_) => return Ok(()),
            // Served, but refused: fall back to one by one, as kube does.
            Err(kube::Error::Api(status)) if matches!(status.code, 404 | 405) => {}
            Err(err) => return Err(err),
        }
    }
    let metadata: Api<PartialObjectMeta<DynamicObject>> =
        Api::namespaced_with(client.clone(), namespace, &resource.resource);
    for object in metadata.list_metadata(&ListParams::default()).await? {
        let Some(name) = object.metadata.name.as_deref() else {
            continue;
        };
        match api.delete(name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

/// The metadata of the objects of `resource` still in `namespace`.
async fn remaining(
    client: &Client,
    namespace: &str,
    resource: &ContentResource,
) -> Result<Vec<kube::core::ObjectMeta>, kube::Error> {
    let metadata: Api<PartialObjectMeta<DynamicObject>> =
        Api::namespaced_with(client.clone(), namespace, &resource.resource);
    let list = metadata.list_metadata(&ListParams::default()).await?;
    Ok(list.items.into_iter().map(|o| o.metadata).collect())
}
