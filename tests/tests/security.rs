//! The API is secure by default: HTTPS with the cluster CA, a client
//! certificate or a token names the user, RBAC decides what the user may
//! do. With the real kubectl: no credentials is 401, a user bound to the
//! `view` ClusterRole lists pods but cannot delete them (403 with
//! Kubernetes' message), `kubectl auth can-i` and `kubectl auth whoami`
//! answer for several users, and a client that trusts another CA cannot
//! talk to the server at all.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{ensure, Context, Result};
use serde_json::json;
use skiff_tests::api_server::ApiServer;
use skiff_tests::kube_http::expect_status;
use skiff_tests::kubectl::{kubectl_or_skip, Kubectl};

const TOKENS: &str = "\
viewer-token,vera,1001,\"qa\"
plain-token,paul,1002
";

const PODS: &str = "/api/v1/namespaces/default/pods";

/// `skiff up` with the token file above.
async fn server() -> Result<(ApiServer, tempfile::TempDir)> {
    let dir = tempfile::tempdir()?;
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS)?;
    let server =
        ApiServer::start_scheduling_with(&[format!("--token-auth-file={}", tokens.display())])
            .await?;
    Ok((server, dir))
}

/// A copy of `base` (the admin's kubeconfig) whose user has only `token`.
fn token_kubeconfig(base: &Path, token: &str, out: &Path) -> Result<PathBuf> {
    let text = std::fs::read_to_string(base)?;
    let mut config: serde_yaml::Value = serde_yaml::from_str(&text)?;
    config["users"][0]["user"] = serde_yaml::to_value(json!({ "token": token }))?;
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    token.hash(&mut hasher);
    let path = out.join(format!("{:x}.kubeconfig", hasher.finish()));
    std::fs::write(&path, serde_yaml::to_string(&config)?)?;
    Ok(path)
}

/// A binding of ClusterRole `role` to `subject`: a RoleBinding in
/// `namespace`, or a ClusterRoleBinding.
fn binding_object(
    namespace: Option<&str>,
    name: &str,
    role: &str,
    subject: serde_json::Value,
) -> serde_json::Value {
    let mut binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": if namespace.is_some() { "RoleBinding" } else { "ClusterRoleBinding" },
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [subject],
    });
    if let Some(namespace) = namespace {
        binding["metadata"]["namespace"] = json!(namespace);
    }
    binding
}

fn bindings_path(namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"),
        None => "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings".into(),
    }
}

/// The administrator binds ClusterRole `role` to `subject`.
async fn bind(
    admin: &skiff_tests::kube_http::KubeHttp,
    namespace: Option<&str>,
    name: &str,
    role: &str,
    subject: serde_json::Value,
) -> Result<()> {
    let binding = binding_object(namespace, name, role, subject);
    let reply = admin.post(&bindings_path(namespace), &binding).await?;
    expect_status(&reply, 201, name).map(drop)
}

