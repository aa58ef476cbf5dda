//! Per-guest families: reconciles, instantiation, limits hit, loaded versions and load
//! failures, finalizers left behind, shadow verdicts and host calls. The label-value enums
//! ([`ReconcileResult`], [`HostCallOutcome`]) live here with the families they label.

use std::fmt;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use super::family::{GuestLabels, HistogramFamily, Registrar, gauge_value, histograms};

/// How one reconcile ended; the `result` label of `reconciler_reconcile_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReconcileResult {
    /// `Ok(action)` without a requeue.
    Success,
    /// `Ok(action)` asking to be requeued after a delay.
    Requeue,
    /// `Err(transient)`: retried with backoff.
    Error,
    /// `Err(permanent)`: not retried until the object changes.
    PermanentError,
    /// The guest trapped (panic, unreachable, bad memory access).
    Trap,
    /// The guest ran past its epoch deadline.
    Deadline,
    /// The guest tried to grow its memory past the cap.
    MemoryLimit,
}

impl ReconcileResult {
    /// Every value, in exposition order.
    pub(crate) const ALL: [Self; 7] = [
        Self::Success,
        Self::Requeue,
        Self::Error,
        Self::PermanentError,
        Self::Trap,
        Self::Deadline,
        Self::MemoryLimit,
    ];

    /// The label value.
    #[must_use]
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Requeue => "requeue",
            Self::Error => "error",
            Self::PermanentError => "permanent_error",
            Self::Trap => "trap",
            Self::Deadline => "deadline",
            Self::MemoryLimit => "memory_limit",
        }
    }
}

impl fmt::Display for ReconcileResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl EncodeLabelValue for ReconcileResult {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
        fmt::Write::write_str(encoder, self.as_str())
    }
}

/// How one call from a guest into a host import ended; the `outcome` label of
/// `reconciler_host_calls_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum HostCallOutcome {
    /// The grant allowed the call and the provider succeeded.
    Ok,
    /// The guest's grant does not cover the call: the host refused it.
    Denied,
    /// The host let the call through as the guest's ServiceAccount and the API server refused
    /// it (`403`): the account's RBAC is narrower than the grant.
    DeniedByApiServer,
    /// The guest handed over something malformed or out of bounds (a bad name, an oversized
    /// body, a delay beyond the cap); refused before any provider saw it.
    Invalid,
    /// The guest exceeded a rate or quota (log lines, events, pending keys, networks).
    Limited,
    /// The grant allowed the call but the provider failed.
    Error,
}

impl HostCallOutcome {
    /// The label value.
    #[must_use]
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Denied => "denied",
            Self::DeniedByApiServer => "denied_by_apiserver",
            Self::Invalid => "invalid",
            Self::Limited => "limited",
            Self::Error => "error",
        }
    }
}

impl fmt::Display for HostCallOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl EncodeLabelValue for HostCallOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
        fmt::Write::write_str(encoder, self.as_str())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconcileLabels {
    guest: String,
    result: ReconcileResult,
}

