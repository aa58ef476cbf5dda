//! One Prometheus registry for the whole host.
//!
//! Every module reports through the small typed methods on [`Metrics`] (and the per-queue
//! handle [`WorkqueueMetrics`]); nobody else touches `prometheus_client` types, so metric
//! names, labels and buckets are decided in this one file.
//!
//! Names follow the conventions operators already alert on: the `workqueue_*` family is
//! spelled exactly as client-go/controller-runtime expose it (label `name` = guest), and
//! our own families start with `reconciler_`.
//!
//! Cost model: every family is a hash map behind a read-write lock, so a labelled update
//! costs one label-set hash, a shared read lock and an atomic add (plus a short write lock
//! the first time a label set is seen). Work queues resolve their series once and keep
//! the handles, so a queue operation costs only atomics. [`Metrics::render`] walks every
//! series; it is meant for a scrape every few seconds, not a hot path.

use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// The content type to serve [`Metrics::render`]'s output with: it is OpenMetrics text
/// (ends in `# EOF`, counters are declared without their `_total` suffix), which
/// Prometheus negotiates and parses natively.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How one reconcile ended; the `result` label of `reconciler_reconcile_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReconcileResult {
    /// `Ok(action)` without a requeue.
    Success,
    /// `Ok(action)` asking to be requeued after a delay.
    Requeue,
    /// `Err(transient)`: retried with backoff.
    Error,
    /// `Err(permanent)`: not retried until the object changes.
    PermanentError,
    /// The guest trapped (panic, unreachable, bad memory access).
    Trap,
    /// The guest ran past its epoch deadline.
    Deadline,
    /// The guest tried to grow its memory past the cap.
    MemoryLimit,
}

impl ReconcileResult {
    /// Every value, in exposition order.
    pub const ALL: [Self; 7] = [
        Self::Success,
        Self::Requeue,
        Self::Error,
        Self::PermanentError,
        Self::Trap,
        Self::Deadline,
        Self::MemoryLimit,
    ];

    /// The label value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Requeue => "requeue",
            Self::Error => "error",
            Self::PermanentError => "permanent_error",
            Self::Trap => "trap",
            Self::Deadline => "deadline",
            Self::MemoryLimit => "memory_limit",
        }
    }
}

impl fmt::Display for ReconcileResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl EncodeLabelValue for ReconcileResult {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
        fmt::Write::write_str(encoder, self.as_str())
    }
}

/// How one call from a guest into a host import ended; the `outcome` label of
/// `reconciler_host_calls_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HostCallOutcome {
    /// The grant allowed the call and the provider succeeded.
    Ok,
    /// The guest's grant does not cover the call.
    Denied,
    /// The guest handed over something malformed or out of bounds (a bad name, an oversized
    /// body, a delay beyond the cap); refused before any provider saw it.
    Invalid,
    /// The guest exceeded a rate or quota (log lines, events, pending keys, networks).
    Limited,
    /// The grant allowed the call but the provider failed.
    Error,
}

impl HostCallOutcome {
    /// The label value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Denied => "denied",
            Self::Invalid => "invalid",
            Self::Limited => "limited",
            Self::Error => "error",
        }
    }
}

impl fmt::Display for HostCallOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl EncodeLabelValue for HostCallOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
        fmt::Write::write_str(encoder, self.as_str())
    }
}

