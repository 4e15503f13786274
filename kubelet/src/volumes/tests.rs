//! Tests of pod volumes on a temporary pods directory.

use std::os::unix::fs::PermissionsExt;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use serde_json::json;

use super::*;

fn pod(spec: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web-0", "namespace": "shop", "uid": "uid-1", "labels": {"app": "web"}},
        "spec": spec,
    }))
    .expect("a pod")
}

fn sources() -> EnvSources {
    let mut sources = EnvSources::default();
    sources.claims.insert(
        "data".into(),
        ClaimVolume::NotReady(
            "PVC shop/data has non-bound phase (\"Pending\") or empty pvc.Spec.VolumeName (\"\")"
                .into(),
        ),
    );
    let map: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "settings"},
        "data": {"app.conf": "debug=1", "other": "x"},
        "binaryData": {"blob": "AAEC"},
    }))
    .expect("a map");
    sources.config_maps.insert("settings".into(), map);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "creds"}, "data": {"password": "c2VjcmV0"},
    }))
    .expect("a secret");
    sources.secrets.insert("creds".into(), secret);
    sources
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("exists")
        .permissions()
        .mode()
        & 0o7777
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test]
async fn config_map_and_secret_volumes_hold_their_keys_with_modes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pod = pod(json!({
        "containers": [{"name": "app", "volumeMounts": [
            {"name": "all", "mountPath": "/etc/all"},
            {"name": "some", "mountPath": "/etc/some"},
            {"name": "creds", "mountPath": "/var/run/creds", "readOnly": true},
        ]}],
        "volumes": [
            {"name": "all", "configMap": {"name": "settings", "defaultMode": 0o600}},
            {"name": "some", "configMap": {"name": "settings", "items": [
                {"key": "app.conf", "path": "conf/app.conf", "mode": 0o400},
                {"key": "absent", "path": "absent"}], "optional": true}},
            {"name": "creds", "secret": {"secretName": "creds"}},
        ],
    }));
    let prepared = prepare(dir.path(), &pod, &sources())
        .await
        .expect("prepared");
    let all = prepared.volume_path("all").expect("all");
    assert_eq!(read(&all.join("app.conf")), "debug=1");
    assert_eq!(
        std::fs::read(all.join("blob")).expect("blob"),
        [0, 1, 2],
        "binaryData as bytes"
    );
    assert_eq!(mode_of(&all.join("other")), 0o600, "defaultMode applied");
    let some = prepared.volume_path("some").expect("some");
    assert_eq!(read(&some.join("conf/app.conf")), "debug=1");
    assert_eq!(
        mode_of(&some.join("conf/app.conf")),
        0o400,
        "item mode wins"
    );
    assert!(
        !some.join("other").exists() && !some.join("absent").exists(),
        "only items"
    );
    let creds = prepared.volume_path("creds").expect("creds");
    assert_eq!(read(&creds.join("password")), "secret");
    assert_eq!(mode_of(&creds.join("password")), 0o644);
    let mounts = prepared.container_mounts("app");
    let creds_mount = mounts
        .iter()
        .find(|m| m.volume == "creds")
        .expect("creds mount");
    assert!(creds_mount.read_only && mounts.iter().filter(|m| m.read_only).count() == 1);
}

#[tokio::test]
async fn mounts_are_links_in_the_pod_root_and_env_vars() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pod = pod(json!({
        "containers": [
            {"name": "app", "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
             "volumeMounts": [
                {"name": "cache", "mountPath": "/var/cache"},
                {"name": "config", "mountPath": "/etc/config"},
                {"name": "config", "mountPath": "/etc/app.conf", "subPath": "app.conf"},
                {"name": "cache", "mountPath": "/var/logs", "subPathExpr": "logs/$(POD)"}]},
            {"name": "sidecar", "volumeMounts": [{"name": "cache", "mountPath": "/var/cache"}]},
        ],
        "volumes": [
            {"name": "cache", "emptyDir": {"medium": "Memory"}},
            {"name": "config", "configMap": {"name": "settings"}},
        ],
    }));
    let prepared = prepare(dir.path(), &pod, &sources())
        .await
        .expect("prepared");
    let root = prepared.root().expect("root");
    assert_eq!(
        root,
        std::path::absolute(dir.path())
            .expect("abs")
            .join("uid-1/root")
    );
    assert_eq!(read(&root.join("etc/config/app.conf")), "debug=1");
    assert_eq!(
        read(&root.join("etc/app.conf")),
        "debug=1",
        "subPath of a key is the file"
    );
    std::fs::write(root.join("var/cache/shared"), "hello").expect("write through link");
    let cache = prepared.volume_path("cache").expect("cache");
    assert_eq!(read(&cache.join("shared")), "hello");
    assert!(
        cache.join("logs/web-0").is_dir(),
        "subPathExpr expanded and created"
    );
    assert_eq!(mode_of(cache), 0o777);

    let env = prepared.container_env("app");
    let value = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    assert_eq!(value("SKIFF_POD_ROOT"), Some(root.display().to_string()));
    assert_eq!(
        value("SKIFF_VOLUME_ETC_CONFIG"),
        Some(prepared.volumes["config"].display().to_string())
    );
    assert_eq!(
        value("SKIFF_VOLUME_VAR_LOGS"),
        Some(cache.join("logs/web-0").display().to_string())
    );
    assert_eq!(
        value("SKIFF_VOLUME_ETC_APP_CONF"),
        Some(
            prepared.volumes["config"]
                .join("app.conf")
                .display()
                .to_string()
        )
    );
    assert_eq!(
        prepared.container_env("sidecar").len(),
        2,
        "root and its one mount"
    );
}

