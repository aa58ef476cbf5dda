//! One shared informer: its state, the handles ([`Informer`]) that keep it running, and the
//! registry that holds every informer weakly by (kind, scope) and counts their objects at
//! scrape time.

use std::{
    collections::{HashMap, HashSet},
    fmt,
    sync::{
        Arc, Weak,
        atomic::{AtomicUsize, Ordering},
    },
    time::Instant,
};

use kube::{
    Client, ResourceExt,
    api::DynamicObject,
    core::{GroupVersionKind, Selector, SelectorExt},
    discovery::ApiResource,
    runtime::watcher,
};

use super::{
    cached::CachedObject,
    error::describe,
    options::InitialList,
    scope::WatchScope,
    shard::{self, FilterMode, ShardFilter},
    store, watch,
};
use parking_lot::Mutex;

use super::options::Options;
use crate::metrics::{InformerMetrics, ScrapeHook};

/// One informer's state; every [`Informer`] handle holds it, the registry only weakly.
pub(super) struct InformerState {
    pub(super) key: Key,
    pub(super) resource: ApiResource,
    pub(super) namespaced: bool,
    pub(super) selector: Option<Selector>,
    pub(super) cache: Arc<watch::Cache>,
    /// The watch task; none for an empty slot set (nothing to watch). Replaced once, when a
    /// metadata-only informer is upgraded.
    pub(super) task: Mutex<Option<tokio::task::AbortHandle>>,
    /// What the task watches, to start the full watch of an upgrade; none for an empty slot set.
    source: Option<watch::Source>,
    label: String,
    pub(super) registry: Weak<Registry>,
}

/// How logs name the informer of `key`: its kind, and its scope unless it watches everything.
fn label(key: &Key) -> String {
    match (
        &key.scope.namespace,
        &key.scope.label_selector,
        &key.scope.shard,
    ) {
        (None, None, None) => describe(&key.gvk),
        (ns, sel, shard) => format!(
            "{} [namespace={} selector={} slots={}]",
            describe(&key.gvk),
            ns.as_deref().unwrap_or("*"),
            sel.as_deref().unwrap_or("*"),
            shard.map_or_else(|| "*".to_owned(), |slots| slots.to_text()),
        ),
    }
}

impl InformerState {
    /// `metadata`: watch only the objects' metadata until a read asks for more.
    pub(super) fn start(
        registry: &Arc<Registry>,
        key: Key,
        resolved: crate::cluster::discovery::Resolved,
        selector: Option<Selector>,
        metadata: bool,
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
            if metadata {
                watch::Form::Metadata
            } else {
                watch::Form::Full
            },
        ));
        let mut config = watcher::Config::default();
        if let Some(selector) = &key.scope.label_selector {
            config = config.labels(selector);
        }
        let label = label(&key);
        let (task, source) = if key.scope.shard.is_some_and(|slots| slots.is_empty()) {
            tracing::info!(informer = %label, "sharded informer owns no slots; not watching");
            cache.synced.send_replace(true);
            cache.release();
            (None, None)
        } else {
            tracing::info!(informer = %label, metadata, "starting informer");
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
                initial_list: options.initial_list,
            };
            let task = spawn_watch(registry, &source, &cache, &label, metadata);
            (Some(task), Some(source))
        };
        Self {
            key,
            resource: resolved.resource,
            namespaced: resolved.namespaced,
            selector,
            cache,
            task: Mutex::new(task),
            source,
            label,
            registry: Arc::downgrade(registry),
        }
    }

    /// An informer whose cache the caller feeds (unit tests): no watch, no registry.
    #[cfg(test)]
    pub(super) fn unwatched(key: Key, resource: ApiResource, cache: Arc<watch::Cache>) -> Self {
        Self {
            key,
            resource,
            namespaced: true,
            selector: None,
            cache,
            task: Mutex::new(None),
            source: None,
            label: "test".to_owned(),
            registry: Weak::new(),
        }
    }

    /// A metadata-only informer starts watching whole objects: the metadata watch is aborted
    /// (its late events are dropped by the cache) and a full one lists into the same cache.
    /// Nothing to do for one that is full or upgrading already.
    pub(super) fn upgrade(&self) {
        let mut task = self.task.lock();
        if !self.cache.begin_upgrade() {
            return;
        }
        let (Some(source), Some(registry)) = (&self.source, self.registry.upgrade()) else {
            // Nothing watched (an empty slot set), or the host is going away.
            self.cache.release();
            return;
        };
        tracing::info!(informer = %self.label, "a guest reads the kind: watching whole objects instead of metadata");
        if let Some(old) = task.take() {
            old.abort();
        }
        *task = Some(spawn_watch(
            &registry,
            source,
            &self.cache,
            &self.label,
            false,
        ));
    }
}

