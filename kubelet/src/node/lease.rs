//! The node's heartbeat: its `kube-node-lease/<node>` Lease, created and
//! renewed as the real kubelet does. One renewal is one call on a
//! [`NodeLease`], so the simulator drives thousands of them the same way.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};

/// Where node Leases live.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// The real kubelet's renew interval and lease duration.
pub const DEFAULT_RENEW_INTERVAL: Duration = Duration::from_secs(10);
pub const DEFAULT_LEASE_DURATION_SECONDS: i32 = 40;
/// Write attempts of one renewal, re-reading after each conflict.
const ATTEMPTS: usize = 3;
/// Back-off after a failed renewal: first, and at most.
const BACKOFF_FIRST: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(7);

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("writing the Lease {NODE_LEASE_NAMESPACE}/{node}: {source}")]
    Api { node: String, source: kube::Error },
    #[error("the Lease {NODE_LEASE_NAMESPACE}/{node} changed under each of {ATTEMPTS} renewals; someone else writes it")]
    Conflicts { node: String },
}

/// One node's Lease, as this kubelet last wrote it: the next renewal
/// replaces that version, with no read in between unless it conflicts.
#[derive(Debug, Clone)]
pub struct NodeLease {
    pub node_name: String,
    /// The Node's uid, for the Lease's ownerReference (none when empty).
    pub node_uid: String,
    pub duration_seconds: i32,
    last: Option<Lease>,
}

impl NodeLease {
    pub fn new(node_name: &str, node_uid: &str, duration_seconds: i32) -> NodeLease {
        NodeLease {
            node_name: node_name.to_string(),
            node_uid: node_uid.to_string(),
            duration_seconds,
            last: None,
        }
    }

    /// The Lease as last written, if any.
    pub fn last(&self) -> Option<&Lease> {
        self.last.as_ref()
    }

    /// Creates or renews the Lease with renewTime `now`; after a conflict
    /// re-reads it and tries again.
    pub async fn renew(&mut self, api: &Api<Lease>, now: Timestamp) -> Result<(), LeaseError> {
        for _ in 0..ATTEMPTS {
            let written = match self.last.take() {
                Some(current) => {
                    api.replace(
                        &self.node_name,
                        &PostParams::default(),
                        &self.renewed(current, now),
                    )
                    .await
                }
                None => match api
                    .get_opt(&self.node_name)
                    .await
                    .map_err(|e| self.api_error(e))?
                {
                    Some(current) => {
                        api.replace(
                            &self.node_name,
                            &PostParams::default(),
                            &self.renewed(current, now),
                        )
                        .await
                    }
                    None => {
                        api.create(&PostParams::default(), &self.renewed(Lease::default(), now))
                            .await
                    }
                },
            };
            match written {
                Ok(lease) => {
                    self.last = Some(lease);
                    return Ok(());
                }
                // Changed or removed meanwhile, or created by another
                // writer: read it again.
                Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => {}
                Err(err) => return Err(self.api_error(err)),
            }
        }
        Err(LeaseError::Conflicts {
            node: self.node_name.clone(),
        })
    }

    fn api_error(&self, source: kube::Error) -> LeaseError {
        LeaseError::Api {
            node: self.node_name.clone(),
            source,
        }
    }

    /// `current` held by this node and renewed at `now`; the rest kept.
    pub fn renewed(&self, mut current: Lease, now: Timestamp) -> Lease {
        let meta = &mut current.metadata;
        meta.name = Some(self.node_name.clone());
        meta.namespace = Some(NODE_LEASE_NAMESPACE.to_string());
        if !self.node_uid.is_empty() {
            meta.owner_references = Some(vec![self.owner_reference()]);
        }
        let spec = current.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(self.node_name.clone());
        spec.lease_duration_seconds = Some(self.duration_seconds);
        spec.renew_time = Some(MicroTime(now));
        current
    }

    fn owner_reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: self.node_name.clone(),
            uid: self.node_uid.clone(),
            ..OwnerReference::default()
        }
    }
}

/// The node Lease API.
pub fn lease_api(client: Client) -> Api<Lease> {
    Api::namespaced(client, NODE_LEASE_NAMESPACE)
}

/// Renews the node's Lease every `interval` until `shutdown`; a failed
/// renewal is logged and retried with back-off (200 ms doubling to 7 s).
pub async fn run_lease(
    client: Client,
    node_name: &str,
    node_uid: &str,
    interval: Duration,
    lease_duration_seconds: i32,
    shutdown: impl Future<Output = ()>,
) {
    let api = lease_api(client);
    let mut lease = NodeLease::new(node_name, node_uid, lease_duration_seconds);
    let renewals = async {
        let mut backoff = BACKOFF_FIRST;
        loop {
            match lease.renew(&api, Timestamp::now()).await {
                Ok(()) => {
                    backoff = BACKOFF_FIRST;
                    tokio::time::sleep(interval).await;
                }
                Err(err) => {
                    tracing::warn!(node = node_name, error = %err, retry_in = ?backoff, "node lease renewal failed");
                    tokio::time::sleep(backoff.min(interval)).await;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
    };
    tokio::select! {
        () = renewals => {}
        () = shutdown => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn a_renewed_lease_is_held_by_its_node_and_owned_by_it() {
        let lease = NodeLease::new("n1", "uid-1", 40);
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let current = Lease {
            metadata: ObjectMeta {
                resource_version: Some("7".into()),
                ..ObjectMeta::default()
            },
            ..Lease::default()
        };
        let renewed = lease.renewed(current, now);
        assert_eq!(renewed.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(
            renewed.metadata.namespace.as_deref(),
            Some("kube-node-lease")
        );
        let value = serde_json::to_value(&renewed).unwrap();
        assert_eq!(value["spec"]["holderIdentity"], "n1");
        assert_eq!(value["spec"]["leaseDurationSeconds"], 40);
        assert_eq!(value["spec"]["renewTime"], "2023-11-14T22:13:20.000000Z");
        let owner = &value["metadata"]["ownerReferences"][0];
        assert_eq!(owner["apiVersion"], "v1");
        assert_eq!(owner["kind"], "Node");
        assert_eq!(owner["name"], "n1");
        assert_eq!(owner["uid"], "uid-1");
    }

    #[test]
    fn without_a_node_uid_there_is_no_owner() {
        let lease = NodeLease::new("n1", "", 40);
        let renewed = lease.renewed(Lease::default(), Timestamp::UNIX_EPOCH);
        assert!(renewed.metadata.owner_references.is_none());
    }
}
