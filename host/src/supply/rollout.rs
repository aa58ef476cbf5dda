//! A rollout in flight: which version reconciles which key, what each version showed in the
//! current step, and what the plan's gates make of it.
//!
//! Everything here is a pure function of the plan, the measurements and the clock, so the
//! decisions are tested without a cluster; the state a rollout must survive a restart or a
//! failover with ([`RolloutStatus`]) is what goes into the Reconciler's status.

// The decisions are tested on their own; the guest set and the controllers take them up next
// (issue 56), and until then nothing outside the tests calls them.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::cluster::shard_ranges::fnv1a64;
use crate::config::{Canary, Rollout, Step};

/// Durations kept per version and window for the p99: a window's last this many reconciles.
const DURATIONS: usize = 4096;
/// Reconcile times each version needs in a window before its p99 is compared: below 100 the
/// nearest-rank 99th percentile is the slowest one.
const P99_SAMPLES: usize = 100;
/// Differing paths kept as evidence per window (the most frequent are shown).
const EVIDENCE: usize = 64;
/// Points of a key's place on the share line: a canary of 1 % holds 100 of them.
const POINTS: u32 = 10_000;
/// Keys followed per version and window for the per-key rates; keys beyond are not followed
/// (the rates then stand for the first this many keys of the step).
const KEYS: usize = 65_536;

/// Who reconciles the keys while a rollout is at a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Share {
    /// The old version reconciles every key; the new one runs on each in shadow.
    Shadow,
    /// The new version reconciles the keys whose [`point`] is below `percent`; the old the rest.
    Canary(u8),
    /// The new version reconciles every key: promoted.
    New,
    /// The old version reconciles every key and the new one does not run: before the first
    /// step, or rolled back.
    Old,
}

impl Share {
    /// Whether the new version reconciles this key (actively, not in shadow).
    pub(crate) fn new_version_holds(self, namespace: Option<&str>, name: &str) -> bool {
        match self {
            Self::Shadow | Self::Old => false,
            Self::New => true,
            Self::Canary(percent) => point(namespace, name) < u32::from(percent) * (POINTS / 100),
        }
    }

    /// Whether the new version also runs, in shadow, on keys the old one reconciles.
    pub(crate) fn shadows(self) -> bool {
        self == Self::Shadow
    }
}

impl fmt::Display for Share {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Shadow => f.write_str("shadow"),
            Self::Canary(percent) => write!(f, "{percent}%"),
            Self::New => f.write_str("100%"),
            Self::Old => f.write_str("0%"),
        }
    }
}

/// Where `namespace/name` falls on the share line, 0 to 9,999. Names, not uids: a key keeps its
/// side when its object is deleted and created again, and the ring's slots (a hash of the uid)
/// are independent of it, so a reshard moves no key across versions.
pub(crate) fn point(namespace: Option<&str>, name: &str) -> u32 {
    let key = format!("{}/{name}", namespace.unwrap_or_default());
    // The hash scaled onto 0..POINTS by its high bits: every point equally likely.
    let scaled = (u128::from(spread(fnv1a64(key.as_bytes()))) * u128::from(POINTS)) >> 64;
    u32::try_from(scaled).unwrap_or(POINTS - 1)
}

/// A key's identity in a window: its hash, spread (collisions among 65,536 keys in 2^64 are
/// negligible).
pub(crate) fn key_id(namespace: Option<&str>, name: &str) -> u64 {
    let key = format!("{}/{name}", namespace.unwrap_or_default());
    spread(fnv1a64(key.as_bytes()))
}

/// The 64-bit finaliser of murmur3: FNV-1a leaves its high bits barely touched by the last
/// bytes of similar names (`w-00001`, `w-00002`), so shares read off them came out 15 % wide.
fn spread(mut hash: u64) -> u64 {
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^ (hash >> 33)
}

/// How one reconcile of a version ended, as the gates count it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// The key ([`key_id`]): the gates judge keys, so a version that requeues some keys often
    /// cannot dilute its failures on others.
    pub key: u64,
    pub took: Duration,
    /// It did not succeed: an error of any kind (transient ones too: a version that only
    /// ever asks for a retry reconciles nothing), a trap, the deadline, the memory cap.
    pub failed: bool,
    /// In shadow: the paths its writes would change (empty: it agrees; a shadow run that
    /// failed before its verdict differs by `(no verdict)`). `None` when it ran actively.
    pub differing: Option<Vec<String>>,
}

/// What a shadow run that ended without a verdict counts as: a difference.
pub(crate) const NO_VERDICT: &str = "(no verdict: the reconcile failed)";

/// What one version showed in the current step.
#[derive(Debug, Clone, Default)]
pub(crate) struct Window {
    reconciles: u64,
    errors: u64,
    compared: u64,
    agreed: u64,
    /// Each key's last outcome in the window, and whether a shadow run of it ever differed.
    keys: std::collections::HashMap<u64, KeyState>,
    /// Reconcile times of active runs only: a shadow run reads the live state to compare, so
    /// its time says nothing of the version's.
    durations: Vec<Duration>,
    next: usize,
    evidence: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Copy, Default)]
struct KeyState {
    failed: bool,
    compared: bool,
    differed: bool,
}

impl Window {
    pub(crate) fn record(&mut self, outcome: &Outcome) {
        self.reconciles += 1;
        self.errors += u64::from(outcome.failed);
        let followed = self.keys.len() < KEYS || self.keys.contains_key(&outcome.key);
        if followed {
            let key = self.keys.entry(outcome.key).or_default();
            key.failed = outcome.failed;
            if let Some(differing) = &outcome.differing {
                key.compared = true;
                key.differed |= !differing.is_empty();
            }
        }
        let Some(differing) = &outcome.differing else {
            if self.durations.len() < DURATIONS {
                self.durations.push(outcome.took);
            } else {
                self.durations[self.next] = outcome.took;
                self.next = (self.next + 1) % DURATIONS;
            }
            return;
        };
        self.compared += 1;
        if differing.is_empty() {
            self.agreed += 1;
        }
        for path in differing {
            if let Some(count) = self.evidence.get_mut(path) {
                *count += 1;
            } else if self.evidence.len() < EVIDENCE {
                self.evidence.insert(path.clone(), 1);
            }
        }
    }

