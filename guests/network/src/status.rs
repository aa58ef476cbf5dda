//! The Network's `status`, and what the guest must do to the backend to reach the spec.
//! Pure functions, tested natively.

use std::net::IpAddr;

use ipnet::IpNet;
use reconciler_guest::conditions::{self, Condition};
use reconciler_guest::network_backend::NetworkStatus as Actual;
use serde::{Deserialize, Serialize};

use crate::spec::ValidSpec;

/// The condition every Network carries.
pub const READY: &str = "Ready";

/// `status` as the CRD defines it. Fields other writers may add are left alone, because the
/// guest writes with a merge patch.
#[derive(Serialize, Deserialize, Default, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interface_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actual_cidr: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actual_gateway: Option<String>,
}

impl Status {
    /// Sets `Ready` (keeping its `lastTransitionTime` unless the status flips) and records
    /// that this generation was looked at.
    pub fn set_ready(&mut self, generation: Option<i64>, ready: bool, reason: &str, message: &str) {
        let mut condition = conditions::new(READY, ready, reason, message);
        condition.observed_generation = generation;
        conditions::set(&mut self.conditions, condition);
        self.observed_generation = generation;
    }

    /// Copies what the backend reports.
    pub fn set_actual(&mut self, actual: &Actual) {
        self.interface_name = Some(actual.interface_name.clone());
        self.actual_cidr = Some(actual.cidr.clone());
        self.actual_gateway = Some(actual.gateway.clone());
    }
}

/// What the backend needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// The network does not exist.
    Create,
    /// The network exists but differs; each entry says how (for the log and the event).
    Correct(Vec<String>),
    /// Nothing to do.
    InSync,
}

/// Compares the desired spec with the backend's state. Addresses are compared as parsed
/// values, so `fd00:0::1` and `fd00::1` are the same; text the backend reports that does not
/// parse counts as drift.
#[must_use]
pub fn plan(desired: &ValidSpec, actual: Option<&Actual>) -> Plan {
    let Some(actual) = actual else {
        return Plan::Create;
    };
    let mut drift = Vec::new();
    if actual.cidr.parse::<IpNet>().ok() != Some(desired.cidr) {
        drift.push(format!(
            "cidr is {} instead of {}",
            actual.cidr, desired.cidr
        ));
    }
    if actual.gateway.parse::<IpAddr>().ok() != Some(desired.gateway) {
        drift.push(format!(
            "gateway is {} instead of {}",
            actual.gateway, desired.gateway
        ));
    }
    if !actual.up {
        drift.push(format!("interface {} is down", actual.interface_name));
    }
    if drift.is_empty() {
        Plan::InSync
    } else {
        Plan::Correct(drift)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::validate;
    use reconciler_guest::serde_json::{self, json};

    fn desired() -> ValidSpec {
        validate(&json!({"cidr": "fd00:10::/64", "gateway": "fd00:10::1"})).unwrap()
    }

    fn actual(cidr: &str, gateway: &str, up: bool) -> Actual {
        Actual {
            id: "ns/a".into(),
            cidr: cidr.into(),
            gateway: gateway.into(),
            interface_name: "rh-1234".into(),
            up,
        }
    }

    #[test]
    fn plan_creates_missing_networks_and_leaves_equal_ones_alone() {
        assert_eq!(plan(&desired(), None), Plan::Create);
        let same_but_spelled_differently = actual("fd00:10:0::/64", "fd00:10:0:0::1", true);
        assert_eq!(
            plan(&desired(), Some(&same_but_spelled_differently)),
            Plan::InSync
        );
    }

    #[test]
    fn plan_lists_every_difference() {
        let Plan::Correct(drift) = plan(&desired(), Some(&actual("fd00:11::/64", "junk", false)))
        else {
            panic!("expected drift");
        };
        assert_eq!(
            drift,
            [
                "cidr is fd00:11::/64 instead of fd00:10::/64",
                "gateway is junk instead of fd00:10::1",
                "interface rh-1234 is down",
            ]
        );
    }

    #[test]
    fn status_round_trips_and_keeps_transition_time_across_repeats() {
        let mut status = Status::default();
        status.set_ready(Some(3), false, "BackendError", "down");
        let first = status.conditions[0].last_transition_time.clone();
        let mut reread: Status =
            serde_json::from_value(serde_json::to_value(&status).unwrap()).unwrap();
        assert_eq!(reread, status);

        reread.set_ready(Some(4), false, "BackendError", "still down");
        assert_eq!(reread.conditions.len(), 1);
        assert_eq!(reread.conditions[0].last_transition_time, first);
        assert_eq!(reread.conditions[0].observed_generation, Some(4));
        assert_eq!(reread.observed_generation, Some(4));
    }

    #[test]
    fn status_serialises_in_the_crd_shape() {
        let mut status = Status::default();
        status.set_actual(&actual("10.0.0.0/24", "10.0.0.1", true));
        assert_eq!(
            serde_json::to_value(&status).unwrap(),
            json!({"interfaceName": "rh-1234", "actualCidr": "10.0.0.0/24", "actualGateway": "10.0.0.1"})
        );
    }
}
