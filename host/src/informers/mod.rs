//! Shared informers: one list+watch per (kind, scope), shared by every guest that reads or
//! watches that kind, released when the last user lets go. The cache behind each is what the
//! guests' `lister` interface reads.
//!
//! Start with [`Informers::acquire`]; the handle it returns ([`Informer`]) reads the cache,
//! subscribes to events and records the host's own writes (read-your-writes).
//!
//! Kinds arrive at run time with guests, so everything is dynamic: `DynamicObject` plus the
//! `ApiResource` found by discovery. From kube-rs we take discovery ([`crate::discovery`]) and the
//! watch protocol with its backoff (`watch.rs`). We write the store (`store.rs`: the reflector's
//! store takes no writes from outside and does not compare resourceVersions), the form an object
//! is cached in (`cached.rs`: its JSON text, once, without `managedFields`), the sharing and
//! ref-counting (here), subscriptions with lag recovery and resync (`subscription.rs`), the
//! label selector parser (`selector.rs`: kube-core has none), and each informer's own client
//! (`client.rs`: counts the bytes it receives, adds `shardSelector`).
//!
//! Sharded scopes ([`WatchScope::shard`], sharded mode) hold only the objects whose uid hashes into
//! a set of slots, filtered on the API server when it honours `shardSelector` and on the client
//! otherwise ([`ShardFilter`], `shard.rs`). A new slot set is a new scope, so a handover is a
//! fresh list of the new share rather than an edit of a running cache.

mod cached;
mod client;
mod selector;
mod shard;
mod store;
mod subscription;
mod watch;

use std::{
    collections::{HashMap, HashSet},
    fmt,
    sync::{
        Arc, Weak,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use kube::{
    Client, ResourceExt,
    api::DynamicObject,
    core::{GroupVersionKind, Selector, SelectorExt},
    discovery::ApiResource,
    runtime::watcher,
};
use parking_lot::Mutex;

use crate::metrics::{InformerMetrics, Metrics, ScrapeHook};
use crate::shards::SlotSet;

pub use cached::CachedObject;
pub use selector::{SelectorError, parse_selector};
pub use shard::{FilterMode, ShardFilter};
pub use subscription::Subscription;

/// What part of a kind an informer watches. Different scopes of one kind are different informers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct WatchScope {
    /// Only this namespace (none = all namespaces). Not allowed for cluster-scoped kinds.
    pub namespace: Option<String>,
    /// Only objects matching this selector, in Kubernetes syntax (`app=web,tier!=db`).
    pub label_selector: Option<String>,
    /// Only objects whose `metadata.uid` hashes into these slots (sharded mode). The whole set
    /// is the same scope as none; the empty set watches nothing (synced at once, always empty,
    /// no request). How the objects are filtered: [`Options::shard_filter`].
    pub shard: Option<SlotSet>,
}

impl WatchScope {
    /// Every object of the kind.
    pub fn all() -> Self {
        Self::default()
    }
}

/// A change in an informer's cache, as seen by subscribers.
///
/// Objects the watch delivers come whole. Objects replayed from the cache — `old`, the
/// snapshot a [`Subscription`] starts with, and `Resync` — come as their head: `apiVersion`,
/// `kind` and `metadata`, with `data` null. The cache keeps objects as JSON text (see
/// [`CachedObject`]), the head is what turning an event into keys reads, and it costs a few µs
/// where a full parse costs tens; [`Informer::get`] has the whole object.
#[derive(Clone, Debug)]
pub enum InformerEvent {
    /// Created or changed. `old` is the version subscribers saw before (none for a new object),
    /// as its head.
    /// Never sent when the resourceVersion did not change (a relist re-listing an object).
    /// `object` is what the watch reported; after a `record_write` of a newer version, `get`
    /// may already return something newer.
    Applied {
        object: Arc<DynamicObject>,
        old: Option<Arc<DynamicObject>>,
        /// From a list (the informer's first list, a relist after its watch broke, or the
        /// snapshot a subscription starts with), not from a watch event: backlog to a
        /// controller, which queues it at low priority.
        listed: bool,
        /// The version the host itself wrote (recorded with [`Informer::record_write`]),
        /// seen again on the watch: the echo of a guest's own write, which its controller
        /// also queues at low priority, behind a change someone else made. Only that version
        /// counts: an event that beats the write's answer is not told from anyone else's
        /// change, so it is never hidden at low priority behind the host's.
        echo: bool,
    },
    /// Deleted; `object` is its last state.
    Deleted { object: Arc<DynamicObject> },
    /// Unchanged, re-sent: a periodic resync, or recovery after the subscriber lagged.
    Resync { object: Arc<DynamicObject> },
}

impl InformerEvent {
    pub fn object(&self) -> &Arc<DynamicObject> {
        match self {
            Self::Applied { object, .. } | Self::Deleted { object } | Self::Resync { object } => {
                object
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InformerError {
    #[error(
        "unknown kind: the API server does not serve kind {kind:?} in group {group:?} version \
         {version:?}; install the CRD that defines it or fix the group/version/kind"
    )]
    UnknownKind {
        group: String,
        version: String,
        kind: String,
    },
    #[error(
        "discovery of {gvk} failed: {source}; is the API server reachable and are we allowed to read discovery?"
    )]
    Discovery {
        gvk: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("{gvk} cannot be watched: the API server does not offer list and watch for it")]
    NotWatchable { gvk: String },
    #[error(
        "{gvk} is cluster-scoped, so its informer cannot be limited to namespace {namespace:?}; \
         leave the namespace out"
    )]
    ClusterScoped { gvk: String, namespace: String },
    #[error("informer for {gvk}: {source}")]
    Selector {
        gvk: String,
        #[source]
        source: SelectorError,
    },
}