fn subject(kind: &str, name: &str) -> serde_json::Value {
    json!({"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name})
}

fn pod(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credentials_is_401_and_a_viewer_lists_pods_but_cannot_delete_them() -> Result<()> {
    let (server, dir) = server().await?;
    let admin = server.http()?;
    expect_status(
        &admin.post(PODS, &pod("web")).await?,
        201,
        "the admin creates a pod",
    )?;

    // No credentials: only the health checks and /version answer.
    let nobody = admin.anonymous();
    let refused = expect_status(&nobody.get(PODS).await?, 401, "an anonymous list")?;
    assert_eq!(refused["reason"], "Unauthorized");
    for open in ["/healthz", "/readyz", "/livez", "/version"] {
        ensure!(
            nobody.get(open).await?.status == 200,
            "{open} refused anonymously"
        );
    }
    // A token that is not in the file is refused the same way.
    expect_status(
        &admin.with_token("guess").get(PODS).await?,
        401,
        "a wrong token",
    )?;

    // A known user with no role may not list.
    let vera = admin.with_token("viewer-token");
    let denied = expect_status(
        &vera.get(PODS).await?,
        403,
        "vera's list before any binding",
    )?;
    assert_eq!(
        denied["message"],
        "pods is forbidden: User \"vera\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
    );

    // Bound to `view` (through her group), she may list but not delete,
    // at once: the binding just written is honoured by the next request.
    bind(&admin, None, "qa-view", "view", subject("Group", "qa")).await?;
    let list = expect_status(&vera.get(PODS).await?, 200, "vera's list")?;
    assert_eq!(list["items"][0]["metadata"]["name"], "web");
    let denied = expect_status(
        &vera.delete(&format!("{PODS}/web")).await?,
        403,
        "vera's delete",
    )?;
    assert_eq!(
        denied["message"],
        "pods \"web\" is forbidden: User \"vera\" cannot delete resource \"pods\" in API group \"\" in the namespace \"default\""
    );
    assert_eq!(denied["details"]["kind"], "pods");
    // `view` does not reach Secrets.
    expect_status(
        &vera.get("/api/v1/namespaces/default/secrets").await?,
        403,
        "secrets",
    )?;

    let Some(binary) =
        kubectl_or_skip("no_credentials_is_401_and_a_viewer_lists_pods_but_cannot_delete_them")
    else {
        return Ok(());
    };
    let kubectl = Kubectl::new(
        binary,
        &token_kubeconfig(&server.kubeconfig(), "viewer-token", dir.path())?,
    )?;
    let listed = kubectl.ok(&["get", "pods", "-o", "name"])?;
    assert_eq!(listed.trim(), "pod/web");
    let refused = kubectl.fails(&["delete", "pod", "web"])?;
    assert!(
        refused.contains("Error from server (Forbidden): pods \"web\" is forbidden: User \"vera\" cannot delete resource \"pods\" in API group \"\" in the namespace \"default\""),
        "{refused}"
    );
    // kubectl with a token the server does not know.
    let unknown = token_kubeconfig(&server.kubeconfig(), "guess", dir.path())?;
    let refused = kubectl.with_kubeconfig(&unknown)?.fails(&["get", "pods"])?;
    assert!(
        refused.contains("the server has asked for the client to provide credentials"),
        "{refused}"
    );
    // The pod is still there.
    expect_status(&admin.get(&format!("{PODS}/web")).await?, 200, "the pod")?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_can_i_and_whoami_answer_for_each_user() -> Result<()> {
    let Some(binary) = kubectl_or_skip("kubectl_auth_can_i_and_whoami_answer_for_each_user") else {
        return Ok(());
    };
    let (server, dir) = server().await?;
    let admin = Kubectl::new(binary, &server.kubeconfig())?;
    let manifest = admin.manifest(
        "team.yaml",
        "apiVersion: v1
kind: Namespace
metadata: {name: team}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: paul-edit, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: paul}]
",
    )?;
    admin.ok(&["apply", "-f", manifest.to_str().context("a path")?])?;

    let can = |kubectl: &Kubectl, args: &[&str]| -> Result<bool> {
        let mut full = vec!["auth", "can-i"];
        full.extend_from_slice(args);
        let output = kubectl.run(&full)?;
        match (output.code, output.stdout.trim()) {
            (Some(0), "yes") => Ok(true),
            (Some(1), "no") => Ok(false),
            _ => anyhow::bail!(
                "kubectl {}: {:?} {} {}",
                full.join(" "),
                output.code,
                output.stdout,
                output.stderr
            ),
        }
    };
    // The administrator may do anything.
    assert!(can(&admin, &["*", "*"])?);
    assert!(can(&admin, &["delete", "nodes"])?);
    // Paul (edit in team only), through his own token.
    let paul = admin.with_kubeconfig(&token_kubeconfig(
        &server.kubeconfig(),
        "plain-token",
        dir.path(),
    )?)?;
    assert!(can(&paul, &["create", "deployments", "-n", "team"])?);
    assert!(can(&paul, &["delete", "pods", "-n", "team"])?);
    assert!(!can(&paul, &["delete", "pods", "-n", "default"])?);
    assert!(!can(&paul, &["create", "rolebindings", "-n", "team"])?);
    assert!(!can(&paul, &["list", "nodes"])?);
    // Vera (no binding), and the admin asking for others with --as.
    let vera = admin.with_kubeconfig(&token_kubeconfig(
        &server.kubeconfig(),
        "viewer-token",
        dir.path(),
    )?)?;
    assert!(!can(&vera, &["get", "pods", "-n", "team"])?);
    assert!(can(
        &admin,
        &["get", "secrets", "-n", "team", "--as", "paul"]
    )?);
    assert!(!can(
        &admin,
        &["get", "secrets", "-n", "default", "--as", "paul"]
    )?);
    assert!(can(
        &admin,
        &["watch", "nodes", "--as", "system:kube-scheduler"]
    )?);
    // Only those allowed to impersonate may.
    let refused = paul.fails(&["get", "pods", "-n", "team", "--as", "vera"])?;
    assert!(
        refused.contains("cannot impersonate resource \"users\""),
        "{refused}"
    );
    // The rules paul holds in team, as `can-i --list` shows them.
    let listed = paul.ok(&["auth", "can-i", "--list", "-n", "team"])?;
    assert!(
        listed.lines().any(|l| l.starts_with("deployments.apps")),
        "{listed}"
    );
    // Who each one is.
    let whoami = paul.ok(&["auth", "whoami", "-o", "json"])?;
    let whoami: serde_json::Value = serde_json::from_str(&whoami)?;
    assert_eq!(whoami["status"]["userInfo"]["username"], "paul");
    let admin_whoami = admin.ok(&["auth", "whoami"])?;
    assert!(
        admin_whoami.contains("kubernetes-admin") && admin_whoami.contains("system:masters"),
        "{admin_whoami}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_fails_for_a_client_of_another_ca() -> Result<()> {
    let server = ApiServer::start().await?;
    let admin = server.http()?;
    expect_status(&admin.get(PODS).await?, 200, "the admin over TLS")?;

    // A client that trusts another CA refuses the server's certificate.
    let other_ca = rcgen::generate_simple_self_signed(vec!["localhost".into()])?;
    let distrusting = admin.trusting(&other_ca.cert.pem());
    let err = distrusting
        .get(PODS)
        .await
        .err()
        .context("a TLS handshake with the wrong CA succeeded")?;
    ensure!(format!("{err:#}").contains("certificate"), "{err:#}");

    // A client certificate from another CA is refused by the server.
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "mallory");
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:masters");
    let key = rcgen::KeyPair::generate()?;
    let forged = params.self_signed(&key)?;
    let forger = admin.with_client_cert(&forged.pem(), &key.serialize_pem());
    match forger.get(PODS).await {
        Err(_) => {}
        Ok(reply) => anyhow::bail!("a forged certificate got {} {}", reply.status, reply.text()),
    }

    // kubectl with the wrong CA in its kubeconfig fails the same way.
    if let Some(binary) = kubectl_or_skip("tls_fails_for_a_client_of_another_ca") {
        use base64::Engine;
        let mut config: serde_yaml::Value =
            serde_yaml::from_str(&std::fs::read_to_string(server.kubeconfig())?)?;
        config["clusters"][0]["cluster"]["certificate-authority-data"] = serde_yaml::Value::String(
            base64::engine::general_purpose::STANDARD.encode(other_ca.cert.pem()),
        );
        let dir = tempfile::tempdir()?;
        let wrong = dir.path().join("wrong-ca.kubeconfig");
        std::fs::write(&wrong, serde_yaml::to_string(&config)?)?;
        let refused = Kubectl::new(binary, &wrong)?.fails(&["get", "pods"])?;
        assert!(
            refused.contains("certificate signed by unknown authority"),
            "{refused}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plain_http_port_is_loopback_only_and_acts_as_the_administrator() -> Result<()> {
    let (server, http) = ApiServer::start_with_plain_port(&[]).await?;
    let list = expect_status(&http.get(PODS).await?, 200, "a list over plain HTTP")?;
    assert_eq!(list["kind"], "PodList");
    drop(server);
    // Anywhere but loopback is refused before anything starts.
    let output = std::process::Command::new(skiff_tests::skiff_bin::skiff_bin())
        .args(["up", "--insecure-api-listen", "0.0.0.0:18080"])
        .output()?;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("is not a loopback address"), "{stderr}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_account_token_works_until_its_account_or_pod_is_gone() -> Result<()> {
    let server = ApiServer::start().await?;
    let admin = server.http()?;
    let accounts = "/api/v1/namespaces/default/serviceaccounts";
    let account =
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bot"}});
    expect_status(&admin.post(accounts, &account).await?, 201, "the account")?;
    let bot = json!({"kind": "ServiceAccount", "name": "bot", "namespace": "default"});
    bind(&admin, Some("default"), "bot-view", "view", bot).await?;
    let token_path = format!("{accounts}/bot/token");
    let request = |spec: serde_json::Value| json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec});
    // Ten minutes at least.
    let short = expect_status(
        &admin
            .post(&token_path, &request(json!({"expirationSeconds": 599})))
            .await?,
        422,
        "a token for 599 s",
    )?;
    assert!(
        short["message"]
            .as_str()
            .unwrap_or("")
            .contains("less than 10 minutes"),
        "{short}"
    );
    let issued = expect_status(
        &admin
            .post(&token_path, &request(json!({"expirationSeconds": 600})))
            .await?,
        201,
        "a token",
    )?;
    let token = issued["status"]["token"]
        .as_str()
        .context("a token")?
        .to_string();
    let expires = jiff::Timestamp::from_str(
        issued["status"]["expirationTimestamp"]
            .as_str()
            .unwrap_or(""),
    )?;
    let left = expires.as_second() - jiff::Timestamp::now().as_second();
    ensure!((590..=600).contains(&left), "the token expires in {left} s");

    let bot = admin.with_token(&token);
    expect_status(&bot.get(PODS).await?, 200, "the bot's list")?;
    let denied = expect_status(&bot.post(PODS, &pod("x")).await?, 403, "the bot's create")?;
    assert!(
        denied["message"]
            .as_str()
            .unwrap_or("")
            .contains("User \"system:serviceaccount:default:bot\" cannot create resource \"pods\""),
        "{denied}"
    );
    // A token bound to a pod lives as long as the pod.
    expect_status(&admin.post(PODS, &pod("web")).await?, 201, "the pod")?;
    let bound = expect_status(
        &admin
            .post(
                &token_path,
                &request(
                    json!({"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web"}}),
                ),
            )
            .await?,
        201,
        "a bound token",
    )?;
    let bound = admin.with_token(bound["status"]["token"].as_str().context("a token")?);
    expect_status(&bound.get(PODS).await?, 200, "the bound token's list")?;
    expect_status(
        &admin.delete(&format!("{PODS}/web")).await?,
        200,
        "deleting the pod",
    )?;
    expect_status(
        &bound.get(PODS).await?,
        401,
        "the bound token after its pod",
    )?;

    // kubectl create token (its body is protobuf), and whoami with it.
    if let Some(binary) =
        kubectl_or_skip("a_service_account_token_works_until_its_account_or_pod_is_gone")
    {
        let kubectl = Kubectl::new(binary, &server.kubeconfig())?;
        let printed = kubectl.ok(&[
            "create",
            "token",
            "bot",
            "--duration=15m",
            "--audience=https://kubernetes.default.svc.cluster.local",
        ])?;
        let dir = tempfile::tempdir()?;
        let as_bot = kubectl.with_kubeconfig(&token_kubeconfig(
            &server.kubeconfig(),
            printed.trim(),
            dir.path(),
        )?)?;
        let whoami: serde_json::Value =
            serde_json::from_str(&as_bot.ok(&["auth", "whoami", "-o", "json"])?)?;
        assert_eq!(
            whoami["status"]["userInfo"]["username"],
            "system:serviceaccount:default:bot"
        );
        let groups = whoami["status"]["userInfo"]["groups"].to_string();
        assert!(
            groups.contains("system:serviceaccounts:default"),
            "{groups}"
        );
    }

    // Once the account is deleted, its tokens are refused.
    expect_status(
        &admin.delete(&format!("{accounts}/bot")).await?,
        200,
        "deleting the account",
    )?;
    expect_status(&bot.get(PODS).await?, 401, "the token after its account")?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_reads_only_the_secrets_and_config_maps_its_pods_use() -> Result<()> {
    let server = ApiServer::start().await?;
    let admin = server.http()?;
    const SECRETS: &str = "/api/v1/namespaces/default/secrets";
    const CONFIG_MAPS: &str = "/api/v1/namespaces/default/configmaps";
    for name in ["used", "unused"] {
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
                            "stringData": {"k": "v"}});
        expect_status(&admin.post(SECRETS, &secret).await?, 201, name)?;
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                            "data": {"k": "v"}});
        expect_status(&admin.post(CONFIG_MAPS, &config).await?, 201, name)?;
    }
    let (cert, key) =
        skiff_tests::test_pki::client_credentials("system:node:n1", &["system:nodes"])?;
    let kubelet = admin.with_client_cert(&cert, &key);
    // Before any pod of n1 uses it, the Secret is out of reach.
    let refused = expect_status(
        &kubelet.get(&format!("{SECRETS}/used")).await?,
        403,
        "a secret no pod of n1 uses",
    )?;
    assert_eq!(
        refused["message"],
        "secrets \"used\" is forbidden: User \"system:node:n1\" cannot get resource \"secrets\" in API group \"\" in the namespace \"default\": no relationship found between node 'n1' and this object"
    );
    // A pod bound to n1 that uses both "used" objects.
    let mut bound = pod("uses");
    bound["spec"]["nodeName"] = json!("n1");
    bound["spec"]["containers"][0]["env"] = json!([
        {"name": "S", "valueFrom": {"secretKeyRef": {"name": "used", "key": "k"}}}
    ]);
    bound["spec"]["volumes"] = json!([{"name": "v", "configMap": {"name": "used"}}]);
    expect_status(&admin.post(PODS, &bound).await?, 201, "a pod on n1")?;
    // Read right after the pod is created: allowed at once.
    let secret = expect_status(
        &kubelet.get(&format!("{SECRETS}/used")).await?,
        200,
        "its secret",
    )?;
    assert_eq!(secret["data"]["k"], "dg==");
    expect_status(
        &kubelet.get(&format!("{CONFIG_MAPS}/used")).await?,
        200,
        "its config map",
    )?;
    for path in [
        format!("{SECRETS}/unused"),
        format!("{CONFIG_MAPS}/unused"),
        SECRETS.to_string(),
        "/api/v1/secrets".to_string(),
        format!("{SECRETS}?watch=true"),
    ] {
        expect_status(&kubelet.get(&path).await?, 403, &path)?;
    }
    // Another node's kubelet may not read n1's.
    let (cert, key) =
        skiff_tests::test_pki::client_credentials("system:node:n2", &["system:nodes"])?;
    let other = admin.with_client_cert(&cert, &key);
    expect_status(
        &other.get(&format!("{SECRETS}/used")).await?,
        403,
        "n2 reading n1's secret",
    )?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_changes_only_its_own_node_and_the_pods_bound_to_it() -> Result<()> {
    let server = ApiServer::start().await?;
    let admin = server.http()?;
    for node in ["n1", "n2"] {
        let object = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}});
        expect_status(&admin.post("/api/v1/nodes", &object).await?, 201, node)?;
        let mut bound = pod(&format!("on-{node}"));
        bound["spec"]["nodeName"] = json!(node);
        expect_status(&admin.post(PODS, &bound).await?, 201, "a bound pod")?;
    }
    let (cert, key) =
        skiff_tests::test_pki::client_credentials("system:node:n1", &["system:nodes"])?;
    let kubelet = admin.with_client_cert(&cert, &key);
    let patch = |path: String| {
        let kubelet = kubelet.clone();
        async move {
            let body = serde_json::to_vec(&json!({"status": {"phase": "Running"}}))?;
            kubelet
                .request(
                    "PATCH",
                    &path,
                    Some("application/merge-patch+json"),
                    Some(&body),
                )
                .await
        }
    };
    // Its own pod and node.
    expect_status(
        &patch(format!("{PODS}/on-n1/status")).await?,
        200,
        "its pod's status",
    )?;
    let node_patch = serde_json::to_vec(&json!({"metadata": {"labels": {"ok": "yes"}}}))?;
    let reply = kubelet
        .request(
            "PATCH",
            "/api/v1/nodes/n1",
            Some("application/merge-patch+json"),
            Some(&node_patch),
        )
        .await?;
    expect_status(&reply, 200, "its node")?;
    expect_status(&kubelet.get(PODS).await?, 200, "reading pods")?;
    // Another node's pod and node.
    let refused = expect_status(
        &patch(format!("{PODS}/on-n2/status")).await?,
        403,
        "another's pod",
    )?;
    assert_eq!(
        refused["message"],
        "pods \"on-n2\" is forbidden: node \"n1\" can only update pods with spec.nodeName set to itself"
    );
    let refused = expect_status(
        &kubelet.delete(&format!("{PODS}/on-n2")).await?,
        403,
        "deleting another's pod",
    )?;
    assert!(
        refused["message"]
            .as_str()
            .unwrap_or("")
            .contains("can only delete pods"),
        "{refused}"
    );
    let reply = kubelet
        .request(
            "PATCH",
            "/api/v1/nodes/n2",
            Some("application/merge-patch+json"),
            Some(&node_patch),
        )
        .await?;
    let refused = expect_status(&reply, 403, "another node")?;
    assert_eq!(
        refused["message"],
        "nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\""
    );
    expect_status(
        &kubelet.post(PODS, &pod("new")).await?,
        403,
        "a kubelet's pod",
    )?;
    // Nothing changed on n2's side.
    let other = expect_status(&admin.get(&format!("{PODS}/on-n2")).await?, 200, "on-n2")?;
    assert_eq!(other["status"]["phase"], "Pending");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_admin_cannot_grant_more_than_they_hold() -> Result<()> {
    let (server, _dir) = server().await?;
    let admin = server.http()?;
    let team = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}});
    expect_status(&admin.post("/api/v1/namespaces", &team).await?, 201, "team")?;
    let bindings = "/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings";
    let roles = "/apis/rbac.authorization.k8s.io/v1/namespaces/team/roles";
    let binding = |name: &str, role: &str, user: &str| {
        binding_object(Some("team"), name, role, subject("User", user))
    };
    expect_status(
        &admin
            .post(bindings, &binding("paul-admin", "admin", "paul"))
            .await?,
        201,
        "paul's admin",
    )?;
    let paul = admin.with_token("plain-token");

    // Within what `admin` holds: granting `edit`, a role reading Secrets.
    expect_status(
        &paul
            .post(bindings, &binding("vera-edit", "edit", "vera"))
            .await?,
        201,
        "vera's edit",
    )?;
    let reader = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "secret-reader", "namespace": "team"},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}]
    });
    expect_status(
        &paul.post(roles, &reader).await?,
        201,
        "a role within admin",
    )?;

    // Beyond it: cluster-admin for himself, or a role over nodes.
    let refused = expect_status(
        &paul
            .post(bindings, &binding("paul-root", "cluster-admin", "paul"))
            .await?,
        403,
        "binding cluster-admin",
    )?;
    let message = refused["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with("rolebindings.rbac.authorization.k8s.io \"paul-root\" is forbidden: user \"paul\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:"),
        "{message}"
    );
    let nodes = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "all", "namespace": "team"},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]
    });
    expect_status(&paul.post(roles, &nodes).await?, 403, "a role beyond admin")?;
    // Neither was stored; the administrator may do both.
    expect_status(
        &admin.get(&format!("{bindings}/paul-root")).await?,
        404,
        "paul-root",
    )?;
    expect_status(&admin.post(roles, &nodes).await?, 201, "the admin's role")?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_review_says_whose_a_token_is_to_those_allowed_to_ask() -> Result<()> {
    let (server, _dir) = server().await?;
    let admin = server.http()?;
    let reviews = "/apis/authentication.k8s.io/v1/tokenreviews";
    let review = |token: &str| json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}});
    let answered = expect_status(
        &admin.post(reviews, &review("viewer-token")).await?,
        201,
        "a review",
    )?;
    assert_eq!(answered["status"]["authenticated"], true);
    assert_eq!(answered["status"]["user"]["username"], "vera");
    let answered = expect_status(
        &admin.post(reviews, &review("guess")).await?,
        201,
        "a bad token",
    )?;
    assert_eq!(answered["status"]["authenticated"], false);
    // Asking needs system:auth-delegator (or more).
    let paul = admin.with_token("plain-token");
    expect_status(
        &paul.post(reviews, &review("viewer-token")).await?,
        403,
        "paul asking",
    )?;
    bind(
        &admin,
        None,
        "paul-delegator",
        "system:auth-delegator",
        subject("User", "paul"),
    )
    .await?;
    let answered = expect_status(
        &paul.post(reviews, &review("viewer-token")).await?,
        201,
        "paul asking again",
    )?;
    assert_eq!(
        answered["status"]["user"]["groups"],
        json!(["qa", "system:authenticated"])
    );
    Ok(())
}
