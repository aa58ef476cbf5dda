//! `limits:` and `defaults:`: deadlines, memory, rates and bursts per guest, and the ceiling a
//! configuration's `defaults` or a tenant rule puts on them.

use std::time::Duration;

use serde::Deserialize;

use super::{DEFAULT_DEADLINE, DEFAULT_INSTANCE_IDLE, DEFAULT_MEMORY_MIB, QueueConfig};

/// Per-guest limits. Unset fields fall back to `defaults:` and then to built-in values.
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Limits {
    /// Wall-clock deadline of one reconcile, e.g. `2s`, `500ms`.
    #[serde(default, with = "humantime_serde")]
    pub deadline: Option<Duration>,
    /// Linear memory cap of one instance in MiB.
    #[serde(rename = "memoryMiB", alias = "memoryMib")]
    pub memory_mib: Option<u64>,
    /// Keys reconciled at once (overrides the manifest's concurrency when lower).
    pub concurrency: Option<u32>,
    /// Overall retry rate of the guest's queue (token bucket).
    pub qps: Option<u32>,
    pub burst: Option<u32>,
    /// API writes per second the guest may make (status patches, applies, deletes); a write
    /// beyond the rate waits, within the reconcile's deadline.
    pub writes_per_second: Option<u32>,
    pub write_burst: Option<u32>,
    /// Events per second; beyond the rate an event is refused with `unavailable`.
    pub events_per_second: Option<u32>,
    pub event_burst: Option<u32>,
    /// Log lines per second; beyond the rate lines are dropped and counted.
    pub log_lines_per_second: Option<u32>,
    pub log_burst: Option<u32>,
    /// CPU the guest's running instances may use together, in thousandths of a core
    /// (`500` = half a core); beyond it they are paused at their next epoch tick until the
    /// budget refills. Default: one core. Host work done for the guest (label selectors
    /// evaluated over a cache, bodies parsed) is taken from the same share.
    pub cpu_millicores: Option<u32>,
    /// JSON body bytes (status patches, applies) per second the host parses for the guest;
    /// beyond the rate a body waits, within the reconcile's deadline. Default: 8 MiB/s (see
    /// [`Rates::default`]).
    pub body_bytes_per_second: Option<u32>,
    /// Outbound HTTP requests per second (`http:` in the grant); a request beyond the rate
    /// waits, within the reconcile's deadline.
    pub http_per_second: Option<u32>,
    pub http_burst: Option<u32>,
    /// Opt-in instance reuse: one instance serves up to this many reconciles of the guest on
    /// one worker (1, the default: a fresh instance per reconcile). State can then survive
    /// from one key to the next of the same guest; guests stay apart (see docs/security.md).
    pub instance_reuse: Option<u32>,
    /// A kept instance unused this long is dropped (default 30 s).
    #[serde(default, with = "humantime_serde")]
    pub instance_idle: Option<Duration>,
}

impl Limits {
    /// Unset fields taken from `fallback`.
    #[must_use]
    pub(crate) fn or(&self, fallback: &Limits) -> Limits {
        Limits {
            deadline: self.deadline.or(fallback.deadline),
            memory_mib: self.memory_mib.or(fallback.memory_mib),
            concurrency: self.concurrency.or(fallback.concurrency),
            qps: self.qps.or(fallback.qps),
            burst: self.burst.or(fallback.burst),
            writes_per_second: self.writes_per_second.or(fallback.writes_per_second),
            write_burst: self.write_burst.or(fallback.write_burst),
            events_per_second: self.events_per_second.or(fallback.events_per_second),
            event_burst: self.event_burst.or(fallback.event_burst),
            log_lines_per_second: self.log_lines_per_second.or(fallback.log_lines_per_second),
            log_burst: self.log_burst.or(fallback.log_burst),
            cpu_millicores: self.cpu_millicores.or(fallback.cpu_millicores),
            body_bytes_per_second: self
                .body_bytes_per_second
                .or(fallback.body_bytes_per_second),
            http_per_second: self.http_per_second.or(fallback.http_per_second),
            http_burst: self.http_burst.or(fallback.http_burst),
            instance_reuse: self.instance_reuse.or(fallback.instance_reuse),
            instance_idle: self.instance_idle.or(fallback.instance_idle),
        }
    }

