//! Running the scheduler against an apiserver: leader-elected (a Lease
//! `kube-system/kube-scheduler`), it watches the cluster and schedules
//! until it loses the lease or is stopped.

use std::sync::Arc;

use kube::Client;

use crate::config::SchedulerConfig;
use crate::metrics::Metrics;
use crate::scheduler::Scheduler;
use skiff_machinery::leader::{self, LeaseConfig};

pub struct RunOptions {
    pub config: SchedulerConfig,
    /// `None`: schedule without leader election.
    pub lease: Option<LeaseConfig>,
    pub metrics: Arc<Metrics>,
}

/// The lease of kube-scheduler, held by `identity`.
pub fn scheduler_lease(identity: &str) -> LeaseConfig {
    LeaseConfig::new("kube-system", "kube-scheduler", identity)
}

/// Schedules until `shutdown` resolves.
pub async fn run(
    client: Client,
    options: RunOptions,
    shutdown: impl std::future::Future<Output = ()> + Send,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        if let Some(lease) = &options.lease {
            tokio::select! {
                _ = leader::acquire(&client, lease) => {}
                _ = &mut shutdown => return,
            }
            tracing::info!(identity = %lease.identity, "scheduler: leading");
            options.metrics.set_leading(true);
        }
        let scheduler = Arc::new(Scheduler::new(
            client.clone(),
            &options.config,
            options.metrics.clone(),
        ));
        let (mut tasks, synced) = crate::watch::start(&client, &scheduler);
        tasks.push(tokio::spawn(scheduler.clone().flush_loop()));
        let cycles = scheduler.clone();
        tasks.push(tokio::spawn(async move {
            synced.wait().await;
            cycles.run().await
        }));
        let lost = async {
            match &options.lease {
                Some(lease) => leader::hold(&client, lease).await,
                None => std::future::pending().await,
            }
        };
        let stop = tokio::select! {
            _ = lost => false,
            _ = &mut shutdown => true,
        };
        options.metrics.set_leading(false);
        scheduler.queue.close();
        for task in tasks {
            task.abort();
        }
        if stop {
            return;
        }
    }
}
