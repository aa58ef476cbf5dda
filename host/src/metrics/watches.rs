//! What the `watches` and `indexes` exports' mappings cost, per guest:
//! `reconciler_map_calls_total` by result and `reconciler_map_duration_seconds` (the guest's
//! `map`, one call per event of a `function` watch), `reconciler_index_calls_total` by result
//! and `reconciler_index_duration_seconds` (the guest's `index`, one call per change of a
//! primary object), `reconciler_field_index_entries` (the entries the host keeps for `field`
//! watches and computed indexes: one per indexed value per primary object), and
//! `reconciler_keys_outside_namespace_total` (keys a namespaced Reconciler's watches or guest
//! named outside its namespace, which it was not handed: `controller/keys.rs`).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::family::{GuestLabels, HistogramFamily, Registrar, gauge_value, histograms};
use super::guests::ReconcileResult;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MapLabels {
    guest: String,
    /// `success`, or how the call failed: `trap`, `deadline`, `memory_limit`, `error` (no
    /// free instance slot; for `index`, also values past the index's budget).
    result: &'static str,
}

/// 100 µs to ~3 s: a map call is an instantiation and a short function.
fn map_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
}

pub(super) struct WatchFamilies {
    calls: Family<MapLabels, Counter>,
    duration: HistogramFamily<GuestLabels>,
    index_calls: Family<MapLabels, Counter>,
    index_duration: HistogramFamily<GuestLabels>,
    index_entries: Family<GuestLabels, Gauge>,
    outside_namespace: Family<GuestLabels, Counter>,
}

impl WatchFamilies {
    pub(super) fn register(r: &mut Registrar) -> Self {
        Self {
            calls: r.add(
                "reconciler_map_calls",
                "Calls of guests' map export (one per event of a function watch), by result",
            ),
            duration: r.seconds(
                "reconciler_map_duration",
                "Time of one call of a guest's map export, instantiation included",
                histograms(map_buckets),
            ),
            index_calls: r.add(
                "reconciler_index_calls",
                "Calls of guests' index export (one per change of a primary object with computed indexes), by result",
            ),
            index_duration: r.seconds(
                "reconciler_index_duration",
                "Time of one call of a guest's index export, instantiation included",
                histograms(map_buckets),
            ),
            index_entries: r.add(
                "reconciler_field_index_entries",
                "Entries of the indexes the host keeps for a guest's field watches and computed indexes (one per indexed value per primary object)",
            ),
            outside_namespace: r.add(
                "reconciler_keys_outside_namespace",
                "Keys outside a namespaced Reconciler's namespace, named by its watches or its guest, that its guest was not handed",
            ),
        }
    }

    pub(super) fn map_called(&self, guest: &str, result: ReconcileResult, took: Duration) {
        called(&self.calls, &self.duration, guest, result, took);
    }

    pub(super) fn index_called(&self, guest: &str, result: ReconcileResult, took: Duration) {
        called(&self.index_calls, &self.index_duration, guest, result, took);
    }

    pub(super) fn index_entries(&self, guest: &str, entries: usize) {
        self.index_entries
            .get_or_create(&GuestLabels::new(guest))
            .set(gauge_value(entries));
    }

    pub(super) fn outside_namespace(&self, guest: &str) {
        self.outside_namespace
            .get_or_create(&GuestLabels::new(guest))
            .inc();
    }
}

/// One call of a guest's `map` or `index` export, counted by result and timed.
fn called(
    calls: &Family<MapLabels, Counter>,
    duration: &HistogramFamily<GuestLabels>,
    guest: &str,
    result: ReconcileResult,
    took: Duration,
) {
    let result = match result {
        ReconcileResult::Success | ReconcileResult::Requeue => "success",
        other => other.as_str(),
    };
    calls
        .get_or_create(&MapLabels {
            guest: guest.to_owned(),
            result,
        })
        .inc();
    duration
        .get_or_create(&GuestLabels::new(guest))
        .observe(took.as_secs_f64());
}

#[cfg(test)]
mod tests {
    use crate::metrics::{Metrics, ReconcileResult};
    use std::time::Duration;

    #[test]
    fn map_calls_count_by_result_and_the_index_reports_its_entries() {
        let metrics = Metrics::new();
        metrics.map_called("mirror", ReconcileResult::Success, Duration::from_millis(1));
        metrics.map_called("mirror", ReconcileResult::Trap, Duration::from_millis(1));
        metrics.map_called("mirror", ReconcileResult::Trap, Duration::from_millis(1));
        metrics.field_index_entries("mirror", 42);
        metrics.index_called("mirror", ReconcileResult::Success, Duration::from_millis(1));
        metrics.index_called(
            "mirror",
            ReconcileResult::Deadline,
            Duration::from_millis(1),
        );
        let text = metrics.render();
        for line in [
            r#"reconciler_map_calls_total{guest="mirror",result="success"} 1"#,
            r#"reconciler_map_calls_total{guest="mirror",result="trap"} 2"#,
            r#"reconciler_map_duration_seconds_count{guest="mirror"} 3"#,
            r#"reconciler_field_index_entries{guest="mirror"} 42"#,
            r#"reconciler_index_calls_total{guest="mirror",result="success"} 1"#,
            r#"reconciler_index_calls_total{guest="mirror",result="deadline"} 1"#,
            r#"reconciler_index_duration_seconds_count{guest="mirror"} 2"#,
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}