    /// The reuse policy, if the guest opted in (`instanceReuse` above 1).
    pub(crate) fn reuse(&self) -> Option<Reuse> {
        let uses = self.instance_reuse.filter(|n| *n > 1)?;
        Some(Reuse {
            uses,
            idle: self.instance_idle.unwrap_or(DEFAULT_INSTANCE_IDLE),
        })
    }

    /// The limits this one sets above `ceiling` (unset there: the built-in value), and a
    /// concurrency above `max_concurrency`: one entry per limit, naming both values. A limit
    /// left unset here takes the host's default, which is not above the ceiling's own source.
    pub(crate) fn above(&self, ceiling: &Limits, max_concurrency: u32) -> Vec<String> {
        let mut above = Vec::new();
        let mut check = |name: &str, mine: Option<u64>, cap: u64| {
            if let Some(mine) = mine.filter(|m| *m > cap) {
                above.push(format!("limits.{name} {mine} (at most {cap})"));
            }
        };
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        check(
            "deadline (ms)",
            self.deadline.map(ms),
            ms(ceiling.deadline()),
        );
        check(
            "memoryMiB",
            self.memory_mib,
            ceiling.memory_mib.unwrap_or(DEFAULT_MEMORY_MIB as u64),
        );
        let concurrency = ceiling
            .concurrency
            .map_or(max_concurrency, |c| c.min(max_concurrency));
        check(
            "concurrency",
            self.concurrency.map(u64::from),
            u64::from(concurrency),
        );
        let u32s = self.rate_limits(ceiling);
        // No reuse unless the ceiling allows it: it lets state pass between keys.
        check(
            "instanceReuse",
            self.instance_reuse.map(u64::from),
            u64::from(ceiling.instance_reuse.unwrap_or(1)),
        );
        for (name, mine, cap, built_in) in u32s {
            check(
                name,
                mine.map(u64::from),
                u64::from(cap.unwrap_or(built_in)),
            );
        }
        above
    }

