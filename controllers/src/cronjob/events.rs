//! Events on an object (core/v1 Event), recorded best-effort: a failure
//! to record is logged, never a reason to fail a sync.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::PostParams;
use kube::{Api, Client, Resource, ResourceExt};

/// Records a Normal or Warning event on `object` from `component`.
pub async fn record<K>(
    client: &Client,
    component: &str,
    object: &K,
    warning: bool,
    reason: &str,
    message: &str,
) where
    K: Resource<DynamicType = ()>,
{
    let namespace = object.namespace().unwrap_or_else(|| "default".into());
    let now = Timestamp::now();
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}.", object.name_any())),
            namespace: Some(namespace.clone()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some(K::api_version(&()).into_owned()),
            kind: Some(K::kind(&()).into_owned()),
            name: Some(object.name_any()),
            namespace: object.namespace(),
            uid: object.uid(),
            ..Default::default()
        },
        reason: Some(reason.into()),
        message: Some(message.into()),
        type_: Some(if warning { "Warning" } else { "Normal" }.into()),
        source: Some(EventSource {
            component: Some(component.into()),
            host: None,
        }),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        event_time: Some(MicroTime(now)),
        reporting_component: Some(component.into()),
        reporting_instance: Some(component.into()),
        action: Some(reason.into()),
        count: Some(1),
        ..Default::default()
    };
    let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
    if let Err(err) = api.create(&PostParams::default(), &event).await {
        tracing::debug!(reason, error = %err, "recording an event");
    }
}
