//! The host's API writes under its flow control (`crate::cluster::flowcontrol`): the adaptive limit,
//! the writes in flight, their latency, the refusals that shrank the limit, and each guest's
//! concurrency under it.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::family::{GuestLabels, Registrar, gauge_value};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    /// The HTTP status: `429`, `503`, `504`.
    reason: String,
}

pub(super) struct WriteFamilies {
    limit: Gauge,
    in_flight: Gauge,
    duration: Histogram,
    throttled: Family<ReasonLabels, Counter>,
    concurrency: Family<GuestLabels, Gauge>,
}

impl WriteFamilies {
    pub(super) fn register(r: &mut Registrar) -> Self {
        Self {
            limit: r.add(
                "reconciler_api_write_limit",
                "API writes the host may have in flight now (the adaptive limit)",
            ),
            in_flight: r.add(
                "reconciler_api_writes_in_flight",
                "API writes the host has in flight",
            ),
            // 0.5 ms to ~16 s.
            duration: r.seconds(
                "reconciler_api_write_duration",
                "Time from sending an API write to its answer (answers the limit learns from)",
                Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            ),
            throttled: r.add(
                "reconciler_api_write_throttled",
                "API writes refused as overloaded (each halves the limit at most once per hold and is sent again after its Retry-After)",
            ),
            concurrency: r.add(
                "reconciler_guest_concurrency",
                "Keys a guest may reconcile at once now: its fixed concurrency, or the adaptive limit up to its cap",
            ),
        }
    }

    pub(super) fn limit(&self, limit: usize) {
        self.limit.set(gauge_value(limit));
    }

    pub(super) fn in_flight(&self, in_flight: usize) {
        self.in_flight.set(gauge_value(in_flight));
    }

    pub(super) fn finished(&self, seconds: f64) {
        self.duration.observe(seconds);
    }

    pub(super) fn throttled(&self, status: u16) {
        self.throttled
            .get_or_create(&ReasonLabels {
                reason: status.to_string(),
            })
            .inc();
    }

    pub(super) fn concurrency(&self, guest: &str, keys: usize) {
        self.concurrency
            .get_or_create(&GuestLabels::new(guest))
            .set(gauge_value(keys));
    }
}