    /// The rates and bursts, each as (name, this value, the ceiling's, the built-in value).
    fn rate_limits(&self, ceiling: &Limits) -> [(&'static str, Option<u32>, Option<u32>, u32); 12] {
        let (rates, queue) = (Rates::default(), QueueConfig::default());
        [
            (
                "httpPerSecond",
                self.http_per_second,
                ceiling.http_per_second,
                rates.http_per_second,
            ),
            (
                "httpBurst",
                self.http_burst,
                ceiling.http_burst,
                rates.http_burst,
            ),
            ("qps", self.qps, ceiling.qps, queue.qps.get()),
            ("burst", self.burst, ceiling.burst, queue.burst.get()),
            (
                "writesPerSecond",
                self.writes_per_second,
                ceiling.writes_per_second,
                rates.writes_per_second,
            ),
            (
                "writeBurst",
                self.write_burst,
                ceiling.write_burst,
                rates.write_burst,
            ),
            (
                "eventsPerSecond",
                self.events_per_second,
                ceiling.events_per_second,
                rates.events_per_second,
            ),
            (
                "eventBurst",
                self.event_burst,
                ceiling.event_burst,
                rates.event_burst,
            ),
            (
                "logLinesPerSecond",
                self.log_lines_per_second,
                ceiling.log_lines_per_second,
                rates.log_lines_per_second,
            ),
            (
                "logBurst",
                self.log_burst,
                ceiling.log_burst,
                rates.log_burst,
            ),
            (
                "cpuMillicores",
                self.cpu_millicores,
                ceiling.cpu_millicores,
                rates.cpu_millicores.unwrap_or(u32::MAX),
            ),
            (
                "bodyBytesPerSecond",
                self.body_bytes_per_second,
                ceiling.body_bytes_per_second,
                rates.body_bytes_per_second,
            ),
        ]
    }

    /// These limits with none above `ceiling`, set or not: a limit left unset would take a
    /// default or a built-in value that may exceed the ceiling, so every limit the ceiling (or
    /// its built-in) bounds is set to at most that bound, and concurrency to at most the
    /// ceiling's (or `max_concurrency`), so that the manifest's own concurrency cannot exceed
    /// it either. [`Self::above`] refuses what is set above; this bounds what is not.
    #[must_use]
    pub(crate) fn capped_by(&self, ceiling: &Limits, max_concurrency: u32) -> Limits {
        fn cap<T: Ord + Copy>(mine: Option<T>, ceiling: Option<T>, built_in: T) -> Option<T> {
            match (mine, ceiling) {
                (None, None) => None,
                (mine, ceiling) => Some(mine.unwrap_or(built_in).min(ceiling.unwrap_or(built_in))),
            }
        }
        let (rates, queue) = (Rates::default(), QueueConfig::default());
        let concurrency = ceiling
            .concurrency
            .map_or(max_concurrency, |c| c.min(max_concurrency));
        Limits {
            deadline: cap(self.deadline, ceiling.deadline, DEFAULT_DEADLINE),
            memory_mib: cap(
                self.memory_mib,
                ceiling.memory_mib,
                DEFAULT_MEMORY_MIB as u64,
            ),
            concurrency: Some(self.concurrency.map_or(concurrency, |c| c.min(concurrency))),
            qps: cap(self.qps, ceiling.qps, queue.qps.get()),
            burst: cap(self.burst, ceiling.burst, queue.burst.get()),
            writes_per_second: cap(
                self.writes_per_second,
                ceiling.writes_per_second,
                rates.writes_per_second,
            ),
            write_burst: cap(self.write_burst, ceiling.write_burst, rates.write_burst),
            events_per_second: cap(
                self.events_per_second,
                ceiling.events_per_second,
                rates.events_per_second,
            ),
            event_burst: cap(self.event_burst, ceiling.event_burst, rates.event_burst),
            log_lines_per_second: cap(
                self.log_lines_per_second,
                ceiling.log_lines_per_second,
                rates.log_lines_per_second,
            ),
            log_burst: cap(self.log_burst, ceiling.log_burst, rates.log_burst),
            cpu_millicores: cap(
                self.cpu_millicores,
                ceiling.cpu_millicores,
                rates.cpu_millicores.unwrap_or(u32::MAX),
            ),
            body_bytes_per_second: cap(
                self.body_bytes_per_second,
                ceiling.body_bytes_per_second,
                rates.body_bytes_per_second,
            ),
            http_per_second: cap(
                self.http_per_second,
                ceiling.http_per_second,
                rates.http_per_second,
            ),
            http_burst: cap(self.http_burst, ceiling.http_burst, rates.http_burst),
            // No reuse unless the ceiling allows it: it lets state pass between keys.
            instance_reuse: cap(self.instance_reuse, ceiling.instance_reuse, 1),
            instance_idle: self.instance_idle,
        }
    }

    /// The guest's per-guest rates, defaults filled in.
    pub(crate) fn rates(&self) -> Rates {
        let d = Rates::default();
        Rates {
            writes_per_second: self.writes_per_second.unwrap_or(d.writes_per_second),
            write_burst: self.write_burst.unwrap_or(d.write_burst),
            events_per_second: self.events_per_second.unwrap_or(d.events_per_second),
            event_burst: self.event_burst.unwrap_or(d.event_burst),
            log_lines_per_second: self.log_lines_per_second.unwrap_or(d.log_lines_per_second),
            log_burst: self.log_burst.unwrap_or(d.log_burst),
            cpu_millicores: self.cpu_millicores.or(d.cpu_millicores),
            body_bytes_per_second: self
                .body_bytes_per_second
                .unwrap_or(d.body_bytes_per_second),
            http_per_second: self.http_per_second.unwrap_or(d.http_per_second),
            http_burst: self.http_burst.unwrap_or(d.http_burst),
            host_memory_bytes: self.memory_bytes(),
        }
    }

    pub(crate) fn deadline(&self) -> Duration {
        self.deadline.unwrap_or(DEFAULT_DEADLINE)
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        let mib = self.memory_mib.unwrap_or(DEFAULT_MEMORY_MIB as u64);
        usize::try_from(mib.saturating_mul(1 << 20)).unwrap_or(usize::MAX)
    }
}

/// How an instance may be reused (`limits.instanceReuse`): for up to `uses` reconciles, none
/// after `idle` unused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reuse {
    pub uses: u32,
    pub idle: Duration,
}

