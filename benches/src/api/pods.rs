//! The pods the benchmark writes — minimal but realistic: one container
//! with ports, resources and env, three labels, a few annotations, about
//! 1 KB of JSON as served — and the create workload: C clients, each on
//! its own connection, creating pods with fresh names until a count is
//! reached.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use hyper::StatusCode;
use serde_json::Value;

use super::encoding::Encoding;
use super::http::ApiConnection;
use super::protobuf;
use crate::report::Latencies;
use crate::versus::progress::Progress;

pub const NAMESPACE: &str = "bench";
/// Pods carry `bench-group: g0`…`g9`, so one group is a tenth of them.
pub const GROUPS: usize = 10;
/// The label selector of the selective lists: one group in ten.
pub const SELECTOR: &str = "bench-group=g3";
/// The annotation a watch write carries its sequence number in.
pub const SEQ_ANNOTATION: &str = "skiff-bench/seq";
/// How often a long create run updates the progress bar.
const PROGRESS_TICK: Duration = Duration::from_millis(200);

pub fn pods_path() -> String {
    format!("/api/v1/namespaces/{NAMESPACE}/pods")
}

/// The namespace, as POSTed to /api/v1/namespaces.
pub fn namespace_json() -> Bytes {
    Bytes::from(format!(
        r#"{{"apiVersion":"v1","kind":"Namespace","metadata":{{"name":"{NAMESPACE}"}}}}"#
    ))
}

/// The container's image, arguments and port.
pub const IMAGE: &str = "registry.k8s.io/pause:3.10";
pub const ARGS: [&str; 2] = ["--listen=:8080", "--log-level=info"];
pub const PORT: i32 = 8080;
/// The longest annotation: a pod's size is mostly text like this.
pub const DESCRIPTION: &str = "a pod written by skiff-bench api: one container, a few labels and annotations, about the size of a small real pod";

/// Pod `name`, in group `index % GROUPS`, its annotation `seq` set to `seq`.
pub fn pod_json(name: &str, index: usize, seq: usize) -> Bytes {
    let group = index % GROUPS;
    let args = serde_json::to_string(&ARGS).expect("strings serialize");
    Bytes::from(format!(
        concat!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"{ns}","#,
            r#""labels":{{"app":"bench","bench-group":"g{group}","tier":"backend"}},"#,
            r#""annotations":{{"{seq_key}":"{seq}","prometheus.io/scrape":"true","prometheus.io/port":"{port}","#,
            r#""description":"{description}"}}}},"#,
            r#""spec":{{"containers":[{{"name":"app","image":"{image}","#,
            r#""args":{args},"#,
            r#""ports":[{{"name":"http","containerPort":{port},"protocol":"TCP"}}],"#,
            r#""env":[{{"name":"BENCH_INDEX","value":"{index}"}},{{"name":"BENCH_GROUP","value":"g{group}"}}],"#,
            r#""resources":{{"requests":{{"cpu":"100m","memory":"64Mi"}},"limits":{{"cpu":"500m","memory":"128Mi"}}}},"#,
            r#""readinessProbe":{{"httpGet":{{"path":"/healthz","port":{port}}},"periodSeconds":10}}}}],"#,
            r#""restartPolicy":"Always","terminationGracePeriodSeconds":30}}}}"#
        ),
        name = name,
        ns = NAMESPACE,
        group = group,
        seq_key = SEQ_ANNOTATION,
        seq = seq,
        index = index,
        port = PORT,
        description = DESCRIPTION,
        image = IMAGE,
        args = args,
    ))
}

/// The same pod as a create's body in `encoding`.
pub fn pod_body(encoding: Encoding, name: &str, index: usize, seq: usize) -> Bytes {
    match encoding {
        Encoding::Json => pod_json(name, index, seq),
        Encoding::Protobuf => protobuf::pod_body(name, index, seq),
    }
}