/// `ConfigMap (v1)`, `Network (samplecontroller.k8s.io/v1alpha1)`.
fn describe(gvk: &GroupVersionKind) -> String {
    format!("{} ({})", gvk.kind, gvk.api_version())
}

/// Tuning for all informers of one [`Informers`].
#[derive(Clone, Debug)]
pub struct Options {
    /// Events buffered per informer for its slowest subscriber; one that falls further behind
    /// gets a resync of the whole cache instead (see [`Subscription`]).
    pub event_buffer: usize,
    /// How long a recorded write or delete is shown if the watch never confirms it (client-go's
    /// mutation cache TTL; the CRD naming controller uses 60 s).
    pub write_ttl: Duration,
    /// Where `reconciler_informer_objects` goes: summed per GVK over all scopes at each scrape,
    /// and removed once no informer for the GVK is left.
    pub metrics: Option<Metrics>,
    /// Keep `metadata.managedFields` in cached objects (and so in what guests read and in
    /// events). Off by default: see `cached.rs`. The default follows the environment variable
    /// `RECONCILER_KEEP_MANAGED_FIELDS` (`1` or `true` keeps them).
    pub keep_managed_fields: bool,
    /// Where sharded scopes are filtered; see [`ShardFilter`]. Unsharded informers ignore it.
    pub shard_filter: ShardFilter,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            event_buffer: 1024,
            write_ttl: Duration::from_mins(1),
            metrics: None,
            keep_managed_fields: std::env::var("RECONCILER_KEEP_MANAGED_FIELDS")
                .is_ok_and(|v| matches!(v.trim(), "1" | "true")),
            shard_filter: ShardFilter::default(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    gvk: GroupVersionKind,
    scope: WatchScope,
}

struct Registry {
    client: Client,
    options: Options,
    discovery: crate::discovery::Resolver,
    informers: Mutex<HashMap<Key, Weak<InformerState>>>,
    watch_tasks: Arc<AtomicUsize>,
    /// GVKs whose object gauge was set at the last scrape.
    reported: Mutex<HashSet<GroupVersionKind>>,
    /// Filter modes whose gauge was set at the last scrape.
    reported_filters: Mutex<HashSet<(GroupVersionKind, FilterMode)>>,
}

impl Registry {
    /// Upgraded under the lock, returned outside it: dropping a last handle takes the lock.
    fn live(&self) -> Vec<Arc<InformerState>> {
        self.informers
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }
}

/// Object counts are read at scrape time rather than pushed on every watch event: cheaper, and
/// several scopes of one GVK add up to one series.
impl ScrapeHook for Registry {
    fn before_scrape(&self) {
        let Some(metrics) = &self.options.metrics else {
            return;
        };
        let now = Instant::now();
        let mut counts: HashMap<GroupVersionKind, usize> = HashMap::new();
        let mut filters: HashSet<(GroupVersionKind, FilterMode)> = HashSet::new();
        for shared in self.live() {
            *counts.entry(shared.key.gvk.clone()).or_default() +=
                shared.cache.store.read().len(now);
            if let Some(mode) = shared.cache.filter.get() {
                filters.insert((shared.key.gvk.clone(), *mode));
            }
        }
        let mut reported = self.reported.lock();
        for gone in reported.iter().filter(|gvk| !counts.contains_key(*gvk)) {
            metrics.informer_removed(&gone.group, &gone.version, &gone.kind);
        }
        for (gvk, objects) in &counts {
            metrics.informer_objects(&gvk.group, &gvk.version, &gvk.kind, *objects);
        }
        *reported = counts.into_keys().collect();
        drop(reported);
        let mut reported = self.reported_filters.lock();
        for (gvk, mode) in reported.difference(&filters) {
            metrics.informer_shard_filter(
                &gvk.group,
                &gvk.version,
                &gvk.kind,
                mode.as_str(),
                false,
            );
        }
        for (gvk, mode) in &filters {
            metrics.informer_shard_filter(&gvk.group, &gvk.version, &gvk.kind, mode.as_str(), true);
        }
        *reported = filters;
    }
}

/// The registry of shared informers; clone it freely (one per host).
#[derive(Clone)]
pub struct Informers {
    registry: Arc<Registry>,
}

impl fmt::Debug for Informers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Informers")
            .field("active", &self.active())
            .finish()
    }
}

