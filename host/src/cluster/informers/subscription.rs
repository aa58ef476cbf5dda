//! A subscriber's view of an informer's events: a tokio broadcast receiver plus the two things a
//! bare receiver lacks for a controller — no silent loss on lag, and a per-subscriber resync.
//!
//! Resync is per subscriber (client-go's `AddEventHandlerWithResyncPeriod`), not per informer:
//! guests that share one informer ask for different periods (`manifest.resync-seconds`), and a
//! resync only re-sends what is cached, so it costs no API call.

use std::{
    collections::VecDeque,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use futures::{Stream, StreamExt, stream::BoxStream};
use kube::api::DynamicObject;
use tokio::{
    sync::broadcast::{Receiver, error::RecvError},
    time::{Instant, Interval, MissedTickBehavior},
};

use super::cached::CachedObject;
use super::event::InformerEvent;
use super::informer::Informer;

/// Events of one informer, for one subscriber.
///
/// Starts with an `Applied { old: None }` for every object already cached (as client-go does
/// for a handler added to a running informer), then follows the watch. Events replayed from
/// the cache (that snapshot and every `Resync`) carry the object's head only, like `old`. When this subscriber
/// falls more than the informer's event buffer behind, the missed events are replaced by a
/// `Resync` of every cached object, so no live key is lost (a deletion missed that way is not
/// replayed; the resync reflects the cache after it). Behind during a list (a streaming list
/// sends faster than most subscribers take), it waits for the list's end and then takes one
/// snapshot and the events from then on, instead of a resync at every overflow: each would
/// send the whole cache again, and the list would outrun it again. With a resync period, every cached object
/// is also sent as `Resync` each period, counted from when the previous resync was delivered.
///
/// Holds a handle: the informer keeps running while a subscription is alive. The stream never
/// ends on its own.
#[must_use = "a subscription does nothing unless polled"]
pub struct Subscription {
    inner: BoxStream<'static, InformerEvent>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription").finish_non_exhaustive()
    }
}

struct State {
    informer: Informer,
    events: Receiver<InformerEvent>,
    /// Cached objects still to send, each read only when its turn comes, so a snapshot or a
    /// resync of a large cache never holds every object as a tree at once.
    pending: VecDeque<Pending>,
    resync: Option<Interval>,
}

enum Pending {
    Snapshot(Arc<CachedObject>),
    Resync(Arc<CachedObject>),
}

impl Pending {
    /// The event, carrying the object's head (see [`InformerEvent`]): a few µs where a full
    /// parse takes tens, which matters when a lagging subscriber works through a resync of a
    /// large cache while the watch keeps sending.
    fn into_event(self) -> Option<InformerEvent> {
        let parse = |o: &CachedObject| o.to_head().map(Arc::<DynamicObject>::new);
        Some(match self {
            Pending::Snapshot(o) => InformerEvent::Applied {
                object: parse(&o)?,
                old: None,
                listed: true,
                echo: false,
            },
            Pending::Resync(o) => InformerEvent::Resync { object: parse(&o)? },
        })
    }
}

fn resync_all(objects: Vec<Arc<CachedObject>>) -> VecDeque<Pending> {
    objects.into_iter().map(Pending::Resync).collect()
}

impl Subscription {
    pub(super) fn new(
        informer: Informer,
        snapshot: Vec<Arc<CachedObject>>,
        events: Receiver<InformerEvent>,
        resync: Option<Duration>,
    ) -> Self {
        let resync = resync.filter(|p| !p.is_zero()).map(|period| {
            let mut interval = tokio::time::interval_at(Instant::now() + period, period);
            interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
            interval
        });
        let state = State {
            informer,
            events,
            pending: snapshot.into_iter().map(Pending::Snapshot).collect(),
            resync,
        };
        let inner = futures::stream::unfold(state, |mut state| async move {
            loop {
                while let Some(pending) = state.pending.pop_front() {
                    if let Some(event) = pending.into_event() {
                        return Some((event, state));
                    }
                }
                let State { events, resync, .. } = &mut state;
                let tick = async {
                    match resync {
                        Some(interval) => {
                            interval.tick().await;
                        }
                        None => std::future::pending::<()>().await,
                    }
                };
                tokio::select! {
                    biased;
                    received = events.recv() => match received {
                        Ok(event) => return Some((event, state)),
                        Err(RecvError::Lagged(missed)) if state.informer.listing() => {
                            tracing::debug!(
                                informer = %state.informer.describe(),
                                missed,
                                "subscriber fell behind the event buffer during a list; resending every cached object once it ends"
                            );
                            let (snapshot, events) = state.informer.after_list().await;
                            state.events = events;
                            state.pending = resync_all(snapshot);
                        }
                        Err(RecvError::Lagged(missed)) => {
                            tracing::warn!(
                                informer = %state.informer.describe(),
                                missed,
                                "subscriber fell behind the event buffer; resending every cached object"
                            );
                            state.pending = resync_all(state.informer.list_cached(None, None));
                        }
                        // The sender lives as long as the informer, which `state` keeps alive.
                        Err(RecvError::Closed) => return None,
                    },
                    () = tick => state.pending = resync_all(state.informer.list_cached(None, None)),
                }
            }
        })
        .boxed();
        Self { inner }
    }
}

