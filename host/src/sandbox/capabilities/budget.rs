//! What a guest may spend beyond one reconcile: its write, log and body rates, and the host
//! memory and CPU the host spends on its behalf.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use governor::{DefaultDirectRateLimiter, Quota};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::Rates;

/// Per-guest rates that outlive one reconcile (and one guest version: a hot swap keeps them).
/// Each is a token bucket (governor's GCRA), separate from the host's own client budget.
///
/// What the host spends on a guest's behalf counts against that guest ("host cost"):
/// - memory: bodies being parsed and sent and list results being copied hold permits of
///   `host_memory`, one per KiB, as many as the guest's memory cap (`memoryMiB`) over all its
///   reconciles at once; a request larger than the whole cap is refused, a smaller one waits
///   for permits (within the reconcile's deadline). So the host holds at most one memory cap
///   per guest for it, beside the instances' own memories (concurrency x cap);
/// - CPU: synchronous host work (a list's selector over a cache, parsing a body) is timed and
///   owed to `cpu`, the guest's share; the debt is paid at the guest's next costed call
///   ([`Budget::settle_cpu`]) or epoch tick ([`Budget::cpu_pause`]), by waiting for the share
///   to refill, so a guest that keeps the host busy runs no faster than its share;
/// - parsing: body bytes at `bodyBytesPerSecond`, a body waiting for its bytes.
/// - outbound HTTP: everything the host keeps for a guest's `wasi:http` holds permits of two
///   pools apart from `host_memory`, each a quarter of the memory cap: `http_memory` for the
///   resources the guest keeps (header maps, requests, body channels; booked at once and
///   refused when full) and `http_exchanges` for exchanges (request bodies being read,
///   responses until the guest drops them; waited for within the deadline). So a guest's slow
///   outside API never makes its Kubernetes calls wait for memory, exchanges waiting for
///   memory never make a new request's booking fail, and the host holds at most half a cap
///   for a guest's HTTP. Within each pool, first come first served.
pub struct Budget {
    /// API writes (status patches, applies, deletes): a call waits for a token, bounded by the
    /// reconcile's deadline, like client-go's client-side rate limiter.
    pub(super) writes: DefaultDirectRateLimiter,
    /// Events: refused when the bucket is empty (an event is not worth waiting for).
    pub(super) events: DefaultDirectRateLimiter,
    /// Log lines: dropped (and counted) when the bucket is empty.
    pub(super) logs: DefaultDirectRateLimiter,
    /// Outbound HTTP requests: a request waits for a token, within the reconcile's deadline.
    pub(super) http: DefaultDirectRateLimiter,
    /// CPU, in epoch ticks of guest execution: an instance over the guest's share is paused
    /// at its next tick until the bucket refills (see [`Budget::cpu_pause`]).
    cpu: Option<DefaultDirectRateLimiter>,
    /// The most ticks `cpu` hands out at once (its burst).
    cpu_burst: u32,
    /// Host work done for the guest and not yet taken from `cpu`, in nanoseconds: governor's
    /// buckets cannot go into debt, and the work's cost is known only once it is done.
    pub(super) cpu_owed_ns: AtomicU64,
    /// JSON body bytes, in KiB cells; the burst holds at least one largest body.
    body_kib: DefaultDirectRateLimiter,
    /// Host memory held for the guest, one permit per KiB (see [`HostBytes`]).
    host_memory: Arc<Semaphore>,
    host_memory_kib: usize,
    /// Host memory held for the guest's `wasi:http` resources, one permit per KiB: a quarter
    /// of the memory cap ([`Budget::http_memory`]).
    http_memory: Arc<Semaphore>,
    http_memory_kib: usize,
    /// Host memory held for the guest's HTTP exchanges, one permit per KiB: a quarter of the
    /// memory cap ([`Budget::hold_http`]).
    http_exchanges: Arc<Semaphore>,
    http_exchanges_kib: usize,
}

