//! What a stalled run leaves behind, for its error: the stuck pod's
//! PodScheduled condition and events, and where every pod of the run is
//! (so a scheduler bug can be told from a full cluster). Best effort: a
//! failed read is said, never fatal.

use std::collections::BTreeMap;

use anyhow::Result;
use hyper::StatusCode;
use serde_json::Value;

use super::objects;
use crate::api::http::{query_value, ApiConnection};

/// Events of a stuck pod an error shows.
const EVENTS_SHOWN: usize = 3;
/// Unbound nominated pods an error describes.
const NOMINATED_SHOWN: usize = 12;

/// A stuck pod's PodScheduled condition and last events, for an error.
pub async fn why_unbound(conn: &mut ApiConnection, name: &str) -> String {
    let mut out = String::new();
    let pod_path = format!("{}/{name}", objects::pods_path());
    if let Ok(pod) = get_json(conn, &pod_path).await {
        let conditions = pod["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let scheduled = conditions.iter().find(|c| c["type"] == "PodScheduled");
        if let Some(c) = scheduled {
            out.push_str(&format!(
                "\n  its PodScheduled condition: {} {}: {}",
                c["status"].as_str().unwrap_or("?"),
                c["reason"].as_str().unwrap_or("?"),
                c["message"].as_str().unwrap_or("")
            ));
        }
        if let Some(node) = pod["status"]["nominatedNodeName"].as_str() {
            out.push_str(&format!("\n  nominated to {node}"));
        }
    }
    let selector = query_value(&format!("involvedObject.name={name}"));
    let events_path = format!(
        "/api/v1/namespaces/{}/events?fieldSelector={selector}",
        objects::NAMESPACE
    );
    match get_json(conn, &events_path).await {
        Ok(list) => {
            let items = list["items"].as_array().cloned().unwrap_or_default();
            if items.is_empty() {
                out.push_str("\n  no events about it");
            }
            for event in items.iter().rev().take(EVENTS_SHOWN) {
                out.push_str(&format!(
                    "\n  event {} (x{}): {}",
                    event["reason"].as_str().unwrap_or("?"),
                    event["count"].as_i64().unwrap_or(1),
                    event["message"].as_str().unwrap_or("")
                ));
            }
        }
        Err(err) => out.push_str(&format!("\n  its events could not be read: {err:#}")),
    }
    out
}

/// Every pod of the namespace by name prefix (bound, unbound, nominated,
/// terminating), and what is on the nodes unbound pods are nominated to.
pub async fn placement(conn: &mut ApiConnection) -> String {
    let list = match get_json(conn, &objects::pods_path()).await {
        Ok(list) => list,
        Err(err) => return format!("\n  the pods could not be listed: {err:#}"),
    };
    let pods = list["items"].as_array().cloned().unwrap_or_default();
    let mut tally: BTreeMap<String, [usize; 4]> = BTreeMap::new();
    for pod in &pods {
        let name = pod["metadata"]["name"].as_str().unwrap_or("?");
        let prefix = name.split('-').next().unwrap_or(name).to_string();
        let bound = !node_of(pod).is_empty();
        let nominated = pod["status"]["nominatedNodeName"].as_str();
        let counts = tally.entry(prefix).or_default();
        counts[usize::from(!bound)] += 1;
        if !bound && nominated.is_some() {
            counts[2] += 1;
        }
        if !pod["metadata"]["deletionTimestamp"].is_null() {
            counts[3] += 1;
        }
    }
    let mut out =
        String::from("\n  the namespace's pods (bound/unbound/unbound but nominated/terminating):");
    for (prefix, [bound, unbound, nominated, terminating]) in &tally {
        out.push_str(&format!(
            "\n    {prefix}-*: {bound}/{unbound}/{nominated}/{terminating}"
        ));
    }
    let stuck: Vec<(&str, &str)> = pods
        .iter()
        .filter(|p| node_of(p).is_empty())
        .filter_map(|p| {
            let nominated = p["status"]["nominatedNodeName"].as_str()?;
            Some((p["metadata"]["name"].as_str().unwrap_or("?"), nominated))
        })
        .collect();
    for (name, node) in stuck.iter().take(NOMINATED_SHOWN) {
        let on_node: Vec<&Value> = pods.iter().filter(|p| node_of(p) == *node).collect();
        let names: Vec<String> = on_node.iter().map(|p| describe_pod(p)).collect();
        let rivals = stuck
            .iter()
            .filter(|(other, n)| n == node && other != name)
            .count();
        // Pods bound elsewhere that still say they were nominated here.
        let elsewhere: Vec<String> = pods
            .iter()
            .filter(|p| p["status"]["nominatedNodeName"] == *node)
            .filter(|p| !node_of(p).is_empty() && node_of(p) != *node)
            .map(|p| {
                format!(
                    "{} (on {})",
                    p["metadata"]["name"].as_str().unwrap_or("?"),
                    node_of(p)
                )
            })
            .collect();
        out.push_str(&format!(
            "\n  {name}, unbound, nominated to {node}, where {} pods are bound ({}); {rivals} other unbound pods nominated there; pods bound elsewhere but nominated there: {}",
            on_node.len(),
            names.join(", "),
            if elsewhere.is_empty() { "none".to_string() } else { elsewhere.join(", ") }
        ));
    }
    out
}

/// "name (priority P, cpu C[, terminating])".
fn describe_pod(pod: &Value) -> String {
    format!(
        "{} (priority {}, cpu {}{})",
        pod["metadata"]["name"].as_str().unwrap_or("?"),
        pod["spec"]["priority"]
            .as_i64()
            .map_or("-".into(), |p| p.to_string()),
        pod["spec"]["containers"][0]["resources"]["requests"]["cpu"]
            .as_str()
            .unwrap_or("-"),
        if pod["metadata"]["deletionTimestamp"].is_null() {
            ""
        } else {
            ", terminating"
        }
    )
}

fn node_of(pod: &Value) -> &str {
    pod["spec"]["nodeName"].as_str().unwrap_or_default()
}

async fn get_json(conn: &mut ApiConnection, path: &str) -> Result<Value> {
    let body = conn.get(path).await?.expect(StatusCode::OK, path)?;
    Ok(serde_json::from_slice(&body)?)
}
