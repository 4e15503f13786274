//! The REST API in Kubernetes' protobuf encoding, read by a client built
//! on generated prost types (`k8s-pb`), as client-go's protobuf clients
//! and informers speak it: create, get, list, subresources, errors as a
//! protobuf `Status`, and watch streams of length-prefixed frames; the
//! Accept header's q-values choosing among JSON, YAML and protobuf; and a
//! custom resource (no protobuf form) answered in JSON, or 406 when only
//! protobuf is accepted — with nothing created by a refused request.

use anyhow::{ensure, Context, Result};
use k8s_pb::api::apps::v1::Deployment;
use k8s_pb::api::autoscaling::v1::Scale;
use k8s_pb::api::core::v1::{ConfigMap, ConfigMapList};
use k8s_pb::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Status, WatchEvent};
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use prost::Message;
use serde_json::{json, Value};
use skiff_tests::api_server::ApiServer;
use skiff_tests::kube_http::{HttpResponse, KubeHttp};
use std::time::Duration;

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// What client-go sends when its content type is protobuf.
const CLIENT_GO: &str = "application/vnd.kubernetes.protobuf, application/json";
const CONFIG_MAPS: &str = "/api/v1/namespaces/default/configmaps";
const MAGIC: &[u8] = b"k8s\0";

/// A protobuf request body: the magic, then `runtime.Unknown` around the
/// object's message.
fn envelope(api_version: &str, kind: &str, object: &impl Message) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(object.encode_to_vec()),
        content_encoding: None,
        content_type: None,
    };
    let mut body = MAGIC.to_vec();
    body.extend(unknown.encode_to_vec());
    body
}

/// The type and message of a protobuf body.
fn unwrap<M: Message + Default>(body: &[u8]) -> Result<(String, String, M)> {
    let rest = body
        .strip_prefix(MAGIC)
        .with_context(|| format!("no k8s magic: {}", String::from_utf8_lossy(body)))?;
    let unknown = Unknown::decode(rest).context("runtime.Unknown")?;
    let meta = unknown.type_meta.unwrap_or_default();
    let message = M::decode(unknown.raw.unwrap_or_default().as_slice())?;
    Ok((
        meta.api_version.unwrap_or_default(),
        meta.kind.unwrap_or_default(),
        message,
    ))
}

/// A protobuf reply with this HTTP status: its type and message.
fn expect_protobuf<M: Message + Default>(
    reply: &HttpResponse,
    code: u16,
    what: &str,
) -> Result<(String, String, M)> {
    ensure!(
        reply.status == code && reply.header("content-type") == Some(PROTOBUF),
        "{what}: wanted {code} in protobuf, got {} {:?} {}",
        reply.status,
        reply.header("content-type"),
        reply.text()
    );
    unwrap(&reply.body).with_context(|| what.to_string())
}

fn config_map(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: Some(ObjectMeta {
            name: Some(name.into()),
            labels: [("suite".to_string(), "protobuf".to_string())].into(),
            ..Default::default()
        }),
        data: [("mode".to_string(), value.to_string())].into(),
        ..Default::default()
    }
}

