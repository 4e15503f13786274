//! CustomResourceDefinitions with the real kubectl: a CRD with two
//! versions and printer columns is served at once; `get` shows its
//! columns; the schema refuses a bad object naming the field and prunes
//! unknown ones; `explain` reads its schema; both versions read the same
//! objects; deleting the CRD deletes them and the resource.

use anyhow::{ensure, Result};
use skiff_tests::api_server::ApiServer;
use skiff_tests::kubectl::{kubectl_or_skip, Kubectl};

const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
    shortNames: [wd]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Color, type: string, jsonPath: .spec.color}
    - {name: Replicas, type: integer, jsonPath: .spec.replicas, priority: 1}
    schema:
      openAPIV3Schema:
        type: object
        description: A widget of some size.
        properties:
          spec:
            type: object
            description: What the widget should be.
            required: [size]
            properties:
              size:
                type: integer
                minimum: 1
                maximum: 10
                description: How big the widget is.
              color:
                type: string
                enum: [red, blue]
              replicas:
                type: integer
          status:
            type: object
            properties:
              replicas: {type: integer}
  - name: v1beta1
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
";

const WIDGET: &str = "apiVersion: example.com/v1
kind: Widget
metadata: {name: w1}
spec:
  size: 3
  color: blue
  replicas: 2
";

const TOO_BIG: &str = "apiVersion: example.com/v1
kind: Widget
metadata: {name: w2}
spec:
  size: 11
";

const UNKNOWN: &str = "apiVersion: example.com/v1
kind: Widget
metadata: {name: w3}
spec:
  size: 1
  flavor: sweet
";

use skiff_tests::api_server::with_kubectl as session;

