//! `limits:` and `defaults:`: deadlines, memory, rates and bursts per guest, and the ceiling a
//! configuration's `defaults` or a tenant rule puts on them.
//!
//! A rate and its burst travel together as a [`Rate`] (`writesPerSecond` and `writeBurst` in
//! YAML); [`RATES`] names each one once, with its YAML names and built-in values, and every
//! operation over the limits (`or`, `above`, `capped_by`, `rates`) walks it.

use std::time::Duration;

use serde::Deserialize;

use super::{DEFAULT_DEADLINE, DEFAULT_INSTANCE_IDLE, DEFAULT_MEMORY_MIB, QueueConfig};

/// A token bucket as configured: a rate per second and a burst, either left unset.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub per_second: Option<u32>,
    pub burst: Option<u32>,
}

/// A token bucket with both values decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bucket {
    pub(crate) per_second: u32,
    pub(crate) burst: u32,
}

impl Bucket {
    const UNLIMITED: Self = Self {
        per_second: u32::MAX,
        burst: u32::MAX,
    };
}

impl Rate {
    fn or(self, fallback: Rate) -> Rate {
        Rate {
            per_second: self.per_second.or(fallback.per_second),
            burst: self.burst.or(fallback.burst),
        }
    }

    /// Unset values taken from `built_in`.
    fn filled(self, built_in: Bucket) -> Bucket {
        Bucket {
            per_second: self.per_second.unwrap_or(built_in.per_second),
            burst: self.burst.unwrap_or(built_in.burst),
        }
    }
}

/// Per-guest limits. Unset fields fall back to `defaults:` and then to built-in values.
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(from = "LimitsYaml")]
pub struct Limits {
    /// Wall-clock deadline of one reconcile, e.g. `2s`, `500ms`.
    pub deadline: Option<Duration>,
    /// Linear memory cap of one instance in MiB.
    pub memory_mib: Option<u64>,
    /// Keys reconciled at once (overrides the manifest's concurrency when lower).
    pub concurrency: Option<u32>,
    /// Overall retry rate of the guest's queue (`qps`, `burst`).
    pub queue: Rate,
    /// API writes the guest may make (status patches, applies, deletes: `writesPerSecond`,
    /// `writeBurst`); a write beyond the rate waits, within the reconcile's deadline.
    pub writes: Rate,
    /// Events (`eventsPerSecond`, `eventBurst`); beyond the rate an event is refused with
    /// `unavailable`.
    pub events: Rate,
    /// Log lines (`logLinesPerSecond`, `logBurst`); beyond the rate lines are dropped and
    /// counted.
    pub log_lines: Rate,
    /// Outbound HTTP requests (`http:` in the grant; `httpPerSecond`, `httpBurst`); a request
    /// beyond the rate waits, within the reconcile's deadline.
    pub http: Rate,
    /// CPU the guest's running instances may use together, in thousandths of a core
    /// (`500` = half a core); beyond it they are paused at their next epoch tick until the
    /// budget refills. Default: one core. Host work done for the guest (label selectors
    /// evaluated over a cache, bodies parsed) is taken from the same share.
    pub cpu_millicores: Option<u32>,
    /// JSON body bytes (status patches, applies) per second the host parses for the guest;
    /// beyond the rate a body waits, within the reconcile's deadline. Default: 8 MiB/s (see
    /// [`Rates::default`]).
    pub body_bytes_per_second: Option<u32>,
    /// Opt-in instance reuse: one instance serves up to this many reconciles of the guest on
    /// one worker (1, the default: a fresh instance per reconcile). State can then survive
    /// from one key to the next of the same guest; guests stay apart (see docs/security.md).
    pub instance_reuse: Option<u32>,
    /// A kept instance unused this long is dropped (default 30 s).
    pub instance_idle: Option<Duration>,
}

/// One rate of [`Limits`]: its names in YAML, where it is kept, its built-in bucket.
struct RateField {
    per_second: &'static str,
    burst: &'static str,
    of: fn(&Limits) -> Rate,
    of_mut: fn(&mut Limits) -> &mut Rate,
    built_in: fn() -> Bucket,
}

