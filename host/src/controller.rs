//! One controller per active guest: its informers, its work queue, its workers. The loop reads
//! as client-go's sample-controller does: `start` → `run_worker` → `process_next` → `sync`.
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

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::DynamicObject;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::backends::NetworkBackend;
use crate::capabilities::{
    CallContext, GuestContext, HostError, Lister, Providers, WorkQueue as QueueCapability,
};
use crate::cluster::{KubeCluster, to_kube_gvk};
use crate::guests::ActiveGuest;
use crate::informers::{Informer, InformerEvent, Informers, Scope};
use crate::metrics::{Metrics, ReconcileResult};
use crate::objects::{Gvk, ObjectRef};
use crate::queue::{ObjectKey, QueueConfig, WorkQueue};
use crate::runtime::{Mapping, Outcome, Request, Runtime};

/// Workers per guest when neither the manifest nor the grant says.
pub const DEFAULT_CONCURRENCY: u32 = 2;

/// Everything a controller needs from the host.
#[derive(Clone)]
pub struct Shared {
    pub client: kube::Client,
    pub informers: Informers,
    pub runtime: Arc<Runtime>,
    pub metrics: Metrics,
    pub networks: BTreeMap<String, Arc<dyn NetworkBackend>>,
    /// Restrict every watch of namespaced kinds to this namespace (`run --watch-namespace`).
    pub namespace: Option<String>,
}

/// A running controller. Dropping it without `stop` aborts its tasks.
pub struct Controller {
    name: String,
    queue: WorkQueue<ObjectKey>,
    version: watch::Sender<Arc<Version>>,
    tasks: JoinSet<()>,
    synced: watch::Receiver<bool>,
}

/// One guest version with the capability context built for it.
struct Version {
    guest: Arc<ActiveGuest>,
    context: Arc<GuestContext>,
    /// Long-lived per guest: its event recorder aggregates repeats across reconciles.
    cluster: Arc<KubeCluster>,
}

/// The informers a controller holds: primary, secondaries, and every kind it may read.
struct Caches {
    primary: Informer,
    secondaries: Vec<(Informer, Mapping)>,
    readable: BTreeMap<Gvk, Informer>,
}