/// Host memory held on a guest's behalf, from its budget (see [`Budget::hold`]): given back
/// when dropped.
#[must_use = "the memory is counted only while the guard lives"]
#[derive(Debug)]
pub struct HostBytes {
    permits: OwnedSemaphorePermit,
    bytes: usize,
}

impl HostBytes {
    /// What is held, in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// Nanoseconds in one epoch tick, the unit of the CPU share.
pub(super) fn tick_ns() -> u64 {
    u64::try_from(crate::config::EPOCH_TICK.as_nanos()).unwrap_or(5_000_000)
}

impl Budget {
    /// Takes one event from the guest's event rate; false when it is spent (the event is
    /// dropped). The host's own events about the guest's objects count against it too.
    pub(crate) fn take_event(&self) -> bool {
        self.events.check().is_ok()
    }

    pub(crate) fn new(rates: Rates) -> Self {
        // A rate of 0 would refuse everything for ever; the least is one per second.
        let quota = |per_second: u32, burst: u32| {
            let at_least_one = |n| NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN);
            let quota = Quota::per_second(at_least_one(per_second));
            DefaultDirectRateLimiter::direct(quota.allow_burst(at_least_one(burst)))
        };
        // One cell is one epoch tick of guest execution; a tick's worth of wall time counts
        // as CPU. Burst: 100 ms of CPU, so a short reconcile never waits.
        let tick_ms = u32::try_from(crate::config::EPOCH_TICK.as_millis()).unwrap_or(5);
        let cpu_burst = 100 / tick_ms;
        let cpu = rates
            .cpu_millicores
            .map(|millicores| quota(millicores.div_ceil(tick_ms), cpu_burst));
        let body_kib = rates.body_bytes_per_second.div_ceil(1024);
        let largest_body_kib =
            u32::try_from(crate::cluster::validation::MAX_BODY_BYTES.div_ceil(1024))
                .unwrap_or(u32::MAX);
        // `acquire_many` takes a u32, and a semaphore holds at most MAX_PERMITS.
        let host_memory_kib = (rates.host_memory_bytes / 1024)
            .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
        let http_memory_kib = (host_memory_kib / 4).max(1);
        Self {
            writes: quota(rates.writes.per_second, rates.writes.burst),
            events: quota(rates.events.per_second, rates.events.burst),
            logs: quota(rates.log_lines.per_second, rates.log_lines.burst),
            http: quota(rates.http.per_second, rates.http.burst),
            cpu,
            cpu_burst,
            cpu_owed_ns: AtomicU64::new(0),
            body_kib: quota(body_kib, body_kib.max(largest_body_kib)),
            host_memory: Arc::new(Semaphore::new(host_memory_kib)),
            host_memory_kib,
            http_memory: Arc::new(Semaphore::new(http_memory_kib)),
            http_memory_kib,
            http_exchanges: Arc::new(Semaphore::new(http_memory_kib)),
            http_exchanges_kib: http_memory_kib,
        }
    }

    /// How long a running instance of the guest should pause before it runs on: none while
    /// the guest is within its CPU share, host work done for it included. Called by the
    /// runtime at every epoch tick.
    pub(crate) fn cpu_pause(&self) -> Option<Duration> {
        let cpu = self.cpu.as_ref()?;
        // The limiter's own clock: a new `DefaultClock` probes the CPU (CPUID) each time, which
        // at every epoch tick of a paused guest was 3 % of the host's CPU in the bench.
        let wait = |not_until: governor::NotUntil<_>| {
            not_until.wait_time_from(governor::clock::Clock::now(cpu.clock()))
        };
        let claimed = self.claim_owed();
        if let Some(ticks) = NonZeroU32::new(claimed) {
            match cpu.check_n(ticks) {
                Ok(Ok(())) => {}
                Ok(Err(not_until)) => {
                    self.give_back(claimed);
                    return Some(wait(not_until));
                }
                // Never: a claim is at most a burst.
                Err(_) => self.give_back(claimed),
            }
        }
        cpu.check().err().map(wait)
    }

