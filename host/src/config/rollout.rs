//! A guest's rollout plan (`rollout:` in a grant, a Reconciler's `spec.rollout`): how a new
//! version of its module takes over from the running one. The steps run in order — `shadow`
//! (the new version runs beside the old on the same events, its writes compared, not sent),
//! `canary` (it reconciles a stable share of keys, the old version the rest), `pause` (wait
//! for a person) — and after the last one the new version takes every key. Each step lasts at
//! least its duration and its minimum count of the new version's reconciles, and the gates
//! are judged throughout: one failed rolls the new version back.
//!
//! ```yaml
//! rollout:
//!   steps:
//!     - shadow: {duration: 10m, minReconciles: 200}
//!     - canary: {percent: 10, duration: 10m}
//!     - canary: {percent: 50, duration: 10m}
//!     - pause: {}
//!   gates: {minSample: 50, minAgreement: 0.99, maxErrorRateIncrease: 0.01, maxP99Ratio: 1.5}
//! ```
//!
//! `rollout: {}` takes the default steps (shadow, 10 %, 50 %, five minutes each) and gates.

use std::time::Duration;

use serde::Deserialize;

/// Five minutes: long enough for a resync-free controller to see most of its keys change at
/// a steady rate, short enough that a person watches it happen.
const DEFAULT_STEP: Duration = Duration::from_mins(5);

/// A rollout plan. Unset in a grant: a new version replaces the old at once, as before.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rollout {
    #[serde(default = "default_steps")]
    pub steps: Vec<Step>,
    #[serde(default)]
    pub gates: Gates,
}

/// One step of a plan, written as a map of one key (`{shadow: {...}}`), as Kubernetes writes
/// a choice (`valueFrom`), in YAML and in a Reconciler's JSON alike.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "RawStep")]
pub enum Step {
    /// The new version runs beside the old on every key; its writes are compared, not made.
    Shadow(Hold),
    /// The new version reconciles `percent` of the keys (a hash of namespace/name).
    Canary(Canary),
    /// Waits, at the share of the step before, until a person promotes or aborts.
    Pause {},
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawStep {
    shadow: Option<Hold>,
    canary: Option<Canary>,
    pause: Option<Empty>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

impl TryFrom<RawStep> for Step {
    type Error = &'static str;

    fn try_from(raw: RawStep) -> Result<Self, Self::Error> {
        match (raw.shadow, raw.canary, raw.pause) {
            (Some(hold), None, None) => Ok(Self::Shadow(hold)),
            (None, Some(canary), None) => Ok(Self::Canary(canary)),
            (None, None, Some(Empty {})) => Ok(Self::Pause {}),
            _ => Err("a step names exactly one of shadow, canary and pause"),
        }
    }
}

/// How long a step lasts at least: its duration and the new version's reconciles in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Hold {
    #[serde(default = "default_step", with = "humantime_serde")]
    pub duration: Duration,
    /// Unset: the gates' `minSample`.
    #[serde(default)]
    pub min_reconciles: Option<u64>,
}

impl Default for Hold {
    fn default() -> Self {
        Self {
            duration: DEFAULT_STEP,
            min_reconciles: None,
        }
    }
}

/// A canary step: its share, and how long it lasts at least (as [`Hold`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Canary {
    pub percent: Percent,
    #[serde(default = "default_step", with = "humantime_serde")]
    pub duration: Duration,
    #[serde(default)]
    pub min_reconciles: Option<u64>,
}

impl Step {
    /// How long the step lasts at least; none for a pause, which lasts until a person acts.
    #[must_use]
    pub fn hold(&self) -> Option<Hold> {
        match self {
            Self::Shadow(hold) => Some(*hold),
            Self::Canary(canary) => Some(Hold {
                duration: canary.duration,
                min_reconciles: canary.min_reconciles,
            }),
            Self::Pause {} => None,
        }
    }
}

/// A share of keys in whole percent, 1 to 99 (0 would be a shadow step, 100 the promotion).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(try_from = "u8")]
pub struct Percent(u8);

impl Percent {
    #[must_use]
    pub fn get(self) -> u8 {
        self.0
    }
}

/// A canary share outside 1–99.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "a canary's percent is {0}; it must be between 1 and 99 (100 is the promotion that follows the last step)"
)]
pub struct PercentOutOfRange(u8);

impl TryFrom<u8> for Percent {
    type Error = PercentOutOfRange;

    fn try_from(value: u8) -> Result<Self, Self::Error> {
        if (1..=99).contains(&value) {
            Ok(Self(value))
        } else {
            Err(PercentOutOfRange(value))
        }
    }
}

