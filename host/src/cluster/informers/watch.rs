//! The one task per informer that keeps its cache current.
//!
//! kube-runtime's `watcher` does the protocol: list, then watch from the list's resourceVersion,
//! resume from the last seen version after a dropped connection, relist after 410 Gone, and
//! bookmarks. Its `DefaultBackoff` (client-go's reflector numbers: 800 ms doubling to 30 s, with
//! jitter, reset after 120 s of health) keeps a failing watch from spinning, except after the API
//! server refused a request as overloaded with `Retry-After` (a 1.37 server while its watch cache
//! initialises): then the task waits what the server asked, and no longer than a minute
//! (`crate::cluster::retry_after`), says so in `last_error` (which `/readyz` shows while the cache has
//! not synced) and counts it; the watcher then resumes where it was (a watch from its
//! resourceVersion, a list from its start). What this file adds:
//! feeding our own store (see `store.rs` for why not the reflector's), fanning events out to
//! subscribers, the synced flag, logging errors with the GVK, counting what arrives, and for a
//! sharded informer choosing the filter before the first list and dropping foreign objects (see
//! `shard.rs`).
//!
//! How the cache is filled ([`InitialList`]): a streaming list where the API server serves one,
//! pages where it refuses (the task starts the watcher again in pages; a refusal is a 400 or 422
//! to the streaming request, before any object arrived). What it holds ([`Form`]): whole
//! objects, or only their metadata (`PartialObjectMetadata`) until a read upgrades it. An
//! upgrade aborts the metadata task and starts a full one on the same cache; its list replaces
//! every partial object (silently where the version did not change) and removes what vanished,
//! and events from the old task that arrive late are dropped (checked under the store's lock).

use std::{
    sync::{
        Arc, OnceLock,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use futures::{Stream, StreamExt, TryStreamExt};
use kube::{
    Api, Client,
    api::{DynamicObject, PartialObjectMeta, TypeMeta},
    discovery::ApiResource,
    runtime::{WatchStreamExt, watcher},
};
use parking_lot::{Mutex, RwLock};
use tokio::sync::{broadcast, watch};

use super::{
    client,
    event::InformerEvent,
    options::InitialList,
    shard::{self, FilterMode, ShardFilter},
    store::Store,
};
use crate::{
    cluster::retry_after::{Hold, ServerBackoff},
    cluster::shard_ranges::SlotSet,
    metrics::InformerMetrics,
};

/// What an informer's cache holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Form {
    /// Only each object's metadata, from a metadata-only watch.
    Metadata,
    /// A read asked for whole objects: the full watch is listing, the cache is still partial.
    Upgrading,
    /// Whole objects.
    Full,
}

/// Which watch an event came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Origin {
    /// A metadata-only watch.
    pub(super) metadata: bool,
    /// How its lists are made.
    pub(super) list: InitialList,
}

/// State shared by the watch task and the handles. Events are sent while the store's write
/// lock is held, so a subscriber that snapshots under the read lock and subscribes in the same
/// critical section sees every change exactly once.
pub(super) struct Cache {
    pub(super) store: RwLock<Store>,
    pub(super) events: broadcast::Sender<InformerEvent>,
    pub(super) synced: watch::Sender<bool>,
    /// Between a list's start and end (the first list, a relist, an upgrade's list). Changed
    /// only under the store's write lock.
    pub(super) listing: watch::Sender<bool>,
    /// What the store holds. Changed only under the store's write lock.
    pub(super) form: watch::Sender<Form>,
    pub(super) last_error: Mutex<Option<String>>,
    /// Lists started: 1 for the initial list, one more per relist (410 Gone) or upgrade.
    pub(super) lists: AtomicU64,
    /// How the latest completed list was made.
    pub(super) listed_by: Mutex<Option<InitialList>>,
    /// A sharded informer's slots: objects whose uid falls outside never enter the store.
    pub(super) shard: Option<SlotSet>,
    /// Where a sharded informer filters, once decided (before its first list).
    pub(super) filter: OnceLock<FilterMode>,
    metrics: InformerMetrics,
    /// Fills in `apiVersion`/`kind`, which list responses omit on their items (and which a
    /// metadata-only watch reports as `PartialObjectMetadata`).
    types: TypeMeta,
    keep_managed_fields: bool,
}