/// One running informer, as listed by [`Informers::active`].
#[derive(Clone, Debug)]
pub struct InformerInfo {
    pub gvk: GroupVersionKind,
    pub scope: WatchScope,
    /// Live [`Informer`] handles, subscriptions included.
    pub handles: usize,
    pub objects: usize,
    pub synced: bool,
    /// See [`Informer::lists`].
    pub lists: u64,
    /// See [`Informer::filter_mode`].
    pub filter: Option<FilterMode>,
}

impl Informers {
    /// The discovery cache these informers resolve kinds with, for others to share.
    pub fn resolver(&self) -> &crate::discovery::Resolver {
        &self.registry.discovery
    }

    pub fn new(client: Client) -> Self {
        Self::with_options(client, Options::default())
    }

    pub fn with_options(client: Client, options: Options) -> Self {
        let metrics = options.metrics.clone();
        let registry = Arc::new(Registry {
            client,
            options,
            discovery: crate::discovery::Resolver::default(),
            informers: Mutex::new(HashMap::new()),
            watch_tasks: Arc::new(AtomicUsize::new(0)),
            reported: Mutex::new(HashSet::new()),
            reported_filters: Mutex::new(HashSet::new()),
        });
        if let Some(metrics) = metrics {
            let weak: Weak<Registry> = Arc::downgrade(&registry);
            metrics.register_scrape_hook(weak);
        }
        Self { registry }
    }

