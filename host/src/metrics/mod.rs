//! One Prometheus registry for the whole host.
//!
//! Every module reports through the small typed methods on [`Metrics`] (and the per-queue
//! handle [`WorkqueueMetrics`], the per-GVK handle [`InformerMetrics`]); nobody else touches
//! `prometheus_client` types, so metric names, labels and buckets are decided in this folder.
//!
//! Names follow the conventions operators already alert on: the `workqueue_*` family is
//! spelled exactly as client-go/controller-runtime expose it (label `name` = guest), and
//! our own families start with `reconciler_`. Each family is declared once, in its area's
//! `register` (name, help text, unit), through the one helper in `family.rs`:
//!
//! | file | families (as rendered) | labels |
//! |---|---|---|
//! | `workqueue.rs` | `workqueue_depth`, `workqueue_adds_total`, `workqueue_retries_total`, `workqueue_queue_duration_seconds`, `workqueue_work_duration_seconds`, `workqueue_unfinished_work_seconds`, `workqueue_longest_running_processor_seconds` | `name` |
//! | `workqueue.rs` | `reconciler_workqueue_depth` (the depth split by priority) | `name`, `priority` |
//! | `guests.rs` | `reconciler_reconcile_total` | `guest`, `result` |
//! | | `reconciler_reconcile_duration_seconds`, `reconciler_instantiate_duration_seconds`, `reconciler_deadline_hits_total`, `reconciler_memory_limit_hits_total`, `reconciler_finalizer_orphaned`, `reconciler_finalizer_released_total`, `reconciler_shadow_diffs_total`, `reconciler_shadow_agreements_total`, `reconciler_writes_unchanged_total` | `guest` |
//! | | `reconciler_guest_loaded` | `guest`, `hash` |
//! | | `reconciler_guest_load_failures_total` | `file` |
//! | | `reconciler_host_calls_total` | `guest`, `interface`, `function`, `outcome` |
//! | `informers.rs` | `reconciler_informer_objects`, `reconciler_informer_received_bytes_total`, `reconciler_informer_events_total` | `group`, `version`, `kind` |
//! | | `reconciler_informer_shard_filter` | `group`, `version`, `kind`, `mode` |
//! | | `reconciler_informer_lists_total` | `group`, `version`, `kind`, `mode`, `form` |
//! | | `reconciler_informer_metadata_only`, `reconciler_informer_throttled_total` | `group`, `version`, `kind` |
//! | | `reconciler_watch_throttled_total` | `watch` |
//! | `outbound.rs` | `reconciler_http_requests_total` | `guest`, `host`, `outcome` |
//! | | `reconciler_http_sent_bytes_total`, `reconciler_http_received_bytes_total`, `reconciler_http_request_duration_seconds` | `guest`, `host` |
//! | `watches.rs` | `reconciler_map_calls_total` | `guest`, `result` |
//! | | `reconciler_map_duration_seconds`, `reconciler_field_index_entries`, `reconciler_keys_outside_namespace_total` | `guest` |
//! | `shards.rs` | `reconciler_leader`, `reconciler_shard_members`, `reconciler_shard_owned_slots`, `reconciler_shard_owned_ratio` | none |
//! | | `reconciler_shard_keys`, `reconciler_shard_foreign_keys_total` | `guest` |
//! | | `reconciler_shard_handovers_total` | `direction` |
//! | `writes.rs` | `reconciler_api_write_limit`, `reconciler_api_writes_in_flight`, `reconciler_api_write_duration_seconds` | none |
//! | | `reconciler_api_write_throttled_total` | `reason` |
//! | | `reconciler_guest_concurrency` | `guest` |
//! | `rollouts.rs` | `reconciler_rollout_reconciles_total` | `guest`, `version`, `result` |
//! | | `reconciler_rollout_reconcile_duration_seconds` | `guest`, `version` |
//! | | `reconciler_rollout_compared_total` | `guest`, `verdict` |
//! | | `reconciler_rollout_step`, `reconciler_rollout_share_percent` | `guest` |
//! | | `reconciler_rollout_phase` | `guest`, `phase` |
//! | | `reconciler_rollout_rollbacks_total` | `guest`, `gate` |
//!
//! `family.rs` also holds the `guest` label set and the value types the areas share;
//! `scrape.rs` holds [`ScrapeHook`]s (here and in `workqueue.rs`). Imports run one way: this
//! file uses the areas, the areas use `family.rs` and `scrape.rs`, nothing uses this file back
//! (the tests beside each area drive it through [`Metrics`], the only public way in).
//!
//! **Zeroing rule.** When a guest loads ([`Metrics::guest_loaded`] with `true`), every
//! per-guest counter and gauge whose other labels are a closed set gets its series created at
//! 0: `reconciler_reconcile_total` (every result), `reconciler_deadline_hits_total`,
//! `reconciler_memory_limit_hits_total`, `reconciler_finalizer_orphaned`,
//! `reconciler_finalizer_released_total`, `reconciler_shadow_diffs_total`,
//! `reconciler_shadow_agreements_total`, `reconciler_writes_unchanged_total` and
//! `reconciler_shard_foreign_keys_total`. So `rate()`
//! sees the first event, and an alert can tell "none yet" (0) from "not running" (absent).
//! Zeroing only creates: a series that exists keeps its value. Exempt, created by their first
//! update:
//!
//! - `reconciler_host_calls_total`: interface × function is fixed by the WIT, but the names
//!   belong to the capability modules (which import this one), and most pairs lie outside
//!   any one guest's grant: six outcomes for every host function, per guest, nearly all of
//!   them never moving.
//! - The duration histograms: a series is a line per bucket (43 for reconciles, 19 for
//!   instantiation), and the zeroed reconcile counters already say "loaded, idle".
//! - `reconciler_shard_keys`: a measurement, where 0 would be false (an unsharded host owns
//!   every key) until the first count.
//! - `reconciler_keys_outside_namespace_total`: only a namespaced Reconciler's guest can move
//!   it, and only when its objects (or it) name what it may not have; a series at 0 for every
//!   guest would say nothing.
//! - `reconciler_guest_loaded` (set on load itself; `hash` is open) and
//!   `reconciler_guest_load_failures_total` (labelled by file path, no guest yet).
//!
//! Families not per guest follow their own object: a queue's series exist (at 0) from
//! [`Metrics::workqueue`], an informer's traffic from [`Metrics::informer`], handovers from
//! the first one; unlabelled gauges always render. A family with no series renders nothing.
//! Unloading removes nothing: the version's `reconciler_guest_loaded` drops to 0 and every
//! other series keeps its value, so totals run on across hot swaps and reloads. Only
//! informer series go away ([`Metrics::informer_removed`], a filter mode turned off).
//!
//! Cost model: every family is a hash map behind a read-write lock, so a labelled update
//! costs one label-set hash, a shared read lock and an atomic add (plus a short write lock
//! the first time a label set is seen: fifteen when a guest loads). Work queues and
//! informers resolve their series once and keep the handles, so their updates cost only
//! atomics. [`Metrics::render`] walks every series; it is meant for a scrape every few
//! seconds, not a hot path.