/// Something whose gauges are cheaper to compute when scraped than to keep current, such
/// as a work queue's in-flight durations. [`Metrics::render`] calls every live hook first.
pub trait ScrapeHook: Send + Sync {
    /// Bring this source's gauges up to date. Runs on the scraping task: keep it short.
    fn before_scrape(&self);
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GuestLabels {
    guest: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconcileLabels {
    guest: String,
    result: ReconcileResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LoadedLabels {
    guest: String,
    hash: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FileLabels {
    file: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GvkLabels {
    group: String,
    version: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HostCallLabels {
    guest: String,
    interface: String,
    function: String,
    outcome: HostCallOutcome,
}

type FloatGauge = Gauge<f64, AtomicU64>;
type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// client-go's workqueue buckets (`ExponentialBuckets(10e-9, 10, 12)`): 10 ns to 1000 s,
/// one per decade, because queue waits range from "picked up at once" to "backed off for
/// minutes". Written out so the `le` labels are exact decimals.
fn workqueue_histogram() -> Histogram {
    Histogram::new([
        1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1.0, 10.0, 100.0, 1000.0,
    ])
}

/// controller-runtime's reconcile buckets: fine around the usual 10 ms–1 s, coarse up to
/// a minute, so dashboards built for Go controllers read the same.
fn reconcile_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8,
        0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0,
        15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
    ])
}

/// Instantiating from an `InstancePre` with pooled memory takes microseconds; a slow
/// one (cold pool, large data segments) should stand out, hence 10 µs to 1 s.
fn instantiate_histogram() -> Histogram {
    Histogram::new([
        1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25,
        0.5, 1.0,
    ])
}

struct WorkqueueFamilies {
    depth: Family<QueueLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    queue_duration: HistogramFamily<QueueLabels>,
    work_duration: HistogramFamily<QueueLabels>,
    retries: Family<QueueLabels, Counter>,
    unfinished_work: Family<QueueLabels, FloatGauge>,
    longest_running: Family<QueueLabels, FloatGauge>,
}

impl WorkqueueFamilies {
    /// The `workqueue_*` families, under client-go's names and help texts.
    fn register(registry: &mut Registry) -> Self {
        let workqueue = Self {
            depth: Family::default(),
            adds: Family::default(),
            queue_duration: Family::new_with_constructor(workqueue_histogram),
            work_duration: Family::new_with_constructor(workqueue_histogram),
            retries: Family::default(),
            unfinished_work: Family::default(),
            longest_running: Family::default(),
        };
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue",
            workqueue.depth.clone(),
        );
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            workqueue.adds.clone(),
        );
        registry.register_with_unit(
            "workqueue_queue_duration",
            "How long in seconds an item stays in workqueue before being requested",
            Unit::Seconds,
            workqueue.queue_duration.clone(),
        );
        registry.register_with_unit(
            "workqueue_work_duration",
            "How long in seconds processing an item from workqueue takes",
            Unit::Seconds,
            workqueue.work_duration.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            workqueue.retries.clone(),
        );
        registry.register_with_unit(
            "workqueue_unfinished_work",
            "How many seconds of work has been done that is in progress and hasn't been \
             observed by work_duration. Large values indicate stuck threads. One can deduce \
             the number of stuck threads by observing the rate at which this increases.",
            Unit::Seconds,
            workqueue.unfinished_work.clone(),
        );
        registry.register_with_unit(
            "workqueue_longest_running_processor",
            "How many seconds has the longest running processor for workqueue been running",
            Unit::Seconds,
            workqueue.longest_running.clone(),
        );
        workqueue
    }
}

struct Inner {
    registry: Registry,
    workqueue: WorkqueueFamilies,
    reconcile_total: Family<ReconcileLabels, Counter>,
    reconcile_duration: HistogramFamily<GuestLabels>,
    guest_loaded: Family<LoadedLabels, Gauge>,
    guest_load_failures: Family<FileLabels, Counter>,
    instantiate_duration: HistogramFamily<GuestLabels>,
    deadline_hits: Family<GuestLabels, Counter>,
    memory_limit_hits: Family<GuestLabels, Counter>,
    informers: InformerFamilies,
    leader: Gauge,
    host_calls: Family<HostCallLabels, Counter>,
    finalizer_orphaned: Family<GuestLabels, Gauge>,
    finalizer_released: Family<GuestLabels, Counter>,
    shadow_diffs: Family<GuestLabels, Counter>,
    shadow_agreements: Family<GuestLabels, Counter>,
    shards: ShardFamilies,
    scrape_hooks: Mutex<Vec<Weak<dyn ScrapeHook>>>,
}

/// What the informers hold and receive, and how sharded ones filter.
struct InformerFamilies {
    objects: Family<GvkLabels, Gauge>,
    received_bytes: Family<GvkLabels, Counter>,
    events: Family<GvkLabels, Counter>,
    shard_filter: Family<ShardFilterLabels, Gauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardFilterLabels {
    group: String,
    version: String,
    kind: String,
    mode: String,
}

fn register_informers(registry: &mut Registry) -> InformerFamilies {
    let families = InformerFamilies {
        objects: Family::default(),
        received_bytes: Family::default(),
        events: Family::default(),
        shard_filter: Family::default(),
    };
    registry.register(
        "reconciler_informer_objects",
        "Objects in the shared informer cache, by group/version/kind",
        families.objects.clone(),
    );
    registry.register(
        "reconciler_informer_received_bytes",
        "Response body bytes of the informers' lists and watches, by group/version/kind",
        families.received_bytes.clone(),
    );
    registry.register(
        "reconciler_informer_events",
        "Objects the informers received (list items and watch events), before any client-side shard filter",
        families.events.clone(),
    );
    registry.register(
        "reconciler_informer_shard_filter",
        "1 for each filter mode (server: shardSelector, client: dropped on arrival) a sharded informer of the kind uses",
        families.shard_filter.clone(),
    );
    families
}

/// Sharded mode's series (`run --shards auto`).
struct ShardFamilies {
    members: Gauge,
    owned_slots: Gauge,
    owned_ratio: FloatGauge,
    keys: Family<GuestLabels, Gauge>,
    handovers: Family<DirectionLabels, Counter>,
    foreign_keys: Family<GuestLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabels {
    direction: &'static str,
}

fn register_shards(registry: &mut Registry) -> ShardFamilies {
    let families = ShardFamilies {
        members: Gauge::default(),
        owned_slots: Gauge::default(),
        owned_ratio: FloatGauge::default(),
        keys: Family::default(),
        handovers: Family::default(),
        foreign_keys: Family::default(),
    };
    registry.register(
        "reconciler_shard_members",
        "Live members of this replica's ring (sharded mode)",
        families.members.clone(),
    );
    registry.register(
        "reconciler_shard_owned_slots",
        "Slots of the ring (of 256) this replica holds and reconciles",
        families.owned_slots.clone(),
    );
    registry.register(
        "reconciler_shard_owned_ratio",
        "Fraction of the metadata.uid hash space this replica reconciles",
        families.owned_ratio.clone(),
    );
    registry.register(
        "reconciler_shard_keys",
        "Primary objects in this replica's share, by guest",
        families.keys.clone(),
    );
    registry.register(
        "reconciler_shard_handovers",
        "Slots this replica gained or lost in handovers",
        families.handovers.clone(),
    );
    registry.register(
        "reconciler_shard_foreign_keys",
        "Keys dropped because another replica owns their object (secondary triggers, guest enqueues)",
        families.foreign_keys.clone(),
    );
    families
}

/// `reconciler_shadow_diffs_total` and `reconciler_shadow_agreements_total`.
fn register_shadow(
    registry: &mut Registry,
) -> (Family<GuestLabels, Counter>, Family<GuestLabels, Counter>) {
    let diffs = Family::<GuestLabels, Counter>::default();
    registry.register(
        "reconciler_shadow_diffs",
        "Reconciles in shadow mode whose intended changes would have changed the live state",
        diffs.clone(),
    );
    let agreements = Family::<GuestLabels, Counter>::default();
    registry.register(
        "reconciler_shadow_agreements",
        "Reconciles in shadow mode whose intended changes all matched the live state",
        agreements.clone(),
    );
    (diffs, agreements)
}

/// The host's metrics: one registry, cheap to clone (an `Arc`), safe to share across
/// tasks. Build one at start-up and hand clones to every module.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every family. Series appear in the exposition once first touched.
    #[must_use]
    pub fn new() -> Self {
        let mut registry = Registry::default();
        // Counters are registered without `_total`: the encoder appends it.
        let workqueue = WorkqueueFamilies::register(&mut registry);

        let reconcile_total = Family::<ReconcileLabels, Counter>::default();
        registry.register(
            "reconciler_reconcile",
            "Reconciles finished, by guest and result",
            reconcile_total.clone(),
        );
        let reconcile_duration: HistogramFamily<GuestLabels> =
            Family::new_with_constructor(reconcile_histogram);
        registry.register_with_unit(
            "reconciler_reconcile_duration",
            "Wall time of one reconcile, as measured by the worker that ran it",
            Unit::Seconds,
            reconcile_duration.clone(),
        );
        let guest_loaded = Family::<LoadedLabels, Gauge>::default();
        registry.register(
            "reconciler_guest_loaded",
            "1 while this version (content hash) of the guest serves reconciles, else 0",
            guest_loaded.clone(),
        );
        let guest_load_failures = Family::<FileLabels, Counter>::default();
        registry.register(
            "reconciler_guest_load_failures",
            "Guest files that failed to compile, validate or pass the grant check",
            guest_load_failures.clone(),
        );
        let instantiate_duration: HistogramFamily<GuestLabels> =
            Family::new_with_constructor(instantiate_histogram);
        registry.register_with_unit(
            "reconciler_instantiate_duration",
            "Time to create a fresh guest instance",
            Unit::Seconds,
            instantiate_duration.clone(),
        );
        let deadline_hits = Family::<GuestLabels, Counter>::default();
        registry.register(
            "reconciler_deadline_hits",
            "Guest calls interrupted by the epoch deadline",
            deadline_hits.clone(),
        );
        let memory_limit_hits = Family::<GuestLabels, Counter>::default();
        registry.register(
            "reconciler_memory_limit_hits",
            "Guest calls stopped for growing memory past the cap",
            memory_limit_hits.clone(),
        );
        let informers = register_informers(&mut registry);
        let leader = Gauge::default();
        registry.register(
            "reconciler_leader",
            "1 while this replica holds the leader lease, else 0",
            leader.clone(),
        );
        let host_calls = Family::<HostCallLabels, Counter>::default();
        registry.register(
            "reconciler_host_calls",
            "Calls from guests into host imports, by interface, function and outcome",
            host_calls.clone(),
        );
        let finalizer_orphaned = Family::<GuestLabels, Gauge>::default();
        registry.register(
            "reconciler_finalizer_orphaned",
            "Objects still carrying the finalizer of a guest that was unloaded (as cached when it was unloaded)",
            finalizer_orphaned.clone(),
        );
        let finalizer_released = Family::<GuestLabels, Counter>::default();
        registry.register(
            "reconciler_finalizer_released",
            "Objects whose finalizer the host removed after its guest was unloaded (finalizerPolicy release)",
            finalizer_released.clone(),
        );
        let (shadow_diffs, shadow_agreements) = register_shadow(&mut registry);
        let shards = register_shards(&mut registry);

        Self {
            inner: Arc::new(Inner {
                registry,
                workqueue,
                reconcile_total,
                reconcile_duration,
                guest_loaded,
                guest_load_failures,
                instantiate_duration,
                deadline_hits,
                memory_limit_hits,
                informers,
                leader,
                host_calls,
                finalizer_orphaned,
                finalizer_released,
                shadow_diffs,
                shadow_agreements,
                shards,
                scrape_hooks: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The `workqueue_*` series of the queue called `name` (the guest name). Resolve once
    /// per queue: the handle's updates are plain atomics.
    #[must_use]
    pub fn workqueue(&self, name: &str) -> WorkqueueMetrics {
        let labels = QueueLabels {
            name: name.to_owned(),
        };
        let wq = &self.inner.workqueue;
        WorkqueueMetrics {
            depth: wq.depth.get_or_create_owned(&labels),
            adds: wq.adds.get_or_create_owned(&labels),
            queue_duration: wq.queue_duration.get_or_create_owned(&labels),
            work_duration: wq.work_duration.get_or_create_owned(&labels),
            retries: wq.retries.get_or_create_owned(&labels),
            unfinished_work: wq.unfinished_work.get_or_create_owned(&labels),
            longest_running: wq.longest_running.get_or_create_owned(&labels),
            owner: Some(self.clone()),
        }
    }

    /// One reconcile of `guest` ended with `result` after `duration`. Make exactly one call
    /// per reconcile: `Deadline` and `MemoryLimit` also count in
    /// `reconciler_deadline_hits_total` / `reconciler_memory_limit_hits_total`, so alerts on
    /// those need no label matching.
    pub fn reconcile_finished(&self, guest: &str, result: ReconcileResult, duration: Duration) {
        let inner = &self.inner;
        inner
            .reconcile_total
            .get_or_create(&ReconcileLabels {
                guest: guest.to_owned(),
                result,
            })
            .inc();
        let guest_labels = GuestLabels {
            guest: guest.to_owned(),
        };
        inner
            .reconcile_duration
            .get_or_create(&guest_labels)
            .observe(duration.as_secs_f64());
        match result {
            ReconcileResult::Deadline => {
                inner.deadline_hits.get_or_create(&guest_labels).inc();
            }
            ReconcileResult::MemoryLimit => {
                inner.memory_limit_hits.get_or_create(&guest_labels).inc();
            }
            _ => {}
        }
    }

    /// A deadline hit outside a reconcile: `manifest()` at load time, labelled by the file
    /// (the guest's name is not known yet). Do not call it for a reconcile reported through
    /// [`Self::reconcile_finished`].
    pub fn deadline_hit(&self, guest: &str) {
        self.inner
            .deadline_hits
            .get_or_create(&GuestLabels {
                guest: guest.to_owned(),
            })
            .inc();
    }

    /// A fresh instance of `guest` took `duration` to create.
    pub fn instantiated(&self, guest: &str, duration: Duration) {
        self.inner
            .instantiate_duration
            .get_or_create(&GuestLabels {
                guest: guest.to_owned(),
            })
            .observe(duration.as_secs_f64());
    }

    /// Version `hash` of `guest` started (`true`) or stopped (`false`) serving. On a hot
    /// swap report the old hash `false` and the new one `true`. Loading also creates the
    /// guest's reconcile counters at zero, so `rate()` sees the first reconcile.
    pub fn guest_loaded(&self, guest: &str, hash: &str, loaded: bool) {
        let inner = &self.inner;
        inner
            .guest_loaded
            .get_or_create(&LoadedLabels {
                guest: guest.to_owned(),
                hash: hash.to_owned(),
            })
            .set(i64::from(loaded));
        if loaded {
            for result in ReconcileResult::ALL {
                let _ = inner.reconcile_total.get_or_create(&ReconcileLabels {
                    guest: guest.to_owned(),
                    result,
                });
            }
        }
    }

    /// `objects` objects still carry the finalizer of unloaded guest `guest` (0 once it is
    /// back or its finalizer was released).
    pub fn finalizer_orphaned(&self, guest: &str, objects: usize) {
        self.inner
            .finalizer_orphaned
            .get_or_create(&GuestLabels {
                guest: guest.to_owned(),
            })
            .set(i64::try_from(objects).unwrap_or(i64::MAX));
    }

    /// The host removed an unloaded guest's finalizer from `objects` objects.
    pub fn finalizer_released(&self, guest: &str, objects: usize) {
        self.inner
            .finalizer_released
            .get_or_create(&GuestLabels {
                guest: guest.to_owned(),
            })
            .inc_by(objects as u64);
    }

    /// A reconcile in shadow mode agreed with the live state, or differed from it.
    pub fn shadow_verdict(&self, guest: &str, agreed: bool) {
        let family = if agreed {
            &self.inner.shadow_agreements
        } else {
            &self.inner.shadow_diffs
        };
        family
            .get_or_create(&GuestLabels {
                guest: guest.to_owned(),
            })
            .inc();
    }

    /// The guest file `file` could not be loaded (compile, validation or grant failure).
    pub fn guest_load_failed(&self, file: &str) {
        self.inner
            .guest_load_failures
            .get_or_create(&FileLabels {
                file: file.to_owned(),
            })
            .inc();
    }

    /// The informer for `group/version/kind` now caches `objects` objects. The core group
    /// is the empty string, as in the API.
    pub fn informer_objects(&self, group: &str, version: &str, kind: &str, objects: usize) {
        self.inner
            .informers
            .objects
            .get_or_create(&gvk_labels(group, version, kind))
            .set(i64::try_from(objects).unwrap_or(i64::MAX));
    }

    /// The informer for `group/version/kind` was released (its last guest went away):
    /// drop its series instead of reporting a stale count.
    pub fn informer_removed(&self, group: &str, version: &str, kind: &str) {
        self.inner
            .informers
            .objects
            .remove(&gvk_labels(group, version, kind));
    }

    /// The traffic series of the informers for `group/version/kind`, resolved once per informer
    /// (every scope of a GVK adds to the same series).
    #[must_use]
    pub fn informer(&self, group: &str, version: &str, kind: &str) -> InformerMetrics {
        let labels = gvk_labels(group, version, kind);
        let families = &self.inner.informers;
        InformerMetrics {
            received_bytes: families.received_bytes.get_or_create_owned(&labels),
            events: families.events.get_or_create_owned(&labels),
        }
    }

    /// A sharded informer for `group/version/kind` filters in `mode` (`server` or `client`):
    /// `active` sets the series to 1, otherwise it is removed.
    pub fn informer_shard_filter(
        &self,
        group: &str,
        version: &str,
        kind: &str,
        mode: &str,
        active: bool,
    ) {
        let labels = ShardFilterLabels {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
            mode: mode.to_owned(),
        };
        let family = &self.inner.informers.shard_filter;
        if active {
            family.get_or_create(&labels).set(1);
        } else {
            family.remove(&labels);
        }
    }

    /// Sharded mode: the ring as this replica sees it.
    pub fn shard_ring(&self, members: usize, owned_slots: usize, owned_ratio: f64) {
        let shards = &self.inner.shards;
        shards
            .members
            .set(i64::try_from(members).unwrap_or(i64::MAX));
        shards
            .owned_slots
            .set(i64::try_from(owned_slots).unwrap_or(i64::MAX));
        shards.owned_ratio.set(owned_ratio);
    }

    /// Sharded mode: `keys` primary objects of `guest` are in this replica's share.
    pub fn shard_keys(&self, guest: &str, keys: usize) {
        self.inner
            .shards
            .keys
            .get_or_create(&GuestLabels {
                guest: guest.to_owned(),
            })
            .set(i64::try_from(keys).unwrap_or(i64::MAX));
    }

    /// Sharded mode: `slots` were gained (`true`) or handed over (`false`).
    pub fn shard_handover(&self, gained: bool, slots: usize) {
        let direction = if gained { "gained" } else { "lost" };
        self.inner
            .shards
            .handovers
            .get_or_create(&DirectionLabels { direction })
            .inc_by(slots as u64);
    }

    /// Sharded mode: a key of `guest` was dropped because another replica owns its object.
    pub fn shard_foreign_key(&self, guest: &str) {
        self.inner
            .shards
            .foreign_keys
            .get_or_create(&GuestLabels {
                guest: guest.to_owned(),
            })
            .inc();
    }

    /// This replica gained (`true`) or lost (`false`) the leader lease.
    pub fn set_leader(&self, leader: bool) {
        self.inner.leader.set(i64::from(leader));
    }

    /// A guest called `interface.function` on the host. Costs a few small allocations for
    /// the label set: fine per host call, which already crosses the component boundary.
    pub fn host_call(
        &self,
        guest: &str,
        interface: &str,
        function: &str,
        outcome: HostCallOutcome,
    ) {
        self.inner
            .host_calls
            .get_or_create(&HostCallLabels {
                guest: guest.to_owned(),
                interface: interface.to_owned(),
                function: function.to_owned(),
                outcome,
            })
            .inc();
    }

    /// Run `hook` before every render for as long as it is alive; dead hooks are pruned.
    pub fn register_scrape_hook(&self, hook: Weak<dyn ScrapeHook>) {
        self.inner.scrape_hooks.lock().push(hook);
    }

    /// The whole registry in OpenMetrics text; serve it with [`CONTENT_TYPE`]. Runs the
    /// scrape hooks first (each locks its queue briefly), then reads every series: O(series).
    #[must_use]
    pub fn render(&self) -> String {
        // Upgrade under the lock, call outside it, so a hook may register another one.
        let hooks: Vec<Arc<dyn ScrapeHook>> = {
            let mut hooks = self.inner.scrape_hooks.lock();
            hooks.retain(|hook| hook.strong_count() > 0);
            hooks.iter().filter_map(Weak::upgrade).collect()
        };
        for hook in hooks {
            hook.before_scrape();
        }
        let mut text = String::new();
        // Writing into a String cannot fail and our label encoders never fail; should that
        // change, a partial scrape plus a log line beats a panicking metrics endpoint.
        if let Err(error) = encode(&mut text, &self.inner.registry) {
            tracing::error!(%error, "encoding metrics failed; the scrape is incomplete");
        }
        text
    }
}

fn gvk_labels(group: &str, version: &str, kind: &str) -> GvkLabels {
    GvkLabels {
        group: group.to_owned(),
        version: version.to_owned(),
        kind: kind.to_owned(),
    }
}

/// `reconciler_informer_received_bytes_total` and `reconciler_informer_events_total` of one
/// GVK, resolved once: every update is one atomic add, no label lookup.
#[derive(Clone, Debug)]
pub struct InformerMetrics {
    received_bytes: Counter,
    events: Counter,
}

impl InformerMetrics {
    /// Series that belong to no registry (informers nobody scrapes).
    #[must_use]
    pub fn unregistered() -> Self {
        Self {
            received_bytes: Counter::default(),
            events: Counter::default(),
        }
    }

    /// `bytes` of a list or watch response body arrived.
    pub fn received_bytes(&self, bytes: usize) {
        self.received_bytes.inc_by(bytes as u64);
    }

    /// One object arrived: a list item or a watch event.
    pub fn received_event(&self) {
        self.events.inc();
    }
}

/// The `workqueue_*` series of one queue, resolved once. Every update is an atomic
/// operation (histograms take a short uncontended lock); no label lookups.
#[derive(Clone)]
pub struct WorkqueueMetrics {
    depth: Gauge,
    adds: Counter,
    queue_duration: Histogram,
    work_duration: Histogram,
    retries: Counter,
    unfinished_work: FloatGauge,
    longest_running: FloatGauge,
    owner: Option<Metrics>,
}

impl fmt::Debug for WorkqueueMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkqueueMetrics")
            .field("depth", &self.depth.get())
            .field("adds", &self.adds.get())
            .field("retries", &self.retries.get())
            .field("registered", &self.owner.is_some())
            .finish_non_exhaustive()
    }
}

impl WorkqueueMetrics {
    /// Series that belong to no registry: for queues nobody scrapes (tests, offline runs).
    #[must_use]
    pub fn unregistered() -> Self {
        Self {
            depth: Gauge::default(),
            adds: Counter::default(),
            queue_duration: workqueue_histogram(),
            work_duration: workqueue_histogram(),
            retries: Counter::default(),
            unfinished_work: FloatGauge::default(),
            longest_running: FloatGauge::default(),
            owner: None,
        }
    }

    /// Keys waiting to be handed out (`workqueue_depth`).
    pub fn set_depth(&self, depth: usize) {
        self.depth.set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    /// A key was accepted into the queue (`workqueue_adds_total`).
    pub fn added(&self) {
        self.adds.inc();
    }

    /// A key waited `waited` between add and get (`workqueue_queue_duration_seconds`).
    pub fn queued_for(&self, waited: Duration) {
        self.queue_duration.observe(waited.as_secs_f64());
    }

    /// A worker held a key for `worked` between get and done (`workqueue_work_duration_seconds`).
    pub fn worked_for(&self, worked: Duration) {
        self.work_duration.observe(worked.as_secs_f64());
    }

    /// A delayed or rate-limited add was requested (`workqueue_retries_total`).
    pub fn retried(&self) {
        self.retries.inc();
    }

    /// In-flight work right now: the sum of every in-flight key's age
    /// (`workqueue_unfinished_work_seconds`) and the oldest one
    /// (`workqueue_longest_running_processor_seconds`).
    pub fn set_in_flight(&self, unfinished: Duration, longest: Duration) {
        self.unfinished_work.set(unfinished.as_secs_f64());
        self.longest_running.set(longest.as_secs_f64());
    }

    /// Have `hook` run before every scrape of the registry these series belong to; a no-op
    /// for [`Self::unregistered`] series.
    pub fn register_scrape_hook(&self, hook: Weak<dyn ScrapeHook>) {
        if let Some(owner) = &self.owner {
            owner.register_scrape_hook(hook);
        }
    }
}

/// Reads one sample out of a rendered exposition, for tests here and in other modules.
#[cfg(test)]
pub(crate) fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.split(' ').next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn render_is_openmetrics_with_client_go_workqueue_names() {
        let metrics = Metrics::new();
        let wq = metrics.workqueue("network");
        wq.added();
        wq.added();
        wq.set_depth(2);
        wq.retried();
        wq.queued_for(Duration::from_millis(1500));
        wq.worked_for(Duration::from_millis(250));
        wq.set_in_flight(Duration::from_secs(3), Duration::from_secs(2));

        let text = metrics.render();
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(text.contains("# TYPE workqueue_adds counter\n"), "{text}");
        assert!(text.contains("# TYPE workqueue_queue_duration_seconds histogram\n"));
        for (series, value) in [
            (r#"workqueue_depth{name="network"}"#, 2.0),
            (r#"workqueue_adds_total{name="network"}"#, 2.0),
            (r#"workqueue_retries_total{name="network"}"#, 1.0),
            (
                r#"workqueue_queue_duration_seconds_sum{name="network"}"#,
                1.5,
            ),
            (
                r#"workqueue_queue_duration_seconds_count{name="network"}"#,
                1.0,
            ),
            (
                r#"workqueue_queue_duration_seconds_bucket{le="1.0",name="network"}"#,
                0.0,
            ),
            (
                r#"workqueue_queue_duration_seconds_bucket{le="10.0",name="network"}"#,
                1.0,
            ),
            (
                r#"workqueue_work_duration_seconds_sum{name="network"}"#,
                0.25,
            ),
            (r#"workqueue_unfinished_work_seconds{name="network"}"#, 3.0),
            (
                r#"workqueue_longest_running_processor_seconds{name="network"}"#,
                2.0,
            ),
        ] {
            assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
        }
    }

    #[test]
    fn workqueue_handles_for_one_name_share_series() {
        let metrics = Metrics::new();
        metrics.workqueue("naming").added();
        metrics.workqueue("naming").added();
        metrics.workqueue("network").added();
        let text = metrics.render();
        assert_eq!(
            sample(&text, r#"workqueue_adds_total{name="naming"}"#),
            Some(2.0)
        );
        assert_eq!(
            sample(&text, r#"workqueue_adds_total{name="network"}"#),
            Some(1.0)
        );
    }

    #[test]
    fn reconcile_results_count_per_guest_and_limits_count_twice() {
        let metrics = Metrics::new();
        metrics.guest_loaded("network", "sha256:ab", true);
        metrics.reconcile_finished(
            "network",
            ReconcileResult::Success,
            Duration::from_millis(20),
        );
        metrics.reconcile_finished(
            "network",
            ReconcileResult::Success,
            Duration::from_millis(30),
        );
        metrics.reconcile_finished("network", ReconcileResult::Deadline, Duration::from_secs(5));
        metrics.reconcile_finished("network", ReconcileResult::MemoryLimit, Duration::ZERO);
        metrics.reconcile_finished("naming", ReconcileResult::PermanentError, Duration::ZERO);
        metrics.deadline_hit("naming");

        let text = metrics.render();
        for (series, value) in [
            (
                r#"reconciler_reconcile_total{guest="network",result="success"}"#,
                2.0,
            ),
            (
                r#"reconciler_reconcile_total{guest="network",result="deadline"}"#,
                1.0,
            ),
            (
                r#"reconciler_reconcile_total{guest="network",result="memory_limit"}"#,
                1.0,
            ),
            // Created at zero by guest_loaded:
            (
                r#"reconciler_reconcile_total{guest="network",result="trap"}"#,
                0.0,
            ),
            (
                r#"reconciler_reconcile_total{guest="naming",result="permanent_error"}"#,
                1.0,
            ),
            (
                r#"reconciler_reconcile_duration_seconds_count{guest="network"}"#,
                4.0,
            ),
            (
                r#"reconciler_reconcile_duration_seconds_sum{guest="network"}"#,
                5.05,
            ),
            (
                r#"reconciler_reconcile_duration_seconds_bucket{le="0.025",guest="network"}"#,
                2.0,
            ),
            (r#"reconciler_deadline_hits_total{guest="network"}"#, 1.0),
            (r#"reconciler_deadline_hits_total{guest="naming"}"#, 1.0),
            (
                r#"reconciler_memory_limit_hits_total{guest="network"}"#,
                1.0,
            ),
        ] {
            assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
        }
        assert_eq!(
            sample(
                &text,
                r#"reconciler_reconcile_total{guest="naming",result="trap"}"#
            ),
            None,
            "naming was never loaded, so its zero series must not exist"
        );
    }

    #[test]
    fn guest_versions_informers_leader_and_host_calls() {
        let metrics = Metrics::new();
        metrics.guest_loaded("network", "old", true);
        metrics.guest_loaded("network", "old", false);
        metrics.guest_loaded("network", "new", true);
        metrics.guest_load_failed("/guests/broken.wasm");
        metrics.guest_load_failed("/guests/broken.wasm");
        metrics.instantiated("network", Duration::from_micros(30));
        metrics.informer_objects("samplecontroller.k8s.io", "v1alpha1", "Network", 3);
        metrics.informer_objects("", "v1", "ConfigMap", 7);
        metrics.informer_objects("", "v1", "ConfigMap", 5);
        metrics.informer_objects("", "v1", "Secret", 1);
        metrics.informer_removed("", "v1", "Secret");
        metrics.set_leader(true);
        metrics.host_call("network", "lister", "get", HostCallOutcome::Ok);
        metrics.host_call("network", "lister", "get", HostCallOutcome::Ok);
        metrics.host_call("network", "cluster", "apply", HostCallOutcome::Denied);

        let text = metrics.render();
        for (series, value) in [
            (
                r#"reconciler_guest_loaded{guest="network",hash="old"}"#,
                0.0,
            ),
            (
                r#"reconciler_guest_loaded{guest="network",hash="new"}"#,
                1.0,
            ),
            (
                r#"reconciler_guest_load_failures_total{file="/guests/broken.wasm"}"#,
                2.0,
            ),
            (
                r#"reconciler_instantiate_duration_seconds_count{guest="network"}"#,
                1.0,
            ),
            (
                r#"reconciler_instantiate_duration_seconds_bucket{le="0.000025",guest="network"}"#,
                0.0,
            ),
            (
                r#"reconciler_instantiate_duration_seconds_bucket{le="0.00005",guest="network"}"#,
                1.0,
            ),
            (
                r#"reconciler_informer_objects{group="samplecontroller.k8s.io",version="v1alpha1",kind="Network"}"#,
                3.0,
            ),
            (
                r#"reconciler_informer_objects{group="",version="v1",kind="ConfigMap"}"#,
                5.0,
            ),
            ("reconciler_leader", 1.0),
            (
                r#"reconciler_host_calls_total{guest="network",interface="lister",function="get",outcome="ok"}"#,
                2.0,
            ),
            (
                r#"reconciler_host_calls_total{guest="network",interface="cluster",function="apply",outcome="denied"}"#,
                1.0,
            ),
        ] {
            assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
        }
        assert!(!text.contains(r#"kind="Secret""#), "{text}");
        metrics.set_leader(false);
        assert_eq!(sample(&metrics.render(), "reconciler_leader"), Some(0.0));
    }

    #[test]
    fn informer_traffic_adds_up_per_kind_and_filter_modes_come_and_go() {
        let metrics = Metrics::new();
        let shard_a = metrics.informer("", "v1", "ConfigMap");
        let shard_b = metrics.informer("", "v1", "ConfigMap");
        shard_a.received_bytes(1000);
        shard_b.received_bytes(24);
        shard_a.received_event();
        shard_b.received_event();
        shard_b.received_event();
        InformerMetrics::unregistered().received_bytes(5);
        metrics.informer_shard_filter("", "v1", "ConfigMap", "server", true);
        metrics.informer_shard_filter("", "v1", "ConfigMap", "client", true);
        metrics.informer_shard_filter("", "v1", "ConfigMap", "client", false);

        let text = metrics.render();
        for (series, value) in [
            (
                r#"reconciler_informer_received_bytes_total{group="",version="v1",kind="ConfigMap"}"#,
                1024.0,
            ),
            (
                r#"reconciler_informer_events_total{group="",version="v1",kind="ConfigMap"}"#,
                3.0,
            ),
            (
                r#"reconciler_informer_shard_filter{group="",version="v1",kind="ConfigMap",mode="server"}"#,
                1.0,
            ),
        ] {
            assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
        }
        assert!(!text.contains(r#"mode="client""#), "{text}");
    }

    #[test]
    fn label_values_are_escaped() {
        let metrics = Metrics::new();
        metrics.guest_load_failed("we\"ird\\name.wasm");
        let text = metrics.render();
        assert_eq!(
            sample(
                &text,
                r#"reconciler_guest_load_failures_total{file="we\"ird\\name.wasm"}"#
            ),
            Some(1.0),
            "{text}"
        );
    }

    struct CountingHook(AtomicUsize);

    impl ScrapeHook for CountingHook {
        fn before_scrape(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn scrape_hooks_run_per_render_until_dropped() {
        let metrics = Metrics::new();
        let hook = Arc::new(CountingHook(AtomicUsize::new(0)));
        let weak: Weak<CountingHook> = Arc::downgrade(&hook);
        metrics.register_scrape_hook(weak);
        let _ = metrics.render();
        let _ = metrics.render();
        assert_eq!(hook.0.load(Ordering::SeqCst), 2);
        drop(hook);
        let _ = metrics.render();
        assert!(metrics.inner.scrape_hooks.lock().is_empty());

        // Unregistered queue series have nowhere to register and must not panic.
        let orphan = Arc::new(CountingHook(AtomicUsize::new(0)));
        let weak: Weak<CountingHook> = Arc::downgrade(&orphan);
        WorkqueueMetrics::unregistered().register_scrape_hook(weak);
        assert_eq!(orphan.0.load(Ordering::SeqCst), 0);
    }
}
