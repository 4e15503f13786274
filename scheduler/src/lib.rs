//! The scheduler: a list-watch client of the REST API that binds pods to
//! nodes through `pods/binding`, with kube-scheduler's queue, cache and
//! plugin framework. It never touches the store.

pub mod cache;
pub mod config;
pub mod extender;
pub mod framework;
pub mod metrics;
pub mod plugins;
pub mod queue;
pub mod run;
pub mod scheduler;
pub mod watch;
