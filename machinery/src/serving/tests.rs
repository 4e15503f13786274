//! The secure port against a small fake API server that answers
//! TokenReviews and SubjectAccessReviews and records what it was asked.

use std::sync::{Arc, Mutex};

use axum::routing::post;
use axum::Json;
use http_body_util::BodyExt;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{json, Value};

use super::*;

/// What the fake API was asked.
#[derive(Default)]
struct Asked {
    token_reviews: Mutex<Vec<Value>>,
    access_reviews: Mutex<Vec<Value>>,
}

/// Token `good-token` is alice (group `devs`); alice and the group
/// `system:monitoring` may get /metrics, nobody anything else.
async fn fake_api() -> (kube::Client, Arc<Asked>) {
    let asked = Arc::new(Asked::default());
    let tokens = asked.clone();
    let access = asked.clone();
    let app = Router::new()
        .route(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            post(move |Json(review): Json<Value>| {
                let asked = tokens.clone();
                async move {
                    asked.token_reviews.lock().unwrap().push(review.clone());
                    let status = if review["spec"]["token"] == "good-token" {
                        json!({"authenticated": true, "user": {"username": "alice", "groups": ["devs"], "uid": "1"}})
                    } else {
                        json!({"authenticated": false})
                    };
                    let mut answer = review;
                    answer["status"] = status;
                    (StatusCode::CREATED, Json(answer))
                }
            }),
        )
        .route(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            post(move |Json(review): Json<Value>| {
                let asked = access.clone();
                async move {
                    asked.access_reviews.lock().unwrap().push(review.clone());
                    let spec = &review["spec"];
                    let who = spec["user"] == "alice"
                        || spec["groups"]
                            .as_array()
                            .is_some_and(|g| g.iter().any(|g| g == "system:monitoring"));
                    let allowed = who
                        && spec["nonResourceAttributes"]["path"] == "/metrics"
                        && spec["nonResourceAttributes"]["verb"] == "get";
                    let mut answer = review;
                    answer["status"] = if allowed {
                        json!({"allowed": true})
                    } else {
                        json!({"allowed": false, "reason": "no RBAC policy matched"})
                    };
                    (StatusCode::CREATED, Json(answer))
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    (kube::Client::try_from(config).unwrap(), asked)
}

/// A CA and a client certificate it signed for `name` in `group`.
fn client_ca_and_certificate(
    name: &str,
    group: &str,
) -> (
    CertificateDer<'static>,
    (CertificateDer<'static>, PrivateKeyDer<'static>),
) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "test-ca");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, group);
    let cert = params.signed_by(&key, &issuer).unwrap();
    (
        ca.der().clone(),
        (
            cert.der().clone(),
            PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
        ),
    )
}

/// GETs `path` from the server over TLS (its certificate unchecked),
/// with a client certificate or a bearer token: (status, body).
async fn get(
    server: &SecureServer,
    path: &str,
    identity: Option<(CertificateDer<'static>, PrivateKeyDer<'static>)>,
    token: Option<&str>,
) -> (u16, String) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(crate::skip_verify::SkipServerVerification(
            provider,
        )));
    let config = match identity {
        Some((cert, key)) => builder.with_client_auth_cert(vec![cert], key).unwrap(),
        None => builder.with_no_client_auth(),
    };
    let tcp = tokio::net::TcpStream::connect(server.local_addr())
        .await
        .unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(connection);
    let mut request = hyper::Request::get(path).header("host", "localhost");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = sender
        .send_request(
            request
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .unwrap(),
        )
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn registry() -> prometheus::Registry {
    let registry = prometheus::Registry::new();
    let counter = prometheus::IntCounter::new("test_requests_total", "Requests.").unwrap();
    counter.inc();
    registry.register(Box::new(counter)).unwrap();
    registry
}

async fn start(client: kube::Client, client_ca: Vec<CertificateDer<'static>>) -> SecureServer {
    let options = SecureServingOptions {
        bind: "127.0.0.1:0".parse().unwrap(),
        cert_file: None,
        key_file: None,
        client_ca,
    };
    SecureServer::start(options, client, registry())
        .await
        .unwrap()
}

#[tokio::test]
async fn health_paths_need_no_credentials_and_metrics_need_a_user() {
    let (client, asked) = fake_api().await;
    let server = start(client, Vec::new()).await;
    assert_ne!(server.local_addr().port(), 0);
    for path in ["/healthz", "/livez", "/readyz"] {
        assert_eq!(get(&server, path, None, None).await, (200, "ok".into()));
    }
    let (code, body) = get(&server, "/metrics", None, None).await;
    assert_eq!(code, 401);
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["reason"], "Unauthorized");
    assert!(asked.access_reviews.lock().unwrap().is_empty());
    server.stop().await;
}

