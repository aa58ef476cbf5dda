//! The `workqueue_*` families, spelled exactly as client-go/controller-runtime expose them
//! (label `name` = guest), and [`WorkqueueMetrics`], one queue's series resolved once.

use std::fmt;
use std::sync::Weak;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use super::family::{FloatGauge, HistogramFamily, Registrar, gauge_value, histograms};
use super::scrape::{ScrapeHook, ScrapeHooks};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PriorityLabels {
    name: String,
    priority: &'static str,
}

/// client-go's workqueue buckets (`ExponentialBuckets(10e-9, 10, 12)`): 10 ns to 1000 s,
/// one per decade, because queue waits range from "picked up at once" to "backed off for
/// minutes". Written out so the `le` labels are exact decimals.
fn workqueue_histogram() -> Histogram {
    Histogram::new([
        1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1.0, 10.0, 100.0, 1000.0,
    ])
}

pub(super) struct WorkqueueFamilies {
    depth: Family<QueueLabels, Gauge>,
    depth_by_priority: Family<PriorityLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    queue_duration: HistogramFamily<QueueLabels>,
    work_duration: HistogramFamily<QueueLabels>,
    retries: Family<QueueLabels, Counter>,
    unfinished_work: Family<QueueLabels, FloatGauge>,
    longest_running: Family<QueueLabels, FloatGauge>,
}

impl WorkqueueFamilies {
    /// The `workqueue_*` families, under client-go's names and help texts.
    pub(super) fn register(r: &mut Registrar) -> Self {
        Self {
            depth: r.add("workqueue_depth", "Current depth of workqueue"),
            depth_by_priority: r.add(
                "reconciler_workqueue_depth",
                "Current depth of workqueue by priority: low (initial lists, relists, \
                 restarts) and normal (changes, requeues); they add up to workqueue_depth",
            ),
            adds: r.add(
                "workqueue_adds",
                "Total number of adds handled by workqueue",
            ),
            queue_duration: r.seconds(
                "workqueue_queue_duration",
                "How long in seconds an item stays in workqueue before being requested",
                histograms(workqueue_histogram),
            ),
            work_duration: r.seconds(
                "workqueue_work_duration",
                "How long in seconds processing an item from workqueue takes",
                histograms(workqueue_histogram),
            ),
            retries: r.add(
                "workqueue_retries",
                "Total number of retries handled by workqueue",
            ),
            unfinished_work: r.seconds(
                "workqueue_unfinished_work",
                "How many seconds of work has been done that is in progress and hasn't been \
                 observed by work_duration. Large values indicate stuck threads. One can deduce \
                 the number of stuck threads by observing the rate at which this increases.",
                Family::default(),
            ),
            longest_running: r.seconds(
                "workqueue_longest_running_processor",
                "How many seconds has the longest running processor for workqueue been running",
                Family::default(),
            ),
        }
    }

    /// The series of the queue `name`, created at zero if new; `hooks` is where the handle
    /// registers its scrape hooks.
    pub(super) fn queue(&self, name: &str, hooks: ScrapeHooks) -> WorkqueueMetrics {
        let labels = QueueLabels {
            name: name.to_owned(),
        };
        let priority = |priority| PriorityLabels {
            name: name.to_owned(),
            priority,
        };
        WorkqueueMetrics {
            depth: self.depth.get_or_create_owned(&labels),
            depth_low: self.depth_by_priority.get_or_create_owned(&priority("low")),
            depth_normal: self
                .depth_by_priority
                .get_or_create_owned(&priority("normal")),
            adds: self.adds.get_or_create_owned(&labels),
            queue_duration: self.queue_duration.get_or_create_owned(&labels),
            work_duration: self.work_duration.get_or_create_owned(&labels),
            retries: self.retries.get_or_create_owned(&labels),
            unfinished_work: self.unfinished_work.get_or_create_owned(&labels),
            longest_running: self.longest_running.get_or_create_owned(&labels),
            hooks: Some(hooks),
        }
    }
}

/// The `workqueue_*` series of one queue, resolved once. Every update is an atomic
/// operation (histograms take a short uncontended lock); no label lookups.
#[derive(Clone)]
pub struct WorkqueueMetrics {
    depth: Gauge,
    depth_low: Gauge,
    depth_normal: Gauge,
    adds: Counter,
    queue_duration: Histogram,
    work_duration: Histogram,
    retries: Counter,
    unfinished_work: FloatGauge,
    longest_running: FloatGauge,
    hooks: Option<ScrapeHooks>,
}

impl fmt::Debug for WorkqueueMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkqueueMetrics")
            .field("depth", &self.depth.get())
            .field("adds", &self.adds.get())
            .field("retries", &self.retries.get())
            .field("registered", &self.hooks.is_some())
            .finish_non_exhaustive()
    }
}

