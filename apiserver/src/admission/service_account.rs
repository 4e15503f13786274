//! ServiceAccount: a new pod runs as the namespace's `default` account
//! unless it names one, and a named account must exist. Unless the pod or
//! its account says `automountServiceAccountToken: false`, every container
//! mounts the `kube-api-access-*` projected volume (a bound token, the
//! cluster CA, the namespace) at [`API_TOKEN_MOUNT_PATH`], as
//! Kubernetes' plugin does. Not making the `default` account (the service
//! account controller's work): until it exists a pod is admitted without
//! it, and without a token, since none can be issued for it.

use serde_json::{json, Value};

use super::{read, Attributes, Operation};
use crate::registry::Registry;
use crate::status::ApiResult;

pub const DEFAULT_ACCOUNT: &str = "default";

/// Where the token, `ca.crt` and `namespace` are mounted in every
/// container, as client libraries' in-cluster configuration reads them.
pub const API_TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The prefix of the token volume's name (`kube-api-access-<5 random>`).
pub const API_ACCESS_VOLUME_PREFIX: &str = "kube-api-access-";

/// The ConfigMap of every namespace that holds the cluster CA (`ca.crt`),
/// published by the root CA publisher.
pub const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";

/// The token's lifetime: an hour and 7 seconds, Kubernetes'
/// `WarnOnlyBoundTokenExpirationSeconds`.
pub const TOKEN_EXPIRATION_SECONDS: i64 = 3607;

/// The annotation of a mirror pod, whose spec the kubelet owns.
const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

const SERVICE_ACCOUNTS: (&str, &str, &str) = ("", "v1", "serviceaccounts");

pub async fn admit(registry: &Registry, attrs: &mut Attributes) -> ApiResult<()> {
    if attrs.operation != Operation::Create || !attrs.is_core("Pod") || !attrs.on_object() {
        return Ok(());
    }
    let Some(pod) = attrs.object.as_mut().filter(|p| p["spec"].is_object()) else {
        return Ok(());
    };
    let mirror = pod["metadata"]["annotations"]
        .get(MIRROR_POD_ANNOTATION)
        .is_some();
    let spec = &mut pod["spec"];
    let account = spec["serviceAccountName"]
        .as_str()
        .or_else(|| spec["serviceAccount"].as_str())
        .filter(|a| !a.is_empty())
        .unwrap_or(DEFAULT_ACCOUNT)
        .to_string();
    spec["serviceAccountName"] = json!(account);
    spec["serviceAccount"] = json!(account);
    let namespace = attrs.namespace.clone().unwrap_or_default();
    let found = read(registry, SERVICE_ACCOUNTS, Some(&namespace), &account).await?;
    let Some(found) = found else {
        if account == DEFAULT_ACCOUNT {
            // Made by the service account controller; until it is there, a
            // missing `default` account does not hold pods back.
            return Ok(());
        }
        return Err(attrs.forbidden(format!(
            "error looking up service account {namespace}/{account}: serviceaccount \"{account}\" not found"
        )));
    };
    let Some(pod) = attrs.object.as_mut() else {
        return Ok(());
    };
    if !mirror && should_automount(&found, &pod["spec"]) {
        mount_service_account_token(&mut pod["spec"]);
    }
    Ok(())
}

/// The pod's `automountServiceAccountToken` if set, else its account's,
/// else true.
fn should_automount(account: &Value, spec: &Value) -> bool {
    spec["automountServiceAccountToken"]
        .as_bool()
        .or_else(|| account["automountServiceAccountToken"].as_bool())
        .unwrap_or(true)
}

