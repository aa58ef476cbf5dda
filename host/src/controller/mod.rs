//! One controller per active guest: its informers, its work queue, its workers. The loop reads
//! as client-go's sample-controller does: `start` → `Worker::run` → `process_next` → `sync`.
//!
//! This file is the loop. Beside it: [`caches`] (the informers the controller holds),
//! [`version`] (one version of the guest wired to its contexts and providers, and how many keys
//! it reconciles at once), [`sync`] (the reconcile step, shared with the offline runner),
//! [`triggers`] (event → keys), [`index`] (field and computed indexes), [`keys`] (the queue's
//! door) and [`queue`].
//!
//! Why the pieces are there:
//! - Workers start only after every informer the guest reads has synced (WaitForCacheSync):
//!   a guest reconciling from a half-filled cache would act on a partial world.
//! - A key is `forget`-ed after a success so its backoff resets, and `add_rate_limited` after a
//!   failure so a failing key backs off (5 ms doubling to 1000 s) and a failing guest cannot
//!   flood the API server (overall token bucket).
//! - A 409 during the reconcile means the guest acted on a stale object: retry with backoff
//!   whatever the guest returned.
//! - The finalizer is added before the first reconcile of an object, so a deletion while the
//!   host is down still reaches the guest; it is removed only after a successful reconcile
//!   with `deleting = true`.
//! - The guest version is read at the start of each reconcile: a hot swap affects the next
//!   key, never one in flight.
//! - Guests run on the async workers: they yield every epoch tick and at every waiting
//!   import, so stopping a controller cancels its reconciles at once instead of waiting for
//!   their deadlines.
//! - A guest whose manifest leaves `concurrency` at 0 reconciles as many keys at once as the
//!   host's adaptive limit on API writes allows (`crate::cluster::flowcontrol`), up to its cap: the API
//!   server, not a number picked in advance, sets the pace.
//! - A standby (a leader-elected replica without the lease) runs its controllers without
//!   workers: caches synced, events mapped to keys, all of them queued low, so that on taking
//!   the lease it reconciles at once instead of listing first (controller-runtime's warm-up).

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod caches;
mod index;
mod keys;
pub mod queue;
mod rolling;
pub(crate) mod sync;
mod triggers;
mod version;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::cluster::informers::{Informer, Informers};
use crate::cluster::objects::{Gvk, ObjectKey, ObjectRef};
use crate::controller::queue::{QueueConfig, WorkQueue};
use crate::metrics::Metrics;
use crate::replicas::fence::WriteFence;
use crate::sandbox::backends::NetworkBackend;
use crate::sandbox::capabilities::{CallContext, EventRecord};
use crate::sandbox::manifest::Mapping;
use crate::sandbox::providers::kube::KubeCluster;
use crate::sandbox::records::Recorder;
use crate::sandbox::runtime::{Outcome, Request, Run, Runtime};
use crate::supply::guest_set::ActiveGuest;
use caches::Caches;
pub use index::{FieldIndex, Held, IndexBudget};
use index::{Indexer, Source as IndexSource, follow_computed};
use keys::Keys;
use rolling::{Driver, InFlight, Rolling, Side};
use sync::{Next, Primary, Step};
use triggers::{FunctionMapper, Mapper, Route, map_events};
pub(crate) use triggers::{WatchFilter, index_keys, kept_generation, primary_keys, valid_keys};
use version::{GuestVersion, concurrency};

