//! The shared informers by (kind, scope), held weakly, and their object counts at scrape
//! time.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Weak, atomic::AtomicUsize},
    time::Instant,
};

use kube::{Client, core::GroupVersionKind};
use parking_lot::Mutex;

use super::{informer::InformerState, options::Options, scope::WatchScope, shard::FilterMode};
use crate::metrics::ScrapeHook;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Key {
    pub(super) gvk: GroupVersionKind,
    pub(super) scope: WatchScope,
}

pub(super) struct Registry {
    pub(super) client: Client,
    pub(super) options: Options,
    pub(super) discovery: crate::discovery::Resolver,
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