impl Controller {
    /// Acquires the guest's informers and starts its mapping and worker tasks. Workers wait
    /// for every cache to sync first.
    pub async fn start(shared: &Shared, guest: Arc<ActiveGuest>) -> anyhow::Result<Self> {
        let manifest = &guest.loaded.manifest;
        let name = manifest.name.clone();
        let caches = Arc::new(Caches::acquire(shared, &guest).await?);

        let limits = &guest.grant.limits;
        let mut config = QueueConfig::default();
        if let Some(qps) = limits.qps.and_then(NonZeroU32::new) {
            config.qps = qps;
        }
        if let Some(burst) = limits.burst.and_then(NonZeroU32::new) {
            config.burst = burst;
        }
        let queue = WorkQueue::with_metrics(config, shared.metrics.workqueue(&name));
        let (version, _) = watch::channel(Arc::new(Version::new(shared, &guest, &caches, &queue)));

        let mut tasks = JoinSet::new();
        // Event → key mapping for the primary kind: every change enqueues the object's own key.
        let primary_events = match manifest.resync {
            Some(period) => caches.primary.subscribe_with_resync(period),
            None => caches.primary.subscribe(),
        };
        tasks.spawn(map_events(
            primary_events,
            queue.clone(),
            Route::Primary {
                generation_changed_only: manifest.generation_changed_only,
            },
            manifest.primary.clone(),
        ));
        for (informer, mapping) in &caches.secondaries {
            tasks.spawn(map_events(
                informer.subscribe(),
                queue.clone(),
                Route::Secondary(mapping.clone()),
                manifest.primary.clone(),
            ));
        }

        let (synced_tx, synced) = watch::channel(false);
        let workers = concurrency(&guest);
        {
            let (caches, queue, version, shared, name) = (
                caches.clone(),
                queue.clone(),
                version.subscribe(),
                shared.clone(),
                name.clone(),
            );
            tasks.spawn(async move {
                caches.wait_synced().await;
                tracing::info!(guest = %name, workers, "caches synced; starting workers");
                let _ = synced_tx.send(true);
                let mut workers_set = JoinSet::new();
                for _ in 0..workers {
                    workers_set.spawn(run_worker(
                        shared.clone(),
                        caches.clone(),
                        queue.clone(),
                        version.clone(),
                    ));
                }
                while workers_set.join_next().await.is_some() {}
            });
        }
        Ok(Self {
            name,
            queue,
            version,
            tasks,
            synced,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn has_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// A receiver of the synced flag, for `/readyz`.
    pub fn synced(&self) -> watch::Receiver<bool> {
        self.synced.clone()
    }

    /// Whether `new` can replace the running version in place (same watches and finalizer).
    pub fn can_swap_to(&self, new: &ActiveGuest) -> bool {
        let current = self.version.borrow();
        let (a, b) = (&current.guest.loaded.manifest, &new.loaded.manifest);
        a.primary == b.primary
            && a.namespace == b.namespace
            && a.label_selector == b.label_selector
            && a.secondary == b.secondary
            && a.finalizer == b.finalizer
            && a.resync == b.resync
            && a.generation_changed_only == b.generation_changed_only
            && concurrency(&current.guest) == concurrency(new)
    }

    /// Swaps in a new version of the same guest: reconciles already running finish on the old.
    pub fn swap(&self, shared: &Shared, guest: Arc<ActiveGuest>) {
        let (context, cluster) = {
            let current = self.version.borrow();
            (current.context.clone(), current.cluster.clone())
        };
        let version = Version {
            context: Arc::new(GuestContext {
                guest: guest.name().to_owned(),
                grant: guest.grant.clone(),
                providers: context.providers.clone(),
                metrics: Some(shared.metrics.clone()),
                fixed_clock: None,
            }),
            guest,
            cluster,
        };
        self.version.send_replace(Arc::new(version));
    }

    /// Stops taking keys, lets running reconciles finish, then stops every task.
    pub async fn stop(mut self) {
        self.queue.shutdown_with_drain().await;
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        tracing::info!(guest = %self.name, "controller stopped");
    }

    /// Stops at once: running reconciles are abandoned (used when leadership is lost).
    pub async fn abort(mut self) {
        self.queue.shutdown();
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
    }
}

fn concurrency(guest: &ActiveGuest) -> usize {
    let asked = match guest.loaded.manifest.concurrency {
        0 => DEFAULT_CONCURRENCY,
        n => n,
    };
    let allowed = guest.grant.limits.concurrency.unwrap_or(asked);
    asked.min(allowed).max(1) as usize
}

impl Caches {
    async fn acquire(shared: &Shared, guest: &ActiveGuest) -> anyhow::Result<Self> {
        let manifest = &guest.loaded.manifest;
        let namespace = match (&manifest.namespace, &shared.namespace) {
            (Some(wanted), Some(host)) if wanted != host => anyhow::bail!(
                "guest `{}` watches namespace {wanted} but the host is restricted to namespace {host}",
                manifest.name
            ),
            (wanted, host) => wanted.clone().or_else(|| host.clone()),
        };
        let primary = acquire_scoped(
            shared,
            &manifest.primary,
            namespace.clone(),
            manifest.label_selector.clone(),
        )
        .await?;
        let mut secondaries = Vec::new();
        for secondary in &manifest.secondary {
            let informer = acquire_scoped(shared, &secondary.kind, namespace.clone(), None).await?;
            secondaries.push((informer, secondary.mapping.clone()));
        }
        // The lister serves every kind in the grant. A kind the server does not serve (yet) is
        // logged and its reads return `unavailable`.
        let mut readable = BTreeMap::new();
        for kind in &guest.grant.read {
            match acquire_scoped(shared, kind, shared.namespace.clone(), None).await {
                Ok(informer) => {
                    readable.insert(kind.clone(), informer);
                }
                Err(e) => {
                    tracing::warn!(guest = %manifest.name, %kind, "granted kind cannot be cached: {e}")
                }
            }
        }
        Ok(Self {
            primary,
            secondaries,
            readable,
        })
    }

    async fn wait_synced(&self) {
        self.primary.wait_synced().await;
        for (informer, _) in &self.secondaries {
            informer.wait_synced().await;
        }
        for informer in self.readable.values() {
            informer.wait_synced().await;
        }
    }
}

impl Version {
    fn new(
        shared: &Shared,
        guest: &Arc<ActiveGuest>,
        caches: &Arc<Caches>,
        queue: &WorkQueue<ObjectKey>,
    ) -> Self {
        let cluster = Arc::new(KubeCluster::new(
            shared.client.clone(),
            caches.readable_with_primary(),
            guest.name(),
        ));
        let networks = shared
            .networks
            .iter()
            .filter(|(name, _)| guest.grant.backends.contains(*name))
            .map(|(name, backend)| (name.clone(), backend.clone()))
            .collect();
        let context = GuestContext {
            guest: guest.name().to_owned(),
            grant: guest.grant.clone(),
            providers: Providers {
                lister: Arc::new(CacheLister(caches.clone())),
                cluster: cluster.clone(),
                queue: Arc::new(QueueHandle(queue.clone())),
                networks,
            },
            metrics: Some(shared.metrics.clone()),
            fixed_clock: None,
        };
        Self {
            guest: guest.clone(),
            context: Arc::new(context),
            cluster,
        }
    }
}

/// Acquires an informer limited to `namespace`; cluster-scoped kinds ignore the limit.
async fn acquire_scoped(
    shared: &Shared,
    kind: &Gvk,
    namespace: Option<String>,
    label_selector: Option<String>,
) -> Result<Informer, crate::informers::InformerError> {
    let gvk = to_kube_gvk(kind);
    let scope = Scope {
        namespace,
        label_selector: label_selector.clone(),
    };
    match shared.informers.acquire(&gvk, scope).await {
        Err(crate::informers::InformerError::ClusterScoped { .. }) => {
            shared
                .informers
                .acquire(
                    &gvk,
                    Scope {
                        namespace: None,
                        label_selector,
                    },
                )
                .await
        }
        other => other,
    }
}

/// How an informer's events become primary keys.
enum Route {
    /// The primary kind: the object's own key.
    Primary { generation_changed_only: bool },
    /// A secondary kind: the keys its mapping names.
    Secondary(Mapping),
}

/// Turns informer events into keys of the primary kind.
async fn map_events(
    mut events: crate::informers::Subscription,
    queue: WorkQueue<ObjectKey>,
    route: Route,
    primary: Gvk,
) {
    while let Some(event) = events.next().await {
        let object = event.object();
        match &route {
            Route::Primary {
                generation_changed_only,
            } => {
                if *generation_changed_only && same_generation(&event) {
                    continue;
                }
                queue.add(key_of(object));
            }
            Route::Secondary(mapping) => {
                for key in primary_keys(object, mapping, &primary) {
                    queue.add(key);
                }
                // An update that moved the object to another owner must wake the old one too.
                if let InformerEvent::Applied { old: Some(old), .. } = &event {
                    for key in primary_keys(old, mapping, &primary) {
                        queue.add(key);
                    }
                }
            }
        }
    }
}

/// An update that left the generation and the deletion timestamp as they were (a status,
/// label or annotation write). False for anything else, and for kinds without a generation.
fn same_generation(event: &InformerEvent) -> bool {
    let InformerEvent::Applied {
        object,
        old: Some(old),
    } = event
    else {
        return false;
    };
    let (new, old) = (&object.metadata, &old.metadata);
    new.generation.is_some()
        && new.generation == old.generation
        && new.deletion_timestamp == old.deletion_timestamp
}

fn key_of(object: &DynamicObject) -> ObjectKey {
    ObjectKey {
        namespace: object.metadata.namespace.clone(),
        name: object.metadata.name.clone().unwrap_or_default(),
    }
}

/// The primary keys a secondary object maps to.
fn primary_keys(object: &DynamicObject, mapping: &Mapping, primary: &Gvk) -> Vec<ObjectKey> {
    let namespace = object.metadata.namespace.clone();
    match mapping {
        Mapping::Owner => object
            .metadata
            .owner_references
            .iter()
            .flatten()
            .filter(|o| o.kind == primary.kind && o.api_version == primary.api_version())
            .map(|o| ObjectKey {
                namespace: namespace.clone(),
                name: o.name.clone(),
            })
            .collect(),
        Mapping::Label(label) => object
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(label))
            .map(|name| ObjectKey {
                namespace,
                name: name.clone(),
            })
            .into_iter()
            .collect(),
    }
}

async fn run_worker(
    shared: Shared,
    caches: Arc<Caches>,
    queue: WorkQueue<ObjectKey>,
    version: watch::Receiver<Arc<Version>>,
) {
    while process_next(&shared, &caches, &queue, &version).await {}
}

/// Takes one key, syncs it, and tells the queue how it went. Returns false on shutdown.
async fn process_next(
    shared: &Shared,
    caches: &Caches,
    queue: &WorkQueue<ObjectKey>,
    version: &watch::Receiver<Arc<Version>>,
) -> bool {
    let Some(key) = queue.get().await else {
        return false;
    };
    let version = version.borrow().clone();
    let attempt = queue.num_requeues(&key);
    let span = tracing::info_span!("reconcile", guest = %version.guest.name(), key = %key, attempt);
    let next = sync(shared, caches, &version, &key, attempt)
        .instrument(span)
        .await;
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

enum Next {
    Done {
        requeue_after: Option<Duration>,
    },
    Retry,
    /// A permanent error: wait for the object to change.
    GiveUp,
}

async fn sync(
    shared: &Shared,
    caches: &Caches,
    version: &Arc<Version>,
    key: &ObjectKey,
    attempt: u32,
) -> Next {
    let guest = &version.guest;
    let manifest = &guest.loaded.manifest;
    let object_ref = ObjectRef {
        kind: manifest.primary.clone(),
        namespace: key.namespace.clone(),
        name: key.name.clone(),
    };
    let cached = caches.primary.get(key.namespace.as_deref(), &key.name);
    let deleting = cached
        .as_ref()
        .is_some_and(|o| o.metadata.deletion_timestamp.is_some());
    let cluster = &version.cluster;
    // The guest gets JSON text, serialised once.
    let mut object = cached
        .as_ref()
        .and_then(|o| serde_json::to_string(&**o).ok());

    if let (Some(finalizer), Some(current), false) = (&manifest.finalizer, &cached, deleting) {
        match cluster.add_finalizer(&object_ref, current, finalizer).await {
            Ok(None) => {}
            Ok(Some(written)) => object = Some(written.to_string()),
            Err(HostError::NotFound(_)) => object = None,
            Err(e) => {
                tracing::warn!("adding finalizer {finalizer} failed, will retry: {e}");
                return Next::Retry;
            }
        }
    }

    let request = Request {
        object_ref: object_ref.clone(),
        object,
        deleting,
        attempt,
    };
    let call = CallContext::new(
        version.context.clone(),
        key.to_string(),
        Some(tokio::runtime::Handle::current()),
    );
    let (runtime, loaded) = (shared.runtime.clone(), version.clone());
    // Guest code is CPU-bound and its imports block: run it off the async workers.
    let started = Instant::now();
    let run = match tokio::task::spawn_blocking(move || {
        runtime.reconcile(&loaded.guest.loaded, call, request)
    })
    .await
    {
        Ok(run) => run,
        Err(e) => {
            tracing::error!("reconcile task failed: {e}");
            return Next::Retry;
        }
    };
    let metrics = &shared.metrics;
    metrics.instantiated(guest.name(), run.instantiate_time);
    // Also counts deadline and memory-limit hits.
    metrics.reconcile_finished(guest.name(), result_label(&run.outcome), started.elapsed());

    match run.outcome {
        Outcome::Ok { requeue_after_ms } if !run.conflicted => {
            tracing::debug!(took = ?run.total_time(), "reconciled");
            // Read the latest version: the guest may have written the object meanwhile.
            let latest = deleting
                .then(|| caches.primary.get(key.namespace.as_deref(), &key.name))
                .flatten();
            if let (Some(finalizer), Some(latest)) = (&manifest.finalizer, latest) {
                match cluster
                    .remove_finalizer(&object_ref, &latest, finalizer)
                    .await
                {
                    Ok(true) => tracing::info!("finalizer {finalizer} removed"),
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!("removing finalizer {finalizer} failed, will retry: {e}");
                        return Next::Retry;
                    }
                }
            }
            Next::Done {
                requeue_after: requeue_after_ms.map(Duration::from_millis),
            }
        }
        Outcome::Ok { .. } => {
            tracing::info!("a write conflicted with a newer version of the object; retrying");
            Next::Retry
        }
        Outcome::Permanent(message) => {
            tracing::warn!(
                "reconcile failed permanently (no retry until the object changes): {message}"
            );
            Next::GiveUp
        }
        Outcome::Transient(message) => {
            tracing::warn!("reconcile failed, will retry with backoff: {message}");
            Next::Retry
        }
        Outcome::Trap(message) | Outcome::Deadline(message) | Outcome::MemoryLimit(message) => {
            tracing::error!("reconcile failed, will retry with backoff: {message}");
            Next::Retry
        }
    }
}

fn result_label(outcome: &Outcome) -> ReconcileResult {
    match outcome {
        Outcome::Ok {
            requeue_after_ms: None,
        } => ReconcileResult::Success,
        Outcome::Ok { .. } => ReconcileResult::Requeue,
        Outcome::Transient(_) => ReconcileResult::Error,
        Outcome::Permanent(_) => ReconcileResult::PermanentError,
        Outcome::Trap(_) => ReconcileResult::Trap,
        Outcome::Deadline(_) => ReconcileResult::Deadline,
        Outcome::MemoryLimit(_) => ReconcileResult::MemoryLimit,
    }
}

impl Caches {
    /// The readable informers plus the primary one (finalizer patches record into it).
    fn readable_with_primary(&self) -> BTreeMap<Gvk, Informer> {
        let mut all = self.readable.clone();
        let gvk = self.primary.gvk();
        all.entry(Gvk::new(&gvk.group, &gvk.version, &gvk.kind))
            .or_insert_with(|| self.primary.clone());
        all
    }
}

/// The lister over this controller's caches.
struct CacheLister(Arc<Caches>);

impl Lister for CacheLister {
    fn get(&self, object: &ObjectRef) -> Result<Option<String>, HostError> {
        let informer = self.informer(&object.kind)?;
        informer
            .get(object.namespace.as_deref(), &object.name)
            .map(|o| serde_json::to_string(&*o).map_err(|e| HostError::Other(e.to_string())))
            .transpose()
    }

    fn list(
        &self,
        kind: &Gvk,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, HostError> {
        let informer = self.informer(kind)?;
        let selector = crate::capabilities::label_selector(label_selector)?;
        informer
            .list(namespace, selector.as_ref())
            .iter()
            .map(|o| serde_json::to_string(&**o).map_err(|e| HostError::Other(e.to_string())))
            .collect()
    }
}

impl CacheLister {
    fn informer(&self, kind: &Gvk) -> Result<&Informer, HostError> {
        self.0.readable.get(kind).ok_or_else(|| {
            HostError::Unavailable(format!(
                "{kind} is granted but not cached: the API server did not serve it when the guest started"
            ))
        })
    }
}

/// The guest's handle on its own work queue.
struct QueueHandle(WorkQueue<ObjectKey>);

impl QueueCapability for QueueHandle {
    fn enqueue(
        &self,
        namespace: Option<String>,
        name: String,
        after: Option<Duration>,
    ) -> Result<(), HostError> {
        if name.is_empty() {
            return Err(HostError::Invalid("an empty name is not a key".into()));
        }
        let key = ObjectKey { namespace, name };
        match after {
            Some(delay) => self.0.add_after(key, delay),
            None => self.0.add(key),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn object(generation: Option<i64>, deleting: bool) -> Arc<DynamicObject> {
        let mut object = DynamicObject::new(
            "w",
            &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        );
        object.metadata.generation = generation;
        object.metadata.deletion_timestamp =
            deleting.then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        Arc::new(object)
    }

    fn update(old: Arc<DynamicObject>, new: Arc<DynamicObject>) -> InformerEvent {
        InformerEvent::Applied {
            object: new,
            old: Some(old),
        }
    }

    #[test]
    fn only_updates_that_keep_the_generation_are_skipped() {
        let same = update(object(Some(3), false), object(Some(3), false));
        assert!(same_generation(&same), "status/label write");
        let spec = update(object(Some(3), false), object(Some(4), false));
        assert!(!same_generation(&spec), "spec change");
        let deleting = update(object(Some(3), false), object(Some(3), true));
        assert!(!same_generation(&deleting), "deletion started");
        let no_generation = update(object(None, false), object(None, false));
        assert!(!same_generation(&no_generation), "kind without generation");
        let created = InformerEvent::Applied {
            object: object(Some(1), false),
            old: None,
        };
        assert!(!same_generation(&created), "creation");
        let resync = InformerEvent::Resync {
            object: object(Some(1), false),
        };
        assert!(!same_generation(&resync), "resync");
        let deleted = InformerEvent::Deleted {
            object: object(Some(1), false),
        };
        assert!(!same_generation(&deleted), "deletion");
    }
}
