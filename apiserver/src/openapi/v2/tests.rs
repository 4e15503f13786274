use super::*;
use crate::openapi::gnostic::pb;
use crate::resources;
use axum::body::{to_bytes, Body};
use axum::http::Request;
use tower::ServiceExt;

const KUBECTL_ACCEPT: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

async fn get(accept: Option<&str>, if_none_match: Option<&str>) -> (StatusCode, HeaderMap, Bytes) {
    let mut request = Request::get("/openapi/v2?timeout=32s");
    if let Some(accept) = accept {
        request = request.header(header::ACCEPT, accept);
    }
    if let Some(etag) = if_none_match {
        request = request.header(header::IF_NONE_MATCH, etag);
    }
    let response = crate::openapi::router()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    (
        status,
        headers,
        to_bytes(response.into_body(), usize::MAX).await.unwrap(),
    )
}

fn named<'a, T>(list: &'a [T], name: &str, key: impl Fn(&T) -> &str) -> &'a T {
    list.iter()
        .find(|item| key(item) == name)
        .unwrap_or_else(|| panic!("{name} is missing"))
}

fn definition<'a>(document: &'a pb::Document, name: &str) -> &'a pb::Schema {
    let definitions = &document.definitions.as_ref().unwrap().additional_properties;
    named(definitions, name, |d| &d.name)
        .value
        .as_ref()
        .unwrap()
}

fn property<'a>(schema: &'a pb::Schema, name: &str) -> &'a pb::Schema {
    let properties = &schema.properties.as_ref().unwrap().additional_properties;
    named(properties, name, |p| &p.name).value.as_ref().unwrap()
}

fn extension(extensions: &[pb::NamedAny], name: &str) -> serde_yaml::Value {
    let yaml = &named(extensions, name, |e| &e.name)
        .value
        .as_ref()
        .unwrap()
        .yaml;
    serde_yaml::from_str(yaml).expect("extensions are YAML")
}

fn types(schema: &pb::Schema) -> Vec<&str> {
    schema
        .r#type
        .iter()
        .flat_map(|t| t.value.iter().map(String::as_str))
        .collect()
}

