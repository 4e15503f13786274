//! ImageLocality: prefers nodes that already hold the pod's images,
//! weighing each image by its size and by how widely it is spread over
//! the cluster (an image everywhere says little about any one node).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::framework::node_info::normalized_image;
use crate::framework::{
    CycleState, NodeInfo, Plugin, PodInfo, Point, PreFilterResult, Snapshot, Status, MAX_NODE_SCORE,
};

pub const NAME: &str = "ImageLocality";

const STATE_KEY: &str = "ImageLocalitySpread";

const MB: i64 = 1024 * 1024;
/// Below this total the score is 0: small images pull fast anyway.
const MIN_THRESHOLD: i64 = 23 * MB;
/// Per container: at this total the score is MAX_NODE_SCORE.
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

pub struct ImageLocality;

pub fn new(args: &Value) -> Result<Arc<dyn Plugin>, String> {
    super::no_args(NAME, args)?;
    Ok(Arc::new(ImageLocality))
}

/// How many nodes hold each of the pod's images, of how many nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ImageSpread {
    /// The pod's images, as [`pod_images`] lists them.
    images: Vec<String>,
    total_nodes: usize,
    nodes_with: HashMap<String, usize>,
}

/// The pod's images, init containers first, normalized; one entry per
/// container, so an image two containers use counts twice.
fn pod_images(pod: &PodInfo) -> Vec<String> {
    let Some(spec) = pod.pod.spec.as_ref() else {
        return Vec::new();
    };
    spec.init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .map(|c| c.image.as_deref().unwrap_or_default())
        .filter(|image| !image.is_empty())
        .map(normalized_image)
        .collect()
}

fn container_count(pod: &PodInfo) -> i64 {
    pod.pod
        .spec
        .as_ref()
        .map(|s| s.containers.len() + s.init_containers.as_ref().map_or(0, Vec::len))
        .unwrap_or(0) as i64
}

/// The spread over the whole snapshot, from its image counts.
fn image_spread(pod: &PodInfo, snapshot: &Snapshot) -> ImageSpread {
    let images = pod_images(pod);
    let nodes_with = images
        .iter()
        .map(|image| (image.clone(), snapshot.nodes_with_image(image)))
        .collect();
    ImageSpread {
        images,
        total_nodes: snapshot.nodes.len(),
        nodes_with,
    }
}

/// The spread over some nodes, counted.
fn image_spread_over<'a>(pod: &PodInfo, nodes: impl Iterator<Item = &'a NodeInfo>) -> ImageSpread {
    let images = pod_images(pod);
    let mut nodes_with: HashMap<String, usize> =
        images.iter().map(|image| (image.clone(), 0)).collect();
    let mut total_nodes = 0;
    for node in nodes {
        total_nodes += 1;
        for (image, count) in nodes_with.iter_mut() {
            if node.images.contains_key(image) {
                *count += 1;
            }
        }
    }
    ImageSpread {
        images,
        total_nodes,
        nodes_with,
    }
}

/// The images' sizes on `node`, each scaled by the share of nodes that
/// hold it.
fn sum_image_scores(node: &NodeInfo, spread: &ImageSpread) -> i64 {
    let mut sum: i64 = 0;
    if node.images.is_empty() {
        return 0;
    }
    for image in &spread.images {
        let Some(&size) = node.images.get(image) else {
            continue;
        };
        let holders = spread.nodes_with.get(image).copied().unwrap_or(1).max(1);
        let share = holders as f64 / spread.total_nodes.max(holders) as f64;
        sum = sum.saturating_add((size as f64 * share) as i64);
    }
    sum
}

/// The sum mapped linearly from [MIN_THRESHOLD, containers × 1000 MiB]
/// onto 0..=MAX_NODE_SCORE.
fn calculate_priority(sum: i64, containers: i64) -> i64 {
    let max_threshold = MAX_CONTAINER_THRESHOLD.saturating_mul(containers);
    let sum = if sum < MIN_THRESHOLD {
        MIN_THRESHOLD
    } else if sum > max_threshold {
        max_threshold
    } else {
        sum
    };
    let range = i128::from(max_threshold) - i128::from(MIN_THRESHOLD);
    if range == 0 {
        return 0;
    }
    let score = i128::from(MAX_NODE_SCORE) * (i128::from(sum) - i128::from(MIN_THRESHOLD)) / range;
    score.clamp(0, i128::from(MAX_NODE_SCORE)) as i64
}

impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        NAME
    }

    fn points(&self) -> &'static [Point] {
        &[Point::PreFilter, Point::PreScore, Point::Score]
    }

    /// Counts, over every node of the snapshot (not only the feasible
    /// ones), the nodes that hold each of the pod's images.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        state.write(STATE_KEY, image_spread(pod, snapshot));
        (PreFilterResult::default(), Status::success())
    }

    /// Without PreFilter (a profile that enables ImageLocality only for
    /// Score), counts over the nodes being scored.
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[Arc<NodeInfo>]) -> Status {
        if state.read::<ImageSpread>(STATE_KEY).is_none() {
            state.write(
                STATE_KEY,
                image_spread_over(pod, nodes.iter().map(|n| n.as_ref())),
            );
        }
        Status::success()
    }

    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let computed;
        let spread = match state.read::<ImageSpread>(STATE_KEY) {
            Some(spread) => spread,
            None => {
                computed = image_spread_over(pod, std::iter::once(node));
                &computed
            }
        };
        let sum = sum_image_scores(node, spread);
        Ok(calculate_priority(sum, container_count(pod)))
    }
}

#[cfg(test)]
mod tests;
