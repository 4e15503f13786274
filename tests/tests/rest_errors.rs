//! The REST API's refusals and object semantics over raw HTTP against
//! `skiff up` (found through its kubeconfig): each error's Status code and
//! reason (NotFound, AlreadyExists, Conflict, Invalid with field causes,
//! BadRequest, 413, 405, a missing namespace), with the collection and the
//! object read before and after to show that a refused request changed
//! nothing; and what succeeds: a POST with no Content-Type, `dryRun=All`,
//! `generateName`, finalizers holding an object until cleared, generation
//! rising only with the spec, and list pages consistent at one revision.

use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};
use skiff_tests::api_server::{ApiServer, Backend};
use skiff_tests::kube_http::{HttpResponse, KubeHttp};

const CONFIG_MAPS: &str = "/api/v1/namespaces/default/configmaps";
const PODS: &str = "/api/v1/namespaces/default/pods";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";
/// Kubernetes refuses request bodies over 3 MiB.
const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

fn config_map(name: &str, mode: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"suite": "errors"}},
        "data": {"mode": mode},
    })
}

fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
    })
}

fn deployment(name: &str, selector: &str, template: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": selector}},
            "template": {
                "metadata": {"labels": {"app": template}},
                "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]},
            },
        },
    })
}

/// The reply must be a Kubernetes Status with this code and reason, with
/// the HTTP status equal to its code; returns the Status.
fn expect_status(reply: &HttpResponse, code: u16, reason: &str) -> Result<Value> {
    let status = reply.json()?;
    ensure!(
        reply.status == code
            && status["kind"] == "Status"
            && status["apiVersion"] == "v1"
            && status["status"] == "Failure"
            && status["code"] == code
            && status["reason"] == reason,
        "expected a {code} {reason} Status, got HTTP {}: {status}",
        reply.status
    );
    Ok(status)
}

/// What a set of GETs answer: for lists, the items (each with its
/// resourceVersion); for objects, the object or the error.
async fn state(http: &KubeHttp, paths: &[&str]) -> Result<Vec<(u16, Value)>> {
    let mut state = Vec::new();
    for path in paths {
        let reply = http.get(path).await?;
        let body = reply.json()?;
        let seen = if body["kind"].as_str().is_some_and(|k| k.ends_with("List")) {
            body["items"].clone()
        } else {
            body
        };
        state.push((reply.status, seen));
    }
    Ok(state)
}

fn rv(object: &Value) -> i64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

async fn created(http: &KubeHttp, collection: &str, object: &Value) -> Result<Value> {
    let reply = http.post(collection, object).await?;
    ensure!(
        reply.status == 201,
        "create in {collection}: {} {}",
        reply.status,
        reply.text()
    );
    reply.json()
}

async fn missing_existing_and_stale_objects(backend: Backend) -> Result<()> {
    let Some(server) = ApiServer::start_on(backend, "missing_existing_and_stale_objects").await?
    else {
        return Ok(());
    };
    let http = server.http()?;
    let missing = format!("{PODS}/missing");

    let before = state(&http, &[PODS, &missing]).await?;
    for reply in [
        http.get(&missing).await?,
        http.put(&missing, &pod("missing")).await?,
        http.delete(&missing).await?,
    ] {
        let status = expect_status(&reply, 404, "NotFound")?;
        assert_eq!(status["message"], "pods \"missing\" not found");
        assert_eq!(status["details"]["name"], "missing");
        assert_eq!(status["details"]["kind"], "pods");
    }
    assert_eq!(
        state(&http, &[PODS, &missing]).await?,
        before,
        "no pod appeared"
    );
    let status = expect_status(
        &http
            .get("/apis/apps/v1/namespaces/default/deployments/missing")
            .await?,
        404,
        "NotFound",
    )?;
    assert_eq!(status["message"], "deployments.apps \"missing\" not found");
    assert_eq!(status["details"]["group"], "apps");

    // Created twice: the second is refused and stores nothing of its own.
    let path = format!("{CONFIG_MAPS}/dup");
    let first = created(&http, CONFIG_MAPS, &config_map("dup", "first")).await?;
    let before = state(&http, &[CONFIG_MAPS, &path]).await?;
    let status = expect_status(
        &http.post(CONFIG_MAPS, &config_map("dup", "second")).await?,
        409,
        "AlreadyExists",
    )?;
    assert_eq!(status["message"], "configmaps \"dup\" already exists");
    assert_eq!(status["details"]["name"], "dup");
    assert_eq!(state(&http, &[CONFIG_MAPS, &path]).await?, before);
    let stored = http.get_json(&path).await?;
    assert_eq!(stored["data"]["mode"], "first");
    assert_eq!(stored["metadata"]["uid"], first["metadata"]["uid"]);

    // An update from a stale resourceVersion is a Conflict.
    let mut update = first.clone();
    update["data"]["mode"] = json!("second");
    let updated = http.put(&path, &update).await?;
    assert_eq!(updated.status, 200, "{}", updated.text());
    let updated = updated.json()?;
    assert!(rv(&updated) > rv(&first));
    let before = state(&http, &[CONFIG_MAPS, &path]).await?;
    let mut stale = first.clone();
    stale["data"]["mode"] = json!("third");
    let status = expect_status(&http.put(&path, &stale).await?, 409, "Conflict")?;
    assert_eq!(
        status["message"],
        "Operation cannot be fulfilled on configmaps \"dup\": the object has been modified; \
         please apply your changes to the latest version and try again"
    );
    // A delete with a stale precondition too.
    let precondition =
        json!({"preconditions": {"resourceVersion": first["metadata"]["resourceVersion"]}});
    let reply = http
        .request(
            "DELETE",
            &path,
            Some("application/json"),
            Some(&serde_json::to_vec(&precondition)?),
        )
        .await?;
    expect_status(&reply, 409, "Conflict")?;
    assert_eq!(state(&http, &[CONFIG_MAPS, &path]).await?, before);
    assert_eq!(http.get_json(&path).await?, updated, "the update stands");
    Ok(())
}

