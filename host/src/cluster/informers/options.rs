//! Tuning for every informer of one registry.

use std::{fmt, str::FromStr, time::Duration};

use super::shard::ShardFilter;
use crate::metrics::Metrics;

/// Tuning for all informers of one [`Informers`].
#[derive(Clone, Debug)]
pub struct Options {
    /// Events buffered per informer for its slowest subscriber; one that falls further behind
    /// gets a resync of the whole cache instead (see [`Subscription`]).
    pub event_buffer: usize,
    /// How long a recorded delete, or a recorded write whose version cannot be compared with
    /// the watch's, is shown if the watch never confirms it (client-go's mutation cache TTL;
    /// the CRD naming controller uses 60 s). A write with an integer version is shown until
    /// the cache is synced to it instead, however long the watch lags (see `store.rs`).
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
    /// How an informer lists: streaming where the server serves it (the default), or pages.
    /// The default follows `RECONCILER_INITIAL_LIST` (`stream` or `paged`). See [`InitialList`].
    pub initial_list: InitialList,
    /// Whether [`Informers::acquire_metadata`] may start an informer that holds only
    /// metadata (`true`, the default) or always starts full ones. The default follows
    /// `RECONCILER_METADATA_SECONDARIES` (`0` or `false` turns it off).
    pub metadata_secondaries: bool,
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
            initial_list: std::env::var(INITIAL_LIST_ENV)
                .ok()
                .and_then(|v| {
                    v.parse()
                        .inspect_err(|e| tracing::warn!("{INITIAL_LIST_ENV}: {e}; streaming"))
                        .ok()
                })
                .unwrap_or_default(),
            metadata_secondaries: !std::env::var(METADATA_SECONDARIES_ENV)
                .is_ok_and(|v| matches!(v.trim(), "0" | "false")),
        }
    }
}

/// The environment variable behind [`Options::initial_list`]'s default.
pub const INITIAL_LIST_ENV: &str = "RECONCILER_INITIAL_LIST";
/// The environment variable behind [`Options::metadata_secondaries`]' default.
pub const METADATA_SECONDARIES_ENV: &str = "RECONCILER_METADATA_SECONDARIES";

/// How an informer fills its cache, at start and after its watch expired (410 Gone).
///
/// Why streaming is the default: a list answered in one response is held whole twice, as
/// the response body and as the objects parsed from it, before the first object reaches the
/// cache; a list at `resourceVersion=0` (kube-rs' default, and this host's before) is answered
/// from the API server's cache in one response whatever the page size. A streaming list
/// (`sendInitialEvents=true`, KEP-3157, on by default since Kubernetes 1.34) sends the same
/// objects as watch events, one at a time, then a bookmark that ends the list, so the informer
/// holds one object in flight. Pages bound what is in flight to a page, and cost one request
/// per 500 objects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InitialList {
    /// A streaming list; where the API server refuses it (400 or 422: the `WatchList` feature
    /// gate is off, or the server predates it), pages from then on for that informer.
    #[default]
    Stream,
    /// Pages of 500 objects, each a consistent read (`resourceVersion` unset, so the server
    /// honours the limit).
    Paged,
}

impl InitialList {
    /// The label value in metrics and logs.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Stream => "streaming",
            Self::Paged => "paged",
        }
    }
}

impl fmt::Display for InitialList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for InitialList {
    type Err = UnknownInitialList;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim().to_ascii_lowercase().as_str() {
            "stream" | "streaming" => Ok(Self::Stream),
            "paged" | "pages" => Ok(Self::Paged),
            other => Err(UnknownInitialList(other.to_owned())),
        }
    }
}

/// A name that is no [`InitialList`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown initial list {0:?}; use stream or paged")]
pub struct UnknownInitialList(String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_list_names() {
        for mode in [InitialList::Stream, InitialList::Paged] {
            assert_eq!(mode.as_str().parse::<InitialList>(), Ok(mode));
        }
        assert_eq!(" Stream ".parse(), Ok(InitialList::Stream));
        assert!(
            "watch"
                .parse::<InitialList>()
                .unwrap_err()
                .to_string()
                .contains("stream or paged")
        );
    }
}
