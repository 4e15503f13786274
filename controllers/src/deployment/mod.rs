//! The Deployment controller: rolls a Deployment's pod template out through
//! ReplicaSets (RollingUpdate or Recreate), keeps its revision history for
//! `kubectl rollout`, and reports status. Pods are the ReplicaSet controller's.

mod claim;
mod events;
pub(crate) mod hash;
mod history;
mod plan;
mod progress;
mod reconcile;
mod revision;
mod rolling;
mod scaling;
mod status;
mod strategy;

#[cfg(test)]
mod tests;

use crate::manager::Controller;

pub use hash::{pod_template_hash, POD_TEMPLATE_HASH};
pub use plan::{plan, Plan, ReplicaSetWrite};
pub use reconcile::SyncError;
pub use revision::{CHANGE_CAUSE, DESIRED_REPLICAS, MAX_REPLICAS, REVISION, REVISION_HISTORY};

pub const CONTROLLER: Controller = Controller {
    name: "deployment",
    run: |informers, _settings| Box::pin(reconcile::run(informers)),
};

/// A Deployment whose spec the controller cannot act on.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("invalid value for IntOrString: invalid type: string is not a percentage: {0:?}; use an integer or a value like \"25%\"")]
    InvalidIntOrPercent(String),
    #[error("invalid spec.selector: {0}")]
    InvalidSelector(String),
}
