//! The lessor: which leases exist, their TTLs and attached keys, and when
//! each expires. It never deletes anything itself: it reports expired
//! leases so the owner of the log can propose revokes (later: the leader).

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::{Result, StoreError};

/// etcd's upper bound on a lease TTL, in seconds.
pub const MAX_LEASE_TTL: i64 = 9_000_000_000;

#[derive(Debug, Clone)]
pub struct LessorConfig {
    /// Grants with a shorter TTL get this one (etcd derives 2 s from its
    /// election timeout; a lease must outlive a leader election).
    pub min_ttl: i64,
    /// Leases with more remaining time than this get their remaining TTL
    /// checkpointed through the log, so a restart does not reset them.
    pub checkpoint_interval: Duration,
}

impl Default for LessorConfig {
    fn default() -> Self {
        LessorConfig {
            min_ttl: 2,
            checkpoint_interval: Duration::from_secs(300),
        }
    }
}

#[derive(Debug)]
struct Lease {
    ttl: i64,
    /// Last checkpointed remaining TTL (0: none since the last renewal).
    remaining_checkpoint: i64,
    expiry: Instant,
    keys: BTreeSet<Vec<u8>>,
    /// A revoke has been proposed; do not propose another until this time.
    revoke_retry_at: Option<Instant>,
}

/// Where the lessor reads the time: the real clock, or a simulated one.
pub type Clock = std::sync::Arc<dyn Fn() -> Instant + Send + Sync>;

pub struct Lessor {
    config: LessorConfig,
    leases: Mutex<HashMap<i64, Lease>>,
    clock: Clock,
}

/// How long a proposed revoke may take before the lessor proposes it again.
const REVOKE_RETRY: Duration = Duration::from_secs(3);

impl Lessor {
    pub fn new(config: LessorConfig) -> Self {
        Self::with_clock(config, std::sync::Arc::new(Instant::now))
    }

    pub fn with_clock(config: LessorConfig, clock: Clock) -> Self {
        Lessor {
            config,
            leases: Mutex::new(HashMap::new()),
            clock,
        }
    }

    /// The time on the lessor's clock.
    pub fn now(&self) -> Instant {
        (self.clock)()
    }

    pub fn config(&self) -> &LessorConfig {
        &self.config
    }

    /// The TTL a grant of `ttl` gets: at least the minimum.
    pub fn effective_ttl(&self, ttl: i64) -> Result<i64> {
        if ttl > MAX_LEASE_TTL {
            return Err(StoreError::LeaseTtlTooLarge { max: MAX_LEASE_TTL });
        }
        Ok(ttl.max(self.config.min_ttl))
    }

    pub fn contains(&self, id: i64) -> bool {
        self.leases.lock().contains_key(&id)
    }

    pub fn is_empty(&self) -> bool {
        self.leases.lock().is_empty()
    }

    /// Applies a grant. `remaining` is a checkpointed TTL to resume from
    /// (0: the full TTL).
    pub(crate) fn grant(&self, id: i64, ttl: i64, remaining: i64) {
        let left = if remaining > 0 { remaining } else { ttl };
        let lease = Lease {
            ttl,
            remaining_checkpoint: remaining,
            expiry: self.now() + secs(left),
            keys: BTreeSet::new(),
            revoke_retry_at: None,
        };
        self.leases.lock().insert(id, lease);
    }

    /// Applies a revoke: forgets the lease and returns its keys in order.
    pub(crate) fn revoke(&self, id: i64) -> Option<Vec<Vec<u8>>> {
        let lease = self.leases.lock().remove(&id)?;
        Some(lease.keys.into_iter().collect())
    }

    /// The keys attached to `id`, in key order.
    pub fn keys(&self, id: i64) -> Option<Vec<Vec<u8>>> {
        let leases = self.leases.lock();
        Some(leases.get(&id)?.keys.iter().cloned().collect())
    }

    pub(crate) fn attach(&self, id: i64, key: &[u8]) {
        if let Some(lease) = self.leases.lock().get_mut(&id) {
            lease.keys.insert(key.to_vec());
        }
    }

    pub(crate) fn detach(&self, id: i64, key: &[u8]) {
        if let Some(lease) = self.leases.lock().get_mut(&id) {
            lease.keys.remove(key);
        }
    }

    /// Applies a checkpoint of the remaining TTL.
    pub(crate) fn checkpoint(&self, id: i64, remaining: i64) -> bool {
        match self.leases.lock().get_mut(&id) {
            Some(lease) => {
                lease.remaining_checkpoint = remaining;
                true
            }
            None => false,
        }
    }

    /// A keep-alive: the lease lives a full TTL from now. Returns the TTL,
    /// and whether a stale checkpoint must be reset through the log.
    pub fn renew(&self, id: i64) -> Result<(i64, bool)> {
        let mut leases = self.leases.lock();
        let lease = leases.get_mut(&id).ok_or(StoreError::LeaseNotFound)?;
        if lease.expiry <= self.now() {
            // Expired but not yet revoked: too late to keep it.
            return Err(StoreError::LeaseNotFound);
        }
        lease.expiry = self.now() + secs(lease.ttl);
        Ok((lease.ttl, lease.remaining_checkpoint > 0))
    }