/// A guest's per-guest rates (`capabilities::Budget`), from its limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rates {
    pub(crate) writes_per_second: u32,
    pub(crate) write_burst: u32,
    pub(crate) events_per_second: u32,
    pub(crate) event_burst: u32,
    pub(crate) log_lines_per_second: u32,
    pub(crate) log_burst: u32,
    /// None: no CPU quota.
    pub(crate) cpu_millicores: Option<u32>,
    /// See [`Limits::body_bytes_per_second`].
    pub(crate) body_bytes_per_second: u32,
    /// See [`Limits::http_per_second`].
    pub(crate) http_per_second: u32,
    pub(crate) http_burst: u32,
    /// Host memory held on the guest's behalf at once (bodies being parsed and sent, list
    /// results being copied), over all its reconciles: its instance memory cap
    /// (`memoryMiB`), so the host never holds more for a guest than the guest could hold.
    pub(crate) host_memory_bytes: usize,
}

impl Default for Rates {
    /// Writes: above what one API server takes from one client here (raw patch loops of 4 to
    /// 16 writers manage ~800/s on the dev machine; at the old default of 500/s the host was
    /// held under the server's pace), so a well-behaved guest is never slowed by default; the
    /// API server is protected by the adaptive limit on writes in flight
    /// (`crate::cluster::flowcontrol`), not by this rate. Give an untrusted guest less in its grant.
    ///
    /// Body bytes: 8 MiB/s, far above what an honest guest sends (the controller bench's
    /// guest writes ~0.2 KB status patches, under 0.1 MiB/s even at the full write rate; the
    /// widget guest's applies are smaller still), and low enough that a guest cannot make the
    /// host parse more than a fraction of a core's worth (`serde_json` builds trees at tens to
    /// hundreds of MiB/s, by shape), which is taken from its CPU share besides. A largest body
    /// (3 MiB) always fits in the bucket.
    fn default() -> Self {
        Self {
            writes_per_second: 2000,
            write_burst: 4000,
            events_per_second: 5,
            event_burst: 25,
            log_lines_per_second: 100,
            log_burst: 500,
            cpu_millicores: Some(1000),
            body_bytes_per_second: 8 << 20,
            http_per_second: 20,
            http_burst: 50,
            host_memory_bytes: DEFAULT_MEMORY_MIB << 20,
        }
    }
}

impl Rates {
    /// No practical limit: the offline runner without a configuration, benches.
    pub(crate) fn unlimited() -> Self {
        Self {
            writes_per_second: u32::MAX,
            write_burst: u32::MAX,
            events_per_second: u32::MAX,
            event_burst: u32::MAX,
            log_lines_per_second: u32::MAX,
            log_burst: u32::MAX,
            cpu_millicores: None,
            body_bytes_per_second: u32::MAX,
            http_per_second: u32::MAX,
            http_burst: u32::MAX,
            host_memory_bytes: usize::MAX,
        }
    }
}