impl ReconcileLabels {
    fn new(guest: &str, result: ReconcileResult) -> Self {
        Self {
            guest: guest.to_owned(),
            result,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LoadedLabels {
    guest: String,
    hash: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FileLabels {
    file: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HostCallLabels {
    guest: String,
    interface: String,
    function: String,
    outcome: HostCallOutcome,
}

/// controller-runtime's reconcile buckets: fine around the usual 10 ms–1 s, coarse up to
/// a minute, so dashboards built for Go controllers read the same.
pub(super) fn reconcile_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8,
        0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0,
        15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
    ])
}

/// Instantiating from an `InstancePre` with pooled memory takes microseconds; a slow
/// one (cold pool, large data segments) should stand out, hence 10 µs to 1 s.
fn instantiate_histogram() -> Histogram {
    Histogram::new([
        1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25,
        0.5, 1.0,
    ])
}

pub(super) struct GuestFamilies {
    reconcile_total: Family<ReconcileLabels, Counter>,
    reconcile_duration: HistogramFamily<GuestLabels>,
    loaded: Family<LoadedLabels, Gauge>,
    load_failures: Family<FileLabels, Counter>,
    module_refusals: Family<ReasonLabels, Counter>,
    instantiate_duration: HistogramFamily<GuestLabels>,
    deadline_hits: Family<GuestLabels, Counter>,
    memory_limit_hits: Family<GuestLabels, Counter>,
    host_calls: Family<HostCallLabels, Counter>,
    finalizer_orphaned: Family<GuestLabels, Gauge>,
    finalizer_released: Family<GuestLabels, Counter>,
    shadow_diffs: Family<GuestLabels, Counter>,
    shadow_agreements: Family<GuestLabels, Counter>,
    writes_unchanged: Family<GuestLabels, Counter>,
}

impl GuestFamilies {
    pub(super) fn register(r: &mut Registrar) -> Self {
        Self {
            reconcile_total: r.add(
                "reconciler_reconcile",
                "Reconciles finished, by guest and result",
            ),
            reconcile_duration: r.seconds(
                "reconciler_reconcile_duration",
                "Wall time of one reconcile, as measured by the worker that ran it",
                histograms(reconcile_histogram),
            ),
            loaded: r.add(
                "reconciler_guest_loaded",
                "1 while this version (content hash) of the guest serves reconciles, else 0",
            ),
            load_failures: r.add(
                "reconciler_guest_load_failures",
                "Guest files that failed to compile, validate or pass the grant check",
            ),
            module_refusals: r.add(
                "reconciler_module_refusals",
                "Modules a Reconciler named that were refused at pull, by the reason its status gives",
            ),
            instantiate_duration: r.seconds(
                "reconciler_instantiate_duration",
                "Time to create a fresh guest instance",
                histograms(instantiate_histogram),
            ),
            deadline_hits: r.add(
                "reconciler_deadline_hits",
                "Guest calls interrupted by the epoch deadline",
            ),
            memory_limit_hits: r.add(
                "reconciler_memory_limit_hits",
                "Guest calls stopped for growing memory past the cap",
            ),
            host_calls: r.add(
                "reconciler_host_calls",
                "Calls from guests into host imports, by interface, function and outcome",
            ),
            finalizer_orphaned: r.add(
                "reconciler_finalizer_orphaned",
                "Objects still carrying the finalizer of a guest that was unloaded (as cached when it was unloaded)",
            ),
            finalizer_released: r.add(
                "reconciler_finalizer_released",
                "Objects whose finalizer the host removed after its guest was unloaded (finalizerPolicy release)",
            ),
            shadow_diffs: r.add(
                "reconciler_shadow_diffs",
                "Reconciles in shadow mode whose intended changes would have changed the live state",
            ),
            shadow_agreements: r.add(
                "reconciler_shadow_agreements",
                "Reconciles in shadow mode whose intended changes all matched the live state",
            ),
            writes_unchanged: r.add(
                "reconciler_writes_unchanged",
                "Status patches not sent because the cached object already held every value they set",
            ),
        }
    }

    pub(super) fn reconcile_finished(
        &self,
        guest: &str,
        result: ReconcileResult,
        duration: Duration,
    ) {
        self.reconcile_total
            .get_or_create(&ReconcileLabels::new(guest, result))
            .inc();
        let labels = GuestLabels::new(guest);
        self.reconcile_duration
            .get_or_create(&labels)
            .observe(duration.as_secs_f64());
        let limit = match result {
            ReconcileResult::Deadline => Some(&self.deadline_hits),
            ReconcileResult::MemoryLimit => Some(&self.memory_limit_hits),
            _ => None,
        };
        if let Some(hits) = limit {
            hits.get_or_create(&labels).inc();
        }
    }

    pub(super) fn deadline_hit(&self, guest: &str) {
        self.deadline_hits
            .get_or_create(&GuestLabels::new(guest))
            .inc();
    }

    pub(super) fn instantiated(&self, guest: &str, duration: Duration) {
        self.instantiate_duration
            .get_or_create(&GuestLabels::new(guest))
            .observe(duration.as_secs_f64());
    }

    pub(super) fn loaded(&self, guest: &str, hash: &str, loaded: bool) {
        self.loaded
            .get_or_create(&LoadedLabels {
                guest: guest.to_owned(),
                hash: hash.to_owned(),
            })
            .set(i64::from(loaded));
        if loaded {
            self.zero_guest(guest);
        }
    }

    /// Creates `guest`'s closed-label series at zero (the zeroing rule in the module doc):
    /// every reconcile result, the limit hits, the finalizer counts and both shadow verdicts.
    /// Only creates: a series that exists already keeps its value.
    fn zero_guest(&self, guest: &str) {
        for result in ReconcileResult::ALL {
            let _ = self
                .reconcile_total
                .get_or_create(&ReconcileLabels::new(guest, result));
        }
        let labels = GuestLabels::new(guest);
        for counters in [
            &self.deadline_hits,
            &self.memory_limit_hits,
            &self.finalizer_released,
            &self.shadow_diffs,
            &self.shadow_agreements,
            &self.writes_unchanged,
        ] {
            let _ = counters.get_or_create(&labels);
        }
        let _ = self.finalizer_orphaned.get_or_create(&labels);
    }

    pub(super) fn load_failed(&self, file: &str) {
        self.load_failures
            .get_or_create(&FileLabels {
                file: file.to_owned(),
            })
            .inc();
    }

    pub(super) fn module_refused(&self, reason: &str) {
        self.module_refusals
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    pub(super) fn finalizer_orphaned(&self, guest: &str, objects: usize) {
        self.finalizer_orphaned
            .get_or_create(&GuestLabels::new(guest))
            .set(gauge_value(objects));
    }

    pub(super) fn finalizer_released(&self, guest: &str, objects: usize) {
        self.finalizer_released
            .get_or_create(&GuestLabels::new(guest))
            .inc_by(objects as u64);
    }

    pub(super) fn write_unchanged(&self, guest: &str) {
        self.writes_unchanged
            .get_or_create(&GuestLabels::new(guest))
            .inc();
    }

    pub(super) fn shadow_verdict(&self, guest: &str, agreed: bool) {
        let family = if agreed {
            &self.shadow_agreements
        } else {
            &self.shadow_diffs
        };
        family.get_or_create(&GuestLabels::new(guest)).inc();
    }

    pub(super) fn host_call(
        &self,
        guest: &str,
        interface: &str,
        function: &str,
        outcome: HostCallOutcome,
    ) {
        self.host_calls
            .get_or_create(&HostCallLabels {
                guest: guest.to_owned(),
                interface: interface.to_owned(),
                function: function.to_owned(),
                outcome,
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Metrics, sample};

    #[test]
    fn reconcile_results_count_per_guest_and_limits_count_twice() {
        let metrics = Metrics::new();
        metrics.guest_loaded("network", "sha256:ab", true);
        metrics.reconcile_finished(
            "network",
            ReconcileResult::Success,
            Duration::from_millis(20),
        );
        metrics.reconcile_finished(
            "network",
            ReconcileResult::Success,
            Duration::from_millis(30),
        );
        metrics.reconcile_finished("network", ReconcileResult::Deadline, Duration::from_secs(5));
        metrics.reconcile_finished("network", ReconcileResult::MemoryLimit, Duration::ZERO);
        metrics.reconcile_finished("naming", ReconcileResult::PermanentError, Duration::ZERO);
        metrics.deadline_hit("naming");

        let text = metrics.render();
        for (series, value) in [
            (
                r#"reconciler_reconcile_total{guest="network",result="success"}"#,
                2.0,
            ),
            (
                r#"reconciler_reconcile_total{guest="network",result="deadline"}"#,
                1.0,
            ),
            (
                r#"reconciler_reconcile_total{guest="network",result="memory_limit"}"#,
                1.0,
            ),
            // Created at zero by guest_loaded:
            (
                r#"reconciler_reconcile_total{guest="network",result="trap"}"#,
                0.0,
            ),
            (
                r#"reconciler_reconcile_total{guest="naming",result="permanent_error"}"#,
                1.0,
            ),
            (
                r#"reconciler_reconcile_duration_seconds_count{guest="network"}"#,
                4.0,
            ),
            (
                r#"reconciler_reconcile_duration_seconds_sum{guest="network"}"#,
                5.05,
            ),
            (
                r#"reconciler_reconcile_duration_seconds_bucket{le="0.025",guest="network"}"#,
                2.0,
            ),
            (r#"reconciler_deadline_hits_total{guest="network"}"#, 1.0),
            (r#"reconciler_deadline_hits_total{guest="naming"}"#, 1.0),
            (
                r#"reconciler_memory_limit_hits_total{guest="network"}"#,
                1.0,
            ),
        ] {
            assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
        }
        assert_eq!(
            sample(
                &text,
                r#"reconciler_reconcile_total{guest="naming",result="trap"}"#
            ),
            None,
            "naming was never loaded, so its zero series must not exist"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let metrics = Metrics::new();
        metrics.guest_load_failed("we\"ird\\name.wasm");
        let text = metrics.render();
        assert_eq!(
            sample(
                &text,
                r#"reconciler_guest_load_failures_total{file="we\"ird\\name.wasm"}"#
            ),
            Some(1.0),
            "{text}"
        );
    }
}