async fn names_in(http: &KubeHttp) -> Result<Vec<String>> {
    let list = http.get_json(CONFIG_MAPS).await?;
    Ok(list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i["metadata"]["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default())
}

#[tokio::test]
async fn objects_lists_errors_and_subresources_in_protobuf() -> Result<()> {
    let server = ApiServer::start().await?;
    let http = server.http()?;
    let proto = http.accepting(CLIENT_GO);

    // Create: a protobuf body, a protobuf reply.
    let body = envelope("v1", "ConfigMap", &config_map("p1", "fast"));
    let reply = proto
        .request("POST", CONFIG_MAPS, Some(PROTOBUF), Some(&body))
        .await?;
    let (api_version, kind, created): (_, _, ConfigMap) = expect_protobuf(&reply, 201, "create")?;
    assert_eq!((api_version.as_str(), kind.as_str()), ("v1", "ConfigMap"));
    let meta = created.metadata.clone().unwrap_or_default();
    assert_eq!(meta.name.as_deref(), Some("p1"));
    assert!(meta.uid.is_some_and(|u| !u.is_empty()));
    assert_eq!(created.data.get("mode").map(String::as_str), Some("fast"));
    // The same object in JSON.
    let json_form = http.get_json(&format!("{CONFIG_MAPS}/p1")).await?;
    assert_eq!(json_form["data"]["mode"], "fast");
    assert_eq!(
        json_form["metadata"]["resourceVersion"].as_str(),
        meta.resource_version.as_deref()
    );

    // Get and list.
    let reply = proto.get(&format!("{CONFIG_MAPS}/p1")).await?;
    let (_, _, got): (_, _, ConfigMap) = expect_protobuf(&reply, 200, "get")?;
    assert_eq!(got, created);
    let reply = proto
        .request(
            "POST",
            CONFIG_MAPS,
            Some(PROTOBUF),
            Some(&envelope("v1", "ConfigMap", &config_map("p2", "slow"))),
        )
        .await?;
    expect_protobuf::<ConfigMap>(&reply, 201, "second create")?;
    let reply = proto
        .get(&format!("{CONFIG_MAPS}?labelSelector=suite%3Dprotobuf"))
        .await?;
    let (_, kind, list): (_, _, ConfigMapList) = expect_protobuf(&reply, 200, "list")?;
    assert_eq!(kind, "ConfigMapList");
    let names: Vec<_> = list
        .items
        .iter()
        .filter_map(|i| i.metadata.as_ref().and_then(|m| m.name.clone()))
        .collect();
    assert_eq!(names, ["p1", "p2"]);
    assert!(list
        .metadata
        .and_then(|m| m.resource_version)
        .is_some_and(|rv| !rv.is_empty()));

    // Errors are protobuf Statuses, and change nothing.
    let reply = proto.get(&format!("{CONFIG_MAPS}/missing")).await?;
    let (api_version, kind, status): (_, _, Status) = expect_protobuf(&reply, 404, "get missing")?;
    assert_eq!((api_version.as_str(), kind.as_str()), ("v1", "Status"));
    assert_eq!(
        (
            status.code,
            status.reason.as_deref(),
            status.status.as_deref()
        ),
        (Some(404), Some("NotFound"), Some("Failure"))
    );
    assert_eq!(
        status.message.as_deref(),
        Some("configmaps \"missing\" not found")
    );
    let reply = proto
        .request(
            "POST",
            CONFIG_MAPS,
            Some(PROTOBUF),
            Some(&envelope("v1", "ConfigMap", &config_map("p1", "other"))),
        )
        .await?;
    let (_, _, status): (_, _, Status) = expect_protobuf(&reply, 409, "duplicate create")?;
    assert_eq!(status.reason.as_deref(), Some("AlreadyExists"));
    let mut invalid = config_map("Not_A_Name", "x");
    invalid.data.insert("bad key!".into(), "v".into());
    let reply = proto
        .request(
            "POST",
            CONFIG_MAPS,
            Some(PROTOBUF),
            Some(&envelope("v1", "ConfigMap", &invalid)),
        )
        .await?;
    let (_, _, status): (_, _, Status) = expect_protobuf(&reply, 422, "invalid create")?;
    assert_eq!(status.reason.as_deref(), Some("Invalid"));
    let causes: Vec<_> = status
        .details
        .map(|d| d.causes.into_iter().filter_map(|c| c.field).collect())
        .unwrap_or_default();
    assert!(causes.iter().any(|f| f == "metadata.name"), "{causes:?}");
    assert_eq!(names_in(&http).await?, ["p1", "p2"]);
    assert_eq!(
        http.get_json(&format!("{CONFIG_MAPS}/p1")).await?["data"]["mode"],
        "fast"
    );

    // A Deployment and its scale subresource.
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}},
        },
    });
    let reply = http
        .post("/apis/apps/v1/namespaces/default/deployments", &deployment)
        .await?;
    ensure!(reply.status == 201, "deployment: {}", reply.text());
    let reply = proto
        .get("/apis/apps/v1/namespaces/default/deployments/web")
        .await?;
    let (api_version, _, got): (_, _, Deployment) = expect_protobuf(&reply, 200, "get deployment")?;
    assert_eq!(api_version, "apps/v1");
    let spec = got.spec.unwrap_or_default();
    assert_eq!(spec.replicas, Some(2));
    let container = &spec
        .template
        .unwrap_or_default()
        .spec
        .unwrap_or_default()
        .containers[0];
    assert_eq!(container.image.as_deref(), Some("nginx:1.27"));
    let reply = proto
        .get("/apis/apps/v1/namespaces/default/deployments/web/scale")
        .await?;
    let (api_version, kind, scale): (_, _, Scale) = expect_protobuf(&reply, 200, "get scale")?;
    assert_eq!(
        (api_version.as_str(), kind.as_str()),
        ("autoscaling/v1", "Scale")
    );
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(2));
    let mut scale_up = scale.clone();
    scale_up.spec = Some(k8s_pb::api::autoscaling::v1::ScaleSpec { replicas: Some(3) });
    let reply = proto
        .request(
            "PUT",
            "/apis/apps/v1/namespaces/default/deployments/web/scale",
            Some(PROTOBUF),
            Some(&envelope("autoscaling/v1", "Scale", &scale_up)),
        )
        .await?;
    let (_, _, scaled): (_, _, Scale) = expect_protobuf(&reply, 200, "put scale")?;
    assert_eq!(scaled.spec.and_then(|s| s.replicas), Some(3));

    // Delete answers with the object, in protobuf.
    let reply = proto
        .request("DELETE", &format!("{CONFIG_MAPS}/p2"), None, None)
        .await?;
    let (_, kind, deleted): (_, _, ConfigMap) = expect_protobuf(&reply, 200, "delete")?;
    assert_eq!(kind, "ConfigMap");
    assert_eq!(deleted.metadata.and_then(|m| m.name).as_deref(), Some("p2"));
    assert_eq!(names_in(&http).await?, ["p1"]);
    Ok(())
}