    /// Keys whose last reconcile in the window failed, of the keys reconciled.
    fn failed_keys(&self) -> (u64, u64) {
        let failed = self.keys.values().filter(|k| k.failed).count();
        (failed as u64, self.keys.len() as u64)
    }

    /// Keys whose every shadow run agreed, of the keys compared.
    fn agreeing_keys(&self) -> (u64, u64) {
        let compared = self.keys.values().filter(|k| k.compared);
        let (mut agreed, mut all) = (0, 0);
        for key in compared {
            all += 1;
            agreed += u64::from(!key.differed);
        }
        (agreed, all)
    }

    fn error_rate(&self) -> f64 {
        ratio(self.failed_keys(), 0.0)
    }

    fn agreement(&self) -> f64 {
        ratio(self.agreeing_keys(), 1.0)
    }

    /// The 99th percentile of the kept durations (nearest rank).
    fn p99(&self) -> Option<Duration> {
        if self.durations.is_empty() {
            return None;
        }
        let mut sorted = self.durations.clone();
        sorted.sort_unstable();
        let rank = (sorted.len() * 99).div_ceil(100).max(1);
        Some(sorted[rank - 1])
    }

    /// The differing paths, most frequent first, with their counts.
    fn evidence(&self) -> Vec<String> {
        let mut paths: Vec<(&String, &u64)> = self.evidence.iter().collect();
        paths.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
        paths
            .into_iter()
            .take(8)
            .map(|(path, count)| format!("{path} ({count})"))
            .collect()
    }
}

/// The one-sided 95 % Wilson score bounds (low, high) of the proportion `part / whole`; (0, 0)
/// when nothing was counted. Written out here: two lines of arithmetic, no crate needed.
#[allow(clippy::cast_precision_loss)] // counts far below 2^52
fn wilson((part, whole): (u64, u64)) -> (f64, f64) {
    const Z: f64 = 1.645;
    if whole == 0 {
        return (0.0, 0.0);
    }
    let (p, n) = (part as f64 / whole as f64, whole as f64);
    let z2 = Z * Z;
    let center = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let margin = Z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / (1.0 + z2 / n);
    ((center - margin).max(0.0), (center + margin).min(1.0))
}

/// `part / whole`, or `empty` when nothing was counted.
#[allow(clippy::cast_precision_loss)] // counts far below 2^52
fn ratio((part, whole): (u64, u64), empty: f64) -> f64 {
    if whole == 0 {
        empty
    } else {
        part as f64 / whole as f64
    }
}

/// What the plan makes of a step so far.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Verdict {
    /// Stay at this step, for the reason given.
    Wait(Waiting),
    /// The step is done and every gate held: on to the next step (or the promotion).
    Next,
    /// A gate failed: roll back.
    Fail(GateFailure),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Waiting {
    /// The step's duration has this much left.
    Time(Duration),
    /// A version has fewer reconciles in the step than it needs.
    Sample {
        version: &'static str,
        has: u64,
        needs: u64,
    },
    /// A pause: a person promotes or aborts.
    Person,
}

impl fmt::Display for Waiting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Whole seconds: the status is read by people, and rewritten at most on a move.
            Self::Time(left) => write!(
                f,
                "{} left in the step",
                humantime::format_duration(Duration::from_secs(left.as_secs() + 1))
            ),
            Self::Sample {
                version,
                has,
                needs,
            } => write!(
                f,
                "the {version} version has {has} of the {needs} reconciles the step needs"
            ),
            Self::Person => f.write_str("paused until a person promotes or aborts"),
        }
    }
}

/// A gate that failed, with the numbers it judged.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum GateFailure {
    Agreement {
        agreed: u64,
        compared: u64,
        min: f64,
        evidence: Vec<String>,
    },
    ErrorRate {
        new: (u64, u64),
        old: (u64, u64),
        max_increase: f64,
    },
    P99 {
        new: Duration,
        old: Duration,
        limit: Duration,
    },
}

impl GateFailure {
    /// The gate's name, for a metric label and the status.
    pub(crate) fn gate(&self) -> &'static str {
        match self {
            Self::Agreement { .. } => "agreement",
            Self::ErrorRate { .. } => "errorRate",
            Self::P99 { .. } => "p99",
        }
    }
}

impl fmt::Display for GateFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Agreement {
                agreed,
                compared,
                min,
                evidence,
            } => {
                write!(
                    f,
                    "agreement: {agreed} of {compared} compared keys agree, below {min}"
                )?;
                if !evidence.is_empty() {
                    write!(f, "; differing: {}", evidence.join(", "))?;
                }
                Ok(())
            }
            Self::ErrorRate {
                new,
                old,
                max_increase,
            } => write!(
                f,
                "errorRate: the new version failed on {} of {} keys, the old one on {} of {}: more than {max_increase} above, at 95 % confidence",
                new.0, new.1, old.0, old.1
            ),
            Self::P99 { new, old, limit } => write!(
                f,
                "p99: the new version's p99 reconcile time is {new:?}, the old one's {old:?}; the limit is {limit:?}"
            ),
        }
    }
}

/// Judges step `step` of `plan` after `elapsed` in it, from the two versions' windows.
/// The gates are judged as soon as both versions have the plan's minimum sample, so a failing
/// version is rolled back without waiting out the step; the step ends when its duration is
/// over, the new version has its minimum count of reconciles, and every gate held.
#[cfg(test)]
pub(crate) fn judge(
    plan: &Rollout,
    step: usize,
    elapsed: Duration,
    new: &Window,
    old: &Window,
) -> Verdict {
    judge_holding(plan, step, elapsed, (new, old), Holds::BOTH)
}

/// Which sides of the share hold at least one object now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Holds {
    pub new: bool,
    pub old: bool,
}

impl Holds {
    pub(crate) const BOTH: Self = Self {
        new: true,
        old: true,
    };
}