impl WorkqueueMetrics {
    /// Series that belong to no registry: for queues nobody scrapes (tests, offline runs).
    #[must_use]
    pub fn unregistered() -> Self {
        Self {
            depth: Gauge::default(),
            depth_low: Gauge::default(),
            depth_normal: Gauge::default(),
            adds: Counter::default(),
            queue_duration: workqueue_histogram(),
            work_duration: workqueue_histogram(),
            retries: Counter::default(),
            unfinished_work: FloatGauge::default(),
            longest_running: FloatGauge::default(),
            hooks: None,
        }
    }

    /// Keys waiting to be handed out (`workqueue_depth`), `low` of them at low priority
    /// (`reconciler_workqueue_depth{priority}`).
    pub(crate) fn set_depth(&self, depth: usize, low: usize) {
        self.depth.set(gauge_value(depth));
        self.depth_low.set(gauge_value(low));
        self.depth_normal
            .set(gauge_value(depth.saturating_sub(low)));
    }

    /// A key was accepted into the queue (`workqueue_adds_total`).
    pub(crate) fn added(&self) {
        self.adds.inc();
    }

    /// A key waited `waited` between add and get (`workqueue_queue_duration_seconds`).
    pub(crate) fn queued_for(&self, waited: Duration) {
        self.queue_duration.observe(waited.as_secs_f64());
    }

    /// A worker held a key for `worked` between get and done (`workqueue_work_duration_seconds`).
    pub(crate) fn worked_for(&self, worked: Duration) {
        self.work_duration.observe(worked.as_secs_f64());
    }

    /// A delayed or rate-limited add was requested (`workqueue_retries_total`).
    pub(crate) fn retried(&self) {
        self.retries.inc();
    }

    /// In-flight work right now: the sum of every in-flight key's age
    /// (`workqueue_unfinished_work_seconds`) and the oldest one
    /// (`workqueue_longest_running_processor_seconds`).
    pub(crate) fn set_in_flight(&self, unfinished: Duration, longest: Duration) {
        self.unfinished_work.set(unfinished.as_secs_f64());
        self.longest_running.set(longest.as_secs_f64());
    }

    /// Have `hook` run before every scrape of the registry these series belong to; a no-op
    /// for [`Self::unregistered`] series.
    pub(crate) fn register_scrape_hook(&self, hook: Weak<dyn ScrapeHook>) {
        if let Some(hooks) = &self.hooks {
            hooks.lock().push(hook);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Metrics, sample};

    #[test]
    fn render_is_openmetrics_with_client_go_workqueue_names() {
        let metrics = Metrics::new();
        let wq = metrics.workqueue("network");
        wq.added();
        wq.added();
        wq.set_depth(2, 1);
        wq.retried();
        wq.queued_for(Duration::from_millis(1500));
        wq.worked_for(Duration::from_millis(250));
        wq.set_in_flight(Duration::from_secs(3), Duration::from_secs(2));

        let text = metrics.render();
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(text.contains("# TYPE workqueue_adds counter\n"), "{text}");
        assert!(text.contains("# TYPE workqueue_queue_duration_seconds histogram\n"));
        for (series, value) in [
            (r#"workqueue_depth{name="network"}"#, 2.0),
            (
                r#"reconciler_workqueue_depth{name="network",priority="low"}"#,
                1.0,
            ),
            (
                r#"reconciler_workqueue_depth{name="network",priority="normal"}"#,
                1.0,
            ),
            (r#"workqueue_adds_total{name="network"}"#, 2.0),
            (r#"workqueue_retries_total{name="network"}"#, 1.0),
            (
                r#"workqueue_queue_duration_seconds_sum{name="network"}"#,
                1.5,
            ),
            (
                r#"workqueue_queue_duration_seconds_count{name="network"}"#,
                1.0,
            ),
            (
                r#"workqueue_queue_duration_seconds_bucket{le="1.0",name="network"}"#,
                0.0,
            ),
            (
                r#"workqueue_queue_duration_seconds_bucket{le="10.0",name="network"}"#,
                1.0,
            ),
            (
                r#"workqueue_work_duration_seconds_sum{name="network"}"#,
                0.25,
            ),
            (r#"workqueue_unfinished_work_seconds{name="network"}"#, 3.0),
            (
                r#"workqueue_longest_running_processor_seconds{name="network"}"#,
                2.0,
            ),
        ] {
            assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
        }
    }

    #[test]
    fn workqueue_handles_for_one_name_share_series() {
        let metrics = Metrics::new();
        metrics.workqueue("naming").added();
        metrics.workqueue("naming").added();
        metrics.workqueue("network").added();
        let text = metrics.render();
        assert_eq!(
            sample(&text, r#"workqueue_adds_total{name="naming"}"#),
            Some(2.0)
        );
        assert_eq!(
            sample(&text, r#"workqueue_adds_total{name="network"}"#),
            Some(1.0)
        );
    }
}