    /// A handle on the informer for `gvk` within `scope`, starting it if nobody holds one.
    ///
    /// Cost: free when the informer runs already; otherwise one discovery request (cached per
    /// GVK after the first success; failures are not cached, so a CRD installed later resolves
    /// on the next call) and a new list+watch in the background. The returned handle has not
    /// necessarily synced: gate on [`Informer::wait_synced`]. A sharded scope in `auto` or
    /// `server` mode first lists one object to learn whether the server filters (see
    /// [`ShardFilter`]); an empty slot set costs nothing at all.
    ///
    /// # Errors
    ///
    /// [`InformerError::UnknownKind`] when the API server does not serve the kind (yet),
    /// `ClusterScoped` for a namespace on a cluster-scoped kind, `Selector` for a bad label
    /// selector, `NotWatchable` and `Discovery` as named.
    pub async fn acquire(
        &self,
        gvk: &GroupVersionKind,
        scope: WatchScope,
    ) -> Result<Informer, InformerError> {
        let selector = match scope
            .label_selector
            .as_deref()
            .map(parse_selector)
            .transpose()
        {
            Ok(selector) => selector.filter(|s| !s.selects_all()),
            Err(source) => {
                return Err(InformerError::Selector {
                    gvk: describe(gvk),
                    source,
                });
            }
        };
        // Canonical, so `a=1,b=2` and `b=2, a=1` share one informer.
        let key = Key {
            gvk: gvk.clone(),
            scope: WatchScope {
                namespace: scope.namespace.filter(|ns| !ns.is_empty()),
                label_selector: selector.as_ref().map(ToString::to_string),
                shard: scope.shard.filter(|slots| !slots.is_all()),
            },
        };
        if let Some(shared) = self.lookup(&key) {
            return Ok(Informer { shared });
        }
        let resolved = self
            .registry
            .discovery
            .resolve(&self.registry.client, gvk)
            .await
            .map_err(|source| {
                if crate::discovery::is_unknown_kind(&source) {
                    InformerError::UnknownKind {
                        group: gvk.group.clone(),
                        version: gvk.version.clone(),
                        kind: gvk.kind.clone(),
                    }
                } else {
                    InformerError::Discovery {
                        gvk: describe(gvk),
                        source: Box::new(source),
                    }
                }
            })?;
        if !resolved.watchable {
            return Err(InformerError::NotWatchable { gvk: describe(gvk) });
        }
        if let Some(namespace) = &key.scope.namespace
            && !resolved.namespaced
        {
            return Err(InformerError::ClusterScoped {
                gvk: describe(gvk),
                namespace: namespace.clone(),
            });
        }
        let mut informers = self.registry.informers.lock();
        if let Some(shared) = informers.get(&key).and_then(Weak::upgrade) {
            drop(informers);
            return Ok(Informer { shared });
        }
        let shared = Arc::new(InformerState::start(
            &self.registry,
            key.clone(),
            resolved,
            selector,
        ));
        informers.insert(key, Arc::downgrade(&shared));
        drop(informers);
        Ok(Informer { shared })
    }

    fn lookup(&self, key: &Key) -> Option<Arc<InformerState>> {
        let informers = self.registry.informers.lock();
        informers.get(key).and_then(Weak::upgrade)
    }

    /// The running informers, sorted by kind. For status pages and tests.
    pub fn active(&self) -> Vec<InformerInfo> {
        let live = self.registry.live();
        let mut infos: Vec<InformerInfo> = live
            .iter()
            .map(|shared| InformerInfo {
                gvk: shared.key.gvk.clone(),
                scope: shared.key.scope.clone(),
                handles: Arc::strong_count(shared) - 1,
                objects: shared.cache.store.read().len(Instant::now()),
                synced: *shared.cache.synced.borrow(),
                lists: shared.cache.lists.load(Ordering::Relaxed),
                filter: shared.cache.filter.get().copied(),
            })
            .collect();
        drop(live);
        infos.sort_by_cached_key(|info| {
            (
                info.gvk.group.clone(),
                info.gvk.version.clone(),
                info.gvk.kind.clone(),
                info.scope.namespace.clone(),
                info.scope.label_selector.clone(),
                info.scope.shard.map(|slots| slots.runs()),
            )
        });
        infos
    }

    /// Watch tasks still running. Drops to 0 shortly after the last handles go (tasks are aborted,
    /// and an aborted task is torn down on the runtime's next turn).
    pub fn watch_tasks(&self) -> usize {
        self.registry.watch_tasks.load(Ordering::SeqCst)
    }
}