/// POSTs pod `name` in `encoding`; it must be created, and answered in
/// that encoding (a protobuf point answered in JSON would measure JSON).
pub async fn create_pod(
    conn: &mut ApiConnection,
    encoding: Encoding,
    name: &str,
    body: Bytes,
) -> Result<()> {
    let answer = conn.post_as(&pods_path(), body, encoding).await?;
    let created = answer.expect(StatusCode::CREATED, &format!("creating pod {name}"))?;
    if encoding == Encoding::Protobuf && !protobuf::is_protobuf(&created) {
        bail!(
            "creating pod {name}: asked for protobuf ({}), answered otherwise: {}",
            encoding.accept(),
            String::from_utf8_lossy(&created[..created.len().min(200)])
        );
    }
    Ok(())
}

/// Creates `bench`; one that already exists is fine.
pub async fn create_namespace(conn: &mut ApiConnection) -> Result<()> {
    let answer = conn.post("/api/v1/namespaces", namespace_json()).await?;
    if answer.status == StatusCode::CONFLICT {
        return Ok(());
    }
    answer.expect(StatusCode::CREATED, "creating the namespace")?;
    Ok(())
}

/// One create run: how many, how long, each create's latency.
pub struct Creates {
    pub encoding: Encoding,
    pub clients: usize,
    pub pods: usize,
    pub elapsed: Duration,
    pub latencies: Latencies,
}

impl Creates {
    pub fn per_second(&self) -> f64 {
        self.pods as f64 / self.elapsed.as_secs_f64().max(f64::EPSILON)
    }
}

/// Creates pods `first..first + count` (named `pod-NNNNNN`) with the
/// first `clients` of `conns`, each client one connection, bodies and
/// answers in `encoding`; the bar counts them.
pub async fn create_pods(
    conns: &mut Vec<ApiConnection>,
    clients: usize,
    encoding: Encoding,
    (first, count): (usize, usize),
    progress: &Progress,
) -> Result<Creates> {
    let clients = clients.min(conns.len()).max(1);
    let next = Arc::new(AtomicUsize::new(first));
    let end = first + count;
    progress.set_length(count as u64);
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(clients);
    for mut conn in conns.drain(..clients) {
        let next = Arc::clone(&next);
        tasks.push(tokio::spawn(async move {
            let result = create_loop(&mut conn, encoding, &next, end).await;
            (conn, result, Instant::now())
        }));
    }
    let mut reported = first;
    let mut tick = tokio::time::interval(PROGRESS_TICK);
    while !tasks.iter().all(|t| t.is_finished()) {
        tick.tick().await;
        let done = next.load(Ordering::Relaxed).min(end);
        progress.inc((done - reported) as u64);
        reported = done;
    }
    // The run ends when its last client does, not at the next tick.
    let mut last_done = started;
    let mut nanos = Vec::with_capacity(count);
    let mut failure = None;
    for task in tasks {
        let (conn, result, done) = task.await.context("a create client panicked")?;
        last_done = last_done.max(done);
        conns.push(conn);
        match result {
            Ok(mut own) => nanos.append(&mut own),
            Err(err) => failure = failure.or(Some(err)),
        }
    }
    if let Some(err) = failure {
        return Err(err);
    }
    Ok(Creates {
        encoding,
        clients,
        pods: count,
        elapsed: last_done - started,
        latencies: Latencies::from_nanos(nanos),
    })
}

/// One client: takes the next index until `end`, creates that pod, times it.
async fn create_loop(
    conn: &mut ApiConnection,
    encoding: Encoding,
    next: &AtomicUsize,
    end: usize,
) -> Result<Vec<u64>> {
    let mut nanos = Vec::new();
    loop {
        let index = next.fetch_add(1, Ordering::Relaxed);
        if index >= end {
            return Ok(nanos);
        }
        let name = format!("pod-{index:06}");
        let body = pod_body(encoding, &name, index, 0);
        let sent = Instant::now();
        create_pod(conn, encoding, &name, body).await?;
        nanos.push(crate::report::duration_nanos(sent.elapsed()));
    }
}

