//! `status.conditions` in the `metav1.Condition` shape, kept the way `kubectl wait` and
//! humans expect: one entry per type, `lastTransitionTime` moving only when the status flips.
//!
//! The time comes from `std::time::SystemTime`, i.e. the `wasi:clocks/wall-clock` import the
//! host provides to every guest.

use std::time::{SystemTime, UNIX_EPOCH};

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// Now, truncated to whole seconds as the API server stores it (so a condition read back
/// compares equal to the one written).
#[must_use]
pub fn now() -> Time {
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    Time(Timestamp::from_second(seconds).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// A condition stamped with [`now`]; set `observed_generation` on the result if you track it.
pub fn new(type_: &str, status: bool, reason: &str, message: impl Into<String>) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message: message.into(),
        observed_generation: None,
        last_transition_time: now(),
    }
}

/// The condition of `type_`, if present.
#[must_use]
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of `type_` is present with status `True`.
#[must_use]
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == "True")
}

/// Adds `new`, or updates the condition of the same type in place, like apimachinery's
/// `meta.SetStatusCondition`: `lastTransitionTime` is taken from `new` only when the status
/// changes; reason, message and observed generation always follow `new`.
///
/// Returns whether anything changed, so a guest can skip a status write (and an event) when
/// nothing did.
pub fn set(conditions: &mut Vec<Condition>, new: Condition) -> bool {
    let Some(existing) = conditions.iter_mut().find(|c| c.type_ == new.type_) else {
        conditions.push(new);
        return true;
    };
    let mut changed = false;
    if existing.status != new.status {
        existing.status = new.status;
        existing.last_transition_time = new.last_transition_time;
        changed = true;
    }
    if existing.reason != new.reason {
        existing.reason = new.reason;
        changed = true;
    }
    if existing.message != new.message {
        existing.message = new.message;
        changed = true;
    }
    if existing.observed_generation != new.observed_generation {
        existing.observed_generation = new.observed_generation;
        changed = true;
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64, mut c: Condition) -> Condition {
        c.last_transition_time = Time(Timestamp::from_second(seconds).unwrap());
        c
    }

    #[test]
    fn set_adds_a_missing_type() {
        let mut conds = Vec::new();
        assert!(set(&mut conds, new("Ready", true, "Synced", "ok")));
        assert!(is_true(&conds, "Ready"));
        assert!(!is_true(&conds, "Degraded"));
    }

    #[test]
    fn set_keeps_transition_time_while_status_is_unchanged() {
        let mut conds = vec![at(100, new("Ready", false, "BackendError", "down"))];
        let changed = set(
            &mut conds,
            at(200, new("Ready", false, "BackendError", "still down")),
        );
        assert!(changed, "the message changed");
        assert_eq!(
            conds[0].last_transition_time,
            Time(Timestamp::from_second(100).unwrap())
        );
        assert_eq!(conds[0].message, "still down");
        assert_eq!(conds.len(), 1);
    }

    #[test]
    fn set_moves_transition_time_when_status_flips() {
        let mut conds = vec![at(100, new("Ready", false, "BackendError", "down"))];
        assert!(set(&mut conds, at(200, new("Ready", true, "Synced", "up"))));
        assert_eq!(
            conds[0].last_transition_time,
            Time(Timestamp::from_second(200).unwrap())
        );
        assert_eq!(
            (conds[0].status.as_str(), conds[0].reason.as_str()),
            ("True", "Synced")
        );
    }

    #[test]
    fn set_reports_no_change_for_an_identical_condition() {
        let mut conds = vec![at(100, new("Ready", true, "Synced", "up"))];
        assert!(!set(
            &mut conds,
            at(300, new("Ready", true, "Synced", "up"))
        ));
        assert_eq!(
            conds[0].last_transition_time,
            Time(Timestamp::from_second(100).unwrap())
        );
    }

    #[test]
    fn now_round_trips_through_json() {
        let c = new("Ready", true, "Synced", "up");
        let back: Condition = serde_json::from_value(serde_json::to_value(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }
}
