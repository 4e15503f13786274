//! The HTTP side of a webhook call: one POST of a JSON body to
//! `clientConfig.url`, bounded by the webhook's timeout. Plain http only:
//! this build has no TLS client, so an https URL is a call failure that the
//! webhook's failurePolicy decides on.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

/// The largest response read from a webhook.
const MAX_RESPONSE_BYTES: usize = 3 * 1024 * 1024;

/// Where a webhook is: `http://host:port/path?query`.
#[derive(Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    /// The path and query, starting with `/`.
    pub path: String,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let rest = match url.split_once("://") {
            Some(("http", rest)) => rest,
            Some(("https", _)) => {
                return Err(format!(
                    "Post {url:?}: https webhooks are not supported by this server yet (no TLS client); use an http URL"
                ))
            }
            _ => return Err(format!("Post {url:?}: unsupported protocol scheme")),
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/".to_string()),
        };
        let path = if path.starts_with('?') {
            format!("/{path}")
        } else {
            path
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(']') || authority.starts_with('[') => (
                host,
                port.parse::<u16>()
                    .map_err(|_| format!("Post {url:?}: invalid port {port:?}"))?,
            ),
            _ => (authority, 80),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(format!("Post {url:?}: no host in the URL"));
        }
        Ok(Endpoint {
            host: host.to_string(),
            port,
            path,
        })
    }
}

/// POSTs `body` to `url` and returns the response body of a 2xx answer.
/// The error text reads as Kubernetes' (`Post "url": …`).
pub async fn post_json(url: &str, body: Vec<u8>, timeout: Duration) -> Result<Vec<u8>, String> {
    let endpoint = Endpoint::parse(url)?;
    let seconds = timeout.as_secs().max(1);
    let path = match endpoint.path.contains('?') {
        true => format!("{}&timeout={seconds}s", endpoint.path),
        false => format!("{}?timeout={seconds}s", endpoint.path),
    };
    let call = async {
        let stream = tokio::net::TcpStream::connect((endpoint.host.as_str(), endpoint.port))
            .await
            .map_err(|e| {
                format!(
                    "Post {url:?}: dial tcp {}:{}: {e}",
                    endpoint.host, endpoint.port
                )
            })?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("Post {url:?}: {e}"))?;
        let driver = tokio::spawn(connection);
        let request = hyper::Request::post(path)
            .header(
                hyper::header::HOST,
                format!("{}:{}", endpoint.host, endpoint.port),
            )
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::ACCEPT, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("Post {url:?}: {e}"))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("Post {url:?}: {e}"))?;
        let status = response.status();
        let collected = http_body_util::Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| format!("Post {url:?}: reading the response: {e}"))?
            .to_bytes();
        driver.abort();
        if !status.is_success() {
            let text = String::from_utf8_lossy(&collected);
            let text: String = text.chars().take(256).collect();
            return Err(format!(
                "an error on the server ({text:?}) has prevented the request from succeeding (status {})",
                status.as_u16()
            ));
        }
        Ok(collected.to_vec())
    };
    match tokio::time::timeout(timeout, call).await {
        Ok(result) => result,
        Err(_) => Err(format!("Post {url:?}: context deadline exceeded")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_from_urls() {
        assert_eq!(
            Endpoint::parse("http://127.0.0.1:8080/validate").unwrap(),
            Endpoint {
                host: "127.0.0.1".into(),
                port: 8080,
                path: "/validate".into()
            }
        );
        let bare = Endpoint::parse("http://hook.example").unwrap();
        assert_eq!((bare.port, bare.path.as_str()), (80, "/"));
        assert!(Endpoint::parse("https://hook.example/x")
            .unwrap_err()
            .contains("https"));
        assert!(Endpoint::parse("ftp://x").is_err());
        assert!(Endpoint::parse("http://h:notaport/").is_err());
    }

    #[tokio::test]
    async fn a_closed_port_fails_like_kubernetes_says() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let err = post_json(
            &format!("http://127.0.0.1:{port}/"),
            b"{}".to_vec(),
            Duration::from_secs(2),
        )
        .await
        .unwrap_err();
        assert!(
            err.starts_with(&format!("Post \"http://127.0.0.1:{port}/\": dial tcp")),
            "{err}"
        );
    }
}