fn spawn_watch(
    registry: &Registry,
    source: &watch::Source,
    cache: &Arc<watch::Cache>,
    label: &str,
    metadata: bool,
) -> tokio::task::AbortHandle {
    let guard = watch::TaskGuard::new(registry.watch_tasks.clone());
    let run = watch::run(
        source.clone(),
        cache.clone(),
        label.to_owned(),
        guard,
        metadata,
    );
    tokio::spawn(run).abort_handle()
}

impl Drop for InformerState {
    fn drop(&mut self) {
        if let Some(task) = self.task.get_mut().take() {
            task.abort();
        }
        self.cache.release();
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

impl super::Share for Informer {
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
    pub(super) shared: Arc<InformerState>,
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
    /// An informer of `gvk` (`ConfigMap`s' resource) that listed `objects` once, whole or, when
    /// `metadata_only`, as metadata: no watch, no registry (other rooms' unit tests).
    #[cfg(test)]
    pub(crate) fn listed(
        gvk: GroupVersionKind,
        objects: Vec<DynamicObject>,
        metadata_only: bool,
    ) -> Informer {
        let resource = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let form = if metadata_only {
            watch::Form::Metadata
        } else {
            watch::Form::Full
        };
        let cache = Arc::new(watch::Cache::new(
            &resource,
            store::Store::new(std::time::Duration::from_mins(1)),
            4,
            false,
            None,
            InformerMetrics::unregistered(),
            form,
        ));
        let origin = watch::Origin {
            metadata: metadata_only,
            list: InitialList::Stream,
        };
        cache.handle(watcher::Event::Init, origin);
        for object in objects {
            cache.handle(watcher::Event::InitApply(object), origin);
        }
        cache.handle(watcher::Event::InitDone, origin);
        let key = Key {
            gvk,
            scope: WatchScope::all(),
        };
        Informer {
            shared: Arc::new(InformerState::unwatched(key, resource, cache)),
        }
    }

    pub(crate) fn gvk(&self) -> &GroupVersionKind {
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

    pub(super) fn describe(&self) -> String {
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

    /// The cache holds only the objects' metadata: no reader has asked for more yet (see
    /// [`Informer::until_full`]).
    pub fn metadata_only(&self) -> bool {
        *self.shared.cache.form.borrow() != watch::Form::Full
    }

    /// What a reader of whole objects waits for: none when the cache holds them already;
    /// otherwise the informer starts watching whole objects now (once, for every handle), and
    /// the future resolves when its list has replaced every partial object. Cost: for the
    /// first reader, one list of the kind's whole objects; for the others, nothing more.
    pub fn until_full(&self) -> Option<impl Future<Output = ()> + Send + 'static> {
        if !self.metadata_only() {
            return None;
        }
        self.shared.upgrade();
        let mut form = self.shared.cache.form.subscribe();
        let informer = self.clone();
        Some(async move {
            // The sender lives in the cache `informer` keeps alive, so this cannot fail.
            let _ = form.wait_for(|f| *f == watch::Form::Full).await;
            drop(informer);
        })
    }

    /// How the latest completed list was made: streaming or paged (a streaming list the server
    /// refused falls back to pages). None until the first list completes.
    pub fn list_mode(&self) -> Option<InitialList> {
        *self.shared.cache.listed_by.lock()
    }

    /// Where this sharded informer filters: decided before its first list (see
    /// [`ShardFilter`]). None for an unsharded informer, for an empty slot set (nothing is
    /// watched) and while the API server has not answered the probe.
    pub fn filter_mode(&self) -> Option<FilterMode> {
        self.shared.cache.filter.get().copied()
    }

    /// The newest resourceVersion the cache is synced to: the largest of the watch events'
    /// and of completed lists' objects (client-go's `LastStoreSyncResourceVersion`, which
    /// KEP-5647 gives controllers to tell a stale cache). resourceVersions are integers in
    /// write order on etcd-backed servers (KEP-5504); none until an integer one was seen.
    /// Bookmarks and a list's own version are not counted: kube-runtime's watcher does not pass
    /// them on, so this can trail the watch on a quiet informer. O(1) under the cache's lock.
    pub fn last_store_sync_resource_version(&self) -> Option<u64> {
        self.shared.cache.store.read().synced_rv()
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

    /// Read-your-writes: `obj` is the API server's response to a write the host made (patch,
    /// apply, create, update). `get`/`list` return it at once, and watch events older than it
    /// do not replace it. Ignored (returns false) when the cache already has this version or a
    /// newer one, when versions cannot be compared (non-integer resourceVersions: the watch
    /// wins), when the object was deleted at or after this version, or when it is outside this
    /// informer's scope (namespace, labels, or for a sharded informer the uid's slot: a write to
    /// another replica's object must not enter this one's cache). Subscribers are not notified:
    /// they hear of the change from the watch. It stops showing when the watch reports it or
    /// a newer version, or when the cache is synced to its version or past it
    /// ([`Informer::last_store_sync_resource_version`]), echo or not; it is refused when the
    /// cache is synced to it already. `Options::write_ttl` ends it only where versions cannot
    /// be compared (non-integer, or the cache had seen none when it was recorded) and after a
    /// relist that did not list the object.
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

    /// The host is about to send a write of this object (a patch, an apply, a create): its
    /// events are held until the write's answer, so that the write's own version arriving on
    /// the watch before the answer is still marked an echo (which a controller queues behind
    /// other work), while anyone else's change in that window stays a change. Readers see the
    /// watch's objects at once; only subscribers wait, for as long as the write is out.
    ///
    /// Give the answer to [`OwnWrite::answered`]; a write that fails simply drops the guard,
    /// which releases what it held as changes.
    pub fn expect_write(&self, namespace: Option<&str>, name: &str) -> OwnWrite {
        self.shared.cache.store.write().begin_write(namespace, name);
        OwnWrite {
            informer: self.clone(),
            namespace: namespace.map(ToOwned::to_owned),
            name: name.to_owned(),
            open: true,
        }
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

    pub(super) fn in_scope(&self, obj: &DynamicObject) -> bool {
        in_scope(
            &self.shared.key.scope,
            self.shared.namespaced,
            self.shared.selector.as_ref(),
            obj,
        )
    }
}

/// One of the host's writes in flight, from [`Informer::expect_write`] to its answer.
#[must_use = "the object's events are held until the write's answer or until this is dropped"]
pub struct OwnWrite {
    informer: Informer,
    namespace: Option<String>,
    name: String,
    open: bool,
}

impl OwnWrite {
    /// The API server answered the write with `obj`: records it as [`Informer::record_write`]
    /// does (returning the same) and releases the events held meanwhile, the write's own
    /// version marked as an echo. One lock for both, so no watch event falls between them.
    pub fn answered(mut self, obj: DynamicObject) -> bool {
        self.open = false;
        let informer = &self.informer;
        let take = obj.metadata.name.is_some() && informer.in_scope(&obj);
        let cache = &informer.shared.cache;
        let obj = cache.complete(obj);
        let mut store = cache.store.write();
        let recorded = take && store.record_write(&obj, Instant::now());
        let rv = obj.metadata.resource_version.as_deref();
        for event in store.end_write(self.namespace.as_deref(), &self.name, rv) {
            cache.emit(event);
        }
        recorded
    }
}

impl Drop for OwnWrite {
    fn drop(&mut self) {
        if self.open {
            let cache = &self.informer.shared.cache;
            let mut store = cache.store.write();
            for event in store.end_write(self.namespace.as_deref(), &self.name, None) {
                cache.emit(event);
            }
        }
    }
}

/// Whether `obj` belongs in an informer of `scope` (`selector` is the scope's, parsed).
pub(super) fn in_scope(
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

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Key {
    pub(super) gvk: GroupVersionKind,
    pub(super) scope: WatchScope,
}

pub(super) struct Registry {
    pub(super) client: Client,
    pub(super) options: Options,
    pub(super) discovery: crate::cluster::discovery::Resolver,
    pub(super) informers: Mutex<HashMap<Key, Weak<InformerState>>>,
    pub(super) watch_tasks: Arc<AtomicUsize>,
    /// GVKs whose object gauge was set at the last scrape.
    pub(super) reported: Mutex<HashSet<GroupVersionKind>>,
    /// Filter modes whose gauge was set at the last scrape.
    pub(super) reported_filters: Mutex<HashSet<(GroupVersionKind, FilterMode)>>,
}

impl Registry {
    /// Upgraded under the lock, returned outside it: dropping a last handle takes the lock.
    pub(super) fn live(&self) -> Vec<Arc<InformerState>> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::informers::parse_selector;
    use crate::cluster::shard_ranges::{SlotSet, slot_of};

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
