//! ResourceQuota: what a namespace's objects use, kept in each quota's
//! `status.used`, and a write refused (403) when it would take a quota over
//! `spec.hard`. Charged last in admission with compare-and-swap on the
//! quota's resourceVersion; given back when the object leaves the store.
//! Not quota scopes or scope selectors (every quota counts everything).

use serde_json::{json, Map, Value};

use super::{list, list_resource, Attributes, Operation};
use crate::object;
use crate::registry::Registry;
use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult};
use crate::storage::StorageError;
use skiff_machinery::quantity::Quantity;
use skiff_machinery::quota::{self, counted_resource, counted_resources, GroupResource, Usage};

const QUOTAS: (&str, &str, &str) = ("", "v1", "resourcequotas");

/// How many times a charge is retried when another write changed the
/// quota meanwhile.
const CAS_ATTEMPTS: usize = 32;

/// `new - old`, without the names that do not change.
fn delta(new: &Usage, old: &Usage) -> Usage {
    let mut out = Usage::new();
    for name in new.keys().chain(old.keys()) {
        let change = new
            .get(name)
            .copied()
            .unwrap_or_default()
            .minus(old.get(name).copied().unwrap_or_default());
        if !change.is_zero() {
            out.insert(name.clone(), change);
        }
    }
    out
}

