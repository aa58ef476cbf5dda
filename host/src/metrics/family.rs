//! How a family is declared: the one registration helper every area uses, the `guest` label
//! set several areas share, and the value types they have in common.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry, Unit};

pub(super) type FloatGauge = Gauge<f64, AtomicU64>;
pub(super) type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// A histogram family whose series all get the buckets `buckets` builds.
pub(super) fn histograms<L>(buckets: fn() -> Histogram) -> HistogramFamily<L>
where
    L: Clone + Eq + std::hash::Hash,
{
    Family::new_with_constructor(buckets)
}

/// Registers families with their name, help text and unit, and hands back the handle to
/// keep: a family is an `Arc` inside, so the registry's clone and the kept one are the same
/// series. Names are written without suffixes: the encoder appends `_total` to counters and
/// the unit (`_seconds`) to families registered with one.
pub(super) struct Registrar<'r>(pub(super) &'r mut Registry);

impl Registrar<'_> {
    /// A family (or single series) that starts empty: counters and gauges.
    pub(super) fn add<M: Metric + Clone + Default>(&mut self, name: &str, help: &str) -> M {
        self.register(name, help, None, M::default())
    }

    /// `metric`, measured in seconds.
    pub(super) fn seconds<M: Metric + Clone>(&mut self, name: &str, help: &str, metric: M) -> M {
        self.register(name, help, Some(Unit::Seconds), metric)
    }

    fn register<M: Metric + Clone>(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        metric: M,
    ) -> M {
        match unit {
            Some(unit) => self.0.register_with_unit(name, help, unit, metric.clone()),
            None => self.0.register(name, help, metric.clone()),
        }
        metric
    }
}

/// The label set of every per-guest family that has no other label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct GuestLabels {
    guest: String,
}

impl GuestLabels {
    pub(super) fn new(guest: &str) -> Self {
        Self {
            guest: guest.to_owned(),
        }
    }
}

/// A count as a gauge value; saturates rather than wrapping (no cache holds 2^63 objects).
pub(super) fn gauge_value(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}
