//! Secrets encrypted at rest by `skiff up`'s default encryption
//! configuration: the store holds AES-GCM ciphertext (read through the
//! etcd v3 API and in the data directory's raw files) while the REST API
//! serves the plaintext, from the store and from the watch cache; a Secret
//! written in plaintext before encryption was on stays readable and is
//! encrypted by its next update.

use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use base64::Engine;
use serde_json::{json, Value};
use skiff_tests::api_server::ApiServer;
use skiff_tests::store_client;

const SECRETS: &str = "/api/v1/namespaces/default/secrets";
const KEY_PREFIX: &str = "/registry/core/secrets/default/";
/// The value of the Secret that must never be seen in the store.
const PLAINTEXT: &str = "hunter2-skiff-plaintext-marker";

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// Every file under `dir` that holds `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Result<Vec<String>> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                pending.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                if bytes.windows(needle.len()).any(|w| w == needle) {
                    found.push(path.display().to_string());
                }
            }
        }
    }
    Ok(found)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_ciphertext_in_the_store_and_plaintext_through_the_api() -> Result<()> {
    let server = ApiServer::start().await?;
    let http = server.http()?;
    let store = server.client_addr();
    let config = server.data_dir().join("encryption-config.yaml");
    let mode = std::fs::metadata(&config)
        .with_context(|| format!("{} was not created", config.display()))?
        .permissions();
    ensure!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o077 == 0,
        "the key file is readable by others"
    );

    let created = http
        .post(
            SECRETS,
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
                    "data": {"password": b64(PLAINTEXT)}}),
        )
        .await?;
    ensure!(
        created.status == 201,
        "{} {}",
        created.status,
        created.text()
    );
    let got = http.get_json(&format!("{SECRETS}/db")).await?;
    ensure!(got["data"]["password"] == b64(PLAINTEXT), "{got}");
    // The watch cache decrypts too.
    let listed = http
        .get_json(&format!("{SECRETS}?resourceVersion=0"))
        .await?;
    let db = listed["items"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["metadata"]["name"] == "db"))
        .context("db is not in the cached list")?;
    ensure!(db["data"]["password"] == b64(PLAINTEXT), "{db}");

    // In the store: the aesgcm envelope, no plaintext.
    let raw = store_client::get(store, &format!("{KEY_PREFIX}db")).await?;
    let raw = &raw.kvs.first().context("no db in the store")?.value;
    ensure!(
        raw.starts_with(b"k8s:enc:aesgcm:v1:key1:"),
        "stored as {:?}",
        String::from_utf8_lossy(&raw[..raw.len().min(60)])
    );
    for needle in [
        PLAINTEXT.to_string(),
        b64(PLAINTEXT),
        "\"password\"".to_string(),
    ] {
        ensure!(
            !raw.windows(needle.len()).any(|w| w == needle.as_bytes()),
            "{needle} is in the stored value"
        );
    }

    // A Secret stored in plaintext (before encryption was turned on) is
    // read as it is, and encrypted when next written.
    let legacy = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "legacy", "namespace": "default",
                     "uid": "7d1e7c36-3c5e-4e43-9b1f-2d1c8f1e0001",
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "type": "Opaque", "data": {"token": b64("old-plain")}});
    store_client::put(store, &format!("{KEY_PREFIX}legacy"), &legacy.to_string()).await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut current: Value = loop {
        let reply = http.get(&format!("{SECRETS}/legacy")).await?;
        if reply.status == 200 || std::time::Instant::now() > deadline {
            break reply.json()?;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    ensure!(current["data"]["token"] == b64("old-plain"), "{current}");
    current["metadata"]["labels"] = json!({"rotated": "yes"});
    let updated = http.put(&format!("{SECRETS}/legacy"), &current).await?;
    ensure!(
        updated.status == 200,
        "{} {}",
        updated.status,
        updated.text()
    );
    let raw = store_client::get(store, &format!("{KEY_PREFIX}legacy")).await?;
    let raw = &raw.kvs.first().context("no legacy in the store")?.value;
    ensure!(
        raw.starts_with(b"k8s:enc:aesgcm:v1:"),
        "still plaintext after the update"
    );
    let got = http.get_json(&format!("{SECRETS}/legacy")).await?;
    ensure!(got["data"]["token"] == b64("old-plain"), "{got}");
    ensure!(got["metadata"]["labels"]["rotated"] == "yes", "{got}");

    // Nowhere in the store's files: its log and its state.
    let store_dir = server.data_dir().join("store");
    for needle in [PLAINTEXT.to_string(), b64(PLAINTEXT)] {
        let found = files_holding(&store_dir, needle.as_bytes())?;
        ensure!(found.is_empty(), "{needle} in plaintext in {found:?}");
    }
    Ok(())
}
