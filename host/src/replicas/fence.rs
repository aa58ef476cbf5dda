//! The write fence: whether this replica may still write. Closed when the host loses its lease,
//! is fenced out of the shard ring or shuts down, before its controllers are stopped, so a
//! reconcile still running cannot write after that. Opened by `run`'s ownership
//! (`crate::manager`), checked by the cluster provider immediately before every write.
//!
//! A replica that holds a lease also gives the fence a **deadline**: the moment its last
//! successful renewal was sent plus the lease duration minus a margin (the earliest another
//! replica could take over, less the margin). The check reads the monotonic clock, so a replica
//! that was stopped (`SIGSTOP`, a frozen VM, a long GC pause of the node) and resumes after its
//! lease ran out sends nothing, even before its election or ring task has run again to close
//! the fence. What no client-side check can prevent is a write already sent before the stop and
//! delivered after it; `docs/reliability.md` says what that leaves.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// Open by default, without a deadline: a host running alone always writes.
#[derive(Clone, Debug)]
pub struct WriteFence(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    open: AtomicBool,
    /// Nanoseconds after [`epoch`] until which writes may be sent; `u64::MAX` is no deadline.
    deadline: AtomicU64,
}

const NO_DEADLINE: u64 = u64::MAX;

impl Default for WriteFence {
    fn default() -> Self {
        Self(Arc::new(Inner {
            open: AtomicBool::new(true),
            deadline: AtomicU64::new(NO_DEADLINE),
        }))
    }
}

/// The origin of deadlines kept as integers (an `Instant` has no atomic form).
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn nanos_since_epoch(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(epoch()).as_nanos()).unwrap_or(NO_DEADLINE - 1)
}

impl WriteFence {
    pub fn close(&self) {
        self.0.open.store(false, Ordering::SeqCst);
    }

    pub fn open(&self) {
        self.0.open.store(true, Ordering::SeqCst);
    }

    /// Writes may be sent until `deadline` at most, whatever [`Self::open`] says; a lease
    /// holder moves it on with every renewal.
    pub(crate) fn hold_until(&self, deadline: Instant) {
        self.0
            .deadline
            .store(nanos_since_epoch(deadline), Ordering::SeqCst);
    }

    /// When writes must stop unless the lease is renewed meanwhile; `None` without a lease.
    pub fn deadline(&self) -> Option<Instant> {
        let nanos = self.0.deadline.load(Ordering::SeqCst);
        (nanos != NO_DEADLINE).then(|| epoch() + std::time::Duration::from_nanos(nanos))
    }

    /// Whether a write may be sent now: open, and before the deadline if there is one.
    pub fn is_open(&self) -> bool {
        if disabled_for_tests() {
            return true;
        }
        self.0.open.load(Ordering::SeqCst)
            && self.0.deadline.load(Ordering::SeqCst) > nanos_since_epoch(Instant::now())
    }
}

/// The test-only switch (debug builds only): `RECONCILER_HOST_TEST_BREAK_FENCE=1` makes the fence
/// always open and the host ignore a lost lease or a ring fence (`crate::manager`): a deliberately
/// broken build, with no fencing at all, that the robustness checker must catch. Release builds
/// do not read it.
pub const BREAK_FENCE_ENV: &str = "RECONCILER_HOST_TEST_BREAK_FENCE";

/// Whether the test-only switch is on; read once.
pub(crate) fn disabled_for_tests() -> bool {
    #[cfg(debug_assertions)]
    {
        static BROKEN: OnceLock<bool> = OnceLock::new();
        *BROKEN.get_or_init(|| std::env::var_os(BREAK_FENCE_ENV).is_some_and(|v| v == "1"))
    }
    #[cfg(not(debug_assertions))]
    false
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn open_without_a_deadline_until_closed() {
        let fence = WriteFence::default();
        assert!(fence.is_open());
        assert_eq!(fence.deadline(), None);
        fence.close();
        assert!(!fence.is_open());
        fence.open();
        assert!(fence.is_open());
    }

    #[test]
    fn a_passed_deadline_shuts_an_open_fence_until_a_renewal_moves_it() {
        let fence = WriteFence::default();
        fence.hold_until(Instant::now() + Duration::from_mins(1));
        assert!(fence.is_open());
        // As after a SIGSTOP outlasting the lease: nobody closed the fence, the clock did.
        let past = Instant::now().checked_sub(Duration::from_millis(1));
        fence.hold_until(past.expect("a moment ago"));
        assert!(!fence.is_open(), "a deadline in the past must stop writes");
        fence.hold_until(Instant::now() + Duration::from_mins(1));
        assert!(fence.is_open());
        fence.close();
        assert!(!fence.is_open(), "closed wins over a deadline ahead");
    }

    #[test]
    fn the_deadline_reads_back_to_the_nanosecond() {
        let fence = WriteFence::default();
        let at = Instant::now() + Duration::from_secs(5);
        fence.hold_until(at);
        let back = fence.deadline().expect("a deadline");
        assert!(back <= at && at - back < Duration::from_micros(1));
    }
}