    /// Counts host work done for the guest against its CPU share (paid later, see
    /// [`Budget::settle_cpu`]). Free without a share.
    pub(crate) fn charge_cpu(&self, spent: Duration) {
        if self.cpu.is_some() {
            let ns = u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX);
            self.cpu_owed_ns.fetch_add(ns, Ordering::Relaxed);
        }
    }

    /// Times what runs until the meter is dropped, as host work for the guest.
    pub(super) fn meter(&self) -> CpuMeter<'_> {
        CpuMeter {
            budget: self,
            started: Instant::now(),
        }
    }

    /// Waits until the host work owed by the guest has been taken from its CPU share: called
    /// before the host works for it again. A wait cut short (the reconcile's deadline) leaves
    /// the rest owed.
    pub(crate) async fn settle_cpu(&self) {
        let Some(cpu) = &self.cpu else { return };
        loop {
            let claimed = self.claim_owed();
            let Some(ticks) = NonZeroU32::new(claimed) else {
                return;
            };
            let mut unpaid = Unpaid {
                budget: self,
                ticks: claimed,
            };
            if cpu.until_n_ready(ticks).await.is_err() {
                return; // never: a claim is at most a burst (given back on drop)
            }
            unpaid.ticks = 0;
        }
    }

    /// Takes whole owed ticks off the debt, at most a burst: the caller pays them to `cpu`
    /// or gives them back.
    pub(super) fn claim_owed(&self) -> u32 {
        let tick = tick_ns();
        let mut claimed = 0;
        let _ = self
            .cpu_owed_ns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |owed| {
                claimed = u32::try_from(owed / tick)
                    .unwrap_or(u32::MAX)
                    .min(self.cpu_burst);
                (claimed > 0).then(|| owed - u64::from(claimed) * tick)
            });
        claimed
    }

    pub(super) fn give_back(&self, ticks: u32) {
        self.cpu_owed_ns
            .fetch_add(u64::from(ticks) * tick_ns(), Ordering::Relaxed);
    }

    /// Waits until `bytes` of body may be parsed at the guest's body rate. Errs only for a body
    /// above the bucket, which the size cap prevents.
    pub(super) async fn body_bytes(
        &self,
        bytes: usize,
    ) -> Result<(), governor::InsufficientCapacity> {
        let kib = u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX);
        self.body_kib
            .until_n_ready(NonZeroU32::new(kib).unwrap_or(NonZeroU32::MIN))
            .await
    }

    /// Holds `bytes` of the guest's host-memory budget until the guard is dropped, waiting while
    /// its other reconciles hold the rest. `None` when `bytes` is more than the whole budget:
    /// it could never be held.
    pub(crate) async fn hold(&self, bytes: usize) -> Option<HostBytes> {
        hold_from(&self.host_memory, self.host_memory_kib, bytes).await
    }

    /// The host-memory budget, in bytes: the guest's memory cap.
    pub(crate) fn host_memory_bytes(&self) -> usize {
        self.host_memory_kib * 1024
    }

    /// The pool of the guest's outbound HTTP (KiB permits) and its size in KiB: what
    /// `wasi:http` resources book synchronously.
    pub(crate) fn http_memory(&self) -> (Arc<Semaphore>, usize) {
        (self.http_memory.clone(), self.http_memory_kib)
    }

    /// Holds `bytes` of the guest's memory for HTTP exchanges until the guard is dropped,
    /// waiting while its other exchanges hold the rest; `None` for more than the whole pool.
    pub(crate) async fn hold_http(&self, bytes: usize) -> Option<HostBytes> {
        hold_from(&self.http_exchanges, self.http_exchanges_kib, bytes).await
    }

    /// Grows `held` to `bytes` of the guest's memory for HTTP exchanges, waiting for the difference;
    /// `None` when that is more than the whole pool.
    pub(crate) async fn hold_http_to(
        &self,
        held: Option<HostBytes>,
        bytes: usize,
    ) -> Option<HostBytes> {
        let had = held.as_ref().map_or(0, |h| h.permits.num_permits());
        let kib = bytes.div_ceil(1024);
        if kib > self.http_exchanges_kib {
            return None;
        }
        let Some(mut held) = held else {
            return self.hold_http(bytes).await;
        };
        if kib > had {
            let more = self
                .http_exchanges
                .clone()
                .acquire_many_owned(u32::try_from(kib - had).ok()?)
                .await
                .ok()?;
            held.permits.merge(more);
        }
        held.bytes = bytes;
        Some(held)
    }

    /// Holds `bytes` of the guest's memory for HTTP exchanges if it is free now.
    pub(crate) fn try_hold_http(&self, bytes: usize) -> Option<HostBytes> {
        let kib = u32::try_from(bytes.div_ceil(1024)).ok()?;
        let permits = self
            .http_exchanges
            .clone()
            .try_acquire_many_owned(kib)
            .ok()?;
        Some(HostBytes { permits, bytes })
    }

    /// The guest's memory for HTTP exchanges, in bytes.
    pub(crate) fn http_exchange_bytes(&self) -> usize {
        self.http_exchanges_kib * 1024
    }
}

