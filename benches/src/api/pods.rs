//! The pods the benchmark writes — minimal but realistic: one container
//! with ports, resources and env, three labels, a few annotations, about
//! 1 KB of JSON as served — and the create workload: C clients, each on
//! its own connection, creating pods with fresh names until a count is
//! reached.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use hyper::StatusCode;

use super::http::ApiConnection;
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

/// Pod `name`, in group `index % GROUPS`, its annotation `seq` set to `seq`.
pub fn pod_json(name: &str, index: usize, seq: usize) -> Bytes {
    let group = index % GROUPS;
    Bytes::from(format!(
        concat!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"{ns}","#,
            r#""labels":{{"app":"bench","bench-group":"g{group}","tier":"backend"}},"#,
            r#""annotations":{{"{seq_key}":"{seq}","prometheus.io/scrape":"true","prometheus.io/port":"8080","#,
            r#""description":"a pod written by skiff-bench api: one container, a few labels and annotations, about the size of a small real pod"}}}},"#,
            r#""spec":{{"containers":[{{"name":"app","image":"registry.k8s.io/pause:3.10","#,
            r#""args":["--listen=:8080","--log-level=info"],"#,
            r#""ports":[{{"name":"http","containerPort":8080,"protocol":"TCP"}}],"#,
            r#""env":[{{"name":"BENCH_INDEX","value":"{index}"}},{{"name":"BENCH_GROUP","value":"g{group}"}}],"#,
            r#""resources":{{"requests":{{"cpu":"100m","memory":"64Mi"}},"limits":{{"cpu":"500m","memory":"128Mi"}}}},"#,
            r#""readinessProbe":{{"httpGet":{{"path":"/healthz","port":8080}},"periodSeconds":10}}}}],"#,
            r#""restartPolicy":"Always","terminationGracePeriodSeconds":30}}}}"#
        ),
        name = name,
        ns = NAMESPACE,
        group = group,
        seq_key = SEQ_ANNOTATION,
        seq = seq,
        index = index,
    ))
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
/// first `clients` of `conns`, each client one connection; the bar
/// counts them.
pub async fn create_pods(
    conns: &mut Vec<ApiConnection>,
    clients: usize,
    first: usize,
    count: usize,
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
            let result = create_loop(&mut conn, &next, end).await;
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
        clients,
        pods: count,
        elapsed: last_done - started,
        latencies: Latencies::from_nanos(nanos),
    })
}

/// One client: takes the next index until `end`, creates that pod, times it.
async fn create_loop(conn: &mut ApiConnection, next: &AtomicUsize, end: usize) -> Result<Vec<u64>> {
    let path = pods_path();
    let mut nanos = Vec::new();
    loop {
        let index = next.fetch_add(1, Ordering::Relaxed);
        if index >= end {
            return Ok(nanos);
        }
        let name = format!("pod-{index:06}");
        let body = pod_json(&name, index, 0);
        let sent = Instant::now();
        let answer = conn.post(&path, body).await?;
        let took = sent.elapsed();
        answer.expect(StatusCode::CREATED, &format!("creating pod {name}"))?;
        nanos.push(crate::report::duration_nanos(took));
    }
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
    }
}
