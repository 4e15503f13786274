//! Fetching nodes' Summaries for the resource metrics API: from each
//! node's kubelet (`GET /stats/summary`, reached as `pods/log` reaches it),
//! or, for a simulated node, from the URL of the process simulating it.
//! Fetches run concurrently, each bounded by a timeout; what each node
//! answered is kept for a second, so that a burst of `kubectl top` calls
//! costs the kubelets one fetch. A node that fails is left out and logged,
//! as metrics-server leaves it out. Not the API's objects (`mod.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::{header, StatusCode};
use serde_json::Value;

use super::summary::{self, NodeUsage};
use crate::kubelet;

/// How long a node's answer is reused.
pub const CACHE_TTL: Duration = Duration::from_secs(1);
/// How long one node's fetch (connect, request and body) may take.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);
/// How many nodes are fetched at once.
const CONCURRENT_SCRAPES: usize = 64;
/// The largest Summary read (a node of hundreds of pods writes well
/// under a MiB).
const MAX_SUMMARY_BYTES: usize = 32 * 1024 * 1024;

/// The label that marks a node run by the kubelet's simulation.
pub const SIMULATED_LABEL: &str = "skiff.dev/simulated";
/// The annotation of a simulated node naming where its Summary is served
/// (`http://127.0.0.1:PORT/nodes/NAME/stats/summary`).
pub const SIMULATED_STATS_URL: &str = "skiff.dev/simulated-stats-url";

/// Where a node's Summary is fetched from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The node's kubelet, at `host:port`, over TLS when the server has a
    /// kubelet client certificate.
    Kubelet { authority: String },
    /// A simulated node's URL, always plain HTTP: `authority` to connect
    /// to (`host:port`), `host` for the Host header, `path` with its query.
    Simulated {
        authority: String,
        host: String,
        path: String,
    },
}

/// Where `node`'s Summary comes from, or why it has none. A node that
/// advertises kubelet port 0 runs no kubelet: only when it is labelled
/// `skiff.dev/simulated=true` and annotated with an `http://` URL is its
/// Summary fetched from that URL.
pub fn source_of(node: &Value) -> Result<Source, String> {
    if node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] != 0 {
        return kubelet::node_authority(node)
            .map(|authority| Source::Kubelet { authority })
            .ok_or_else(|| "the node has no address".to_string());
    }
    if node["metadata"]["labels"][SIMULATED_LABEL] != "true" {
        return Err(format!(
            "the node advertises kubelet port 0 and is not labelled {SIMULATED_LABEL}=true"
        ));
    }
    let Some(url) = node["metadata"]["annotations"][SIMULATED_STATS_URL].as_str() else {
        return Err(format!(
            "the simulated node has no {SIMULATED_STATS_URL} annotation"
        ));
    };
    simulated_source(url)
}

/// The plain-HTTP source of a simulated node's URL; any other scheme, or
/// no host, is refused.
fn simulated_source(url: &str) -> Result<Source, String> {
    let refused = |why: &str| format!("{SIMULATED_STATS_URL} {url:?} is refused: {why}");
    let uri: hyper::Uri = url.parse().map_err(|err| refused(&format!("{err}")))?;
    if uri.scheme_str() != Some("http") {
        return Err(refused("only http:// URLs are fetched"));
    }
    let authority = uri
        .authority()
        .filter(|a| !a.host().is_empty())
        .ok_or_else(|| refused("it names no host"))?;
    if authority.as_str().contains('@') {
        return Err(refused("it carries credentials"));
    }
    let port = authority.port_u16().unwrap_or(80);
    Ok(Source::Simulated {
        authority: format!("{}:{port}", authority.host()),
        host: authority.as_str().to_string(),
        path: uri.path_and_query().map_or("/", |p| p.as_str()).to_string(),
    })
}

/// What one fetch of a node gave, and when it ended.
struct Scraped {
    at: Instant,
    usage: Option<Arc<NodeUsage>>,
}

/// One node's latest fetch: done, or under way (then shared by every
/// request that asks meanwhile).
struct Entry {
    source: Source,
    scraped: Arc<tokio::sync::OnceCell<Scraped>>,
}

