//! Subresource writes beside running controllers, against `skiff up`: a
//! PATCH of `deployments/NAME/scale` without a resourceVersion is made
//! again when the deployment controller wrote the Deployment meanwhile,
//! as a PATCH of the Deployment itself is, so none answers 409.

use anyhow::{ensure, Result};
use serde_json::json;
use skiff_tests::api_server::ApiServer;

const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forty_scale_patches_beside_the_controllers_never_conflict() -> Result<()> {
    let server = ApiServer::start_scheduling_with(&["--controller-manager=true".into()]).await?;
    let http = server.http()?;
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}});
    let created = http.post(DEPLOYMENTS, &deployment).await?;
    ensure!(created.status == 201, "create: {}", created.text());

    let scale = format!("{DEPLOYMENTS}/web/scale");
    let mut conflicts = Vec::new();
    for step in 0..40 {
        // Up and down, so that the controllers write after every patch.
        let replicas = 1 + step % 3;
        let patch = json!({"spec": {"replicas": replicas}}).to_string();
        let reply = http
            .request(
                "PATCH",
                &scale,
                Some("application/merge-patch+json"),
                Some(patch.as_bytes()),
            )
            .await?;
        match reply.status {
            200 => ensure!(
                reply.json()?["spec"]["replicas"] == replicas,
                "the Scale answered: {}",
                reply.text()
            ),
            409 => conflicts.push(step),
            other => anyhow::bail!("PATCH scale: {other} {}", reply.text()),
        }
    }
    ensure!(
        conflicts.is_empty(),
        "409 Conflict at steps {conflicts:?}; skiff's log:\n{}",
        server.stderr()
    );
    let stored = http.get_json(&format!("{DEPLOYMENTS}/web")).await?;
    // The last patch (step 39) set 1 + 39 % 3 = 1.
    ensure!(stored["spec"]["replicas"] == 1, "{stored}");
    // The controllers did write meanwhile: the status follows the spec.
    ensure!(
        stored["status"]["observedGeneration"].as_i64().unwrap_or(0) > 1,
        "the deployment controller never wrote the status: {stored}"
    );
    Ok(())
}