/// One informer's state; every [`Informer`] handle holds it, the registry only weakly.
struct InformerState {
    key: Key,
    resource: ApiResource,
    namespaced: bool,
    selector: Option<Selector>,
    cache: Arc<watch::Cache>,
    /// None for an empty slot set: nothing to watch.
    task: Option<tokio::task::AbortHandle>,
    registry: Weak<Registry>,
}

impl InformerState {
    fn start(
        registry: &Arc<Registry>,
        key: Key,
        resolved: crate::discovery::Resolved,
        selector: Option<Selector>,
    ) -> Self {
        let options = &registry.options;
        let gvk = &key.gvk;
        let metrics = options
            .metrics
            .as_ref()
            .map_or_else(InformerMetrics::unregistered, |m| {
                m.informer(&gvk.group, &gvk.version, &gvk.kind)
            });
        let cache = Arc::new(watch::Cache::new(
            &resolved.resource,
            store::Store::new(options.write_ttl),
            options.event_buffer,
            options.keep_managed_fields,
            key.scope.shard,
            metrics.clone(),
        ));
        let mut config = watcher::Config::default();
        if let Some(selector) = &key.scope.label_selector {
            config = config.labels(selector);
        }
        let label = match (
            &key.scope.namespace,
            &key.scope.label_selector,
            &key.scope.shard,
        ) {
            (None, None, None) => describe(gvk),
            (ns, sel, shard) => format!(
                "{} [namespace={} selector={} slots={}]",
                describe(gvk),
                ns.as_deref().unwrap_or("*"),
                sel.as_deref().unwrap_or("*"),
                shard.map_or_else(|| "*".to_owned(), |slots| slots.to_text()),
            ),
        };
        let task = if key.scope.shard.is_some_and(|slots| slots.is_empty()) {
            tracing::info!(informer = %label, "sharded informer owns no slots; not watching");
            cache.synced.send_replace(true);
            None
        } else {
            tracing::info!(informer = %label, "starting informer");
            if options.shard_filter == ShardFilter::Client && key.scope.shard.is_some() {
                // Known without asking the server: visible from the first moment.
                let _ = cache.filter.set(FilterMode::Client);
            }
            let source = watch::Source {
                client: registry.client.clone(),
                resource: resolved.resource.clone(),
                namespace: key.scope.namespace.clone().filter(|_| resolved.namespaced),
                config,
                filter: options.shard_filter,
                metrics,
            };
            let guard = watch::TaskGuard::new(registry.watch_tasks.clone());
            Some(tokio::spawn(watch::run(source, cache.clone(), label, guard)).abort_handle())
        };
        Self {
            key,
            resource: resolved.resource,
            namespaced: resolved.namespaced,
            selector,
            cache,
            task,
            registry: Arc::downgrade(registry),
        }
    }
}

impl Drop for InformerState {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
        tracing::info!(informer = %describe(&self.key.gvk), scope = ?self.key.scope, "informer released");
        if let Some(registry) = self.registry.upgrade() {
            let mut informers = registry.informers.lock();
            // Another acquire may have replaced the dead entry already; leave that one alone.
            if informers
                .get(&self.key)
                .is_some_and(|w| w.strong_count() == 0)
            {
                informers.remove(&self.key);
            }
        }
    }
}

impl crate::shards::Share for Informer {
    fn keys(&self) -> usize {
        self.len()
    }

    fn filter(&self) -> Option<&'static str> {
        self.filter_mode().map(FilterMode::as_str)
    }
}

/// A handle on one shared informer. Cheap to clone; the informer runs while any handle (or
/// [`Subscription`]) is alive and stops, releasing its cache, when the last one is dropped.
#[derive(Clone)]
pub struct Informer {
    shared: Arc<InformerState>,
}

impl fmt::Debug for Informer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Informer")
            .field("gvk", &self.shared.key.gvk)
            .field("scope", &self.shared.key.scope)
            .finish_non_exhaustive()
    }
}

impl Informer {
    pub fn gvk(&self) -> &GroupVersionKind {
        &self.shared.key.gvk
    }

    /// The scope in canonical form (normalised selector).
    pub fn scope(&self) -> &WatchScope {
        &self.shared.key.scope
    }

