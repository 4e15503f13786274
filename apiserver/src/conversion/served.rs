//! A request at a converted version, at the server's boundary: bodies are
//! converted to the storage version on the way in, every object of a reply
//! (and of a watch event) back on the way out, and patches are applied to
//! the object as the client sees it. The registry sees only the storage
//! version, so validation, admission and storage are that version's.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::registry::{Patch, Registry, Target, Write};
use crate::resources::{Conversion, ResourceType};
use crate::status::{ApiError, ApiResult};
use crate::watch::Converter;

/// A whole object sent at `served`'s version (POST, PUT), as the storage
/// version: kind and apiVersion checked against the URL (or filled in), this
/// version's defaults set, then converted.
pub(crate) fn incoming(served: &ResourceType, mut object: Value) -> ApiResult<Value> {
    if let Some(storage) = custom_storage(served) {
        crate::object::check_type(served, &mut object)?;
        object["apiVersion"] = json!(storage);
        return Ok(object);
    }
    let Some(conversion) = &served.conversion else {
        return Ok(object);
    };
    crate::object::check_type(served, &mut object)?;
    (conversion.set_defaults)(&mut object);
    Ok((conversion.to_storage)(&object))
}

/// A server-side apply configuration at `served`'s version, as the storage
/// version. Not defaulted: it holds only the fields its manager sets.
pub(crate) fn applied(served: &ResourceType, mut applied: Value) -> ApiResult<Value> {
    if let Some(storage) = custom_storage(served) {
        crate::object::check_type(served, &mut applied)?;
        applied["apiVersion"] = json!(storage);
        return Ok(applied);
    }
    let Some(conversion) = &served.conversion else {
        return Ok(applied);
    };
    crate::object::check_type(served, &mut applied)?;
    Ok((conversion.to_storage)(&applied))
}

/// A reply at the storage version as `served`'s version: an object of its
/// kind, or a list of them (whose kind and apiVersion are the served
/// version's too). Anything else, such as a Status, is returned as it is.
pub(crate) fn outgoing(served: &ResourceType, mut reply: Value) -> Value {
    if custom_storage(served).is_some() {
        let api_version = served.api_version();
        let kind = reply.get("kind").and_then(Value::as_str).unwrap_or("");
        if kind == served.kind {
            reply["apiVersion"] = json!(api_version);
        } else if kind == served.list_kind {
            reply["apiVersion"] = json!(api_version);
            if let Some(items) = reply.get_mut("items").and_then(Value::as_array_mut) {
                for item in items {
                    item["apiVersion"] = json!(api_version);
                }
            }
        }
        return reply;
    }
    let Some(conversion) = &served.conversion else {
        return reply;
    };
    let kind = reply.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind == served.kind {
        return (conversion.from_storage)(&reply);
    }
    if kind == served.list_kind {
        reply["apiVersion"] = json!(served.api_version());
        if let Some(items) = reply.get_mut("items").and_then(Value::as_array_mut) {
            for item in items {
                *item = (conversion.from_storage)(item);
            }
        }
    }
    reply
}

/// The apiVersion objects of `served` are stored at, when it is a custom
/// resource's version other than the storage version (conversion None:
/// only apiVersion changes).
fn custom_storage(served: &ResourceType) -> Option<String> {
    let custom = served.custom.as_ref()?;
    (custom.storage_version != served.version)
        .then(|| format!("{}/{}", served.group, custom.storage_version))
}

/// What turns the stored objects of a watch at `served`'s version into it.
pub(crate) fn watch_converter(served: &ResourceType) -> Option<Converter> {
    if custom_storage(served).is_some() {
        let api_version = served.api_version();
        return Some(Arc::new(move |object: &Value| {
            let mut object = object.clone();
            object["apiVersion"] = json!(api_version);
            object
        }));
    }
    let conversion = served.conversion?;
    Some(Arc::new(move |object: &Value| {
        (conversion.from_storage)(object)
    }))
}