impl Entry {
    fn fresh(&self) -> bool {
        self.scraped
            .get()
            .is_none_or(|s| s.at.elapsed() < CACHE_TTL)
    }
}

/// Fetches nodes' Summaries, keeping each answer [`CACHE_TTL`].
pub struct Scraper {
    /// TLS for kubelets (`None`: plain HTTP), the server's kubelet client.
    kubelet_tls: Option<Arc<rustls::ClientConfig>>,
    /// Each node's fetch ends after this ([`SCRAPE_TIMEOUT`]).
    timeout: Duration,
    entries: Mutex<HashMap<String, Entry>>,
}

impl Scraper {
    pub fn new(kubelet_tls: Option<Arc<rustls::ClientConfig>>) -> Scraper {
        Scraper {
            kubelet_tls,
            timeout: SCRAPE_TIMEOUT,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The usage of each of `nodes` that answered, by node name.
    pub async fn scrape(&self, nodes: &[&Value]) -> HashMap<String, Arc<NodeUsage>> {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, entry| entry.fresh());
        let sources: Vec<(String, Source)> = nodes
            .iter()
            .filter_map(|node| {
                let name = node["metadata"]["name"].as_str().unwrap_or("");
                match source_of(node) {
                    Ok(source) => Some((name.to_string(), source)),
                    Err(why) => {
                        tracing::debug!(node = %name, reason = %why, "no metrics source for the node");
                        None
                    }
                }
            })
            .collect();
        futures::stream::iter(sources)
            .map(|(name, source)| async move {
                let usage = self.usage_of(&name, source).await?;
                Some((name, usage))
            })
            .buffer_unordered(CONCURRENT_SCRAPES)
            .filter_map(|found| async move { found })
            .collect()
            .await
    }

    async fn usage_of(&self, name: &str, source: Source) -> Option<Arc<NodeUsage>> {
        let scraped = {
            let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            match entries.get(name) {
                Some(entry) if entry.source == source && entry.fresh() => entry.scraped.clone(),
                _ => {
                    let scraped = Arc::new(tokio::sync::OnceCell::new());
                    let entry = Entry {
                        source: source.clone(),
                        scraped: scraped.clone(),
                    };
                    entries.insert(name.to_string(), entry);
                    scraped
                }
            }
        };
        let scraped = scraped
            .get_or_init(|| async {
                let fetched =
                    tokio::time::timeout(self.timeout, fetch(&source, self.kubelet_tls.as_ref()))
                        .await
                        .unwrap_or_else(|_| Err(format!("no answer within {:?}", self.timeout)));
                let usage = match fetched {
                    Ok(usage) => Some(Arc::new(usage)),
                    Err(err) => {
                        // metrics-server's words.
                        tracing::warn!(node = %name, error = %err, "Failed to scrape node");
                        None
                    }
                };
                Scraped {
                    at: Instant::now(),
                    usage,
                }
            })
            .await;
        scraped.usage.clone()
    }
}

/// One fetch of the Summary at `source`, read.
async fn fetch(
    source: &Source,
    kubelet_tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<NodeUsage, String> {
    let (authority, host, path, tls) = match source {
        Source::Kubelet { authority } => (authority, authority, "/stats/summary", kubelet_tls),
        Source::Simulated {
            authority,
            host,
            path,
        } => (authority, host, path.as_str(), None),
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{host}{path}");
    let mut sender = kubelet::connect::<Empty<Bytes>>(authority, tls, &url)
        .await
        .map_err(|err| err.message)?;
    let request = hyper::Request::get(path)
        .header(header::HOST, host.as_str())
        .header(header::ACCEPT, "application/json")
        .body(Empty::<Bytes>::new())
        .map_err(|err| format!("building the request to {url}: {err}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|err| format!("Get \"{url}\": {err}"))?;
    if response.status() != StatusCode::OK {
        return Err(format!(
            "request failed, status: \"{}\" ({url})",
            response.status()
        ));
    }
    let body = Limited::new(response.into_body(), MAX_SUMMARY_BYTES)
        .collect()
        .await
        .map_err(|err| format!("reading {url}: {err}"))?
        .to_bytes();
    summary::decode(&body, &crate::object::now()).map_err(|err| format!("{url}: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(port: i64, labels: Value, annotations: Value) -> Value {
        json!({
            "metadata": {"name": "n", "labels": labels, "annotations": annotations},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "10.0.0.7"}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}
            }
        })
    }

    #[test]
    fn a_node_with_a_kubelet_is_fetched_from_it() {
        let source = source_of(&node(10250, json!({}), json!({}))).unwrap();
        assert_eq!(
            source,
            Source::Kubelet {
                authority: "10.0.0.7:10250".into()
            }
        );
        // The simulation's annotation does not redirect a real kubelet.
        let annotated = node(
            10250,
            json!({SIMULATED_LABEL: "true"}),
            json!({SIMULATED_STATS_URL: "http://127.0.0.1:9/x"}),
        );
        assert!(matches!(
            source_of(&annotated).unwrap(),
            Source::Kubelet { .. }
        ));
    }

    /// A kubelet that takes the connection and never answers is given up
    /// on after the timeout, and the failure is kept for the cache's
    /// second like an answer.
    #[tokio::test]
    async fn a_silent_kubelet_is_given_up_on() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        let mut scraper = Scraper::new(None);
        scraper.timeout = Duration::from_millis(200);
        let mut silent = node(i64::from(port), json!({}), json!({}));
        silent["status"]["addresses"][0]["address"] = json!("127.0.0.1");
        let started = Instant::now();
        assert!(scraper.scrape(&[&silent]).await.is_empty());
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(200) && waited < Duration::from_secs(3));
        // Within the second: the failure is reused, not fetched again.
        let started = Instant::now();
        assert!(scraper.scrape(&[&silent]).await.is_empty());
        assert!(started.elapsed() < Duration::from_millis(100));
        accepted.abort();
    }

    #[test]
    fn a_simulated_node_needs_its_label_and_an_http_url() {
        let url = "http://127.0.0.1:8099/nodes/n/stats/summary?x=1";
        let simulated = node(
            0,
            json!({SIMULATED_LABEL: "true"}),
            json!({SIMULATED_STATS_URL: url}),
        );
        assert_eq!(
            source_of(&simulated).unwrap(),
            Source::Simulated {
                authority: "127.0.0.1:8099".into(),
                host: "127.0.0.1:8099".into(),
                path: "/nodes/n/stats/summary?x=1".into(),
            }
        );
        // Without the label, the annotation is not followed.
        let unlabelled = node(0, json!({}), json!({SIMULATED_STATS_URL: url}));
        assert!(source_of(&unlabelled)
            .unwrap_err()
            .contains(SIMULATED_LABEL));
        let wrong_value = node(
            0,
            json!({SIMULATED_LABEL: "yes"}),
            json!({SIMULATED_STATS_URL: url}),
        );
        assert!(source_of(&wrong_value).is_err());
        // Labelled but not annotated.
        let bare = node(0, json!({SIMULATED_LABEL: "true"}), json!({}));
        assert!(source_of(&bare).unwrap_err().contains(SIMULATED_STATS_URL));
        // Only plain http:// with a host.
        for refused in [
            "https://127.0.0.1:8099/s",
            "file:///etc/passwd",
            "ftp://host/s",
            "/nodes/n/stats/summary",
            "http://user:pw@127.0.0.1:8099/s",
            "not a url",
        ] {
            let n = node(
                0,
                json!({SIMULATED_LABEL: "true"}),
                json!({SIMULATED_STATS_URL: refused}),
            );
            assert!(source_of(&n).is_err(), "{refused}");
        }
        // No port: HTTP's.
        let default_port = node(
            0,
            json!({SIMULATED_LABEL: "true"}),
            json!({SIMULATED_STATS_URL: "http://sim.local/s"}),
        );
        assert!(matches!(
            source_of(&default_port).unwrap(),
            Source::Simulated { authority, .. } if authority == "sim.local:80"
        ));
    }
}