/// [`judge`], where a side that holds no object needs no sample: a canary of 80 % of twelve
/// keys that all fall on the new side would otherwise wait for the old version for ever.
pub(crate) fn judge_holding(
    plan: &Rollout,
    step: usize,
    elapsed: Duration,
    (new, old): (&Window, &Window),
    holds: Holds,
) -> Verdict {
    let gates = &plan.gates;
    let enough = |window: &Window, held: bool| !held || window.reconciles >= gates.min_sample;
    let sampled = enough(new, holds.new) && enough(old, holds.old);
    if sampled && let Some(failure) = gates_failed(plan, new, old) {
        return Verdict::Fail(failure);
    }
    let Some(hold) = plan.steps.get(step).and_then(Step::hold) else {
        return Verdict::Wait(Waiting::Person);
    };
    if let Some(left) = hold.duration.checked_sub(elapsed)
        && !left.is_zero()
    {
        return Verdict::Wait(Waiting::Time(left));
    }
    let needs = plan.min_reconciles(step);
    if holds.new && new.reconciles < needs {
        return Verdict::Wait(Waiting::Sample {
            version: "new",
            has: new.reconciles,
            needs,
        });
    }
    if !sampled {
        let (version, window) = if enough(new, holds.new) {
            ("old", old)
        } else {
            ("new", new)
        };
        return Verdict::Wait(Waiting::Sample {
            version,
            has: window.reconciles,
            needs: gates.min_sample,
        });
    }
    Verdict::Next
}

fn gates_failed(plan: &Rollout, new: &Window, old: &Window) -> Option<GateFailure> {
    let gates = &plan.gates;
    if new.compared >= gates.min_sample && new.agreement() < gates.min_agreement {
        let (agreed, compared) = new.agreeing_keys();
        return Some(GateFailure::Agreement {
            agreed,
            compared,
            min: gates.min_agreement,
            evidence: new.evidence(),
        });
    }
    // Judged with the samples' uncertainty: the new version fails only when even the low end
    // of its failure rate is above the high end of the old one's (plus the allowed increase),
    // so a few keys' noise that both versions share (a trap, a conflict) rolls nothing back.
    let (new_low, _) = wilson(new.failed_keys());
    let (_, old_high) = wilson(old.failed_keys());
    if new_low > old_high + gates.max_error_rate_increase {
        return Some(GateFailure::ErrorRate {
            new: new.failed_keys(),
            old: old.failed_keys(),
            max_increase: gates.max_error_rate_increase,
        });
    }
    // Only where the new version ran actively (in shadow it has no reconcile times), and on
    // enough of them that the 99th is not simply the slowest.
    let timed = new.durations.len().min(old.durations.len()) >= P99_SAMPLES;
    if timed && let (Some(new_p99), Some(old_p99)) = (new.p99(), old.p99()) {
        let scaled = Duration::try_from_secs_f64(old_p99.as_secs_f64() * gates.max_p99_ratio)
            .unwrap_or(Duration::MAX);
        let limit = scaled.max(old_p99.saturating_add(gates.p99_slack));
        if new_p99 > limit {
            return Some(GateFailure::P99 {
                new: new_p99,
                old: old_p99,
                limit,
            });
        }
    }
    None
}

/// Where a rollout stands; kept in the Reconciler's status, so a restart or a failover resumes
/// at the same step with the same share.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RolloutStatus {
    /// The digest of the version being replaced.
    pub from: String,
    /// The digest of the version rolling out.
    pub to: String,
    /// The index of the current step in the plan's `steps`.
    pub step: usize,
    /// When the current step began (RFC 3339).
    pub step_started: String,
    /// When this rollout began (RFC 3339): a person's ask names it, so an ask left in place
    /// never acts on a later rollout of the same version.
    #[serde(default)]
    pub began: String,
    pub phase: Phase,
    /// Why it waits, or which gate failed with its numbers.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The Reconciler's `metadata.generation` it runs under (none for a directory guest): a
    /// status of another spec is never resumed nor followed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Phase {
    /// Walking the steps.
    Progressing,
    /// Stopped at the current share by a person; gates are still judged.
    Paused,
    /// The new version took every key.
    Promoted,
    /// A gate failed: the old version took every key back; `to` is not tried again until the
    /// spec changes.
    RolledBack,
    /// A person aborted: as rolled back.
    Aborted,
}

/// What changed when a rollout moved, for the event, the log and the metrics.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Moved {
    pub from: Share,
    pub to: Share,
    pub phase: Phase,
    /// The gate that failed, when a gate rolled it back.
    pub gate: Option<&'static str>,
}

impl RolloutStatus {
    /// A rollout from `from` to `to`, at its first step from `now`.
    pub(crate) fn begin(from: String, to: String, now: Timestamp) -> Self {
        Self {
            from,
            to,
            step: 0,
            step_started: now.to_string(),
            began: now.to_string(),
            phase: Phase::Progressing,
            message: String::new(),
            generation: None,
        }
    }

    /// Whether `other` is about the same rollout: the same two versions under the same spec.
    pub(crate) fn same_rollout(&self, other: &Self) -> bool {
        (&self.from, &self.to, self.generation) == (&other.from, &other.to, other.generation)
    }

    /// Whether this status (kept in the object, or from before a controller restarted) can be
    /// taken up by a rollout of the same versions under `plan`: it is in flight at a step the
    /// plan has.
    pub(crate) fn resumable_under(&self, plan: &Rollout) -> bool {
        self.in_flight() && self.step < plan.steps.len()
    }

    /// Takes `recorded` (the object's status, written by the replica that judges) as where
    /// this rollout stands: a replica that does not judge follows it. What moved, if the share
    /// changed or the rollout ended; nothing for a status of another rollout or one that goes
    /// back to an earlier step or a step the plan does not have.
    pub(crate) fn follow(&mut self, plan: &Rollout, recorded: &Self) -> Option<Moved> {
        if !self.in_flight() || !self.same_rollout(recorded) || *self == *recorded {
            return None;
        }
        if recorded.step >= plan.steps.len() || recorded.step < self.step && recorded.in_flight() {
            return None;
        }
        let from = self.share(plan);
        let phase = self.phase;
        *self = recorded.clone();
        let to = self.share(plan);
        (from != to || phase != self.phase).then_some(Moved {
            from,
            to,
            phase: self.phase,
            gate: None,
        })
    }