/// The mutating part: a quota made or changed gets its `status.hard` and
/// its `status.used` counted from what the namespace holds now.
pub async fn admit(registry: &Registry, attrs: &mut Attributes) -> ApiResult<()> {
    if !attrs.is_core("ResourceQuota") || !attrs.on_object() || attrs.operation == Operation::Delete
    {
        return Ok(());
    }
    let Some(quota) = attrs.object.as_ref() else {
        return Ok(());
    };
    let hard = quota["spec"]["hard"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let unchanged = attrs.old_object.as_ref().is_some_and(|old| {
        old["spec"]["hard"] == quota["spec"]["hard"] && old["status"]["used"].is_object()
    });
    if unchanged {
        return Ok(());
    }
    let namespace = attrs.namespace.clone().unwrap_or_default();
    let used = count_namespace(registry, &namespace, &hard).await?;
    if let Some(quota) = attrs.object.as_mut() {
        quota["status"] = json!({"hard": hard, "used": used});
    }
    Ok(())
}

/// What the namespace's objects use now, for every name in `hard`.
async fn count_namespace(
    registry: &Registry,
    namespace: &str,
    hard: &Map<String, Value>,
) -> ApiResult<Map<String, Value>> {
    let mut total = Usage::new();
    for counted in counted_resources(hard.keys().map(String::as_str)) {
        let Some(resource) = served(counted) else {
            continue;
        };
        for item in list_resource(registry, resource, Some(namespace)).await? {
            quota::add(&mut total, usage(resource, &item));
        }
    }
    Ok(hard
        .iter()
        .map(|(name, limit)| {
            let limit = match limit {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            (name.clone(), json!(quota::shown_used(&total, name, &limit)))
        })
        .collect())
}

/// The resource a quota name counts, if the API serves it.
pub fn resource_of(name: &str) -> Option<&'static ResourceType> {
    served(counted_resource(name))
}

fn served(counted: GroupResource<'_>) -> Option<&'static ResourceType> {
    crate::resources::all()
        .iter()
        .find(|r| r.group == counted.group && r.plural == counted.resource)
}

/// What one object of a served resource uses.
fn usage(resource: &ResourceType, object: &Value) -> Usage {
    quota::usage(GroupResource::new(resource.group, resource.plural), object)
}

/// The validating part: charges the write's usage to every quota of the
/// namespace, or refuses it when one would go over its hard limit.
pub async fn validate(registry: &Registry, attrs: &Attributes) -> ApiResult<()> {
    let Some(namespace) = attrs.namespace.as_deref().filter(|_| may_charge(attrs)) else {
        return Ok(());
    };
    // Most namespaces have no quota: what the write uses is only counted
    // when one does.
    let quotas = list(registry, QUOTAS, Some(namespace)).await?;
    if quotas.is_empty() {
        return Ok(());
    }
    let Some(change) = charged(attrs) else {
        return Ok(());
    };
    let mut done: Vec<String> = Vec::new();
    for quota in &quotas {
        let name = object::name(quota).to_string();
        let result = if attrs.dry_run {
            check(attrs, quota, &change).map(|_| ())
        } else {
            charge(registry, namespace, &name, &change, Some(attrs)).await
        };
        if let Err(err) = result {
            let undo = negate(&change);
            for charged in &done {
                let _ = charge(registry, namespace, charged, &undo, None).await;
            }
            return Err(err);
        }
        done.push(name);
    }
    Ok(())
}

/// What a create or update adds to its namespace's quotas (None: nothing).
fn charged(attrs: &Attributes) -> Option<Usage> {
    if !may_charge(attrs) {
        return None;
    }
    let new = usage(attrs.resource, attrs.object.as_ref()?);
    let old = attrs
        .old_object
        .as_ref()
        .map(|o| usage(attrs.resource, o))
        .unwrap_or_default();
    let change = delta(&new, &old);
    (!change.is_empty()).then_some(change)
}

/// Whether the write is one that may charge its namespace's quotas: a
/// create or update of a namespaced object.
fn may_charge(attrs: &Attributes) -> bool {
    attrs.resource.namespaced
        && attrs.namespace.as_deref().is_some_and(|n| !n.is_empty())
        && attrs.operation != Operation::Delete
}

fn negate(usage: &Usage) -> Usage {
    usage
        .iter()
        .map(|(k, q)| (k.clone(), Quantity::default().minus(*q)))
        .collect()
}

/// Gives back what [`validate`] charged, when the write then failed.
pub async fn undo(registry: &Registry, attrs: &Attributes) {
    if attrs.dry_run {
        return;
    }
    let Some(change) = charged(attrs) else {
        return;
    };
    give_back(
        registry,
        attrs.namespace.as_deref().unwrap_or_default(),
        &change,
    )
    .await;
}

/// An object left the store: its usage leaves the quotas.
pub async fn removed(registry: &Registry, resource: &ResourceType, object: &Value) {
    let Some(namespace) = object::meta_str(object, "namespace").filter(|_| resource.namespaced)
    else {
        return;
    };
    let used = usage(resource, object);
    give_back(registry, namespace, &used).await;
}

async fn give_back(registry: &Registry, namespace: &str, used: &Usage) {
    let Ok(quotas) = list(registry, QUOTAS, Some(namespace)).await else {
        return;
    };
    let undo = negate(used);
    for quota in &quotas {
        if let Err(err) = charge(registry, namespace, object::name(quota), &undo, None).await {
            tracing::warn!(namespace, quota = object::name(quota), error = %err, "quota usage not given back");
        }
    }
}

/// A quota name that an increase takes over its hard limit:
/// (name, requested, used before, limit).
type Exceeded = (String, Quantity, Quantity, Quantity);

/// The quota's `status.used` after `change`, for the names it limits, and
/// what the change takes over `spec.hard`.
fn apply_change(quota: &Value, change: &Usage) -> (Map<String, Value>, Vec<Exceeded>) {
    let hard = quota["spec"]["hard"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let old_used = quota["status"]["used"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut used = Map::new();
    let mut exceeded = Vec::new();
    for (name, limit) in &hard {
        let limit = Quantity::from_json(limit).unwrap_or_default();
        let before = old_used
            .get(name)
            .and_then(Quantity::from_json)
            .unwrap_or_default();
        let mut after = match change.get(name) {
            Some(q) => before.plus(*q),
            None => before,
        };
        after.milli = after.milli.max(0);
        after.binary |= limit.binary;
        if let Some(q) = change.get(name).filter(|q| q.milli > 0) {
            if after > limit {
                exceeded.push((name.clone(), *q, before, limit));
            }
        }
        used.insert(name.clone(), json!(after.to_string()));
    }
    (used, exceeded)
}

/// [`apply_change`], refused with Kubernetes' 403 when the write goes over
/// the quota or a new pod leaves out a compute resource it limits.
fn check(attrs: &Attributes, quota: &Value, change: &Usage) -> ApiResult<Map<String, Value>> {
    let (used, exceeded) = apply_change(quota, change);
    if !exceeded.is_empty() {
        let show =
            |pick: fn(&Exceeded) -> String| exceeded.iter().map(pick).collect::<Vec<_>>().join(",");
        return Err(attrs.forbidden(format!(
            "exceeded quota: {}, requested: {}, used: {}, limited: {}",
            object::name(quota),
            show(|(n, q, _, _)| format!("{n}={q}")),
            show(|(n, _, u, _)| format!("{n}={u}")),
            show(|(n, _, _, l)| format!("{n}={l}")),
        )));
    }
    let hard = quota["spec"]["hard"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    if let Some(missing) = missing_compute(attrs, &hard, change) {
        return Err(attrs.forbidden(format!(
            "failed quota: {}: must specify {missing}",
            object::name(quota)
        )));
    }
    Ok(used)
}

/// A new pod must state each compute resource a quota limits:
/// `limits.cpu for: a; requests.memory for: a,b`.
fn missing_compute(
    attrs: &Attributes,
    hard: &Map<String, Value>,
    change: &Usage,
) -> Option<String> {
    if !attrs.is_core("Pod") || attrs.operation != Operation::Create || !change.contains_key("pods")
    {
        return None;
    }
    let pod = attrs.object.as_ref()?;
    let mut missing = Vec::new();
    for name in hard.keys() {
        let (list, resource) = match name.as_str() {
            "cpu" | "memory" => ("requests", name.as_str()),
            n => match n.split_once('.') {
                Some((list @ ("requests" | "limits"), resource @ ("cpu" | "memory"))) => {
                    (list, resource)
                }
                _ => continue,
            },
        };
        let lacking: Vec<&str> = pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["resources"][list][resource].is_null())
            .map(|c| c["name"].as_str().unwrap_or(""))
            .collect();
        if !lacking.is_empty() {
            missing.push(format!("{name} for: {}", lacking.join(",")));
        }
    }
    missing.sort();
    (!missing.is_empty()).then(|| missing.join("; "))
}

/// Writes `change` into quota `name`'s `status.used` by compare-and-swap,
/// again on the newest quota when another write won the race. With
/// `attrs`, refuses the change when it goes over the quota.
async fn charge(
    registry: &Registry,
    namespace: &str,
    name: &str,
    change: &Usage,
    attrs: Option<&Attributes>,
) -> ApiResult<()> {
    let resource = crate::resources::find(QUOTAS.0, QUOTAS.1, QUOTAS.2)
        .ok_or_else(|| ApiError::internal("resourcequotas are not served"))?;
    let key = resource.key(Some(namespace), name);
    let storage = registry.storage();
    let unavailable =
        |err: StorageError| ApiError::unavailable(format!("the store is unavailable: {err}"));
    for _ in 0..CAS_ATTEMPTS {
        let Some(kv) = storage.get(&key).await.map_err(unavailable)? else {
            return Ok(()); // the quota went meanwhile
        };
        let mut quota = object::from_stored(resource, &kv.value, kv.mod_revision)?;
        let used = match attrs {
            Some(attrs) => check(attrs, &quota, change)?,
            // Giving back is never refused.
            None => apply_change(&quota, change).0,
        };
        let hard = quota["spec"]["hard"].clone();
        quota["status"] = json!({"hard": hard, "used": used});
        match storage
            .update(&key, object::to_stored(&quota), kv.mod_revision, 0)
            .await
        {
            Ok(_) => return Ok(()),
            Err(StorageError::Conflict) => continue,
            Err(StorageError::NotFound) => return Ok(()),
            Err(err) => return Err(unavailable(err)),
        }
    }
    Err(ApiError::conflict(
        "",
        "resourcequotas",
        name,
        "the quota was changed by too many writes at once; try again",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{Target, Write};

    fn find(plural: &str) -> &'static ResourceType {
        crate::resources::all()
            .iter()
            .find(|r| r.plural == plural)
            .expect("served")
    }

    #[test]
    fn names_map_to_the_resources_they_count() {
        assert_eq!(resource_of("pods").unwrap().plural, "pods");
        assert_eq!(resource_of("requests.memory").unwrap().plural, "pods");
        assert_eq!(
            resource_of("requests.storage").unwrap().plural,
            "persistentvolumeclaims"
        );
        assert_eq!(resource_of("count/deployments.apps").unwrap().group, "apps");
        assert_eq!(
            resource_of("services.nodeports").unwrap().plural,
            "services"
        );
        assert!(resource_of("count/widgets.example.com").is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_creates_never_overrun_a_quota() {
        let (registry, _dir) = crate::registry::test_registry().await;
        let write = Write::new("test", false);
        let quotas = Target {
            resource: find("resourcequotas"),
            namespace: Some("default"),
        };
        let quota = json!({"metadata": {"name": "q"}, "spec": {"hard": {"configmaps": "5"}}});
        registry.create(&quotas, quota, &write).await.unwrap();
        let maps = Target {
            resource: find("configmaps"),
            namespace: Some("default"),
        };
        let mut tasks = Vec::new();
        for i in 0..16 {
            let registry = registry.clone();
            tasks.push(tokio::spawn(async move {
                let maps = Target {
                    resource: find("configmaps"),
                    namespace: Some("default"),
                };
                let map = json!({"metadata": {"name": format!("m{i}")}});
                registry
                    .create(&maps, map, &Write::new("test", false))
                    .await
            }));
        }
        let mut created = 0;
        for task in tasks {
            match task.await.unwrap() {
                Ok(_) => created += 1,
                Err(err) => {
                    assert_eq!(err.code, 403, "{err}");
                    assert!(
                        err.message
                            .contains("exceeded quota: q, requested: configmaps=1"),
                        "{err}"
                    );
                }
            }
        }
        assert_eq!(created, 5);
        let stored = registry.get(&quotas, "q").await.unwrap();
        assert_eq!(stored["status"]["used"]["configmaps"], "5");
        let listed = list_resource(&registry, find("configmaps"), Some("default"))
            .await
            .unwrap();
        let first = object::name(&listed[0]).to_string();
        registry
            .delete(&maps, &first, &Default::default())
            .await
            .unwrap();
        let listed = list_resource(&registry, find("configmaps"), Some("default"))
            .await
            .unwrap();
        let stored = registry.get(&quotas, "q").await.unwrap();
        assert_eq!(
            stored["status"]["used"]["configmaps"],
            json!(listed.len().to_string()),
            "a delete gives the usage back"
        );
    }
}