#[tokio::test]
async fn kubectl_gets_protobuf_that_decodes_as_gnostic_document() {
    let (status, headers, body) = get(Some(KUBECTL_ACCEPT), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        headers[header::CONTENT_TYPE],
        "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    );
    let document = pb::Document::decode(body).expect("a gnostic Document");
    assert_eq!(document.swagger, "2.0");
    assert_eq!(
        document.info.as_ref().unwrap().version,
        version::GIT_VERSION
    );

    // Every served kind can be found by its group-version-kind extension,
    // which is what kubectl's validation and explain look up.
    for r in resources::served() {
        let schema = definition(&document, r.definition);
        let gvk = extension(&schema.vendor_extension, "x-kubernetes-group-version-kind");
        let listed = gvk.as_sequence().unwrap().iter().any(|entry| {
            entry["group"].as_str() == Some(r.group)
                && entry["version"].as_str() == Some(r.version)
                && entry["kind"].as_str() == Some(r.kind)
        });
        assert!(
            listed,
            "{} has no gvk extension for {}",
            r.definition, r.kind
        );
    }

    let deployment = definition(&document, "io.k8s.api.apps.v1.Deployment");
    assert_eq!(
        property(deployment, "spec").r#ref,
        "#/definitions/io.k8s.api.apps.v1.DeploymentSpec"
    );
    assert!(!property(deployment, "spec").description.is_empty());
    let pod_spec = definition(&document, "io.k8s.api.core.v1.PodSpec");
    assert!(pod_spec.required.contains(&"containers".to_string()));
    let containers = property(pod_spec, "containers");
    assert_eq!(types(containers), ["array"]);
    assert_eq!(
        containers.items.as_ref().unwrap().schema[0].r#ref,
        "#/definitions/io.k8s.api.core.v1.Container"
    );
    assert_eq!(
        extension(&containers.vendor_extension, "x-kubernetes-patch-merge-key"),
        serde_yaml::Value::from("name")
    );
    let selector = property(pod_spec, "nodeSelector");
    assert_eq!(types(selector), ["object"]);
    let values = selector.additional_properties.as_ref().unwrap();
    match values.oneof.as_ref().unwrap() {
        pb::additional_properties_item::Oneof::Schema(s) => assert_eq!(types(s), ["string"]),
        other => panic!("nodeSelector values: {other:?}"),
    }
    let int_or_string = definition(&document, "io.k8s.apimachinery.pkg.util.intstr.IntOrString");
    assert_eq!(
        (types(int_or_string), int_or_string.format.as_str()),
        (vec!["string"], "int-or-string")
    );
}

#[tokio::test]
async fn patch_operations_name_their_kind_and_take_field_validation() {
    let (_, _, body) = get(Some(KUBECTL_ACCEPT), None).await;
    let document = pb::Document::decode(body).unwrap();
    let paths = &document.paths.as_ref().unwrap().path;
    let item = named(
        paths,
        "/apis/apps/v1/namespaces/{namespace}/deployments/{name}",
        |p| &p.name,
    )
    .value
    .as_ref()
    .unwrap();
    let patch = item.patch.as_ref().unwrap();
    // kubectl reads this one as a map of strings.
    let gvk: std::collections::BTreeMap<String, String> = serde_yaml::from_value(extension(
        &patch.vendor_extension,
        "x-kubernetes-group-version-kind",
    ))
    .unwrap();
    assert_eq!(
        (
            gvk["group"].as_str(),
            gvk["version"].as_str(),
            gvk["kind"].as_str()
        ),
        ("apps", "v1", "Deployment")
    );
    assert!(patch
        .consumes
        .contains(&"application/strategic-merge-patch+json".to_string()));
    let query_names: Vec<&str> = patch
        .parameters
        .iter()
        .filter_map(|p| match p.oneof.as_ref()? {
            pb::parameters_item::Oneof::Parameter(p) => match p.oneof.as_ref()? {
                pb::parameter::Oneof::NonBodyParameter(n) => match n.oneof.as_ref()? {
                    pb::non_body_parameter::Oneof::QueryParameterSubSchema(q) => {
                        Some(q.name.as_str())
                    }
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert!(query_names.contains(&"fieldValidation"), "{query_names:?}");
    let body = patch
        .parameters
        .iter()
        .find_map(|p| match p.oneof.as_ref()? {
            pb::parameters_item::Oneof::Parameter(pb::Parameter {
                oneof: Some(pb::parameter::Oneof::BodyParameter(body)),
            }) => Some(body),
            _ => None,
        });
    assert_eq!(body.unwrap().r#in, "body");
    let path_names: Vec<&str> = item
        .parameters
        .iter()
        .filter_map(|p| match p.oneof.as_ref()? {
            pb::parameters_item::Oneof::Parameter(pb::Parameter {
                oneof: Some(pb::parameter::Oneof::NonBodyParameter(n)),
            }) => match n.oneof.as_ref()? {
                pb::non_body_parameter::Oneof::PathParameterSubSchema(p) => Some(p.name.as_str()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(path_names, ["name", "namespace"]);
}

#[tokio::test]
async fn json_is_served_and_etags_revalidate() {
    let (status, headers, body) = get(Some("application/json"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "application/json");
    let swagger: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(swagger["swagger"], "2.0");
    let pod = &swagger["definitions"]["io.k8s.api.core.v1.Pod"];
    assert_eq!(
        pod["properties"]["spec"]["$ref"],
        "#/definitions/io.k8s.api.core.v1.PodSpec"
    );
    assert!(!swagger.to_string().contains("#/components/schemas/"));
    let etag = headers[header::ETAG].to_str().unwrap().to_string();

    // One ETag for both forms, as kube-openapi; a current copy is a 304.
    let (_, proto_headers, _) = get(Some(KUBECTL_ACCEPT), None).await;
    assert_eq!(proto_headers[header::ETAG], etag.as_str());
    let (status, _, body) = get(Some(KUBECTL_ACCEPT), Some(&etag)).await;
    assert_eq!((status, body.len()), (StatusCode::NOT_MODIFIED, 0));
    let (status, _, _) = get(Some(KUBECTL_ACCEPT), Some("\"stale\"")).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn accept_chooses_the_form_and_unknown_forms_are_406() {
    let (_, headers, _) = get(None, None).await;
    assert_eq!(headers[header::CONTENT_TYPE], "application/json");
    let (_, headers, _) = get(Some("*/*"), None).await;
    assert_eq!(headers[header::CONTENT_TYPE], "application/json");
    let (status, _, body) = get(Some("text/html"), None).await;
    assert_eq!(status, StatusCode::NOT_ACCEPTABLE);
    let status_object: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status_object["kind"], "Status");
    assert_eq!(status_object["code"], 406);
}

#[test]
fn negotiation_follows_quality_then_specificity() {
    assert_eq!(negotiate(Some(KUBECTL_ACCEPT)), Some(Form::Protobuf));
    assert_eq!(
        negotiate(Some(
            "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
        )),
        Some(Form::Protobuf)
    );
    assert_eq!(
        negotiate(Some(
            "application/json;q=0.5, application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
        )),
        Some(Form::Protobuf)
    );
    assert_eq!(
        negotiate(Some(
            "application/json, application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
        )),
        Some(Form::Json)
    );
    assert_eq!(negotiate(Some("application/*")), Some(Form::Json));
    assert_eq!(negotiate(Some("application/json;q=0, text/plain")), None);
    assert_eq!(negotiate(Some("application/yaml")), None);
    assert_eq!(negotiate(Some("garbage")), None);
}

#[test]
fn schemas_become_what_kubectl_v2_parses() {
    // A reference with its description, kept together.
    let wrapped = json!({
        "allOf": [{"$ref": "#/components/schemas/io.k8s.api.core.v1.PodSpec"}],
        "description": "the spec",
    });
    assert_eq!(
        schema_v2(&wrapped),
        json!({"$ref": "#/definitions/io.k8s.api.core.v1.PodSpec", "description": "the spec"})
    );
    // A custom resource's schema, as Kubernetes publishes it in v2.
    let custom = json!({
        "type": "object",
        "required": ["spec", "maybe"],
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "size": {"type": "integer", "minimum": 1},
                    "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                    "tags": {"type": "array"},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                             "properties": {"a": {"type": "string"}}},
                },
                "oneOf": [{"required": ["size"]}],
            },
            "maybe": {"type": "string", "nullable": true},
        },
    });
    let v2 = schema_v2(&custom);
    assert_eq!(v2["required"], json!(["spec"]));
    assert_eq!(v2["properties"]["maybe"], json!({}));
    let spec = &v2["properties"]["spec"];
    assert!(spec.get("oneOf").is_none());
    assert_eq!(
        spec["properties"]["size"],
        json!({"type": "integer", "minimum": 1})
    );
    assert_eq!(
        spec["properties"]["port"],
        json!({"x-kubernetes-int-or-string": true, "type": "string", "format": "int-or-string"})
    );
    assert_eq!(spec["properties"]["tags"], json!({}));
    assert_eq!(
        spec["properties"]["free"],
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
    );
}

#[test]
fn schema_values_travel_as_yaml() {
    let schema = json!({
        "type": "string",
        "enum": ["Always", "Never"],
        "default": "Always",
        "maxLength": 8,
        "x-kubernetes-validations": [{"rule": "self != ''"}],
    });
    let pb = crate::openapi::gnostic::schema(&schema);
    let enums: Vec<serde_yaml::Value> = pb
        .r#enum
        .iter()
        .map(|a| serde_yaml::from_str(&a.yaml).unwrap())
        .collect();
    assert_eq!(enums, ["Always", "Never"].map(serde_yaml::Value::from));
    assert_eq!(
        serde_yaml::from_str::<serde_yaml::Value>(&pb.default.unwrap().yaml).unwrap(),
        serde_yaml::Value::from("Always")
    );
    assert_eq!(pb.max_length, 8);
    let rules = extension(&pb.vendor_extension, "x-kubernetes-validations");
    assert_eq!(rules[0]["rule"].as_str(), Some("self != ''"));
}
