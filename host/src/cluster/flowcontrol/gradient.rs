//! The limit itself: a gradient limiter on write latency (Netflix's `GradientLimit`), with a
//! multiplicative decrease when the API server says it is overloaded.
//!
//! Written here rather than taken from a crate: the crates that offer one (tower-acc 0.1,
//! congestion-limiter 0.1) are young single-maintainer releases whose gradient ignores errors,
//! and none takes a `Retry-After`; the rule is the thirty lines of [`Gradient::sample`].
//!
//! The rule, per answered write while the limit is in use (at least half of it in flight):
//!
//! ```text
//! gradient = clamp(tolerance × no-load latency / recent latency, 0.5, 1)
//! limit    = (1 − s) × limit + s × (gradient × limit + 1)          (s = 0.2)
//! ```
//!
//! While writes take no longer than `tolerance` times the no-load latency the limit grows by
//! up to one per write; beyond that it settles where the queue the host builds in the API
//! server is about one write deep: on a server whose throughput is flat past a few writers,
//! latency grows with every write added, and the limit stops there instead of queueing more.
//!
//! The no-load latency is the least latency of a write sent alone (the only one in flight)
//! during a probe. The least latency seen with others in flight creeps up with the limit itself
//! (a baseline taken under load lets the limit ratchet up to its maximum), so the limit probes:
//! when a window of [`WINDOW`] writes had no probe, it lets one write out at a time until
//! [`PROBE_WRITES`] were answered alone (BBR's `ProbeRTT`; about a hundredth of a second per
//! window of a few seconds). The first writes after start are such a probe. A probe holds the
//! writes back, not the work ([`Gradient::steady_limit`] is what an adaptive guest's keys
//! follow), so it measures with the host as busy as usual. A write that is alone because the
//! host has nothing else to do is no probe: on a machine whose cores the host shares with the
//! API server, an idle host lends the server its CPU, and the lower latency it measures then is
//! one the busy host never sees (issue 42: such a baseline held the limit at 2).

use std::time::Duration;

/// Writes per window of the no-load latency's minimum.
pub(super) const WINDOW: u32 = 2000;
/// Writes sent alone to measure the no-load latency when a window had no probe.
pub(super) const PROBE_WRITES: u32 = 3;
/// Weight of a new limit against the current one.
const SMOOTHING: f64 = 0.2;
/// Weight of a new sample in the recent latency.
const RECENT: f64 = 0.2;

/// The bounds and the tolerance; see [`super::Settings`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Bounds {
    pub(super) initial: f64,
    pub(super) min: f64,
    pub(super) max: f64,
    pub(super) tolerance: f64,
}

#[derive(Debug, Clone)]
pub(super) struct Gradient {
    bounds: Bounds,
    limit: f64,
    /// Smoothed latency of recent writes, in seconds.
    recent: Option<f64>,
    /// Least latency of a probe's write: in the current window, and in the last window that
    /// had a probe.
    alone_min: f64,
    previous_alone_min: f64,
    in_window: u32,
    /// Writes still to be answered alone before the limit applies again (a probe).
    probing: u32,
}

impl Gradient {
    pub(super) fn new(bounds: Bounds) -> Self {
        Self {
            limit: bounds.initial.clamp(bounds.min, bounds.max),
            bounds,
            recent: None,
            alone_min: f64::INFINITY,
            previous_alone_min: f64::INFINITY,
            in_window: 0,
            probing: PROBE_WRITES,
        }
    }

    /// The writes allowed in flight now: one while probing.
    pub(super) fn limit(&self) -> usize {
        if self.probing > 0 {
            return 1;
        }
        self.steady_limit()
    }

    /// The limit as if no probe were running: how many keys an adaptive guest may have in
    /// progress. A probe holds writes back, not the work that leads to them, so the host
    /// stays as busy as usual while it measures.
    pub(super) fn steady_limit(&self) -> usize {
        // A positive number no larger than `max`, which came from a u32.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let limit = self.limit.floor() as usize;
        limit.max(1)
    }

    /// The no-load latency as far as it is known.
    #[cfg(test)]
    pub(super) fn no_load(&self) -> Option<Duration> {
        let least = self.alone_min.min(self.previous_alone_min);
        least.is_finite().then(|| Duration::from_secs_f64(least))
    }

    /// A write was answered after `latency` with `in_flight` writes out (itself included).
    pub(super) fn sample(&mut self, latency: Duration, in_flight: usize) {
        let seconds = latency.as_secs_f64().max(1e-6);
        if in_flight <= 1 && self.probing > 0 {
            self.alone_min = self.alone_min.min(seconds);
            self.probing -= 1;
        }
        self.in_window += 1;
        if self.in_window >= WINDOW {
            self.in_window = 0;
            if self.alone_min.is_finite() {
                self.previous_alone_min = self.alone_min;
                self.alone_min = f64::INFINITY;
            } else {
                self.probing = PROBE_WRITES;
            }
        }
        let recent = self
            .recent
            .map_or(seconds, |r| (1.0 - RECENT) * r + RECENT * seconds);
        self.recent = Some(recent);
        let no_load = self.alone_min.min(self.previous_alone_min);
        // An idle host says nothing about what the server would take, nor does a probe.
        #[allow(clippy::cast_precision_loss)]
        if self.probing > 0 || !no_load.is_finite() || (in_flight as f64) * 2.0 < self.limit {
            return;
        }
        let gradient = (self.bounds.tolerance * no_load / recent).clamp(0.5, 1.0);
        let next = gradient * self.limit + 1.0;
        self.limit = ((1.0 - SMOOTHING) * self.limit + SMOOTHING * next)
            .clamp(self.bounds.min, self.bounds.max);
    }

