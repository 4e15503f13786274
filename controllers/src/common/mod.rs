//! What the controllers share, as kube-controller-manager's
//! `controller_utils` holds it: reading a pod (`pods`), owner references
//! (`owners`), the expectations
//! that keep a stale cache from doubling a create or delete, the pod
//! writes (`pod_control`) and the events about them (`events`), reading
//! the API's refusals (`api`), and the
//! test objects (`fixtures`); the informers every controller of a
//! process shares (`informers`), and the loop of the controllers that keep
//! an object in every namespace (`per_namespace`), and the work queue
//! metrics of kube-runtime's applier (`workqueue`).

pub mod api;
pub mod events;
pub mod expectations;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod informers;
pub mod owners;
pub mod per_namespace;
pub mod pod_control;
pub mod pods;
pub mod workqueue;