#[tokio::test]
async fn the_accept_header_chooses_the_form_and_refusals_change_nothing() -> Result<()> {
    let server = ApiServer::start().await?;
    let http = server.http()?;
    let reply = http
        .post(CONFIG_MAPS, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}}))
        .await?;
    ensure!(reply.status == 201, "create: {}", reply.text());
    let path = format!("{CONFIG_MAPS}/a");

    // q-values outrank the order; YAML when it is preferred.
    let reply = http
        .accepting("application/json;q=0.5, application/vnd.kubernetes.protobuf")
        .get(&path)
        .await?;
    expect_protobuf::<ConfigMap>(&reply, 200, "protobuf preferred by q")?;
    let reply = http
        .accepting("application/vnd.kubernetes.protobuf;q=0.4, application/json;q=0.9")
        .get(&path)
        .await?;
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(reply.json()?["data"]["k"], "v");
    let reply = http.accepting("application/yaml").get(&path).await?;
    assert_eq!(reply.header("content-type"), Some("application/yaml"));
    let yaml: Value = serde_yaml::from_slice(&reply.body)?;
    assert_eq!(yaml["data"]["k"], "v");
    let reply = http.accepting("*/*").get(&path).await?;
    assert_eq!(reply.header("content-type"), Some("application/json"));

    // Nothing offered is accepted: 406, and the write is not done.
    let reply = http
        .accepting("text/plain")
        .post(
            CONFIG_MAPS,
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "refused"}}),
        )
        .await?;
    let status = reply.json()?;
    assert_eq!(
        (reply.status, status["reason"].as_str()),
        (406, Some("NotAcceptable")),
        "{status}"
    );
    assert_eq!(
        status["message"],
        "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf"
    );
    assert_eq!(names_in(&http).await?, ["a"]);

    // A custom resource has no protobuf form.
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    });
    let reply = http
        .post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &crd,
        )
        .await?;
    ensure!(reply.status == 201, "crd: {}", reply.text());
    let gadgets = "/apis/example.com/v1/namespaces/default/gadgets";
    let gadget = json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}, "spec": {"size": 3}});
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let reply = http.accepting(CLIENT_GO).post(gadgets, &gadget).await?;
        if reply.status == 201 {
            // client-go's protobuf clients fall back to JSON for it.
            assert_eq!(reply.header("content-type"), Some("application/json"));
            assert_eq!(reply.json()?["spec"]["size"], 3);
            break;
        }
        ensure!(
            reply.status == 404 && std::time::Instant::now() < deadline,
            "gadget: {} {}",
            reply.status,
            reply.text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let only_protobuf = http.accepting(PROTOBUF);
    let reply = only_protobuf.get(gadgets).await?;
    let status = reply.json()?;
    assert_eq!(
        (reply.status, status["reason"].as_str()),
        (406, Some("NotAcceptable")),
        "{status}"
    );
    assert_eq!(
        status["message"],
        "only the following media types are accepted: application/json, application/yaml"
    );
    let reply = only_protobuf
        .request("DELETE", &format!("{gadgets}/g"), None, None)
        .await?;
    assert_eq!(reply.status, 406);
    let still = http.get_json(&format!("{gadgets}/g")).await?;
    assert_eq!(still["spec"]["size"], 3, "a refused delete deletes nothing");
    Ok(())
}