    /// The server refused a write as overloaded (429, 503): halve the limit.
    pub(super) fn overloaded(&mut self) {
        self.limit = (self.limit / 2.0).clamp(self.bounds.min, self.bounds.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds() -> Bounds {
        Bounds {
            initial: 4.0,
            min: 1.0,
            max: 64.0,
            tolerance: 2.0,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_first_writes_go_alone_to_measure_the_no_load_latency() {
        let mut g = Gradient::new(bounds());
        for _ in 0..PROBE_WRITES {
            assert_eq!(g.limit(), 1);
            g.sample(ms(2), 1);
        }
        assert_eq!(g.limit(), 4);
        assert_eq!(g.no_load(), Some(ms(2)));
    }

    #[test]
    fn steady_latency_with_the_limit_in_use_grows_the_limit_up_to_its_maximum() {
        let mut g = Gradient::new(bounds());
        for _ in 0..1500 {
            let in_flight = g.limit();
            g.sample(ms(2), in_flight);
        }
        assert_eq!(g.limit(), 64);
    }

    #[test]
    fn an_idle_host_does_not_grow_the_limit() {
        let mut g = Gradient::new(bounds());
        for _ in 0..1000 {
            g.sample(ms(2), 1);
        }
        assert_eq!(g.limit(), 4);
    }

    /// A server that answers `limit` writes in flight after `limit × 1.25 ms` (flat throughput
    /// past two writers, 2 ms alone): the limit settles, well short of the maximum, where
    /// latency is a few times the no-load latency.
    #[test]
    fn latency_that_grows_with_the_writes_in_flight_stops_the_limit() {
        let mut g = Gradient::new(bounds());
        let latency = |in_flight: usize| {
            let queued =
                Duration::from_micros(1250).saturating_mul(u32::try_from(in_flight).unwrap());
            queued.max(ms(2))
        };
        let mut limits = Vec::new();
        for _ in 0..5 * WINDOW {
            let in_flight = g.limit();
            g.sample(latency(in_flight), in_flight);
            limits.push(g.limit());
        }
        // Past the first window, outside the probes (one write at a time) the limit stays put.
        let settled: Vec<usize> = limits[WINDOW as usize..]
            .iter()
            .copied()
            .filter(|l| *l > 1)
            .collect();
        assert!(
            settled.iter().all(|l| (3..=8).contains(l)),
            "settled between {:?} and {:?}",
            settled.iter().min(),
            settled.iter().max()
        );
        assert!(
            settled.len() > limits.len() - WINDOW as usize - 100,
            "few probes"
        );
        assert_eq!(g.no_load(), Some(ms(2)));
    }

    #[test]
    fn much_slower_writes_shrink_the_limit() {
        let mut g = Gradient::new(Bounds {
            initial: 32.0,
            ..bounds()
        });
        for _ in 0..PROBE_WRITES {
            g.sample(ms(2), 1);
        }
        for _ in 0..50 {
            g.sample(ms(2), 32);
        }
        let before = g.limit();
        for _ in 0..50 {
            g.sample(ms(40), before);
        }
        assert!(g.limit() < before / 2, "{} from {before}", g.limit());
    }

    #[test]
    fn a_write_alone_outside_a_probe_does_not_lower_the_no_load_latency() {
        let mut g = Gradient::new(bounds());
        for _ in 0..PROBE_WRITES {
            g.sample(ms(4), 1);
        }
        // The host idle between two changes: its lone write is answered faster, the server
        // having the CPU to itself.
        g.sample(ms(1), 1);
        assert_eq!(g.no_load(), Some(ms(4)));
    }

    #[test]
    fn a_probe_holds_the_writes_to_one_and_leaves_the_steady_limit_as_it_was() {
        let mut g = Gradient::new(Bounds {
            initial: 6.0,
            ..bounds()
        });
        assert_eq!((g.limit(), g.steady_limit()), (1, 6), "the first probe");
        for _ in 0..PROBE_WRITES {
            g.sample(ms(2), 1);
        }
        assert_eq!((g.limit(), g.steady_limit()), (6, 6));
    }

    #[test]
    fn an_overload_halves_the_limit_and_never_below_the_minimum() {
        let mut g = Gradient::new(Bounds {
            initial: 10.0,
            ..bounds()
        });
        for _ in 0..PROBE_WRITES {
            g.sample(ms(2), 1);
        }
        g.overloaded();
        assert_eq!(g.limit(), 5);
        for _ in 0..10 {
            g.overloaded();
        }
        assert_eq!(g.limit(), 1);
    }
}