    pub fn api_resource(&self) -> &ApiResource {
        &self.shared.resource
    }

    pub fn namespaced(&self) -> bool {
        self.shared.namespaced
    }

    fn describe(&self) -> String {
        describe(self.gvk())
    }

    /// The initial list has been loaded. Stays true across later relists.
    pub fn has_synced(&self) -> bool {
        *self.shared.cache.synced.borrow()
    }

    /// Waits for the initial list. Does not time out: while the API server refuses (RBAC, a
    /// removed CRD) the watch retries with backoff; see [`Informer::last_error`].
    pub async fn wait_synced(&self) {
        let mut synced = self.shared.cache.synced.subscribe();
        // The sender lives in the cache this handle keeps alive, so this cannot fail.
        let _ = synced.wait_for(|s| *s).await;
    }

    /// How many times the watch has listed: 1 after the initial list, more after relists (the
    /// API server answered 410 Gone because our resourceVersion fell out of its window).
    pub fn lists(&self) -> u64 {
        self.shared.cache.lists.load(Ordering::Relaxed)
    }

    /// Where this sharded informer filters: decided before its first list (see
    /// [`ShardFilter`]). None for an unsharded informer, for an empty slot set (nothing is
    /// watched) and while the API server has not answered the probe.
    pub fn filter_mode(&self) -> Option<FilterMode> {
        self.shared.cache.filter.get().copied()
    }

    /// The watch's latest error, until the watch next succeeds.
    pub fn last_error(&self) -> Option<String> {
        self.shared.cache.last_error.lock().clone()
    }

    /// The cached object, as stored: its JSON text and a few fields. `namespace` is required
    /// for namespaced kinds and none for cluster-scoped ones. O(log n), no API call, no parse.
    pub fn get_cached(&self, namespace: Option<&str>, name: &str) -> Option<Arc<CachedObject>> {
        self.shared
            .cache
            .store
            .read()
            .get(namespace, name, Instant::now())
    }

    /// The cached object as a tree: [`Informer::get_cached`] plus one parse (tens of µs for a
    /// typical custom resource). Prefer `get_cached` where JSON text will do.
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<DynamicObject>> {
        self.get_cached(namespace, name)?.to_object().map(Arc::new)
    }

    /// Cached objects as stored, sorted by namespace then name. With a namespace, only that
    /// namespace is visited (namespace index); without, every object. No API call, no parse.
    pub fn list_cached(
        &self,
        namespace: Option<&str>,
        selector: Option<&Selector>,
    ) -> Vec<Arc<CachedObject>> {
        self.shared
            .cache
            .store
            .read()
            .list(namespace, selector, Instant::now())
    }

    /// [`Informer::list_cached`] as trees: one parse per object.
    pub fn list(
        &self,
        namespace: Option<&str>,
        selector: Option<&Selector>,
    ) -> Vec<Arc<DynamicObject>> {
        self.list_cached(namespace, selector)
            .iter()
            .filter_map(|o| o.to_object().map(Arc::new))
            .collect()
    }