mod family;
mod guests;
mod informers;
mod outbound;
mod rollouts;
mod scrape;
mod shards;
mod watches;
mod workqueue;
mod writes;

use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

use family::Registrar;
use guests::GuestFamilies;
pub(crate) use guests::HostCallOutcome;
pub use guests::ReconcileResult;
use informers::InformerFamilies;
pub(crate) use informers::InformerMetrics;
use outbound::OutboundFamilies;
use rollouts::RolloutFamilies;
pub(crate) use scrape::ScrapeHook;
use scrape::ScrapeHooks;
use shards::ShardFamilies;
use watches::WatchFamilies;
use workqueue::WorkqueueFamilies;
pub use workqueue::WorkqueueMetrics;
use writes::WriteFamilies;

/// The content type to serve [`Metrics::render`]'s output with: it is OpenMetrics text
/// (ends in `# EOF`, counters are declared without their `_total` suffix), which
/// Prometheus negotiates and parses natively.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

struct Inner {
    registry: Registry,
    workqueue: WorkqueueFamilies,
    guests: GuestFamilies,
    informers: InformerFamilies,
    shards: ShardFamilies,
    outbound: OutboundFamilies,
    watches: WatchFamilies,
    writes: WriteFamilies,
    rollouts: RolloutFamilies,
    scrape_hooks: ScrapeHooks,
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
    /// Registers every family. Series appear in the exposition once first touched (see the
    /// zeroing rule in the module doc).
    #[must_use]
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let mut r = Registrar(&mut registry);
        let workqueue = WorkqueueFamilies::register(&mut r);
        let guests = GuestFamilies::register(&mut r);
        let informers = InformerFamilies::register(&mut r);
        let shards = ShardFamilies::register(&mut r);
        let outbound = OutboundFamilies::register(&mut r);
        let watches = WatchFamilies::register(&mut r);
        let writes = WriteFamilies::register(&mut r);
        let rollouts = RolloutFamilies::register(&mut r);
        Self {
            inner: Arc::new(Inner {
                registry,
                workqueue,
                guests,
                informers,
                shards,
                outbound,
                watches,
                writes,
                rollouts,
                scrape_hooks: ScrapeHooks::default(),
            }),
        }
    }

    /// The `workqueue_*` series of the queue called `name` (the guest name). Resolve once
    /// per queue: the handle's updates are plain atomics.
    #[must_use]
    pub(crate) fn workqueue(&self, name: &str) -> WorkqueueMetrics {
        let hooks = Arc::clone(&self.inner.scrape_hooks);
        self.inner.workqueue.queue(name, hooks)
    }

    /// An outbound HTTP request of `guest` to `host` ended with `outcome` (`2xx`..`5xx`,
    /// `denied`, `error`, `shadow`, `replayed`).
    pub(crate) fn http_request(&self, guest: &str, host: &str, outcome: &'static str) {
        self.inner.outbound.request(guest, host, outcome);
    }

    /// An outbound HTTP exchange of `guest` with `host` sent and received these body bytes.
    pub(crate) fn http_exchanged(
        &self,
        guest: &str,
        host: &str,
        sent: usize,
        received: usize,
        took: Duration,
    ) {
        self.inner
            .outbound
            .exchanged(guest, host, sent, received, took);
    }

    /// One call of `guest`'s `map` export ended with `result` (`Success` when it returned
    /// keys) after `took`.
    pub(crate) fn map_called(&self, guest: &str, result: ReconcileResult, took: Duration) {
        self.inner.watches.map_called(guest, result, took);
    }

    /// One call of `guest`'s `index` export ended with `result` after `took`.
    pub(crate) fn index_called(&self, guest: &str, result: ReconcileResult, took: Duration) {
        self.inner.watches.index_called(guest, result, took);
    }

    /// `guest`'s field indexes hold `entries` entries now.
    pub(crate) fn field_index_entries(&self, guest: &str, entries: usize) {
        self.inner.watches.index_entries(guest, entries);
    }

    /// A key outside the namespace of `guest`, a namespaced Reconciler's, was not handed to it.
    pub(crate) fn key_outside_namespace(&self, guest: &str) {
        self.inner.watches.outside_namespace(guest);
    }

    /// One reconcile of `guest` ended with `result` after `duration`. Make exactly one call
    /// per reconcile: `Deadline` and `MemoryLimit` also count in
    /// `reconciler_deadline_hits_total` / `reconciler_memory_limit_hits_total`, so alerts on
    /// those need no label matching.
    pub(crate) fn reconcile_finished(
        &self,
        guest: &str,
        result: ReconcileResult,
        duration: Duration,
    ) {
        self.inner
            .guests
            .reconcile_finished(guest, result, duration);
    }

    /// A deadline hit outside a reconcile: `manifest()` at load time, labelled by the file
    /// (the guest's name is not known yet). Do not call it for a reconcile reported through
    /// [`Self::reconcile_finished`].
    pub(crate) fn deadline_hit(&self, guest: &str) {
        self.inner.guests.deadline_hit(guest);
    }

    /// A fresh instance of `guest` took `duration` to create.
    pub(crate) fn instantiated(&self, guest: &str, duration: Duration) {
        self.inner.guests.instantiated(guest, duration);
    }

    /// Version `hash` of `guest` started (`true`) or stopped (`false`) serving. On a hot
    /// swap report the old hash `false` and the new one `true`. Loading also creates the
    /// guest's closed-label series at zero (the zeroing rule in the module doc), so `rate()`
    /// sees the first reconcile; stopping removes nothing.
    pub(crate) fn guest_loaded(&self, guest: &str, hash: &str, loaded: bool) {
        self.inner.guests.loaded(guest, hash, loaded);
        if loaded {
            self.inner.shards.zero_guest(guest);
        }
    }

    /// `objects` objects still carry the finalizer of unloaded guest `guest` (0 once it is
    /// back or its finalizer was released).
    pub(crate) fn finalizer_orphaned(&self, guest: &str, objects: usize) {
        self.inner.guests.finalizer_orphaned(guest, objects);
    }

    /// The host removed an unloaded guest's finalizer from `objects` objects.
    pub(crate) fn finalizer_released(&self, guest: &str, objects: usize) {
        self.inner.guests.finalizer_released(guest, objects);
    }

    /// A reconcile in shadow mode agreed with the live state, or differed from it.
    /// A status patch of `guest`'s was not sent: the cache held every value it set.
    pub(crate) fn write_unchanged(&self, guest: &str) {
        self.inner.guests.write_unchanged(guest);
    }

    pub(crate) fn shadow_verdict(&self, guest: &str, agreed: bool) {
        self.inner.guests.shadow_verdict(guest, agreed);
    }

    /// A pulled module was refused (a Reconciler's): `reason` is its status reason
    /// (`SignatureMissing`, `TooLarge`, `RegistryNotAllowed`, ...).
    pub(crate) fn module_refused(&self, reason: &str) {
        self.inner.guests.module_refused(reason);
    }

    /// The guest file `file` could not be loaded (compile, validation or grant failure).
    pub(crate) fn guest_load_failed(&self, file: &str) {
        self.inner.guests.load_failed(file);
    }

    /// A guest called `interface.function` on the host. Costs a few small allocations for
    /// the label set: fine per host call, which already crosses the component boundary.
    pub(crate) fn host_call(
        &self,
        guest: &str,
        interface: &str,
        function: &str,
        outcome: HostCallOutcome,
    ) {
        self.inner
            .guests
            .host_call(guest, interface, function, outcome);
    }

    /// The informer for `group/version/kind` now caches `objects` objects. The core group
    /// is the empty string, as in the API.
    pub(crate) fn informer_objects(&self, group: &str, version: &str, kind: &str, objects: usize) {
        self.inner.informers.objects(group, version, kind, objects);
    }

    /// The informer for `group/version/kind` was released (its last guest went away):
    /// drop its series instead of reporting a stale count.
    pub(crate) fn informer_removed(&self, group: &str, version: &str, kind: &str) {
        self.inner.informers.removed(group, version, kind);
    }

    /// The traffic series of the informers for `group/version/kind`, resolved once per informer
    /// (every scope of a GVK adds to the same series).
    #[must_use]
    pub(crate) fn informer(&self, group: &str, version: &str, kind: &str) -> InformerMetrics {
        self.inner.informers.traffic(group, version, kind)
    }

    /// Counts, each time it is called, a list or watch of the host's own watch of `watch` that
    /// the API server refused as overloaded (`Reconciler`, `Namespace`, `Lease`, …).
    pub(crate) fn watch_throttled(&self, watch: &str) -> impl Fn() + Clone + Send + Sync + 'static {
        let counter = self.inner.informers.watch_throttled(watch);
        move || {
            counter.inc();
        }
    }

    /// A sharded informer for `group/version/kind` filters in `mode` (`server` or `client`):
    /// `active` sets the series to 1, otherwise it is removed.
    pub(crate) fn informer_shard_filter(
        &self,
        group: &str,
        version: &str,
        kind: &str,
        mode: &str,
        active: bool,
    ) {
        self.inner
            .informers
            .shard_filter(group, version, kind, mode, active);
    }

    /// This replica gained (`true`) or lost (`false`) the leader lease.
    pub(crate) fn set_leader(&self, leader: bool) {
        self.inner.shards.set_leader(leader);
    }

    /// Sharded mode: the ring as this replica sees it.
    pub(crate) fn shard_ring(&self, members: usize, owned_slots: usize, owned_ratio: f64) {
        self.inner.shards.ring(members, owned_slots, owned_ratio);
    }

    /// Sharded mode: `keys` primary objects of `guest` are in this replica's share.
    pub(crate) fn shard_keys(&self, guest: &str, keys: usize) {
        self.inner.shards.keys(guest, keys);
    }

    /// Sharded mode: `slots` were gained (`true`) or handed over (`false`).
    pub(crate) fn shard_handover(&self, gained: bool, slots: usize) {
        self.inner.shards.handover(gained, slots);
    }

    /// Sharded mode: a key of `guest` was dropped because another replica owns its object.
    pub(crate) fn shard_foreign_key(&self, guest: &str) {
        self.inner.shards.foreign_key(guest);
    }

    /// The adaptive limit on the host's API writes in flight is now `limit`.
    pub(crate) fn api_write_limit(&self, limit: usize) {
        self.inner.writes.limit(limit);
    }

    /// The host has `in_flight` API writes out.
    pub(crate) fn api_writes_in_flight(&self, in_flight: usize) {
        self.inner.writes.in_flight(in_flight);
    }

    /// An API write was answered after `took`.
    pub(crate) fn api_write_finished(&self, took: Duration) {
        self.inner.writes.finished(took.as_secs_f64());
    }

    /// An API write was refused as overloaded with HTTP `status` (429, 503, 504).
    pub(crate) fn api_write_throttled(&self, status: u16) {
        self.inner.writes.throttled(status);
    }

    /// `guest` may reconcile `keys` keys at once now.
    /// A reconcile of the old or the new version in a rollout (a shadow run counts as new).
    pub(crate) fn rollout_reconciled(&self, guest: &str, new: bool, failed: bool, took: Duration) {
        self.inner.rollouts.reconciled(guest, new, failed, took);
    }

    /// A shadow run of the new version in a rollout, compared with the live state.
    pub(crate) fn rollout_compared(&self, guest: &str, agreed: bool) {
        self.inner.rollouts.compared(guest, agreed);
    }

    /// Where `guest`'s rollout stands: its step, the share of keys the new version holds,
    /// its phase (one of `rollouts::PHASES`).
    pub(crate) fn rollout_stands(&self, guest: &str, step: usize, share_percent: u8, phase: &str) {
        self.inner
            .rollouts
            .stands(guest, step, share_percent, phase);
    }

    /// A rollout of `guest` rolled back by `gate` (`abort` for a person).
    pub(crate) fn rollout_rolled_back(&self, guest: &str, gate: &'static str) {
        self.inner.rollouts.rolled_back(guest, gate);
    }

    pub(crate) fn guest_concurrency(&self, guest: &str, keys: usize) {
        self.inner.writes.concurrency(guest, keys);
    }

    /// Run `hook` before every render for as long as it is alive; dead hooks are pruned.
    pub(crate) fn register_scrape_hook(&self, hook: Weak<dyn ScrapeHook>) {
        self.inner.scrape_hooks.lock().push(hook);
    }

    /// The whole registry in OpenMetrics text; serve it with [`CONTENT_TYPE`]. Runs the
    /// scrape hooks first (each locks its queue briefly), then reads every series: O(series).
    #[must_use]
    pub fn render(&self) -> String {
        scrape::run(&self.inner.scrape_hooks);
        let mut text = String::new();
        // Writing into a String cannot fail and our label encoders never fail; should that
        // change, a partial scrape plus a log line beats a panicking metrics endpoint.
        if let Err(error) = encode(&mut text, &self.inner.registry) {
            tracing::error!(%error, "encoding metrics failed; the scrape is incomplete");
        }
        text
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

    #[test]
    fn a_loaded_guest_has_every_closed_per_guest_series_at_zero_and_keeps_them_on_unload() {
        let metrics = Metrics::new();
        metrics.guest_loaded("widget", "v1", true);

        let zeroed = [
            r#"reconciler_reconcile_total{guest="widget",result="success"}"#,
            r#"reconciler_reconcile_total{guest="widget",result="memory_limit"}"#,
            r#"reconciler_deadline_hits_total{guest="widget"}"#,
            r#"reconciler_memory_limit_hits_total{guest="widget"}"#,
            r#"reconciler_finalizer_orphaned{guest="widget"}"#,
            r#"reconciler_finalizer_released_total{guest="widget"}"#,
            r#"reconciler_shadow_diffs_total{guest="widget"}"#,
            r#"reconciler_shadow_agreements_total{guest="widget"}"#,
            r#"reconciler_shard_foreign_keys_total{guest="widget"}"#,
        ];
        let text = metrics.render();
        for series in zeroed {
            assert_eq!(sample(&text, series), Some(0.0), "{series} in\n{text}");
        }
        // Exempt (see the module doc): created by their first update.
        for family in [
            "reconciler_host_calls_total",
            "reconciler_reconcile_duration_seconds",
            "reconciler_instantiate_duration_seconds",
            "reconciler_shard_keys",
        ] {
            assert!(
                !text.contains(&format!("\n{family}")),
                "{family} in\n{text}"
            );
        }

        // Reloading keeps what was counted; unloading removes nothing.
        metrics.shadow_verdict("widget", false);
        metrics.guest_loaded("widget", "v1", false);
        metrics.guest_loaded("widget", "v2", true);
        metrics.guest_loaded("widget", "v2", false);
        let text = metrics.render();
        assert_eq!(
            sample(&text, r#"reconciler_shadow_diffs_total{guest="widget"}"#),
            Some(1.0),
            "{text}"
        );
        for series in zeroed.iter().filter(|s| !s.contains("shadow_diffs")) {
            assert_eq!(sample(&text, series), Some(0.0), "{series} in\n{text}");
        }
    }
}
