//! Tuning for every informer of one registry.

use std::time::Duration;

use super::shard::ShardFilter;
use crate::metrics::Metrics;

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