impl Cache {
    pub(super) fn new(
        resource: &ApiResource,
        store: Store,
        event_buffer: usize,
        keep_managed_fields: bool,
        shard: Option<SlotSet>,
        metrics: InformerMetrics,
        form: Form,
    ) -> Self {
        if form != Form::Full {
            metrics.metadata_only(true);
        }
        Self {
            store: RwLock::new(store),
            events: broadcast::channel(event_buffer.max(1)).0,
            synced: watch::channel(false).0,
            listing: watch::channel(false).0,
            form: watch::channel(form).0,
            last_error: Mutex::new(None),
            lists: AtomicU64::new(0),
            listed_by: Mutex::new(None),
            shard,
            filter: OnceLock::new(),
            metrics,
            types: TypeMeta {
                api_version: resource.api_version.clone(),
                kind: resource.kind.clone(),
            },
            keep_managed_fields,
        }
    }

    /// An object as the cache and its subscribers see it: with `apiVersion`/`kind`, and
    /// without `managedFields` unless they are kept.
    pub(super) fn complete(&self, mut obj: DynamicObject) -> Arc<DynamicObject> {
        if obj.types.as_ref().is_none_or(|t| t.kind.is_empty()) {
            obj.types = Some(self.types.clone());
        }
        if !self.keep_managed_fields {
            obj.metadata.managed_fields = None;
        }
        Arc::new(obj)
    }

    /// Starts the switch from metadata to whole objects; false when there is nothing to switch
    /// (already full or upgrading). From here the metadata watch's events are dropped.
    pub(super) fn begin_upgrade(&self) -> bool {
        let _store = self.store.write();
        self.form.send_if_modified(|form| {
            let metadata = *form == Form::Metadata;
            if metadata {
                *form = Form::Upgrading;
            }
            metadata
        })
    }

    /// The cache will not (or no longer) hold partial objects: the informer is released, or
    /// has nothing to watch. A partial cache stops counting as one, once whatever the watch
    /// task is doing (both ends of the count move under the store's lock).
    pub(super) fn release(&self) {
        let _store = self.store.write();
        self.become_full();
    }

    /// From here the cache holds whole objects, or nothing.
    fn become_full(&self) {
        if self.form.send_replace(Form::Full) != Form::Full {
            self.metrics.metadata_only(false);
        }
    }

    pub(super) fn emit(&self, event: InformerEvent) {
        // No receivers is not an error: nobody subscribed yet.
        let _ = self.events.send(event);
    }

    /// Objects outside a sharded informer's slots are counted as received and then dropped
    /// without an event: subscribers never saw them, and a relist that does not list them
    /// again removes nothing.
    pub(super) fn handle(&self, event: watcher::Event<DynamicObject>, origin: Origin) {
        if let watcher::Event::InitApply(obj)
        | watcher::Event::Apply(obj)
        | watcher::Event::Delete(obj) = &event
        {
            self.metrics.received_event();
            if !shard::owns(self.shard.as_ref(), obj) {
                return;
            }
        }
        let now = Instant::now();
        let mut store = self.store.write();
        // A metadata watch's event after the upgrade began (its task is aborted, but may be
        // between two events): the full list supersedes it.
        if origin.metadata && *self.form.borrow() != Form::Metadata {
            return;
        }
        match event {
            watcher::Event::Init => {
                self.lists.fetch_add(1, Ordering::Relaxed);
                store.begin_relist();
                self.listing.send_replace(true);
            }
            watcher::Event::InitApply(obj) | watcher::Event::Apply(obj) => {
                let obj = self.complete(obj);
                let event = if origin.metadata {
                    store.apply_partial(obj, now)
                } else {
                    store.apply(obj, now)
                };
                if let Some(event) = event {
                    self.emit(event);
                }
            }
            watcher::Event::Delete(obj) => {
                if let Some(event) = store.delete(self.complete(obj), now) {
                    self.emit(event);
                }
            }
            watcher::Event::InitDone => {
                for event in store.end_relist(now) {
                    self.emit(event);
                }
                self.listing.send_replace(false);
                *self.listed_by.lock() = Some(origin.list);
                let form = if origin.metadata { "metadata" } else { "full" };
                self.metrics.listed(origin.list.as_str(), form);
                self.synced.send_replace(true);
                if !origin.metadata && *self.form.borrow() == Form::Upgrading {
                    self.become_full();
                }
            }
        }
    }
}

/// Counts running watch tasks; the count drops when the task's future is dropped (aborted).
pub(super) struct TaskGuard(Arc<AtomicUsize>);

