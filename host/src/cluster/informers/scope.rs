//! What part of a kind an informer watches.

use crate::cluster::shard_ranges::SlotSet;

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