/// Creates the same pod once from JSON and once from protobuf, reads both
/// back as JSON and compares them, names, uids, times and versions aside:
/// what is stored must not depend on the encoding, or the two kinds of
/// points would not write the same thing. The first difference, if any.
pub async fn encodings_differ(conn: &mut ApiConnection) -> Result<Option<String>> {
    let mut served = Vec::with_capacity(2);
    for encoding in [Encoding::Json, Encoding::Protobuf] {
        let name = format!("same-pod-{}", encoding.name().to_ascii_lowercase());
        create_pod(conn, encoding, &name, pod_body(encoding, &name, 0, 0)).await?;
        let what = format!("reading pod {name}");
        let body = conn
            .get(&format!("{}/{name}", pods_path()))
            .await?
            .expect(StatusCode::OK, &what)?;
        let mut pod: Value = serde_json::from_slice(&body).context(what)?;
        forget_identity(&mut pod);
        served.push(pod);
    }
    Ok(first_difference(&served[0], &served[1], ""))
}

/// Removes what differs between two creates of one pod: its name and what
/// the server assigns per object or per instant.
fn forget_identity(pod: &mut Value) {
    let Some(meta) = pod["metadata"].as_object_mut() else {
        return;
    };
    for field in ["name", "uid", "resourceVersion", "creationTimestamp"] {
        meta.remove(field);
    }
    if let Some(entries) = meta.get_mut("managedFields").and_then(Value::as_array_mut) {
        for entry in entries.iter_mut().filter_map(Value::as_object_mut) {
            entry.remove("time");
        }
    }
}

/// Where `a` and `b` first differ (a JSON path and both values), if they do.
fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter().find_map(|key| {
                let (x, y) = (x.get(key), y.get(key));
                let path = format!("{path}.{key}");
                match (x, y) {
                    (Some(x), Some(y)) => first_difference(x, y, &path),
                    _ => Some(format!("{path}: {} vs {}", shown(x), shown(y))),
                }
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (x, y))| first_difference(x, y, &format!("{path}[{i}]"))),
        _ if a == b => None,
        _ => Some(format!("{path}: {a} vs {b}")),
    }
}

fn shown(value: Option<&Value>) -> String {
    value.map_or_else(|| "(absent)".to_string(), Value::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_are_json_of_about_a_kilobyte() {
        let pod = pod_json("pod-000042", 42, 7);
        let value: serde_json::Value = serde_json::from_slice(&pod).unwrap();
        assert_eq!(value["metadata"]["labels"]["bench-group"], "g2");
        assert_eq!(value["metadata"]["annotations"][SEQ_ANNOTATION], "7");
        assert_eq!(value["spec"]["containers"][0]["env"][0]["value"], "42");
        assert!((800..1200).contains(&pod.len()), "{} bytes", pod.len());
        assert_eq!(pod_body(Encoding::Json, "pod-000042", 42, 7), pod);
        let protobuf = pod_body(Encoding::Protobuf, "pod-000042", 42, 7);
        assert!(protobuf.starts_with(b"k8s\0") && protobuf.len() < pod.len());
    }

    #[test]
    fn two_creates_of_one_pod_compare_equal_and_differences_are_located() {
        let served = |name: &str, uid: &str, image: &str| {
            serde_json::json!({
                "metadata": {"name": name, "uid": uid, "resourceVersion": "7",
                             "creationTimestamp": "2026-01-01T00:00:00Z",
                             "managedFields": [{"manager": "m", "time": uid}]},
                "spec": {"containers": [{"image": image}]},
            })
        };
        let mut a = served("same-pod-json", "u1", "i");
        let mut b = served("same-pod-protobuf", "u2", "i");
        assert_ne!(a, b);
        forget_identity(&mut a);
        forget_identity(&mut b);
        assert_eq!(first_difference(&a, &b, ""), None);
        let mut c = served("x", "u3", "other");
        forget_identity(&mut c);
        assert_eq!(
            first_difference(&a, &c, "").as_deref(),
            Some(".spec.containers[0].image: \"i\" vs \"other\"")
        );
        c["spec"]["hostNetwork"] = Value::Bool(false);
        c["spec"]["containers"][0]["image"] = "i".into();
        assert_eq!(
            first_difference(&a, &c, "").as_deref(),
            Some(".spec.hostNetwork: (absent) vs false")
        );
    }
}