    /// Who reconciles which key now.
    pub(crate) fn share(&self, plan: &Rollout) -> Share {
        match self.phase {
            Phase::Promoted => Share::New,
            Phase::RolledBack | Phase::Aborted => Share::Old,
            Phase::Progressing | Phase::Paused => share_at(plan, self.step),
        }
    }

    /// How long the current step has run at `now` (zero for a start time that does not read,
    /// so a damaged status restarts the step's clock rather than skipping it).
    pub(crate) fn elapsed(&self, now: Timestamp) -> Duration {
        self.step_started
            .parse::<Timestamp>()
            .ok()
            .and_then(|started| Duration::try_from(now.duration_since(started)).ok())
            .unwrap_or_default()
    }

    /// Whether the rollout still runs the new version beside the old.
    pub(crate) fn in_flight(&self) -> bool {
        matches!(self.phase, Phase::Progressing | Phase::Paused)
    }

    /// Applies a verdict at `now`; what moved, if the share changed or the rollout ended.
    pub(crate) fn apply(
        &mut self,
        plan: &Rollout,
        verdict: Verdict,
        now: Timestamp,
    ) -> Option<Moved> {
        if !self.in_flight() {
            return None;
        }
        match verdict {
            Verdict::Wait(why) => {
                self.message = why.to_string();
                None
            }
            Verdict::Next if self.phase == Phase::Paused => None,
            Verdict::Next => Some(self.step_on(plan, now)),
            Verdict::Fail(failure) => {
                self.message = failure.to_string();
                let mut moved = self.end(plan, Phase::RolledBack);
                moved.gate = Some(failure.gate());
                Some(moved)
            }
        }
    }

    /// A person's `promote`: the next step now, gates or not (a pause ends here).
    pub(crate) fn promote(&mut self, plan: &Rollout, now: Timestamp) -> Option<Moved> {
        if !self.in_flight() {
            return None;
        }
        self.phase = Phase::Progressing;
        "promoted by a person".clone_into(&mut self.message);
        Some(self.step_on(plan, now))
    }

    /// A person's `pause`: the share stays; the gates are still judged.
    pub(crate) fn pause(&mut self) {
        if self.in_flight() {
            self.phase = Phase::Paused;
            "paused by a person".clone_into(&mut self.message);
        }
    }

    /// A person's `abort`: the old version takes every key back.
    pub(crate) fn abort(&mut self, plan: &Rollout) -> Option<Moved> {
        if !self.in_flight() {
            return None;
        }
        "aborted by a person".clone_into(&mut self.message);
        Some(self.end(plan, Phase::Aborted))
    }

    fn step_on(&mut self, plan: &Rollout, now: Timestamp) -> Moved {
        let from = self.share(plan);
        if self.step + 1 >= plan.steps.len() {
            self.phase = Phase::Promoted;
            self.message.clear();
        } else {
            self.step += 1;
            self.step_started = now.to_string();
            // What the new step waits for, until its first verdict says more.
            self.message = match plan.steps[self.step] {
                Step::Pause {} => Waiting::Person.to_string(),
                _ => String::new(),
            };
        }
        let to = self.share(plan);
        Moved {
            from,
            to,
            phase: self.phase,
            gate: None,
        }
    }

    fn end(&mut self, plan: &Rollout, phase: Phase) -> Moved {
        let from = self.share(plan);
        self.phase = phase;
        Moved {
            from,
            to: Share::Old,
            phase,
            gate: None,
        }
    }
}

impl Phase {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Progressing => "Progressing",
            Self::Paused => "Paused",
            Self::Promoted => "Promoted",
            Self::RolledBack => "RolledBack",
            Self::Aborted => "Aborted",
        }
    }
}

impl Share {
    /// The percent of keys the new version reconciles actively (0 in shadow).
    pub(crate) fn percent(self) -> u8 {
        match self {
            Self::Shadow | Self::Old => 0,
            Self::Canary(percent) => percent,
            Self::New => 100,
        }
    }
}

/// What one version showed in the current step, as `/guests` and a Reconciler's status show it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WindowView {
    pub reconciles: u64,
    pub errors: u64,
    pub error_rate: f64,
    /// Shadow runs compared with the live state, and how many agreed.
    #[serde(skip_serializing_if = "is_zero")]
    pub compared: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub agreed: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agreement: Option<f64>,
    /// The p99 reconcile time, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_ms: Option<f64>,
    /// The paths its writes would change, most frequent first, with their counts.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<String>,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's signature
fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Window {
    pub(crate) fn view(&self) -> WindowView {
        WindowView {
            reconciles: self.reconciles,
            errors: self.errors,
            error_rate: self.error_rate(),
            compared: self.compared,
            agreed: self.agreed,
            agreement: (self.compared > 0).then(|| self.agreement()),
            p99_ms: self.p99().map(|d| d.as_secs_f64() * 1000.0),
            evidence: self.evidence(),
        }
    }
}

/// A rollout as `/guests` and a Reconciler's `status.rollout` show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RolloutView {
    #[serde(flatten)]
    pub status: RolloutStatus,
    /// Who reconciles the keys now (`shadow`, `10%`, `100%`, `0%`).
    pub share: String,
    /// The gates' values in the current step (the last step's, once it ended).
    pub gates: Measured,
}

/// The two versions' windows.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Measured {
    pub new: WindowView,
    pub old: WindowView,
}

/// The annotation by which a person promotes, pauses or aborts a Reconciler's rollout:
/// `ACTION DIGEST [STEP] BEGAN`: the digest the rollout brings (`status.rollout.to`), to
/// promote, the step it promotes from (`status.rollout.step`), and when the rollout began
/// (`status.rollout.began`), so that an annotation left in place acts once, and never on a
/// later rollout (`reconciler-host rollout` writes it).
pub(crate) const ASK_ANNOTATION: &str = "reconciler.dev/rollout";

