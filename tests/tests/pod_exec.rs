//! `pods/exec`, `pods/attach` and `pods/portforward` against `skiff up`:
//! who may open them (RBAC `create` on the subresource, whichever method
//! upgrades; never a kubelet's identity), and the refusals before any
//! connection to a kubelet, each a `Status`.

use anyhow::Result;
use serde_json::json;
use skiff_tests::api_server::ApiServer;
use skiff_tests::kube_http::{expect_status, KubeHttp};

const PODS: &str = "/api/v1/namespaces/default/pods";

fn client(admin: &KubeHttp, user: &str, groups: &[&str]) -> Result<KubeHttp> {
    let (cert, key) = skiff_tests::test_pki::client_credentials(user, groups)?;
    Ok(admin.with_client_cert(&cert, &key))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_create_on_the_subresource_opens_a_stream_into_a_pod() -> Result<()> {
    let server = ApiServer::start().await?;
    let admin = server.http()?;
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                     "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}});
    expect_status(&admin.post(PODS, &pod).await?, 201, "pod")?;
    // A viewer (get on pods) and a user with create on pods/exec only.
    let viewer_binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "viewer", "namespace": "default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "viewer"}],
    });
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "exec", "namespace": "default"},
        "rules": [{"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}],
    });
    let exec_binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "exec", "namespace": "default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "exec"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "execer"}],
    });
    let rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/default";
    expect_status(&admin.post(&format!("{rbac}/rolebindings"), &viewer_binding).await?, 201, "viewer binding")?;
    expect_status(&admin.post(&format!("{rbac}/roles"), &role).await?, 201, "role")?;
    expect_status(&admin.post(&format!("{rbac}/rolebindings"), &exec_binding).await?, 201, "exec binding")?;

    let viewer = client(&admin, "viewer", &[])?;
    let kubelet = client(&admin, "system:node:n1", &["system:nodes"])?;
    let execer = client(&admin, "execer", &[])?;
    let exec = format!("{PODS}/p/exec?command=ls&stdout=true");
    // The viewer can read the pod but not exec into it, by GET or POST.
    expect_status(&viewer.get(&format!("{PODS}/p")).await?, 200, "viewer get")?;
    for method in ["GET", "POST"] {
        let reply = viewer.request(method, &exec, None, None).await?;
        let status = expect_status(&reply, 403, "viewer exec")?;
        assert_eq!(
            status["message"],
            "pods \"p\" is forbidden: User \"viewer\" cannot create resource \"pods/exec\" in API group \"\" in the namespace \"default\"",
            "{method}"
        );
    }
    for sub in ["exec?command=ls", "attach?stdout=true", "portforward?ports=80"] {
        let reply = kubelet.get(&format!("{PODS}/p/{sub}")).await?;
        let status = expect_status(&reply, 403, sub)?;
        assert_eq!(status["reason"], "Forbidden", "{sub}");
    }
    // create on pods/exec gets past authorization: this request is not an
    // upgrade, which is the next thing refused.
    for client in [&execer, &admin] {
        let status = expect_status(&client.get(&exec).await?, 400, "exec without upgrade")?;
        assert_eq!(status["message"], "Upgrade request required");
    }
    let status = expect_status(
        &execer.get(&format!("{PODS}/p/attach?stdout=true")).await?,
        403,
        "execer attach",
    )?;
    assert_eq!(status["reason"], "Forbidden");
    Ok(())
}