impl TaskGuard {
    pub(super) fn new(counter: Arc<AtomicUsize>) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        Self(counter)
    }
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What one informer lists and watches, and how.
#[derive(Clone)]
pub(super) struct Source {
    /// The host's client; the informer's own goes through it (see `client.rs`).
    pub(super) client: Client,
    pub(super) resource: ApiResource,
    /// Only this namespace (set only for namespaced kinds).
    pub(super) namespace: Option<String>,
    pub(super) config: watcher::Config,
    pub(super) filter: ShardFilter,
    pub(super) metrics: InformerMetrics,
    /// How lists start; a refused streaming list falls back to pages.
    pub(super) initial_list: InitialList,
}

/// Page size of paged lists (client-go's and kube-runtime's).
const PAGE_SIZE: u32 = 500;

impl Source {
    fn api<K>(&self, client: Client) -> Api<K>
    where
        K: kube::Resource<DynamicType = ApiResource, Scope = kube::core::DynamicResourceScope>,
    {
        match &self.namespace {
            Some(ns) => Api::namespaced_with(client, ns, &self.resource),
            None => Api::all_with(client, &self.resource),
        }
    }

    fn client(&self, shard_selector: Option<String>, hold: &Hold) -> Client {
        client::informer_client(
            self.client.clone(),
            self.metrics.clone(),
            shard_selector,
            hold.clone(),
        )
    }

    /// The watcher's configuration for lists made `how`. Pages are consistent reads
    /// (`resourceVersion` unset): from `resourceVersion=0` the API server answers from its
    /// cache in one response whatever the limit.
    fn config(&self, how: InitialList) -> watcher::Config {
        let config = self.config.clone();
        match how {
            InitialList::Stream => config.streaming_lists(),
            InitialList::Paged => {
                let mut config = config.page_size(PAGE_SIZE);
                config.list_semantic = watcher::ListSemantic::MostRecent;
                config
            }
        }
    }

    /// The watcher's events, whole objects or (`metadata`) metadata only, both as
    /// `DynamicObject`s (a partial one has an empty body), backing off after errors as `hold`
    /// says (the refusals `client` met).
    fn events(
        &self,
        client: Client,
        metadata: bool,
        how: InitialList,
        hold: &Hold,
    ) -> futures::stream::BoxStream<'static, watcher::Result<watcher::Event<DynamicObject>>> {
        let config = self.config(how);
        let backoff = ServerBackoff::new(hold.clone());
        if metadata {
            let api = self.api::<PartialObjectMeta<DynamicObject>>(client);
            watcher(api, config)
                .map_ok(into_object)
                .backoff(backoff)
                .boxed()
        } else {
            watcher(self.api::<DynamicObject>(client), config)
                .backoff(backoff)
                .boxed()
        }
    }
}

