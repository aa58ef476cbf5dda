//! The one task per informer that keeps its cache current.
//!
//! kube-runtime's `watcher` does the protocol: list, then watch from the list's resourceVersion,
//! resume from the last seen version after a dropped connection, relist after 410 Gone, and
//! bookmarks. `default_backoff()` (client-go's reflector numbers: 800 ms doubling to 30 s, with
//! jitter, reset after 120 s of health) keeps a failing watch from spinning. What this file adds:
//! feeding our own store (see `store.rs` for why not the reflector's), fanning events out to
//! subscribers, the synced flag, and logging errors with the GVK.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Instant,
};

use futures::StreamExt;
use kube::{
    Api,
    api::{DynamicObject, TypeMeta},
    discovery::ApiResource,
    runtime::{WatchStreamExt, watcher},
};
use parking_lot::{Mutex, RwLock};
use tokio::sync::{broadcast, watch};

use super::{InformerEvent, store::Store};

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
    ) -> Self {
        Self {
            store: RwLock::new(store),
            events: broadcast::channel(event_buffer.max(1)).0,
            synced: watch::channel(false).0,
            last_error: Mutex::new(None),
            lists: AtomicU64::new(0),
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

    fn handle(&self, event: watcher::Event<DynamicObject>) {
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

/// Runs until aborted (when the informer's last handle is dropped).
pub(super) async fn run(
    api: Api<DynamicObject>,
    config: watcher::Config,
    cache: Arc<Cache>,
    label: String,
    guard: TaskGuard,
) {
    let _guard = guard;
    let mut events = watcher(api, config).default_backoff().boxed();
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
        let resource = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        Cache::new(
            &resource,
            Store::new(Duration::from_mins(1)),
            8,
            keep_managed_fields,
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
}