fn cells(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_serves_its_resource_with_schema_columns_and_versions() -> Result<()> {
    let Some((_server, kubectl)) =
        session("a_crd_serves_its_resource_with_schema_columns_and_versions").await?
    else {
        return Ok(());
    };
    kubectl.manifest("crd.yaml", CRD)?;
    assert_eq!(
        kubectl.ok(&["apply", "-f", "crd.yaml"])?,
        "customresourcedefinition.apiextensions.k8s.io/widgets.example.com created\n"
    );
    let established = kubectl.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.com",
        "--timeout=10s",
    ])?;
    ensure!(established.contains("condition met"), "{established}");

    kubectl.manifest("widget.yaml", WIDGET)?;
    assert_eq!(
        kubectl.ok(&["apply", "-f", "widget.yaml"])?,
        "widget.example.com/w1 created\n"
    );
    // Applied again unchanged: kubectl falls back to a merge patch.
    assert_eq!(
        kubectl.ok(&["apply", "-f", "widget.yaml"])?,
        "widget.example.com/w1 unchanged\n"
    );

    let table = kubectl.ok(&["get", "widgets"])?;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(cells(lines[0]), ["NAME", "SIZE", "COLOR"], "{table}");
    assert_eq!(cells(lines[1]), ["w1", "3", "blue"], "{table}");
    let wide = kubectl.ok(&["get", "wd", "-o", "wide"])?;
    let lines: Vec<&str> = wide.lines().collect();
    assert_eq!(
        cells(lines[0]),
        ["NAME", "SIZE", "COLOR", "REPLICAS"],
        "{wide}"
    );
    assert_eq!(cells(lines[1]), ["w1", "3", "blue", "2"], "{wide}");

    // The schema refuses, naming the field.
    kubectl.manifest("too-big.yaml", TOO_BIG)?;
    let refused = kubectl.fails(&["apply", "-f", "too-big.yaml"])?;
    ensure!(
        refused.contains("The Widget \"w2\" is invalid: spec.size: Invalid value: 11"),
        "{refused}"
    );

    // Unknown fields are dropped (kubectl's own validation off).
    kubectl.manifest("unknown.yaml", UNKNOWN)?;
    kubectl.ok(&["create", "--validate=false", "-f", "unknown.yaml"])?;
    let spec = kubectl.ok(&["get", "widget", "w3", "-o", "jsonpath={.spec}"])?;
    assert_eq!(spec, r#"{"size":1}"#);

    // explain reads the published schema.
    let explained = kubectl.ok(&["explain", "widget.spec"])?;
    ensure!(
        explained.contains("What the widget should be.")
            && explained.contains("size")
            && explained.contains("How big the widget is."),
        "{explained}"
    );

    // Both versions read the same object.
    let at = |version: &str| -> Result<String> {
        kubectl.ok(&[
            "get",
            &format!("widgets.{version}.example.com"),
            "w1",
            "-o",
            "jsonpath={.apiVersion} {.spec.size}",
        ])
    };
    assert_eq!(at("v1")?, "example.com/v1 3");
    assert_eq!(at("v1beta1")?, "example.com/v1beta1 3");

    // The scale subresource reads and writes spec.replicas.
    assert_eq!(
        kubectl.ok(&["scale", "widget", "w1", "--replicas=4"])?,
        "widget.example.com/w1 scaled\n"
    );
    assert_eq!(
        kubectl.ok(&["get", "widget", "w1", "-o", "jsonpath={.spec.replicas}"])?,
        "4"
    );

    // Server-side apply works too (lists are atomic without a schema's
    // list types).
    assert_eq!(
        kubectl.ok(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            "widget.yaml"
        ])?,
        "widget.example.com/w1 serverside-applied\n"
    );
    assert_eq!(
        kubectl.ok(&["get", "widget", "w1", "-o", "jsonpath={.spec.replicas}"])?,
        "2"
    );

    // Deleting the CRD deletes its objects and the resource.
    kubectl.ok(&["delete", "-f", "crd.yaml"])?;
    let gone = kubectl.fails(&["get", "widgets"])?;
    // kubectl says which depending on whether its discovery cache still
    // knows the resource.
    ensure!(
        gone.contains("the server doesn't have a resource type \"widgets\"")
            || gone.contains("Unable to list \"example.com/v1, Resource=widgets\": the server could not find the requested resource"),
        "{gone}"
    );
    let discovery = kubectl.fails(&["get", "--raw", "/apis/example.com/v1"])?;
    ensure!(
        discovery.contains("NotFound") || discovery.contains("not found"),
        "{discovery}"
    );
    let raw = kubectl.fails(&[
        "get",
        "--raw",
        "/apis/example.com/v1/namespaces/default/widgets",
    ])?;
    ensure!(
        raw.contains("NotFound") || raw.contains("not found"),
        "{raw}"
    );
    // Created again, it starts empty.
    kubectl.ok(&["apply", "-f", "crd.yaml"])?;
    let empty = kubectl.run(&["get", "widgets"])?;
    ensure!(empty.stdout.is_empty(), "{}", empty.stdout);
    Ok(())
}

/// In a cluster each member's apiserver serves the CRDs written through
/// any other: the resource appears and goes on the member that did not
/// see the write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_written_through_one_member_is_served_by_the_others() -> Result<()> {
    let test = "a_crd_written_through_one_member_is_served_by_the_others";
    let Some(binary) = kubectl_or_skip(test) else {
        return Ok(());
    };
    let Some(server) = ApiServer::start_on(skiff_tests::api_server::Backend::Cluster, test).await?
    else {
        return Ok(());
    };
    let writer = Kubectl::new(binary, &server.kubeconfig())?;
    let other = writer.with_kubeconfig(&server.watch_kubeconfig())?;
    writer.manifest("crd.yaml", CRD)?;
    writer.ok(&["apply", "-f", "crd.yaml"])?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let listed = other.run(&["get", "widgets"])?;
        if listed.code == Some(0) {
            break;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "the other member never served widgets: {}",
            listed.stderr
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    other.manifest(
        "w.yaml",
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {size: 2}\n",
    )?;
    assert_eq!(
        other.ok(&["apply", "-f", "w.yaml"])?,
        "widget.example.com/w created\n"
    );
    assert_eq!(
        writer.ok(&["get", "widget", "w", "-o", "jsonpath={.spec.size}"])?,
        "2"
    );
    writer.ok(&["delete", "-f", "crd.yaml"])?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let raw = other.run(&["get", "--raw", "/apis/example.com/v1"])?;
        if raw.code != Some(0) {
            break;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "the other member still serves example.com/v1"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    Ok(())
}
