//! What the informers hold and receive, by group/version/kind, how sharded ones filter, how
//! they list and whether they hold only metadata, how often the API server refused their lists
//! and watches as overloaded (and the host's other watches'), and [`InformerMetrics`], one GVK's
//! traffic series resolved once.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::family::{Registrar, gauge_value};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GvkLabels {
    group: String,
    version: String,
    kind: String,
}

impl GvkLabels {
    fn new(group: &str, version: &str, kind: &str) -> Self {
        Self {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WatchLabels {
    /// What the host follows: `Reconciler`, `namespaced Reconciler`, `Namespace`, `Lease`.
    watch: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardFilterLabels {
    group: String,
    version: String,
    kind: String,
    mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListLabels {
    group: String,
    version: String,
    kind: String,
    /// `streaming` or `paged`.
    mode: String,
    /// `metadata` or `full`.
    form: String,
}

pub(super) struct InformerFamilies {
    objects: Family<GvkLabels, Gauge>,
    received_bytes: Family<GvkLabels, Counter>,
    events: Family<GvkLabels, Counter>,
    shard_filter: Family<ShardFilterLabels, Gauge>,
    lists: Family<ListLabels, Counter>,
    metadata_only: Family<GvkLabels, Gauge>,
    throttled: Family<GvkLabels, Counter>,
    watch_throttled: Family<WatchLabels, Counter>,
}

impl InformerFamilies {
    pub(super) fn register(r: &mut Registrar) -> Self {
        Self {
            objects: r.add(
                "reconciler_informer_objects",
                "Objects in the shared informer cache, by group/version/kind",
            ),
            received_bytes: r.add(
                "reconciler_informer_received_bytes",
                "Response body bytes of the informers' lists and watches, by group/version/kind",
            ),
            events: r.add(
                "reconciler_informer_events",
                "Objects the informers received (list items and watch events), before any client-side shard filter",
            ),
            shard_filter: r.add(
                "reconciler_informer_shard_filter",
                "1 for each filter mode (server: shardSelector, client: dropped on arrival) a sharded informer of the kind uses",
            ),
            lists: r.add(
                "reconciler_informer_lists",
                "Lists the informers completed (first lists, relists, upgrades to full objects), by mode (streaming, paged) and form (metadata, full)",
            ),
            metadata_only: r.add(
                "reconciler_informer_metadata_only",
                "Informers of the kind that hold only metadata (no guest has read the kind through them yet)",
            ),
            throttled: r.add(
                "reconciler_informer_throttled",
                "Lists and watches of the informers the API server refused as overloaded (429, 503, 504), each followed by a wait of its Retry-After",
            ),
            watch_throttled: r.add(
                "reconciler_watch_throttled",
                "Lists and watches of the host's own watches (Reconciler objects, namespaces, the lease) the API server refused as overloaded",
            ),
        }
    }

    /// The counter of refusals of the host's watch of `watch`.
    pub(super) fn watch_throttled(&self, watch: &str) -> Counter {
        self.watch_throttled.get_or_create_owned(&WatchLabels {
            watch: watch.to_owned(),
        })
    }

    pub(super) fn objects(&self, group: &str, version: &str, kind: &str, objects: usize) {
        self.objects
            .get_or_create(&GvkLabels::new(group, version, kind))
            .set(gauge_value(objects));
    }

    pub(super) fn removed(&self, group: &str, version: &str, kind: &str) {
        self.objects.remove(&GvkLabels::new(group, version, kind));
    }

    pub(super) fn traffic(&self, group: &str, version: &str, kind: &str) -> InformerMetrics {
        let labels = GvkLabels::new(group, version, kind);
        InformerMetrics {
            received_bytes: self.received_bytes.get_or_create_owned(&labels),
            events: self.events.get_or_create_owned(&labels),
            lists: self.lists.clone(),
            metadata_only: self.metadata_only.get_or_create_owned(&labels),
            throttled: self.throttled.get_or_create_owned(&labels),
            gvk: labels,
        }
    }

    pub(super) fn shard_filter(
        &self,
        group: &str,
        version: &str,
        kind: &str,
        mode: &str,
        active: bool,
    ) {
        let labels = ShardFilterLabels {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
            mode: mode.to_owned(),
        };
        if active {
            self.shard_filter.get_or_create(&labels).set(1);
        } else {
            self.shard_filter.remove(&labels);
        }
    }
}

/// `reconciler_informer_received_bytes_total` and `reconciler_informer_events_total` of one
/// GVK, resolved once: every update is one atomic add, no label lookup.
#[derive(Clone, Debug)]
pub(crate) struct InformerMetrics {
    received_bytes: Counter,
    events: Counter,
    /// Resolved at each list's end (a rare event), so only the modes used show up.
    lists: Family<ListLabels, Counter>,
    metadata_only: Gauge,
    throttled: Counter,
    gvk: GvkLabels,
}

impl InformerMetrics {
    /// Series that belong to no registry (informers nobody scrapes).
    #[must_use]
    pub(crate) fn unregistered() -> Self {
        Self {
            received_bytes: Counter::default(),
            events: Counter::default(),
            lists: Family::default(),
            metadata_only: Gauge::default(),
            throttled: Counter::default(),
            gvk: GvkLabels::new("", "", ""),
        }
    }

    /// An informer of the kind started holding only metadata (`true`), or stopped doing so:
    /// made whole, or released (`false`). Each start is ended once.
    pub(crate) fn metadata_only(&self, holds: bool) {
        if holds {
            self.metadata_only.inc();
        } else {
            self.metadata_only.dec();
        }
    }

    /// A list completed: `mode` `streaming` or `paged`, `form` `metadata` or `full`.
    pub(crate) fn listed(&self, mode: &str, form: &str) {
        let GvkLabels {
            group,
            version,
            kind,
        } = self.gvk.clone();
        self.lists
            .get_or_create(&ListLabels {
                group,
                version,
                kind,
                mode: mode.to_owned(),
                form: form.to_owned(),
            })
            .inc();
    }

    /// `bytes` of a list or watch response body arrived.
    pub(crate) fn received_bytes(&self, bytes: usize) {
        self.received_bytes.inc_by(bytes as u64);
    }

    /// One object arrived: a list item or a watch event.
    pub(crate) fn received_event(&self) {
        self.events.inc();
    }

    /// The API server refused a list or watch as overloaded.
    pub(crate) fn throttled(&self) {
        self.throttled.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Metrics, sample};

    #[test]
    fn informer_traffic_adds_up_per_kind_and_filter_modes_come_and_go() {
        let metrics = Metrics::new();
        let shard_a = metrics.informer("", "v1", "ConfigMap");
        let shard_b = metrics.informer("", "v1", "ConfigMap");
        shard_a.received_bytes(1000);
        shard_b.received_bytes(24);
        shard_a.received_event();
        shard_b.received_event();
        shard_b.received_event();
        InformerMetrics::unregistered().received_bytes(5);
        metrics.informer_shard_filter("", "v1", "ConfigMap", "server", true);
        metrics.informer_shard_filter("", "v1", "ConfigMap", "client", true);
        metrics.informer_shard_filter("", "v1", "ConfigMap", "client", false);
        shard_a.listed("streaming", "metadata");
        shard_b.listed("streaming", "full");
        shard_b.listed("streaming", "full");
        let secrets = metrics.informer("", "v1", "Secret");
        secrets.metadata_only(true);
        secrets.metadata_only(false);
        shard_a.metadata_only(true);
        shard_b.throttled();
        let lease = metrics.watch_throttled("Lease");
        lease();
        lease();

        let text = metrics.render();
        for (series, value) in [
            (
                r#"reconciler_informer_received_bytes_total{group="",version="v1",kind="ConfigMap"}"#,
                1024.0,
            ),
            (
                r#"reconciler_informer_events_total{group="",version="v1",kind="ConfigMap"}"#,
                3.0,
            ),
            (
                r#"reconciler_informer_shard_filter{group="",version="v1",kind="ConfigMap",mode="server"}"#,
                1.0,
            ),
            (
                r#"reconciler_informer_lists_total{group="",version="v1",kind="ConfigMap",mode="streaming",form="full"}"#,
                2.0,
            ),
            (
                r#"reconciler_informer_lists_total{group="",version="v1",kind="ConfigMap",mode="streaming",form="metadata"}"#,
                1.0,
            ),
            (
                r#"reconciler_informer_metadata_only{group="",version="v1",kind="ConfigMap"}"#,
                1.0,
            ),
            (
                r#"reconciler_informer_throttled_total{group="",version="v1",kind="ConfigMap"}"#,
                1.0,
            ),
            (r#"reconciler_watch_throttled_total{watch="Lease"}"#, 2.0),
        ] {
            assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
        }
        assert!(!text.contains(r#"mode="client""#), "{text}");
        assert!(!text.contains(r#"mode="paged""#), "{text}");
        assert_eq!(
            sample(
                &text,
                r#"reconciler_informer_metadata_only{group="",version="v1",kind="Secret"}"#
            ),
            Some(0.0),
            "{text}"
        );
    }
}
