//! The lease expiry loop: on the leader only, proposes revokes for leases
//! past their TTL and checkpoints of long leases' remaining TTL. It decides
//! nothing itself; the log carries every change.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::driver::{DriverRequest, Leadership};
use super::propose_to;
use crate::command::Command;
use crate::error::StoreError;
use crate::lease::Lessor;

/// Proposes revokes for expired leases and checkpoints for long ones.
pub(crate) async fn run(
    lessor: Arc<Lessor>,
    leadership: Arc<Leadership>,
    requests: mpsc::Sender<DriverRequest>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let checkpoint_every = lessor.config().checkpoint_interval;
    let mut next_checkpoint = lessor.now() + checkpoint_every;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        // Only the leader decides that a lease expired.
        if !leadership
            .is_leader
            .load(std::sync::atomic::Ordering::Acquire)
        {
            continue;
        }
        // etcd revokes at most 1000 leases per second; half that per tick.
        for id in lessor.take_expired(lessor.now(), 500) {
            let command = Command::LeaseRevoke { id };
            let requests = requests.clone();
            tokio::spawn(async move {
                match propose_to(&requests, command).await {
                    Ok(_) | Err(StoreError::LeaseNotFound) | Err(StoreError::Stopped) => {}
                    Err(err) => {
                        tracing::warn!(lease = id, error = %err, "revoking an expired lease failed")
                    }
                }
            });
        }
        let now = lessor.now();
        if now >= next_checkpoint {
            next_checkpoint = now + checkpoint_every;
            let checkpoints = lessor.checkpoints_due(now);
            if !checkpoints.is_empty() {
                let command = Command::LeaseCheckpoint { checkpoints };
                if let Err(err) = propose_to(&requests, command).await {
                    tracing::warn!(error = %err, "lease checkpoint failed");
                }
            }
        }
    }
}