#[tokio::test]
async fn a_bearer_token_is_reviewed_then_its_user_authorized() {
    let (client, asked) = fake_api().await;
    let server = start(client, Vec::new()).await;
    let (code, body) = get(&server, "/metrics", None, Some("good-token")).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("test_requests_total 1"), "{body}");
    // Answers are cached: a second request asks nothing.
    assert_eq!(
        get(&server, "/metrics", None, Some("good-token")).await.0,
        200
    );
    {
        let tokens = asked.token_reviews.lock().unwrap();
        assert_eq!(tokens.len(), 1);
        assert_eq!(tokens[0]["spec"]["token"], "good-token");
        assert_eq!(tokens[0]["apiVersion"], "authentication.k8s.io/v1");
        let access = asked.access_reviews.lock().unwrap();
        assert_eq!(access.len(), 1);
        assert_eq!(access[0]["spec"]["user"], "alice");
        assert_eq!(access[0]["spec"]["groups"], json!(["devs"]));
        assert_eq!(
            access[0]["spec"]["nonResourceAttributes"],
            json!({"path": "/metrics", "verb": "get"})
        );
    }
    // alice may not see other paths; an unknown token is nobody.
    let (code, body) = get(&server, "/debug", None, Some("good-token")).await;
    assert_eq!(code, 403);
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        status["message"],
        "forbidden: User \"alice\" cannot get path \"/debug\": no RBAC policy matched"
    );
    assert_eq!(
        get(&server, "/metrics", None, Some("bad-token")).await.0,
        401
    );
    server.stop().await;
}

#[tokio::test]
async fn a_client_certificate_of_the_client_ca_names_the_user_asked_about() {
    let (client, asked) = fake_api().await;
    let (ca, monitor) = client_ca_and_certificate("prometheus", "system:monitoring");
    let (_, stranger) = client_ca_and_certificate("mallory", "devs");
    let server = start(client, vec![ca.clone()]).await;
    let (code, body) = get(&server, "/metrics", Some(monitor), None).await;
    assert_eq!(code, 200, "{body}");
    {
        let access = asked.access_reviews.lock().unwrap();
        assert_eq!(access.len(), 1);
        assert_eq!(access[0]["spec"]["user"], "prometheus");
        assert_eq!(access[0]["spec"]["groups"], json!(["system:monitoring"]));
        assert!(asked.token_reviews.lock().unwrap().is_empty());
    }
    // A certificate of another CA is refused at the handshake.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(crate::skip_verify::SkipServerVerification(
            provider,
        )))
        .with_client_auth_cert(vec![stranger.0], stranger.1)
        .unwrap();
    let tcp = tokio::net::TcpStream::connect(server.local_addr())
        .await
        .unwrap();
    let refused = async {
        let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await?;
        // TLS 1.3 reports the refusal on the first read.
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        tls.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await?;
        let mut buf = [0u8; 64];
        let n = tls.read(&mut buf).await?;
        Ok::<usize, std::io::Error>(n)
    };
    assert!(!matches!(refused.await, Ok(n) if n > 0));
    server.stop().await;
}

#[tokio::test]
async fn a_given_certificate_is_served_and_a_half_pair_refused() {
    let (client, _) = fake_api().await;
    let dir = std::env::temp_dir().join(format!("skiff-serving-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (cert_file, key_file) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    let mut options = SecureServingOptions {
        bind: "127.0.0.1:0".parse().unwrap(),
        cert_file: Some(cert_file.clone()),
        key_file: None,
        client_ca: Vec::new(),
    };
    let err = SecureServer::start(options.clone(), client.clone(), registry())
        .await
        .err()
        .unwrap();
    assert!(err.to_string().contains("go together"), "{err}");
    options.key_file = Some(key_file);
    let server = SecureServer::start(options, client, registry())
        .await
        .unwrap();
    assert_eq!(get(&server, "/healthz", None, None).await.0, 200);
    server.stop().await;
    let bad = dir.join("empty.crt");
    std::fs::write(&bad, "nothing").unwrap();
    assert!(read_certificates(&bad).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bearer_tokens_are_read_from_the_authorization_header() {
    let request = |value: &str| {
        Request::builder()
            .header("authorization", value)
            .body(Body::empty())
            .unwrap()
    };
    assert_eq!(bearer_token(&request("Bearer abc")), Some("abc"));
    assert_eq!(bearer_token(&request("bearer  abc ")), Some("abc"));
    assert_eq!(bearer_token(&request("Basic abc")), None);
    assert_eq!(bearer_token(&request("Bearer ")), None);
}