/// What a version must show to go on. Each compares the new version with the old over the
/// same window (the current step), once both have `min_sample` reconciles in it.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Gates {
    /// Reconciles each version needs in a window before any gate is judged.
    pub min_sample: u64,
    /// Shadow: the share of compared reconciles whose writes match the live state (0 to 1;
    /// 0 turns the gate off, for a version meant to write differently).
    pub min_agreement: f64,
    /// The new version's error rate (permanent errors, traps, deadlines per reconcile) may
    /// exceed the old one's by at most this much (0 to 1).
    pub max_error_rate_increase: f64,
    /// The new version's p99 reconcile time may be at most this multiple of the old one's...
    pub max_p99_ratio: f64,
    /// ... or at most this much above it, whichever is larger: a 2 ms guest that takes 4 ms
    /// is not a regression worth a rollback.
    #[serde(with = "humantime_serde")]
    pub p99_slack: Duration,
}

impl Default for Gates {
    fn default() -> Self {
        Self {
            min_sample: 50,
            min_agreement: 0.99,
            max_error_rate_increase: 0.01,
            max_p99_ratio: 1.5,
            p99_slack: Duration::from_millis(5),
        }
    }
}

fn default_step() -> Duration {
    DEFAULT_STEP
}

fn default_steps() -> Vec<Step> {
    vec![
        Step::Shadow(Hold::default()),
        Step::Canary(Canary {
            percent: Percent(10),
            duration: DEFAULT_STEP,
            min_reconciles: None,
        }),
        Step::Canary(Canary {
            percent: Percent(50),
            duration: DEFAULT_STEP,
            min_reconciles: None,
        }),
    ]
}

/// A plan the types accept but a rollout could not follow.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("rollout.steps is empty; leave `rollout` unset for an immediate switch")]
    NoSteps,
    #[error(
        "rollout.steps[{0}]: canary shares must grow from one canary step to the next ({1}% after {2}%)"
    )]
    Shrinking(usize, u8, u8),
    #[error(
        "rollout.steps[{0}]: a shadow step after a canary would take keys back from the new version"
    )]
    ShadowAfterCanary(usize),
    #[error("rollout.gates.{0} is {1}; it must be between 0 and 1")]
    Fraction(&'static str, f64),
    #[error("rollout.gates.maxP99Ratio is {0}; it must be between 1 and {MAX_RATIO}")]
    Ratio(f64),
    #[error("rollout.{0} is {1}; it may be at most {2}")]
    TooLarge(String, String, String),
}

/// The largest values a plan may hold: beyond them a plan says nothing a smaller one would
/// not, and every sum and product the gates make stays in range.
const MAX_DURATION: Duration = Duration::from_hours(24 * 30);
const MAX_SLACK: Duration = Duration::from_hours(1);
const MAX_RATIO: f64 = 100.0;
const MAX_COUNT: u64 = 10_000_000;