    /// Number of cached objects.
    pub fn len(&self) -> usize {
        self.shared.cache.store.read().len(Instant::now())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Events from now on, preceded by an `Applied` for every object cached at this moment (as
    /// its head, see [`InformerEvent`]). Cost: one snapshot of the cache (O(n) pointer copies);
    /// each head is read when its event is taken.
    pub fn subscribe(&self) -> Subscription {
        self.subscribe_inner(None)
    }

    /// As [`Informer::subscribe`], plus a `Resync` of every cached object every `period`.
    pub fn subscribe_with_resync(&self, period: Duration) -> Subscription {
        self.subscribe_inner(Some(period))
    }

    fn subscribe_inner(&self, resync: Option<Duration>) -> Subscription {
        let cache = &self.shared.cache;
        let (snapshot, events) = {
            let store = cache.store.read();
            (
                store.list(None, None, Instant::now()),
                cache.events.subscribe(),
            )
        };
        Subscription::new(self.clone(), snapshot, events, resync)
    }

    /// Read-your-writes: `obj` is the API server's response to a write the host made (patch,
    /// apply, create, update). `get`/`list` return it at once, and watch events older than it
    /// do not replace it. Ignored (returns false) when the cache already has this version or a
    /// newer one, when versions cannot be compared (non-integer resourceVersions: the watch
    /// wins), when the object was deleted at or after this version, or when it is outside this
    /// informer's scope (namespace, labels, or for a sharded informer the uid's slot: a write to
    /// another replica's object must not enter this one's cache). Subscribers are not notified:
    /// they hear of the change from the watch. If the watch never confirms the write, it stops
    /// showing after `Options::write_ttl`.
    pub fn record_write(&self, obj: DynamicObject) -> bool {
        if obj.metadata.name.is_none() || !self.in_scope(&obj) {
            return false;
        }
        let obj = self.shared.cache.complete(obj);
        self.shared
            .cache
            .store
            .write()
            .record_write(&obj, Instant::now())
    }

    /// Read-your-writes for deletion: call after the API server answered a delete with the
    /// object gone (not merely marked with a deletionTimestamp: then `record_write` the
    /// returned object). Hides it from `get`/`list` at once; subscribers still get `Deleted`
    /// from the watch. Returns whether a cached object was hidden.
    pub fn record_delete(&self, namespace: Option<&str>, name: &str) -> bool {
        self.shared
            .cache
            .store
            .write()
            .record_delete(namespace, name, Instant::now())
    }

    fn in_scope(&self, obj: &DynamicObject) -> bool {
        in_scope(
            &self.shared.key.scope,
            self.shared.namespaced,
            self.shared.selector.as_ref(),
            obj,
        )
    }
}

/// Whether `obj` belongs in an informer of `scope` (`selector` is the scope's, parsed).
fn in_scope(
    scope: &WatchScope,
    namespaced: bool,
    selector: Option<&Selector>,
    obj: &DynamicObject,
) -> bool {
    let namespace_ok = match (&scope.namespace, namespaced) {
        (Some(ns), _) => obj.namespace().as_ref() == Some(ns),
        (None, true) => obj.namespace().is_some(),
        (None, false) => obj.namespace().is_none(),
    };
    let no_labels = std::collections::BTreeMap::new();
    namespace_ok
        && selector.is_none_or(|s| s.matches(obj.metadata.labels.as_ref().unwrap_or(&no_labels)))
        && shard::owns(scope.shard.as_ref(), obj)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shards::slot_of;

    fn cm(namespace: &str, uid: &str, labels: &[(&str, &str)]) -> DynamicObject {
        let mut obj: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "namespace": namespace, "name": "x", "uid": uid, "resourceVersion": "1" },
        }))
        .unwrap();
        obj.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        obj
    }

    #[test]
    fn writes_outside_the_shard_are_out_of_scope() {
        let uid = "0b1e4c3a-5f00-4d2b-8a51-7d3cbb6f9a10";
        let slot = slot_of(uid);
        let mine = SlotSet::range(slot, slot + 1);
        let scope = |shard: Option<SlotSet>| WatchScope {
            namespace: Some("a".into()),
            label_selector: Some("app=web".into()),
            shard,
        };
        let web = parse_selector("app=web").unwrap();
        let obj = cm("a", uid, &[("app", "web")]);
        assert!(in_scope(&scope(None), true, Some(&web), &obj));
        assert!(in_scope(&scope(Some(mine)), true, Some(&web), &obj));
        let others = SlotSet::all().difference(&mine);
        assert!(!in_scope(&scope(Some(others)), true, Some(&web), &obj));
        assert!(!in_scope(
            &scope(Some(SlotSet::empty())),
            true,
            Some(&web),
            &obj
        ));
        // The other conditions still hold with a shard.
        assert!(!in_scope(
            &scope(Some(mine)),
            true,
            Some(&web),
            &cm("b", uid, &[("app", "web")])
        ));
        assert!(!in_scope(
            &scope(Some(mine)),
            true,
            Some(&web),
            &cm("a", uid, &[("app", "db")])
        ));
    }
}
