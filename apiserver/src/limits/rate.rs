//! A token bucket per client: `qps` tokens a second up to `burst`, one
//! per request. Buckets of idle clients (full again) are forgotten when
//! the table grows, so a scan from many addresses costs bounded memory.

use super::Client;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Clients remembered before idle ones are swept out.
const SWEEP_AT: usize = 4096;

#[derive(Clone)]
pub struct ClientBuckets {
    qps: f64,
    burst: f64,
    buckets: Arc<Mutex<HashMap<Client, Bucket>>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    updated: Instant,
}

impl ClientBuckets {
    pub fn new(qps: f64, burst: u32) -> ClientBuckets {
        ClientBuckets {
            qps,
            burst: f64::from(burst),
            buckets: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Takes a token of `client`'s bucket; `Err` with how long until one
    /// is there when it is empty.
    pub fn take(&self, client: &Client) -> Result<(), Duration> {
        self.take_at(client, Instant::now())
    }

    fn take_at(&self, client: &Client, now: Instant) -> Result<(), Duration> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() >= SWEEP_AT && !buckets.contains_key(client) {
            let (qps, burst) = (self.qps, self.burst);
            buckets.retain(|_, b| refilled(b, now, qps, burst) < burst);
        }
        let bucket = buckets.entry(client.clone()).or_insert(Bucket {
            tokens: self.burst,
            updated: now,
        });
        bucket.tokens = refilled(bucket, now, self.qps, self.burst);
        bucket.updated = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        let missing = 1.0 - bucket.tokens;
        Err(Duration::from_secs_f64(missing / self.qps))
    }

    /// Clients with a bucket.
    pub fn clients(&self) -> usize {
        self.buckets.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

fn refilled(bucket: &Bucket, now: Instant, qps: f64, burst: f64) -> f64 {
    let elapsed = now.saturating_duration_since(bucket.updated).as_secs_f64();
    (bucket.tokens + elapsed * qps).min(burst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    #[test]
    fn a_client_gets_its_burst_then_its_rate() {
        let buckets = ClientBuckets::new(10.0, 3);
        let client = &Client::Address("10.0.0.1".parse().unwrap());
        let other = &Client::User("alice".into());
        let start = Instant::now();
        for _ in 0..3 {
            buckets.take_at(client, start).unwrap();
        }
        let wait = buckets.take_at(client, start).unwrap_err();
        assert_eq!(wait, Duration::from_millis(100));
        // Another client has its own bucket.
        buckets.take_at(other, start).unwrap();
        // 100 ms later one token is back, and only one.
        let later = start + Duration::from_millis(100);
        buckets.take_at(client, later).unwrap();
        assert!(buckets.take_at(client, later).is_err());
        // Idle for long, the bucket is full but no fuller than the burst.
        let much_later = start + Duration::from_secs(60);
        for _ in 0..3 {
            buckets.take_at(client, much_later).unwrap();
        }
        assert!(buckets.take_at(client, much_later).is_err());
    }

    #[test]
    fn idle_clients_are_forgotten_when_the_table_grows() {
        let buckets = ClientBuckets::new(1000.0, 10);
        let start = Instant::now();
        for i in 0..SWEEP_AT as u32 {
            buckets
                .take_at(&Client::Address(IpAddr::from(i.to_be_bytes())), start)
                .unwrap();
        }
        assert_eq!(buckets.clients(), SWEEP_AT);
        // A second later every bucket is full again: a new client sweeps
        // them all out.
        let later = start + Duration::from_secs(1);
        buckets
            .take_at(&Client::Address("192.168.0.1".parse().unwrap()), later)
            .unwrap();
        assert_eq!(buckets.clients(), 1);
    }
}
