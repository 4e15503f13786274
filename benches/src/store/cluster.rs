//! The store under test in the latency, throughput and watch sections: one
//! member alone (the store as it runs by default), or several members in
//! this process replicating over TCP on 127.0.0.1, every write sent to the
//! leader. Not a fault test: every member stays up for the whole run.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use skiff_store::{ClusterConfig, PutRequest, Store, StoreConfig, StoreError};

use super::compare::label;

/// How long the members may take to elect a leader and commit a first write.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How often leadership is polled while waiting for it.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Open members of one store, one of them the leader.
pub struct Members {
    stores: Vec<Store>,
    names: Vec<String>,
    leader: usize,
}

impl Members {
    /// Opens `count` members with their data directories under `dir` and
    /// waits until a write through the leader commits.
    pub async fn start(count: usize, dir: &Path) -> Result<Members> {
        let started = Instant::now();
        let (stores, names) = if count == 1 {
            (vec![super::open_store(dir).await?], vec!["n1".into()])
        } else {
            open_cluster(count, dir).await?
        };
        let mut members = Members {
            stores,
            names,
            leader: 0,
        };
        if let Err(err) = members.wait_until_ready(started + READY_TIMEOUT).await {
            // The run is over; the error that ended it matters, not the close.
            let _ = members.close().await;
            return Err(err);
        }
        eprintln!(
            "  {}: ready after {:.2} s (leader {})",
            label(count),
            started.elapsed().as_secs_f64(),
            members.names[members.leader]
        );
        Ok(members)
    }

    /// The member every benchmark write goes to.
    pub fn leader(&self) -> &Store {
        &self.stores[self.leader]
    }

    /// A warning when the member written to no longer leads: later writes
    /// were forwarded and its sync counters no longer describe the commits.
    pub fn leadership_moved(&self) -> Option<String> {
        let leader = self.leader();
        if leader.is_leader() {
            return None;
        }
        let now = (0..self.stores.len())
            .find(|&i| self.stores[i].is_leader())
            .map_or("none".to_string(), |i| self.names[i].clone());
        Some(format!(
            "WARNING ({}): member {} lost the leadership during the run (leader now: {now}); its figures mix forwarded writes",
            label(self.stores.len()),
            self.names[self.leader]
        ))
    }

    pub async fn close(self) -> Result<()> {
        for (store, name) in self.stores.into_iter().zip(&self.names) {
            store
                .close()
                .await
                .with_context(|| format!("closing member {name}"))?;
        }
        Ok(())
    }

    /// Waits for exactly one leader and for a first put through it to
    /// commit; "no leader" and "request timed out" are expected meanwhile.
    async fn wait_until_ready(&mut self, deadline: Instant) -> Result<()> {
        loop {
            self.leader = self.find_leader(deadline).await?;
            let put = PutRequest::new("/bench/ready", "");
            match self.leader().put(put).await {
                Ok(_) => return Ok(()),
                Err(StoreError::NoLeader | StoreError::Timeout) if Instant::now() < deadline => {
                    tokio::time::sleep(POLL_INTERVAL).await;
                }
                Err(err) => {
                    return Err(err).with_context(|| {
                        format!(
                            "the first write through leader {} of {} failed",
                            self.names[self.leader],
                            label(self.stores.len())
                        )
                    })
                }
            }
        }
    }

    async fn find_leader(&self, deadline: Instant) -> Result<usize> {
        loop {
            let leaders: Vec<usize> = (0..self.stores.len())
                .filter(|&i| self.stores[i].is_leader())
                .collect();
            if let [leader] = leaders[..] {
                return Ok(leader);
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} on 127.0.0.1 did not settle on one leader within {:?} ({} claim to lead); check that loopback TCP is allowed and the machine is not overloaded",
                    label(self.stores.len()),
                    READY_TIMEOUT,
                    leaders.len()
                );
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
}

/// Opens members n1..nN, each in `dir/<name>` with its peer port on
/// 127.0.0.1, all founding one cluster.
async fn open_cluster(count: usize, dir: &Path) -> Result<(Vec<Store>, Vec<String>)> {
    let initial: Vec<(String, SocketAddr)> = free_loopback_addrs(count)?
        .into_iter()
        .enumerate()
        .map(|(i, addr)| (format!("n{}", i + 1), addr))
        .collect();
    let mut stores = Vec::with_capacity(count);
    for (name, addr) in &initial {
        let data_dir = dir.join(name);
        let mut config = StoreConfig::new(&data_dir);
        config.cluster = Some(ClusterConfig {
            name: name.clone(),
            peer_listen: *addr,
            initial_cluster: initial.clone(),
            initial_cluster_state: Default::default(),
            initial_cluster_token: String::new(),
        });
        let store = Store::open(config).await.with_context(|| {
            format!(
                "opening member {name} (peers on {addr}) in {}",
                data_dir.display()
            )
        })?;
        stores.push(store);
    }
    let names = initial.into_iter().map(|(name, _)| name).collect();
    Ok((stores, names))
}

/// Ports the kernel hands out for 127.0.0.1:0, all held at once so that
/// they differ, then released for the members to bind.
fn free_loopback_addrs(count: usize) -> Result<Vec<SocketAddr>> {
    let listeners = (0..count)
        .map(|_| TcpListener::bind(("127.0.0.1", 0)))
        .collect::<io::Result<Vec<_>>>()
        .context("finding free ports on 127.0.0.1 for the members")?;
    listeners
        .iter()
        .map(TcpListener::local_addr)
        .collect::<io::Result<Vec<_>>>()
        .context("reading the free ports found on 127.0.0.1")
}
