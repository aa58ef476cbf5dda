//! The one task per informer that keeps its cache current.
//!
//! kube-runtime's `watcher` does the protocol: list, then watch from the list's resourceVersion,
//! resume from the last seen version after a dropped connection, relist after 410 Gone, and
//! bookmarks. `default_backoff()` (client-go's reflector numbers: 800 ms doubling to 30 s, with
//! jitter, reset after 120 s of health) keeps a failing watch from spinning. What this file adds:
//! feeding our own store (see `store.rs` for why not the reflector's), fanning events out to
//! subscribers, the synced flag, logging errors with the GVK, counting what arrives, and for a
//! sharded informer choosing the filter before the first list and dropping foreign objects (see
//! `shard.rs`).

use std::{
    sync::{
        Arc, OnceLock,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use futures::StreamExt;
use kube::{
    Api, Client,
    api::{DynamicObject, TypeMeta},
    discovery::ApiResource,
    runtime::{WatchStreamExt, watcher},
};
use parking_lot::{Mutex, RwLock};
use tokio::sync::{broadcast, watch};

use super::{
    client,
    event::InformerEvent,
    shard::{self, FilterMode, ShardFilter},
    store::Store,
};
use crate::{metrics::InformerMetrics, shards::SlotSet};

/// State shared by the watch task and the handles. Events are sent while the store's write
/// lock is held, so a subscriber that snapshots under the read lock and subscribes in the same
/// critical section sees every change exactly once.
pub(super) struct Cache {
    pub(super) store: RwLock<Store>,
    pub(super) events: broadcast::Sender<InformerEvent>,
    pub(super) synced: watch::Sender<bool>,
    pub(super) last_error: Mutex<Option<String>>,
    /// Lists started: 1 for the initial list, one more per relist (410 Gone).
    pub(super) lists: AtomicU64,
    /// A sharded informer's slots: objects whose uid falls outside never enter the store.
    pub(super) shard: Option<SlotSet>,
    /// Where a sharded informer filters, once decided (before its first list).
    pub(super) filter: OnceLock<FilterMode>,
    metrics: InformerMetrics,
    /// Fills in `apiVersion`/`kind`, which list responses omit on their items.
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
    ) -> Self {
        Self {
            store: RwLock::new(store),
            events: broadcast::channel(event_buffer.max(1)).0,
            synced: watch::channel(false).0,
            last_error: Mutex::new(None),
            lists: AtomicU64::new(0),
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

    fn emit(&self, event: InformerEvent) {
        // No receivers is not an error: nobody subscribed yet.
        let _ = self.events.send(event);
    }

    /// Objects outside a sharded informer's slots are counted as received and then dropped
    /// without an event: subscribers never saw them, and a relist that does not list them
    /// again removes nothing.
    fn handle(&self, event: watcher::Event<DynamicObject>) {
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
        match event {
            watcher::Event::Init => {
                self.lists.fetch_add(1, Ordering::Relaxed);
                store.begin_relist();
            }
            watcher::Event::InitApply(obj) | watcher::Event::Apply(obj) => {
                if let Some(event) = store.apply(self.complete(obj), now) {
                    self.emit(event);
                }
            }
            watcher::Event::Delete(obj) => {
                let event = store.delete(self.complete(obj), now);
                self.emit(event);
            }
            watcher::Event::InitDone => {
                for event in store.end_relist(now) {
                    self.emit(event);
                }
                self.synced.send_replace(true);
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
pub(super) struct Source {
    /// The host's client; the informer's own goes through it (see `client.rs`).
    pub(super) client: Client,
    pub(super) resource: ApiResource,
    /// Only this namespace (set only for namespaced kinds).
    pub(super) namespace: Option<String>,
    pub(super) config: watcher::Config,
    pub(super) filter: ShardFilter,
    pub(super) metrics: InformerMetrics,
}

impl Source {
    fn api(&self, client: Client) -> Api<DynamicObject> {
        match &self.namespace {
            Some(ns) => Api::namespaced_with(client, ns, &self.resource),
            None => Api::all_with(client, &self.resource),
        }
    }

    fn client(&self, shard_selector: Option<String>) -> Client {
        client::informer_client(self.client.clone(), self.metrics.clone(), shard_selector)
    }
}

/// Runs until aborted (when the informer's last handle is dropped).
pub(super) async fn run(source: Source, cache: Arc<Cache>, label: String, guard: TaskGuard) {
    let _guard = guard;
    let client = match cache.shard.as_ref().and_then(SlotSet::selector) {
        Some(selector) => choose_filter(&source, selector, &cache, &label).await,
        None => source.client(None),
    };
    let api = source.api(client);
    let mut events = watcher(api, source.config).default_backoff().boxed();
    while let Some(item) = events.next().await {
        match item {
            Ok(event) => {
                if matches!(event, watcher::Event::Init) {
                    tracing::debug!(informer = %label, "listing");
                }
                if matches!(event, watcher::Event::InitDone) {
                    tracing::debug!(informer = %label, "listed; watching");
                }
                cache.last_error.lock().take();
                cache.handle(event);
            }
            // Expired resourceVersion: the watcher relists by itself; routine, not a failure.
            Err(watcher::Error::WatchError(status)) if status.code == 410 => {
                tracing::debug!(informer = %label, "resourceVersion expired (410 Gone); relisting");
            }
            Err(err) => {
                tracing::warn!(informer = %label, error = %err, "watch failed; retrying with backoff");
                *cache.last_error.lock() = Some(err.to_string());
            }
        }
    }
}

/// Decides where a sharded informer filters ([`ShardFilter`]) and returns the client to watch
/// with. Until the server has answered the probe (and, in `server` mode, honoured it), retries
/// with the watcher's backoff and reports the reason in `last_error`; the informer does not sync
/// meanwhile, as with any other failing list.
async fn choose_filter(source: &Source, selector: String, cache: &Cache, label: &str) -> Client {
    if source.filter == ShardFilter::Client {
        let _ = cache.filter.set(FilterMode::Client);
        return source.client(None);
    }
    let sharded = source.client(Some(selector));
    let canary = source.client(Some(shard::CANARY.to_owned()));
    let plain = source.client(None);
    let url = source.api(sharded.clone()).resource_url().to_owned();
    let mut backoff = watcher::DefaultBackoff::default();
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
        cache.handle(watcher::Event::Init);
        cache.handle(watcher::Event::InitApply(with_managed_fields()));
        cache.handle(watcher::Event::InitDone);
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
                .find(|uid| (crate::shards::slot_of(uid) < 128) == low)
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
        cache.handle(watcher::Event::Init);
        cache.handle(watcher::Event::InitApply(cm("mine", &mine, "1")));
        cache.handle(watcher::Event::InitApply(cm("foreign", &foreign, "2")));
        cache.handle(watcher::Event::InitDone);
        cache.handle(watcher::Event::Apply(cm("foreign", &foreign, "3")));
        cache.handle(watcher::Event::Delete(cm("foreign", &foreign, "4")));
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
        cache.handle(watcher::Event::Init);
        cache.handle(watcher::Event::InitApply(cm("mine", &foreign, "5")));
        cache.handle(watcher::Event::InitDone);
        assert!(matches!(
            events.try_recv(),
            Ok(InformerEvent::Deleted { object }) if object.metadata.uid.as_deref() == Some(mine.as_str())
        ));
        assert_eq!(cache.store.read().len(Instant::now()), 0);
    }

    #[test]
    fn an_unsharded_cache_keeps_everything() {
        let (low, high) = uids_on_both_sides();
        let cache = cache(false);
        cache.handle(watcher::Event::Init);
        cache.handle(watcher::Event::InitApply(cm("low", &low, "1")));
        cache.handle(watcher::Event::InitApply(cm("high", &high, "2")));
        cache.handle(watcher::Event::InitDone);
        assert_eq!(cache.store.read().len(Instant::now()), 2);
    }
}
