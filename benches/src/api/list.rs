//! List latency: the pods of the namespace, all of them or one label group
//! in ten, each either from the API server's cache (`resourceVersion=0`)
//! or consistent (no resourceVersion: read from the store), in JSON or
//! protobuf, timed from the request's send to the last byte of the answer.
//! Also the paged count and JSON size of every pod, for the memory line.

use std::time::Instant;

use anyhow::{Context, Result};
use hyper::StatusCode;
use serde_json::Value;

use super::encoding::Encoding;
use super::http::{query_value, ApiConnection};
use super::pods::{pods_path, SELECTOR};
use super::protobuf;
use crate::report::{duration_nanos, Latencies};

/// Pods per page when counting every pod.
const PAGE: usize = 1000;

/// Which list a point measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListKind {
    pub selector: bool,
    /// `resourceVersion=0`: any version, so the cache may answer.
    pub cached: bool,
}

impl ListKind {
    pub const ALL: [ListKind; 4] = [
        ListKind {
            selector: false,
            cached: true,
        },
        ListKind {
            selector: false,
            cached: false,
        },
        ListKind {
            selector: true,
            cached: true,
        },
        ListKind {
            selector: true,
            cached: false,
        },
    ];

    fn path(self) -> String {
        let mut params = Vec::new();
        if self.selector {
            params.push(format!("labelSelector={}", query_value(SELECTOR)));
        }
        if self.cached {
            params.push("resourceVersion=0".to_string());
        }
        match params.is_empty() {
            true => pods_path(),
            false => format!("{}?{}", pods_path(), params.join("&")),
        }
    }

    pub fn describe(self) -> String {
        let what = if self.selector {
            format!("labelSelector {SELECTOR}")
        } else {
            "full".to_string()
        };
        let how = if self.cached {
            "resourceVersion=0 (cache)"
        } else {
            "consistent (no resourceVersion)"
        };
        format!("{what}, {how}")
    }
}

pub struct ListPoint {
    pub kind: ListKind,
    pub encoding: Encoding,
    /// Items in the answer.
    pub items: usize,
    /// Bytes of the whole answer.
    pub bytes: usize,
    pub latencies: Latencies,
}

/// One unmeasured list (which also counts the items), then `reps` timed
/// ones, each answered in `encoding`.
pub async fn measure(
    conn: &mut ApiConnection,
    kind: ListKind,
    encoding: Encoding,
    reps: usize,
) -> Result<ListPoint> {
    let path = kind.path();
    let what = format!("listing pods ({}, {})", kind.describe(), encoding.name());
    let first = conn
        .get_as(&path, encoding)
        .await?
        .expect(StatusCode::OK, &what)?;
    let items = match encoding {
        Encoding::Json => items(&first).map(|items| items.len()),
        Encoding::Protobuf => protobuf::list_items(&first),
    };
    let items = items.with_context(|| what.clone())?;
    let mut nanos = Vec::with_capacity(reps);
    for _ in 0..reps {
        let sent = Instant::now();
        let answer = conn.get_as(&path, encoding).await?;
        let took = answer.complete.duration_since(sent);
        answer.expect(StatusCode::OK, &what)?;
        nanos.push(duration_nanos(took));
    }
    Ok(ListPoint {
        kind,
        encoding,
        items,
        bytes: first.len(),
        latencies: Latencies::from_nanos(nanos),
    })
}

/// The namespace's resourceVersion, from a list of one item: where a
/// watch starts so that it sees only what comes after.
pub async fn current_revision(conn: &mut ApiConnection) -> Result<String> {
    let what = "listing one pod for the resourceVersion";
    let body = conn
        .get(&format!("{}?limit=1", pods_path()))
        .await?
        .expect(StatusCode::OK, what)?;
    let list: Value = serde_json::from_slice(&body).context(what)?;
    list["metadata"]["resourceVersion"]
        .as_str()
        .map(str::to_string)
        .context("a list answered without metadata.resourceVersion")
}

/// Every pod of the namespace, paged: how many, and their JSON size as
/// served (each item compact, the list's envelope not counted).
pub async fn count_and_size(conn: &mut ApiConnection) -> Result<(usize, u64)> {
    let what = "listing every pod, page by page";
    let (mut count, mut bytes) = (0, 0u64);
    let mut token: Option<String> = None;
    loop {
        let mut path = format!("{}?limit={PAGE}", pods_path());
        if let Some(token) = &token {
            path.push_str(&format!("&continue={}", query_value(token)));
        }
        let body = conn.get(&path).await?.expect(StatusCode::OK, what)?;
        let page: Value = serde_json::from_slice(&body).context(what)?;
        for item in page["items"].as_array().context("a list without items")? {
            count += 1;
            bytes += serde_json::to_vec(item)?.len() as u64;
        }
        token = page["metadata"]["continue"]
            .as_str()
            .filter(|t| !t.is_empty())
            .map(str::to_string);
        if token.is_none() {
            return Ok((count, bytes));
        }
    }
}

fn items(body: &[u8]) -> Result<Vec<Value>> {
    let mut list: Value = serde_json::from_slice(body).context("the list is not JSON")?;
    match list["items"].take() {
        Value::Array(items) => Ok(items),
        Value::Null => Ok(Vec::new()),
        other => anyhow::bail!("the list's items are not an array: {other}"),
    }
}