/// A metadata-only watch's event with its object as a `DynamicObject` (empty body; the cache
/// fills in `apiVersion` and `kind`).
fn into_object(
    event: watcher::Event<PartialObjectMeta<DynamicObject>>,
) -> watcher::Event<DynamicObject> {
    let object = |partial: PartialObjectMeta<DynamicObject>| DynamicObject {
        types: None,
        metadata: partial.metadata,
        data: serde_json::Value::Object(serde_json::Map::new()),
    };
    match event {
        watcher::Event::Apply(p) => watcher::Event::Apply(object(p)),
        watcher::Event::Delete(p) => watcher::Event::Delete(object(p)),
        watcher::Event::InitApply(p) => watcher::Event::InitApply(object(p)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// Whether the API server refused a streaming list: the `WatchList` feature gate is off
/// (422, `sendInitialEvents is forbidden for watch unless the WatchList feature gate is
/// enabled`), or the server predates it (422, `resourceVersionMatch is forbidden for watch`),
/// or a server in front answers 400 to what it does not know.
fn refuses_streaming(error: &watcher::Error) -> Option<&str> {
    match error {
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
            if matches!(status.code, 400 | 422) =>
        {
            Some(&status.message)
        }
        _ => None,
    }
}

/// Runs until aborted (when the informer's last handle is dropped, or it is upgraded from
/// metadata to whole objects). `metadata`: watch only the objects' metadata.
pub(super) async fn run(
    source: Source,
    cache: Arc<Cache>,
    label: String,
    guard: TaskGuard,
    metadata: bool,
) {
    let _guard = guard;
    let hold = Hold::default();
    let client = match cache.shard.as_ref().and_then(SlotSet::selector) {
        Some(selector) => choose_filter(&source, selector, &cache, &label, &hold).await,
        None => source.client(None, &hold),
    };
    let mut how = source.initial_list;
    loop {
        let events = source.events(client.clone(), metadata, how, &hold);
        let origin = Origin {
            metadata,
            list: how,
        };
        let Some(refusal) = follow(events, &cache, &label, origin, &hold).await else {
            return;
        };
        tracing::info!(
            informer = %label,
            reason = %refusal,
            "the API server refused a streaming list; listing in pages of {PAGE_SIZE} instead"
        );
        how = InitialList::Paged;
    }
}

/// Feeds the cache from `events`. Returns the API server's message when it refused a streaming
/// list (the caller lists in pages instead); the watcher's stream never ends otherwise.
async fn follow(
    mut events: impl Stream<Item = watcher::Result<watcher::Event<DynamicObject>>> + Unpin,
    cache: &Cache,
    label: &str,
    origin: Origin,
    hold: &Hold,
) -> Option<String> {
    // Held back by the API server since the last event: said once, at warn.
    let mut said = false;
    while let Some(item) = events.next().await {
        match item {
            Ok(event) => {
                said = false;
                if matches!(event, watcher::Event::Init) {
                    tracing::debug!(informer = %label, list = %origin.list, metadata = origin.metadata, "listing");
                }
                if matches!(event, watcher::Event::InitDone) {
                    tracing::debug!(informer = %label, "listed; watching");
                }
                cache.last_error.lock().take();
                cache.handle(event, origin);
            }
            Err(error) if origin.list == InitialList::Stream => {
                if let Some(message) = refuses_streaming(&error) {
                    return Some(message.to_owned());
                }
                report(cache, label, &error, hold, &mut said);
            }
            Err(error) => report(cache, label, &error, hold, &mut said),
        }
    }
    None
}

/// Logs `error` and keeps it as the informer's last error; a hold the API server asked for is
/// said at warn once per outage (`said`), then at debug.
fn report(cache: &Cache, label: &str, error: &watcher::Error, hold: &Hold, said: &mut bool) {
    // Expired resourceVersion: the watcher relists by itself; routine, not a failure.
    if let watcher::Error::WatchError(status) = error
        && status.code == 410
    {
        tracing::debug!(informer = %label, "resourceVersion expired (410 Gone); relisting");
        return;
    }
    let why = if let Some(why) = held_back(error, hold, *cache.synced.borrow()) {
        if std::mem::replace(said, true) {
            tracing::debug!(informer = %label, "{why}");
        } else {
            tracing::warn!(informer = %label, "{why}");
        }
        why
    } else {
        tracing::warn!(informer = %label, error = %error, "watch failed; retrying with backoff");
        error.to_string()
    };
    *cache.last_error.lock() = Some(why);
}

/// What to say when `error` is the API server refusing a list or watch as overloaded with a
/// `Retry-After` the watch is waiting out (`hold`'s latest refusal). Before the cache has
/// `synced`, the request refused was the first list (a streaming one is a watch request).
fn held_back(error: &watcher::Error, hold: &Hold, synced: bool) -> Option<String> {
    let status = crate::cluster::retry_after::overloaded(error)?;
    let (refusal, until) = hold.latest()?;
    let (retry_after, until) = refusal.retry_after.zip(until)?;
    let what = match error {
        watcher::Error::InitialListFailed(_) => "list",
        _ if !synced => "first list",
        _ => "watch",
    };
    Some(format!(
        "held back by the API server: it refused the {what} as overloaded ({} {}: {}) with \
         Retry-After: {}s; trying again in {:.1}s",
        status.code,
        status.reason,
        status.message,
        retry_after.as_secs(),
        until
            .saturating_duration_since(tokio::time::Instant::now())
            .as_secs_f64()
    ))
}

/// Decides where a sharded informer filters ([`ShardFilter`]) and returns the client to watch
/// with. Until the server has answered the probe (and, in `server` mode, honoured it), retries
/// with the watch's backoff (`Retry-After` included) and reports the reason in `last_error`; the informer does not sync
/// meanwhile, as with any other failing list.
async fn choose_filter(
    source: &Source,
    selector: String,
    cache: &Cache,
    label: &str,
    hold: &Hold,
) -> Client {
    if source.filter == ShardFilter::Client {
        let _ = cache.filter.set(FilterMode::Client);
        return source.client(None, hold);
    }
    let sharded = source.client(Some(selector), hold);
    let canary = source.client(Some(shard::CANARY.to_owned()), hold);
    let plain = source.client(None, hold);
    let url = source
        .api::<DynamicObject>(sharded.clone())
        .resource_url()
        .to_owned();
    let mut backoff = ServerBackoff::new(hold.clone());
    loop {
        let error = match shard::probe(&sharded, &canary, &plain, &url).await {
            Ok(probe) if probe.honoured() => {
                if probe == shard::Probe::Unknown {
                    tracing::info!(informer = %label, "sending shardSelector; whether the API server filters by it cannot be told on an empty collection (the client-side check keeps the share right)");
                } else {
                    tracing::info!(informer = %label, ?probe, "the API server filters by shardSelector");
                }
                let _ = cache.filter.set(FilterMode::Server);
                cache.last_error.lock().take();
                return sharded;
            }
            Ok(_) if source.filter == ShardFilter::Auto => {
                tracing::info!(
                    informer = %label,
                    "the API server ignores shardSelector (feature gate ShardedListAndWatch off); \
                     filtering on the client, so this replica receives the whole collection"
                );
                let _ = cache.filter.set(FilterMode::Client);
                cache.last_error.lock().take();
                return plain;
            }
            Ok(_) => shard::not_honoured(label),
            Err(err) => format!(
                "{label}: cannot tell whether the API server filters by shardSelector: a one-item \
                 list failed: {err}; retrying"
            ),
        };
        tracing::warn!(informer = %label, error = %error, "sharded informer not started; retrying with backoff");
        *cache.last_error.lock() = Some(error);
        tokio::time::sleep(backoff.next().unwrap_or(Duration::from_secs(30))).await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const FULL: Origin = Origin {
        metadata: false,
        list: InitialList::Stream,
    };

    fn with_managed_fields() -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "namespace": "a", "name": "x", "resourceVersion": "1",
                "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": "v1"}],
            },
        }))
        .unwrap()
    }

    fn cache(keep_managed_fields: bool) -> Cache {
        sharded(keep_managed_fields, None)
    }

    fn sharded(keep_managed_fields: bool, shard: Option<SlotSet>) -> Cache {
        counted(keep_managed_fields, shard, InformerMetrics::unregistered())
    }

    fn counted(
        keep_managed_fields: bool,
        shard: Option<SlotSet>,
        metrics: InformerMetrics,
    ) -> Cache {
        let resource = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        Cache::new(
            &resource,
            Store::new(Duration::from_mins(1)),
            8,
            keep_managed_fields,
            shard,
            metrics,
            Form::Full,
        )
    }

    #[test]
    fn managed_fields_are_dropped_unless_kept_and_types_filled_in() {
        let dropped = cache(false).complete(with_managed_fields());
        assert!(dropped.metadata.managed_fields.is_none());
        assert_eq!(
            dropped.types.as_ref().map(|t| t.kind.as_str()),
            Some("ConfigMap")
        );
        let kept = cache(true).complete(with_managed_fields());
        assert_eq!(kept.metadata.managed_fields.as_ref().map(Vec::len), Some(1));
    }

    #[test]
    fn readers_and_events_see_the_object_without_managed_fields() {
        let cache = cache(false);
        let mut events = cache.events.subscribe();
        cache.handle(watcher::Event::Init, FULL);
        cache.handle(watcher::Event::InitApply(with_managed_fields()), FULL);
        cache.handle(watcher::Event::InitDone, FULL);
        let stored = cache
            .store
            .read()
            .get(Some("a"), "x", Instant::now())
            .unwrap();
        assert!(
            !stored.json().contains("managedFields"),
            "{}",
            stored.json()
        );
        let event = events.try_recv().unwrap();
        assert!(event.object().metadata.managed_fields.is_none());
        assert!(*cache.synced.borrow());
    }

    fn cm(name: &str, uid: &str, rv: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "metadata": { "namespace": "a", "name": name, "uid": uid, "resourceVersion": rv },
        }))
        .unwrap()
    }

    /// Uids that fall in slot 0..128 and in 128..256, found by hashing (deterministic).
    fn uids_on_both_sides() -> (String, String) {
        let find = |low: bool| {
            (0..1000)
                .map(|i| format!("{i}-6a4c5e5e-8f39"))
                .find(|uid| (crate::cluster::shard_ranges::slot_of(uid) < 128) == low)
                .unwrap()
        };
        (find(true), find(false))
    }

    #[test]
    fn a_sharded_cache_keeps_only_its_slots_and_reports_nothing_else() {
        let (mine, foreign) = uids_on_both_sides();
        let metrics = crate::metrics::Metrics::new();
        let cache = counted(
            false,
            Some(SlotSet::range(0, 128)),
            metrics.informer("", "v1", "ConfigMap"),
        );
        let mut events = cache.events.subscribe();
        cache.handle(watcher::Event::Init, FULL);
        cache.handle(watcher::Event::InitApply(cm("mine", &mine, "1")), FULL);
        cache.handle(
            watcher::Event::InitApply(cm("foreign", &foreign, "2")),
            FULL,
        );
        cache.handle(watcher::Event::InitDone, FULL);
        cache.handle(watcher::Event::Apply(cm("foreign", &foreign, "3")), FULL);
        cache.handle(watcher::Event::Delete(cm("foreign", &foreign, "4")), FULL);
        let store = cache.store.read();
        let now = Instant::now();
        assert!(store.get(Some("a"), "mine", now).is_some());
        assert!(store.get(Some("a"), "foreign", now).is_none());
        assert_eq!(store.len(now), 1);
        drop(store);
        let names: Vec<String> = std::iter::from_fn(|| events.try_recv().ok())
            .map(|e| e.object().metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(names, ["mine"], "only the owned object is announced");
        assert_eq!(
            crate::metrics::sample(
                &metrics.render(),
                r#"reconciler_informer_events_total{group="",version="v1",kind="ConfigMap"}"#
            ),
            Some(4.0),
            "every object that arrived counts, dropped or not"
        );

        // A name re-created with a uid in another shard: the old one's relist removes it.
        cache.handle(watcher::Event::Init, FULL);
        cache.handle(watcher::Event::InitApply(cm("mine", &foreign, "5")), FULL);
        cache.handle(watcher::Event::InitDone, FULL);
        assert!(matches!(
            events.try_recv(),
            Ok(InformerEvent::Deleted { object }) if object.metadata.uid.as_deref() == Some(mine.as_str())
        ));
        assert_eq!(cache.store.read().len(Instant::now()), 0);
    }

    const METADATA: Origin = Origin {
        metadata: true,
        list: InitialList::Stream,
    };

    fn with_data(name: &str, rv: &str) -> DynamicObject {
        let mut obj = cm(name, &format!("uid-{name}"), rv);
        obj.data = serde_json::json!({"data": {"k": rv}});
        obj
    }

    fn metadata_of(name: &str, rv: &str) -> DynamicObject {
        cm(name, &format!("uid-{name}"), rv)
    }

    #[test]
    fn an_upgrade_ignores_the_metadata_watch_and_its_list_makes_the_cache_whole() {
        let metrics = crate::metrics::Metrics::new();
        let resource = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let cache = Cache::new(
            &resource,
            Store::new(Duration::from_mins(1)),
            64,
            false,
            None,
            metrics.informer("", "v1", "ConfigMap"),
            Form::Metadata,
        );
        let mut events = cache.events.subscribe();
        cache.handle(watcher::Event::Init, METADATA);
        for (name, rv) in [("same", "1"), ("changed", "2"), ("gone", "3")] {
            cache.handle(watcher::Event::InitApply(metadata_of(name, rv)), METADATA);
        }
        cache.handle(watcher::Event::InitDone, METADATA);
        assert!(*cache.synced.borrow());
        assert_eq!(*cache.form.borrow(), Form::Metadata);
        let stored = |name| cache.store.read().get(Some("a"), name, Instant::now());
        let head = stored("same").unwrap();
        assert!(head.is_partial());
        assert!(!head.json().contains("\"data\""), "{}", head.json());
        assert!(
            head.json().contains("\"kind\":\"ConfigMap\""),
            "{}",
            head.json()
        );
        while events.try_recv().is_ok() {}

        assert!(cache.begin_upgrade());
        assert!(!cache.begin_upgrade(), "once");
        assert_eq!(*cache.form.borrow(), Form::Upgrading);
        // The aborted metadata task, one event late: dropped.
        cache.handle(watcher::Event::Apply(metadata_of("changed", "4")), METADATA);
        assert!(events.try_recv().is_err());
        cache.handle(watcher::Event::Init, FULL);
        cache.handle(watcher::Event::InitApply(with_data("same", "1")), FULL);
        cache.handle(watcher::Event::InitApply(with_data("changed", "4")), FULL);
        assert_eq!(*cache.form.borrow(), Form::Upgrading, "until the list ends");
        cache.handle(watcher::Event::InitDone, FULL);
        assert_eq!(*cache.form.borrow(), Form::Full);

        let names: Vec<String> = std::iter::from_fn(|| events.try_recv().ok())
            .map(|e| match e {
                InformerEvent::Applied { object, .. } => format!(
                    "applied {}",
                    object.metadata.name.clone().unwrap_or_default()
                ),
                InformerEvent::Deleted { object } => format!(
                    "deleted {}",
                    object.metadata.name.clone().unwrap_or_default()
                ),
                InformerEvent::Resync { .. } => "resync".into(),
            })
            .collect();
        assert_eq!(
            names,
            ["applied changed", "deleted gone"],
            "the unchanged object is no news"
        );
        for name in ["same", "changed"] {
            let whole = stored(name).unwrap();
            assert!(!whole.is_partial(), "{name}");
            assert!(whole.json().contains("\"data\""), "{}", whole.json());
        }
        assert!(stored("gone").is_none());
        assert_eq!(*cache.listed_by.lock(), Some(InitialList::Stream));
        let text = metrics.render();
        let gauge = r#"reconciler_informer_metadata_only{group="",version="v1",kind="ConfigMap"}"#;
        assert_eq!(crate::metrics::sample(&text, gauge), Some(0.0), "{text}");
        for form in ["metadata", "full"] {
            let series = format!(
                r#"reconciler_informer_lists_total{{group="",version="v1",kind="ConfigMap",mode="streaming",form="{form}"}}"#
            );
            assert_eq!(
                crate::metrics::sample(&text, &series),
                Some(1.0),
                "{series}"
            );
        }
    }

    #[test]
    fn only_a_refused_streaming_request_falls_back_to_pages() {
        let status = |code: u16| {
            let status: kube::core::Status = serde_json::from_value(serde_json::json!({
                "code": code, "message": "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
            }))
            .unwrap();
            Box::new(status)
        };
        let started = |code| watcher::Error::WatchStartFailed(kube::Error::Api(status(code)));
        assert!(refuses_streaming(&started(422)).is_some_and(|m| m.contains("WatchList")));
        assert!(refuses_streaming(&started(400)).is_some());
        for other in [
            started(403),
            started(500),
            watcher::Error::WatchError(status(422)),
            watcher::Error::InitialListFailed(kube::Error::Api(status(422))),
        ] {
            assert!(refuses_streaming(&other).is_none(), "{other}");
        }
    }

    #[tokio::test]
    async fn pages_are_consistent_reads_and_streams_ask_for_initial_events() {
        let source = Source {
            client: kube::Client::new(
                tower::service_fn(|_: http::Request<kube::client::Body>| async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(
                        kube::client::Body::empty(),
                    ))
                }),
                "default",
            ),
            resource: ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            namespace: None,
            config: watcher::Config::default().labels("app=web"),
            filter: ShardFilter::Auto,
            metrics: InformerMetrics::unregistered(),
            initial_list: InitialList::Stream,
        };
        let paged = source.config(InitialList::Paged);
        assert_eq!(paged.page_size, Some(PAGE_SIZE));
        assert_eq!(paged.list_semantic, watcher::ListSemantic::MostRecent);
        assert_eq!(
            paged.initial_list_strategy,
            watcher::InitialListStrategy::ListWatch
        );
        let streaming = source.config(InitialList::Stream);
        assert_eq!(
            streaming.initial_list_strategy,
            watcher::InitialListStrategy::StreamingList
        );
        for config in [paged, streaming] {
            assert_eq!(config.label_selector.as_deref(), Some("app=web"));
        }
    }

    #[test]
    fn an_unsharded_cache_keeps_everything() {
        let (low, high) = uids_on_both_sides();
        let cache = cache(false);
        cache.handle(watcher::Event::Init, FULL);
        cache.handle(watcher::Event::InitApply(cm("low", &low, "1")), FULL);
        cache.handle(watcher::Event::InitApply(cm("high", &high, "2")), FULL);
        cache.handle(watcher::Event::InitDone, FULL);
        assert_eq!(cache.store.read().len(Instant::now()), 2);
    }
}