/// Every rate of [`Limits`], each named once.
const RATES: [RateField; 5] = [
    RateField {
        per_second: "httpPerSecond",
        burst: "httpBurst",
        of: |l| l.http,
        of_mut: |l| &mut l.http,
        built_in: || Rates::default().http,
    },
    RateField {
        per_second: "qps",
        burst: "burst",
        of: |l| l.queue,
        of_mut: |l| &mut l.queue,
        built_in: || {
            let queue = QueueConfig::default();
            Bucket {
                per_second: queue.qps.get(),
                burst: queue.burst.get(),
            }
        },
    },
    RateField {
        per_second: "writesPerSecond",
        burst: "writeBurst",
        of: |l| l.writes,
        of_mut: |l| &mut l.writes,
        built_in: || Rates::default().writes,
    },
    RateField {
        per_second: "eventsPerSecond",
        burst: "eventBurst",
        of: |l| l.events,
        of_mut: |l| &mut l.events,
        built_in: || Rates::default().events,
    },
    RateField {
        per_second: "logLinesPerSecond",
        burst: "logBurst",
        of: |l| l.log_lines,
        of_mut: |l| &mut l.log_lines,
        built_in: || Rates::default().log_lines,
    },
];

/// `limits:` as written: flat, each rate and burst a key of its own.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LimitsYaml {
    #[serde(default, with = "humantime_serde")]
    deadline: Option<Duration>,
    #[serde(rename = "memoryMiB", alias = "memoryMib")]
    memory_mib: Option<u64>,
    concurrency: Option<u32>,
    qps: Option<u32>,
    burst: Option<u32>,
    writes_per_second: Option<u32>,
    write_burst: Option<u32>,
    events_per_second: Option<u32>,
    event_burst: Option<u32>,
    log_lines_per_second: Option<u32>,
    log_burst: Option<u32>,
    cpu_millicores: Option<u32>,
    body_bytes_per_second: Option<u32>,
    http_per_second: Option<u32>,
    http_burst: Option<u32>,
    instance_reuse: Option<u32>,
    #[serde(default, with = "humantime_serde")]
    instance_idle: Option<Duration>,
}

impl From<LimitsYaml> for Limits {
    fn from(y: LimitsYaml) -> Self {
        let rate = |per_second, burst| Rate { per_second, burst };
        Limits {
            deadline: y.deadline,
            memory_mib: y.memory_mib,
            concurrency: y.concurrency,
            queue: rate(y.qps, y.burst),
            writes: rate(y.writes_per_second, y.write_burst),
            events: rate(y.events_per_second, y.event_burst),
            log_lines: rate(y.log_lines_per_second, y.log_burst),
            http: rate(y.http_per_second, y.http_burst),
            cpu_millicores: y.cpu_millicores,
            body_bytes_per_second: y.body_bytes_per_second,
            instance_reuse: y.instance_reuse,
            instance_idle: y.instance_idle,
        }
    }
}

impl Limits {
    /// Unset fields taken from `fallback`.
    #[must_use]
    pub(crate) fn or(&self, fallback: &Limits) -> Limits {
        let mut limits = Limits {
            deadline: self.deadline.or(fallback.deadline),
            memory_mib: self.memory_mib.or(fallback.memory_mib),
            concurrency: self.concurrency.or(fallback.concurrency),
            cpu_millicores: self.cpu_millicores.or(fallback.cpu_millicores),
            body_bytes_per_second: self
                .body_bytes_per_second
                .or(fallback.body_bytes_per_second),
            instance_reuse: self.instance_reuse.or(fallback.instance_reuse),
            instance_idle: self.instance_idle.or(fallback.instance_idle),
            ..Limits::default()
        };
        for field in &RATES {
            *(field.of_mut)(&mut limits) = (field.of)(self).or((field.of)(fallback));
        }
        limits
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
        check(
            "concurrency",
            self.concurrency.map(u64::from),
            u64::from(ceiling.concurrency_cap(max_concurrency)),
        );
        // No reuse unless the ceiling allows it: it lets state pass between keys.
        check(
            "instanceReuse",
            self.instance_reuse.map(u64::from),
            u64::from(ceiling.instance_reuse.unwrap_or(1)),
        );
        for field in &RATES {
            let (mine, cap) = (
                (field.of)(self),
                (field.of)(ceiling).filled((field.built_in)()),
            );
            check(
                field.per_second,
                mine.per_second.map(u64::from),
                u64::from(cap.per_second),
            );
            check(field.burst, mine.burst.map(u64::from), u64::from(cap.burst));
        }
        let built_in = Rates::default();
        check(
            "cpuMillicores",
            self.cpu_millicores.map(u64::from),
            u64::from(
                ceiling
                    .cpu_millicores
                    .unwrap_or(built_in.cpu_millicores.unwrap_or(u32::MAX)),
            ),
        );
        check(
            "bodyBytesPerSecond",
            self.body_bytes_per_second.map(u64::from),
            u64::from(
                ceiling
                    .body_bytes_per_second
                    .unwrap_or(built_in.body_bytes_per_second),
            ),
        );
        above
    }

