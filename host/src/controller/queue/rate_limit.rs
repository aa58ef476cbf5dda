//! The retry rate limiter of the work queue: client-go's `DefaultTypedControllerRateLimiter`,
//! the larger of a per-key exponential backoff and an overall token bucket.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{self, AtomicU64};
use std::time::Duration;

use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use tokio::time::Instant;

use super::QueueConfig;

/// client-go's `MaxOf(ItemExponentialFailure, Bucket)` rate limiter.
pub(super) struct Limiter<K> {
    base_delay: Duration,
    max_delay: Duration,
    failures: HashMap<K, u32>,
    bucket: Bucket,
}

impl<K> Limiter<K>
where
    K: Clone + Eq + Hash,
{
    pub(super) fn new(config: &QueueConfig, now: Instant) -> Self {
        Self {
            base_delay: config.base_delay,
            max_delay: config.max_delay,
            failures: HashMap::new(),
            bucket: Bucket::new(Quota::per_second(config.qps).allow_burst(config.burst), now),
        }
    }

    /// The delay before `key`'s next retry. Both limiters always count, as in client-go:
    /// the backoff grows and a token is reserved even when the other limiter's delay wins.
    pub(super) fn when(&mut self, key: &K, now: Instant) -> Duration {
        let failures = self.failures.entry(key.clone()).or_insert(0);
        let exponent = *failures;
        *failures = failures.saturating_add(1);
        let backoff = 2u32
            .checked_pow(exponent)
            .and_then(|factor| self.base_delay.checked_mul(factor))
            .map_or(self.max_delay, |delay| delay.min(self.max_delay));
        backoff.max(self.bucket.reserve(now))
    }

    pub(super) fn forget(&mut self, key: &K) {
        self.failures.remove(key);
    }

    pub(super) fn num_requeues(&self, key: &K) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }
}

/// The overall token bucket. governor is the field's GCRA (token bucket) implementation,
/// so we use it instead of hand-rolling one. client-go's `BucketRateLimiter`, however,
/// *reserves* a token and returns the wait until it is available — a retry is delayed,
/// never dropped — while governor only answers "yes" or "not until T" without consuming.
/// We get the reservation by asking again at T: GCRA admits a cell at exactly its
/// earliest time and advances its state from there, which consumes the token that the
/// next caller would otherwise get. To ask "at T" the limiter runs on [`BucketClock`], a
/// clock we set; it also makes the bucket follow tokio's (pausable) clock like the rest
/// of the queue. Only used under the queue's lock, so set-then-check is atomic.
struct Bucket {
    limiter: RateLimiter<NotKeyed, InMemoryState, BucketClock, NoOpMiddleware<Duration>>,
    clock: BucketClock,
    origin: Instant,
}

impl Bucket {
    fn new(quota: Quota, origin: Instant) -> Self {
        let clock = BucketClock::default();
        Self {
            limiter: RateLimiter::direct_with_clock(quota, clock.clone()),
            clock,
            origin,
        }
    }

    /// Take the next token and return how long until it is available. O(1).
    fn reserve(&self, now: Instant) -> Duration {
        let now = now.saturating_duration_since(self.origin);
        self.clock.set(now);
        match self.limiter.check() {
            Ok(()) => Duration::ZERO,
            Err(not_until) => {
                let available = not_until.earliest_possible();
                self.clock.set(available);
                let reserved = self.limiter.check().is_ok();
                debug_assert!(reserved, "GCRA must admit a cell at its earliest time");
                available.saturating_sub(now)
            }
        }
    }
}

/// Time since the bucket's origin, set by [`Bucket::reserve`] before every check.
#[derive(Clone, Debug, Default)]
struct BucketClock {
    nanos: Arc<AtomicU64>,
}

impl BucketClock {
    fn set(&self, since_origin: Duration) {
        let nanos = u64::try_from(since_origin.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.store(nanos, atomic::Ordering::Relaxed);
    }
}

impl Clock for BucketClock {
    type Instant = Duration;

    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(atomic::Ordering::Relaxed))
    }
}
