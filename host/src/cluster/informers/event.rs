//! A change in an informer's cache, as subscribers see it.

use std::sync::Arc;

use kube::api::DynamicObject;

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
        /// counts. An event that beats the write's answer is held until the answer when the
        /// write was announced ([`Informer::expect_write`]), and then marked by the same
        /// rule; without the announcement it is not told from anyone else's change, so it is
        /// never hidden at low priority behind the host's.
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