async fn refused_requests_change_nothing(backend: Backend) -> Result<()> {
    let Some(server) = ApiServer::start_on(backend, "refused_requests_change_nothing").await?
    else {
        return Ok(());
    };
    let http = server.http()?;
    let kept = created(&http, CONFIG_MAPS, &config_map("kept", "one")).await?;
    let web = created(&http, DEPLOYMENTS, &deployment("web", "web", "web")).await?;
    let watched = [
        CONFIG_MAPS,
        PODS,
        DEPLOYMENTS,
        "/api/v1/configmaps",
        "/api/v1/namespaces",
    ];
    let before = state(&http, &watched).await?;
    invalid_objects(&http, &web).await?;
    assert_eq!(state(&http, &watched).await?, before, "after Invalid");
    bad_requests(&http, &kept).await?;
    assert_eq!(state(&http, &watched).await?, before, "after BadRequest");
    too_large_and_not_allowed(&http).await?;
    assert_eq!(state(&http, &watched).await?, before, "after 413 and 405");

    let status = expect_status(
        &http
            .post(
                "/api/v1/namespaces/nowhere/configmaps",
                &config_map("x", "one"),
            )
            .await?,
        404,
        "NotFound",
    )?;
    assert_eq!(status["message"], "namespaces \"nowhere\" not found");
    assert_eq!(
        state(&http, &watched).await?,
        before,
        "after a create in a missing namespace"
    );
    Ok(())
}

/// 422 Invalid with the field at fault, on create and on update.
async fn invalid_objects(http: &KubeHttp, web: &Value) -> Result<()> {
    let cases = [
        (
            CONFIG_MAPS,
            config_map("Bad_Name", "one"),
            "metadata.name",
            "FieldValueInvalid",
        ),
        (
            PODS,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "empty"}, "spec": {"containers": []}}),
            "spec.containers",
            "FieldValueRequired",
        ),
        (
            DEPLOYMENTS,
            deployment("mismatch", "web", "other"),
            "spec.template.metadata.labels",
            "FieldValueInvalid",
        ),
    ];
    for (collection, object, field, reason) in cases {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let status = expect_status(&http.post(collection, &object).await?, 422, "Invalid")?;
        let causes = status["details"]["causes"].as_array().context("causes")?;
        ensure!(
            causes
                .iter()
                .any(|c| c["field"] == field && c["reason"] == reason),
            "{name}: no {reason} cause on {field}: {status}"
        );
        assert_eq!(status["details"]["name"], name);
        assert_eq!(status["details"]["kind"], object["kind"]);
        let message = status["message"].as_str().unwrap_or_default();
        ensure!(
            message.contains(&format!("\"{name}\" is invalid: {field}")),
            "message: {message}"
        );
    }
    // An update that would make the stored deployment invalid.
    let mut broken = web.clone();
    broken["spec"]["template"]["metadata"]["labels"]["app"] = json!("other");
    let status = expect_status(
        &http.put(&format!("{DEPLOYMENTS}/web"), &broken).await?,
        422,
        "Invalid",
    )?;
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "spec.template.metadata.labels"
    );
    Ok(())
}

