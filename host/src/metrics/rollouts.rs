//! Rollouts of guest versions (`crate::supply::rollout`): what each version did in the
//! current rollout, where the rollout stands, and how often one was rolled back.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::family::{GuestLabels, HistogramFamily, Registrar, histograms};
use super::guests::reconcile_histogram;

/// The phases a rollout can be in, each a series of `reconciler_rollout_phase`.
pub(super) const PHASES: [&str; 5] = ["Progressing", "Paused", "Promoted", "RolledBack", "Aborted"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    guest: String,
    /// `old` (the version being replaced) or `new`.
    version: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    guest: String,
    version: &'static str,
    /// `ok` or `failed` (a permanent error, a trap, the deadline or the memory cap).
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabels {
    guest: String,
    /// `agreed` or `differed`.
    verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    guest: String,
    phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GateLabels {
    guest: String,
    /// The gate that failed (`agreement`, `errorRate`, `p99`), or `abort` for a person's.
    gate: &'static str,
}

pub(super) struct RolloutFamilies {
    reconciles: Family<ResultLabels, Counter>,
    duration: HistogramFamily<VersionLabels>,
    compared: Family<VerdictLabels, Counter>,
    step: Family<GuestLabels, Gauge>,
    share: Family<GuestLabels, Gauge>,
    phase: Family<PhaseLabels, Gauge>,
    rollbacks: Family<GateLabels, Counter>,
}

impl RolloutFamilies {
    pub(super) fn register(r: &mut Registrar) -> Self {
        Self {
            reconciles: r.add(
                "reconciler_rollout_reconciles",
                "Reconciles in a rollout, by version (old, new; the new one's shadow runs included) and result",
            ),
            duration: r.seconds(
                "reconciler_rollout_reconcile_duration",
                "Wall time of one reconcile in a rollout, by version",
                histograms(reconcile_histogram),
            ),
            compared: r.add(
                "reconciler_rollout_compared",
                "The new version's shadow runs in a rollout, by whether its writes matched the live state",
            ),
            step: r.add(
                "reconciler_rollout_step",
                "The index of the rollout's current step in its plan",
            ),
            share: r.add(
                "reconciler_rollout_share_percent",
                "Percent of keys the new version reconciles (0 in shadow and after a rollback, 100 once promoted)",
            ),
            phase: r.add(
                "reconciler_rollout_phase",
                "1 for the phase the guest's last rollout is in, 0 for the others",
            ),
            rollbacks: r.add(
                "reconciler_rollout_rollbacks",
                "Rollouts rolled back, by the gate that failed (abort: a person)",
            ),
        }
    }

    pub(super) fn reconciled(&self, guest: &str, new: bool, failed: bool, took: Duration) {
        let version = if new { "new" } else { "old" };
        let result = if failed { "failed" } else { "ok" };
        self.reconciles
            .get_or_create(&ResultLabels {
                guest: guest.to_owned(),
                version,
                result,
            })
            .inc();
        self.duration
            .get_or_create(&VersionLabels {
                guest: guest.to_owned(),
                version,
            })
            .observe(took.as_secs_f64());
    }

    pub(super) fn compared(&self, guest: &str, agreed: bool) {
        let verdict = if agreed { "agreed" } else { "differed" };
        self.compared
            .get_or_create(&VerdictLabels {
                guest: guest.to_owned(),
                verdict,
            })
            .inc();
    }

    pub(super) fn stands(&self, guest: &str, step: usize, share_percent: u8, phase: &str) {
        let labels = GuestLabels::new(guest);
        self.step
            .get_or_create(&labels)
            .set(i64::try_from(step).unwrap_or(i64::MAX));
        self.share
            .get_or_create(&labels)
            .set(i64::from(share_percent));
        for each in PHASES {
            self.phase
                .get_or_create(&PhaseLabels {
                    guest: guest.to_owned(),
                    phase: each,
                })
                .set(i64::from(each == phase));
        }
    }

    pub(super) fn rolled_back(&self, guest: &str, gate: &'static str) {
        self.rollbacks
            .get_or_create(&GateLabels {
                guest: guest.to_owned(),
                gate,
            })
            .inc();
    }
}