/// Everything a controller needs from the host.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) client: kube::Client,
    pub(crate) informers: Informers,
    pub(crate) runtime: Arc<Runtime>,
    pub(crate) metrics: Metrics,
    pub(crate) networks: BTreeMap<String, Arc<dyn NetworkBackend>>,
    /// Restrict every watch of namespaced kinds to this namespace (`run --watch-namespace`);
    /// writes and events outside it are denied too.
    pub(crate) namespace: Option<String>,
    /// Closed when the host loses its lease: no write is sent after that.
    pub(crate) fence: WriteFence,
    /// Where guests in shadow mode record their verdicts (`/guests`, metrics).
    pub(crate) shadows: Arc<crate::sandbox::shadow::Shadows>,
    /// Sharded mode (`run --shards auto`): the slots this replica's controllers own. Primary
    /// informers watch only objects whose uid hashes into them; keys outside are dropped.
    pub(crate) shard: Option<crate::cluster::shard_ranges::SlotSet>,
    /// Where guests whose grant sets `record` write their records (`crate::sandbox::records`).
    pub(crate) record_directory: Option<std::path::PathBuf>,
    /// Sends the outbound HTTP of guests whose grant has `http:` rules.
    pub(crate) outbound: Arc<dyn crate::sandbox::capabilities::http::Outbound>,
    /// The host's limit on API writes in flight; adaptive guests take their keys under it.
    pub(crate) flow: crate::cluster::flowcontrol::FlowControl,
    /// The configuration's `maxConcurrency`: an adaptive guest's cap unless its grant says less.
    pub(crate) max_concurrency: u32,
    /// Low-priority keys behind changes (the default); off with [`QUEUE_ENV`]`=fifo`.
    pub(crate) queue_priorities: bool,
    /// Where controllers publish their rollouts, and the versions rolled back.
    pub(crate) rollouts: Arc<crate::supply::guest_set::Rollouts>,
}

/// A running controller. Dropping it without `stop` aborts its tasks.
pub struct Controller {
    name: String,
    queue: WorkQueue<ObjectKey>,
    version: watch::Sender<Arc<GuestVersion>>,
    /// A rollout in flight: a new version beside `version`, on a share of the keys.
    rolling: InFlight,
    /// The task that judges the rollout in flight.
    driver: Option<tokio::task::AbortHandle>,
    tasks: JoinSet<()>,
    /// The workers, started once the caches synced. Held here, not inside the task that
    /// starts them, so that stopping the controller waits until each has really ended: an
    /// aborted task runs on until its next yield, and a worker of a controller stopped for a
    /// handover once began a reconcile of a slot already handed over (sharded seed 1019).
    workers: Workers,
    synced: watch::Receiver<bool>,
    /// Whether the workers may start: false while this replica stands by for the lease.
    leading: watch::Sender<bool>,
    primary: Informer,
    caches: Arc<Caches>,
}

/// A controller's workers, started by a task of their own once the caches synced, and ended
/// for good: [`Workers::end`] returns only when no worker runs any more.
#[derive(Clone, Default)]
struct Workers(Arc<tokio::sync::Mutex<JoinSet<()>>>);

impl Workers {
    /// Starts `count` workers made by `worker`.
    async fn start<F>(&self, count: usize, mut worker: impl FnMut() -> F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let mut set = self.0.lock().await;
        for _ in 0..count {
            set.spawn(worker());
        }
    }

    /// Aborts every worker and waits until each has really ended (an aborted task runs on
    /// until its next yield). Call after the task that starts them has ended.
    async fn end(&self) {
        let mut set = self.0.lock().await;
        set.abort_all();
        while set.join_next().await.is_some() {}
    }
}

/// `RECONCILER_HOST_QUEUE=fifo`: every key at one priority (benches compare it with the
/// priority queue, the default).
pub const QUEUE_ENV: &str = "RECONCILER_HOST_QUEUE";