impl Stream for Subscription {
    type Item = InformerEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<InformerEvent>> {
        self.inner.poll_next_unpin(cx)
    }
}

/// Subscribing is the subscription's business; the informer only hands out its cache.
impl Informer {
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

    /// A list is under way.
    fn listing(&self) -> bool {
        *self.shared.cache.listing.borrow()
    }

    /// Once no list is under way: every cached object and the events after them, taken
    /// together (as [`Informer::subscribe`] does).
    async fn after_list(&self) -> (Vec<Arc<CachedObject>>, Receiver<InformerEvent>) {
        let cache = &self.shared.cache;
        let mut listing = cache.listing.subscribe();
        // The sender lives in the cache this handle keeps alive, so this cannot fail.
        let _ = listing.wait_for(|l| !*l).await;
        let store = cache.store.read();
        (
            store.list(None, None, std::time::Instant::now()),
            cache.events.subscribe(),
        )
    }

    pub(super) fn subscribe_inner(&self, resync: Option<Duration>) -> Subscription {
        let cache = &self.shared.cache;
        let (snapshot, events) = {
            let store = cache.store.read();
            (
                store.list(None, None, std::time::Instant::now()),
                cache.events.subscribe(),
            )
        };
        Subscription::new(self.clone(), snapshot, events, resync)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use futures::StreamExt;
    use kube::{api::DynamicObject, discovery::ApiResource, runtime::watcher};

    use super::super::informer::{InformerState, Key};
    use super::super::options::InitialList;
    use super::super::scope::WatchScope;
    use super::super::store::Store;
    use super::super::watch::{Cache, Form, Origin};
    use super::*;

    const FULL: Origin = Origin {
        metadata: false,
        list: InitialList::Stream,
    };

    /// An informer with no watch task: the test feeds its cache, with an event buffer of 4.
    fn fed_by_hand() -> (Informer, Arc<Cache>) {
        let resource = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let cache = Arc::new(Cache::new(
            &resource,
            Store::new(Duration::from_mins(1)),
            4,
            false,
            None,
            crate::metrics::InformerMetrics::unregistered(),
            Form::Full,
        ));
        let state = InformerState::unwatched(
            Key {
                gvk: kube::core::GroupVersionKind::gvk("", "v1", "ConfigMap"),
                scope: WatchScope::all(),
            },
            resource,
            cache.clone(),
        );
        (
            Informer {
                shared: Arc::new(state),
            },
            cache,
        )
    }

    fn cm(i: usize) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "a", "name": format!("c{i:02}"), "resourceVersion": format!("{}", i + 1)},
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn a_subscriber_behind_during_a_list_gets_one_snapshot_when_it_ends() {
        let (informer, cache) = fed_by_hand();
        let mut sub = informer.subscribe();
        cache.handle(watcher::Event::Init, FULL);
        for i in 0..10 {
            cache.handle(watcher::Event::InitApply(cm(i)), FULL);
        }
        let early = tokio::time::timeout(Duration::from_millis(50), sub.next()).await;
        assert!(
            early.is_err(),
            "behind during the list: nothing until it ends, got {early:?}"
        );
        for i in 10..20 {
            cache.handle(watcher::Event::InitApply(cm(i)), FULL);
        }
        cache.handle(watcher::Event::InitDone, FULL);
        let mut seen = Vec::new();
        for _ in 0..20 {
            let event = tokio::time::timeout(Duration::from_secs(5), sub.next())
                .await
                .unwrap()
                .unwrap();
            assert!(matches!(event, InformerEvent::Resync { .. }), "{event:?}");
            seen.push(event.object().metadata.name.clone().unwrap_or_default());
        }
        let expected: Vec<String> = (0..20).map(|i| format!("c{i:02}")).collect();
        assert_eq!(seen, expected, "every object once, in the cache's order");
        // Then the watch, from where the snapshot was taken.
        cache.handle(watcher::Event::Apply(cm(20)), FULL);
        let next = tokio::time::timeout(Duration::from_secs(5), sub.next())
            .await
            .unwrap()
            .unwrap();
        assert!(
            matches!(&next, InformerEvent::Applied { object, listed: false, .. } if object.metadata.name.as_deref() == Some("c20")),
            "{next:?}"
        );
    }
}