/// 400 for a body that is not JSON, or names another kind, version,
/// namespace or name than the URL.
async fn bad_requests(http: &KubeHttp, kept: &Value) -> Result<()> {
    let malformed = http
        .request(
            "POST",
            CONFIG_MAPS,
            Some("application/json"),
            Some(br#"{"metadata": {"name": "#),
        )
        .await?;
    expect_status(&malformed, 400, "BadRequest")?;
    let mut cases = Vec::new();
    let mut other_kind = config_map("x", "one");
    other_kind["kind"] = json!("Secret");
    cases.push(("POST", CONFIG_MAPS.to_string(), other_kind, "kind"));
    let mut other_version = config_map("x", "one");
    other_version["apiVersion"] = json!("apps/v1");
    cases.push((
        "POST",
        CONFIG_MAPS.to_string(),
        other_version,
        "API version",
    ));
    let mut other_namespace = config_map("x", "one");
    other_namespace["metadata"]["namespace"] = json!("kube-system");
    cases.push((
        "POST",
        CONFIG_MAPS.to_string(),
        other_namespace,
        "namespace",
    ));
    let mut moved = kept.clone();
    moved["metadata"]["namespace"] = json!("kube-system");
    moved["data"]["mode"] = json!("moved");
    cases.push(("PUT", format!("{CONFIG_MAPS}/kept"), moved, "namespace"));
    let mut renamed = kept.clone();
    renamed["metadata"]["name"] = json!("other");
    cases.push(("PUT", format!("{CONFIG_MAPS}/kept"), renamed, "name"));
    let mut retyped = kept.clone();
    retyped["kind"] = json!("Secret");
    cases.push(("PUT", format!("{CONFIG_MAPS}/kept"), retyped, "kind"));
    for (method, path, body, what) in cases {
        let reply = http
            .request(
                method,
                &path,
                Some("application/json"),
                Some(&serde_json::to_vec(&body)?),
            )
            .await?;
        let status = expect_status(&reply, 400, "BadRequest")
            .with_context(|| format!("{method} {path} with another {what}"))?;
        let message = status["message"].as_str().unwrap_or_default();
        ensure!(
            message.contains(what),
            "{method} {path}: the message names the {what}: {message}"
        );
    }
    Ok(())
}

async fn too_large_and_not_allowed(http: &KubeHttp) -> Result<()> {
    let mut huge = config_map("huge", "one");
    huge["data"]["blob"] = json!("x".repeat(MAX_BODY_BYTES));
    let body = serde_json::to_vec(&huge)?;
    assert!(body.len() > MAX_BODY_BYTES);
    let reply = http
        .request("POST", CONFIG_MAPS, Some("application/json"), Some(&body))
        .await?;
    expect_status(&reply, 413, "RequestEntityTooLarge")?;

    let kept = format!("{CONFIG_MAPS}/kept");
    for (method, path) in [
        ("POST", kept.as_str()),
        ("PUT", CONFIG_MAPS),
        ("POST", "/api/v1/namespaces/default/pods/nothing"),
    ] {
        let body = serde_json::to_vec(&config_map("kept", "two"))?;
        let reply = http
            .request(method, path, Some("application/json"), Some(&body))
            .await?;
        expect_status(&reply, 405, "MethodNotAllowed")
            .with_context(|| format!("{method} {path}"))?;
    }
    Ok(())
}

async fn no_content_type_dry_run_and_generate_name(backend: Backend) -> Result<()> {
    let Some(server) =
        ApiServer::start_on(backend, "no_content_type_dry_run_and_generate_name").await?
    else {
        return Ok(());
    };
    let http = server.http()?;

    // As the Python client sends it: no Content-Type, no kind or apiVersion.
    let bare = json!({"metadata": {"name": "bare"}, "data": {"mode": "one"}});
    let reply = http
        .request("POST", CONFIG_MAPS, None, Some(&serde_json::to_vec(&bare)?))
        .await?;
    assert_eq!(reply.status, 201, "{}", reply.text());
    let stored = http.get_json(&format!("{CONFIG_MAPS}/bare")).await?;
    assert_eq!(
        (&stored["kind"], &stored["apiVersion"], &stored["data"]),
        (&json!("ConfigMap"), &json!("v1"), &json!({"mode": "one"}))
    );

    // dryRun=All: answered as if done, nothing stored.
    let before = state(&http, &[CONFIG_MAPS, PODS]).await?;
    let reply = http
        .post(
            &format!("{CONFIG_MAPS}?dryRun=All"),
            &config_map("dry", "one"),
        )
        .await?;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(reply.json()?["metadata"]["name"], "dry");
    let mut changed = stored.clone();
    changed["data"]["mode"] = json!("two");
    let reply = http
        .put(&format!("{CONFIG_MAPS}/bare?dryRun=All"), &changed)
        .await?;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()?["data"]["mode"], "two");
    let reply = http
        .delete(&format!("{CONFIG_MAPS}/bare?dryRun=All"))
        .await?;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let reply = http
        .post(&format!("{PODS}?dryRun=All"), &pod("dry"))
        .await?;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(state(&http, &[CONFIG_MAPS, PODS]).await?, before);
    expect_status(
        &http.get(&format!("{CONFIG_MAPS}/dry")).await?,
        404,
        "NotFound",
    )?;

    // generateName: a fresh name each time, the prefix and five characters.
    let template = json!({"metadata": {"generateName": "gen-"}, "data": {"mode": "one"}});
    let mut generated = Vec::new();
    for _ in 0..2 {
        let made = created(&http, CONFIG_MAPS, &template).await?;
        let name = made["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        ensure!(
            name.len() == 9
                && name.starts_with("gen-")
                && name[4..]
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()),
            "a generated name: {name:?}"
        );
        assert_eq!(made["metadata"]["generateName"], "gen-");
        let stored = http.get_json(&format!("{CONFIG_MAPS}/{name}")).await?;
        assert_eq!(stored["metadata"]["uid"], made["metadata"]["uid"]);
        generated.push(name);
    }
    assert_ne!(generated[0], generated[1]);
    Ok(())
}