impl Controller {
    /// Acquires the guest's informers and starts its mapping and worker tasks. Workers wait
    /// for every cache to sync first, and, unless `leading`, for [`Controller::lead`].
    pub(crate) async fn start(
        shared: &Shared,
        guest: Arc<ActiveGuest>,
        leading: bool,
    ) -> Result<Self, caches::CacheError> {
        let manifest = &guest.loaded.manifest;
        let name = manifest.name.clone();
        let caches = Arc::new(Caches::acquire(shared, &guest).await?);

        let limits = &guest.grant.limits;
        let mut config = QueueConfig::default();
        if let Some(qps) = limits.queue.per_second.and_then(NonZeroU32::new) {
            config.qps = qps;
        }
        if let Some(burst) = limits.queue.burst.and_then(NonZeroU32::new) {
            config.burst = burst;
        }
        config.priorities = shared.queue_priorities;
        let queue = WorkQueue::with_metrics(config, shared.metrics.workqueue(&name));
        // Everything but the workers adds keys through this door, which keeps a tenant's.
        let keys = Keys::new(queue.clone(), guest.tenant(), &name, shared.metrics.clone());
        let (version, _) =
            watch::channel(Arc::new(GuestVersion::new(shared, &guest, &caches, &keys)));
        let rolling = InFlight::new();

        let mut tasks = JoinSet::new();
        let (leading, lead) = watch::channel(leading);
        // Event → key mapping for the primary kind: every change enqueues the object's own key.
        let primary_events = match manifest.resync {
            Some(period) => caches.primary.subscribe_with_resync(period),
            None => caches.primary.subscribe(),
        };
        tasks.spawn(map_events(
            primary_events,
            keys.clone(),
            Route::Primary {
                generation_changed_only: manifest.generation_changed_only,
                gone: caches.gone.clone(),
            },
            manifest.primary.clone(),
            lead.clone(),
        ));
        spawn_secondaries(
            &mut tasks,
            shared,
            &caches,
            &keys,
            (&version, &rolling),
            &name,
            &lead,
        );

        let (synced_tx, synced) = watch::channel(false);
        let concurrency = concurrency(&guest, shared.max_concurrency);
        let (count, slots) = concurrency.workers(shared, &name);
        let workers = Workers::default();
        let worker = Worker {
            shared: shared.clone(),
            caches: caches.clone(),
            queue: queue.clone(),
            version: version.subscribe(),
            rolling: rolling.subscribe(),
            slots,
        };
        let (guest_name, starter, mut lead) = (name.clone(), workers.clone(), lead);
        tasks.spawn(async move {
            worker.caches.wait_synced().await;
            let _ = synced_tx.send(true);
            if !*lead.borrow() {
                tracing::info!(guest = %guest_name, "caches synced; standing by for the lease");
                if lead.wait_for(|l| *l).await.is_err() {
                    return;
                }
            }
            tracing::info!(guest = %guest_name, workers = count, ?concurrency, "caches synced; starting workers");
            starter.start(count, || worker.clone().run()).await;
        });
        Ok(Self {
            name,
            queue,
            version,
            rolling,
            driver: None,
            tasks,
            workers,
            synced,
            leading,
            primary: caches.primary.clone(),
            caches,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The primary informer (in sharded mode: this replica's share).
    pub(crate) fn primary(&self) -> &Informer {
        &self.primary
    }

    /// Handles on the informers this controller holds besides its primary one: kept across a
    /// restart, they keep those caches warm.
    pub(crate) fn other_informers(&self) -> Vec<Informer> {
        self.caches
            .secondaries
            .iter()
            .map(|(i, _, _)| i.clone())
            .chain(self.caches.readable.values().cloned())
            .collect()
    }

    /// Cached primary objects that carry `finalizer`.
    pub(crate) fn carrying(&self, finalizer: &str) -> usize {
        self.primary
            .list(None, None)
            .iter()
            .filter(|o| crate::cluster::finalizer::carries(o, finalizer))
            .count()
    }

    /// Starts the workers of a controller started standing by (the lease was won); what was
    /// queued meanwhile is worked through, changes from now on ahead of it.
    pub(crate) fn lead(&self) {
        self.leading.send_replace(true);
    }

    /// The informers this controller holds, its primary one included: kept across a restart
    /// (a lost lease back to standby), they keep every cache warm.
    pub(crate) fn informers(&self) -> Vec<Informer> {
        let mut all = self.other_informers();
        all.push(self.primary.clone());
        all
    }

    /// A receiver of the synced flag, for `/readyz`.
    pub(crate) fn synced(&self) -> watch::Receiver<bool> {
        self.synced.clone()
    }

    /// Whether this controller runs exactly this version of its guest, or rolls it out.
    pub(crate) fn runs(&self, guest: &Arc<ActiveGuest>) -> bool {
        Arc::ptr_eq(&self.version.borrow().guest, guest)
            || self
                .rolling
                .get()
                .is_some_and(|r| Arc::ptr_eq(&r.new.guest, guest))
    }

    /// Whether the stable version (the one a rollout in flight would replace) has `guest`'s
    /// content.
    pub(crate) fn stable_is(&self, guest: &ActiveGuest) -> bool {
        self.version.borrow().guest.loaded.hash == guest.loaded.hash
    }

    /// Whether `new` can replace the running version in place (same watches, finalizer and
    /// grant). A new grant restarts the controller: its caches, rates and mode follow the
    /// grant, and every key is reconciled again under it (a guest switched from shadow to
    /// active writes what it held back).
    pub(crate) fn can_swap_to(&self, new: &ActiveGuest) -> bool {
        let current = self.version.borrow();
        current.guest.grant == new.grant && same_watches(&current.guest, new)
    }

    /// Swaps in a new version of the same guest: reconciles already running finish on the old.
    /// A rollout in flight ends: the new version takes every key at once.
    pub(crate) fn swap(&mut self, shared: &Shared, guest: Arc<ActiveGuest>) {
        self.end_rollout();
        let version = GuestVersion::swapped(shared, guest, &self.version.borrow());
        self.version.send_replace(Arc::new(version));
    }

    /// Rolls a new version of the same guest out by `plan` (see [`rolling`]): the running
    /// version stays stable while the new one walks the plan's steps. A rollout in flight to
    /// another version ends first (its keys go back to the stable version).
    pub(crate) fn roll(
        &mut self,
        shared: &Shared,
        guest: &Arc<ActiveGuest>,
        plan: crate::config::Rollout,
    ) {
        self.end_rollout();
        let stable = self.version.borrow().clone();
        let enqueued = version::Enqueued::default();
        let new = Arc::new(GuestVersion::candidate(
            shared,
            guest.clone(),
            &stable,
            enqueued.clone(),
        ));
        let shadow = Arc::new(GuestVersion::shadowing(shared, guest, &stable));
        let resumed = shared.rollouts.resumable(&stable.guest, guest, &plan);
        let resumed_at = resumed.as_ref().map(|r| r.step);
        let rolling = Arc::new(Rolling::begin(
            plan,
            &stable.guest,
            (new, shadow, enqueued),
            resumed,
            shared.metrics.clone(),
        ));
        shared.rollouts.publish(guest, rolling.view());
        self.rolling.set(Some(rolling.clone()));
        let driver = Driver {
            stable: self.version.clone(),
            rolling: self.rolling.clone(),
            rollouts: shared.rollouts.clone(),
            queue: self.queue.clone(),
            primary: self.primary.clone(),
            leading: self.leading.subscribe(),
        };
        self.driver = Some(self.tasks.spawn(driver.drive(rolling)));
        match resumed_at {
            Some(step) => {
                tracing::info!(guest = %self.name, hash = %guest.loaded.hash, step, "rolling a new guest version out, resumed where it stood");
            }
            None => {
                tracing::info!(guest = %self.name, hash = %guest.loaded.hash, "rolling a new guest version out");
            }
        }
    }

    /// Ends the rollout in flight, if any, without promoting it: its keys go back to the
    /// stable version (and a canary's are reconciled by it again on their next change).
    fn end_rollout(&mut self) {
        if let Some(driver) = self.driver.take() {
            driver.abort();
        }
        if let Some(rolling) = self.rolling.set(None) {
            let again = rolling::requeue(&self.queue, &self.primary, rolling.share());
            tracing::info!(guest = %self.name, hash = %rolling.new.guest.loaded.hash, keys = again, "rollout ended by another version");
        }
    }

    /// Stops taking keys, lets running reconciles finish, then stops every task.
    pub(crate) async fn stop(mut self) {
        self.queue.shutdown_with_drain().await;
        self.end_tasks().await;
        tracing::info!(guest = %self.name, "controller stopped");
    }

    /// Aborts every task and waits until each has ended, the workers last (the task that
    /// starts them has ended by then, so none is started after).
    async fn end_tasks(&mut self) {
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        self.workers.end().await;
    }

    /// Stops taking keys and waits for running reconciles to finish (bounded by the caller).
    pub(crate) async fn drain(&self) {
        self.queue.shutdown_with_drain().await;
    }

    /// Stops at once: running reconciles are cancelled (leadership lost, shutdown timed out).
    pub(crate) async fn abort(mut self) {
        self.queue.shutdown();
        self.end_tasks().await;
        // After this line no reconcile of the guest runs here (the robustness journal reads it).
        tracing::info!(guest = %self.name, "controller stopped; running reconciles cancelled");
    }
}

/// Whether two versions of a guest watch the same (primary, namespace, selector, secondaries,
/// finalizer, resync, generation filter) at the same concurrency, so one controller's caches
/// and queue serve both.
pub(crate) fn same_watches(a: &ActiveGuest, b: &ActiveGuest) -> bool {
    a.loaded.manifest.watches_like(&b.loaded.manifest) && concurrency(a, 0) == concurrency(b, 0)
}

/// The tasks that keep the field indexes and map each secondary watch's events to keys.
fn spawn_secondaries(
    tasks: &mut JoinSet<()>,
    shared: &Shared,
    caches: &Arc<Caches>,
    keys: &Keys,
    (version, rolling): (&watch::Sender<Arc<GuestVersion>>, &InFlight),
    name: &str,
    lead: &watch::Receiver<bool>,
) {
    let gvk = caches.primary.gvk();
    let guest_primary = Gvk::new(&gvk.group, &gvk.version, &gvk.kind);
    // A guest runs at most one `map` call at a time, however many function watches it
    // declares, and one `index` call (its computed indexes share one task): two instances
    // beside its reconciles, whatever it declares.
    let map_calls = Arc::new(tokio::sync::Semaphore::new(1));
    let entries = {
        let (metrics, caches, name) = (shared.metrics.clone(), caches.clone(), name.to_owned());
        move || metrics.field_index_entries(&name, caches.index_entries())
    };
    let mut computed = Vec::new();
    for index in &caches.indexes {
        match index.source() {
            IndexSource::Path(_) => {
                let (index, primary, entries) =
                    (index.clone(), caches.primary.clone(), entries.clone());
                let events = primary.subscribe();
                tasks.spawn(async move { index.follow(events, &primary, entries).await });
            }
            IndexSource::Computed(_) => computed.push(index.clone()),
        }
    }
    if !computed.is_empty() {
        let indexer = Indexer {
            indexes: computed,
            keys: keys.clone(),
            runtime: shared.runtime.clone(),
            version: version.subscribe(),
            candidate: rolling.candidate(),
            metrics: shared.metrics.clone(),
            primary: caches.primary.clone(),
        };
        let events = caches.primary.subscribe();
        tasks.spawn(follow_computed(events, indexer, entries));
    }
    for (informer, watch, filter) in &caches.secondaries {
        let mapper = match &watch.mapping {
            Mapping::Field { path, value } => Mapper::Index {
                index: caches.index(&IndexSource::Path(path.clone())),
                value: *value,
            },
            Mapping::Computed { index, value } => Mapper::Index {
                index: caches.index(&IndexSource::Computed(index.clone())),
                value: *value,
            },
            Mapping::Function => Mapper::Function(FunctionMapper {
                kind: watch.kind.clone(),
                runtime: shared.runtime.clone(),
                version: version.subscribe(),
                candidate: rolling.candidate(),
                metrics: shared.metrics.clone(),
                calls: map_calls.clone(),
            }),
            read => Mapper::Read(read.clone()),
        };
        tasks.spawn(map_events(
            informer.subscribe(),
            keys.clone(),
            Route::Secondary(mapper, filter.clone()),
            guest_primary.clone(),
            lead.clone(),
        ));
    }
}

/// What each worker of a controller holds (a clone each).
#[derive(Clone)]
struct Worker {
    shared: Shared,
    caches: Arc<Caches>,
    queue: WorkQueue<ObjectKey>,
    version: watch::Receiver<Arc<GuestVersion>>,
    rolling: watch::Receiver<Option<Arc<Rolling>>>,
    /// An adaptive guest's slots under the host's write limit (see `version::Concurrency`).
    slots: Option<Arc<crate::cluster::flowcontrol::Slots>>,
}

impl Worker {
    /// Takes keys until the queue shuts down.
    async fn run(self) {
        let mut kept = Kept::default();
        loop {
            // An adaptive guest's worker takes a key only under the limit.
            let slot = match &self.slots {
                Some(slots) => Some(slots.take().await),
                None => None,
            };
            let versions = Versions {
                stable: &self.version,
                rolling: &self.rolling,
            };
            if !process_next(&self.shared, &self.caches, &self.queue, versions, &mut kept).await {
                return;
            }
            drop(slot);
        }
    }
}

/// A worker's instance kept between reconciles (`limits.instanceReuse`), and the guest version
/// it belongs to: a new version or grant never runs in it.
#[derive(Default)]
struct Kept {
    version: std::sync::Weak<GuestVersion>,
    warm: Option<crate::sandbox::runtime::Warm>,
}

impl Kept {
    /// The instance for a reconcile of `version`, if it is the one this was kept for.
    fn for_version(
        &mut self,
        version: &Arc<GuestVersion>,
    ) -> &mut Option<crate::sandbox::runtime::Warm> {
        if !std::ptr::eq(self.version.as_ptr(), Arc::as_ptr(version)) {
            self.warm = None;
            self.version = Arc::downgrade(version);
        }
        &mut self.warm
    }

    /// When the kept instance must go if no key comes: its idle time from now.
    fn idle_until(&self, version: &GuestVersion) -> Option<tokio::time::Instant> {
        self.warm.as_ref()?;
        let reuse = version.guest.grant.limits.reuse()?;
        Some(tokio::time::Instant::now() + reuse.idle)
    }
}

/// How long a key taken while the write fence is shut waits before it is tried again.
const FENCED_RETRY: Duration = Duration::from_millis(200);

/// The versions a worker takes a key's version from: the stable one, and the rollout in
/// flight if any.
#[derive(Clone, Copy)]
struct Versions<'a> {
    stable: &'a watch::Receiver<Arc<GuestVersion>>,
    rolling: &'a watch::Receiver<Option<Arc<Rolling>>>,
}

/// Takes one key, syncs it, and tells the queue how it went. Returns false on shutdown.
async fn process_next(
    shared: &Shared,
    caches: &Caches,
    queue: &WorkQueue<ObjectKey>,
    versions: Versions<'_>,
    kept: &mut Kept,
) -> bool {
    let idle_until = kept.idle_until(&versions.stable.borrow());
    let next = match idle_until {
        // A kept instance is dropped once it has waited its idle time for a key (`get` is
        // cancel-safe).
        Some(at) => tokio::select! {
            key = queue.get() => key,
            () = tokio::time::sleep_until(at) => {
                kept.warm = None;
                return true;
            }
        },
        None => queue.get().await,
    };
    let Some(key) = next else {
        return false;
    };
    if !shared.fence.is_open() {
        // This replica may not write now (its lease ran out, maybe while it was stopped, and
        // the election has not said so yet): it does not start reconciles either. The key is
        // kept for when the fence opens again; the controller is stopped if the lease is gone.
        queue.done(&key);
        queue.add_after(key, FENCED_RETRY);
        return true;
    }
    // The version is chosen as the key is taken: a share change moves a key only between
    // two of its reconciles (the queue hands a key to one worker at a time).
    let rolling = versions.rolling.borrow().clone();
    let side = rolling.as_ref().map(|r| r.side_of(&key));
    let version = match (&rolling, side) {
        (Some(rolling), Some((Side::New, _))) => rolling.new.clone(),
        _ => versions.stable.borrow().clone(),
    };
    let attempt = queue.num_requeues(&key);
    let span = tracing::info_span!(crate::sandbox::capabilities::RECONCILE_SPAN, guest = %version.guest.name(), key = %key, attempt, rollout = tracing::field::Empty);
    if let Some((side, _)) = side {
        // During a rollout every line says which version ran: `old`, `new` (or `shadow`).
        span.record("rollout", side.label());
    }
    let warm = kept.for_version(&version);
    let (next, outcome) = sync(shared, caches, &version, &key, attempt, warm)
        .instrument(span.clone())
        .await;
    if let (Some(rolling), Some(side), Some(outcome)) = (&rolling, side, outcome) {
        rolling.record(side, &outcome);
        // In shadow, the new version runs on the same key after the old one, its writes
        // compared with what the old one left.
        if side.0 == Side::Old && rolling.share().shadows() {
            let span = tracing::info_span!(crate::sandbox::capabilities::RECONCILE_SPAN, guest = %version.guest.name(), key = %key, attempt, rollout = Side::Shadow.label());
            let (_, shadowed) = sync(shared, caches, &rolling.shadow, &key, attempt, &mut None)
                .instrument(span)
                .await;
            if let Some(shadowed) = shadowed {
                rolling.record((Side::Shadow, side.1), &shadowed);
            }
        }
    }
    if !matches!(next, Next::Retry)
        && let Some(gone) = &caches.gone
    {
        gone.lock().remove(&key);
    }
    match next {
        Next::Done { requeue_after } => {
            // Success resets the key's backoff.
            queue.forget(&key);
            if let Some(after) = requeue_after {
                queue.add_after(key.clone(), after);
            }
        }
        Next::Retry => queue.add_rate_limited(key.clone()),
        Next::GiveUp => queue.forget(&key),
    }
    queue.done(&key);
    true
}

/// One key through the reconcile step ([`sync::sync`]) against the informer caches and the
/// API server; a shadow verdict is recorded. Also returns how the guest's call went, as a
/// rollout counts it (none when the guest was not called, or called for an absent object).
async fn sync(
    shared: &Shared,
    caches: &Caches,
    version: &Arc<GuestVersion>,
    key: &ObjectKey,
    attempt: u32,
    warm: &mut Option<crate::sandbox::runtime::Warm>,
) -> (Next, Option<crate::supply::rollout::Outcome>) {
    let guest = &version.guest;
    let step = Step {
        kind: &guest.loaded.manifest.primary,
        finalizer: guest.loaded.manifest.finalizer.as_deref(),
        shadow: guest.grant.mode == crate::config::Mode::Shadow,
    };
    let primary = Cached {
        caches,
        cluster: &version.cluster,
        metrics: &shared.metrics,
        guest: guest.name(),
    };
    let mut called = None;
    let synced = sync::sync(step, &primary, key, attempt, async |request| {
        // Only reconciles of objects that exist count in a rollout: keys of absent objects
        // (a guest may enqueue any name) would let a version dilute its failures.
        let exists = request.object.is_some();
        let started = Instant::now();
        let run = run(shared, version, key, request, warm).await;
        let succeeded = matches!(run.outcome, Outcome::Ok { .. });
        if exists {
            called = Some((started.elapsed(), !succeeded));
        }
        run
    })
    .await;
    let differing = match synced.verdict.as_deref() {
        Some(differences) => Some(crate::sandbox::shadow::Difference::paths_of(differences)),
        // A shadow run that failed before its verdict agrees with nothing.
        None if step.shadow => Some(vec![crate::supply::rollout::NO_VERDICT.to_owned()]),
        None => None,
    };
    if version.counted
        && let Some(differences) = synced.verdict
    {
        shared
            .shadows
            .record(guest.name(), &key.to_string(), differences);
    }
    let outcome = called.map(|(took, failed)| crate::supply::rollout::Outcome {
        key: crate::supply::rollout::key_id(key.namespace.as_deref(), &key.name),
        took,
        failed,
        // A shadow run that ended without a verdict (it failed) counts as an error only.
        differing,
    });
    (synced.next, outcome)
}

/// The primary object as a controller sees it: its informer's cache, the API server for the
/// host's writes.
struct Cached<'a> {
    caches: &'a Caches,
    cluster: &'a KubeCluster,
    metrics: &'a Metrics,
    guest: &'a str,
}

#[async_trait::async_trait]
impl Primary for Cached<'_> {
    fn cached(&self, object: &ObjectRef) -> Option<Arc<crate::cluster::informers::CachedObject>> {
        self.caches
            .primary
            .get_cached(object.namespace.as_deref(), &object.name)
    }

    fn foreign(&self, key: &ObjectKey) -> bool {
        self.caches.foreign(key, self.metrics, self.guest)
    }

    async fn add_finalizer(
        &self,
        object: &ObjectRef,
        current: &kube::api::DynamicObject,
        finalizer: &str,
    ) -> Result<Option<serde_json::Value>, crate::sandbox::capabilities::HostError> {
        self.cluster.add_finalizer(object, current, finalizer).await
    }

    async fn remove_finalizer(
        &self,
        object: &ObjectRef,
        current: &kube::api::DynamicObject,
        finalizer: &str,
    ) -> Result<bool, crate::sandbox::capabilities::HostError> {
        self.cluster
            .remove_finalizer(object, current, finalizer)
            .await
    }
}

/// Calls the guest on this task: it yields every epoch tick and at every import that waits,
/// and aborting the task (lease lost, shutdown) cancels it wherever it is.
async fn run(
    shared: &Shared,
    version: &GuestVersion,
    key: &ObjectKey,
    request: Request,
    warm: &mut Option<crate::sandbox::runtime::Warm>,
) -> Run {
    let name = version.guest.name();
    let call = CallContext::new(
        version.context.clone(),
        key.to_string(),
        Some(tokio::runtime::Handle::current()),
    );
    let (object_ref, exists) = (request.object_ref.clone(), request.object.is_some());
    let plan = version.recorder.as_ref().and_then(Recorder::plan);
    let (call, reuse, recorded) = match &plan {
        // A recorded reconcile runs fresh: a kept instance's state would be missing from the
        // record.
        Some(plan) => (
            call.recording().pinned(plan.pinned),
            None,
            Some(request.clone()),
        ),
        None => (call, version.guest.grant.limits.reuse(), None),
    };
    let started = Instant::now();
    let run = shared
        .runtime
        .reconcile_reusing(&version.guest.loaded, call, request, warm, reuse)
        .await;
    if let (Some(recorder), Some(plan), Some(request)) = (&version.recorder, &plan, &recorded) {
        recorder.keep(plan, &version.guest.loaded, request, &run);
    }
    let metrics = &shared.metrics;
    if !run.reused {
        metrics.instantiated(name, run.instantiate_time);
    }
    if !version.counted {
        // A rollout's shadow run: the rollout's metrics count it.
        return run;
    }
    // Also counts deadline and memory-limit hits.
    metrics.reconcile_finished(name, run.outcome.result(), started.elapsed());
    if let Some(event) = failure_event(&run.outcome, &object_ref, exists) {
        warn_on_primary(version, event);
    }
    run
}

/// The `Warning` event a failed reconcile leaves on its primary, so a user with only kubectl
/// sees why nothing happened: a permanent error, a trap, the deadline or the memory cap.
/// Transient errors are retried and leave none. None when the object is gone.
pub(crate) fn failure_event(
    outcome: &Outcome,
    object: &ObjectRef,
    exists: bool,
) -> Option<EventRecord> {
    let (reason, message) = match outcome {
        Outcome::Permanent(m) => ("ReconcileFailed", m),
        Outcome::Trap(m) => ("GuestTrapped", m),
        Outcome::Deadline(m) => ("DeadlineExceeded", m),
        Outcome::MemoryLimit(m) => ("MemoryLimitExceeded", m),
        Outcome::Ok { .. } | Outcome::Transient(_) => return None,
    };
    exists.then(|| EventRecord {
        regarding: object.clone(),
        event_type: crate::sandbox::capabilities::EventType::Warning,
        reason: reason.to_owned(),
        message: message.clone(),
    })
}

/// Sends `event` in the background, within the guest's event rate (the event recorder
/// aggregates repeats of one object, type and reason into a series). Shadow mode sends none.
fn warn_on_primary(version: &GuestVersion, event: EventRecord) {
    let guest = &version.guest;
    if guest.grant.mode == crate::config::Mode::Shadow || !version.context.budget.take_event() {
        return;
    }
    let (cluster, name) = (version.cluster.clone(), guest.name().to_owned());
    tokio::spawn(async move {
        use crate::sandbox::capabilities::Cluster as _;
        if let Err(e) = cluster.record_event(&name, &event).await {
            tracing::debug!(guest = %name, object = %event.regarding, "warning event not written: {e}");
        }
    });
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A worker busy on another thread when the controller stops must not run after the stop
    /// returns: the manager reopens the fence for the next slots right after, and a worker of
    /// the stopped controller would then reconcile a key handed over (sharded seed 1019). The
    /// workers here spin without yielding for a while at a time, as a guest between epoch
    /// ticks does; `end` must wait for each. (The pattern it replaced, workers in a `JoinSet`
    /// inside the aborted starter task, let a worker run on after the stop in 19 of 20 tries of
    /// this same loop.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_worker_runs_once_the_workers_have_ended() {
        for _ in 0..20 {
            let steps = Arc::new(AtomicUsize::new(0));
            let workers = Workers::default();
            let counted = steps.clone();
            workers
                .start(2, move || {
                    let steps = counted.clone();
                    async move {
                        loop {
                            let until = Instant::now() + Duration::from_millis(5);
                            while Instant::now() < until {
                                std::hint::spin_loop();
                            }
                            steps.fetch_add(1, Ordering::SeqCst);
                            tokio::task::yield_now().await;
                        }
                    }
                })
                .await;
            tokio::time::sleep(Duration::from_millis(12)).await;
            workers.end().await;
            let after = steps.load(Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(20));
            assert_eq!(
                steps.load(Ordering::SeqCst),
                after,
                "a worker ran after end()"
            );
        }
    }
}
