//! The work queue's retry rates (`crate::controller::queue`), set by a grant's `limits`.

use std::num::NonZeroU32;
use std::time::Duration;

/// How fast retries may come. The defaults are client-go's
/// `DefaultTypedControllerRateLimiter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    /// Delay of a key's first rate-limited retry; doubles with every further failure.
    pub base_delay: Duration,
    /// Ceiling of the per-key backoff.
    pub max_delay: Duration,
    /// Sustained rate of rate-limited retries over all keys, per second.
    pub qps: NonZeroU32,
    /// Retries allowed at once before `qps` applies.
    pub burst: NonZeroU32,
    /// Low-priority adds go behind normal ones (see `crate::controller::queue`); off: one FIFO.
    pub priorities: bool,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_secs(1000),
            qps: const { NonZeroU32::new(10).unwrap() },
            burst: const { NonZeroU32::new(100).unwrap() },
            priorities: true,
        }
    }
}