    /// The most concurrency these limits, as a ceiling, allow: theirs, never above
    /// `max_concurrency`.
    fn concurrency_cap(&self, max_concurrency: u32) -> u32 {
        self.concurrency
            .map_or(max_concurrency, |c| c.min(max_concurrency))
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
        let built_in = Rates::default();
        let concurrency = ceiling.concurrency_cap(max_concurrency);
        let mut limits = Limits {
            deadline: cap(self.deadline, ceiling.deadline, DEFAULT_DEADLINE),
            memory_mib: cap(
                self.memory_mib,
                ceiling.memory_mib,
                DEFAULT_MEMORY_MIB as u64,
            ),
            concurrency: Some(self.concurrency.map_or(concurrency, |c| c.min(concurrency))),
            cpu_millicores: cap(
                self.cpu_millicores,
                ceiling.cpu_millicores,
                built_in.cpu_millicores.unwrap_or(u32::MAX),
            ),
            body_bytes_per_second: cap(
                self.body_bytes_per_second,
                ceiling.body_bytes_per_second,
                built_in.body_bytes_per_second,
            ),
            // No reuse unless the ceiling allows it: it lets state pass between keys.
            instance_reuse: cap(self.instance_reuse, ceiling.instance_reuse, 1),
            instance_idle: self.instance_idle,
            ..Limits::default()
        };
        for field in &RATES {
            let (mine, theirs, built_in) =
                ((field.of)(self), (field.of)(ceiling), (field.built_in)());
            *(field.of_mut)(&mut limits) = Rate {
                per_second: cap(mine.per_second, theirs.per_second, built_in.per_second),
                burst: cap(mine.burst, theirs.burst, built_in.burst),
            };
        }
        limits
    }

    /// The guest's per-guest rates, defaults filled in.
    pub(crate) fn rates(&self) -> Rates {
        let d = Rates::default();
        Rates {
            writes: self.writes.filled(d.writes),
            events: self.events.filled(d.events),
            log_lines: self.log_lines.filled(d.log_lines),
            http: self.http.filled(d.http),
            cpu_millicores: self.cpu_millicores.or(d.cpu_millicores),
            body_bytes_per_second: self
                .body_bytes_per_second
                .unwrap_or(d.body_bytes_per_second),
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
    pub(crate) writes: Bucket,
    pub(crate) events: Bucket,
    pub(crate) log_lines: Bucket,
    /// See [`Limits::http`].
    pub(crate) http: Bucket,
    /// None: no CPU quota.
    pub(crate) cpu_millicores: Option<u32>,
    /// See [`Limits::body_bytes_per_second`].
    pub(crate) body_bytes_per_second: u32,
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
        let bucket = |per_second, burst| Bucket { per_second, burst };
        Self {
            writes: bucket(2000, 4000),
            events: bucket(5, 25),
            log_lines: bucket(100, 500),
            cpu_millicores: Some(1000),
            body_bytes_per_second: 8 << 20,
            http: bucket(20, 50),
            host_memory_bytes: DEFAULT_MEMORY_MIB << 20,
        }
    }
}

impl Rates {
    /// No practical limit: the offline runner without a configuration, benches.
    pub(crate) fn unlimited() -> Self {
        Self {
            writes: Bucket::UNLIMITED,
            events: Bucket::UNLIMITED,
            log_lines: Bucket::UNLIMITED,
            http: Bucket::UNLIMITED,
            cpu_millicores: None,
            body_bytes_per_second: u32::MAX,
            host_memory_bytes: usize::MAX,
        }
    }
}