async fn finalizers_hold_an_object_until_cleared(backend: Backend) -> Result<()> {
    let Some(server) =
        ApiServer::start_on(backend, "finalizers_hold_an_object_until_cleared").await?
    else {
        return Ok(());
    };
    let http = server.http()?;
    let path = format!("{CONFIG_MAPS}/held");
    let mut held = config_map("held", "one");
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    let made = created(&http, CONFIG_MAPS, &held).await?;
    assert!(made["metadata"]["deletionTimestamp"].is_null());

    let reply = http.delete(&path).await?;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let marked = reply.json()?;
    let stamp = marked["metadata"]["deletionTimestamp"]
        .as_str()
        .context("DELETE marks the object")?;
    ensure!(stamp.ends_with('Z'), "deletionTimestamp {stamp:?}");
    assert!(rv(&marked) > rv(&made));
    let stored = http.get_json(&path).await?;
    assert_eq!(stored, marked, "the object stays, marked");
    assert_eq!(
        stored["metadata"]["finalizers"],
        json!(["example.com/hold"])
    );
    assert_eq!(names(&http.get_json(CONFIG_MAPS).await?), ["held"]);

    // Deleting again changes nothing.
    let again = http.delete(&path).await?;
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(http.get_json(&path).await?, marked);

    // Clearing the finalizers lets it go.
    let mut cleared = stored.clone();
    cleared["metadata"]["finalizers"] = json!([]);
    let reply = http.put(&path, &cleared).await?;
    assert_eq!(reply.status, 200, "{}", reply.text());
    expect_status(&http.get(&path).await?, 404, "NotFound")?;
    assert_eq!(
        names(&http.get_json(CONFIG_MAPS).await?),
        Vec::<String>::new()
    );
    Ok(())
}

