//! What skiff's API server and its clients (the scheduler, the
//! controllers, the kubelet) share, as Kubernetes keeps it in
//! `k8s.io/apimachinery` and `k8s.io/component-helpers`: quantities,
//! label and field selectors, the syntax of names and labels, Go's
//! quoting, Go's durations, ResourceQuota's usage evaluator, node affinity and taint
//! matching, Lease leader election (feature `leader-election`), the
//! event recorder every component writes Events with (feature `events`), the
//! version skiff reports, a TLS verifier for servers whose certificates
//! are not checked, and the HTTP client of webhooks and extenders
//! (feature `http-client`), Prometheus metrics every component exports
//! (feature `metrics`) and the secure port of the scheduler and the
//! controller-manager (feature `secure-serving`). It depends on no part of skiff, so
//! a client built on it never builds the store or the API server.

pub mod duration;
#[cfg(feature = "events")]
pub mod events;
/// The fuzz targets' bodies (`fuzz/`), replayed by a stable test.
#[doc(hidden)]
pub mod fuzzing;
#[cfg(feature = "http-client")]
pub mod http_client;
#[cfg(feature = "leader-election")]
pub mod leader;
#[cfg(feature = "metrics")]
pub mod metrics;
pub mod quantity;
pub mod quota;
pub mod quote;
pub mod scheduling;
pub mod selectors;
#[cfg(feature = "secure-serving")]
pub mod serving;
pub mod skip_verify;
pub mod validation;
pub mod version;