/// What a person asks of a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// The next step now, gates or not.
    Promote,
    /// Stay at the current share until a promote or an abort.
    Pause,
    /// The old version takes every key back.
    Abort,
}

/// A person's ask, as the annotation writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ask {
    pub action: Action,
    /// The version it is about (a digest as the status names it, or a content hash).
    pub to: String,
    /// For a promote: the step it promotes from.
    pub step: Option<usize>,
    /// When the rollout it is about began.
    pub began: String,
}

/// An annotation value that does not read as an ask.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{ASK_ANNOTATION}: {0:?} is not `promote DIGEST STEP BEGAN`, `pause DIGEST BEGAN` or `abort DIGEST BEGAN`"
)]
pub(crate) struct AskError(String);

impl std::str::FromStr for Ask {
    type Err = AskError;

    fn from_str(text: &str) -> Result<Self, AskError> {
        let refused = || AskError(text.chars().take(200).collect());
        let words: Vec<&str> = text.split_whitespace().collect();
        let (action, to, step, began) = match words.as_slice() {
            ["promote", to, step, began] => (
                Action::Promote,
                to,
                Some(step.parse().map_err(|_| refused())?),
                began,
            ),
            ["pause", to, began] => (Action::Pause, to, None, began),
            ["abort", to, began] => (Action::Abort, to, None, began),
            _ => return Err(refused()),
        };
        Ok(Self {
            action,
            to: (*to).to_owned(),
            step,
            began: (*began).to_owned(),
        })
    }
}

impl fmt::Display for Ask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let action = match self.action {
            Action::Promote => "promote",
            Action::Pause => "pause",
            Action::Abort => "abort",
        };
        write!(f, "{action} {}", self.to)?;
        if let Some(step) = self.step {
            write!(f, " {step}")?;
        }
        write!(f, " {}", self.began)
    }
}

impl RolloutStatus {
    /// Applies a person's ask, if it is about this rollout as it stands (its version, and for
    /// a promote its step); what moved.
    pub(crate) fn answer(&mut self, plan: &Rollout, ask: &Ask, now: Timestamp) -> Option<Moved> {
        if !self.in_flight() || ask.to != self.to || ask.began != self.began {
            return None;
        }
        match ask.action {
            Action::Promote if ask.step == Some(self.step) => self.promote(plan, now),
            Action::Pause if self.phase == Phase::Progressing => {
                self.pause();
                None
            }
            Action::Abort => self.abort(plan),
            Action::Promote | Action::Pause => None,
        }
    }
}