/// Mounts the token volume (an existing `kube-api-access-*` one, or a new
/// one) read-only at [`API_TOKEN_MOUNT_PATH`] in every init container and
/// container that mounts nothing there; adds the volume if one needs it.
fn mount_service_account_token(spec: &mut Value) {
    let existing = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
        .find(|name| name.starts_with(API_ACCESS_VOLUME_PREFIX))
        .map(str::to_string);
    let volume_name = existing
        .clone()
        .unwrap_or_else(|| format!("{API_ACCESS_VOLUME_PREFIX}{}", crate::object::name_suffix()));
    let mount = json!({
        "name": volume_name,
        "readOnly": true,
        "mountPath": API_TOKEN_MOUNT_PATH,
    });
    let mut needs_volume = false;
    for list in ["initContainers", "containers"] {
        // `get_mut`, not `spec[list]`: indexing would add a null list.
        let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for container in containers.iter_mut().filter(|c| c.is_object()) {
            let mounted = container["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|m| m["mountPath"].as_str() == Some(API_TOKEN_MOUNT_PATH));
            if mounted {
                continue;
            }
            match container["volumeMounts"].as_array_mut() {
                Some(mounts) => mounts.push(mount.clone()),
                None => container["volumeMounts"] = json!([mount.clone()]),
            }
            needs_volume = true;
        }
    }
    if existing.is_some() || !needs_volume {
        return;
    }
    let volume = token_volume(&volume_name);
    match spec["volumes"].as_array_mut() {
        Some(volumes) => volumes.push(volume),
        None => spec["volumes"] = json!([volume]),
    }
}

/// The projected volume Kubernetes mounts in every pod: a token of the
/// pod's account bound to the pod, the cluster CA, and the namespace.
pub fn token_volume(name: &str) -> Value {
    json!({
        "name": name,
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {
                    "expirationSeconds": TOKEN_EXPIRATION_SECONDS,
                    "path": "token",
                }},
                {"configMap": {
                    "name": ROOT_CA_CONFIG_MAP,
                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                }},
                {"downwardAPI": {
                    "items": [{
                        "path": "namespace",
                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                    }],
                }},
            ],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{Target, Write};

    fn target(plural: &str) -> Target<'static> {
        Target {
            resource: crate::resources::find("", "v1", plural).unwrap(),
            namespace: Some("default"),
        }
    }

    async fn create_account(registry: &Registry, account: Value) {
        let write = Write::new("test", false);
        registry
            .create(&target("serviceaccounts"), account, &write)
            .await
            .unwrap();
    }

    async fn create_pod(registry: &Registry, pod: Value) -> ApiResult<Value> {
        let write = Write::new("test", false);
        registry.create(&target("pods"), pod, &write).await
    }

    fn pod(name: &str, spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
    }

    fn mounts_of(container: &Value) -> Vec<(String, String, bool)> {
        container["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| {
                (
                    m["name"].as_str().unwrap_or("").to_string(),
                    m["mountPath"].as_str().unwrap_or("").to_string(),
                    m["readOnly"].as_bool().unwrap_or(false),
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn every_container_mounts_a_token_volume_of_the_pods_account() {
        let (registry, _dir) = crate::registry::test_registry().await;
        create_account(&registry, json!({"metadata": {"name": "default"}})).await;
        let spec = json!({
            "initContainers": [{"name": "init", "image": "busybox"}],
            "containers": [
                {"name": "app", "image": "busybox",
                 "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                {"name": "side", "image": "busybox"},
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
        });
        let created = create_pod(&registry, pod("web", spec)).await.unwrap();
        let volumes = created["spec"]["volumes"].as_array().unwrap();
        assert_eq!(volumes.len(), 2, "{volumes:?}");
        let name = volumes[1]["name"].as_str().unwrap();
        let suffix = name.strip_prefix(API_ACCESS_VOLUME_PREFIX).unwrap();
        assert_eq!(suffix.len(), 5, "{name}");
        assert!(
            suffix
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()),
            "{name}"
        );
        let projected = &volumes[1]["projected"];
        assert_eq!(projected["defaultMode"], 420);
        assert_eq!(
            projected["sources"][0]["serviceAccountToken"],
            json!({"expirationSeconds": 3607, "path": "token"})
        );
        assert_eq!(
            projected["sources"][1]["configMap"],
            json!({"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]})
        );
        assert_eq!(
            projected["sources"][2]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"],
            "metadata.namespace"
        );
        let token_mount = (name.to_string(), API_TOKEN_MOUNT_PATH.to_string(), true);
        let spec = &created["spec"];
        assert_eq!(
            mounts_of(&spec["initContainers"][0]),
            std::slice::from_ref(&token_mount)
        );
        assert_eq!(
            mounts_of(&spec["containers"][0]),
            [("data".into(), "/data".into(), false), token_mount.clone()]
        );
        assert_eq!(mounts_of(&spec["containers"][1]), [token_mount]);

        // Another pod: a volume of its own name.
        let other = create_pod(
            &registry,
            pod(
                "other",
                json!({"containers": [{"name": "c", "image": "i"}]}),
            ),
        )
        .await
        .unwrap();
        let other_name = other["spec"]["volumes"][0]["name"].as_str().unwrap();
        assert!(other_name.starts_with(API_ACCESS_VOLUME_PREFIX));
    }

    #[tokio::test]
    async fn automount_false_on_the_pod_or_its_account_mounts_nothing() {
        let (registry, _dir) = crate::registry::test_registry().await;
        create_account(&registry, json!({"metadata": {"name": "default"}})).await;
        create_account(
            &registry,
            json!({"metadata": {"name": "quiet"}, "automountServiceAccountToken": false}),
        )
        .await;
        let container = json!([{"name": "c", "image": "i"}]);
        let off = json!({"automountServiceAccountToken": false, "containers": container});
        let created = create_pod(&registry, pod("off", off)).await.unwrap();
        assert!(created["spec"]["volumes"].is_null(), "{created}");
        assert!(created["spec"]["containers"][0]["volumeMounts"].is_null());

        let quiet = json!({"serviceAccountName": "quiet", "containers": container});
        let created = create_pod(&registry, pod("quiet", quiet)).await.unwrap();
        assert!(created["spec"]["volumes"].is_null(), "{created}");

        // The pod's own choice wins over its account's.
        let on = json!({"serviceAccountName": "quiet", "automountServiceAccountToken": true,
                        "containers": container});
        let created = create_pod(&registry, pod("on", on)).await.unwrap();
        assert_eq!(created["spec"]["volumes"].as_array().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_container_mounting_the_path_itself_keeps_its_own() {
        let (registry, _dir) = crate::registry::test_registry().await;
        create_account(&registry, json!({"metadata": {"name": "default"}})).await;
        let own = json!({"name": "mine", "mountPath": API_TOKEN_MOUNT_PATH});
        let spec = json!({
            "containers": [{"name": "c", "image": "i", "volumeMounts": [own]}],
            "volumes": [{"name": "mine", "emptyDir": {}}],
        });
        let created = create_pod(&registry, pod("own", spec)).await.unwrap();
        assert_eq!(
            created["spec"]["volumes"].as_array().unwrap().len(),
            1,
            "no container needs the token volume: {created}"
        );
        assert_eq!(
            mounts_of(&created["spec"]["containers"][0]),
            [("mine".into(), API_TOKEN_MOUNT_PATH.into(), false)]
        );

        // A pod that has a token volume already: it is mounted, not added again.
        let spec = json!({
            "containers": [{"name": "c", "image": "i"}],
            "volumes": [token_volume("kube-api-access-given")],
        });
        let created = create_pod(&registry, pod("given", spec)).await.unwrap();
        assert_eq!(created["spec"]["volumes"].as_array().unwrap().len(), 1);
        assert_eq!(
            mounts_of(&created["spec"]["containers"][0]),
            [(
                "kube-api-access-given".into(),
                API_TOKEN_MOUNT_PATH.into(),
                true
            )]
        );
    }

    #[tokio::test]
    async fn without_an_account_there_is_no_token_and_a_named_one_must_exist() {
        let (registry, _dir) = crate::registry::test_registry().await;
        let container = json!([{"name": "c", "image": "i"}]);
        let created = create_pod(&registry, pod("plain", json!({"containers": container})))
            .await
            .unwrap();
        assert_eq!(created["spec"]["serviceAccountName"], "default");
        assert!(created["spec"]["volumes"].is_null(), "{created}");

        let named = json!({"serviceAccountName": "builder", "containers": container});
        let err = create_pod(&registry, pod("robot", named))
            .await
            .unwrap_err();
        assert_eq!(err.code, 403);
        assert!(
            err.message
                .contains("error looking up service account default/builder"),
            "{}",
            err.message
        );
    }

    #[tokio::test]
    async fn updates_and_mirror_pods_are_left_alone() {
        let (registry, _dir) = crate::registry::test_registry().await;
        create_account(&registry, json!({"metadata": {"name": "default"}})).await;
        let mut mirror = pod(
            "mirror",
            json!({"containers": [{"name": "c", "image": "i"}]}),
        );
        mirror["metadata"]["annotations"] = json!({MIRROR_POD_ANNOTATION: "hash"});
        let created = create_pod(&registry, mirror).await.unwrap();
        assert!(created["spec"]["volumes"].is_null(), "{created}");

        let mut update = super::super::tests::attrs(
            Operation::Update,
            "pods",
            pod("web", json!({"containers": [{"name": "c", "image": "i"}]})),
        );
        admit(&registry, &mut update).await.unwrap();
        assert!(update.object.unwrap()["spec"]["volumes"].is_null());
    }
}