#[tokio::test]
async fn preparing_again_updates_files_and_cleanup_spares_host_paths() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = tempfile::tempdir().expect("host dir");
    std::fs::write(host.path().join("keep"), "mine").expect("host file");
    let host_path = host.path().display().to_string();
    let pod = pod(json!({
        "containers": [{"name": "app", "volumeMounts": [
            {"name": "config", "mountPath": "/etc/config"},
            {"name": "host", "mountPath": "/host"},
            {"name": "info", "mountPath": "/etc/podinfo"}]}],
        "volumes": [
            {"name": "config", "configMap": {"name": "settings"}},
            {"name": "host", "hostPath": {"path": host_path, "type": "Directory"}},
            {"name": "info", "downwardAPI": {"items": [
                {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
        ],
    }));
    let mut sources = sources();
    let prepared = prepare(dir.path(), &pod, &sources).await.expect("prepared");
    let root = prepared.root().expect("root");
    assert_eq!(read(&root.join("host/keep")), "mine");
    assert_eq!(read(&root.join("etc/podinfo/name")), "web-0");
    assert_eq!(read(&root.join("etc/podinfo/labels")), "app=\"web\"");

    let map = sources.config_maps.get_mut("settings").expect("settings");
    map.data = Some([("app.conf".to_string(), "debug=2".to_string())].into());
    map.binary_data = None;
    prepare(dir.path(), &pod, &sources)
        .await
        .expect("prepared again");
    assert_eq!(read(&root.join("etc/config/app.conf")), "debug=2");
    assert!(
        !root.join("etc/config/other").exists(),
        "removed key disappears"
    );

    cleanup(dir.path(), "uid-1").await.expect("cleaned");
    assert!(!dir.path().join("uid-1").exists());
    assert_eq!(
        read(&host.path().join("keep")),
        "mine",
        "hostPath contents untouched"
    );
    cleanup(dir.path(), "uid-1")
        .await
        .expect("cleaning twice is fine");
}

#[tokio::test]
async fn read_only_empty_dirs_and_projected_volumes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pod = pod(json!({
        "containers": [{"name": "app", "volumeMounts": [
            {"name": "frozen", "mountPath": "/frozen", "readOnly": true},
            {"name": "all-in-one", "mountPath": "/projected"}]}],
        "volumes": [
            {"name": "frozen", "emptyDir": {}},
            {"name": "all-in-one", "projected": {"defaultMode": 0o440, "sources": [
                {"configMap": {"name": "settings", "items": [{"key": "other", "path": "cm/other"}]}},
                {"secret": {"name": "creds"}},
                {"downwardAPI": {"items": [{"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
                {"serviceAccountToken": {"path": "token"}}]}},
        ],
    }));
    let mut sources = sources();
    // A projection without a lifetime asks for an hour's token.
    let key = (String::new(), 3600);
    let projection = token_projections(&pod);
    assert_eq!(projection.len(), 1);
    assert_eq!(token_key(projection[0]), key);
    sources.tokens.insert(key.clone(), Ok("first-token".into()));
    let prepared = prepare(dir.path(), &pod, &sources).await.expect("prepared");
    assert_eq!(
        mode_of(prepared.volume_path("frozen").expect("frozen")),
        0o555
    );
    let projected = prepared.volume_path("all-in-one").expect("projected");
    assert_eq!(read(&projected.join("cm/other")), "x");
    assert_eq!(read(&projected.join("password")), "secret");
    assert_eq!(read(&projected.join("ns")), "shop");
    assert_eq!(mode_of(&projected.join("ns")), 0o440);
    assert_eq!(read(&projected.join("token")), "first-token");
    assert_eq!(mode_of(&projected.join("token")), 0o440);
    assert!(prepared.notes.is_empty(), "{:?}", prepared.notes);
    let data_link = |dir: &Path| std::fs::read_link(dir.join("..data")).expect("..data");
    let before = data_link(projected);

    // A refreshed token replaces the old at once (a new ..data).
    sources
        .tokens
        .insert(key.clone(), Ok("second-token".into()));
    prepare(dir.path(), &pod, &sources)
        .await
        .expect("refreshed");
    assert_eq!(read(&projected.join("token")), "second-token");
    assert_ne!(data_link(projected), before);
    assert_eq!(
        read(&projected.join("ns")),
        "shop",
        "the rest is still there"
    );

    // No token: the volume cannot be set up, and what was there stays.
    sources.tokens.insert(
        key,
        Err("failed to fetch token: serviceaccounts \"default\" not found".into()),
    );
    let err = prepare(dir.path(), &pod, &sources).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("MountVolume.SetUp failed for volume \"all-in-one\" : failed to fetch token"),
        "{err}"
    );
    assert_eq!(read(&projected.join("token")), "second-token");
    cleanup(dir.path(), "uid-1")
        .await
        .expect("read-only emptyDir is removed too");
    assert!(!dir.path().join("uid-1").exists());
}

#[tokio::test]
async fn bad_volumes_fail_with_what_is_wrong() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = [
        (
            json!({"name": "v", "persistentVolumeClaim": {"claimName": "data"}}),
            "unable to attach or mount volumes: unmounted volumes=[v]: PVC shop/data has non-bound phase (\"Pending\")",
        ),
        (
            json!({"name": "v", "nfs": {"server": "nfs", "path": "/"}}),
            "unsupported volume type \"nfs\"",
        ),
        (
            json!({"name": "v", "configMap": {"name": "missing"}}),
            "MountVolume.SetUp failed for volume \"v\" : configmap \"missing\" not found",
        ),
        (
            json!({"name": "v", "secret": {"secretName": "creds", "items": [{"key": "user", "path": "u"}]}}),
            "secret references non-existent secret key: user",
        ),
        (
            json!({"name": "v", "configMap": {"name": "settings", "items": [{"key": "other", "path": "../x"}]}}),
            "invalid path",
        ),
        (
            json!({"name": "v", "hostPath": {"path": "/nonexistent/skiff/test", "type": "Directory"}}),
            "hostPath type check failed: /nonexistent/skiff/test is not a directory",
        ),
    ];
    for (volume, message) in cases {
        let pod = pod(json!({"containers": [{"name": "app"}], "volumes": [volume]}));
        let err = prepare(dir.path(), &pod, &sources())
            .await
            .expect_err(message);
        assert!(
            err.to_string().contains(message),
            "{err} should say {message}"
        );
    }
    let unknown = pod(
        json!({"containers": [{"name": "app", "volumeMounts": [{"name": "nope", "mountPath": "/x"}]}]}),
    );
    let err = prepare(dir.path(), &unknown, &sources())
        .await
        .expect_err("unknown volume");
    assert!(matches!(err, VolumeError::UnknownVolume { .. }), "{err}");
    let conflict = pod(json!({
        "containers": [
            {"name": "a", "volumeMounts": [{"name": "one", "mountPath": "/data"}]},
            {"name": "b", "volumeMounts": [{"name": "two", "mountPath": "/data"}]}],
        "volumes": [{"name": "one", "emptyDir": {}}, {"name": "two", "emptyDir": {}}],
    }));
    let err = prepare(dir.path(), &conflict, &sources())
        .await
        .expect_err("conflict");
    assert!(matches!(err, VolumeError::MountConflict { .. }), "{err}");
    let escape = pod(json!({
        "containers": [{"name": "a", "volumeMounts": [{"name": "one", "mountPath": "/../etc"}]}],
        "volumes": [{"name": "one", "emptyDir": {}}],
    }));
    let err = prepare(dir.path(), &escape, &sources())
        .await
        .expect_err("escape");
    assert!(matches!(err, VolumeError::InvalidPath { .. }), "{err}");
}

#[test]
fn mount_paths_become_env_names() {
    assert_eq!(mounts::env_name("/etc/config"), "SKIFF_VOLUME_ETC_CONFIG");
    assert_eq!(
        mounts::env_name("/var/lib/my-app.d/"),
        "SKIFF_VOLUME_VAR_LIB_MY_APP_D"
    );
}

#[tokio::test]
async fn a_bound_claim_is_mounted_as_its_volumes_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let volume_dir = tempfile::tempdir().expect("volume dir");
    let provisioned = volume_dir.path().join("pvc-1");
    let mut sources = sources();
    sources.claims.insert(
        "data".into(),
        ClaimVolume::Bound {
            path: provisioned.display().to_string(),
            kind: "DirectoryOrCreate".into(),
        },
    );
    let pod = pod(json!({
        "containers": [{"name": "app", "volumeMounts": [{"name": "store", "mountPath": "/data"}]}],
        "volumes": [{"name": "store", "persistentVolumeClaim": {"claimName": "data"}}],
    }));
    let prepared = prepare(dir.path(), &pod, &sources).await.expect("prepared");
    assert!(
        provisioned.is_dir(),
        "DirectoryOrCreate made the volume's directory"
    );
    assert_eq!(prepared.volume_path("store"), Some(provisioned.as_path()));
    let root = prepared.root().expect("root");
    std::fs::write(root.join("data/f"), "hi").expect("written through the mountPath");
    assert_eq!(read(&provisioned.join("f")), "hi");
    let env = prepared.container_env("app");
    assert!(env.contains(&(
        "SKIFF_VOLUME_DATA".to_string(),
        provisioned.display().to_string()
    )));
    cleanup(dir.path(), "uid-1").await.expect("cleaned");
    assert_eq!(
        read(&provisioned.join("f")),
        "hi",
        "the volume outlives the pod"
    );
}