/// PATCH at `served`'s version; returns the object at that version and
/// whether it was created. At the storage version this is the registry's
/// patch. At a converted one, a server-side apply's configuration is
/// checked as sent, then converted and applied at the storage version;
/// other patches go through [`patch_converted`].
pub(crate) async fn patch(
    registry: &Registry,
    served: &ResourceType,
    target: &Target<'_>,
    name: &str,
    patch: &Patch<'_>,
    subresource: Option<&str>,
    write: &Write<'_>,
) -> ApiResult<(Value, bool)> {
    if custom_storage(served).is_some() {
        // Conversion None: the patch applies to the stored object as it is.
        let (object, created) = match crate::patch::is_apply(patch.content_type) {
            false => {
                registry
                    .patch(target, name, patch, subresource, write)
                    .await?
            }
            true => {
                let config = crate::patch::decode_apply(patch.body)?;
                (patch.check)(&config)?;
                let config = serde_json::to_vec(&applied(served, config)?).map_err(|err| {
                    ApiError::internal(format!("an applied configuration: {err}"))
                })?;
                let converted = Patch {
                    content_type: patch.content_type,
                    body: &config,
                    check: &|_| Ok(()),
                    force: patch.force,
                };
                registry
                    .patch(target, name, &converted, subresource, write)
                    .await?
            }
        };
        return Ok((outgoing(served, object), created));
    }
    let Some(conversion) = served.conversion else {
        return registry
            .patch(target, name, patch, subresource, write)
            .await;
    };
    if !crate::patch::is_apply(patch.content_type) {
        let patched = patch_converted(
            registry,
            (served, conversion),
            target,
            name,
            patch,
            subresource,
            write,
        )
        .await?;
        return Ok((outgoing(served, patched), false));
    }
    let config = crate::patch::decode_apply(patch.body)?;
    (patch.check)(&config)?;
    let config = serde_json::to_vec(&applied(served, config)?)
        .map_err(|err| ApiError::internal(format!("an applied configuration: {err}")))?;
    let converted = Patch {
        content_type: patch.content_type,
        body: &config,
        check: &|_| Ok(()),
        force: patch.force,
    };
    let (object, created) = registry
        .patch(target, name, &converted, subresource, write)
        .await?;
    Ok((outgoing(served, object), created))
}

/// A JSON, merge or strategic merge patch at a converted version: applied
/// to the current object converted to that version, and the result
/// defaulted and converted back, as Kubernetes does, then stored through
/// the registry's one update path: a resourceVersion the patch sets is the
/// client's precondition; without one, a write that raced with this one
/// is patched again.
async fn patch_converted(
    registry: &Registry,
    (served, conversion): (&ResourceType, Conversion),
    target: &Target<'_>,
    name: &str,
    patch: &Patch<'_>,
    subresource: Option<&str>,
    write: &Write<'_>,
) -> ApiResult<Value> {
    let convert_and_patch = |current: &Value, _: i64| {
        let mut patched = crate::patch::apply_patch(
            served,
            patch.content_type,
            &(conversion.from_storage)(current),
            patch.body,
        )?;
        (patch.check)(&patched)?;
        crate::object::check_type(served, &mut patched)?;
        (conversion.set_defaults)(&mut patched);
        Ok((conversion.to_storage)(&patched))
    };
    registry
        .guaranteed_update(
            target,
            name,
            None,
            subresource,
            write,
            true,
            convert_and_patch,
        )
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources;

    fn cron_jobs_v1beta1() -> &'static ResourceType {
        resources::find("batch", "v1beta1", "cronjobs").expect("served")
    }

    #[test]
    fn bodies_are_checked_defaulted_and_converted() {
        let served = cron_jobs_v1beta1();
        let body = json!({"metadata": {"name": "a"}, "spec": {"schedule": "@daily", "jobTemplate": {"spec": {}}}});
        let stored = incoming(served, body).unwrap();
        assert_eq!(stored["apiVersion"], "batch/v1");
        assert_eq!(stored["kind"], "CronJob");
        assert_eq!(stored["spec"]["successfulJobsHistoryLimit"], 3);
        let wrong = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "a"}});
        assert_eq!(incoming(served, wrong).unwrap_err().code, 400);
        // An applied configuration gets no defaults.
        let config = json!({"apiVersion": "batch/v1beta1", "kind": "CronJob", "spec": {"schedule": "@daily"}});
        let config = applied(served, config).unwrap();
        assert_eq!(config["apiVersion"], "batch/v1");
        assert!(config["spec"].get("suspend").is_none());
    }

    #[test]
    fn replies_objects_and_lists_are_converted_and_statuses_kept() {
        let served = cron_jobs_v1beta1();
        let object =
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "a"}});
        assert_eq!(outgoing(served, object)["apiVersion"], "batch/v1beta1");
        let list = json!({"apiVersion": "batch/v1", "kind": "CronJobList", "metadata": {}, "items": [
            {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "a"}},
        ]});
        let list = outgoing(served, list);
        assert_eq!(list["apiVersion"], "batch/v1beta1");
        assert_eq!(list["kind"], "CronJobList");
        assert_eq!(list["items"][0]["apiVersion"], "batch/v1beta1");
        let status = json!({"apiVersion": "v1", "kind": "Status", "status": "Success"});
        assert_eq!(outgoing(served, status.clone()), status);
        // The storage version's replies are left alone.
        let v1 = resources::find("batch", "v1", "cronjobs").unwrap();
        let object = json!({"apiVersion": "batch/v1", "kind": "CronJob"});
        assert_eq!(outgoing(v1, object.clone()), object);
        assert!(watch_converter(v1).is_none());
        let convert = watch_converter(served).unwrap();
        assert_eq!(convert(&object)["apiVersion"], "batch/v1beta1");
    }
}