#[tokio::test]
async fn watches_stream_protobuf_frames() -> Result<()> {
    let server = ApiServer::start().await?;
    let http = server.http()?;
    let proto = http.accepting(CLIENT_GO);
    let list = http.get_json(CONFIG_MAPS).await?;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .context("list resourceVersion")?
        .to_string();
    let mut watch = proto
        .watch(&format!(
            "{CONFIG_MAPS}?watch=true&resourceVersion={rv}&allowWatchBookmarks=true"
        ))
        .await?;

    let reply = proto
        .request(
            "POST",
            CONFIG_MAPS,
            Some(PROTOBUF),
            Some(&envelope("v1", "ConfigMap", &config_map("w", "one"))),
        )
        .await?;
    expect_protobuf::<ConfigMap>(&reply, 201, "create")?;
    let reply = http
        .request(
            "PATCH",
            &format!("{CONFIG_MAPS}/w"),
            Some("application/merge-patch+json"),
            Some(br#"{"data":{"mode":"two"}}"#),
        )
        .await?;
    ensure!(reply.status == 200, "patch: {}", reply.text());
    let reply = http.delete(&format!("{CONFIG_MAPS}/w")).await?;
    ensure!(reply.status == 200, "delete: {}", reply.text());

    let mut seen = Vec::new();
    while seen.len() < 3 {
        let frame = watch
            .next_frame(Duration::from_secs(20))
            .await?
            .context("the watch ended")?;
        let event = WatchEvent::decode(frame.as_slice())?;
        let kind = event.r#type.unwrap_or_default();
        if kind == "BOOKMARK" {
            continue;
        }
        let raw = event.object.and_then(|o| o.raw).unwrap_or_default();
        let (api_version, object_kind, object): (_, _, ConfigMap) = unwrap(&raw)?;
        assert_eq!(
            (api_version.as_str(), object_kind.as_str()),
            ("v1", "ConfigMap")
        );
        let mode = object.data.get("mode").cloned().unwrap_or_default();
        seen.push((kind, mode));
    }
    assert_eq!(
        seen,
        [
            ("ADDED".to_string(), "one".to_string()),
            ("MODIFIED".into(), "two".into()),
            ("DELETED".into(), "two".into()),
        ]
    );

    // A watch from a compacted or impossible revision answers with a
    // protobuf Status.
    let reply = proto
        .get(&format!(
            "{CONFIG_MAPS}?watch=true&resourceVersion=not-a-number"
        ))
        .await?;
    let (_, kind, status): (_, _, Status) = expect_protobuf(&reply, 400, "bad watch")?;
    assert_eq!((kind.as_str(), status.code), ("Status", Some(400)));
    Ok(())
}