impl Rollout {
    /// Whether a rollout could follow this plan.
    pub fn check(&self) -> Result<(), PlanError> {
        if self.steps.is_empty() {
            return Err(PlanError::NoSteps);
        }
        let mut share: Option<u8> = None;
        for (i, step) in self.steps.iter().enumerate() {
            match step {
                Step::Shadow(_) if share.is_some() => return Err(PlanError::ShadowAfterCanary(i)),
                Step::Canary(Canary { percent, .. }) => {
                    if let Some(before) = share
                        && percent.get() < before
                    {
                        return Err(PlanError::Shrinking(i, percent.get(), before));
                    }
                    share = Some(percent.get());
                }
                Step::Shadow(_) | Step::Pause {} => {}
            }
        }
        let gates = &self.gates;
        for (name, value) in [
            ("minAgreement", gates.min_agreement),
            ("maxErrorRateIncrease", gates.max_error_rate_increase),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(PlanError::Fraction(name, value));
            }
        }
        if !(1.0..=MAX_RATIO).contains(&gates.max_p99_ratio) {
            return Err(PlanError::Ratio(gates.max_p99_ratio));
        }
        let too_large =
            |field: String, value: String, max: String| Err(PlanError::TooLarge(field, value, max));
        if gates.p99_slack > MAX_SLACK {
            return too_large(
                "gates.p99Slack".into(),
                format!("{:?}", gates.p99_slack),
                format!("{MAX_SLACK:?}"),
            );
        }
        if gates.min_sample > MAX_COUNT {
            return too_large(
                "gates.minSample".into(),
                gates.min_sample.to_string(),
                MAX_COUNT.to_string(),
            );
        }
        for (i, hold) in self
            .steps
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((i, s.hold()?)))
        {
            if hold.duration > MAX_DURATION {
                return too_large(
                    format!("steps[{i}].duration"),
                    format!("{:?}", hold.duration),
                    format!("{MAX_DURATION:?}"),
                );
            }
            if let Some(count) = hold.min_reconciles.filter(|c| *c > MAX_COUNT) {
                return too_large(
                    format!("steps[{i}].minReconciles"),
                    count.to_string(),
                    MAX_COUNT.to_string(),
                );
            }
        }
        Ok(())
    }

    /// The minimum count of the new version's reconciles in step `step`.
    #[must_use]
    pub fn min_reconciles(&self, step: usize) -> u64 {
        self.steps
            .get(step)
            .and_then(Step::hold)
            .and_then(|h| h.min_reconciles)
            .unwrap_or(self.gates.min_sample)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(yaml: &str) -> Rollout {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn an_empty_plan_takes_the_default_steps_and_gates() {
        let rollout = plan("{}");
        assert_eq!(rollout.steps, default_steps());
        assert_eq!(rollout.gates, Gates::default());
        assert_eq!(rollout.check(), Ok(()));
        assert_eq!(rollout.min_reconciles(0), 50);
    }

    #[test]
    fn steps_read_as_written() {
        let rollout = plan(
            "steps:\n\
             - shadow: {duration: 2m, minReconciles: 10}\n\
             - canary: {percent: 25}\n\
             - pause: {}\n\
             gates: {minSample: 7, maxP99Ratio: 2}",
        );
        assert_eq!(
            rollout.steps,
            vec![
                Step::Shadow(Hold {
                    duration: Duration::from_mins(2),
                    min_reconciles: Some(10)
                }),
                Step::Canary(Canary {
                    percent: Percent(25),
                    duration: DEFAULT_STEP,
                    min_reconciles: None
                }),
                Step::Pause {},
            ]
        );
        assert_eq!(rollout.gates.min_sample, 7);
        assert!((rollout.gates.max_p99_ratio - 2.0).abs() < f64::EPSILON);
        assert_eq!(rollout.min_reconciles(0), 10);
        assert_eq!(rollout.min_reconciles(1), 7);
        assert_eq!(rollout.check(), Ok(()));
    }

    #[test]
    fn a_share_outside_one_to_ninety_nine_is_refused_by_name() {
        for percent in [0, 100, 250] {
            let refused = serde_yaml::from_str::<Rollout>(&format!(
                "steps: [{{canary: {{percent: {percent}}}}}]"
            ))
            .unwrap_err()
            .to_string();
            assert!(refused.contains("between 1 and 99"), "{refused}");
        }
    }

    #[test]
    fn unknown_fields_and_steps_are_refused() {
        for yaml in [
            "steps: [{shadow: {duraton: 1m}}]",
            "steps: [{blue-green: {}}]",
            "steps: [{shadow: {}, pause: {}}]",
            "steps: [{}]",
            "gates: {minAgreemnt: 1}",
        ] {
            assert!(serde_yaml::from_str::<Rollout>(yaml).is_err(), "{yaml}");
        }
    }

    #[test]
    fn plans_a_rollout_cannot_follow_are_refused() {
        for (yaml, want) in [
            ("steps: []", PlanError::NoSteps),
            (
                "steps: [{canary: {percent: 50}}, {canary: {percent: 10}}]",
                PlanError::Shrinking(1, 10, 50),
            ),
            (
                "steps: [{canary: {percent: 10}}, {shadow: {}}]",
                PlanError::ShadowAfterCanary(1),
            ),
            (
                "gates: {minAgreement: 1.5}",
                PlanError::Fraction("minAgreement", 1.5),
            ),
            (
                "gates: {maxErrorRateIncrease: -0.1}",
                PlanError::Fraction("maxErrorRateIncrease", -0.1),
            ),
            ("gates: {maxP99Ratio: 0.5}", PlanError::Ratio(0.5)),
            ("gates: {maxP99Ratio: 1e300}", PlanError::Ratio(1e300)),
            (
                "gates: {p99Slack: 1000000h}",
                PlanError::TooLarge(
                    "gates.p99Slack".into(),
                    format!("{:?}", Duration::from_hours(1_000_000)),
                    "3600s".into(),
                ),
            ),
            (
                "steps: [{shadow: {duration: 100000h}}]",
                PlanError::TooLarge(
                    "steps[0].duration".into(),
                    format!("{:?}", Duration::from_hours(100_000)),
                    format!("{:?}", Duration::from_hours(720)),
                ),
            ),
            (
                "steps: [{canary: {percent: 5, minReconciles: 18446744073709551615}}]",
                PlanError::TooLarge(
                    "steps[0].minReconciles".into(),
                    "18446744073709551615".into(),
                    "10000000".into(),
                ),
            ),
        ] {
            assert_eq!(plan(yaml).check(), Err(want), "{yaml}");
        }
    }
}
