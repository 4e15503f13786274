//! Leader election through a `coordination.k8s.io/v1` Lease, as
//! kube-scheduler and kube-controller-manager do it: the holder renews the
//! lease every few seconds; another candidate takes it over once it has
//! not been renewed for its duration. Writes carry the resourceVersion
//! read, so two candidates can never both take it.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;

#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// This candidate, as written in `holderIdentity`.
    pub identity: String,
    pub lease_duration: Duration,
    /// A leader that could not renew for this long steps down.
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// kube-scheduler's defaults: 15 s lease, 10 s renew deadline, 2 s retry.
    pub fn new(namespace: &str, name: &str, identity: &str) -> LeaseConfig {
        LeaseConfig {
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Tries once to take or renew the lease; true if this candidate holds it.
pub async fn try_acquire(client: &Client, config: &LeaseConfig) -> Result<bool, kube::Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), &config.namespace);
    let now = Timestamp::now();
    let seconds = i32::try_from(config.lease_duration.as_secs()).unwrap_or(i32::MAX);
    let Some(current) = api.get_opt(&config.name).await? else {
        let lease: Lease = serde_json::from_value(json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": config.name, "namespace": config.namespace},
            "spec": {
                "holderIdentity": config.identity,
                "leaseDurationSeconds": seconds,
                "acquireTime": micro(now),
                "renewTime": micro(now),
                "leaseTransitions": 0,
            },
        }))
        .map_err(kube::Error::SerdeError)?;
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        };
    };
    let spec = current.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let mine = holder == config.identity;
    if !mine && !holder.is_empty() {
        let duration = i64::from(spec.lease_duration_seconds.unwrap_or(seconds).max(1));
        let renewed = spec.renew_time.as_ref().map(|t| t.0);
        let expired = renewed.is_none_or(|t| now.as_second() - t.as_second() > duration);
        if !expired {
            return Ok(false);
        }
    }
    let mut next = current.clone();
    let next_spec = next.spec.get_or_insert_with(Default::default);
    next_spec.holder_identity = Some(config.identity.clone());
    next_spec.lease_duration_seconds = Some(seconds);
    next_spec.renew_time = serde_json::from_value(json!(micro(now))).ok();
    if !mine {
        next_spec.acquire_time = serde_json::from_value(json!(micro(now))).ok();
        next_spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    match api
        .replace(&config.name, &PostParams::default(), &next)
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Waits until this candidate holds the lease.
pub async fn acquire(client: &Client, config: &LeaseConfig) {
    loop {
        match try_acquire(client, config).await {
            Ok(true) => return,
            Ok(false) => {}
            Err(err) => {
                tracing::debug!(lease = %config.name, error = %err, "leader election attempt failed")
            }
        }
        tokio::time::sleep(config.retry_period).await;
    }
}

/// Renews the lease until another candidate holds it, or until renewals
/// have failed for the renew deadline; returns then (leadership is lost).
pub async fn hold(client: &Client, config: &LeaseConfig) {
    let mut renewals = Renewals::default();
    loop {
        tokio::time::sleep(config.retry_period).await;
        let attempt =
            match tokio::time::timeout(config.renew_deadline, try_acquire(client, config)).await {
                Ok(Ok(held)) => Ok(held),
                Ok(Err(err)) => Err(err.to_string()),
                Err(_) => Err(format!("no answer in {:?}", config.renew_deadline)),
            };
        if let Err(err) = &attempt {
            tracing::debug!(lease = %config.name, error = %err, "could not renew the lease");
        }
        match renewals.after(
            attempt.is_ok(),
            attempt.unwrap_or(true),
            tokio::time::Instant::now(),
            config.renew_deadline,
        ) {
            Renewal::Keep => {}
            Renewal::TakenOver => {
                tracing::warn!(lease = %config.name, "another candidate holds the lease; stepping down");
                return;
            }
            Renewal::DeadlinePassed => {
                tracing::warn!(lease = %config.name, "the lease was not renewed in time; stepping down");
                return;
            }
        }
    }
}

/// What a holder does after a renewal attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Renewal {
    Keep,
    /// Another candidate holds the lease.
    TakenOver,
    /// Attempts have failed for the renew deadline.
    DeadlinePassed,
}

/// A holder's renewals. The renew deadline runs from the first attempt
/// that failed, not from the last renewal: a process that was paused
/// (SIGSTOP, a stalled VM) for longer than the deadline tries again when
/// it runs, and keeps what it runs if that renewal goes through. The
/// renewal is a write conditional on the resourceVersion read, so it goes
/// through only if no other candidate took the lease meanwhile.
#[derive(Debug, Default)]
struct Renewals {
    failing_since: Option<tokio::time::Instant>,
}

impl Renewals {
    /// `answered`: the API answered; `held`: it says this candidate holds
    /// the lease (meaningful only when answered).
    fn after(
        &mut self,
        answered: bool,
        held: bool,
        now: tokio::time::Instant,
        deadline: Duration,
    ) -> Renewal {
        match (answered, held) {
            (true, true) => {
                self.failing_since = None;
                Renewal::Keep
            }
            (true, false) => Renewal::TakenOver,
            (false, _) => {
                let since = *self.failing_since.get_or_insert(now);
                if now.duration_since(since) >= deadline {
                    Renewal::DeadlinePassed
                } else {
                    Renewal::Keep
                }
            }
        }
    }
}

/// A MicroTime as the API writes it.
fn micro(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    const DEADLINE: Duration = Duration::from_secs(10);

    #[test]
    fn a_holder_paused_past_the_deadline_renews_when_it_runs_again() {
        let mut renewals = Renewals::default();
        let start = Instant::now();
        assert_eq!(renewals.after(true, true, start, DEADLINE), Renewal::Keep);
        // Paused for 12 s: the first attempts after it fail (the API's
        // own store is electing a leader), then one goes through.
        let resumed = start + Duration::from_secs(14);
        assert_eq!(
            renewals.after(false, true, resumed, DEADLINE),
            Renewal::Keep
        );
        let later = resumed + Duration::from_secs(4);
        assert_eq!(renewals.after(false, true, later, DEADLINE), Renewal::Keep);
        assert_eq!(
            renewals.after(true, true, later + Duration::from_secs(2), DEADLINE),
            Renewal::Keep
        );
        // And the deadline starts afresh from the next failure.
        let failing = later + Duration::from_secs(30);
        assert_eq!(
            renewals.after(false, true, failing, DEADLINE),
            Renewal::Keep
        );
        assert_eq!(
            renewals.after(false, true, failing + Duration::from_secs(9), DEADLINE),
            Renewal::Keep
        );
    }

    #[test]
    fn a_holder_steps_down_after_failing_for_the_deadline_or_when_taken_over() {
        let mut renewals = Renewals::default();
        let start = Instant::now();
        assert_eq!(renewals.after(false, true, start, DEADLINE), Renewal::Keep);
        assert_eq!(
            renewals.after(false, true, start + DEADLINE, DEADLINE),
            Renewal::DeadlinePassed
        );
        let mut renewals = Renewals::default();
        assert_eq!(
            renewals.after(true, false, start, DEADLINE),
            Renewal::TakenOver
        );
    }
}