/// The share at step `step`: a pause keeps the share of the step before it.
fn share_at(plan: &Rollout, step: usize) -> Share {
    plan.steps
        .iter()
        .take(step + 1)
        .rev()
        .find_map(|step| match step {
            Step::Shadow(_) => Some(Share::Shadow),
            Step::Canary(Canary { percent, .. }) => Some(Share::Canary(percent.get())),
            Step::Pause {} => None,
        })
        .unwrap_or(Share::Old)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(yaml: &str) -> Rollout {
        let plan: Rollout = serde_yaml::from_str(yaml).unwrap();
        plan.check().unwrap();
        plan
    }

    fn window(reconciles: u64, errors: u64, took_ms: u64) -> Window {
        let mut window = Window::default();
        for i in 0..reconciles {
            window.record(&Outcome {
                key: i,
                took: Duration::from_millis(took_ms),
                failed: i < errors,
                differing: None,
            });
        }
        window
    }

    /// `agree` keys whose shadow runs agree, then one key per differing path.
    fn shadowed(agree: u64, differ: &[&str]) -> Window {
        let mut window = Window::default();
        for key in 0..agree {
            window.record(&Outcome {
                key,
                took: Duration::from_millis(2),
                failed: false,
                differing: Some(vec![]),
            });
        }
        for (key, path) in (agree..).zip(differ) {
            window.record(&Outcome {
                key,
                took: Duration::from_millis(2),
                failed: false,
                differing: Some(vec![(*path).to_owned()]),
            });
        }
        window
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    #[test]
    fn a_canary_holds_about_its_share_of_keys_and_the_same_keys_as_it_grows() {
        let keys: Vec<String> = (0..20_000).map(|i| format!("w-{i:05}")).collect();
        let holds = |percent: u8| -> Vec<&String> {
            keys.iter()
                .filter(|k| Share::Canary(percent).new_version_holds(Some("team-a"), k))
                .collect()
        };
        let ten = holds(10);
        let fifty = holds(50);
        assert!((1_800..=2_200).contains(&ten.len()), "{}", ten.len());
        assert!((9_600..=10_400).contains(&fifty.len()), "{}", fifty.len());
        // A key on the new side at 10 % stays there at 50 %: shares grow, keys never flip back.
        assert!(ten.iter().all(|k| fifty.contains(k)));
        // The namespace is part of the key.
        assert_ne!(point(Some("a"), "x"), point(Some("b"), "x"));
        assert_eq!(point(None, "x"), point(Some(""), "x"));
        assert!(!Share::Shadow.new_version_holds(None, "x"));
        assert!(!Share::Old.new_version_holds(None, "x"));
        assert!(Share::New.new_version_holds(None, "x"));
    }

    #[test]
    fn a_good_version_walks_every_step_and_is_promoted() {
        let plan = plan(
            "steps: [{shadow: {duration: 1m}}, {canary: {percent: 10, duration: 1m}}, {canary: {percent: 50, duration: 1m}}]\n\
             gates: {minSample: 20}",
        );
        let mut status = RolloutStatus::begin("sha256:a".into(), "sha256:b".into(), at(0));
        assert_eq!(status.share(&plan), Share::Shadow);
        let mut shares = vec![status.share(&plan)];
        let mut now = 0;
        while status.in_flight() {
            let new = if status.share(&plan) == Share::Shadow {
                shadowed(30, &[])
            } else {
                window(30, 0, 3)
            };
            let verdict = judge(
                &plan,
                status.step,
                status.elapsed(at(now)),
                &new,
                &window(30, 0, 3),
            );
            if let Some(moved) = status.apply(&plan, verdict, at(now)) {
                assert_eq!(moved.from, *shares.last().unwrap());
                shares.push(moved.to);
            }
            now += 30;
            assert!(now < 600, "stuck at {status:?}");
        }
        assert_eq!(
            shares,
            vec![
                Share::Shadow,
                Share::Canary(10),
                Share::Canary(50),
                Share::New
            ]
        );
        assert_eq!(status.phase, Phase::Promoted);
    }

    #[test]
    fn a_step_waits_for_its_time_and_for_both_samples() {
        let plan = plan(
            "steps: [{canary: {percent: 10, duration: 2m, minReconciles: 40}}]\ngates: {minSample: 20}",
        );
        let good = window(50, 0, 3);
        assert_eq!(
            judge(&plan, 0, Duration::from_secs(30), &good, &good),
            Verdict::Wait(Waiting::Time(Duration::from_secs(90)))
        );
        assert_eq!(
            judge(&plan, 0, Duration::from_mins(2), &window(39, 0, 3), &good),
            Verdict::Wait(Waiting::Sample {
                version: "new",
                has: 39,
                needs: 40
            })
        );
        assert_eq!(
            judge(&plan, 0, Duration::from_mins(2), &good, &window(5, 0, 3)),
            Verdict::Wait(Waiting::Sample {
                version: "old",
                has: 5,
                needs: 20
            })
        );
        assert_eq!(
            judge(&plan, 0, Duration::from_mins(2), &good, &good),
            Verdict::Next
        );
    }

    #[test]
    fn disagreement_in_shadow_fails_before_the_step_ends_and_names_the_paths() {
        let plan = plan("gates: {minSample: 20}");
        let new = shadowed(
            18,
            &[
                "status.conditions[Ready].status",
                "status.conditions[Ready].status",
                "spec.replicas",
            ],
        );
        let verdict = judge(&plan, 0, Duration::from_secs(1), &new, &window(21, 0, 2));
        let Verdict::Fail(failure) = verdict else {
            panic!("{verdict:?}")
        };
        assert_eq!(failure.gate(), "agreement");
        let text = failure.to_string();
        assert!(
            text.contains("18 of 21 compared keys agree, below 0.99"),
            "{text}"
        );
        assert!(
            text.contains("status.conditions[Ready].status (2), spec.replicas (1)"),
            "{text}"
        );
        // Below the minimum sample, nothing is judged yet.
        assert!(matches!(
            judge(
                &plan,
                0,
                Duration::from_secs(1),
                &shadowed(5, &["x"]),
                &window(21, 0, 2)
            ),
            Verdict::Wait(Waiting::Time(_))
        ));
    }

    #[test]
    fn errors_above_the_old_versions_rate_fail_the_canary() {
        let plan = plan(
            "steps: [{canary: {percent: 10}}]\ngates: {minSample: 50, maxErrorRateIncrease: 0.05}",
        );
        let old = window(100, 2, 3);
        // 0.06 against 0.02: within 0.05.
        assert!(matches!(
            judge(&plan, 0, Duration::ZERO, &window(50, 3, 3), &old),
            Verdict::Wait(_)
        ));
        // 0.1 against 0.02 on 50 keys: above, but not beyond what 50 keys can tell apart.
        assert!(matches!(
            judge(&plan, 0, Duration::ZERO, &window(50, 5, 3), &old),
            Verdict::Wait(_)
        ));
        // 0.3 against 0.02: beyond, whatever the noise.
        let verdict = judge(&plan, 0, Duration::ZERO, &window(50, 15, 3), &old);
        let Verdict::Fail(failure) = verdict else {
            panic!("{verdict:?}")
        };
        assert_eq!(failure.gate(), "errorRate");
        assert!(
            failure
                .to_string()
                .contains("failed on 15 of 50 keys, the old one on 2 of 100")
        );
    }

    #[test]
    fn a_slower_p99_fails_only_beyond_both_the_ratio_and_the_slack() {
        let plan = plan(
            "steps: [{canary: {percent: 10}}]\ngates: {minSample: 20, maxP99Ratio: 1.5, p99Slack: 5ms}",
        );
        let old = window(100, 0, 2);
        // 6 ms against 2 ms: three times, but within 5 ms of slack.
        assert!(matches!(
            judge(&plan, 0, Duration::ZERO, &window(100, 0, 6), &old),
            Verdict::Wait(_)
        ));
        let verdict = judge(&plan, 0, Duration::ZERO, &window(100, 0, 8), &old);
        assert_eq!(
            verdict,
            Verdict::Fail(GateFailure::P99 {
                new: Duration::from_millis(8),
                old: Duration::from_millis(2),
                limit: Duration::from_millis(7),
            })
        );
        // The p99 is the 99th of 100, not the maximum: one slow reconcile is no regression.
        let mut one_slow = window(99, 0, 2);
        one_slow.record(&Outcome {
            key: 99,
            took: Duration::from_secs(1),
            failed: false,
            differing: None,
        });
        assert_eq!(one_slow.p99(), Some(Duration::from_millis(2)));
    }

    #[test]
    fn a_failed_gate_rolls_back_and_nothing_moves_afterwards() {
        let plan = plan("{}");
        let mut status = RolloutStatus::begin("a".into(), "b".into(), at(0));
        let failure = GateFailure::ErrorRate {
            new: (9, 50),
            old: (0, 50),
            max_increase: 0.01,
        };
        let moved = status.apply(&plan, Verdict::Fail(failure.clone()), at(10));
        assert_eq!(
            moved,
            Some(Moved {
                from: Share::Shadow,
                to: Share::Old,
                phase: Phase::RolledBack,
                gate: Some("errorRate"),
            })
        );
        assert_eq!(status.share(&plan), Share::Old);
        assert_eq!(status.message, failure.to_string());
        assert_eq!(status.apply(&plan, Verdict::Next, at(20)), None);
        assert_eq!(status.promote(&plan, at(20)), None);
        assert_eq!(status.share(&plan), Share::Old);
    }

    #[test]
    fn a_pause_holds_the_share_before_it_until_a_person_promotes() {
        let plan = plan(
            "steps: [{canary: {percent: 20, duration: 1s}}, {pause: {}}]\ngates: {minSample: 1}",
        );
        let mut status = RolloutStatus::begin("a".into(), "b".into(), at(0));
        let good = window(5, 0, 1);
        let verdict = judge(&plan, 0, status.elapsed(at(2)), &good, &good);
        status.apply(&plan, verdict, at(2));
        assert_eq!((status.step, status.share(&plan)), (1, Share::Canary(20)));
        let verdict = judge(&plan, 1, status.elapsed(at(3600)), &good, &good);
        assert_eq!(verdict, Verdict::Wait(Waiting::Person));
        assert_eq!(status.apply(&plan, verdict, at(3600)), None);
        let moved = status.promote(&plan, at(3601)).unwrap();
        assert_eq!((moved.from, moved.to), (Share::Canary(20), Share::New));
        assert_eq!(status.phase, Phase::Promoted);
    }

    #[test]
    fn a_replica_that_does_not_judge_follows_the_recorded_status_of_its_own_rollout_only() {
        let plan = plan(
            "steps: [{shadow: {duration: 1s}}, {canary: {percent: 20, duration: 1s}}, {pause: {}}]",
        );
        let under = |generation| {
            let mut status = RolloutStatus::begin("a".into(), "b".into(), at(0));
            status.generation = Some(generation);
            status
        };
        let mut here = under(3);
        // The judge's status, a step on: taken whole (its step's start and its began too).
        let mut recorded = under(3);
        recorded.began = at(-5).to_string();
        recorded.step = 1;
        recorded.step_started = at(7).to_string();
        let moved = here.follow(&plan, &recorded).expect("a move");
        assert_eq!((moved.from, moved.to), (Share::Shadow, Share::Canary(20)));
        assert_eq!(here, recorded);
        assert_eq!(here.follow(&plan, &recorded), None, "nothing new");
        // Another spec's status, another version's, an earlier step, a step the plan lacks.
        let mut other = recorded.clone();
        other.generation = Some(4);
        other.step = 2;
        assert_eq!(here.follow(&plan, &other), None);
        other.generation = Some(3);
        other.to = "c".into();
        assert_eq!(here.follow(&plan, &other), None);
        let mut back = recorded.clone();
        back.step = 0;
        assert_eq!(here.follow(&plan, &back), None);
        back.step = 3;
        assert_eq!(here.follow(&plan, &back), None);
        assert_eq!(here.step, 1);
        // The judge rolled it back: so does the follower, and nothing moves it after.
        let mut ended = recorded.clone();
        ended.phase = Phase::RolledBack;
        let moved = here.follow(&plan, &ended).expect("the rollback");
        assert_eq!((moved.to, moved.phase), (Share::Old, Phase::RolledBack));
        assert_eq!(here.follow(&plan, &recorded), None);
        assert!(!here.resumable_under(&plan));
        assert!(recorded.resumable_under(&plan));
    }

    #[test]
    fn a_person_pauses_and_aborts_and_a_pause_still_rolls_back_on_a_gate() {
        let plan = plan("{}");
        let mut status = RolloutStatus::begin("a".into(), "b".into(), at(0));
        status.pause();
        assert_eq!(status.phase, Phase::Paused);
        assert_eq!(status.apply(&plan, Verdict::Next, at(1000)), None);
        assert_eq!(status.share(&plan), Share::Shadow);
        let failure = GateFailure::P99 {
            new: Duration::from_secs(1),
            old: Duration::from_millis(1),
            limit: Duration::from_millis(6),
        };
        assert!(
            status
                .apply(&plan, Verdict::Fail(failure), at(1001))
                .is_some()
        );
        assert_eq!(status.phase, Phase::RolledBack);

        let mut status = RolloutStatus::begin("a".into(), "b".into(), at(0));
        let moved = status.abort(&plan).unwrap();
        assert_eq!((moved.to, moved.phase), (Share::Old, Phase::Aborted));
    }

    #[test]
    fn the_status_survives_a_round_trip_and_a_damaged_clock_restarts_the_step() {
        let mut status = RolloutStatus::begin("sha256:a".into(), "sha256:b".into(), at(0));
        status.step = 2;
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["stepStarted"], "2027-01-15T08:00:00Z");
        assert_eq!(json["phase"], "Progressing");
        let back: RolloutStatus = serde_json::from_value(json).unwrap();
        assert_eq!(back, status);
        assert_eq!(back.elapsed(at(90)), Duration::from_secs(90));
        status.step_started = "yesterday".into();
        assert_eq!(status.elapsed(at(90)), Duration::ZERO);
    }

    #[test]
    fn a_persons_ask_acts_once_and_only_on_the_rollout_it_names() {
        let plan = plan(
            "steps: [{canary: {percent: 20, duration: 1h}}, {pause: {}}, {canary: {percent: 50}}]",
        );
        let mut status = RolloutStatus::begin("old".into(), "new".into(), at(0));
        let began = status.began.clone();
        let promote = |step| Ask {
            action: Action::Promote,
            to: "new".into(),
            step: Some(step),
            began: began.clone(),
        };
        // Another version, or another step: nothing.
        let other = Ask {
            to: "other".into(),
            ..promote(0)
        };
        assert_eq!(status.answer(&plan, &other, at(1)), None);
        assert_eq!(status.answer(&plan, &promote(1), at(1)), None);
        // Step 0 promoted: on to the pause, and the same ask left in place does nothing more.
        let moved = status.answer(&plan, &promote(0), at(1)).unwrap();
        assert_eq!(
            (moved.from, moved.to),
            (Share::Canary(20), Share::Canary(20))
        );
        assert_eq!(status.step, 1);
        assert_eq!(status.answer(&plan, &promote(0), at(2)), None);
        // A pause holds the rollout; a promote of the current step goes on.
        let pause = Ask {
            action: Action::Pause,
            to: "new".into(),
            step: None,
            began: began.clone(),
        };
        assert_eq!(status.answer(&plan, &pause, at(3)), None);
        assert_eq!(status.phase, Phase::Paused);
        let moved = status.answer(&plan, &promote(1), at(4)).unwrap();
        assert_eq!(
            (moved.to, status.phase),
            (Share::Canary(50), Phase::Progressing)
        );
        // An abort ends it for good.
        let abort = Ask {
            action: Action::Abort,
            to: "new".into(),
            step: None,
            began: began.clone(),
        };
        // The same abort about another rollout of this version (began another time): nothing.
        let earlier = Ask {
            began: at(-60).to_string(),
            ..abort.clone()
        };
        assert_eq!(status.answer(&plan, &earlier, at(5)), None);
        let moved = status.answer(&plan, &abort, at(5)).unwrap();
        assert_eq!((moved.to, moved.phase), (Share::Old, Phase::Aborted));
        assert_eq!(status.answer(&plan, &promote(2), at(6)), None);
    }

    #[test]
    fn an_ask_reads_as_the_annotation_writes_it() {
        let ask: Ask = "promote sha256:abc 3 2026-12-07T20:00:00Z".parse().unwrap();
        assert_eq!((ask.action, ask.step), (Action::Promote, Some(3)));
        assert_eq!(ask.to_string(), "promote sha256:abc 3 2026-12-07T20:00:00Z");
        for refused in [
            "promote sha256:abc 3",
            "promote sha256:abc",
            "resume sha256:abc t",
            "abort sha256:abc",
            "abort",
            "pause a b c",
            "",
        ] {
            assert!(refused.parse::<Ask>().is_err(), "{refused:?}");
        }
    }

    #[test]
    fn failures_are_judged_per_key_so_requeues_cannot_dilute_them() {
        let plan = plan("steps: [{canary: {percent: 50, duration: 1s}}]\ngates: {minSample: 10}");
        let reconcile = |window: &mut Window, key, failed| {
            window.record(&Outcome {
                key,
                took: Duration::from_millis(2),
                failed,
                differing: None,
            });
        };
        // Eight keys of twenty fail for good; one healthy key requeued ten thousand times.
        let mut new = Window::default();
        for key in 0..20 {
            reconcile(&mut new, key, key < 8);
        }
        for _ in 0..10_000 {
            reconcile(&mut new, 15, false);
        }
        let old = window(20, 0, 2);
        let verdict = judge(&plan, 0, Duration::from_secs(2), &new, &old);
        assert!(
            matches!(
                verdict,
                Verdict::Fail(GateFailure::ErrorRate { new: (8, 20), .. })
            ),
            "{verdict:?}"
        );
        // A key that failed once and then succeeded is not a failed key.
        let mut retried = Window::default();
        for key in 0..20 {
            reconcile(&mut retried, key, true);
            reconcile(&mut retried, key, false);
        }
        assert_eq!(retried.failed_keys(), (0, 20));
    }

    #[test]
    fn a_version_that_only_asks_for_retries_fails_in_shadow_and_shows_no_p99() {
        let plan = plan("steps: [{shadow: {duration: 1s}}]\ngates: {minSample: 10}");
        let mut shadow = Window::default();
        for key in 0..20 {
            // Transient errors, no verdict: failed, and differing by `(no verdict)`.
            shadow.record(&Outcome {
                key,
                took: Duration::from_millis(2),
                failed: true,
                differing: Some(vec![NO_VERDICT.to_owned()]),
            });
        }
        let verdict = judge(&plan, 0, Duration::from_secs(2), &shadow, &window(20, 0, 2));
        assert!(
            matches!(
                verdict,
                Verdict::Fail(GateFailure::Agreement {
                    agreed: 0,
                    compared: 20,
                    ..
                })
            ),
            "{verdict:?}"
        );
        // The shadow runs' times are not the version's: no p99 is judged in shadow.
        assert_eq!(shadow.p99(), None);
    }

    #[test]
    fn a_side_that_holds_no_object_needs_no_sample() {
        let plan = plan("steps: [{canary: {percent: 80, duration: 1s}}]\ngates: {minSample: 5}");
        let (new, none) = (window(12, 0, 2), Window::default());
        let every_key_new = Holds {
            new: true,
            old: false,
        };
        let elapsed = Duration::from_secs(2);
        assert!(matches!(
            judge(&plan, 0, elapsed, &new, &none),
            Verdict::Wait(Waiting::Sample { version: "old", .. })
        ));
        assert_eq!(
            judge_holding(&plan, 0, elapsed, (&new, &none), every_key_new),
            Verdict::Next
        );
        // A side that holds objects still waits for its sample.
        assert!(matches!(
            judge_holding(&plan, 0, elapsed, (&none, &new), every_key_new),
            Verdict::Wait(Waiting::Sample { version: "new", .. })
        ));
    }

    #[test]
    fn the_error_gate_allows_for_the_noise_of_a_small_sample() {
        let (low, high) = wilson((1, 5));
        assert!(low > 0.0 && low < 0.05 && high > 0.5, "({low}, {high})");
        assert_eq!(wilson((0, 0)), (0.0, 0.0));
        let (low, high) = wilson((500, 1000));
        assert!(
            (low - 0.474).abs() < 0.002 && (high - 0.526).abs() < 0.002,
            "({low}, {high})"
        );
        // One key of five failing against none of five: noise both builds share (a trap) is
        // no rollback; five of five against none of five is one.
        let plan = plan("steps: [{canary: {percent: 50, duration: 1s}}]\ngates: {minSample: 5}");
        let elapsed = Duration::from_secs(2);
        assert_eq!(
            judge(&plan, 0, elapsed, &window(5, 1, 2), &window(5, 0, 2)),
            Verdict::Next
        );
        assert!(matches!(
            judge(&plan, 0, elapsed, &window(5, 5, 2), &window(5, 0, 2)),
            Verdict::Fail(GateFailure::ErrorRate { .. })
        ));
    }
}
