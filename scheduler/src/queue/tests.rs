//! The queue's moves, on tokio's paused clock.

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::*;

fn pod(name: &str, priority: i32) -> Arc<PodInfo> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"priority": priority, "containers": [{"name": "c", "image": "i"}]},
    }))
    .unwrap();
    Arc::new(PodInfo::new(Arc::new(pod)))
}

async fn pop_now(queue: &SchedulingQueue) -> Option<Popped> {
    tokio::time::timeout(Duration::from_millis(1), queue.pop())
        .await
        .ok()
        .flatten()
}

#[tokio::test(start_paused = true)]
async fn higher_priority_first_then_arrival() {
    let queue = SchedulingQueue::new(QueueConfig::default());
    queue.add(pod("low", 0), true);
    tokio::time::advance(Duration::from_millis(1)).await;
    queue.add(pod("high", 1000), true);
    tokio::time::advance(Duration::from_millis(1)).await;
    queue.add(pod("low-later", 0), true);
    let order: Vec<String> = [
        queue.pop().await.unwrap(),
        queue.pop().await.unwrap(),
        queue.pop().await.unwrap(),
    ]
    .iter()
    .map(|p| p.pod.info.name().to_string())
    .collect();
    assert_eq!(order, ["high", "low", "low-later"]);
    assert!(pop_now(&queue).await.is_none());
}

#[tokio::test(start_paused = true)]
async fn back_off_doubles_to_its_maximum() {
    let queue = SchedulingQueue::new(QueueConfig::default());
    assert_eq!(queue.backoff_for(1), Duration::from_secs(1));
    assert_eq!(queue.backoff_for(2), Duration::from_secs(2));
    assert_eq!(queue.backoff_for(4), Duration::from_secs(8));
    assert_eq!(queue.backoff_for(5), Duration::from_secs(10));
    assert_eq!(queue.backoff_for(500), Duration::from_secs(10));

    queue.add(pod("p", 0), true);
    let popped = queue.pop().await.unwrap();
    queue.retry(&popped);
    assert_eq!(queue.position("default/p"), Some(Where::Backoff));
    tokio::time::advance(Duration::from_millis(900)).await;
    queue.flush();
    assert!(pop_now(&queue).await.is_none(), "still backing off");
    tokio::time::advance(Duration::from_millis(200)).await;
    queue.flush();
    let again = pop_now(&queue).await.expect("back in the active queue");
    assert_eq!(again.pod.attempts, 2);
}

#[tokio::test(start_paused = true)]
async fn unschedulable_pods_wait_for_a_cluster_event_or_the_flush() {
    let queue = SchedulingQueue::new(QueueConfig::default());
    queue.add(pod("p", 0), true);
    let popped = queue.pop().await.unwrap();
    queue.unschedulable(&popped);
    assert_eq!(queue.position("default/p"), Some(Where::Unschedulable));
    tokio::time::advance(Duration::from_secs(60)).await;
    queue.flush();
    assert_eq!(queue.position("default/p"), Some(Where::Unschedulable));
    queue.move_all_unschedulable();
    let popped = pop_now(&queue).await.expect("a node was added");
    queue.unschedulable(&popped);
    tokio::time::advance(Duration::from_secs(301)).await;
    queue.flush();
    assert_eq!(queue.position("default/p"), Some(Where::Active));
}

#[tokio::test(start_paused = true)]
async fn an_event_during_the_attempt_sends_the_pod_to_back_off() {
    let queue = SchedulingQueue::new(QueueConfig::default());
    queue.add(pod("p", 0), true);
    let popped = queue.pop().await.unwrap();
    queue.move_all_unschedulable();
    queue.unschedulable(&popped);
    assert_eq!(queue.position("default/p"), Some(Where::Backoff));
}

#[tokio::test(start_paused = true)]
async fn gated_pods_wait_for_an_update_that_admits_them() {
    let queue = SchedulingQueue::new(QueueConfig::default());
    queue.add(pod("p", 0), false);
    assert_eq!(queue.lengths().gated, 1);
    assert!(pop_now(&queue).await.is_none());
    queue.move_all_unschedulable();
    assert!(pop_now(&queue).await.is_none(), "events do not ungate");
    queue.update(pod("p", 0), true);
    assert!(pop_now(&queue).await.is_some());
}

#[tokio::test(start_paused = true)]
async fn deleted_and_done_pods_leave() {
    let queue = SchedulingQueue::new(QueueConfig::default());
    queue.add(pod("a", 0), true);
    queue.add(pod("b", 0), true);
    queue.delete("default/a");
    let popped = queue.pop().await.unwrap();
    assert_eq!(popped.pod.info.name(), "b");
    queue.done("default/b");
    assert_eq!(queue.position("default/b"), None);
    assert_eq!(queue.lengths(), Lengths::default());
    queue.close();
    assert!(queue.pop().await.is_none());
}

fn with_status(name: &str, message: &str) -> Arc<PodInfo> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"priority": 0, "containers": [{"name": "c", "image": "i"}]},
        "status": {"conditions": [{"type": "PodScheduled", "status": "False", "message": message}]},
    }))
    .unwrap();
    Arc::new(PodInfo::new(Arc::new(pod)))
}

#[tokio::test(start_paused = true)]
async fn a_status_change_leaves_an_unschedulable_pod_waiting_and_keeps_queue_places() {
    let queue = SchedulingQueue::new(QueueConfig::default());
    queue.add(pod("p", 0), true);
    let popped = queue.pop().await.unwrap();
    queue.unschedulable(&popped);
    // The scheduler's own status write comes back through the watch.
    queue.update(with_status("p", "0/1 nodes are available"), true);
    assert_eq!(queue.position("default/p"), Some(Where::Unschedulable));
    // A spec change may be what it needed.
    queue.update(pod("p", 5), true);
    assert_eq!(queue.position("default/p"), Some(Where::Active));

    // An update does not send an active pod to the back of the queue.
    queue.add(pod("q", 5), true);
    tokio::time::advance(Duration::from_millis(1)).await;
    queue.update(with_status("p", "x"), true);
    let first = queue.pop().await.unwrap();
    assert_eq!(first.pod.info.name(), "p");
}