impl HostBytes {
    /// Keeps `bytes` (rounded up to KiB) and gives the rest back.
    pub(crate) fn shrink_to(&mut self, bytes: usize) {
        let keep = bytes.div_ceil(1024);
        let now = self.permits.num_permits();
        if keep < now {
            drop(self.permits.split(now - keep));
            self.bytes = bytes;
        }
    }
}

/// `bytes` of `pool` (KiB permits, `kib` of them), waited for; `None` for more than the pool.
async fn hold_from(pool: &Arc<Semaphore>, kib: usize, bytes: usize) -> Option<HostBytes> {
    let wanted = bytes.div_ceil(1024);
    if wanted > kib {
        return None;
    }
    let permits = pool
        .clone()
        .acquire_many_owned(u32::try_from(wanted).ok()?)
        .await
        .ok()?;
    Some(HostBytes { permits, bytes })
}

/// Owed ticks claimed for payment; given back if the wait is dropped before it is paid.
struct Unpaid<'a> {
    budget: &'a Budget,
    ticks: u32,
}

impl Drop for Unpaid<'_> {
    fn drop(&mut self) {
        if self.ticks > 0 {
            self.budget.give_back(self.ticks);
        }
    }
}

/// Charges the time from its creation to its drop to the guest's CPU share.
pub(super) struct CpuMeter<'a> {
    budget: &'a Budget,
    started: Instant,
}