    /// (granted TTL, remaining seconds, keys).
    pub fn time_to_live(&self, id: i64) -> Option<(i64, i64, Vec<Vec<u8>>)> {
        let leases = self.leases.lock();
        let lease = leases.get(&id)?;
        let left = lease.expiry.saturating_duration_since(self.now());
        let remaining = left.as_secs_f64().ceil() as i64;
        Some((lease.ttl, remaining, lease.keys.iter().cloned().collect()))
    }

    pub fn ids(&self) -> Vec<i64> {
        let mut ids: Vec<i64> = self.leases.lock().keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Leases past their expiry that need a revoke proposed, at most `max`.
    /// Each is reported again only if its revoke has not applied in time.
    pub fn take_expired(&self, now: Instant, max: usize) -> Vec<i64> {
        let mut leases = self.leases.lock();
        let mut out = Vec::new();
        for (id, lease) in leases.iter_mut() {
            if out.len() >= max {
                break;
            }
            let waiting = lease.revoke_retry_at.is_some_and(|at| at > now);
            if lease.expiry <= now && !waiting {
                lease.revoke_retry_at = Some(now + REVOKE_RETRY);
                out.push(*id);
            }
        }
        out
    }

    /// Remaining TTLs worth checkpointing: leases with more left than the
    /// checkpoint interval.
    pub fn checkpoints_due(&self, now: Instant) -> Vec<(i64, i64)> {
        let leases = self.leases.lock();
        let interval = self.config.checkpoint_interval;
        leases
            .iter()
            .filter_map(|(id, lease)| {
                let left = lease.expiry.saturating_duration_since(now);
                (left > interval).then_some((*id, left.as_secs() as i64))
            })
            .collect()
    }

    /// Gives every lease at least its remaining TTL from now (a restart, or
    /// later a new leader: no lease may expire because of the change).
    /// Forgets every lease and takes those of an installed snapshot:
    /// (id, granted ttl, checkpointed remaining or 0) and the keys attached.
    pub(crate) fn replace_all(&self, leases: &[(i64, i64, i64)], keys: &[(i64, Vec<u8>)]) {
        self.leases.lock().clear();
        for &(id, ttl, remaining) in leases {
            self.grant(id, ttl, remaining);
        }
        for (id, key) in keys {
            self.attach(*id, key);
        }
    }

    pub fn promote(&self, extend: Duration) {
        let now = self.now();
        for lease in self.leases.lock().values_mut() {
            let left = if lease.remaining_checkpoint > 0 {
                lease.remaining_checkpoint
            } else {
                lease.ttl
            };
            lease.expiry = now + secs(left) + extend;
            lease.revoke_retry_at = None;
        }
    }
}

fn secs(s: i64) -> Duration {
    Duration::from_secs(s.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lessor() -> Lessor {
        Lessor::new(LessorConfig {
            min_ttl: 2,
            checkpoint_interval: Duration::from_secs(60),
        })
    }

    #[test]
    fn ttl_has_a_floor_and_a_ceiling() {
        let l = lessor();
        assert_eq!(l.effective_ttl(1).unwrap(), 2);
        assert_eq!(l.effective_ttl(30).unwrap(), 30);
        assert!(matches!(
            l.effective_ttl(MAX_LEASE_TTL + 1),
            Err(StoreError::LeaseTtlTooLarge { .. })
        ));
    }

    #[test]
    fn expired_leases_are_reported_once_until_retry() {
        let l = lessor();
        l.grant(1, 5, 0);
        l.grant(2, 100, 0);
        let now = Instant::now();
        assert!(l.take_expired(now, 10).is_empty());
        let later = now + Duration::from_secs(6);
        assert_eq!(l.take_expired(later, 10), vec![1]);
        assert!(l.take_expired(later, 10).is_empty(), "revoke in flight");
        assert_eq!(l.take_expired(later + REVOKE_RETRY, 10), vec![1]);
    }

    #[test]
    fn renew_extends_and_flags_checkpoint_reset() {
        let l = lessor();
        l.grant(7, 600, 0);
        assert_eq!(l.renew(7).unwrap(), (600, false));
        assert!(l.checkpoint(7, 120));
        assert_eq!(l.renew(7).unwrap(), (600, true));
        assert!(matches!(l.renew(8), Err(StoreError::LeaseNotFound)));
    }

    #[test]
    fn keys_attach_detach_and_revoke() {
        let l = lessor();
        l.grant(3, 10, 0);
        l.attach(3, b"b");
        l.attach(3, b"a");
        l.attach(4, b"ignored");
        assert_eq!(l.keys(3).unwrap(), vec![b"a".to_vec(), b"b".to_vec()]);
        l.detach(3, b"b");
        assert_eq!(l.revoke(3).unwrap(), vec![b"a".to_vec()]);
        assert!(l.revoke(3).is_none());
        assert!(l.keys(4).is_none());
    }

    #[test]
    fn restored_lease_resumes_from_checkpoint() {
        let l = lessor();
        l.grant(9, 3600, 90);
        let (granted, remaining, _) = l.time_to_live(9).unwrap();
        assert_eq!(granted, 3600);
        assert!((89..=90).contains(&remaining), "{remaining}");
        let due = l.checkpoints_due(Instant::now());
        assert_eq!(due.len(), 1);
    }
}