async fn generation_rises_only_with_the_spec(backend: Backend) -> Result<()> {
    let Some(server) = ApiServer::start_on(backend, "generation_rises_only_with_the_spec").await?
    else {
        return Ok(());
    };
    let http = server.http()?;
    let path = format!("{DEPLOYMENTS}/web");
    let made = created(&http, DEPLOYMENTS, &deployment("web", "web", "web")).await?;
    assert_eq!(made["metadata"]["generation"], 1);

    let put = |object: Value| {
        let http = http.clone();
        let path = path.clone();
        async move {
            let reply = http.put(&path, &object).await?;
            ensure!(
                reply.status == 200,
                "PUT: {} {}",
                reply.status,
                reply.text()
            );
            reply.json()
        }
    };
    let mut labelled = made.clone();
    labelled["metadata"]["labels"] = json!({"tier": "front"});
    let labelled = put(labelled).await?;
    assert_eq!(labelled["metadata"]["generation"], 1, "metadata only");
    assert!(rv(&labelled) > rv(&made));

    let mut scaled = labelled.clone();
    scaled["spec"]["replicas"] = json!(3);
    let scaled = put(scaled).await?;
    assert_eq!(scaled["metadata"]["generation"], 2, "the spec changed");
    assert!(rv(&scaled) > rv(&labelled));

    let same = put(scaled.clone()).await?;
    assert_eq!(
        same, scaled,
        "an update that changes nothing writes nothing"
    );

    let mut reimaged = scaled.clone();
    reimaged["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.28");
    let reimaged = put(reimaged).await?;
    assert_eq!(reimaged["metadata"]["generation"], 3);
    let stored = http.get_json(&path).await?;
    assert_eq!(stored["metadata"]["generation"], 3);
    assert_eq!(stored["spec"]["replicas"], 3);
    Ok(())
}

async fn list_pages_are_consistent_at_one_revision(backend: Backend) -> Result<()> {
    let Some(server) =
        ApiServer::start_on(backend, "list_pages_are_consistent_at_one_revision").await?
    else {
        return Ok(());
    };
    let http = server.http()?;
    for name in ["p-a", "p-b", "p-c", "p-d", "p-e"] {
        created(&http, CONFIG_MAPS, &config_map(name, "one")).await?;
    }
    let selector = "labelSelector=suite%3Derrors";
    let first = http
        .get_json(&format!("{CONFIG_MAPS}?{selector}&limit=2"))
        .await?;
    assert_eq!(names(&first), ["p-a", "p-b"]);
    let at = first["metadata"]["resourceVersion"].clone();
    let token = first["metadata"]["continue"]
        .as_str()
        .context("a continue token")?
        .to_string();

    // Changes between the pages: none of them may show.
    created(&http, CONFIG_MAPS, &config_map("p-bb", "one")).await?;
    created(&http, CONFIG_MAPS, &config_map("p-z", "one")).await?;
    let reply = http.delete(&format!("{CONFIG_MAPS}/p-d")).await?;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let mut changed = http.get_json(&format!("{CONFIG_MAPS}/p-c")).await?;
    changed["data"]["mode"] = json!("two");
    assert_eq!(
        http.put(&format!("{CONFIG_MAPS}/p-c"), &changed)
            .await?
            .status,
        200
    );

    let second = http
        .get_json(&format!(
            "{CONFIG_MAPS}?{selector}&limit=2&continue={token}"
        ))
        .await?;
    assert_eq!(names(&second), ["p-c", "p-d"], "as at the first page");
    assert_eq!(second["items"][0]["data"]["mode"], "one");
    assert_eq!(second["metadata"]["resourceVersion"], at);
    let token = second["metadata"]["continue"]
        .as_str()
        .context("a second continue token")?
        .to_string();
    let third = http
        .get_json(&format!(
            "{CONFIG_MAPS}?{selector}&limit=2&continue={token}"
        ))
        .await?;
    assert_eq!(names(&third), ["p-e"]);
    assert_eq!(third["metadata"]["resourceVersion"], at);
    assert!(
        third["metadata"]["continue"]
            .as_str()
            .is_none_or(str::is_empty),
        "the last page: {}",
        third["metadata"]
    );

    // A new list sees the present.
    let now = http.get_json(&format!("{CONFIG_MAPS}?{selector}")).await?;
    assert_eq!(names(&now), ["p-a", "p-b", "p-bb", "p-c", "p-e", "p-z"]);
    ensure!(
        rv(&json!({"metadata": now["metadata"]}))
            > rv(&json!({"metadata": {"resourceVersion": at}})),
        "the list's resourceVersion moved on"
    );
    Ok(())
}

skiff_tests::on_every_backend!(
    missing_existing_and_stale_objects,
    refused_requests_change_nothing,
    no_content_type_dry_run_and_generate_name,
    finalizers_hold_an_object_until_cleared,
    generation_rises_only_with_the_spec,
    list_pages_are_consistent_at_one_revision
);