impl Drop for CpuMeter<'_> {
    fn drop(&mut self) {
        self.budget.charge_cpu(self.started.elapsed());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guest_over_its_cpu_share_is_told_to_pause() {
        let rates = Rates {
            cpu_millicores: Some(100),
            ..Rates::default()
        };
        let budget = Budget::new(rates);
        // A burst of 100 ms of CPU (20 ticks) passes; then 0.1 core is 20 ticks a second.
        let paused = (0..40).filter_map(|_| budget.cpu_pause()).count();
        assert!(paused >= 19, "{paused}");
        let pause = budget.cpu_pause().expect("over its share");
        assert!(pause <= Duration::from_millis(60), "{pause:?}");
        let unlimited = Budget::new(Rates::unlimited());
        assert!((0..1000).all(|_| unlimited.cpu_pause().is_none()));
    }

    fn owed_ticks(budget: &Budget) -> u64 {
        budget.cpu_owed_ns.load(Ordering::Relaxed) / tick_ns()
    }

    #[test]
    fn host_work_done_for_a_guest_is_taken_from_its_cpu_share() {
        let budget = Budget::new(Rates {
            cpu_millicores: Some(100),
            ..Rates::default()
        });
        assert!(budget.cpu_pause().is_none(), "within its share");
        // A second of host work at 0.1 core: 200 ticks owed, 20 a second.
        budget.charge_cpu(Duration::from_secs(1));
        let pause = budget.cpu_pause().expect("the guest owes host work");
        assert!(pause > Duration::ZERO);
        assert!(owed_ticks(&budget) >= 180, "{}", owed_ticks(&budget));
        let unlimited = Budget::new(Rates::unlimited());
        unlimited.charge_cpu(Duration::from_secs(10));
        assert!(unlimited.cpu_pause().is_none(), "no share, nothing owed");
    }

    #[tokio::test]
    async fn a_guest_that_owes_host_work_waits_for_its_share_and_a_cut_wait_stays_owed() {
        let budget = Budget::new(Rates {
            cpu_millicores: Some(1000),
            ..Rates::default()
        });
        // 60 ticks: 20 at once (the burst), 40 more at 200 a second.
        budget.charge_cpu(Duration::from_millis(300));
        let started = Instant::now();
        budget.settle_cpu().await;
        assert!(
            started.elapsed() >= Duration::from_millis(150),
            "paid 300 ms of host work in {:?}",
            started.elapsed()
        );
        assert_eq!(owed_ticks(&budget), 0);
        // The reconcile's deadline cuts the wait: what is not paid stays owed.
        budget.charge_cpu(Duration::from_secs(2));
        let cut = tokio::time::timeout(Duration::from_millis(50), budget.settle_cpu()).await;
        assert!(cut.is_err(), "2 s of host work paid within 50 ms");
        assert!(owed_ticks(&budget) >= 350, "{}", owed_ticks(&budget));
    }

    #[tokio::test]
    async fn host_memory_held_for_a_guest_never_exceeds_its_memory_cap() {
        let budget = Budget::new(Rates {
            host_memory_bytes: 1 << 20,
            ..Rates::default()
        });
        assert_eq!(budget.host_memory_bytes(), 1 << 20);
        assert!(
            budget.hold(2 << 20).await.is_none(),
            "more than the whole cap"
        );
        let first = budget.hold(600 << 10).await.expect("fits");
        assert_eq!(first.bytes(), 600 << 10);
        let waited = tokio::time::timeout(Duration::from_millis(100), budget.hold(600 << 10)).await;
        assert!(waited.is_err(), "held beside the first, over the cap");
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(5), budget.hold(600 << 10)).await;
        assert!(
            second.is_ok_and(|held| held.is_some()),
            "once the first is given back"
        );
    }

    #[tokio::test]
    async fn http_exchanges_resources_and_kubernetes_calls_hold_separate_pools() {
        let budget = Budget::new(Rates {
            host_memory_bytes: 4 << 20,
            ..Rates::default()
        });
        assert_eq!(
            budget.http_exchange_bytes(),
            1 << 20,
            "a quarter of the cap"
        );
        let mut exchange = budget.hold_http(1 << 20).await.expect("the whole pool");
        // Kubernetes calls hold the whole cap beside it, and resources book their own quarter.
        let call = tokio::time::timeout(Duration::from_millis(100), budget.hold(4 << 20)).await;
        assert!(
            call.is_ok_and(|held| held.is_some()),
            "a Kubernetes call waited"
        );
        let (resources, kib) = budget.http_memory();
        assert_eq!((resources.available_permits(), kib), (1024, 1024));
        // Another exchange waits until the first gives memory back.
        let waited =
            tokio::time::timeout(Duration::from_millis(100), budget.hold_http(512 << 10)).await;
        assert!(waited.is_err(), "held beside the first");
        exchange.shrink_to(100 << 10);
        assert_eq!(exchange.bytes(), 100 << 10);
        let second =
            tokio::time::timeout(Duration::from_secs(5), budget.hold_http(512 << 10)).await;
        assert!(second.is_ok_and(|held| held.is_some()), "once shrunk");
        assert!(
            budget.hold_http(2 << 20).await.is_none(),
            "more than the pool"
        );
        let grown = budget.hold_http_to(None, 10 << 10).await.expect("fits");
        let grown = budget
            .hold_http_to(Some(grown), 300 << 10)
            .await
            .expect("fits");
        assert_eq!(grown.bytes(), 300 << 10);
    }
}
